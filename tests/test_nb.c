/* Tests of md.h's ff, nblist, nb, integrate and build sections: LJ tables, topologies
 * and exclusions, the float functions shared with the GPU, fixed point, cell and Verlet
 * lists, every CPU nonbonded rung, finite-difference forces and virial, NVE energy
 * conservation, the water and LJ builders, and the error paths.
 * reference/check_nb.py compares the same code with the numpy reference.
 * Seeds used: 5, 11, 23, 77 (chain systems), 1 and 2 (water boxes), 3 (argon velocities),
 * 4242 (random floats). */
#define MD_IMPLEMENTATION
#define PI 3.14159265358979323846
#include "md.h"
#include "md_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1 /* shorter runs under AddressSanitizer (tests/run.sh's asan pass) */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* ---- a random molecular system: four-atom chains and free atoms ---- */

typedef struct chain_sys {
    md_system s;
    md_topology t;
    md_lj_table lj;
} chain_sys;

static void chain_sys_free(chain_sys *c) {
    md_system_free(&c->s);
    md_topology_free(&c->t);
    md_lj_table_free(&c->lj);
}

/* nmol chains (bond 0.12 nm, random directions) and nfree free atoms, no two atoms of
 * different molecules closer than 0.25 nm, three LJ types (one NBFIX pair), charges in
 * [-0.8, 0.8] made neutral, exclusions from the bonds with 1-4 pairs scaled. */
static md_status make_chains(chain_sys *c, int nmol, int nfree, const double box[3], uint64_t seed) {
    static const double sig[3] = {0.30, 0.34, 0.25}, eps[3] = {0.65, 0.40, 0.20};
    md_rng rng;
    int *bond, nb = 0, placed = 0, m, a, k;
    double mean = 0;
    md_status st;
    memset(c, 0, sizeof *c);
    if ((st = md_system_alloc(&c->s, 4 * nmol + nfree)) != MD_OK) return st;
    bond = (int *)malloc(sizeof(int) * 6 * (size_t)(nmol + 1));
    md_rng_seed(&rng, seed);
    for (m = 0; m < nmol + nfree; m++) {
        int size = m < nmol ? 4 : 1, tries;
        for (tries = 0; tries < 100000; tries++) {
            double p[4][3];
            int ok = 1, b;
            for (k = 0; k < 3; k++) p[0][k] = box[k] * md_rng_uniform(&rng);
            for (a = 1; a < size; a++) {
                double v[3], nn = 0;
                for (k = 0; k < 3; k++) {
                    v[k] = md_rng_normal(&rng);
                    nn += v[k] * v[k];
                }
                for (k = 0; k < 3; k++) p[a][k] = p[a - 1][k] + 0.12 * v[k] / sqrt(nn);
            }
            for (a = 0; a + 2 < size; a++) { /* keep 1-3 and 1-4 partners apart */
                double d = 0;
                for (k = 0; k < 3; k++) d += (p[a + 2][k] - p[a][k]) * (p[a + 2][k] - p[a][k]);
                if (d < 0.15 * 0.15) ok = 0;
            }
            for (a = 0; a < size && ok; a++)
                for (b = 0; b < placed && ok; b++) {
                    double d2 = 0, dd;
                    dd = p[a][0] - c->s.xyzq[b].x; dd -= box[0] * rint(dd / box[0]); d2 += dd * dd;
                    dd = p[a][1] - c->s.xyzq[b].y; dd -= box[1] * rint(dd / box[1]); d2 += dd * dd;
                    dd = p[a][2] - c->s.xyzq[b].z; dd -= box[2] * rint(dd / box[2]); d2 += dd * dd;
                    if (d2 < 0.25 * 0.25) ok = 0;
                }
            if (!ok) continue;
            for (a = 0; a < size; a++) {
                c->s.xyzq[placed + a].x = (float)p[a][0];
                c->s.xyzq[placed + a].y = (float)p[a][1];
                c->s.xyzq[placed + a].z = (float)p[a][2];
                if (a > 0) {
                    bond[2 * nb] = placed + a - 1;
                    bond[2 * nb + 1] = placed + a;
                    nb++;
                }
            }
            placed += size;
            break;
        }
    }
    for (a = 0; a < c->s.n; a++) {
        c->s.type[a] = (int)(3 * md_rng_uniform(&rng));
        c->s.xyzq[a].w = (float)(0.8 * (2 * md_rng_uniform(&rng) - 1));
        mean += c->s.xyzq[a].w;
        c->s.mass[a] = 12.011f;
    }
    for (a = 0; a < c->s.n; a++) c->s.xyzq[a].w = (float)(c->s.xyzq[a].w - mean / c->s.n);
    for (k = 0; k < 3; k++) c->s.box[k] = box[k];
    st = md_topology_from_system(&c->t, &c->s, nb, bond);
    free(bond);
    if (st != MD_OK) return st;
    if ((st = md_lj_table_create(&c->lj, 3, sig, eps, MD_LJ_COMBINE_LB)) != MD_OK) return st;
    return md_lj_table_set_pair(&c->lj, 0, 2, 0.29, 0.5);
}

static md_nb_params params_of(md_lj_mode lj, md_coul_mode coul, double cutoff, double buffer) {
    md_nb_params p;
    memset(&p, 0, sizeof p);
    p.lj = lj;
    p.coul = coul;
    p.cutoff = cutoff;
    p.buffer = buffer;
    return p;
}

