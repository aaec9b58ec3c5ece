/* Tests of md_cuda.cu.h's nb section: the MD state, GPU cell lists, the nonbonded rungs, the
 * neighbour search, velocity Verlet, and the RDF's cell-list rung.
 *
 * Host tests (no GPU needed):
 *   - pair_fast_accuracy: the cluster rungs' pair arithmetic (md_cuda_nb_pair_fast with its
 *     fitted Ewald polynomials) against double precision with libm's erfc and exp, 20000 random
 *     pairs (seed 11) for Ewald at tolerances 5e-4 and 1e-5, the reaction field (eps infinite
 *     and 78.3) and a plain cutoff, on the host and (with a GPU) on the device with its MUFU
 *     rsqrt. Tolerance, of the sum of the pair's term magnitudes, 2e-6 (float rounding of a
 *     dozen operations, about 1e-6) plus the fit's error taken at the cutoff, where the scale
 *     qq/r^3 is smallest (the fit is 1.0e-7 of G(0) at tolerance 5e-4, 1.2e-6 at 1e-5: a bound
 *     of 3.5e-5 there, 1.5e-5 measured), and 2e-6 for the default parameters; a plain cutoff's
 *     Coulomb terms exactly qq/r^3 and qq/r.
 *   - cluster_search_on_host: the cluster-pair search (the same __host__ __device__ predicates
 *     the kernel calls: md__cell_key, md__nb_sc_fill, md__nb_sc_reach, md__nb_cand_imask,
 *     md__nb_cand_masks) run on the CPU for water boxes, after moving atoms without a new sort
 *     (the escape path), in a small box (minimum image per pair) and for warps of 8, 16 and 32
 *     lanes: every non-excluded pair with float r^2 < rc^2 must be computed exactly once with
 *     its minimum image, no excluded pair ever, and the kernel's arithmetic on that list must
 *     give the double-precision forces (tolerance below). It also prints the cluster efficiency.
 *   - cluster_grid_rule: md__cell_grid_make's cells and sub-columns for random boxes and
 *     densities (seed 43): cells at least min_cell, the cluster rungs' grid between min(3, that
 *     count) and that count per axis, grown only towards three super-clusters of atoms and to at
 *     most MD__CELL_MAX_GROWTH x min_cell, and the most sub-columns that stay at least the
 *     density's width.
 *   - exclusion_partner_summary: md__nb_sc_fill / md__nb_may_exclude on random partner lists
 *     (near, far, more far ones than MD__NB_FAR): no window holding a partner is ruled out, and
 *     with few far partners none beyond the near slots is let through without one; the exclusion
 *     bits md__nb_excl_bits gives from the summary's copy of the partners (and from the lists,
 *     with more than MD__NB_PLIST pairs) are the bits the partner lists define.
 * GPU tests (SKIP without a GPU, FAIL under MD_REQUIRE_GPU=1):
 *   - state_roundtrip: upload / download are exact, zero zeroes, poll converts.
 *   - exact_rungs_bitwise: MD_NB_GPU_TILES, _FULL_LIST, _HALF_LIST give raw fixed-point forces,
 *     energies and virial bitwise equal to md_nb_compute(MD_NB_CPU_FIXED) on the same floats
 *     (TIP3P water with Ewald, and a chain system with 1-2, 1-3 exclusions and 1-4 pairs).
 *   - cluster_rungs_vs_cpu: MD_NB_GPU_CLUSTER and _CLUSTER_SMEM, warps of 32, 16 and 8 lanes,
 *     against MD_NB_CPU_VERLET (double). Tolerances: per atom |dF| <= 5e-4 max(|F|, F_rms)
 *     (float sums of ~300 terms and the 3e-7 Ewald fit), energies 2e-5 of the sum of the
 *     terms' magnitudes; the exact terms (exclusions, 1-4, self) 1e-9.
 *   - repeatable: every rung twice (and after a re-sort) gives the same bits.
 *   - rebuild_rule: an atom moved by 0.6 buffer/2 triggers no rebuild, by 1.2 buffer/2 one; the
 *     forces after moves without a sort still match the CPU (the escape path).
 *   - capacity_overflow: tiny capacities -> poll names the capacity and md_cuda_nb_plan_grow;
 *     grow; the evaluation then matches the CPU.
 *   - bad_input: cutoff + buffer above half the box (host and device checks), a NaN coordinate
 *     (named by its caller index), a CPU rung, force switch on a cluster rung.
 *   - nve: LJ argon, velocity Verlet on the GPU vs md_dynamics (CPU, double) for 10 steps
 *     (positions within 2e-5 nm, energies 1e-4 relative), then 2000 steps of 4 fs: total energy
 *     drift below 1e-3 kJ/mol per atom (the CPU run in double drifts 2e-5 over the same time).
 *   - rdf_cell_rung: MD_RDF_GPU_CELL counts equal md_rdf_accumulate's exactly (A = B, A != B,
 *     and two frames of different boxes enqueued before one sync).
 * MD_SANITIZE=1 shrinks every system and the NVE run. Seeds: 11, 21, 22, 23, 31, 41, 43. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"
#include <algorithm>
#include <iterator>
#include <vector>

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* ---------------------------------------------------------------- helpers */

/* A TIP3P box of m molecules at 0.997 g/cm^3 (seed). */
static md_status water(md_system *s, md_topology *t, md_lj_table *lj, int m, uint64_t seed) {
    md_water_desc d;
    memset(&d, 0, sizeof d);
    d.molecules = m;
    d.seed = seed;
    return md_build_water_box(s, t, lj, &d);
}

/* Chains of 6 bonded LJ atoms with charges +-0.3 (1-2, 1-3 excluded, 1-4 scaled), one LJ type per
 * position in the chain (6 types, LB rule), on a jittered lattice of spacing 0.39 nm in a cube
 * of edge `edge` (seed). Exercises exclusions that are not water's and more LJ types. */
static md_status chains(md_system *s, md_topology *t, md_lj_table *lj, double edge, uint64_t seed) {
    const int per = 6;
    double sig[6] = {0.30, 0.32, 0.34, 0.31, 0.33, 0.35}, eps[6] = {0.4, 0.5, 0.6, 0.45, 0.55, 0.65};
    int g = (int)(edge / 0.39), nchain = g * g * g / per, n = nchain * per, i, k, *bond;
    md_rng r;
    md_status st;
    if ((st = md_system_alloc(s, n)) != MD_OK) return st;
    md_rng_seed(&r, seed);
    for (i = 0; i < n; i++) {
        const double h = edge / g;
        s->xyzq[i].x = (float)(((i % g) + 0.5) * h + 0.03 * md_rng_normal(&r));
        s->xyzq[i].y = (float)((((i / g) % g) + 0.5) * h + 0.03 * md_rng_normal(&r));
        s->xyzq[i].z = (float)(((i / (g * g)) + 0.5) * h + 0.03 * md_rng_normal(&r));
        s->xyzq[i].w = (i % 2) ? 0.3f : -0.3f;
        s->mass[i] = 12.0f;
        s->type[i] = i % per;
        s->vel[i].x = s->vel[i].y = s->vel[i].z = 0.0f;
    }
    s->box[0] = s->box[1] = s->box[2] = edge;
    bond = (int *)malloc(sizeof(int) * 2 * (size_t)n);
    for (i = 0, k = 0; i < n; i++)
        if (i % per != per - 1) {
            bond[2 * k] = i;
            bond[2 * k + 1] = i + 1;
            k++;
        }
    st = md_topology_from_system(t, s, k, bond);
    free(bond);
    if (st != MD_OK) return st;
    return md_lj_table_create(lj, per, sig, eps, MD_LJ_COMBINE_LB);
}

/* Forces and energies of the pairs within the cutoff (not excluded), in double with libm's erfc,
 * for Ewald + potential-shift LJ: the independent reference of the host search test. */
static void pair_reference(const md_system *s, const md_topology *t, const md_lj_table *lj, const md_nb_params *p,
                           std::vector<double> &f, double *elj, double *ec, long long *npairs) {
    const double rc = p->cutoff, b = p->ewald_beta;
    f.assign(3 * (size_t)s->n, 0.0);
    *elj = *ec = 0.0;
    *npairs = 0;
    for (int i = 0; i < s->n; i++)
        for (int j = i + 1; j < s->n; j++) {
            double d[3], r2 = 0.0, r, c6, c12, ir6, fs;
            const double L[3] = {s->box[0], s->box[1], s->box[2]};
            const double x[3] = {(double)s->xyzq[i].x - s->xyzq[j].x, (double)s->xyzq[i].y - s->xyzq[j].y,
                                 (double)s->xyzq[i].z - s->xyzq[j].z};
            for (int a = 0; a < 3; a++) {
                d[a] = x[a] - L[a] * rint(x[a] / L[a]);
                r2 += d[a] * d[a];
            }
            if (r2 >= rc * rc || md_topology_excluded(t, i, j)) continue;
            (*npairs)++;
            r = sqrt(r2);
            c6 = lj->c6[t->lj_type[i] * lj->ntypes + t->lj_type[j]];
            c12 = lj->c12[t->lj_type[i] * lj->ntypes + t->lj_type[j]];
            ir6 = 1.0 / (r2 * r2 * r2);
            {
                const double qq = MD_COULOMB * (double)s->xyzq[i].w * s->xyzq[j].w;
                *elj += c12 * (ir6 * ir6 - pow(rc, -12.0)) - c6 * (ir6 - pow(rc, -6.0));
                *ec += qq * erfc(b * r) / r;
                fs = (12.0 * c12 * ir6 * ir6 - 6.0 * c6 * ir6) / r2 +
                     qq * (erfc(b * r) / r + 2.0 * b / sqrt(3.14159265358979) * exp(-b * b * r2)) / r2;
            }
            for (int a = 0; a < 3; a++) {
                f[3 * i + a] += fs * d[a];
                f[3 * j + a] -= fs * d[a];
            }
        }
}

/* Largest per-atom force error |dF_i| / max(|F_i|, F_rms) of 3n doubles. */
static double force_error(const double *f, const double *ref, int n, double *rms_out) {
    double rms = 0.0, worst = 0.0;
    for (int i = 0; i < 3 * n; i++) rms += ref[i] * ref[i];
    rms = sqrt(rms / n);
    for (int i = 0; i < n; i++) {
        const double dx = f[3 * i] - ref[3 * i], dy = f[3 * i + 1] - ref[3 * i + 1], dz = f[3 * i + 2] - ref[3 * i + 2];
        const double m = sqrt(ref[3 * i] * ref[3 * i] + ref[3 * i + 1] * ref[3 * i + 1] + ref[3 * i + 2] * ref[3 * i + 2]);
        const double e = sqrt(dx * dx + dy * dy + dz * dz) / (m > rms ? m : rms);
        if (!(e <= worst)) worst = e; /* NaN propagates */
    }
    if (rms_out) *rms_out = rms;
    return worst;
}

/* ---------------------------------------------------------------- host tests */

/* md_cuda_nb_pair_fast against double precision with libm's erfc and exp, for the parameter
 * sets below: on the host (rsqrt = 1 / sqrtf) and, with a GPU, on the device (MUFU rsqrt) for
 * the same pairs. */
#define PAIR_FAST_N 20000
#define PAIR_FAST_SETS 5

struct pair_fast_in {
    float r2, qq, c6s, c12s;
};

__global__ void pair_fast_kernel(md_cuda_nb_fast c, const pair_fast_in *in, int n, float *out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float el, ec;
        const float fs = md_cuda_nb_pair_fast(&c, in[i].r2, md_cuda_rsqrt_mufu(in[i].r2), in[i].qq, in[i].c6s,
                                              in[i].c12s, 1, &el, &ec);
        out[3 * i] = fs;
        out[3 * i + 1] = el;
        out[3 * i + 2] = ec;
    }
}

