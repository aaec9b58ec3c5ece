/* Tests of md_cuda.cu.h's nb section: the MD state, GPU cell lists, the nonbonded rungs, the
 * neighbour search, velocity Verlet, and the RDF's cell-list rung.
 *
 * Host tests (no GPU needed):
 *   - pair_fast_accuracy: the cluster rungs' pair arithmetic (md_cuda_nb_pair_fast with its
 *     fitted Ewald polynomials) against double precision with libm's erfc, 20000 random pairs
 *     (seed 11). Tolerance 2e-6 of the pair's largest term for F/r, 2e-6 for the energies:
 *     the polynomial fit is 3e-7, float rounding of a dozen operations about 1e-6.
 *   - cluster_search_on_host: the cluster-pair search (the same __host__ __device__ predicates
 *     the kernel calls: md__cell_key, md__nb_sc_fill, md__nb_sc_reach, md__nb_cand_imask,
 *     md__nb_cand_masks) run on the CPU for water boxes, after moving atoms without a new sort
 *     (the escape path), in a small box (minimum image per pair) and for warps of 8, 16 and 32
 *     lanes: every non-excluded pair with float r^2 < rc^2 must be computed exactly once with
 *     its minimum image, no excluded pair ever, and the kernel's arithmetic on that list must
 *     give the double-precision forces (tolerance below). It also prints the cluster efficiency.
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
 *   - rdf_cell_rung: MD_RDF_GPU_CELL counts equal md_rdf_accumulate's exactly (A = B, A != B).
 * MD_SANITIZE=1 shrinks every system and the NVE run. Seeds: 11, 21, 22, 23, 31. */
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

/* md_cuda_nb_pair_fast (on the host: rsqrt = 1 / sqrtf) vs double. */
static void pair_fast_accuracy(void) {
    md_nb_params p, r;
    md_cuda_nb_fast c;
    md_rng g;
    double fit, worst_f = 0.0, worst_e = 0.0;
    int k;
    memset(&p, 0, sizeof p);
    MD_CHECK_OK(md_nb_params_resolve(&p, &r));
    md__nb_fast_make(&r, &c, &fit);
    MD_CHECKF(fit < MD_CUDA_NB_EWALD_MAX_FIT_ERROR, "fit error %.2e", fit);
    md_rng_seed(&g, 11);
    for (k = 0; k < 20000; k++) {
        const double rr = 0.1 + (r.cutoff - 0.1) * md_rng_uniform(&g), r2 = rr * rr, b = r.ewald_beta;
        const double qi = 2.0 * md_rng_uniform(&g) - 1.0, qj = 2.0 * md_rng_uniform(&g) - 1.0;
        const double c6 = 1e-3 * md_rng_uniform(&g), c12 = 1e-6 * md_rng_uniform(&g), rc = r.cutoff;
        const float qqf = (float)(qi * MD_COULOMB) * (float)qj, r2f = (float)r2;
        float el, ec, fs;
        double qq = (double)qqf, ir6 = 1.0 / (r2 * r2 * r2), flj, fc, elj, ecl, scale;
        fs = md_cuda_nb_pair_fast(&c, r2f, 1.0f / sqrtf(r2f), qqf, 6.0f * (float)c6, 12.0f * (float)c12, 1, &el, &ec);
        flj = (12.0 * c12 * ir6 * ir6 - 6.0 * c6 * ir6) / r2;
        fc = qq * (erfc(b * rr) / rr + 2.0 * b / sqrt(3.14159265358979) * exp(-b * b * r2)) / r2;
        elj = c12 * (ir6 * ir6 - pow(rc, -12.0)) - c6 * (ir6 - pow(rc, -6.0));
        ecl = qq * erfc(b * rr) / rr;
        scale = fabs(12.0 * c12 * ir6 * ir6 / r2) + fabs(6.0 * c6 * ir6 / r2) + fabs(qq / (rr * r2));
        worst_f = fmax(worst_f, fabs(fs - (flj + fc)) / scale);
        scale = fabs(c12 * ir6 * ir6) + fabs(c6 * ir6) + fabs(qq / rr);
        worst_e = fmax(worst_e, fmax(fabs(el - elj), fabs(ec - ecl)) / scale);
    }
    printf("  Ewald fit error %.2e; pair F/r error %.2e, energy error %.2e (of the terms' magnitudes)\n", fit, worst_f,
           worst_e);
    MD_CHECKF(worst_f < 2e-6, "F/r error %.3e", worst_f);
    MD_CHECKF(worst_e < 2e-6, "energy error %.3e", worst_e);
}

/* The host run of the cluster search: sort, clusters, boxes, search, the prune of the first
 * evaluation, then the kernel's pair arithmetic on the pruned list. Positions in s (caller
 * order); `move` > 0 moves every atom by up to that much per axis after the sort (seed 21), as
 * between sorts in a run; `move2` > 0 moves them again after the prune (seed 22), as between
 * list builds (keep it below buffer / (2 sqrt 3) so no atom moves more than half the buffer). */
struct host_result {
    long long computed, pruned, in_cutoff, entries, masked, borderline;
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
    md__cell_grid_make(s0->box, rlistd, (int)(2 * cells + 64), n, &g);
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
    for (size_t q = 0; q < sc.size(); q++) {
        md__nb_sc_data dd;
        int kmin[3], kmax[3];
        for (int s2 = 0; s2 < S; s2++) md__nb_sc_fill(&dd, s2, sc[q], ci.data(), bb.data(), exn.data(), exl.data(), stride, cj);
        const int minimg = md__nb_sc_reach(dd, sc[q].y, g, reach, kmin, kmax);
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
                        im = md__nb_cand_imask(dd, sc[q].y, jf, jc, bl, bh, minimg, g, rl2);
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
    printf("  small box (%.3f nm): %d of %d super-clusters with the minimum image, force error %.2e\n", s.box[0], r.minimg,
           r.nsc, r.ferr);
    MD_CHECK(r.minimg == r.nsc && r.ferr < 5e-4);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    /* 4. chains: exclusions other than water's, 6 LJ types */
    MD_CHECK_OK(chains(&s, &t, &lj, 3.2, 31));
    MD_CHECKF(host_cluster_run(&s, &t, &lj, &p, 4, 0.01, half, &r, 1), "chains: the list is wrong");
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
               "%lld computed, %lld after the prune: cluster efficiency %.3f, %.3f after the prune\n",
               s.n, r.entries, r.in_cutoff, r.borderline, r.computed, r.pruned, (double)r.in_cutoff / r.computed,
               (double)r.in_cutoff / r.pruned);
        md_system_free(&s);
        md_topology_free(&t);
        md_lj_table_free(&lj);
    }
}

int main(void) {
    const char *san = getenv("MD_SANITIZE");
    sanitize = san && san[0] == '1';
    MD_RUN(pair_fast_accuracy);
    MD_RUN(cluster_search_on_host);
    return md_test_summary();
}