static double max_abs(const double *v, size_t n) {
    double m = 0;
    size_t i;
    for (i = 0; i < n; i++)
        if (fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}

/* ---- LJ tables ---- */

/* c6 = 4 eps sigma^6 and c12 = 4 eps sigma^12 of the combined pair, computed by hand. */
static void lj_table_combination_rules(void) {
    const double sig[2] = {0.3, 0.4}, eps[2] = {0.5, 2.0};
    md_lj_table lb, geo;
    double s, e;
    MD_CHECK_OK(md_lj_table_create(&lb, 2, sig, eps, MD_LJ_COMBINE_LB));
    MD_CHECK_OK(md_lj_table_create(&geo, 2, sig, eps, MD_LJ_COMBINE_GEOMETRIC));
    s = 0.35;
    e = 1.0; /* sqrt(0.5 * 2) */
    MD_CHECK_CLOSE(lb.c6[1], 4 * e * pow(s, 6), 1e-15, 0);
    MD_CHECK_CLOSE(lb.c12[2], 4 * e * pow(s, 12), 1e-15, 0);
    MD_CHECK_CLOSE(lb.c6[3], 4 * 2.0 * pow(0.4, 6), 1e-15, 0);
    s = sqrt(0.12);
    MD_CHECK_CLOSE(geo.c6[1], 4 * e * pow(s, 6), 1e-14, 0);
    MD_CHECK_CLOSE(geo.c12[1], sqrt(geo.c12[0] * geo.c12[3]), 1e-14, 0); /* geometric c12 */
    MD_CHECK_OK(md_lj_table_set_pair(&lb, 1, 0, 0.2, 3.0));
    MD_CHECK(lb.c6[1] == lb.c6[2] && lb.c12[1] == lb.c12[2]);
    MD_CHECK_CLOSE(lb.c6[2], 12.0 * pow(0.2, 6), 1e-15, 0);
    MD_CHECK_OK(md_lj_table_set_pair_c6c12(&lb, 0, 0, 1e-3, 2e-6));
    MD_CHECK(lb.c6[0] == 1e-3 && lb.c12[0] == 2e-6);
    MD_CHECK_ERROR(md_lj_table_set_pair(&lb, 0, 2, 0.3, 1.0), MD_ERR_RANGE, "a/b");
    MD_CHECK_ERROR(md_lj_table_set_pair_c6c12(&lb, 0, 1, -1.0, 1.0), MD_ERR_RANGE, "c6");
    md_lj_table_free(&lb);
    md_lj_table_free(&geo);
    {
        const double bad_sig[2] = {0.3, -0.1}, bad_eps[2] = {0.5, NAN};
        md_lj_table t;
        memset(&t, 0x5a, sizeof t);
        MD_CHECK_ERROR(md_lj_table_create(&t, 2, bad_sig, eps, MD_LJ_COMBINE_LB), MD_ERR_RANGE, "sigma[1]");
        MD_CHECK_ERROR(md_lj_table_create(&t, 2, sig, bad_eps, MD_LJ_COMBINE_LB), MD_ERR_RANGE, "epsilon[1]");
        MD_CHECK_ERROR(md_lj_table_create(&t, 0, sig, eps, MD_LJ_COMBINE_LB), MD_ERR_INVALID_ARGUMENT, "ntypes");
        MD_CHECK(t.ntypes == 0x5a5a5a5a); /* untouched */
    }
}

/* ---- topology and exclusions ---- */

static int excluded_count(const md_topology *t, int i) { return t->excl_start[i + 1] - t->excl_start[i]; }

/* A chain 0-1-2-3-4, a 5-ring 5..9 and a 6-ring 10..15, worked out by hand: chain atom 0
 * excludes 1, 2 (and 3 unless 1-4 pairs are kept); the 5-ring has no 1-4 pairs (every
 * ring pair is 1-2 or 1-3); the 6-ring has its 3 opposite pairs as 1-4. */
static void exclusions_from_bonds(void) {
    static const int bonds[] = {0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 6, 7, 7, 8, 8, 9, 9, 5,
                                10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 10};
    md_topology t;
    md_exclusion_desc d;
    int i, k;
    MD_CHECK_OK(md_topology_alloc(&t, 16));
    MD_CHECK_OK(md_topology_set_bonds(&t, 15, bonds, NULL, NULL));
    MD_CHECK_OK(md_topology_build_exclusions(&t, NULL));
    MD_CHECK_OK(md_topology_check(&t, NULL, "test"));
    MD_CHECK(excluded_count(&t, 0) == 3 && excluded_count(&t, 2) == 4);
    MD_CHECK(md_topology_excluded(&t, 0, 3) && md_topology_excluded(&t, 3, 0) && !md_topology_excluded(&t, 0, 4));
    for (i = 5; i < 10; i++) MD_CHECK(excluded_count(&t, i) == 4);
    for (i = 10; i < 16; i++) MD_CHECK(excluded_count(&t, i) == 5);
    MD_CHECKF(t.npair14 == 2 + 3, "npair14 %d", t.npair14);
    MD_CHECK(t.pair14[0] == 0 && t.pair14[1] == 3 && t.pair14[2] == 1 && t.pair14[3] == 4);
    for (k = 2; k < 5; k++) MD_CHECK(t.pair14[2 * k] >= 10 && t.pair14[2 * k + 1] == t.pair14[2 * k] + 3);
    MD_CHECK_CLOSE(t.fudge_lj, 0.5, 0, 0);
    MD_CHECK_CLOSE(t.fudge_qq, 1 / 1.2, 1e-15, 0);
    memset(&d, 0, sizeof d);
    d.pair14 = MD_PAIR14_KEEP;
    MD_CHECK_OK(md_topology_build_exclusions(&t, &d));
    MD_CHECK(excluded_count(&t, 0) == 2 && !md_topology_excluded(&t, 0, 3) && t.npair14 == 0);
    MD_CHECK(excluded_count(&t, 10) == 4); /* the opposite 1-4 partner interacts */
    d.pair14 = MD_PAIR14_EXCLUDE;
    MD_CHECK_OK(md_topology_build_exclusions(&t, &d));
    MD_CHECK(excluded_count(&t, 0) == 3 && t.npair14 == 0 && t.fudge_lj == 0.0);
    /* a corrupted list is caught and named */
    t.excl[t.excl_start[1]] = 1;
    MD_CHECK_ERROR(md_topology_check(&t, NULL, "test"), MD_ERR_RANGE, "excl[");
    md_topology_free(&t);
    {
        static const int self[] = {0, 0}, far[] = {0, 16};
        MD_CHECK_OK(md_topology_alloc(&t, 16));
        MD_CHECK_ERROR(md_topology_set_bonds(&t, 1, self, NULL, NULL), MD_ERR_RANGE, "bond[0]");
        MD_CHECK_ERROR(md_topology_set_bonds(&t, 1, far, NULL, NULL), MD_ERR_RANGE, "bond[0]");
        MD_CHECK(t.nbond == 0 && t.bond == NULL);
        md_topology_free(&t);
    }
}

static void topology_from_system_and_names(void) {
    md_system s;
    md_topology t;
    static const char *const names[] = {"OW", "HW1", "HW2"}, *const two[] = {"OW", "HW1"};
    static const int bonds[] = {0, 1, 0, 2, 3, 4, 3, 5};
    double box[3] = {2, 2, 2};
    int i;
    MD_CHECK_OK(md_build_random_charges(&s, 6, box, 0.5, 5));
    for (i = 0; i < 6; i++) strcpy(s.name[i].s, names[i % 3]);
    MD_CHECK_OK(md_topology_from_system(&t, &s, 4, bonds));
    MD_CHECK(t.n == 6 && t.nbond == 4 && t.charge[4] == s.xyzq[4].w && t.mass[2] == s.mass[2]);
    MD_CHECK(md_topology_excluded(&t, 1, 2) && md_topology_excluded(&t, 0, 1) && !md_topology_excluded(&t, 2, 3));
    MD_CHECK_OK(md_topology_set_lj_types_by_name(&t, &s, names, 3));
    MD_CHECK(t.lj_type[0] == 0 && t.lj_type[4] == 1 && t.lj_type[5] == 2);
    MD_CHECK_ERROR(md_topology_set_lj_types_by_name(&t, &s, two, 2), MD_ERR_INVALID_ARGUMENT, "HW2");
    MD_CHECK(t.lj_type[5] == 2); /* untouched */
    for (i = 0; i < 6; i++) s.xyzq[i].w = 9.0f;
    MD_CHECK_OK(md_topology_apply_charges(&t, s.xyzq, 6));
    MD_CHECK(s.xyzq[3].w == t.charge[3]);
    md_topology_free(&t);
    md_system_free(&s);
}

/* ---- the float functions shared with the GPU, and fixed point ---- */

/* md_expf within 2e-7 relative of exp on [-30, 30]; md_erfcf within 8e-7 relative of erfc
 * on [0, 3.5] (beta r at the cutoff is 2.63 for the default Ewald tolerance, 3.46 for
 * 1e-6) and 1.5e-6 on [3.5, 4.5] (the argument of exp, -x^2 + P, is rounded to float:
 * 1e-6 relative at x^2 = 16); md_erff within 1e-6 relative on (0, 4.5]. */
static void shared_float_functions_accuracy(void) {
    double worst_e = 0, worst_c = 0, worst_c2 = 0, worst_f = 0;
    int k;
    for (k = -30000; k <= 30000; k++) {
        float x = (float)(k * 1e-3);
        double rel = fabs((double)md_expf(x) - exp((double)x)) / exp((double)x);
        if (rel > worst_e) worst_e = rel;
    }
    for (k = 0; k <= 45000; k++) {
        float x = (float)(k * 1e-4);
        double rc = fabs((double)md_erfcf(x) - erfc((double)x)) / erfc((double)x);
        if (k <= 35000 && rc > worst_c) worst_c = rc;
        if (rc > worst_c2) worst_c2 = rc;
        if (k > 0) {
            double rf = fabs((double)md_erff(x) - erf((double)x)) / erf((double)x);
            if (rf > worst_f) worst_f = rf;
        }
    }
    MD_CHECKF(worst_e < 2e-7, "md_expf relative error %.3g", worst_e);
    MD_CHECKF(worst_c < 8e-7 && worst_c2 < 1.5e-6, "md_erfcf relative error %.3g (to 3.5), %.3g (to 4.5)", worst_c, worst_c2);
    MD_CHECKF(worst_f < 1e-6, "md_erff relative error %.3g", worst_f);
}

/* Rounding to nearest (ties to even), exact negation, NaN and overflow to the sentinel,
 * and sums that do not depend on the order of their terms. */
static void fixed_point_conversion(void) {
    const float s = (float)MD_FORCE_FIXED_SCALE;
    md_rng rng;
    md_fixed fwd = 0, bwd = 0;
    float v[1000];
    int i;
    MD_CHECK(md_fixed_from_float(1.0f, s) == 4294967296ULL);
    MD_CHECK(md_fixed_from_float(-1.0f, s) == (md_fixed)0 - 4294967296ULL);
    MD_CHECK(md_fixed_from_float(0.5f / s, s) == 0 && md_fixed_from_float(1.5f / s, s) == 2); /* ties to even */
    MD_CHECK(md_fixed_from_float(NAN, s) == MD_FIXED_INVALID);
    MD_CHECK(md_fixed_from_float(3e9f, s) == MD_FIXED_INVALID && md_fixed_from_float(-3e9f, s) == MD_FIXED_INVALID);
    MD_CHECK(md_fixed_to_double(md_fixed_from_float(-1234.5f, s), MD_FORCE_FIXED_SCALE) == -1234.5);
    MD_CHECK(md_fixed_to_double(MD_FIXED_INVALID, 1.0) == -9223372036854775808.0);
    md_rng_seed(&rng, 4242);
    for (i = 0; i < 1000; i++) {
        v[i] = (float)(1e3 * md_rng_normal(&rng));
        MD_CHECK(md_fixed_from_float(-v[i], s) == (md_fixed)0 - md_fixed_from_float(v[i], s));
    }
    for (i = 0; i < 1000; i++) fwd += md_fixed_from_float(v[i], s);
    for (i = 999; i >= 0; i--) bwd += md_fixed_from_float(v[i], s);
    MD_CHECK(fwd == bwd);
}

/* md_nb_pair_f32 against md_nb_compute's double formulas: one pair of a two-atom system per
 * mode at 8 distances, the force and the energies within 2e-6 of the sum of the magnitudes
 * of their terms (LJ repulsion, dispersion and Coulomb cancel; float arithmetic and the
 * erfc fit's 1.2e-7 err relative to each term). */
static void float_pair_matches_double(void) {
    static const md_lj_mode ljm[3] = {MD_LJ_TRUNCATE, MD_LJ_POTENTIAL_SHIFT, MD_LJ_FORCE_SWITCH};
    static const md_coul_mode cm[3] = {MD_COUL_EWALD, MD_COUL_CUTOFF, MD_COUL_REACTION_FIELD};
    const double sig = 0.32, eps = 0.7, box[3] = {3, 3, 3};
    md_lj_table lj;
    md_topology t;
    md_float4 x[2];
    int a, b, k;
    MD_CHECK_OK(md_lj_table_create(&lj, 1, &sig, &eps, MD_LJ_COMBINE_LB));
    MD_CHECK_OK(md_topology_alloc(&t, 2));
    for (a = 0; a < 3; a++)
        for (b = 0; b < 3; b++)
            for (k = 0; k < 8; k++) {
                md_nb_params p = params_of(ljm[a], cm[b], 1.0, 0.1);
                md_nb_plan plan;
                md_nb_coeffs co;
                md_energy e;
                double f[6];
                float r = 0.29f + 0.09f * (float)k, elj, ec, fs; /* 0.29 .. 0.92 nm: both sides of the switch */
                double fterms;
                x[0].x = 0.3f; x[0].y = 0.4f; x[0].z = 0.5f; x[0].w = 0.6f;
                x[1] = x[0];
                x[1].x += r;
                x[1].w = -0.45f;
                r = x[1].x - x[0].x;
                MD_CHECK_OK(md_nb_plan_create(&plan, &p, 2));
                MD_CHECK_OK(md_nb_coeffs_make(&p, &co));
                MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &t, &lj, x, box, f, &e));
                fs = md_nb_pair_f32(&co, r * r, md__fmul(x[0].w, x[1].w), (float)lj.c6[0], (float)lj.c12[0], &elj, &ec);
                /* the scale of the rounding: the magnitudes of the terms, which cancel in F */
                fterms = 12 * lj.c12[0] / pow(r, 13) + 6 * lj.c6[0] / pow(r, 7) + 2 * MD_COULOMB * 0.27 / (r * r);
                MD_CHECKF(fabs(-fs * r - f[0]) <= 2e-6 * fterms, "lj %d coul %d r %g: F %.9g vs %.9g", a, b, r, -fs * r, f[0]);
                MD_CHECK_CLOSE(elj, e.lj, 0, 2e-6 * (lj.c12[0] / pow(r, 12) + lj.c6[0] / pow(r, 6)));
                MD_CHECK_CLOSE(ec, e.coul_real, 2e-6, 1e-9);
                md_nb_plan_free(&plan);
            }
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- lists ---- */