/* The pair sets: Ewald at the default tolerance (5e-4, beta 2.92 / nm) and at 1e-5 (beta 3.66),
 * reaction field with eps_rf infinite and 78.3, a plain cutoff. */
static void pair_fast_params(int set, md_nb_params *p) {
    memset(p, 0, sizeof *p);
    if (set == 1) p->ewald_tolerance = 1e-5;
    if (set == 2 || set == 3) {
        p->coul = MD_COUL_REACTION_FIELD;
        p->epsilon_rf = set == 2 ? 0.0 : 78.3;
    }
    if (set == 4) p->coul = MD_COUL_CUTOFF;
}

/* The larger of a and b, NaN if either is (fmax, and a running `if (!(x <= worst)) worst = x`,
 * would let a NaN through: fmax drops it, the running test forgets it at the next finite x). */
static double worst_of(double a, double b) { return a != a || b != b ? NAN : (a > b ? a : b); }

static void pair_fast_accuracy(void) {
    static const char *names[PAIR_FAST_SETS] = {"Ewald 5e-4", "Ewald 1e-5", "reaction field (eps inf)",
                                                "reaction field (eps 78.3)", "plain cutoff"};
    std::vector<pair_fast_in> in(PAIR_FAST_N);
    std::vector<double> ref(3 * PAIR_FAST_N), fscale(PAIR_FAST_N), escale(PAIR_FAST_N);
    std::vector<float> dev(3 * PAIR_FAST_N);
    const int gpu = md_cuda_available();
    if (!gpu) printf("  device half not run: %s\n", md_last_error());
    for (int set = 0; set < PAIR_FAST_SETS; set++) {
        md_nb_params p, r;
        md_cuda_nb_fast c;
        md_rng g;
        double worst_f = 0.0, worst_e = 0.0, dworst_f = 0.0, dworst_e = 0.0, krf = 0.0, crf = 0.0, fit, tol_f, tol_e;
        int exact = 1;
        pair_fast_params(set, &p);
        MD_CHECK_OK(md_nb_params_resolve(&p, &r));
        md__nb_fast_make(&r, &c, &fit);
        MD_CHECKF(fit < MD_CUDA_NB_EWALD_MAX_FIT_ERROR, "%s: fit error %.2e", names[set], fit);
        /* 2e-6 of float rounding, plus the fit's error (relative to G(0) = 4 beta^3 / (3 sqrt(pi)) and
         * E(0) = 2 beta / sqrt(pi)) against the smallest scale within the cutoff, qq / rc^3 and qq / rc */
        tol_f = 2e-6 + fit * 4.0 * pow(r.ewald_beta, 3.0) / (3.0 * sqrt(3.14159265358979)) * pow(r.cutoff, 3.0);
        tol_e = 2e-6 + fit * 2.0 * r.ewald_beta / sqrt(3.14159265358979) * r.cutoff;
        if (r.coul == MD_COUL_REACTION_FIELD) {
            const double rc = r.cutoff;
            krf = r.epsilon_rf == 0.0 ? 0.5 / (rc * rc * rc) : (r.epsilon_rf - 1.0) / ((2.0 * r.epsilon_rf + 1.0) * rc * rc * rc);
            crf = 1.0 / rc + krf * rc * rc;
        }
        md_rng_seed(&g, 11);
        for (int i = 0; i < PAIR_FAST_N; i++) {
            const double rr = 0.1 + (r.cutoff - 0.1) * md_rng_uniform(&g), r2 = rr * rr, b = r.ewald_beta;
            const double qi = 2.0 * md_rng_uniform(&g) - 1.0, qj = 2.0 * md_rng_uniform(&g) - 1.0;
            const double c6 = 1e-3 * md_rng_uniform(&g), c12 = 1e-6 * md_rng_uniform(&g), rc = r.cutoff;
            const float qqf = (float)(qi * MD_COULOMB) * (float)qj, r2f = (float)r2;
            const double qq = (double)qqf, r2d = (double)r2f, rd = sqrt(r2d), ir6 = 1.0 / (r2d * r2d * r2d);
            double fc, ecl;
            float el, ec, fs;
            in[i].r2 = r2f;
            in[i].qq = qqf;
            in[i].c6s = 6.0f * (float)c6;
            in[i].c12s = 12.0f * (float)c12;
            if (r.coul == MD_COUL_EWALD) {
                fc = qq * (erfc(b * rd) / rd + 2.0 * b / sqrt(3.14159265358979) * exp(-b * b * r2d)) / r2d;
                ecl = qq * erfc(b * rd) / rd;
            } else {
                fc = qq * (1.0 / (rd * r2d) - 2.0 * krf);
                ecl = qq * (1.0 / rd + krf * r2d - crf);
            }
            ref[3 * i] = (12.0 * c12 * ir6 * ir6 - 6.0 * c6 * ir6) / r2d + fc;
            ref[3 * i + 1] = c12 * (ir6 * ir6 - pow(rc, -12.0)) - c6 * (ir6 - pow(rc, -6.0));
            ref[3 * i + 2] = ecl;
            fscale[i] = fabs(12.0 * c12 * ir6 * ir6 / r2d) + fabs(6.0 * c6 * ir6 / r2d) + fabs(qq / (rd * r2d));
            escale[i] = fabs(c12 * ir6 * ir6) + fabs(c6 * ir6) + fabs(qq / rd);
            fs = md_cuda_nb_pair_fast(&c, r2f, 1.0f / sqrtf(r2f), qqf, in[i].c6s, in[i].c12s, 1, &el, &ec);
            {
                worst_f = worst_of(worst_f, fabs(fs - ref[3 * i]) / fscale[i]);
                worst_e = worst_of(worst_e, worst_of(fabs(el - ref[3 * i + 1]), fabs(ec - ref[3 * i + 2])) / escale[i]);
            }
            if (r.coul == MD_COUL_CUTOFF) { /* no Ewald term: the Coulomb part is qq / r^3 and qq / r in float */
                const float ri = 1.0f / sqrtf(r2f), f0 = md_cuda_nb_pair_fast(&c, r2f, ri, qqf, 0.0f, 0.0f, 1, &el, &ec);
                exact &= f0 == qqf * (ri * (ri * ri)) && ec == qqf * ri;
            }
        }
        if (gpu) {
            pair_fast_in *din = NULL;
            float *dout = NULL;
            MD_CHECK(cudaMalloc((void **)&din, sizeof(pair_fast_in) * PAIR_FAST_N) == cudaSuccess);
            MD_CHECK(cudaMalloc((void **)&dout, sizeof(float) * 3 * PAIR_FAST_N) == cudaSuccess);
            MD_CHECK(md_cuda_poison(dout, 3 * PAIR_FAST_N, 0) == MD_OK);
            MD_CHECK(cudaMemcpy(din, in.data(), sizeof(pair_fast_in) * PAIR_FAST_N, cudaMemcpyHostToDevice) == cudaSuccess);
            pair_fast_kernel<<<(PAIR_FAST_N + 127) / 128, 128>>>(c, din, PAIR_FAST_N, dout);
            MD_CHECK(cudaGetLastError() == cudaSuccess);
            MD_CHECK(cudaMemcpy(dev.data(), dout, sizeof(float) * 3 * PAIR_FAST_N, cudaMemcpyDeviceToHost) == cudaSuccess);
            MD_CHECK(cudaFree(din) == cudaSuccess);
            MD_CHECK(cudaFree(dout) == cudaSuccess);
            for (int i = 0; i < PAIR_FAST_N; i++) {
                /* a NaN (an unwritten, poisoned element) propagates */
                dworst_f = worst_of(dworst_f, fabs(dev[3 * i] - ref[3 * i]) / fscale[i]);
                dworst_e = worst_of(dworst_e, worst_of(fabs(dev[3 * i + 1] - ref[3 * i + 1]),
                                                       fabs(dev[3 * i + 2] - ref[3 * i + 2])) / escale[i]);
            }
        }
        printf("  %-26s fit %.1e; F/r error %.2e, energy error %.2e on the host", names[set], fit, worst_f, worst_e);
        if (gpu) printf("; %.2e, %.2e on the device", dworst_f, dworst_e);
        printf(" (of the terms' magnitudes; tolerances %.1e, %.1e)\n", tol_f, tol_e);
        MD_CHECKF(worst_f < tol_f, "%s: host F/r error %.3e", names[set], worst_f);
        MD_CHECKF(worst_e < tol_e, "%s: host energy error %.3e", names[set], worst_e);
        if (gpu) {
            MD_CHECKF(dworst_f < tol_f, "%s: device F/r error %.3e", names[set], dworst_f);
            MD_CHECKF(dworst_e < tol_e, "%s: device energy error %.3e", names[set], dworst_e);
        }
        if (r.coul == MD_COUL_CUTOFF) MD_CHECKF(exact, "%s: the Coulomb terms are not exactly qq/r^3 and qq/r", names[set]);
        if (set == 0) { /* the default parameters, which every chapter uses: within 2e-6 as before the derived bound */
            MD_CHECKF(worst_f < 2e-6 && worst_e < 2e-6, "%s: host errors %.3e, %.3e above 2e-6", names[set], worst_f, worst_e);
            if (gpu)
                MD_CHECKF(dworst_f < 2e-6 && dworst_e < 2e-6, "%s: device errors %.3e, %.3e above 2e-6", names[set],
                          dworst_f, dworst_e);
        }
    }
}

/* The host run of the cluster search: sort, clusters, boxes, search, the prune of the first
 * evaluation, then the kernel's pair arithmetic on the pruned list. Positions in s (caller
 * order); `move` > 0 moves every atom by up to that much per axis after the sort (seed 21), as
 * between sorts in a run; `move2` > 0 moves them again after the prune (seed 22), as between
 * list builds (keep it below buffer / (2 sqrt 3) so no atom moves more than half the buffer). */
struct host_result {
    long long computed, pruned, in_cutoff, entries, masked, borderline;
    long long candidates, union_pass, union_wrong; /* j-clusters tested; passing the super-cluster box; im changed by it */
    double ferr, eerr, escape;
    int minimg, nsc; /* super-clusters searched with the minimum image, of nsc */
};