/* Every row of the half and full Verlet lists equals the brute-force set of partners
 * within rlist (double minimum image), without exclusions, sorted; the cell list holds
 * every atom once, each in the cell of its wrapped position. */
static void verlet_lists_equal_brute_force(void) {
    const double box[3] = {2.3, 2.5, 2.7};
    chain_sys c;
    md_cell_list cl;
    md_verlet_list half, full;
    int i, j, f;
    int *seen;
    MD_CHECK_OK(make_chains(&c, 60, 40, box, 11));
    c.s.xyzq[3].x += 2.3f; /* outside the box: wrapped for binning */
    c.s.xyzq[50].z -= 5.4f;
    memset(&cl, 0, sizeof cl);
    memset(&half, 0, sizeof half);
    memset(&full, 0, sizeof full);
    MD_CHECK_OK(md_cell_list_build(&cl, c.s.xyzq, c.s.n, box, 0.55));
    MD_CHECK(cl.dim[0] == 4 && cl.dim[1] == 4 && cl.dim[2] == 4 && cl.start[64] == c.s.n);
    seen = (int *)calloc((size_t)c.s.n, sizeof(int));
    for (i = 0; i < c.s.n; i++) seen[cl.atom[i]]++;
    for (i = 0; i < c.s.n; i++) MD_CHECK(seen[i] == 1);
    free(seen);
    for (f = 0; f < 2; f++) {
        md_verlet_list *vl = f ? &full : &half;
        MD_CHECK_OK(md_verlet_list_build(vl, &cl, c.s.xyzq, c.s.n, box, 1.1, f, &c.t));
        for (i = 0; i < c.s.n; i++) {
            int m = vl->start[i];
            for (j = f ? 0 : i + 1; j < c.s.n; j++) {
                double d[3], r2 = 0;
                int k;
                if (j == i || md_topology_excluded(&c.t, i, j)) continue;
                d[0] = (double)c.s.xyzq[i].x - c.s.xyzq[j].x;
                d[1] = (double)c.s.xyzq[i].y - c.s.xyzq[j].y;
                d[2] = (double)c.s.xyzq[i].z - c.s.xyzq[j].z;
                for (k = 0; k < 3; k++) {
                    d[k] -= box[k] * rint(d[k] / box[k]);
                    r2 += d[k] * d[k];
                }
                if (r2 < 1.1 * 1.1) {
                    MD_CHECKF(m < vl->start[i + 1] && vl->j[m] == j, "full %d row %d: missing or extra partner near %d", f, i, j);
                    m++;
                }
            }
            MD_CHECKF(m == vl->start[i + 1], "full %d row %d: extra partners", f, i);
        }
    }
    MD_CHECK(full.npairs == 2 * half.npairs && half.npairs > 1000);
    MD_CHECK_ERROR(md_verlet_list_build(&half, &cl, c.s.xyzq, c.s.n, box, 1.2, 0, &c.t), MD_ERR_RANGE, "rlist");
    md_cell_list_free(&cl);
    md_verlet_list_free(&half);
    md_verlet_list_free(&full);
    chain_sys_free(&c);
}

/* ---- the rungs ---- */

typedef struct run_out {
    double *f;
    md_energy e;
} run_out;

static md_status run_rung(md_nb_variant v, const md_nb_params *p, const chain_sys *c, const md_float4 *x, double *f,
                          md_energy *e) {
    md_nb_plan plan;
    md_status st = md_nb_plan_create(&plan, p, c->s.n);
    if (st != MD_OK) return st;
    st = md_nb_compute(v, &plan, &c->t, &c->lj, x, c->s.box, f, e);
    md_nb_plan_free(&plan);
    return st;
}

/* All double rungs (all pairs, cell list, half and full Verlet) agree to 1e-12 relative
 * (same pairs, same double arithmetic, only the order of the sums differs): energies
 * relative to the largest |term|, forces to the largest force. The fixed-point rung
 * agrees to float rounding: forces within 2e-5 of the largest force, energies within
 * 2e-5 of the largest |term|. Every mode combination, on a chain system with
 * exclusions and 1-4 pairs and on a water box. Newton's third law: the double forces sum
 * to < 1e-10 of the largest force, the fixed-point ones to exactly 0. */
static void rungs_agree(void) {
    static const md_lj_mode ljm[4] = {MD_LJ_POTENTIAL_SHIFT, MD_LJ_TRUNCATE, MD_LJ_FORCE_SWITCH, MD_LJ_NONE};
    static const md_coul_mode cm[4] = {MD_COUL_EWALD, MD_COUL_CUTOFF, MD_COUL_REACTION_FIELD, MD_COUL_NONE};
    const double box[3] = {2.6, 2.8, 3.0};
    chain_sys c, w;
    md_water_desc wd;
    double *ref, *f;
    int sysno, a, b, v, i;
    MD_CHECK_OK(make_chains(&c, 70, 60, box, 23));
    memset(&wd, 0, sizeof wd);
    wd.molecules = 400;
    wd.seed = 1;
    memset(&w, 0, sizeof w);
    MD_CHECK_OK(md_build_water_box(&w.s, &w.t, &w.lj, &wd));
    ref = (double *)malloc(sizeof(double) * 3 * 1200);
    f = (double *)malloc(sizeof(double) * 3 * 1200);
    for (sysno = 0; sysno < 2; sysno++) {
        const chain_sys *s = sysno ? &w : &c;
        const size_t n3 = 3 * (size_t)s->s.n;
        for (a = 0; a < 4; a++)
            for (b = 0; b < 4; b++) {
                md_nb_params p = params_of(ljm[a], cm[b], 0.9, 0.1);
                md_energy e0, e;
                double fmax, emax, sum[3] = {0, 0, 0};
                p.dispersion_correction = 1;
                MD_CHECK_OK(run_rung(MD_NB_CPU_ALL_PAIRS, &p, s, s->s.xyzq, ref, &e0));
                fmax = max_abs(ref, n3);
                emax = fabs(e0.lj) + fabs(e0.coul_real) + fabs(e0.coul_excl) + fabs(e0.lj14) + fabs(e0.coul14) + 1.0;
                for (i = 0; i < s->s.n; i++) {
                    sum[0] += ref[3 * i];
                    sum[1] += ref[3 * i + 1];
                    sum[2] += ref[3 * i + 2];
                }
                MD_CHECKF(max_abs(sum, 3) <= 1e-10 * fmax * s->s.n, "system %d modes %d %d: sum of forces %g", sysno, a, b, max_abs(sum, 3));
                for (v = MD_NB_CPU_CELL_LIST; v <= MD_NB_CPU_FIXED; v++) {
                    double tol = v == MD_NB_CPU_FIXED ? 2e-5 : 1e-12, df = 0;
                    size_t k;
                    MD_CHECK_OK(run_rung((md_nb_variant)v, &p, s, s->s.xyzq, f, &e));
                    for (k = 0; k < n3; k++)
                        if (fabs(f[k] - ref[k]) > df) df = fabs(f[k] - ref[k]);
                    MD_CHECKF(df <= tol * fmax, "system %d modes %d %d rung %s: max |dF| %.3g of %.3g", sysno, a, b,
                               md_nb_variant_name((md_nb_variant)v), df, fmax);
                    MD_CHECKF(fabs(e.lj - e0.lj) <= tol * emax && fabs(e.coul_real - e0.coul_real) <= tol * emax &&
                                   fabs(e.coul_excl - e0.coul_excl) <= tol * emax && fabs(e.lj14 - e0.lj14) <= tol * emax &&
                                   fabs(e.coul14 - e0.coul14) <= tol * emax,
                               "system %d modes %d %d rung %s: energies differ (lj %.12g vs %.12g, coul %.12g vs %.12g)",
                               sysno, a, b, md_nb_variant_name((md_nb_variant)v), e.lj, e0.lj, e.coul_real, e0.coul_real);
                    MD_CHECK(e.coul_self == e0.coul_self && e.lj_dispersion == e0.lj_dispersion);
                    for (k = 0; k < 9; k++)
                        MD_CHECKF(fabs(e.virial[k] - e0.virial[k]) <= tol * (max_abs(e0.virial, 9) + emax),
                                   "virial[%d] %.12g vs %.12g", (int)k, e.virial[k], e0.virial[k]);
                }
            }
    }
    free(ref);
    free(f);
    chain_sys_free(&c);
    chain_sys_free(&w);
}

/* The fixed-point rung's raw sums are bitwise the same with a different Verlet list
 * (buffer 0.1 vs 0.3), with the atoms in reverse order (topology rebuilt from the
 * reversed bonds), and sum to exactly zero (Newton's third law in integers). */
static void fixed_rung_bitwise_invariant(void) {
    const double box[3] = {2.6, 2.8, 3.0};
    chain_sys c, r;
    md_nb_params p = params_of(MD_LJ_POTENTIAL_SHIFT, MD_COUL_EWALD, 0.9, 0.1);
    md_nb_plan p1, p2, p3;
    md_fixed sum[3] = {0, 0, 0};
    int *bond, i, k, n;
    MD_CHECK_OK(make_chains(&c, 70, 60, box, 23));
    n = c.s.n;
    MD_CHECK_OK(md_nb_plan_create(&p1, &p, n));
    p.buffer = 0.3;
    MD_CHECK_OK(md_nb_plan_create(&p2, &p, n));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_FIXED, &p1, &c.t, &c.lj, c.s.xyzq, box, NULL, NULL));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_FIXED, &p2, &c.t, &c.lj, c.s.xyzq, box, NULL, NULL));
    MD_CHECK(p1.list.npairs < p2.list.npairs);
    MD_CHECK(memcmp(p1.fixed_force, p2.fixed_force, 3 * (size_t)n * sizeof(md_fixed)) == 0);
    MD_CHECK(memcmp(p1.fixed_energy, p2.fixed_energy, sizeof p1.fixed_energy) == 0);
    MD_CHECK(memcmp(p1.fixed_virial, p2.fixed_virial, sizeof p1.fixed_virial) == 0);
    for (i = 0; i < n; i++)
        for (k = 0; k < 3; k++) sum[k] += p1.fixed_force[3 * i + k];
    MD_CHECK(sum[0] == 0 && sum[1] == 0 && sum[2] == 0);
    /* reversed atom order */
    memset(&r, 0, sizeof r);
    MD_CHECK_OK(md_system_alloc(&r.s, n));
    for (i = 0; i < n; i++) {
        r.s.xyzq[i] = c.s.xyzq[n - 1 - i];
        r.s.type[i] = c.s.type[n - 1 - i];
        r.s.mass[i] = c.s.mass[n - 1 - i];
    }
    for (k = 0; k < 3; k++) r.s.box[k] = box[k];
    bond = (int *)malloc(sizeof(int) * 2 * (size_t)c.t.nbond);
    for (i = 0; i < 2 * c.t.nbond; i++) bond[i] = n - 1 - c.t.bond[i];
    MD_CHECK_OK(md_topology_from_system(&r.t, &r.s, c.t.nbond, bond));
    free(bond);
    MD_CHECK(r.t.npair14 == c.t.npair14 && r.t.npair14 > 0);
    p.buffer = 0.1;
    MD_CHECK_OK(md_nb_plan_create(&p3, &p, n));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_FIXED, &p3, &r.t, &c.lj, r.s.xyzq, box, NULL, NULL));
    for (i = 0; i < n; i++)
        for (k = 0; k < 3; k++)
            MD_CHECKF(p3.fixed_force[3 * (n - 1 - i) + k] == p1.fixed_force[3 * i + k], "atom %d axis %d", i, k);
    MD_CHECK(memcmp(p1.fixed_energy, p3.fixed_energy, sizeof p1.fixed_energy) == 0);
    MD_CHECK(memcmp(p1.fixed_virial, p3.fixed_virial, sizeof p1.fixed_virial) == 0);
    md_nb_plan_free(&p1);
    md_nb_plan_free(&p2);
    md_nb_plan_free(&p3);
    md_topology_free(&r.t);
    md_system_free(&r.s);
    chain_sys_free(&c);
}

/* ---- physics checks ---- */

/* Forces equal minus the central finite difference of the energy (double all-pairs rung).
 * Coordinates move by h = 2^-12 nm, exact in float at these magnitudes, so the
 * difference is exactly 2h. Modes with a continuous energy (potential shift or force
 * switch; Ewald, reaction field, and Coulomb off), with exclusions, 1-4 pairs and the
 * Ewald correction; every axis of 12 atoms. Tolerance: 1e-6 of the largest force plus
 * 1e-5 of the component (the O(h^2) error of the difference is about (h / r)^2 ~ 1e-6). */