static int host_cluster_run(const md_system *s0, const md_topology *t, const md_lj_table *lj, const md_nb_params *pin,
                            int cj, double move, double move2, host_result *res, int check_forces) {
    const int n = s0->n, CI = MD_CUDA_NB_CI, R = CI / cj, S = MD_CUDA_NB_SUPER, W = CI * cj;
    md_nb_params p;
    md_cuda_cell_grid g;
    md_cuda_nb_fast c;
    double fit, rlistd;
    long long cells = 1;
    int d;
    md_nb_params_resolve(pin, &p);
    md__nb_fast_make(&p, &c, &fit);
    rlistd = p.cutoff + p.buffer;
    for (d = 0; d < 3; d++) {
        long long k = (long long)floor(s0->box[d] / rlistd);
        cells *= k < 1 ? 1 : k;
    }
    md__cell_grid_make(s0->box, rlistd, (int)(2 * cells + 64), n, 1, &g);
    /* sort (stable, as CUB's radix sort), permute, wrap */
    std::vector<unsigned> key(n);
    std::vector<int> idx(n), order(n), rank(n);
    std::vector<float4> x(n);
    for (int i = 0; i < n; i++) {
        key[i] = md__cell_key(s0->xyzq[i].x, s0->xyzq[i].y, s0->xyzq[i].z, g, 12);
        idx[i] = i;
    }
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key[a] < key[b]; });
    for (int i = 0; i < n; i++) {
        const md_float4 q = s0->xyzq[idx[i]];
        x[i] = make_float4(md__wrap_f32(q.x, g.box[0], g.inv_box[0]), md__wrap_f32(q.y, g.box[1], g.inv_box[1]),
                           md__wrap_f32(q.z, g.box[2], g.inv_box[2]), q.w);
        order[i] = idx[i];
        rank[idx[i]] = i;
    }
    std::vector<int> cs(g.ncell + 1, 0), ic_start(g.ncell + 1, 0), sc_start(g.ncell + 1, 0);
    for (int i = 0; i < n; i++) cs[(key[idx[i]] >> 12) + 1]++;
    for (int k = 0; k < g.ncell; k++) cs[k + 1] += cs[k];
    for (int k = 0; k < g.ncell; k++) {
        const int nic = (cs[k + 1] - cs[k] + CI - 1) / CI;
        ic_start[k + 1] = ic_start[k] + nic;
        sc_start[k + 1] = sc_start[k] + (nic + S - 1) / S;
    }
    std::vector<int2> ci(ic_start[g.ncell]);
    std::vector<int> ci_cell(ic_start[g.ncell]);
    std::vector<int4> sc(sc_start[g.ncell]);
    for (int k = 0; k < g.ncell; k++) {
        const int na = cs[k + 1] - cs[k], nic = ic_start[k + 1] - ic_start[k];
        for (int q = 0; q < nic; q++) {
            ci[ic_start[k] + q] = make_int2(cs[k] + q * CI, std::min(CI, na - q * CI));
            ci_cell[ic_start[k] + q] = k;
        }
        for (int q = 0; sc_start[k] + q < sc_start[k + 1]; q++)
            sc[sc_start[k] + q] = make_int4(ic_start[k] + q * S, std::min(S, nic - q * S), k, 0);
    }
    /* atoms move after the sort */
    if (move > 0.0) {
        md_rng r;
        md_rng_seed(&r, 21);
        for (int i = 0; i < n; i++) {
            x[i].x += (float)(move * (2.0 * md_rng_uniform(&r) - 1.0));
            x[i].y += (float)(move * (2.0 * md_rng_uniform(&r) - 1.0));
            x[i].z += (float)(move * (2.0 * md_rng_uniform(&r) - 1.0));
        }
    }
    /* boxes and escape, as md__nb_bbox_kernel */
    const int nic = ic_start[g.ncell];
    std::vector<float4> bb(2 * (size_t)nic * R);
    float esc = 0.0f;
    for (int t2 = 0; t2 < nic * R; t2++) {
        const int2 at = ci[t2 / R];
        int jf = at.x + (t2 % R) * cj, jc = std::max(0, std::min(cj, at.y - (t2 % R) * cj));
        const int cc = ci_cell[t2 / R], cc3[3] = {cc % g.dim[0], (cc / g.dim[0]) % g.dim[1], cc / (g.dim[0] * g.dim[1])};
        float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
        for (int a = jf; a < jf + jc; a++) {
            const float xx[3] = {x[a].x, x[a].y, x[a].z};
            for (int k = 0; k < 3; k++) {
                const float cl = (float)cc3[k] * g.cell[k], ch = (float)(cc3[k] + 1) * g.cell[k];
                lo[k] = fminf(lo[k], xx[k]);
                hi[k] = fmaxf(hi[k], xx[k]);
                esc = fmaxf(esc, fmaxf(cl - xx[k], xx[k] - ch));
            }
        }
        bb[2 * t2] = make_float4(lo[0], lo[1], lo[2], (float)jc);
        bb[2 * t2 + 1] = make_float4(hi[0], hi[1], hi[2], 0.0f);
    }
    /* exclusion partners as internal slots, ascending */
    const int stride = MD_CUDA_STRIDE(n);
    int maxex = 1;
    for (int i = 0; i < n; i++) maxex = std::max(maxex, t->excl_start[i + 1] - t->excl_start[i]);
    std::vector<int> exn(n), exl((size_t)maxex * stride);
    for (int i = 0; i < n; i++) {
        std::vector<int> v;
        for (int k = t->excl_start[order[i]]; k < t->excl_start[order[i] + 1]; k++) v.push_back(rank[t->excl[k]]);
        std::sort(v.begin(), v.end());
        exn[i] = (int)v.size();
        for (size_t k = 0; k < v.size(); k++) exl[k * stride + i] = v[k];
    }
    /* the search, as md__nb_search_kernel (in the same order; lanes become a loop) */
    const float rlist = (float)rlistd, reach = rlist * 1.0001f + esc + 1e-4f, rl2 = rlist * rlist * 1.0002f;
    std::vector<int4> entries;
    std::vector<unsigned> masks;
    std::vector<long long> got_pairs;
    res->minimg = 0;
    res->computed = 0;
    res->candidates = res->union_pass = res->union_wrong = 0;
    for (size_t q = 0; q < sc.size(); q++) {
        md__nb_sc_data dd;
        int kmin[3], kmax[3];
        float4 ulo, uhi;
        for (int s2 = 0; s2 < S; s2++) md__nb_sc_fill(&dd, s2, sc[q], ci.data(), bb.data(), exn.data(), exl.data(), stride, cj);
        const int minimg = md__nb_sc_reach(dd, sc[q].y, g, reach, kmin, kmax, &ulo, &uhi);
        res->minimg += minimg;
        for (int kz = kmin[2]; kz <= kmax[2]; kz++)
            for (int ky = kmin[1]; ky <= kmax[1]; ky++)
                for (int kx = kmin[0]; kx <= kmax[0]; kx++) {
                    int sx, sy, sz;
                    const int cell = (md__wrap_cell(kz, g.dim[2], &sz) * g.dim[1] + md__wrap_cell(ky, g.dim[1], &sy)) * g.dim[0] +
                                     md__wrap_cell(kx, g.dim[0], &sx);
                    for (int cjx = ic_start[cell] * R; cjx < ic_start[cell + 1] * R; cjx++) {
                        const int2 at = ci[cjx / R];
                        const int jf = at.x + (cjx % R) * cj, jc = std::min(cj, at.y - (cjx % R) * cj);
                        float4 bl = bb[2 * cjx], bh = bb[2 * cjx + 1];
                        unsigned im, mk[MD_CUDA_NB_SUPER];
                        if (jc <= 0) continue;
                        bl.x += sx * g.box[0];
                        bl.y += sy * g.box[1];
                        bl.z += sz * g.box[2];
                        bh.x += sx * g.box[0];
                        bh.y += sy * g.box[1];
                        bh.z += sz * g.box[2];
                        im = md__nb_cand_imask(dd, sc[q].y, jf, jc, bl, bh, minimg, g, rl2, ulo, uhi);
                        { /* the super-cluster box may only skip j-clusters no i-cluster lists: an unbounded
                           * box never skips */
                            const float4 all_lo = make_float4(-INFINITY, -INFINITY, -INFINITY, 0.0f),
                                         all_hi = make_float4(INFINITY, INFINITY, INFINITY, 0.0f);
                            res->candidates++;
                            res->union_pass += minimg || md__bb_dist2(ulo, uhi, bl, bh, 0, g) < rl2;
                            res->union_wrong += im != md__nb_cand_imask(dd, sc[q].y, jf, jc, bl, bh, minimg, g, rl2, all_lo, all_hi);
                        }
                        if (!im) continue;
                        res->computed += (long long)__builtin_popcount(im) * W;
                        const int any = md__nb_cand_masks(dd, im, jf, jc, exn.data(), exl.data(), stride, cj, mk);
                        const unsigned shift = minimg ? 13u : (unsigned)((sx + 1) + 3 * (sy + 1) + 9 * (sz + 1));
                        entries.push_back(make_int4(jf, (int)(im | (shift << 8) | ((unsigned)minimg << 13) |
                                                              ((unsigned)jc << 14) | (im << 17)),
                                                    any ? (int)(masks.size() / S) : -1, (int)q));
                        if (any)
                            for (int k = 0; k < S; k++) masks.push_back(mk[k]);
                    }
                }
    }
    res->nsc = (int)sc.size();
    res->borderline = 0;
    res->entries = (long long)entries.size();
    res->masked = (long long)masks.size() / S;
    res->escape = esc;
    /* the prune of the first evaluation (md__nb_cluster_item<..., PRUNE = 1>): keep i-cluster s of
     * an entry if a real, unmasked pair is within cutoff + buffer (r^2 as the kernel computes it) */
    res->pruned = 0;
    for (size_t e = 0; e < entries.size(); e++) {
        const unsigned info = (unsigned)entries[e].y, outer = (info >> 17) & 0xff, sh = (info >> 8) & 31, mi = (info >> 13) & 1;
        const int jc = (int)(info >> 14) & 7, jf = entries[e].x;
        unsigned inner = 0;
        for (int s2 = 0; s2 < S; s2++) {
            if (!((outer >> s2) & 1)) continue;
            const int2 at = ci[sc[entries[e].w].x + s2];
            const unsigned em = entries[e].z >= 0 ? masks[(size_t)entries[e].z * S + s2] : 0xffffffffu;
            for (int jj = 0; jj < jc; jj++)
                for (int ii = 0; ii < at.y; ii++) {
                    float4 pi = x[at.x + ii], pj = x[jf + jj];
                    float dx, dy, dz;
                    if (!((em >> (jj * CI + ii)) & 1)) continue;
                    if (!mi) {
                        pj.x += (float)((int)(sh % 3u) - 1) * (float)s0->box[0];
                        pj.y += (float)((int)((sh / 3u) % 3u) - 1) * (float)s0->box[1];
                        pj.z += (float)((int)(sh / 9u) - 1) * (float)s0->box[2];
                    }
                    dx = pi.x - pj.x;
                    dy = pi.y - pj.y;
                    dz = pi.z - pj.z;
                    if (mi) {
                        dx = fmaf(-(float)s0->box[0], rintf(dx * (float)(1.0 / s0->box[0])), dx);
                        dy = fmaf(-(float)s0->box[1], rintf(dy * (float)(1.0 / s0->box[1])), dy);
                        dz = fmaf(-(float)s0->box[2], rintf(dz * (float)(1.0 / s0->box[2])), dz);
                    }
                    if (fmaf(dx, dx, fmaf(dy, dy, dz * dz)) < c.rl2) inner |= 1u << s2;
                }
        }
        entries[e].y = (int)((info & ~0xffu) | inner);
        res->pruned += __builtin_popcount(inner) * W;
    }
    if (move2 > 0.0) {
        md_rng r;
        md_rng_seed(&r, 22);
        for (int i = 0; i < n; i++) {
            x[i].x += (float)(move2 * (2.0 * md_rng_uniform(&r) - 1.0));
            x[i].y += (float)(move2 * (2.0 * md_rng_uniform(&r) - 1.0));
            x[i].z += (float)(move2 * (2.0 * md_rng_uniform(&r) - 1.0));
        }
    }
    /* the kernel's arithmetic on the list: coverage and forces */
    std::vector<double> f(3 * (size_t)n, 0.0);
    double elj = 0.0, ecl = 0.0;
    long long incut = 0;
    const float L[3] = {(float)s0->box[0], (float)s0->box[1], (float)s0->box[2]};
    const float iL[3] = {(float)(1.0 / s0->box[0]), (float)(1.0 / s0->box[1]), (float)(1.0 / s0->box[2])};
    const md_nb_box_f32 mb = md_nb_box_f32_make(s0->box);
    std::vector<float2> ljs((size_t)lj->ntypes * lj->ntypes);
    for (size_t k = 0; k < ljs.size(); k++) ljs[k] = make_float2(6.0f * (float)lj->c6[k], 12.0f * (float)lj->c12[k]);
    for (size_t e = 0; e < entries.size(); e++) {
        const int4 en = entries[e];
        const unsigned info = (unsigned)en.y, imask = info & 0xff, sh = (info >> 8) & 31, mi = (info >> 13) & 1;
        const int jc = (int)(info >> 14) & 7, jf = en.x;
        const int4 scq = sc[en.w];
        for (int s2 = 0; s2 < S; s2++) {
            if (!((imask >> s2) & 1)) continue;
            const int2 at = ci[scq.x + s2];
            for (int jj = 0; jj < cj; jj++)
                for (int ii = 0; ii < CI; ii++) {
                    const unsigned em = en.z >= 0 ? masks[(size_t)en.z * S + s2] : 0xffffffffu;
                    if (jj >= jc || ii >= at.y || !((em >> (jj * CI + ii)) & 1)) continue;
                    const int a = at.x + ii, b = jf + jj;
                    float4 pi = x[a], pj = x[b];
                    float dx, dy, dz, r2, dref[3], r2ref;
                    if (!mi) {
                        pj.x += (float)((int)(sh % 3u) - 1) * L[0];
                        pj.y += (float)((int)((sh / 3u) % 3u) - 1) * L[1];
                        pj.z += (float)((int)(sh / 9u) - 1) * L[2];
                    }
                    dx = pi.x - pj.x;
                    dy = pi.y - pj.y;
                    dz = pi.z - pj.z;
                    if (mi) {
                        dx = fmaf(-L[0], rintf(dx * iL[0]), dx);
                        dy = fmaf(-L[1], rintf(dy * iL[1]), dy);
                        dz = fmaf(-L[2], rintf(dz * iL[2]), dz);
                    }
                    r2 = fmaf(dx, dx, fmaf(dy, dy, dz * dz));
                    r2ref = md_nb_delta_f32(x[a].x, x[a].y, x[a].z, x[b].x, x[b].y, x[b].z, &mb, dref);
                    if ((r2 < c.rc2 || r2ref < c.rc2) && fabsf(r2 - r2ref) > 1e-5f * (r2ref + 0.01f)) {
                        printf("  pair %d-%d: r^2 %g with the entry's image, %g minimum image\n", order[a], order[b], r2, r2ref);
                        return 0;
                    }
                    if (!(r2 < c.rc2)) continue;
                    if (a >= b) {
                        printf("  pair %d-%d computed from the wrong side (a >= b)\n", a, b);
                        return 0;
                    }
                    if (md_topology_excluded(t, order[a], order[b])) {
                        printf("  excluded pair %d-%d computed\n", order[a], order[b]);
                        return 0;
                    }
                    got_pairs.push_back((long long)a * n + b);
                    incut++;
                    if (check_forces) {
                        const float2 l = ljs[t->lj_type[order[a]] * lj->ntypes + t->lj_type[order[b]]];
                        float el, ec;
                        const float fs = md_cuda_nb_pair_fast(&c, r2, 1.0f / sqrtf(r2), pi.w * c.kc * pj.w, l.x, l.y, 1, &el, &ec);
                        elj += el;
                        ecl += ec;
                        f[3 * (size_t)order[a]] += (double)fs * dx;
                        f[3 * (size_t)order[a] + 1] += (double)fs * dy;
                        f[3 * (size_t)order[a] + 2] += (double)fs * dz;
                        f[3 * (size_t)order[b]] -= (double)fs * dx;
                        f[3 * (size_t)order[b] + 1] -= (double)fs * dy;
                        f[3 * (size_t)order[b] + 2] -= (double)fs * dz;
                    }
                }
        }
    }
    res->in_cutoff = incut;
    /* every pair within the cutoff exactly once: the reference set from md.h's Verlet list (radius
     * rc + 0.01 nm, double), filtered by the float rule r^2 < rc^2 of md_nb_delta_f32 */
    {
        md_float4 *xc = (md_float4 *)malloc(sizeof(md_float4) * (size_t)n);
        md_cell_list cl;
        md_verlet_list vl;
        std::vector<long long> want;
        memset(&cl, 0, sizeof cl);
        memset(&vl, 0, sizeof vl);
        for (int i = 0; i < n; i++) xc[order[i]] = {x[i].x, x[i].y, x[i].z, x[i].w};
        if (md_verlet_list_build(&vl, &cl, xc, n, s0->box, p.cutoff + 0.01, 0, t) != MD_OK) {
            printf("  md_verlet_list_build: %s\n", md_last_error());
            free(xc);
            return 0;
        }
        for (int i = 0; i < n; i++)
            for (int m = vl.start[i]; m < vl.start[i + 1]; m++) {
                const int j = vl.j[m], a = std::min(rank[i], rank[j]), b = std::max(rank[i], rank[j]);
                float dd[3];
                if (md_nb_delta_f32(x[a].x, x[a].y, x[a].z, x[b].x, x[b].y, x[b].z, &mb, dd) < c.rc2)
                    want.push_back((long long)a * n + b);
            }
        md_verlet_list_free(&vl);
        md_cell_list_free(&cl);
        free(xc);
        std::sort(want.begin(), want.end());
        std::sort(got_pairs.begin(), got_pairs.end());
        if (want != got_pairs) { /* only pairs at the cutoff itself may differ (image shift vs minimum image rounding) */
            std::vector<long long> diff;
            std::set_symmetric_difference(want.begin(), want.end(), got_pairs.begin(), got_pairs.end(), std::back_inserter(diff));
            for (size_t k = 0; k < diff.size(); k++) {
                const int a = (int)(diff[k] / n), b = (int)(diff[k] % n);
                float dd[3];
                const float r2 = md_nb_delta_f32(x[a].x, x[a].y, x[a].z, x[b].x, x[b].y, x[b].z, &mb, dd);
                const int dup = std::count(got_pairs.begin(), got_pairs.end(), diff[k]) > 1;
                if (dup || fabsf(r2 - c.rc2) > 1e-5f * c.rc2) {
                    printf("  pair %d-%d (caller numbering) at r^2 = %.9g (rc^2 %.9g): %s\n", order[a], order[b], r2, c.rc2,
                           dup ? "computed twice" : "missed or extra");
                    return 0;
                }
            }
            res->borderline = (long long)diff.size();
        }
    }
    res->ferr = res->eerr = 0.0;
    if (check_forces) { /* against double on the moved positions (caller order) */
        md_system m;
        std::vector<double> ref;
        double rlj, rc_, rms;
        long long np;
        if (md_system_alloc(&m, n) != MD_OK) return 0;
        for (int i = 0; i < n; i++) m.xyzq[order[i]] = {x[i].x, x[i].y, x[i].z, x[i].w};
        for (d = 0; d < 3; d++) m.box[d] = s0->box[d];
        pair_reference(&m, t, lj, &p, ref, &rlj, &rc_, &np);
        res->ferr = force_error(f.data(), ref.data(), n, &rms);
        res->eerr = fmax(fabs(elj - rlj), fabs(ecl - rc_)) / (fabs(rlj) + fabs(rc_));
        md_system_free(&m);
        if (llabs(np - incut) > 2 + np / 100000) { /* the reference decides r < rc in double: a few borderline pairs */
            printf("  %lld pairs within the cutoff computed, the double reference has %lld\n", incut, np);
            return 0;
        }
    }
    return 1;
}

static void cluster_search_on_host(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_nb_params p;
    host_result r;
    const int cjs[3] = {4, 2, 1};
    const double half = 0.05 / sqrt(3.0) * 0.999; /* moves after the prune: |d| < buffer / 2 */
    memset(&p, 0, sizeof p);
    /* 1. a water box (3 cells per edge: the minimum-image path), every warp size */
    MD_CHECK_OK(water(&s, &t, &lj, sanitize ? 300 : 900, 22));
    for (int k = 0; k < 3; k++) {
        MD_CHECKF(host_cluster_run(&s, &t, &lj, &p, cjs[k], 0.0, half, &r, 1), "warp %d: the list is wrong", 8 * cjs[k]);
        MD_CHECKF(r.union_wrong == 0, "the super-cluster box changed %lld i-cluster masks", r.union_wrong);
        printf("  %d atoms, warp %2d: %lld entries (%lld masked), pairs in cutoff %lld, computed %lld, after the prune "
               "%lld (efficiency %.3f, %.3f); force error %.2e, energy error %.2e\n",
               s.n, 8 * cjs[k], r.entries, r.masked, r.in_cutoff, r.computed, r.pruned, (double)r.in_cutoff / r.computed,
               (double)r.in_cutoff / r.pruned, r.ferr, r.eerr);
        MD_CHECKF(r.ferr < 5e-4 && r.eerr < 2e-5, "warp %d: force error %.3e, energy error %.3e", 8 * cjs[k], r.ferr, r.eerr);
    }
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    /* 2. a box of 5 cells per edge (image shifts per entry), atoms moved after the sort (escape)
     * and after the prune */
    MD_CHECK_OK(water(&s, &t, &lj, sanitize ? 2200 : 4200, 24));
    MD_CHECKF(host_cluster_run(&s, &t, &lj, &p, 4, 0.028, half, &r, 1), "moved atoms: the list is wrong");
    MD_CHECKF(r.union_wrong == 0, "the super-cluster box changed %lld i-cluster masks", r.union_wrong);
    printf("  %d atoms (edge %.2f nm), moved 0.028 nm per axis after the sort and %.3f after the prune: %d of %d "
           "super-clusters with the minimum image, escape %.4f nm, efficiency %.3f after the prune, force error %.2e\n",
           s.n, s.box[0], half, r.minimg, r.nsc, r.escape, (double)r.in_cutoff / r.pruned, r.ferr);
    MD_CHECK(r.escape > 0.0 && r.ferr < 5e-4);
    MD_CHECKF(sanitize || 2 * r.minimg < r.nsc, "a 5-cell box should use image shifts for most super-clusters");
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    /* 3. a box of 2 cells per edge */
    MD_CHECK_OK(water(&s, &t, &lj, 280, 23));
    MD_CHECKF(host_cluster_run(&s, &t, &lj, &p, 4, 0.02, half, &r, 1), "small box: the list is wrong");
    MD_CHECKF(r.union_wrong == 0, "the super-cluster box changed %lld i-cluster masks", r.union_wrong);
    printf("  small box (%.3f nm): %d of %d super-clusters with the minimum image, force error %.2e\n", s.box[0], r.minimg,
           r.nsc, r.ferr);
    MD_CHECK(r.minimg == r.nsc && r.ferr < 5e-4);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    /* 4. chains: exclusions other than water's, 6 LJ types */
    MD_CHECK_OK(chains(&s, &t, &lj, 3.2, 31));
    MD_CHECKF(host_cluster_run(&s, &t, &lj, &p, 4, 0.01, half, &r, 1), "chains: the list is wrong");
    MD_CHECKF(r.union_wrong == 0, "the super-cluster box changed %lld i-cluster masks", r.union_wrong);
    printf("  chains (%d atoms, 6 types, 1-4 pairs %d): %lld masked entries, force error %.2e\n", s.n, t.npair14, r.masked,
           r.ferr);
    MD_CHECK(r.ferr < 5e-4);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    if (!sanitize) { /* the benchmark box: every pair once, and its efficiency */
        md_water_desc d;
        memset(&d, 0, sizeof d);
        d.molecules = 7856;
        d.edge = 6.2;
        d.seed = 2026;
        MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &d));
        MD_CHECK(host_cluster_run(&s, &t, &lj, &p, 4, 0.0, 0.0, &r, 0));
        printf("  benchmark box %d atoms: %lld entries, %lld pairs in cutoff (%lld at the cutoff decided the other way), "
               "%lld computed, %lld after the prune: cluster efficiency %.3f, %.3f after the prune; %lld candidate "
               "j-clusters, %lld (%.1f%%) within rlist of their super-cluster's box\n",
               s.n, r.entries, r.in_cutoff, r.borderline, r.computed, r.pruned, (double)r.in_cutoff / r.computed,
               (double)r.in_cutoff / r.pruned, r.candidates, r.union_pass, 100.0 * r.union_pass / r.candidates);
        MD_CHECKF(r.union_wrong == 0, "the super-cluster box changed %lld i-cluster masks", r.union_wrong);
        md_system_free(&s);
        md_topology_free(&t);
        md_lj_table_free(&lj);
    }
}