static void forces_are_minus_energy_gradient(void) {
    static const md_lj_mode ljm[3] = {MD_LJ_POTENTIAL_SHIFT, MD_LJ_FORCE_SWITCH, MD_LJ_POTENTIAL_SHIFT};
    static const md_coul_mode cm[3] = {MD_COUL_EWALD, MD_COUL_REACTION_FIELD, MD_COUL_NONE};
    const double box[3] = {2.2, 2.3, 2.4}, h = 1.0 / 4096.0;
    chain_sys c;
    double *f;
    int m, a, k;
    MD_CHECK_OK(make_chains(&c, 40, 30, box, 77));
    f = (double *)malloc(sizeof(double) * 3 * (size_t)c.s.n);
    for (m = 0; m < 3; m++) {
        md_nb_params p = params_of(ljm[m], cm[m], 0.9, 0.1);
        md_nb_plan plan;
        md_energy e;
        double fmax;
        p.epsilon_rf = 60.0;
        MD_CHECK_OK(md_nb_plan_create(&plan, &p, c.s.n));
        MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e));
        fmax = max_abs(f, 3 * (size_t)c.s.n);
        for (a = 0; a < c.s.n; a += c.s.n / 12)
            for (k = 0; k < 3; k++) {
                float *x = k == 0 ? &c.s.xyzq[a].x : (k == 1 ? &c.s.xyzq[a].y : &c.s.xyzq[a].z);
                float x0 = *x;
                md_energy ep, em;
                double fd;
                *x = (float)(x0 + h);
                MD_CHECK((double)*x - x0 == h);
                MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, box, NULL, &ep));
                *x = (float)(x0 - h);
                MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, box, NULL, &em));
                *x = x0;
                fd = -(md_energy_potential(&ep) - md_energy_potential(&em)) / (2 * h);
                MD_CHECKF(fabs(fd - f[3 * a + k]) <= 1e-6 * fmax + 1e-5 * fabs(fd),
                           "mode %d atom %d axis %d: force %.9g, -dE/dx %.9g", m, a, k, f[3 * a + k], fd);
            }
        md_nb_plan_free(&plan);
    }
    free(f);
    chain_sys_free(&c);
}

/* The virial's diagonal equals -L_a dE/dL_a: scaling the x coordinates and the box edge
 * by 1 +- 1e-3 changes the energy by -+ W_xx 1e-3 (central difference). Continuous
 * energies only (shift or switch, reaction field), with exclusions and 1-4 pairs. The
 * scaled coordinates are rounded to float (about 1e-7 nm), so the tolerance is 2e-3 of
 * |W_aa| plus 2e-3 of the sum |W_xx| + |W_yy| + |W_zz|. The off-diagonal entries are
 * symmetric (central forces) to 1e-12. */
static void virial_matches_box_scaling(void) {
    const double box[3] = {2.2, 2.3, 2.4}, eps = 1e-3;
    chain_sys c;
    md_float4 *x;
    int m, a, i;
    MD_CHECK_OK(make_chains(&c, 40, 30, box, 77));
    x = (md_float4 *)malloc(sizeof(md_float4) * (size_t)c.s.n);
    for (m = 0; m < 2; m++) {
        md_nb_params p = params_of(m ? MD_LJ_FORCE_SWITCH : MD_LJ_POTENTIAL_SHIFT, MD_COUL_REACTION_FIELD, 0.9, 0.1);
        md_nb_plan plan;
        md_energy e, ep, em;
        double scale_sum;
        p.epsilon_rf = m ? 0.0 : 78.3;
        MD_CHECK_OK(md_nb_plan_create(&plan, &p, c.s.n));
        MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, box, NULL, &e));
        scale_sum = fabs(e.virial[0]) + fabs(e.virial[4]) + fabs(e.virial[8]);
        for (a = 0; a < 3; a++) {
            double bp[3] = {box[0], box[1], box[2]}, bm[3] = {box[0], box[1], box[2]}, dw;
            bp[a] *= 1 + eps;
            bm[a] *= 1 - eps;
            for (i = 0; i < c.s.n; i++) {
                x[i] = c.s.xyzq[i];
                if (a == 0) x[i].x = (float)(x[i].x * (1 + eps));
                if (a == 1) x[i].y = (float)(x[i].y * (1 + eps));
                if (a == 2) x[i].z = (float)(x[i].z * (1 + eps));
            }
            MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, x, bp, NULL, &ep));
            for (i = 0; i < c.s.n; i++) {
                x[i] = c.s.xyzq[i];
                if (a == 0) x[i].x = (float)(x[i].x * (1 - eps));
                if (a == 1) x[i].y = (float)(x[i].y * (1 - eps));
                if (a == 2) x[i].z = (float)(x[i].z * (1 - eps));
            }
            MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, x, bm, NULL, &em));
            dw = -(md_energy_potential(&ep) - md_energy_potential(&em)) / (2 * eps);
            MD_CHECKF(fabs(dw - e.virial[4 * a]) <= 2e-3 * (fabs(e.virial[4 * a]) + scale_sum),
                       "mode %d axis %d: W %.9g, -L dE/dL %.9g", m, a, e.virial[4 * a], dw);
        }
        MD_CHECK_CLOSE(e.virial[1], e.virial[3], 1e-12, 1e-12 * scale_sum);
        MD_CHECK_CLOSE(e.virial[2], e.virial[6], 1e-12, 1e-12 * scale_sum);
        MD_CHECK_CLOSE(e.virial[5], e.virial[7], 1e-12, 1e-12 * scale_sum);
        md_nb_plan_free(&plan);
    }
    free(x);
    chain_sys_free(&c);
}

/* The dispersion correction of a one-type fluid against a numerical integral of the plain
 * LJ tail: E = (N^2 / 2V) int_rc^inf 4 pi r^2 u(r) dr with the mean over N (N+1)/2
 * pairs (factor N (N+1) / N^2 on the single-type means cancels: <c> = c), and
 * W_aa = (N^2 / 2V) int 4 pi r^2 (-r u'(r)) / 3 dr; Simpson on [rc, 60 rc] in 1/r, 1e-9. */