/* md__cell_grid_make on random boxes and densities (seed 43): every cell at least min_cell; the
 * cluster rungs' grid (clustered 1) never has more cells than min_cell allows nor fewer than
 * min(3, what min_cell allows) along an axis, and its cells grow only when three super-clusters
 * of atoms (MD__CELL_CLUSTER_ATOMS at the density) need more than min_cell, and to at most
 * MD__CELL_MAX_GROWTH x min_cell; the sub-columns are
 * the most that stay at least cbrt(MD__CELL_COLUMN_ATOMS x volume per atom) wide (1 to 8);
 * without clustered the cells are min_cell's. */
static void cluster_grid_rule(void) {
    md_rng r;
    int grew = 0, capped = 0, held3 = 0; /* held3: three cells kept where three super-clusters wanted fewer */
    md_rng_seed(&r, 43);
    for (int trial = 0; trial < 2000; trial++) {
        const double box[3] = {1.5 + 14.0 * md_rng_uniform(&r), 1.5 + 14.0 * md_rng_uniform(&r), 1.5 + 14.0 * md_rng_uniform(&r)};
        const double rho = 20.0 + 120.0 * md_rng_uniform(&r), min_cell = 0.6 + 0.8 * md_rng_uniform(&r);
        const int natoms = (int)(rho * box[0] * box[1] * box[2]) + 1;
        const double vpa = box[0] * box[1] * box[2] / natoms, e = cbrt(MD__CELL_CLUSTER_ATOMS * vpa);
        md_cuda_cell_grid g0, g1;
        MD_CHECK(md__cell_grid_make(box, min_cell, 1 << 30, natoms, 0, &g0));
        MD_CHECK(md__cell_grid_make(box, min_cell, 1 << 30, natoms, 1, &g1));
        for (int d = 0; d < 3; d++) {
            const int most = (int)floor(box[d] / min_cell) < 1 ? 1 : (int)floor(box[d] / min_cell);
            MD_CHECKF(g0.dim[d] == most, "trial %d axis %d: %d cells without clustered, want %d", trial, d, g0.dim[d], most);
            MD_CHECKF(g1.dim[d] <= most && g1.dim[d] >= (most < 3 ? most : 3), "trial %d axis %d: %d cells (at most %d)",
                      trial, d, g1.dim[d], most);
            MD_CHECKF(g1.cell[d] >= (float)min_cell * (1.0f - 1e-6f), "trial %d axis %d: cell %g < %g", trial, d,
                      (double)g1.cell[d], min_cell);
            held3 += most == 3 && g1.dim[d] == 3 && box[d] / e < 2.5;
            if (g1.dim[d] < most) { /* grown: to the count nearest L / e, but cells at most MD__CELL_MAX_GROWTH
                                      * min_cell */
                const double want = box[d] / e;
                const int fewest = (int)ceil(box[d] / (MD__CELL_MAX_GROWTH * min_cell));
                grew++;
                MD_CHECKF(g1.cell[d] <= (float)(MD__CELL_MAX_GROWTH * min_cell) * (1.0f + 1e-6f),
                          "trial %d axis %d: cells of %g nm, more than %g x min_cell", trial, d, (double)g1.cell[d],
                          MD__CELL_MAX_GROWTH);
                MD_CHECKF(fabs(want - g1.dim[d]) <= 0.5 + 1e-9 || (g1.dim[d] == fewest && want < fewest),
                          "trial %d axis %d: %d cells of %g nm for a target of %g", trial, d, g1.dim[d], box[d] / g1.dim[d], e);
                capped += g1.dim[d] == fewest && want < fewest - 0.5;
            }
        }
        {
            const double w = cbrt(MD__CELL_COLUMN_ATOMS * vpa), c = 0.5 * (box[0] / g1.dim[0] + box[1] / g1.dim[1]);
            MD_CHECKF(g1.columns >= 1 && g1.columns <= 8, "trial %d: %d columns", trial, g1.columns);
            if (g1.columns > 1) MD_CHECKF(c / g1.columns >= w * (1.0 - 1e-9), "trial %d: columns %g nm wide < %g", trial, c / g1.columns, w);
            if (g1.columns < 8) MD_CHECKF(c / (g1.columns + 1) < w * (1.0 + 1e-9), "trial %d: room for %d columns", trial, g1.columns + 1);
        }
    }
    MD_CHECKF(grew > 100 && capped > 0 && held3 > 0, "the random boxes exercised %d grown axes, %d capped, %d held at 3 cells",
              grew, capped, held3);
    printf("  2000 random boxes: %d axes with cells grown past min_cell, %d of them held at %g x min_cell, %d at 3 cells\n",
           grew, capped, MD__CELL_MAX_GROWTH, held3);
}

/* The search's summary of an i-cluster's exclusion partners (md__nb_sc_fill, md__nb_may_exclude):
 * random partner lists, near and far, fewer and more than MD__NB_FAR far ones; for every window
 * [jf, jf + jc) of the slots it must never say "no" where a partner lies, and with at most
 * MD__NB_FAR far partners it must say "no" beyond the near slots wherever none lies (so the far
 * partners are kept one by one, not as the range that spans them). Seed 41. */
static void exclusion_partner_summary(void) {
    const int n = 4096, f = 1000, cnt = MD_CUDA_NB_CI, cj = 4, maxm = 6;
    std::vector<int> exn(n, 0), exl((size_t)maxm * n, 0);
    std::vector<float4> bb(2 * (MD_CUDA_NB_CI / cj), make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    const int2 ci[1] = {make_int2(f, cnt)};
    int trial, few = 0, many = 0, missed = 0, wrong_far = 0, copied = 0, overflow = 0, bits_differ = 0;
    md_rng g;
    md_rng_seed(&g, 41);
    for (trial = 0; trial < 300; trial++) {
        md__nb_sc_data d;
        std::vector<int> all;
        const double pfar = 0.05 + 0.4 * md_rng_uniform(&g);
        for (int q = 0; q < cnt; q++) {
            const int m = (int)(md_rng_uniform(&g) * (maxm + 1)) % (maxm + 1);
            std::vector<int> v;
            for (int k = 0; k < m; k++) {
                int p = md_rng_uniform(&g) < pfar ? (int)(md_rng_uniform(&g) * n) % n
                                                   : f - 40 + (int)(md_rng_uniform(&g) * 88);
                if (p == f + q) p = f + (q + 1) % cnt;
                v.push_back(p);
            }
            std::sort(v.begin(), v.end());
            exn[f + q] = m;
            for (int k = 0; k < m; k++) {
                exl[(size_t)k * n + f + q] = v[k];
                all.push_back(v[k]);
            }
        }
        md__nb_sc_fill(&d, 0, make_int4(0, 1, 0, 0), ci, bb.data(), exn.data(), exl.data(), n, cj);
        if (d.nfar[0] > MD__NB_FAR) many++;
        else few++;
        if (d.np[0] > MD__NB_PLIST) overflow++;
        else copied++;
        for (int jc = 1; jc <= cj; jc++)
            for (int jf = 0; jf + jc <= n; jf++) {
                int has = 0;
                for (int p : all) has |= p >= jf && p < jf + jc;
                const int may = md__nb_may_exclude(d, 0, jf, jc);
                unsigned want = 0; /* the excluded pairs' bits, from the partner lists written above */
                for (int q = 0; q < cnt; q++)
                    for (int k = 0; k < exn[f + q]; k++) {
                        const int p = exl[(size_t)k * n + f + q];
                        if (p >= jf && p < jf + jc) want |= 1u << ((p - jf) * MD_CUDA_NB_CI + q);
                    }
                bits_differ += md__nb_excl_bits(d, 0, jf, jc, exn.data(), exl.data(), n) != want ||
                               md__nb_excl_bits<1>(d, 0, jf, jc, exn.data(), exl.data(), n) != want;
                missed += has && !may;
                if (d.nfar[0] <= MD__NB_FAR && (jf + jc <= f - MD__NB_NEAR || jf >= f + cnt + MD__NB_NEAR))
                    wrong_far += may != has;
            }
    }
    MD_CHECKF(missed == 0, "%d windows with a partner were ruled out", missed);
    MD_CHECKF(wrong_far == 0, "%d windows beyond the near slots answered wrongly with few far partners", wrong_far);
    MD_CHECKF(few > 20 && many > 20, "cases: %d with at most %d far partners, %d with more", few, MD__NB_FAR, many);
    MD_CHECKF(bits_differ == 0, "%d windows whose exclusion bits differ from the partner lists", bits_differ);
    MD_CHECKF(copied > 20 && overflow > 20, "cases: %d with the partners copied, %d with more than %d", copied, overflow,
              MD__NB_PLIST);
    printf("  partner summaries: %d trials with at most %d far partners, %d with more; no window missed; exclusion "
           "bits from the copied partners (%d trials) and the lists (%d with more than %d pairs) as the lists say\n",
           few, MD__NB_FAR, many, copied, overflow, MD__NB_PLIST);
}

/* ---------------------------------------------------------------- GPU tests */

/* Fill a device buffer with 0xFF bytes (NaN floats, all-ones fixed point): what a kernel fails to
 * overwrite shows. */
static int poison(void *d, size_t bytes, cudaStream_t st) {
    return cudaMemsetAsync(d, 0xFF, bytes, st) == cudaSuccess;
}

/* One evaluation on a poisoned state: forces and energies poisoned, zeroed, evaluated, polled. */
static md_status evaluate(md_cuda_nb_plan *p, md_cuda_state *s, unsigned what, md_energy *e) {
    md_status st;
    if (!poison(s->d_force, 3 * (size_t)s->stride * sizeof(md_fixed), s->q.stream) ||
        !poison(s->d_energy, MD_CUDA_E_COUNT * sizeof(md_fixed), s->q.stream))
        return md_set_error(MD_ERR_CUDA, "evaluate", 0, NULL, "poison failed");
    if ((st = md_cuda_state_zero(s)) != MD_OK || (st = md_cuda_nb_enqueue(p, s, what)) != MD_OK) return st;
    return md_cuda_nb_plan_poll(p, s, e);
}

/* A system's state on the device (capacity n + 37, so the stride is not n). */
static md_status make_state(md_cuda_state *st, const md_system *s, const md_topology *t, const md_lj_table *lj) {
    md_status r;
    if ((r = md_cuda_state_create(st, s->n + 37)) != MD_OK) return r;
    return md_cuda_state_upload(st, s, t, lj);
}

static md_status alloc_like(md_system *out, const md_system *s) {
    md_status r = md_system_alloc(out, s->n);
    if (r == MD_OK) memcpy(out->box, s->box, sizeof out->box);
    return r;
}

static void state_roundtrip(void) {
    md_system s, back;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_energy e;
    long long step = -1;
    std::vector<md_fixed> f;
    NEED_GPU();
    MD_CHECK_OK(water(&s, &t, &lj, 100, 41));
    for (int i = 0; i < s.n; i++) s.vel[i].x += 0.25f * (float)(i % 7);
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    MD_CHECK(st.stride % 32 == 0 && st.stride >= st.capacity);
    MD_CHECK_OK(alloc_like(&back, &s));
    for (int i = 0; i < s.n; i++) back.xyzq[i].x = back.vel[i].y = NAN;
    MD_CHECK(poison(st.d_force, 3 * (size_t)st.stride * sizeof(md_fixed), st.q.stream));
    MD_CHECK_OK(md_cuda_state_zero(&st));
    f.assign(3 * (size_t)s.n, 1);
    MD_CHECK_OK(md_cuda_state_download(&st, &back, NULL, f.data()));
    for (int i = 0; i < s.n; i++) {
        MD_CHECKF(back.xyzq[i].x == s.xyzq[i].x && back.xyzq[i].y == s.xyzq[i].y && back.xyzq[i].z == s.xyzq[i].z &&
                      back.xyzq[i].w == t.charge[i],
                  "atom %d position or charge changed", i);
        MD_CHECKF(back.vel[i].x == s.vel[i].x && back.vel[i].y == s.vel[i].y && back.vel[i].z == s.vel[i].z,
                  "atom %d velocity changed", i);
        MD_CHECKF(f[3 * i] == 0 && f[3 * i + 1] == 0 && f[3 * i + 2] == 0, "atom %d force not zeroed", i);
    }
    MD_CHECK_OK(md_cuda_state_poll(&st, &e, &step));
    MD_CHECK(step == 0 && md_energy_total(&e) == 0.0);
    MD_CHECK_OK(md_cuda_state_enqueue_kinetic(&st));
    MD_CHECK_OK(md_cuda_state_poll(&st, &e, NULL));
    {
        double ke = 0.0;
        for (int i = 0; i < s.n; i++)
            ke += 0.5 * t.mass[i] * ((double)s.vel[i].x * s.vel[i].x + (double)s.vel[i].y * s.vel[i].y +
                                     (double)s.vel[i].z * s.vel[i].z);
        MD_CHECK_CLOSE(e.kinetic, ke, 1e-5, 1e-6); /* float per atom, float block sums */
    }
    { /* too many atoms for the capacity */
        md_cuda_state small;
        MD_CHECK_OK(md_cuda_state_create(&small, s.n - 1));
        MD_CHECK_ERROR(md_cuda_state_upload(&small, &s, &t, &lj), MD_ERR_RANGE, "capacity");
        md_cuda_state_destroy(&small);
    }
    md_cuda_state_destroy(&st);
    md_cuda_state_destroy(&st); /* safe twice */
    md_system_free(&back);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* GPU raw sums vs md_nb_compute(MD_NB_CPU_FIXED) on the state's own coordinates (downloaded:
 * the sort wraps them into the box). Returns the number of differing words, -1 on error. */
static long long compare_fixed(md_cuda_state *st, const md_topology *t, const md_lj_table *lj, const md_nb_params *p,
                               const char *what) {
    md_system back;
    md_nb_plan cp;
    md_energy e;
    std::vector<md_fixed> f(3 * (size_t)st->n);
    long long bad = 0;
    static const int terms[5] = {MD_CUDA_E_LJ, MD_CUDA_E_COUL_REAL, MD_CUDA_E_COUL_EXCL, MD_CUDA_E_LJ14, MD_CUDA_E_COUL14};
    static const int cpu[5] = {MD_NB_FIXED_LJ, MD_NB_FIXED_COUL, MD_NB_FIXED_EXCL, MD_NB_FIXED_LJ14, MD_NB_FIXED_COUL14};
    if (md_system_alloc(&back, st->n) != MD_OK) return -1;
    memcpy(back.box, st->box, sizeof back.box);
    if (md_cuda_state_download(st, &back, NULL, f.data()) != MD_OK || md_nb_plan_create(&cp, p, st->n) != MD_OK ||
        md_nb_compute(MD_NB_CPU_FIXED, &cp, t, lj, back.xyzq, back.box, NULL, &e) != MD_OK) {
        printf("  %s: %s\n", what, md_last_error());
        md_system_free(&back);
        return -1;
    }
    for (int i = 0; i < 3 * st->n; i++)
        if (f[i] != cp.fixed_force[i]) {
            if (bad < 3)
                printf("  %s: atom %d component %d: gpu %.9g, cpu %.9g kJ/mol/nm\n", what, i / 3, i % 3,
                       md_fixed_to_double(f[i], MD_FORCE_FIXED_SCALE), md_fixed_to_double(cp.fixed_force[i], MD_FORCE_FIXED_SCALE));
            bad++;
        }
    for (int k = 0; k < 5; k++)
        if (st->h_energy[terms[k]] != cp.fixed_energy[cpu[k]]) {
            printf("  %s: energy term %d: gpu %.9f, cpu %.9f kJ/mol\n", what, terms[k],
                   md_fixed_to_double(st->h_energy[terms[k]], MD_ENERGY_FIXED_SCALE),
                   md_fixed_to_double(cp.fixed_energy[cpu[k]], MD_ENERGY_FIXED_SCALE));
            bad++;
        }
    for (int k = 0; k < 9; k++)
        if (st->h_energy[MD_CUDA_E_VIRIAL_XX + k] != cp.fixed_virial[k]) {
            if (bad < 3) printf("  %s: virial %d differs\n", what, k);
            bad++;
        }
    if (fabs(md_fixed_to_double(st->h_energy[MD_CUDA_E_COUL_SELF], MD_ENERGY_FIXED_SCALE) - e.coul_self) >
        1e-7 * fabs(e.coul_self) + 1e-7) {
        printf("  %s: self energy %.9f, cpu %.9f\n", what, md_fixed_to_double(st->h_energy[MD_CUDA_E_COUL_SELF], MD_ENERGY_FIXED_SCALE),
               e.coul_self);
        bad++;
    }
    md_nb_plan_free(&cp);
    md_system_free(&back);
    return bad;
}

static const md_nb_variant exact_rungs[3] = {MD_NB_GPU_TILES, MD_NB_GPU_FULL_LIST, MD_NB_GPU_HALF_LIST};

/* The two systems of the rung tests: water (which 0, m molecules) or chains (which 1, cube edge),
 * and their state on the device. */
static md_status test_system(int which, int m, double edge, uint64_t seed, md_system *s, md_topology *t, md_lj_table *lj,
                             md_cuda_state *st) {
    md_status r = which == 0 ? water(s, t, lj, m, seed) : chains(s, t, lj, edge, seed);
    return r == MD_OK ? make_state(st, s, t, lj) : r;
}

/* The exact rungs are bitwise MD_NB_CPU_FIXED: water (Ewald, LB) and chains (1-4 pairs, 6 types). */
static void exact_rungs_bitwise(void) {
    for (int sys = 0; sys < 2; sys++) {
        md_system s;
        md_topology t;
        md_lj_table lj;
        md_cuda_state st;
        md_nb_params p;
        memset(&p, 0, sizeof p);
        NEED_GPU();
        MD_CHECK_OK(test_system(sys, sanitize ? 300 : 1500, sanitize ? 2.4 : 3.6, 42 + sys, &s, &t, &lj, &st));
        for (int v = 0; v < 3; v++) {
            md_cuda_nb_plan pl;
            md_energy e;
            char what[96];
            long long bad;
            snprintf(what, sizeof what, "%s, %s", sys ? "chains" : "water", md_nb_variant_name(exact_rungs[v]));
            MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, exact_rungs[v], &p, NULL));
            MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e));
            bad = compare_fixed(&st, &t, &lj, &p, what);
            MD_CHECKF(bad == 0, "%s: %lld words differ from MD_NB_CPU_FIXED", what, bad);
            md_cuda_nb_plan_destroy(&pl);
        }
        md_cuda_state_destroy(&st);
        md_system_free(&s);
        md_topology_free(&t);
        md_lj_table_free(&lj);
    }
}

/* The cluster rungs against the double CPU reference (see the file's header for tolerances). */
static void cluster_rungs_vs_cpu(void) {
    static const struct {
        md_nb_variant v;
        int warp;
    } rungs[4] = {{MD_NB_GPU_CLUSTER, 0}, {MD_NB_GPU_CLUSTER_SMEM, 0}, {MD_NB_GPU_CLUSTER, 16}, {MD_NB_GPU_CLUSTER, 8}};
    for (int sys = 0; sys < 2; sys++) {
        md_system s, back;
        md_topology t;
        md_lj_table lj;
        md_cuda_state st;
        md_nb_params p;
        memset(&p, 0, sizeof p);
        NEED_GPU();
        MD_CHECK_OK(test_system(sys, sanitize ? 400 : 2500, sanitize ? 2.4 : 3.6, 44 + sys, &s, &t, &lj, &st));
        MD_CHECK_OK(alloc_like(&back, &s));
        for (int v = 0; v < 4; v++) {
            md_cuda_nb_plan pl;
            md_cuda_nb_opts o;
            md_nb_plan cp;
            md_energy e, ref, fix;
            std::vector<double> fg(3 * (size_t)s.n), fr(3 * (size_t)s.n);
            double err, rms, scale, w = 0.0;
            char what[96];
            memset(&o, 0, sizeof o);
            o.warp = rungs[v].warp;
            snprintf(what, sizeof what, "%s, %s, warp %d", sys ? "chains" : "water", md_nb_variant_name(rungs[v].v),
                     rungs[v].warp ? rungs[v].warp : 32);
            MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, rungs[v].v, &p, &o));
            MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e)); /* builds and prunes */
            MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e)); /* the pruned list */
            MD_CHECK_OK(md_cuda_state_download(&st, &back, fg.data(), NULL));
            MD_CHECK_OK(md_nb_plan_create(&cp, &p, s.n));
            MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &cp, &t, &lj, back.xyzq, back.box, fr.data(), &ref));
            MD_CHECK_OK(md_nb_compute(MD_NB_CPU_FIXED, &cp, &t, &lj, back.xyzq, back.box, NULL, &fix));
            err = force_error(fg.data(), fr.data(), s.n, &rms);
            scale = fabs(ref.lj) + fabs(ref.coul_real);
            for (int k = 0; k < 9; k += 4) w += fabs(ref.virial[k]);
            printf("  %s: force error %.2e (F_rms %.1f), LJ %.6f / %.6f, Coulomb %.4f / %.4f kJ/mol, %lld rebuilds\n", what,
                   err, rms, e.lj, ref.lj, e.coul_real, ref.coul_real, pl.stats.rebuilds);
            MD_CHECKF(err < 5e-4, "%s: force error %.3e", what, err);
            MD_CHECKF(fabs(e.lj - ref.lj) < 2e-5 * scale && fabs(e.coul_real - ref.coul_real) < 2e-5 * scale,
                      "%s: pair energies off", what);
            /* the exact kernel's terms equal MD_NB_CPU_FIXED's bits */
            MD_CHECKF(st.h_energy[MD_CUDA_E_COUL_EXCL] == cp.fixed_energy[MD_NB_FIXED_EXCL] &&
                          st.h_energy[MD_CUDA_E_LJ14] == cp.fixed_energy[MD_NB_FIXED_LJ14] &&
                          st.h_energy[MD_CUDA_E_COUL14] == cp.fixed_energy[MD_NB_FIXED_COUL14],
                      "%s: exclusion or 1-4 energies differ from MD_NB_CPU_FIXED", what);
            for (int k = 0; k < 9; k++)
                MD_CHECKF(fabs(e.virial[k] - ref.virial[k]) < 1e-4 * w, "%s: virial %d %.6f, cpu %.6f", what, k, e.virial[k],
                          ref.virial[k]);
            MD_CHECK(pl.stats.rebuilds == 1 && pl.stats.entries > 0 && pl.stats.computed_pairs > 0);
            md_nb_plan_free(&cp);
            md_cuda_nb_plan_destroy(&pl);
        }
        md_cuda_state_destroy(&st);
        md_system_free(&back);
        md_system_free(&s);
        md_topology_free(&t);
        md_lj_table_free(&lj);
    }
}

/* Every rung twice, after a forced rebuild, after a re-sort and (cluster rungs) with a pair
 * kernel grid smaller than the list's work items: the same bits. */