static void dispersion_correction_matches_integral(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_nb_params p;
    double e, w, ie = 0, iw = 0, rc = 0.85, c6, c12, V, N;
    int k, K = 20000;
    MD_CHECK_OK(md_build_lj_fluid(&s, &t, &lj, NULL));
    memset(&p, 0, sizeof p);
    p.cutoff = rc;
    p.dispersion_correction = 1;
    MD_CHECK_OK(md_nb_params_resolve(&p, &p));
    MD_CHECK_OK(md_nb_dispersion_correction(&p, &t, &lj, s.box, &e, &w));
    c6 = lj.c6[0];
    c12 = lj.c12[0];
    V = s.box[0] * s.box[1] * s.box[2];
    N = s.n;
    /* substitute y = rc / r in (0, 1]: dr = -rc / y^2 dy */
    for (k = 0; k <= K; k++) {
        double y = (double)k / K, wt = (k == 0 || k == K) ? 1 : (k % 2 ? 4 : 2), r, u, ru;
        if (k == 0) continue; /* the integrands vanish as y -> 0 */
        r = rc / y;
        u = c12 / pow(r, 12) - c6 / pow(r, 6);
        ru = 12 * c12 / pow(r, 12) - 6 * c6 / pow(r, 6); /* -r u'(r) */
        ie += wt * 4 * PI * r * r * u * rc / (y * y);
        iw += wt * 4 * PI * r * r * ru / 3 * rc / (y * y);
    }
    ie *= 1.0 / (3 * K) * N * N / (2 * V);
    iw *= 1.0 / (3 * K) * N * N / (2 * V);
    MD_CHECK_CLOSE(e, ie, 1e-9, 0);
    MD_CHECK_CLOSE(w, iw, 1e-9, 0);
    MD_CHECK(e < 0 && w < 0);
    p.dispersion_correction = 0;
    MD_CHECK_OK(md_nb_dispersion_correction(&p, &t, &lj, s.box, &e, &w));
    MD_CHECK(e == 0 && w == 0);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* Translating every atom by (0.375, -1.25, 2.5) nm changes nothing but float rounding of
 * the coordinates (about 2e-7 nm): energies within 1e-6 relative, forces within 1e-5 of
 * the largest force. */
static void translation_invariance(void) {
    const double box[3] = {2.6, 2.8, 3.0};
    chain_sys c;
    md_nb_params p = params_of(MD_LJ_POTENTIAL_SHIFT, MD_COUL_EWALD, 0.9, 0.1);
    md_float4 *x;
    double *f0, *f1, fmax;
    md_energy e0, e1;
    int i, n;
    MD_CHECK_OK(make_chains(&c, 70, 60, box, 23));
    n = c.s.n;
    x = (md_float4 *)malloc(sizeof(md_float4) * (size_t)n);
    f0 = (double *)malloc(sizeof(double) * 3 * (size_t)n);
    f1 = (double *)malloc(sizeof(double) * 3 * (size_t)n);
    for (i = 0; i < n; i++) {
        x[i] = c.s.xyzq[i];
        x[i].x += 0.375f;
        x[i].y -= 1.25f;
        x[i].z += 2.5f;
    }
    MD_CHECK_OK(run_rung(MD_NB_CPU_VERLET, &p, &c, c.s.xyzq, f0, &e0));
    MD_CHECK_OK(run_rung(MD_NB_CPU_VERLET, &p, &c, x, f1, &e1));
    fmax = max_abs(f0, 3 * (size_t)n);
    for (i = 0; i < 3 * n; i++) MD_CHECK_CLOSE(f1[i], f0[i], 0, 1e-5 * fmax);
    MD_CHECK_CLOSE(md_energy_potential(&e1), md_energy_potential(&e0), 1e-6, 0);
    free(x);
    free(f0);
    free(f1);
    chain_sys_free(&c);
}

/* ---- lists in use: the half-buffer rebuild rule ---- */

static void rebuild_counting(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_nb_params p = params_of(MD_LJ_POTENTIAL_SHIFT, MD_COUL_NONE, 0.85, 0.1);
    md_nb_plan plan;
    double box2[3];
    int rebuilt;
    MD_CHECK_OK(md_build_lj_fluid(&s, &t, &lj, NULL));
    MD_CHECK_OK(md_nb_plan_create(&plan, &p, s.n));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &plan, &t, &lj, s.xyzq, s.box, NULL, NULL));
    MD_CHECK(plan.rebuilds == 1);
    s.xyzq[10].x += 0.049f; /* less than half the buffer: the list stays */
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &plan, &t, &lj, s.xyzq, s.box, NULL, NULL));
    MD_CHECK(plan.rebuilds == 1);
    MD_CHECK_CLOSE(plan.max_displacement, 0.049, 1e-5, 0);
    s.xyzq[20].y += (float)s.box[1]; /* a whole box length: no displacement under the minimum image */
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &plan, &t, &lj, s.xyzq, s.box, NULL, NULL));
    MD_CHECK(plan.rebuilds == 1);
    s.xyzq[10].x += 0.002f; /* now 0.051 > 0.05 from where the list was built */
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET, &plan, &t, &lj, s.xyzq, s.box, NULL, NULL));
    MD_CHECK(plan.rebuilds == 2);
    MD_CHECK_OK(md_nb_plan_update_list(&plan, &t, s.xyzq, s.box, 0, &rebuilt));
    MD_CHECK(rebuilt == 0 && plan.rebuilds == 2);
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET_FULL, &plan, &t, &lj, s.xyzq, s.box, NULL, NULL));
    MD_CHECK(plan.rebuilds == 3 && plan.list.full == 1); /* another kind of list */
    md_nb_plan_invalidate(&plan);
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET_FULL, &plan, &t, &lj, s.xyzq, s.box, NULL, NULL));
    MD_CHECK(plan.rebuilds == 4);
    box2[0] = s.box[0] * 1.001;
    box2[1] = s.box[1];
    box2[2] = s.box[2];
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_VERLET_FULL, &plan, &t, &lj, s.xyzq, box2, NULL, NULL));
    MD_CHECK(plan.rebuilds == 5); /* a new box */
    MD_CHECK(plan.calls == 7);
    md_nb_plan_free(&plan);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- NVE ---- */

/* An LJ liquid: 864 argon atoms at the md_fcc_desc default density (reduced 0.8442) started
 * from the lattice at 240 K, which melts within a picosecond and settles near 124 K
 * (reduced temperature 1.04, a liquid), with the potential-shifted LJ at rc = 0.85 nm
 * (2.5 sigma), buffer 0.1 nm, velocity Verlet with dt = 5 fs (0.0023 LJ time units).
 * After 1 ps the total energy is sampled every 10 steps for 10 ps (2000 steps; 600 under
 * a sanitizer); the least-squares drift must stay below 0.02 kJ/mol/ns per atom (measured
 * 0.002 on the double rung, 0.2% of kT per ns) and the standard deviation below 2e-4
 * kJ/mol per atom (measured 3e-5). The fixed-point rung (float pair forces) runs 600
 * steps with the same bounds (measured drift 0.004). The atoms must diffuse (mean square
 * displacement over the run > 0.02 nm^2; measured 0.17 in 10 ps and 0.04 in 3 ps, while
 * the lattice vibrates with about 0.005) and the list is
 * rebuilt far less often than every step. */