static void repeatable(void) {
    static const md_nb_variant all[5] = {MD_NB_GPU_TILES, MD_NB_GPU_FULL_LIST, MD_NB_GPU_HALF_LIST, MD_NB_GPU_CLUSTER,
                                         MD_NB_GPU_CLUSTER_SMEM};
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    NEED_GPU();
    MD_CHECK_OK(water(&s, &t, &lj, sanitize ? 300 : 2000, 46));
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    for (int v = 0; v < 5; v++) {
        md_cuda_nb_plan pl;
        md_energy e;
        std::vector<md_fixed> f0(3 * (size_t)s.n), f1(3 * (size_t)s.n);
        md_fixed e0[MD_CUDA_E_COUNT];
        static const unsigned extra[4] = {0u, MD_CUDA_NB_REBUILD, MD_CUDA_NB_SORT, 0u};
        MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, all[v], NULL, NULL));
        MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e));
        MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e)); /* after the prune */
        MD_CHECK_OK(md_cuda_state_download(&st, NULL, NULL, f0.data()));
        memcpy(e0, st.h_energy, sizeof e0);
        for (int k = 0; k < 4; k++) {
            if (k == 3) { /* the grid covers 64 items (md_cuda_nb_plan::grid_items): each warp takes several */
                if (pl.variant == MD_NB_GPU_CLUSTER || pl.variant == MD_NB_GPU_CLUSTER_SMEM)
                    MD_CHECKF(pl.stats.work_items > 2 * 64, "%s: %lld work items, too few for the small grid",
                              md_nb_variant_name(all[v]), pl.stats.work_items);
                pl.grid_items = 64;
            }
            MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL | extra[k], &e));
            if (extra[k]) MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e));
            MD_CHECK_OK(md_cuda_state_download(&st, NULL, NULL, f1.data()));
            MD_CHECKF(f0 == f1 && memcmp(e0, st.h_energy, sizeof e0) == 0, "%s: run %d (%s) differs from the first",
                      md_nb_variant_name(all[v]), k,
                      k == 0 ? "again" : k == 1 ? "rebuilt" : k == 2 ? "re-sorted" : "a small grid");
        }
        md_cuda_nb_plan_destroy(&pl);
    }
    md_cuda_state_destroy(&st);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* The cluster kernel's grid (md_cuda_nb_plan::grid_items) changes after a poll: a graph captured
 * before compares with one captured after as updatable (its rules, registered by md_cuda_nb_plan_create), not as
 * a graph to instantiate anew, and the updated executable computes the same bits. */
struct nb_capture {
    md_cuda_nb_plan *p;
    md_cuda_state *s;
};
static md_status nb_capture_enqueue(void *ctx, cudaStream_t) {
    nb_capture *c = (nb_capture *)ctx;
    return md_cuda_nb_enqueue(c->p, c->s, MD_CUDA_NB_ENERGY);
}
static void cluster_grid_in_graphs(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_cuda_nb_plan pl;
    md_energy e;
    cudaGraph_t ga = NULL, gb = NULL;
    cudaGraphExec_t x = NULL;
    cudaGraphExecUpdateResultInfo info;
    md_cuda_graph_verdict v;
    std::vector<md_fixed> f0, f1;
    NEED_GPU();
    MD_CHECK_OK(water(&s, &t, &lj, sanitize ? 300 : 2000, 47));
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    f0.resize(3 * (size_t)s.n);
    f1.resize(3 * (size_t)s.n);
    MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, MD_NB_GPU_CLUSTER_SMEM, NULL, NULL));
    MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e));
    MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e)); /* after the prune */
    MD_CHECK_OK(md_cuda_state_download(&st, NULL, NULL, f0.data()));
    MD_CHECKF(pl.grid_items < pl.cap_items && pl.stats.work_items > 2 * 64,
              "grid %lld items, capacity %lld, the list's %lld", pl.grid_items, pl.cap_items, pl.stats.work_items);
    nb_capture c = {&pl, &st};
    const long long grid = pl.grid_items;
    pl.grid_items = 64; /* as a poll of a list with far fewer items would leave it */
    MD_CHECK_OK(md_cuda_graph_capture(st.q.stream, nb_capture_enqueue, &c, &ga));
    pl.grid_items = grid;
    MD_CHECK_OK(md_cuda_graph_capture(st.q.stream, nb_capture_enqueue, &c, &gb));
    MD_CHECK_OK(md_cuda_graph_compare(ga, gb, &v));
    MD_CHECKF(v.match == MD_CUDA_GRAPH_UPDATABLE, "verdict %s: %s", md_cuda_graph_match_name(v.match), v.reason);
    MD_CHECK(cudaGraphInstantiate(&x, ga, 0) == cudaSuccess);
    MD_CHECK(x && cudaGraphExecUpdate(x, gb, &info) == cudaSuccess);
    if (x) { /* the updated executable: the grid of the last build's items, the same bits */
        MD_CHECK(poison(st.d_force, 3 * (size_t)st.stride * sizeof(md_fixed), st.q.stream));
        MD_CHECK_OK(md_cuda_state_zero(&st));
        MD_CHECK(cudaGraphLaunch(x, st.q.stream) == cudaSuccess);
        MD_CHECK_OK(md_cuda_nb_plan_poll(&pl, &st, &e));
        MD_CHECK_OK(md_cuda_state_download(&st, NULL, NULL, f1.data()));
        MD_CHECKF(f0 == f1, "the updated graph's forces differ from the stream's");
        cudaGraphExecDestroy(x);
    }
    if (ga) cudaGraphDestroy(ga);
    if (gb) cudaGraphDestroy(gb);
    md_cuda_nb_plan_destroy(&pl);
    md_cuda_state_destroy(&st);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* Move caller atom c by dx (nm) along x on the device. */
static int move_atom(md_cuda_state *st, int c, float dx) {
    int slot;
    float4 p;
    if (cudaStreamSynchronize(st->q.stream) != cudaSuccess ||
        cudaMemcpy(&slot, st->d_rank + c, sizeof slot, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(&p, st->d_xyzq + slot, sizeof p, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    p.x += dx;
    return cudaMemcpy(st->d_xyzq + slot, &p, sizeof p, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaDeviceSynchronize() == cudaSuccess;
}

/* The half-buffer rule on the device, and forces after moves without a sort (the escape path). */
static void rebuild_rule(void) {
    md_system s, back;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_cuda_nb_plan pl;
    md_nb_plan cp;
    md_energy e;
    NEED_GPU();
    MD_CHECK_OK(water(&s, &t, &lj, sanitize ? 300 : 2000, 47));
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    MD_CHECK_OK(alloc_like(&back, &s));
    for (int v = 0; v < 2; v++) {
        const md_nb_variant var = v ? MD_NB_GPU_FULL_LIST : MD_NB_GPU_CLUSTER;
        std::vector<double> fg(3 * (size_t)s.n), fr(3 * (size_t)s.n);
        double err;
        MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, var, NULL, NULL));
        MD_CHECK_OK(evaluate(&pl, &st, 0, &e));
        MD_CHECK(pl.stats.rebuilds == 1);
        MD_CHECK(move_atom(&st, 5, 0.03f)); /* 0.6 x half the buffer: no rebuild */
        MD_CHECK_OK(evaluate(&pl, &st, 0, &e));
        MD_CHECKF(pl.stats.rebuilds == 1, "%s: rebuilt after a move of 0.03 nm", md_nb_variant_name(var));
        MD_CHECK(move_atom(&st, 5, 0.03f)); /* now 0.06 from the build: rebuild */
        MD_CHECK(move_atom(&st, 17, -0.045f));
        MD_CHECK_OK(evaluate(&pl, &st, 0, &e));
        MD_CHECKF(pl.stats.rebuilds == 2, "%s: %lld rebuilds after a move of 0.06 nm, want 2", md_nb_variant_name(var),
                  pl.stats.rebuilds);
        MD_CHECK_OK(md_cuda_state_download(&st, &back, fg.data(), NULL));
        MD_CHECK_OK(md_nb_plan_create(&cp, NULL, s.n));
        MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &cp, &t, &lj, back.xyzq, back.box, fr.data(), &e));
        err = force_error(fg.data(), fr.data(), s.n, NULL);
        MD_CHECKF(err < 5e-4, "%s after moves: force error %.3e", md_nb_variant_name(var), err);
        md_nb_plan_free(&cp);
        md_cuda_nb_plan_destroy(&pl);
    }
    md_cuda_state_destroy(&st);
    md_system_free(&back);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* Tiny capacities: the poll names the capacity, md_cuda_nb_plan_grow fixes it, the forces are right. */
static void capacity_overflow(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    NEED_GPU();
    MD_CHECK_OK(water(&s, &t, &lj, sanitize ? 300 : 1200, 48));
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    for (int v = 0; v < 3; v++) {
        const md_nb_variant var = v == 0 ? MD_NB_GPU_CLUSTER : v == 1 ? MD_NB_GPU_FULL_LIST : MD_NB_GPU_HALF_LIST;
        md_cuda_nb_plan pl;
        md_cuda_nb_opts o;
        md_energy e;
        md_status r = MD_ERR_RANGE;
        int tries = 0, grown = 0;
        memset(&o, 0, sizeof o);
        o.list_capacity = 64;
        o.excl_capacity = 2;
        o.max_neighbors = 8;
        MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, var, NULL, &o));
        MD_CHECK_ERROR(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e), MD_ERR_RANGE, "md_cuda_nb_plan_grow");
        while (r != MD_OK && tries < 4) {
            MD_CHECK_OK(md_cuda_nb_plan_grow(&pl, &st, &grown));
            MD_CHECK(grown == 1);
            r = evaluate(&pl, &st, MD_CUDA_NB_ENERGY | MD_CUDA_NB_VIRIAL, &e);
            tries++;
        }
        MD_CHECKF(r == MD_OK, "%s: still failing after %d grows: %s", md_nb_variant_name(var), tries, md_last_error());
        if (var != MD_NB_GPU_CLUSTER) {
            const long long bad = compare_fixed(&st, &t, &lj, &pl.params, md_nb_variant_name(var));
            MD_CHECKF(bad == 0, "%s after growing: %lld words differ from MD_NB_CPU_FIXED", md_nb_variant_name(var), bad);
        } else {
            md_system back;
            md_nb_plan cp;
            md_energy ref;
            std::vector<double> fg(3 * (size_t)s.n), fr(3 * (size_t)s.n);
            MD_CHECK_OK(alloc_like(&back, &s));
            MD_CHECK_OK(md_cuda_state_download(&st, &back, fg.data(), NULL));
            MD_CHECK_OK(md_nb_plan_create(&cp, NULL, s.n));
            MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &cp, &t, &lj, back.xyzq, back.box, fr.data(), &ref));
            MD_CHECKF(force_error(fg.data(), fr.data(), s.n, NULL) < 5e-4, "cluster after growing: forces off");
            md_nb_plan_free(&cp);
            md_system_free(&back);
        }
        md_cuda_nb_plan_destroy(&pl);
    }
    md_cuda_state_destroy(&st);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* Host and device checks of bad input. */
static void bad_input(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_cuda_nb_plan pl;
    md_nb_params p;
    md_energy e;
    NEED_GPU();
    MD_CHECK_OK(water(&s, &t, &lj, 300, 49)); /* edge 2.08 nm */
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    memset(&p, 0, sizeof p);
    p.cutoff = 1.2;
    MD_CHECK_ERROR(md_cuda_nb_plan_create(&pl, &st, MD_NB_GPU_CLUSTER, &p, NULL), MD_ERR_RANGE, "half the shortest box edge");
    MD_CHECK_ERROR(md_cuda_nb_plan_create(&pl, &st, MD_NB_CPU_FIXED, NULL, NULL), MD_ERR_UNSUPPORTED, "not a GPU rung");
    p.cutoff = 0.9;
    p.lj = MD_LJ_FORCE_SWITCH;
    MD_CHECK_ERROR(md_cuda_nb_plan_create(&pl, &st, MD_NB_GPU_CLUSTER, &p, NULL), MD_ERR_UNSUPPORTED, "force switch");
    for (int v = 0; v < 3; v++) {
        const md_nb_variant var = v == 0 ? MD_NB_GPU_CLUSTER : v == 1 ? MD_NB_GPU_FULL_LIST : MD_NB_GPU_TILES;
        const double small[3] = {1.7, 1.7, 1.7}; /* below twice the cutoff (tiles) and cutoff + buffer */
        MD_CHECK_OK(md_cuda_state_upload(&st, &s, &t, &lj));
        MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, var, NULL, NULL));
        MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e));
        /* a NaN coordinate, named by its caller index */
        MD_CHECK(move_atom(&st, 123, NAN));
        MD_CHECK_ERROR(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e), MD_ERR_RANGE, "atom 123");
        /* a box shrunk on the device below twice cutoff + buffer */
        MD_CHECK_OK(md_cuda_state_upload(&st, &s, &t, &lj));
        MD_CHECK_OK(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e));
        MD_CHECK(cudaStreamSynchronize(st.q.stream) == cudaSuccess);
        MD_CHECK(cudaMemcpy(st.d_box, small, sizeof small, cudaMemcpyHostToDevice) == cudaSuccess);
        MD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
        MD_CHECK_ERROR(evaluate(&pl, &st, MD_CUDA_NB_ENERGY, &e), MD_ERR_RANGE, "half the shortest box edge");
        md_cuda_nb_plan_destroy(&pl);
    }
    md_cuda_state_destroy(&st);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* Velocity Verlet on the GPU vs md_dynamics on the CPU, then energy conservation. */
static void nve(void) {
    md_system s, back, cpu_sys;
    md_topology t;
    md_lj_table lj;
    md_fcc_desc d;
    md_nb_params p;
    md_dynamics dy;
    md_cuda_state st;
    md_cuda_nb_plan pl;
    md_energy e;
    const double dt = 0.004;
    const int nrun = sanitize ? 200 : 2000;
    double e0, emin, emax, worst = 0.0;
    long long step = 0;
    NEED_GPU();
    memset(&d, 0, sizeof d);
    d.cells = sanitize ? 4 : 6;
    memset(&p, 0, sizeof p);
    p.coul = MD_COUL_NONE;
    MD_CHECK_OK(md_build_lj_fluid(&s, &t, &lj, &d));
    MD_CHECK_OK(md_dynamics_init(&dy, &s, &t, &lj, &p, MD_NB_CPU_VERLET, dt));
    MD_CHECK_OK(md_integrate_vv(&dy, 10));
    MD_CHECK_OK(alloc_like(&cpu_sys, &s));
    MD_CHECK_OK(md_dynamics_get_system(&dy, &cpu_sys));
    MD_CHECK_OK(make_state(&st, &s, &t, &lj));
    MD_CHECK_OK(md_cuda_nb_plan_create(&pl, &st, MD_NB_GPU_CLUSTER, &p, NULL));
    MD_CHECK_OK(md_cuda_vv_enqueue(&st, &pl, dt, 10, MD_CUDA_NB_ENERGY));
    MD_CHECK_OK(md_cuda_nb_plan_poll(&pl, &st, &e));
    MD_CHECK_OK(alloc_like(&back, &s));
    MD_CHECK_OK(md_cuda_state_download(&st, &back, NULL, NULL));
    MD_CHECK_OK(md_cuda_state_poll(&st, NULL, &step));
    MD_CHECK(step == 10);
    for (int i = 0; i < s.n; i++) {
        const double L = s.box[0];
        double dxs[3] = {(double)back.xyzq[i].x - cpu_sys.xyzq[i].x, (double)back.xyzq[i].y - cpu_sys.xyzq[i].y,
                         (double)back.xyzq[i].z - cpu_sys.xyzq[i].z};
        for (int k = 0; k < 3; k++) worst = fmax(worst, fabs(dxs[k] - L * rint(dxs[k] / L)));
    }
    printf("  after 10 steps: largest position difference GPU - CPU %.2e nm; total energy %.6f / %.6f kJ/mol\n", worst,
           md_energy_total(&e), md_energy_total(&dy.energy));
    MD_CHECKF(worst < 2e-5, "positions differ by %.3e nm after 10 steps", worst);
    MD_CHECK_CLOSE(md_energy_total(&e), md_energy_total(&dy.energy), 1e-4, 1e-3);
    e0 = emin = emax = md_energy_total(&e);
    for (int k = 0; k < nrun / 100; k++) {
        double et;
        MD_CHECK_OK(md_cuda_vv_enqueue(&st, &pl, dt, 100, MD_CUDA_NB_ENERGY));
        MD_CHECK_OK(md_cuda_nb_plan_poll(&pl, &st, &e));
        et = md_energy_total(&e);
        emin = fmin(emin, et);
        emax = fmax(emax, et);
    }
    printf("  %d steps of %.0f fs: total energy %.5f -> %.5f kJ/mol, drift %.2e, range %.2e kJ/mol per atom, "
           "%lld rebuilds, %lld sorts\n",
           nrun, dt * 1000.0, e0, md_energy_total(&e), (md_energy_total(&e) - e0) / s.n, (emax - emin) / s.n,
           pl.stats.rebuilds, pl.stats.sorts);
    MD_CHECKF(fabs(md_energy_total(&e) - e0) / s.n < 1e-3 && (emax - emin) / s.n < 2e-3,
              "energy not conserved: drift %.3e, range %.3e kJ/mol per atom", (md_energy_total(&e) - e0) / s.n,
              (emax - emin) / s.n);
    MD_CHECK(pl.stats.rebuilds > 1);
    md_cuda_nb_plan_destroy(&pl);
    md_cuda_state_destroy(&st);
    md_dynamics_free(&dy);
    md_system_free(&back);
    md_system_free(&cpu_sys);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* MD_RDF_GPU_CELL gives md_rdf_accumulate's counts exactly. */
static void rdf_cell_rung(void) {
    md_system s;
    md_float4 *dxyz = NULL;
    double box[3] = {4.3, 4.5, 4.7};
    int n = sanitize ? 800 : 9001, *sa, *sb, na, nb;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, n, box, 1.0, 50));
    s.xyzq[3].x += 4.3f; /* outside the box: wrapped like every rung does */
    s.xyzq[10].z -= 9.4f;
    MD_CHECK(cudaMalloc((void **)&dxyz, sizeof(md_float4) * n) == cudaSuccess);
    MD_CHECK(cudaMemcpy(dxyz, s.xyzq, sizeof(md_float4) * n, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK(cudaDeviceSynchronize() == cudaSuccess); /* landed before the plan's own stream reads it */
    sa = (int *)malloc(sizeof(int) * n);
    sb = (int *)malloc(sizeof(int) * n);
    for (int c = 0; c < 2; c++) {
        md_rdf ref, g;
        md_cuda_rdf_plan pl;
        const int *pb = NULL;
        if (c == 0) {
            na = n;
            nb = 0;
            for (int i = 0; i < n; i++) sa[i] = i;
        } else {
            na = n / 2;
            nb = n - n / 3;
            for (int i = 0; i < na; i++) sa[i] = 2 * i;
            for (int i = 0; i < nb; i++) sb[i] = n - 1 - i;
            pb = sb;
        }
        MD_CHECK_OK(md_rdf_init(&ref, 1.4, 111));
        MD_CHECK_OK(md_rdf_init(&g, 1.4, 111));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, sa, na, pb, nb, box));
        MD_CHECK_OK(md_cuda_rdf_plan_create(&pl, n, sa, na, pb, nb, 111, NULL));
        for (int f = 0; f < 2; f++) MD_CHECK_OK(md_cuda_rdf_accumulate(MD_RDF_GPU_CELL, &pl, &g, dxyz, box));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, sa, na, pb, nb, box));
        for (int k = 0; k < 111; k++)
            MD_CHECKF(g.counts[k] == ref.counts[k], "case %d bin %d: gpu_cell %llu, cpu %llu", c, k,
                      (unsigned long long)g.counts[k], (unsigned long long)ref.counts[k]);
        MD_CHECK(g.frames == 2 && g.sum_pair_density == ref.sum_pair_density);
        md_cuda_rdf_plan_destroy(&pl);
        md_rdf_free(&ref);
        md_rdf_free(&g);
    }
    { /* two frames of different boxes enqueued before one sync: each frame's box reaches its cells */
        md_system s2;
        md_float4 *d2 = NULL;
        double box2[3] = {box[0] * 1.1, box[1] * 1.1, box[2] * 1.1};
        md_rdf ref, g;
        md_cuda_rdf_plan pl;
        MD_CHECK_OK(md_system_alloc(&s2, n));
        for (int i = 0; i < n; i++)
            s2.xyzq[i] = {s.xyzq[i].x * 1.1f, s.xyzq[i].y * 1.1f, s.xyzq[i].z * 1.1f, s.xyzq[i].w};
        MD_CHECK(cudaMalloc((void **)&d2, sizeof(md_float4) * n) == cudaSuccess);
        MD_CHECK(cudaMemcpy(d2, s2.xyzq, sizeof(md_float4) * n, cudaMemcpyHostToDevice) == cudaSuccess);
        MD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
        MD_CHECK_OK(md_rdf_init(&ref, 1.4, 111));
        MD_CHECK_OK(md_rdf_init(&g, 1.4, 111));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, NULL, n, NULL, 0, box));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s2.xyzq, n, NULL, n, NULL, 0, box2));
        MD_CHECK_OK(md_cuda_rdf_plan_create(&pl, n, NULL, n, NULL, 0, 111, NULL));
        MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_CELL, &pl, &g, dxyz, box));
        MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_CELL, &pl, &g, d2, box2));
        MD_CHECK_OK(md_cuda_rdf_plan_sync(&pl, &g));
        for (int k = 0; k < 111; k++)
            MD_CHECKF(g.counts[k] == ref.counts[k], "two boxes, bin %d: gpu_cell %llu, cpu %llu", k,
                      (unsigned long long)g.counts[k], (unsigned long long)ref.counts[k]);
        MD_CHECK(g.frames == 2 && g.sum_pair_density == ref.sum_pair_density);
        md_cuda_rdf_plan_destroy(&pl);
        md_rdf_free(&ref);
        md_rdf_free(&g);
        MD_CHECK(cudaFree(d2) == cudaSuccess);
        md_system_free(&s2);
    }
    free(sa);
    free(sb);
    MD_CHECK(cudaFree(dxyz) == cudaSuccess);
    md_system_free(&s);
}

/* Every kernel the tests launched is in the registry, once. */
static void registry_holds_nb_kernels(void) {
    static const char *names[] = {"md__nb_disp_kernel", "(md__nb_bbox_kernel<4>)", "(md__nb_search_kernel<32>)",
                                  "md__nb_cluster_kernel<32, 3, 0>", "md__nb_list_kernel<3, 0>", "md__nb_bonded_kernel<3>",
                                  "md__cell_key_kernel", "md__vv_kick_kernel", "md__rdf_cell_kernel"};
    NEED_GPU();
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        int found = 0;
        for (int k = 0; k < md_cuda_kernel_count(); k++) {
            const char *name = NULL;
            MD_CHECK_OK(md_cuda_kernel_at(k, NULL, &name));
            found += strcmp(name, names[i]) == 0;
        }
        MD_CHECKF(found == 1, "%s is registered %d times, want once", names[i], found);
    }
}

int main(void) {
    const char *san = getenv("MD_SANITIZE");
    sanitize = san && san[0] == '1';
    MD_RUN(pair_fast_accuracy);
    MD_RUN(cluster_search_on_host);
    MD_RUN(cluster_grid_rule);
    MD_RUN(exclusion_partner_summary);
    MD_RUN(state_roundtrip);
    MD_RUN(exact_rungs_bitwise);
    MD_RUN(cluster_rungs_vs_cpu);
    MD_RUN(repeatable);
    MD_RUN(cluster_grid_in_graphs);
    MD_RUN(rebuild_rule);
    MD_RUN(capacity_overflow);
    MD_RUN(bad_input);
    MD_RUN(nve);
    MD_RUN(rdf_cell_rung);
    MD_RUN(registry_holds_nb_kernels);
    return md_test_summary();
}