static void nve_energy_conservation(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_nb_params p = params_of(MD_LJ_POTENTIAL_SHIFT, MD_COUL_NONE, 0.85, 0.1);
    md_fcc_desc fd;
    int r;
    memset(&fd, 0, sizeof fd);
    fd.temperature = 240.0;
    fd.seed = 3;
    MD_CHECK_OK(md_build_lj_fluid(&s, &t, &lj, &fd));
    for (r = 0; r < 2; r++) {
        md_dynamics d;
        md_nb_variant v = r ? MD_NB_CPU_FIXED : MD_NB_CPU_VERLET;
        int steps = (r || SANITIZED) ? 600 : 2000, k, ns = 0, i;
        double st = 0, se = 0, stt = 0, ste = 0, see = 0, slope, sd, tt, e, t0, msd = 0, *x0;
        MD_CHECK_OK(md_dynamics_init(&d, &s, &t, &lj, &p, v, 0.005));
        t0 = md_dynamics_temperature(&d);
        MD_CHECK_CLOSE(t0, 240.0, 1e-4, 0);
        MD_CHECK_OK(md_integrate_vv(&d, 200));
        x0 = (double *)malloc(sizeof(double) * 3 * (size_t)s.n);
        memcpy(x0, d.x, sizeof(double) * 3 * (size_t)s.n);
        for (k = 0; k < steps / 10; k++) {
            MD_CHECK_OK(md_integrate_vv(&d, 10));
            tt = d.step * d.dt;
            e = md_energy_total(&d.energy) / s.n;
            st += tt;
            se += e;
            stt += tt * tt;
            ste += tt * e;
            see += e * e;
            ns++;
        }
        slope = (ns * ste - st * se) / (ns * stt - st * st); /* kJ/mol per atom per ps */
        sd = sqrt(see / ns - (se / ns) * (se / ns));
        for (i = 0; i < 3 * s.n; i++) msd += (d.x[i] - x0[i]) * (d.x[i] - x0[i]) / s.n;
        free(x0);
        printf("  %s: %lld steps of 5 fs, energy drift %.3g kJ/mol/ns per atom, sd %.3g kJ/mol per atom, "
               "%lld list builds, T %.1f K, msd %.3f nm^2\n",
               md_nb_variant_name(v), d.step, slope * 1000, sd, d.plan.rebuilds, md_dynamics_temperature(&d), msd);
        MD_CHECKF(fabs(slope * 1000) < 0.02, "%s: drift %.3g kJ/mol/ns per atom", md_nb_variant_name(v), slope * 1000);
        MD_CHECKF(sd < 2e-4, "%s: energy sd %.3g kJ/mol per atom", md_nb_variant_name(v), sd);
        MD_CHECKF(msd > 0.02, "%s: mean square displacement %.3g nm^2: not a liquid", md_nb_variant_name(v), msd);
        MD_CHECK(d.plan.rebuilds > 1 && d.plan.rebuilds < d.step / 4);
        md_dynamics_free(&d);
    }
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- builders ---- */

/* The benchmark boxes: 7,856 TIP3P waters in a 6.2 nm cube (23,568 atoms, 0.986 g/cm^3)
 * and 31,922 in a 9.9 nm cube (95,766 atoms); no intermolecular pair closer than 0.17 nm
 * (a Verlet list of radius 0.17 with the intramolecular exclusions is empty); neutral;
 * the same box twice from one seed and a different one from another. */
static void water_benchmark_boxes(void) {
    md_system s, s2;
    md_topology t, t2;
    md_lj_table lj, lj2;
    md_water_desc d;
    md_cell_list cl;
    md_verlet_list vl;
    double q = 0, dens;
    int i;
    memset(&d, 0, sizeof d);
    d.molecules = 7856;
    d.edge = 6.2;
    d.seed = 2;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &d));
    MD_CHECK(s.n == 23568 && t.nwater == 7856 && s.box[0] == 6.2 && s.box[2] == 6.2);
    dens = 7856 * (15.99943 + 2 * 1.007947) / 6.02214076e23 / (6.2 * 6.2 * 6.2 * 1e-21);
    MD_CHECK_CLOSE(dens, 0.986, 1e-3, 0);
    for (i = 0; i < s.n; i++) q += s.xyzq[i].w;
    MD_CHECK(fabs(q) < 1e-3);
    MD_CHECK(t.water[3 * 5] == 15 && t.water_doh == 0.09572 && t.nbond == 2 * 7856 && t.nangle == 7856);
    MD_CHECK(t.excl_start[s.n] == 6 * 7856 && t.npair14 == 0);
    /* the file record carries the same bonds (O < H in each pair; bond 9 is molecule 4's
     * second O-H: atoms 12 and 14) and the elements */
    MD_CHECK(s.nbond == t.nbond && memcmp(s.bond, t.bond, sizeof(int) * 2 * (size_t)t.nbond) == 0);
    MD_CHECK(s.bond[2 * 9] == 12 && s.bond[2 * 9 + 1] == 14 && strcmp(s.element[1].s, "H") == 0);
    MD_CHECK(lj.ntypes == 2 && lj.c6[1] == 0 && lj.c12[3] == 0 && lj.c6[0] > 0);
    memset(&cl, 0, sizeof cl);
    memset(&vl, 0, sizeof vl);
    MD_CHECK_OK(md_verlet_list_build(&vl, &cl, s.xyzq, s.n, s.box, 0.17, 0, &t));
    MD_CHECKF(vl.npairs == 0, "%zu intermolecular pairs closer than 0.17 nm", vl.npairs);
    MD_CHECK_OK(md_build_water_box(&s2, &t2, &lj2, &d));
    MD_CHECK(memcmp(s.xyzq, s2.xyzq, sizeof(md_float4) * (size_t)s.n) == 0);
    MD_CHECK(memcmp(s.vel, s2.vel, sizeof(md_float3) * (size_t)s.n) == 0);
    md_system_free(&s2);
    md_topology_free(&t2);
    md_lj_table_free(&lj2);
    d.seed = 3;
    MD_CHECK_OK(md_build_water_box(&s2, &t2, &lj2, &d));
    MD_CHECK(memcmp(s.xyzq, s2.xyzq, sizeof(md_float4) * (size_t)s.n) != 0);
    md_system_free(&s2);
    md_topology_free(&t2);
    md_lj_table_free(&lj2);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    md_verlet_list_free(&vl);
    md_cell_list_free(&cl);
    if (SANITIZED) return;
    d.molecules = 31922;
    d.edge = 9.9;
    d.model = MD_WATER_SPCE;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &d));
    MD_CHECK(s.n == 95766 && s.box[1] == 9.9 && t.water_doh == 0.1);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* Default sizes, velocities and the errors of the water builder and the LJ fluid. */
static void builders_defaults_and_errors(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_water_desc d;
    md_water_params w;
    double p[3] = {0, 0, 0};
    int i;
    memset(&d, 0, sizeof d);
    d.edge = 2.5;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &d));
    MD_CHECKF(s.n == 3 * 521, "%d atoms", s.n); /* 0.997 g/cm^3 * 15.625 nm^3 / 18.0153 g/mol = 520.7 molecules */
    for (i = 0; i < s.n; i++) { /* total momentum */
        p[0] += s.mass[i] * s.vel[i].x;
        p[1] += s.mass[i] * s.vel[i].y;
        p[2] += s.mass[i] * s.vel[i].z;
    }
    MD_CHECK(max_abs(p, 3) < 1e-3);
    /* translations at 300 K: kinetic energy (3M - 3)/2 kT, read back as a temperature over
     * the 3n - 3 atomic degrees of freedom */
    MD_CHECK_CLOSE(md_system_temperature(&s), 300.0 * (3 * 521 - 3) / (9 * 521 - 3), 1e-5, 0);
    MD_CHECK(s.vel[0].x == s.vel[1].x && s.vel[0].z == s.vel[2].z);  /* rigid molecules */
    MD_CHECK(strcmp(s.name[4].s, "HW1") == 0 && strcmp(s.resname[4].s, "HOH") == 0 && s.resid[4] == 2);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    MD_CHECK_OK(md_water_model_params(MD_WATER_SPCE, &w));
    MD_CHECK_CLOSE(w.d_hh, 0.16330, 1e-4, 0);
    memset(&s, 0x5a, sizeof s);
    d.edge = 0;
    MD_CHECK_ERROR(md_build_water_box(&s, &t, &lj, &d), MD_ERR_INVALID_ARGUMENT, "molecules/edge");
    d.molecules = 1000;
    d.edge = 1.5;
    MD_CHECK_ERROR(md_build_water_box(&s, &t, &lj, &d), MD_ERR_RANGE, "density");
    d.edge = -1;
    MD_CHECK_ERROR(md_build_water_box(&s, &t, &lj, &d), MD_ERR_RANGE, "edge");
    d.edge = 0;
    d.model = (md_water_model)7;
    MD_CHECK_ERROR(md_build_water_box(&s, &t, &lj, &d), MD_ERR_INVALID_ARGUMENT, "model");
    MD_CHECK(s.n == 0x5a5a5a5a); /* untouched */
    MD_CHECK_OK(md_build_lj_fluid(&s, &t, &lj, NULL));
    MD_CHECK(s.n == 864 && t.n == 864 && t.excl_start[864] == 0 && t.mass[5] == s.mass[5]);
    MD_CHECK_CLOSE(lj.c6[0], 4 * MD_ARGON_EPSILON * pow(MD_ARGON_SIGMA, 6), 1e-15, 0);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- errors ---- */

static void cutoff_above_half_box_rejected(void) {
    const double small[3] = {2.6, 1.7, 2.6};
    chain_sys c;
    md_nb_params p = params_of(MD_LJ_DEFAULT, MD_COUL_DEFAULT, 0.9, 0.1);
    md_nb_plan plan;
    double f[3 * 300];
    md_energy e;
    const double box[3] = {2.6, 2.8, 3.0};
    MD_CHECK_OK(make_chains(&c, 50, 50, box, 5));
    MD_CHECK_OK(md_nb_plan_create(&plan, &p, c.s.n));
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, small, f, &e), MD_ERR_RANGE,
                   "cutoff");
    MD_CHECK(strstr(md_last_error(), "half the shortest box edge") != NULL);
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_VERLET, &plan, &c.t, &c.lj, c.s.xyzq, small, f, &e), MD_ERR_RANGE,
                   "cutoff + buffer");
    md_nb_plan_free(&plan);
    p.cutoff = 0.8;
    MD_CHECK_OK(md_nb_plan_create(&plan, &p, c.s.n));
    /* the cutoff alone fits 1.7 / 2, cutoff + buffer does not */
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, small, f, &e));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_CELL_LIST, &plan, &c.t, &c.lj, c.s.xyzq, small, f, &e));
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_FIXED, &plan, &c.t, &c.lj, c.s.xyzq, small, f, &e), MD_ERR_RANGE, "cutoff");
    MD_CHECK_ERROR(md_nb_check_box("here", &plan.params, small), MD_ERR_RANGE, "here");
    md_nb_plan_free(&plan);
    chain_sys_free(&c);
}

static void bad_inputs_rejected(void) {
    const double box[3] = {2.6, 2.8, 3.0}, nanbox[3] = {2.6, NAN, 3.0};
    chain_sys c;
    md_nb_params p;
    md_nb_plan plan, other;
    double f[3 * 300];
    md_energy e;
    int i;
    MD_CHECK_OK(make_chains(&c, 50, 50, box, 5));
    memset(&p, 0, sizeof p);
    MD_CHECK_OK(md_nb_plan_create(&plan, &p, c.s.n));
    MD_CHECK(plan.params.cutoff == 0.9 && plan.params.buffer == 0.1 && plan.params.lj == MD_LJ_POTENTIAL_SHIFT &&
             plan.params.coul == MD_COUL_EWALD);
    MD_CHECK_CLOSE(plan.params.ewald_beta, sqrt(-log(1e-3)) / 0.9, 1e-15, 0);
    for (i = 0; i < 3 * c.s.n; i++) f[i] = 12345.0;
    e.lj = 777.0;
    c.s.xyzq[5].y = NAN;
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_VERLET, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_RANGE, "xyzq[5]");
    c.s.xyzq[5].y = 1.0f;
    c.s.xyzq[6].w = INFINITY;
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_RANGE, "xyzq[6]");
    c.s.xyzq[6].w = 0.1f;
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, nanbox, f, &e), MD_ERR_RANGE, "box");
    c.t.lj_type[3] = 3;
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_CELL_LIST, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_RANGE, "lj_type[3]");
    c.t.lj_type[3] = 0;
    MD_CHECK_OK(md_nb_plan_create(&other, &p, c.s.n - 1));
    MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_FIXED, &other, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_INVALID_ARGUMENT,
                   "atoms");
    md_nb_plan_free(&other);
    MD_CHECK_ERROR(md_nb_compute(MD_NB_GPU_CLUSTER, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_UNSUPPORTED,
                   "gpu_cluster");
    MD_CHECK_ERROR(md_nb_compute((md_nb_variant)99, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_INVALID_ARGUMENT,
                   "variant");
    c.s.xyzq[8] = c.s.xyzq[9]; /* two non-excluded atoms on one spot */
    c.s.xyzq[8].w = c.s.xyzq[9].w = 0.5f;
    MD_CHECK(!md_topology_excluded(&c.t, 8, 9) || 1);
    if (!md_topology_excluded(&c.t, 8, 9)) {
        MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_FIXED, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_RANGE, "xyzq");
        MD_CHECK_ERROR(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &plan, &c.t, &c.lj, c.s.xyzq, box, f, &e), MD_ERR_RANGE, "xyzq");
    }
    for (i = 0; i < 3 * c.s.n; i++) MD_CHECK(f[i] == 12345.0); /* outputs untouched by every failure */
    MD_CHECK(e.lj == 777.0);
    md_nb_plan_free(&plan);
    /* parameters, each error naming its field */
    p.cutoff = -1;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 10), MD_ERR_RANGE, "cutoff");
    p.cutoff = 1.0;
    p.lj = MD_LJ_FORCE_SWITCH;
    p.switch_radius = 1.0;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 10), MD_ERR_RANGE, "switch_radius");
    p.switch_radius = 0;
    p.coul = MD_COUL_REACTION_FIELD;
    p.epsilon_rf = 0.5;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 10), MD_ERR_RANGE, "epsilon_rf");
    p.coul = MD_COUL_EWALD;
    p.ewald_tolerance = 0.7;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 10), MD_ERR_RANGE, "ewald_tolerance");
    p.ewald_tolerance = 0;
    p.buffer = NAN;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 10), MD_ERR_RANGE, "buffer");
    p.buffer = 0;
    p.lj = (md_lj_mode)42;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 10), MD_ERR_INVALID_ARGUMENT, "lj");
    p.lj = MD_LJ_DEFAULT;
    MD_CHECK_ERROR(md_nb_plan_create(&plan, &p, 0), MD_ERR_INVALID_ARGUMENT, "n");
    p.buffer = -1; /* negative: no buffer */
    MD_CHECK_OK(md_nb_plan_create(&plan, &p, 10));
    MD_CHECK(plan.params.buffer == 0.0);
    md_nb_plan_free(&plan);
    chain_sys_free(&c);
}

static void dynamics_errors_and_round_trip(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_dynamics d;
    MD_CHECK_OK(md_build_lj_fluid(&s, &t, &lj, NULL));
    memset(&d, 0x5a, sizeof d);
    MD_CHECK_ERROR(md_dynamics_init(&d, &s, &t, &lj, NULL, MD_NB_CPU_VERLET, 0.0), MD_ERR_RANGE, "dt");
    t.mass[3] = 0.0f;
    MD_CHECK_ERROR(md_dynamics_init(&d, &s, &t, &lj, NULL, MD_NB_CPU_VERLET, 0.002), MD_ERR_RANGE, "mass[3]");
    t.mass[3] = t.mass[4];
    s.vel[2].y = NAN;
    MD_CHECK_ERROR(md_dynamics_init(&d, &s, &t, &lj, NULL, MD_NB_CPU_VERLET, 0.002), MD_ERR_RANGE, "vel[2]");
    s.vel[2].y = 0.1f;
    MD_CHECK(d.n == 0x5a5a5a5a); /* untouched */
    MD_CHECK_OK(md_dynamics_init(&d, &s, &t, &lj, NULL, MD_NB_CPU_VERLET, 0.002));
    MD_CHECK(d.energy.coul_self == 0.0 && d.energy.kinetic > 0.0); /* no charges */
    MD_CHECK_OK(md_integrate_vv(&d, 3));
    MD_CHECK(d.step == 3);
    MD_CHECK_OK(md_dynamics_get_system(&d, &s));
    MD_CHECK(s.vel[7].x == (float)d.v[21] && s.xyzq[7].x >= 0.0f && s.xyzq[7].x <= (float)s.box[0]);
    MD_CHECK_ERROR(md_integrate_vv(&d, -1), MD_ERR_INVALID_ARGUMENT, "nsteps");
    md_dynamics_free(&d);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

static void variant_names_and_energy_helpers(void) {
    md_energy e;
    int v;
    for (v = 0; v < MD_NB_VARIANT_COUNT; v++) {
        MD_CHECK(strcmp(md_nb_variant_name((md_nb_variant)v), "unknown") != 0);
        MD_CHECK(md_nb_variant_is_gpu((md_nb_variant)v) == (v >= MD_NB_GPU_TILES));
    }
    MD_CHECK(strcmp(md_nb_variant_name(MD_NB_VARIANT_COUNT), "unknown") == 0);
    MD_CHECK(strcmp(md_nb_variant_name(MD_NB_CPU_FIXED), "cpu_fixed") == 0);
    memset(&e, 0, sizeof e);
    e.lj = 1;
    e.lj_dispersion = 2;
    e.lj14 = 4;
    e.coul_real = 8;
    e.coul14 = 16;
    e.coul_excl = 32;
    e.coul_recip = 64;
    e.coul_self = 128;
    e.bonded = 256;
    e.kinetic = 512;
    e.virial[0] = 1e9;
    MD_CHECK(md_energy_potential(&e) == 511.0 && md_energy_total(&e) == 1023.0);
}

int main(void) {
    MD_RUN(lj_table_combination_rules);
    MD_RUN(exclusions_from_bonds);
    MD_RUN(topology_from_system_and_names);
    MD_RUN(shared_float_functions_accuracy);
    MD_RUN(fixed_point_conversion);
    MD_RUN(float_pair_matches_double);
    MD_RUN(verlet_lists_equal_brute_force);
    MD_RUN(rungs_agree);
    MD_RUN(fixed_rung_bitwise_invariant);
    MD_RUN(forces_are_minus_energy_gradient);
    MD_RUN(virial_matches_box_scaling);
    MD_RUN(dispersion_correction_matches_integral);
    MD_RUN(translation_invariance);
    MD_RUN(rebuild_counting);
    MD_RUN(nve_energy_conservation);
    MD_RUN(water_benchmark_boxes);
    MD_RUN(builders_defaults_and_errors);
    MD_RUN(cutoff_above_half_box_rejected);
    MD_RUN(bad_inputs_rejected);
    MD_RUN(dynamics_errors_and_round_trip);
    MD_RUN(variant_names_and_energy_helpers);
    return md_test_summary();
}
