/* Tests of md.h's ions, ewald and pme sections: the compact FFT, the B-splines and their moduli,
 * the Ewald sum against analytic lattice energies (rock salt's Madelung constant, one charge in
 * a neutralising background), its own invariances (alpha, rc, images, translation, trace of
 * the virial), md_nb_compute's real space, finite differences, and PME against Ewald as the
 * grid and the order grow; the builders and the water/ion topology; bad input.
 * reference/check_ewald.py compares the same code with numpy (Ewald and numpy.fft) and
 * reference/check_openmm_pme.py with OpenMM's Reference platform.
 * Seeds used: 5, 7, 11, 13, 2024 (random charges), 41 (salt water), 42 (jittered crystal). */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define PI 3.14159265358979323846
#define TMPDIR "build/test-tmp"

/* n random charges in box (neutral to float rounding), positions snapped to multiples of
 * 2^-14 nm so that x +- 2^-12 is exact in float (finite differences move atoms by that). */
static md_status snapped_charges(md_system *s, int n, const double box[3], uint64_t seed) {
    md_status st = md_build_random_charges(s, n, box, 1.0, seed);
    int i, d;
    if (st != MD_OK) return st;
    for (i = 0; i < n; i++)
        for (d = 0; d < 3; d++) {
            float *x = &s->xyzq[i].x + d;
            *x = (float)(floor(*x * 16384.0) / 16384.0);
        }
    return MD_OK;
}

/* A topology with exclusions for n atoms: bonds (3k, 3k+1), (3k, 3k+2), like waters. */
static md_status bonded_topology(md_topology *t, const md_system *s) {
    int bonds[2 * 400], nb = 0, k;
    md_status st;
    for (k = 0; 3 * k + 2 < s->n && nb < 400; k++) {
        bonds[2 * nb] = 3 * k;
        bonds[2 * nb + 1] = 3 * k + 1;
        bonds[2 * nb + 2] = 3 * k;
        bonds[2 * nb + 3] = 3 * k + 2;
        nb += 2;
    }
    if ((st = md_topology_alloc(t, s->n)) != MD_OK) return st;
    if ((st = md_topology_set_bonds(t, nb, bonds, NULL, NULL)) != MD_OK ||
        (st = md_topology_build_exclusions(t, NULL)) != MD_OK) {
        md_topology_free(t);
        return st;
    }
    return MD_OK;
}

static double coul_total(const md_energy *e) { return e->coul_real + e->coul_recip + e->coul_self + e->coul_excl; }

/* RMS of a - b over RMS of b (3 n values). */
static double rms_rel(const double *a, const double *b, int n3) {
    double num = 0.0, den = 0.0;
    int i;
    for (i = 0; i < n3; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Largest |a - b| over the largest |b|. */
static double max_rel(const double *a, const double *b, int n) {
    double num = 0.0, den = 0.0;
    int i;
    for (i = 0; i < n; i++) {
        if (!(fabs(a[i] - b[i]) <= num)) num = fabs(a[i] - b[i]);
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ---- FFT ---- */

/* md_fft_complex against the O(n^2) DFT written from its definition, forward and backward,
 * for every length 1..40 and some FFT-unfriendly ones (primes 97, 101; 2 x 89). Tolerance
 * 1e-12 of the largest output: double rounding grows like log n, and the direct DFT is the
 * less accurate of the two. */
static void fft_matches_direct_dft(void) {
    static const int extra[] = {56, 64, 90, 97, 101, 128, 178};
    double x[2 * 200], y[2 * 200], ref[2 * 200], work[4 * 200];
    md_rng rng;
    int t, n, j, k, sign;
    md_rng_seed(&rng, 5);
    for (t = 0; t < 40 + (int)(sizeof extra / sizeof extra[0]); t++) {
        md_fft_plan p;
        n = t < 40 ? t + 1 : extra[t - 40];
        MD_CHECK_OK(md_fft_plan_create(&p, n));
        for (sign = -1; sign <= 1; sign += 2) {
            for (j = 0; j < 2 * n; j++) x[j] = y[j] = md_rng_uniform(&rng) - 0.5;
            for (k = 0; k < n; k++) {
                double re = 0.0, im = 0.0;
                for (j = 0; j < n; j++) {
                    double th = sign * 2.0 * PI * (double)((long)j * k % n) / n;
                    re += x[2 * j] * cos(th) - x[2 * j + 1] * sin(th);
                    im += x[2 * j] * sin(th) + x[2 * j + 1] * cos(th);
                }
                ref[2 * k] = re;
                ref[2 * k + 1] = im;
            }
            md_fft_complex(&p, y, sign, work);
            MD_CHECKF(max_rel(y, ref, 2 * n) < 1e-12, "n %d sign %d: error %.3g", n, sign, max_rel(y, ref, 2 * n));
        }
        md_fft_plan_free(&p);
    }
}

/* The 3D real transform against 1D complex FFTs of the full complex grid (built from the
 * reals), for even and odd last axes; c2r(r2c(x)) = N x (unnormalised backward). */
static void fft3d_real_transforms(void) {
    static const int shapes[4][3] = {{6, 5, 8}, {7, 4, 9}, {12, 10, 15}, {3, 1, 2}};
    md_rng rng;
    int s;
    md_rng_seed(&rng, 7);
    for (s = 0; s < 4; s++) {
        const int *n = shapes[s];
        int nh = n[2] / 2 + 1, N = n[0] * n[1] * n[2], i, a, b, c, d;
        double *x = (double *)malloc((size_t)N * sizeof(double)), *back = (double *)malloc((size_t)N * sizeof(double));
        double *X = (double *)malloc(2 * (size_t)n[0] * n[1] * nh * sizeof(double));
        double *full = (double *)malloc(2 * (size_t)N * sizeof(double)), line[64], work[256];
        double *ref = (double *)malloc(2 * (size_t)n[0] * n[1] * nh * sizeof(double));
        md_fft3d f;
        md_fft_plan p[3];
        MD_CHECK(x && back && X && full && ref);
        for (i = 0; i < N; i++) {
            x[i] = md_rng_uniform(&rng) - 0.5;
            full[2 * i] = x[i];
            full[2 * i + 1] = 0.0;
        }
        for (d = 0; d < 3; d++) MD_CHECK_OK(md_fft_plan_create(&p[d], n[d]));
        /* the full complex 3D DFT, one axis at a time with the 1D FFT */
        for (d = 0; d < 3; d++)
            for (a = 0; a < N / n[d]; a++) {
                int stride = d == 2 ? 1 : (d == 1 ? n[2] : n[1] * n[2]);
                int base = d == 2 ? a * n[2] : (d == 1 ? (a / n[2]) * n[1] * n[2] + a % n[2] : a);
                for (i = 0; i < n[d]; i++) {
                    line[2 * i] = full[2 * (base + i * stride)];
                    line[2 * i + 1] = full[2 * (base + i * stride) + 1];
                }
                md_fft_complex(&p[d], line, -1, work);
                for (i = 0; i < n[d]; i++) {
                    full[2 * (base + i * stride)] = line[2 * i];
                    full[2 * (base + i * stride) + 1] = line[2 * i + 1];
                }
            }
        for (a = 0; a < n[0]; a++)
            for (b = 0; b < n[1]; b++)
                for (c = 0; c < nh; c++) {
                    ref[2 * ((a * n[1] + b) * nh + c)] = full[2 * ((a * n[1] + b) * n[2] + c)];
                    ref[2 * ((a * n[1] + b) * nh + c) + 1] = full[2 * ((a * n[1] + b) * n[2] + c) + 1];
                }
        MD_CHECK_OK(md_fft3d_create(&f, n));
        md_fft3d_r2c(&f, x, X);
        MD_CHECKF(max_rel(X, ref, 2 * n[0] * n[1] * nh) < 1e-13, "shape %d: r2c error %.3g", s,
                  max_rel(X, ref, 2 * n[0] * n[1] * nh));
        md_fft3d_c2r(&f, X, back);
        for (i = 0; i < N; i++) back[i] /= N;
        MD_CHECKF(max_rel(back, x, N) < 1e-13, "shape %d: c2r(r2c(x)) / N error %.3g", s, max_rel(back, x, N));
        md_fft3d_free(&f);
        for (d = 0; d < 3; d++) md_fft_plan_free(&p[d]);
        free(x), free(back), free(X), free(full), free(ref);
    }
}

/* md_fft_good_size: the next number with factors 2, 3, 5, 7 only (checked by hand). */
static void fft_good_sizes(void) {
    static const int in[] = {0, 1, 6, 11, 13, 17, 19, 23, 56, 89, 97, 121, 1021};
    static const int out[] = {1, 1, 6, 12, 14, 18, 20, 24, 56, 90, 98, 125, 1024};
    unsigned i;
    for (i = 0; i < sizeof in / sizeof in[0]; i++)
        MD_CHECKF(md_fft_good_size(in[i]) == out[i], "md_fft_good_size(%d) = %d, expected %d", in[i],
                  md_fft_good_size(in[i]), out[i]);
}

/* ---- parameters ---- */

/* md_pme_choose reproduces what OpenMM 8.6.1 reports (NonbondedForce.getPMEParametersInContext
 * on its Reference platform, cutoff 0.9 nm, ewaldErrorTolerance 5e-4): alpha 2.9202898720871846
 * and grids 56 (6.2 nm), 89 (9.9 nm; 90 here after the FFT-size rounding OpenMM's CUDA platform
 * applies), 17 (1.86 nm; 18 here), 27 (3.0 nm). */
static void pme_choose_is_openmms_rule(void) {
    static const double L[4] = {6.2, 9.9, 1.86, 3.0};
    static const int want[4] = {56, 90, 18, 27};
    double a, box[3];
    int g[3], i;
    for (i = 0; i < 4; i++) {
        box[0] = box[1] = box[2] = L[i];
        MD_CHECK_OK(md_pme_choose(5e-4, 0.9, box, &a, g));
        MD_CHECK_CLOSE(a, 2.9202898720871846, 1e-14, 0);
        MD_CHECKF(g[0] == want[i] && g[1] == want[i] && g[2] == want[i], "box %g: grid %d %d %d, expected %d", L[i],
                  g[0], g[1], g[2], want[i]);
    }
    box[0] = 0.5; /* the minimum of 6 points per axis */
    box[1] = 2.0;
    box[2] = 4.0;
    MD_CHECK_OK(md_pme_choose(5e-4, 0.9, box, &a, g));
    MD_CHECKF(g[0] == 6 && g[1] == 18 && g[2] == 36, "grid %d %d %d, expected 6 18 36", g[0], g[1], g[2]);
}

/* ---- B-splines ---- */

/* md_pme_bspline: the quartic (order 4) spline at t = 0 is (1, 4, 1, 0) / 6 by its definition,
 * at t = 0.5 it is (1, 23, 23, 1) / 48; for every order and several t the weights sum to 1, the
 * derivatives to 0, and each derivative equals the central difference of its weight
 * (h = 1e-6: error ~h^2, tolerance 1e-8). */
static void bspline_values(void) {
    double w[MD_PME_MAX_ORDER], dw[MD_PME_MAX_ORDER], wp[MD_PME_MAX_ORDER], wm[MD_PME_MAX_ORDER];
    int o, j, k;
    md_pme_bspline(7.0, 4, w, NULL);
    /* point floor(u) + j sits at distance t + 3 - j from the spline's start: M_4(3 - j) */
    MD_CHECK_CLOSE(w[0], 1.0 / 6.0, 1e-15, 0);
    MD_CHECK_CLOSE(w[1], 4.0 / 6.0, 1e-15, 0);
    MD_CHECK_CLOSE(w[2], 1.0 / 6.0, 1e-15, 0);
    MD_CHECK_CLOSE(w[3], 0.0, 0, 1e-15);
    md_pme_bspline(3.5, 4, w, NULL);
    MD_CHECK_CLOSE(w[0], 1.0 / 48.0, 1e-14, 0);
    MD_CHECK_CLOSE(w[1], 23.0 / 48.0, 1e-14, 0);
    MD_CHECK_CLOSE(w[2], 23.0 / 48.0, 1e-14, 0);
    MD_CHECK_CLOSE(w[3], 1.0 / 48.0, 1e-14, 0);
    for (o = MD_PME_MIN_ORDER; o <= MD_PME_MAX_ORDER; o++)
        for (k = 0; k < 7; k++) {
            double u = 10.0 + 0.13 * k + 0.01, s = 0.0, ds = 0.0;
            md_pme_bspline(u, o, w, dw);
            md_pme_bspline(u + 1e-6, o, wp, NULL);
            md_pme_bspline(u - 1e-6, o, wm, NULL);
            for (j = 0; j < o; j++) {
                s += w[j];
                ds += dw[j];
                MD_CHECKF(fabs(dw[j] - (wp[j] - wm[j]) / 2e-6) < 1e-8, "order %d u %g j %d: dw %.12g, difference %.12g",
                          o, u, j, dw[j], (wp[j] - wm[j]) / 2e-6);
            }
            MD_CHECK_CLOSE(s, 1.0, 1e-14, 0);
            MD_CHECK_CLOSE(ds, 0.0, 0, 1e-14);
        }
}

/* The moduli of order 4 are |(4 + 2 cos(2 pi m / K)) / 6|^2 (the spline's values 1/6, 4/6, 1/6
 * at the integers give 1/6 + 4/6 e^{i th} + 1/6 e^{2 i th} = e^{i th} (4 + 2 cos th) / 6); for
 * order 5 and even K the value at m = K/2 vanishes and is replaced by its neighbours' mean. */
static void bspline_moduli(void) {
    double mod[40];
    int m, K = 40;
    MD_CHECK_OK(md_pme_bspline_moduli(K, 4, mod));
    for (m = 0; m < K; m++) {
        double v = (4.0 + 2.0 * cos(2.0 * PI * m / K)) / 6.0;
        MD_CHECK_CLOSE(mod[m], v * v, 1e-13, 0);
    }
    MD_CHECK_OK(md_pme_bspline_moduli(K, 5, mod));
    MD_CHECK_CLOSE(mod[K / 2], 0.5 * (mod[K / 2 - 1] + mod[K / 2 + 1]), 1e-15, 0);
    MD_CHECK(mod[K / 2] > 1e-3);
    MD_CHECK_ERROR(md_pme_bspline_moduli(3, 4, mod), MD_ERR_RANGE, "order");
    MD_CHECK_ERROR(md_pme_bspline_moduli(40, 7, mod), MD_ERR_RANGE, "order");
}

/* ---- Ewald: analytic lattice sums ---- */

/* Rock salt: the Coulomb energy of N ions is -N k M / (2 r0), M = 1.747564594633 (the
 * Madelung constant of NaCl), r0 = a / 2. Ewald with alpha rc = 4.5 (erfc 2e-10) matches to
 * 1e-9; trace W = E (degree -1 homogeneity, 1e-8); the forces vanish by symmetry; PME on a fine grid
 * (order 6, 48^3) matches to 1e-7. */
static void madelung_rock_salt(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_ionic_crystal_desc d;
    md_ewald_params ep;
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e, ep_e;
    double f[3 * 216], fmax = 0.0, madelung, r0;
    int i;
    memset(&d, 0, sizeof d);
    MD_CHECK_OK(md_build_ionic_crystal(&s, &t, &lj, &d));
    MD_CHECK(s.n == 216 && fabs(md_system_charge(&s)) < 1e-12);
    r0 = 0.5 * 0.5640;
    madelung = -s.n * MD_COULOMB * 1.747564594633 / (2.0 * r0);
    memset(&ep, 0, sizeof ep);
    ep.rc = 0.8;
    ep.alpha = 4.5 / ep.rc;
    MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, s.n, s.box, f, &e));
    MD_CHECK_CLOSE(coul_total(&e), madelung, 1e-9, 0);
    /* the virial's truncation is exp(-(alpha rc)^2) = 1.6e-9, erfc's 2e-10 */
    MD_CHECK_CLOSE(e.virial[0] + e.virial[4] + e.virial[8], madelung, 1e-8, 0);
    for (i = 0; i < 3 * s.n; i++)
        if (fabs(f[i]) > fmax) fmax = fabs(f[i]);
    MD_CHECKF(fmax < 1e-3, "largest force %g on a perfect crystal (a single ion-pair force is 1.7e3)", fmax);
    memset(&pp, 0, sizeof pp);
    pp.alpha = ep.alpha;
    pp.order = 6;
    pp.grid[0] = pp.grid[1] = pp.grid[2] = 48;
    MD_CHECK_OK(md_pme_plan_create(&plan, &pp, s.box, s.n));
    memset(&ep_e, 0, sizeof ep_e);
    MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, s.n, s.box, NULL, &ep_e));
    MD_CHECK_CLOSE(ep_e.coul_recip, e.coul_recip, 1e-7, 0);
    MD_CHECK_CLOSE(ep_e.coul_self, e.coul_self, 1e-14, 0);
    md_pme_plan_free(&plan);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* One charge in a cubic box with the neutralising background has energy k q^2 xi / (2 L) with
 * xi = -2.837297479480619 (the simple cubic lattice's Wigner constant): the background term is
 * what makes it right and alpha-independent. PME gives the same with the same background. The
 * system is non-neutral on purpose: that is handled, not rejected (md_ewald_compute's docs). */
static void one_charge_in_background(void) {
    md_float4 x[1];
    double box[3] = {2.0, 2.0, 2.0}, f[3], want = MD_COULOMB * 4.0 * -2.837297479480619 / (2.0 * 2.0);
    md_ewald_params ep;
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e;
    int k;
    x[0].x = 0.3f, x[0].y = 1.7f, x[0].z = 0.1f, x[0].w = -2.0f;
    for (k = 0; k < 3; k++) {
        memset(&ep, 0, sizeof ep);
        ep.rc = 0.99;
        ep.alpha = 3.5 + k; /* alpha rc >= 3.5: erfc below 1e-6 of a 1/r term ~ 1e-9 of E */
        MD_CHECK_OK(md_ewald_compute(&ep, NULL, x, 1, box, f, &e));
        MD_CHECK_CLOSE(coul_total(&e), want, 1e-9, 0);
        MD_CHECK_CLOSE(e.virial[0] + e.virial[4] + e.virial[8], want, 1e-9, 0);
        MD_CHECK(e.coul_excl == 0.0);
        MD_CHECK(fabs(f[0]) + fabs(f[1]) + fabs(f[2]) < 1e-9);
    }
    memset(&pp, 0, sizeof pp);
    pp.alpha = 4.5;
    pp.grid[0] = pp.grid[1] = pp.grid[2] = 40;
    pp.order = 6;
    MD_CHECK_OK(md_pme_plan_create(&plan, &pp, box, 1));
    memset(&e, 0, sizeof e);
    MD_CHECK_OK(md_pme_compute(&plan, x, 1, box, NULL, &e));
    ep.alpha = 4.5;
    {
        md_energy ee;
        MD_CHECK_OK(md_ewald_compute(&ep, NULL, x, 1, box, NULL, &ee));
        MD_CHECK_CLOSE(e.coul_recip, ee.coul_recip, 1e-7, 0);
        MD_CHECK_CLOSE(e.virial[0], ee.virial[0], 1e-6, 0);
    }
    md_pme_plan_free(&plan);
}

/* ---- Ewald: invariances ---- */

/* The converged sum does not depend on alpha, on rc, or on whether rc reaches beyond half the
 * box (periodic images in real space): (alpha, rc) = (3.6, 1.4) in a 2.0 x 2.2 x 2.4 nm box
 * (images of every pair and of each atom itself) and (5.0, 0.99) (minimum image) agree to
 * 1e-9 in the total and 1e-8 in the forces (relative to the largest); with exclusions. Trace W
 * equals the energy (degree -1 homogeneity) to 1e-9; the forces sum to zero. */
static void ewald_converged_invariants(void) {
    md_system s;
    md_topology t;
    md_ewald_params a, b;
    md_energy ea, eb;
    double box[3] = {2.0, 2.2, 2.4}, fa[3 * 150], fb[3 * 150], sum[3] = {0, 0, 0};
    int i;
    MD_CHECK_OK(snapped_charges(&s, 150, box, 11));
    MD_CHECK_OK(bonded_topology(&t, &s));
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.alpha = 3.6, a.rc = 1.4;  /* alpha rc = 5.04 */
    b.alpha = 5.0, b.rc = 0.99; /* 4.95 */
    MD_CHECK_OK(md_ewald_compute(&a, &t, s.xyzq, s.n, box, fa, &ea));
    MD_CHECK_OK(md_ewald_compute(&b, &t, s.xyzq, s.n, box, fb, &eb));
    MD_CHECK(ea.coul_excl != 0.0 && fabs(ea.coul_real - eb.coul_real) > 1.0); /* the split really differs */
    MD_CHECK_CLOSE(coul_total(&ea), coul_total(&eb), 1e-9, 0);
    MD_CHECKF(max_rel(fa, fb, 3 * s.n) < 1e-8, "forces differ by %.3g", max_rel(fa, fb, 3 * s.n));
    MD_CHECK_CLOSE(ea.virial[0] + ea.virial[4] + ea.virial[8], coul_total(&ea), 1e-9, 0);
    MD_CHECK_CLOSE(eb.virial[0] + eb.virial[4] + eb.virial[8], coul_total(&eb), 1e-9, 0);
    for (i = 0; i < s.n; i++) {
        sum[0] += fa[3 * i];
        sum[1] += fa[3 * i + 1];
        sum[2] += fa[3 * i + 2];
    }
    MD_CHECK(fabs(sum[0]) + fabs(sum[1]) + fabs(sum[2]) < 1e-8);
    md_system_free(&s);
    md_topology_free(&t);
}

/* A uniform translation (and a move of one atom by a whole box edge) leaves the Ewald energy
 * and forces unchanged (energy 1e-6, forces 1e-5 of the largest: the moved float positions
 * round by 2.4e-7 nm); PME's energy is invariant under a shift by whole grid cells (1e-6, the
 * same rounding), and
 * under an arbitrary shift it moves by less than its own error against Ewald. */
static void translation_invariance(void) {
    md_system s;
    md_topology t;
    md_ewald_params ep;
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e0, e1, p0, p1, p2;
    double box[3] = {2.0, 2.2, 2.4}, f0[3 * 150], f1[3 * 150], shift[3] = {0.37, -1.21, 2.93};
    md_float4 moved[150];
    int i, d;
    MD_CHECK_OK(snapped_charges(&s, 150, box, 13));
    MD_CHECK_OK(bonded_topology(&t, &s));
    memset(&ep, 0, sizeof ep);
    ep.rc = 0.99;
    MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, s.n, box, f0, &e0));
    for (i = 0; i < s.n; i++) {
        moved[i] = s.xyzq[i];
        moved[i].x = (float)(s.xyzq[i].x + shift[0]);
        moved[i].y = (float)(s.xyzq[i].y + shift[1]);
        moved[i].z = (float)(s.xyzq[i].z + shift[2]);
    }
    moved[3].z += (float)box[2];
    MD_CHECK_OK(md_ewald_compute(&ep, &t, moved, s.n, box, f1, &e1));
    MD_CHECK_CLOSE(coul_total(&e1), coul_total(&e0), 1e-6, 0); /* float rounding of the moved positions */
    MD_CHECKF(max_rel(f1, f0, 3 * s.n) < 1e-5, "forces moved by %.3g", max_rel(f1, f0, 3 * s.n));
    memset(&pp, 0, sizeof pp);
    pp.alpha = md_ewald_beta(0.99, 5e-4);
    pp.cutoff = 0.99;
    pp.grid[0] = 20, pp.grid[1] = 22, pp.grid[2] = 24; /* cell 0.1 nm on every axis */
    MD_CHECK_OK(md_pme_plan_create(&plan, &pp, box, s.n));
    memset(&p0, 0, sizeof p0), memset(&p1, 0, sizeof p1), memset(&p2, 0, sizeof p2);
    MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, s.n, box, NULL, &p0));
    for (i = 0; i < s.n; i++) { /* 3 cells along x, 1 along y, 5 along z */
        moved[i] = s.xyzq[i];
        moved[i].x = (float)(s.xyzq[i].x + 0.3);
        moved[i].y = (float)(s.xyzq[i].y + 0.1);
        moved[i].z = (float)(s.xyzq[i].z + 0.5);
    }
    MD_CHECK_OK(md_pme_compute(&plan, moved, s.n, box, NULL, &p1));
    MD_CHECK_CLOSE(p1.coul_recip, p0.coul_recip, 1e-6, 0);
    for (i = 0; i < s.n; i++)
        for (d = 0; d < 3; d++) (&moved[i].x)[d] = (float)((&s.xyzq[i].x)[d] + shift[d]);
    MD_CHECK_OK(md_pme_compute(&plan, moved, s.n, box, NULL, &p2));
    {
        md_ewald_params e2 = ep;
        md_energy ee;
        e2.alpha = pp.alpha;
        MD_CHECK_OK(md_ewald_compute(&e2, &t, s.xyzq, s.n, box, NULL, &ee));
        MD_CHECKF(fabs(p2.coul_recip - p0.coul_recip) < 2.0 * fabs(p0.coul_recip - ee.coul_recip) + 1e-9,
                  "PME moved by %.3g under a translation, its error against Ewald is %.3g",
                  p2.coul_recip - p0.coul_recip, p0.coul_recip - ee.coul_recip);
    }
    md_pme_plan_free(&plan);
    md_system_free(&s);
    md_topology_free(&t);
}

/* The real-space part and the exclusion correction are md_nb_compute's (chapter 06) when rc
 * is at most half the box: coul_real, coul_excl, coul_self agree to 1e-10 on a water box
 * (independent loops, same formulas: only the summation order differs). The Ewald result does
 * not depend on the number of OpenMP threads (bitwise: sums in a fixed order). */
static void ewald_real_space_is_chapter_06s(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_water_desc wd;
    md_nb_params np;
    md_nb_plan nb;
    md_ewald_params ep;
    md_energy en, ee;
    double *f = NULL;
    memset(&wd, 0, sizeof wd);
    wd.molecules = 64;
    wd.seed = 7;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &wd));
    memset(&np, 0, sizeof np);
    np.cutoff = 0.6;
    np.lj = MD_LJ_NONE;
    np.buffer = -1.0;
    MD_CHECK_OK(md_nb_plan_create(&nb, &np, s.n));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &nb, &t, &lj, s.xyzq, s.box, NULL, &en));
    memset(&ep, 0, sizeof ep);
    ep.rc = 0.6;
    ep.alpha = nb.params.ewald_beta;
    MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, s.n, s.box, NULL, &ee));
    MD_CHECK_CLOSE(ee.coul_real, en.coul_real, 1e-10, 0);
    MD_CHECK_CLOSE(ee.coul_excl, en.coul_excl, 1e-10, 0);
    MD_CHECK_CLOSE(ee.coul_self, en.coul_self, 1e-12, 0);
#ifdef _OPENMP
    {
        double *g = (double *)malloc(3 * (size_t)s.n * sizeof(double));
        md_energy e1;
        int nt = omp_get_max_threads();
        f = (double *)malloc(3 * (size_t)s.n * sizeof(double));
        MD_CHECK(f && g);
        MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, s.n, s.box, f, &ee));
        omp_set_num_threads(1);
        MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, s.n, s.box, g, &e1));
        omp_set_num_threads(nt);
        MD_CHECK(memcmp(f, g, 3 * (size_t)s.n * sizeof(double)) == 0);
        MD_CHECK(memcmp(&e1, &ee, sizeof e1) == 0);
        free(g);
    }
#endif
    free(f);
    md_nb_plan_free(&nb);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- forces against finite differences ---- */

/* Central differences of the energy with h = 2^-12 nm (exact in float: positions are
 * multiples of 2^-14): Ewald's total, and PME's reciprocal energy alone (smooth PME's forces
 * are the exact gradient of its own energy). Error ~h^2 F''' ~ 1e-6 of the largest force. */
static double fd_energy(int which, md_pme_plan *plan, const md_ewald_params *ep, const md_topology *t,
                        const md_float4 *x, int n, const double box[3]) {
    md_energy e;
    memset(&e, 0, sizeof e);
    if (which == 0) {
        if (md_ewald_compute(ep, t, x, n, box, NULL, &e) != MD_OK) return NAN;
        return coul_total(&e);
    }
    if (md_pme_compute(plan, x, n, box, NULL, &e) != MD_OK) return NAN;
    return e.coul_recip;
}

static void forces_are_minus_the_gradient(void) {
    md_system s;
    md_topology t;
    md_ewald_params ep;
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e;
    double box[3] = {2.0, 2.2, 2.4}, f[2][3 * 60], fmax[2] = {0, 0}, h = 1.0 / 4096.0;
    md_float4 x[60];
    int which, i, d, k;
    MD_CHECK_OK(snapped_charges(&s, 60, box, 2024));
    MD_CHECK_OK(bonded_topology(&t, &s));
    memset(&ep, 0, sizeof ep);
    ep.rc = 0.99;
    ep.alpha = 3.2;
    memset(&pp, 0, sizeof pp);
    pp.alpha = 3.2;
    pp.order = 5;
    pp.grid[0] = 16, pp.grid[1] = 18, pp.grid[2] = 20;
    MD_CHECK_OK(md_pme_plan_create(&plan, &pp, box, s.n));
    MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, s.n, box, f[0], &e));
    memset(f[1], 0, sizeof f[1]);
    MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, s.n, box, f[1], NULL));
    for (which = 0; which < 2; which++)
        for (i = 0; i < 3 * s.n; i++)
            if (fabs(f[which][i]) > fmax[which]) fmax[which] = fabs(f[which][i]);
    memcpy(x, s.xyzq, sizeof x);
    for (which = 0; which < 2; which++)
        for (k = 0; k < 12; k++) {
            double ep_, em, fd;
            i = (k * 7) % s.n;
            d = k % 3;
            (&x[i].x)[d] = (float)((&s.xyzq[i].x)[d] + h);
            ep_ = fd_energy(which, &plan, &ep, &t, x, s.n, box);
            (&x[i].x)[d] = (float)((&s.xyzq[i].x)[d] - h);
            em = fd_energy(which, &plan, &ep, &t, x, s.n, box);
            (&x[i].x)[d] = (&s.xyzq[i].x)[d];
            fd = -(ep_ - em) / (2.0 * h);
            MD_CHECKF(fabs(fd - f[which][3 * i + d]) < 2e-6 * fmax[which],
                      "%s: atom %d axis %d force %.9g, -dE/dx %.9g (largest force %.3g)", which ? "PME" : "Ewald", i, d,
                      f[which][3 * i + d], fd, fmax[which]);
        }
    md_pme_plan_free(&plan);
    md_system_free(&s);
    md_topology_free(&t);
}

/* ---- PME against Ewald ---- */

/* PME (reciprocal forces + the same real space) against the Ewald reference on a 216-molecule
 * TIP3P box with alpha = 2.92 (tolerance 5e-4, rc 0.9). At the default settings (OpenMM's grid
 * rule, order 5) the RMS relative force error is <= 5e-4, the tolerance; for each order the
 * error falls as the grid refines (spacing 0.16, 0.12, 0.09, 0.0675 nm), and at a fixed grid a
 * higher order is more accurate. The energy error falls alike. */
static void pme_converges_to_ewald(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_water_desc wd;
    md_ewald_params ep;
    md_energy ee;
    double *fe, *fp, err[3][4], eerr[3][4];
    int o, k, n;
    memset(&wd, 0, sizeof wd);
    wd.molecules = 216;
    wd.seed = 7;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &wd));
    n = s.n;
    fe = (double *)malloc(3 * (size_t)n * sizeof(double));
    fp = (double *)malloc(3 * (size_t)n * sizeof(double));
    MD_CHECK(fe && fp);
    memset(&ep, 0, sizeof ep);
    ep.rc = 0.9;
    MD_CHECK_OK(md_ewald_compute(&ep, &t, s.xyzq, n, s.box, fe, &ee));
    for (o = 4; o <= 7; o++) {
        md_pme_params pp;
        md_pme_plan plan;
        md_energy pe;
        double spacing = 0.16;
        for (k = 0; k < (o == 7 ? 1 : 4); k++, spacing *= 0.75) {
            /* real space and exclusions are the same for both: compare the reciprocal forces
             * added to Ewald's real-space forces, against Ewald's total */
            md_ewald_params real_only = ep;
            memset(&pp, 0, sizeof pp);
            pp.cutoff = 0.9;
            if (o < 7) {
                pp.order = o;
                pp.spacing = spacing;
            }
            MD_CHECK_OK(md_pme_plan_create(&plan, &pp, s.box, n));
            real_only.kmax[0] = real_only.kmax[1] = real_only.kmax[2] = 1;
            real_only.k2max = 0.5; /* no k vector at all: the real, self and excluded parts alone */
            MD_CHECK_OK(md_ewald_compute(&real_only, &t, s.xyzq, n, s.box, fp, &pe));
            MD_CHECK(pe.coul_recip == 0.0);
            MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, n, s.box, fp, &pe));
            if (o == 7) { /* the defaults */
                MD_CHECKF(plan.params.order == 5 && plan.params.grid[0] == 18, "default order %d grid %d",
                          plan.params.order, plan.params.grid[0]);
                MD_CHECKF(rms_rel(fp, fe, 3 * n) <= 5e-4, "default settings: relative force error %.3g",
                          rms_rel(fp, fe, 3 * n));
            } else {
                err[o - 4][k] = rms_rel(fp, fe, 3 * n);
                eerr[o - 4][k] = fabs(pe.coul_recip - ee.coul_recip);
            }
            md_pme_plan_free(&plan);
        }
    }
    for (o = 0; o < 3; o++)
        for (k = 1; k < 4; k++) {
            MD_CHECKF(err[o][k] < 0.8 * err[o][k - 1], "order %d: force error %.3g at step %d after %.3g", o + 4,
                      err[o][k], k, err[o][k - 1]);
            MD_CHECKF(eerr[o][k] < eerr[o][k - 1], "order %d: energy error %.3g at step %d after %.3g", o + 4,
                      eerr[o][k], k, eerr[o][k - 1]);
        }
    for (k = 0; k < 4; k++)
        MD_CHECKF(err[2][k] < err[1][k] && err[1][k] < err[0][k], "spacing step %d: errors %.3g %.3g %.3g (orders 4 5 6)",
                  k, err[0][k], err[1][k], err[2][k]);
    MD_CHECKF(err[2][3] < 1e-6, "order 6, 0.0675 nm: %.3g", err[2][3]);
    free(fe);
    free(fp);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* md_pme_compute composes with md_nb_compute: forces and virial added, coul_recip and coul_self
 * set (so the self term is not counted twice); a second call on the same plan gives the same
 * bits; the stages called one by one give what md_pme_compute gives. */
static void pme_plan_semantics(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_water_desc wd;
    md_nb_params np;
    md_nb_plan nb;
    md_pme_plan plan;
    md_energy e, e2;
    double *f, *g, *h, wnb[9], E0;
    int i;
    memset(&wd, 0, sizeof wd);
    wd.molecules = 100;
    wd.seed = 7;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &wd));
    f = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    g = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    h = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    MD_CHECK(f && g && h);
    memset(&np, 0, sizeof np);
    np.cutoff = 0.7;
    MD_CHECK_OK(md_nb_plan_create(&nb, &np, s.n));
    MD_CHECK_OK(md_nb_compute(MD_NB_CPU_ALL_PAIRS, &nb, &t, &lj, s.xyzq, s.box, f, &e));
    memcpy(wnb, e.virial, sizeof wnb);
    E0 = e.lj + e.coul_real + e.coul_excl;
    {
        md_pme_params pp;
        memset(&pp, 0, sizeof pp);
        pp.cutoff = 0.7;
        MD_CHECK_OK(md_pme_plan_create(&plan, &pp, s.box, s.n));
    }
    MD_CHECK_CLOSE(plan.params.alpha, nb.params.ewald_beta, 1e-15, 0);
    memcpy(g, f, 3 * (size_t)s.n * sizeof(double));
    e2 = e;
    MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, s.n, s.box, g, &e2));
    MD_CHECK_CLOSE(e2.coul_self, e.coul_self, 1e-14, 0);
    MD_CHECK(e2.coul_recip != 0.0 && e2.lj == e.lj && e2.coul_real == e.coul_real);
    MD_CHECK_CLOSE(e2.virial[0] - wnb[0], plan.virial[0], 1e-12, 1e-9);
    MD_CHECK_CLOSE(md_energy_potential(&e2), E0 + e.coul_self + plan.energy + e.lj14 + e.coul14 + e.lj_dispersion,
                   1e-12, 0);
    for (i = 0; i < 3 * s.n; i++) h[i] = g[i] - f[i]; /* the reciprocal forces alone */
    memset(g, 0, 3 * (size_t)s.n * sizeof(double));
    MD_CHECK_OK(md_pme_spread(&plan, s.xyzq, s.n, s.box));
    MD_CHECK_OK(md_pme_forward(&plan));
    MD_CHECK_OK(md_pme_solve(&plan, s.box));
    MD_CHECK_OK(md_pme_backward(&plan));
    MD_CHECK_OK(md_pme_gather(&plan, s.xyzq, s.n, s.box, g));
    MD_CHECK_CLOSE(plan.energy, e2.coul_recip, 1e-15, 0);
    MD_CHECKF(max_rel(g, h, 3 * s.n) < 1e-12, "stages vs compute: %.3g", max_rel(g, h, 3 * s.n));
    memset(&e, 0, sizeof e);
    memset(g, 0, 3 * (size_t)s.n * sizeof(double));
    MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, s.n, s.box, g, &e));
    memset(f, 0, 3 * (size_t)s.n * sizeof(double));
    MD_CHECK_OK(md_pme_compute(&plan, s.xyzq, s.n, s.box, f, &e2));
    MD_CHECK(memcmp(f, g, 3 * (size_t)s.n * sizeof(double)) == 0 && e.coul_recip == e2.coul_recip);
    md_pme_plan_free(&plan);
    md_nb_plan_free(&nb);
    free(f), free(g), free(h);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- builders and the water/ion topology ---- */

/* Rock salt and salt water: counts, neutrality, types and residues; the salt box written as a
 * PDB (with the PDB water names) and read back gives, through md_topology_water_ions, the
 * builder's charges, LJ types, exclusions and water groups. Unknown residues are errors. */
static void ion_systems(void) {
    md_system s, r;
    md_topology t, rt;
    md_lj_table lj, rl;
    md_salt_water_desc sd;
    md_ionic_crystal_desc cd;
    int i, na = 0, cl = 0, nw, w = 0;
    memset(&cd, 0, sizeof cd);
    cd.cells = 2;
    cd.jitter = 0.01;
    cd.seed = 42;
    MD_CHECK_OK(md_build_ionic_crystal(&s, &t, &lj, &cd));
    MD_CHECK(s.n == 64 && lj.ntypes == 4 && fabs(md_system_charge(&s)) < 1e-12);
    MD_CHECK(s.box[0] == 2 * 0.5640 && t.lj_type[0] == MD_TYPE_NA && t.lj_type[1] == MD_TYPE_CL);
    MD_CHECK(fabs(s.xyzq[0].x - 0.25 * 0.282) < 0.06);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    memset(&sd, 0, sizeof sd);
    sd.water.molecules = 300;
    sd.water.seed = 41;
    sd.pairs = 5;
    MD_CHECK_OK(md_build_salt_water(&s, &t, &lj, &sd));
    for (i = 0; i < s.n; i++) {
        na += t.lj_type[i] == MD_TYPE_NA;
        cl += t.lj_type[i] == MD_TYPE_CL;
    }
    nw = (s.n - 10) / 3;
    MD_CHECK(na == 5 && cl == 5 && s.n == 3 * 290 + 10 && t.nwater == nw && t.nbond == 2 * nw);
    MD_CHECK(fabs(md_system_charge(&s)) < 1e-4);
    MD_CHECK(md_topology_check(&t, &lj, "salt") == MD_OK);
    md_water_pdb_names(&s);
    MD_CHECK(strcmp(s.name[t.water[0]].s, "O") == 0 && strcmp(s.name[t.water[1]].s, "H1") == 0);
    MD_CHECK_OK(md_write_pdb(TMPDIR "/salt.pdb", &s));
    MD_CHECK_OK(md_read_pdb(TMPDIR "/salt.pdb", &r));
    MD_CHECK_OK(md_topology_water_ions(&r, MD_WATER_TIP3P, &rt, &rl));
    MD_CHECK(rt.n == t.n && rt.nwater == t.nwater && rt.excl_start[rt.n] == t.excl_start[t.n]);
    for (i = 0; i < t.n; i++) {
        MD_CHECKF(rt.charge[i] == t.charge[i] && rt.lj_type[i] == t.lj_type[i] && rt.mass[i] == t.mass[i], "atom %d", i);
        MD_CHECK(rt.excl_start[i] == t.excl_start[i]);
    }
    for (i = 0; i < t.excl_start[t.n]; i++) MD_CHECK(rt.excl[i] == t.excl[i]);
    for (i = 0; i < 3 * t.nwater; i++) w += rt.water[i] == t.water[i];
    MD_CHECK(w == 3 * t.nwater);
    for (i = 0; i < 4 * 4; i++) MD_CHECK(rl.c6[i] == lj.c6[i] && rl.c12[i] == lj.c12[i]);
    strcpy(r.resname[t.water[0]].s, "LIG");
    MD_CHECK_ERROR(md_topology_water_ions(&r, MD_WATER_TIP3P, &rt, &rl), MD_ERR_PARSE, "LIG");
    strcpy(r.resname[t.water[0]].s, "HOH");
    strcpy(r.name[t.water[3]].s, "C1"); /* a water residue that does not start with its oxygen */
    MD_CHECK_ERROR(md_topology_water_ions(&r, MD_WATER_TIP3P, &rt, &rl), MD_ERR_PARSE, "oxygen");
    md_system_free(&r);
    md_topology_free(&rt);
    md_lj_table_free(&rl);
    sd.pairs = 150;
    MD_CHECK_ERROR(md_build_salt_water(&r, &rt, &rl, &sd), MD_ERR_RANGE, "pairs");
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- bad input ---- */

/* Every entry point rejects bad input with the field named and leaves its outputs untouched
 * (forces poisoned with 7.0 before the call stay 7.0). */
static void bad_input(void) {
    md_system s;
    md_ewald_params ep;
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e;
    double box[3] = {2.0, 2.0, 2.0}, bad_box[3] = {2.0, -1.0, 2.0}, f[3 * 20];
    int i, g[3];
    double a;
    MD_CHECK_OK(snapped_charges(&s, 20, box, 5));
    for (i = 0; i < 3 * 20; i++) f[i] = 7.0;
    memset(&e, 0, sizeof e);
    e.coul_real = 7.0;
    memset(&ep, 0, sizeof ep);
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, NULL, 20, box, f, &e), MD_ERR_INVALID_ARGUMENT, "xyzq");
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 0, box, f, &e), MD_ERR_INVALID_ARGUMENT, "n");
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 20, bad_box, f, &e), MD_ERR_RANGE, "box");
    ep.alpha = -1.0;
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 20, box, f, &e), MD_ERR_RANGE, "alpha");
    ep.alpha = 0.0;
    ep.kmax[1] = -2;
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 20, box, f, &e), MD_ERR_RANGE, "kmax");
    ep.kmax[1] = 0;
    ep.tolerance = 0.7;
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 20, box, f, &e), MD_ERR_RANGE, "tolerance");
    ep.tolerance = 0.0;
    s.xyzq[7].y = NAN;
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 20, box, f, &e), MD_ERR_RANGE, "xyzq[7]");
    s.xyzq[7].y = 1.0f;
    s.xyzq[9].w = INFINITY;
    MD_CHECK_ERROR(md_ewald_compute(&ep, NULL, s.xyzq, 20, box, f, &e), MD_ERR_RANGE, "xyzq[9]");
    s.xyzq[9].w = 0.5f;
    {
        md_topology t;
        MD_CHECK_OK(md_topology_alloc(&t, 19));
        MD_CHECK_ERROR(md_ewald_compute(&ep, &t, s.xyzq, 20, box, f, &e), MD_ERR_INVALID_ARGUMENT, "t");
        md_topology_free(&t);
    }
    memset(&pp, 0, sizeof pp);
    pp.order = 3;
    MD_CHECK_ERROR(md_pme_plan_create(&plan, &pp, box, 20), MD_ERR_RANGE, "order");
    pp.order = 7;
    MD_CHECK_ERROR(md_pme_plan_create(&plan, &pp, box, 20), MD_ERR_RANGE, "order");
    pp.order = 6;
    pp.grid[0] = 5, pp.grid[1] = 8, pp.grid[2] = 8;
    MD_CHECK_ERROR(md_pme_plan_create(&plan, &pp, box, 20), MD_ERR_RANGE, "grid");
    pp.grid[0] = 0;
    MD_CHECK_ERROR(md_pme_plan_create(&plan, &pp, NULL, 20), MD_ERR_INVALID_ARGUMENT, "box");
    pp.spacing = -0.1;
    MD_CHECK_ERROR(md_pme_plan_create(&plan, &pp, box, 20), MD_ERR_RANGE, "spacing");
    pp.spacing = 0.0;
    MD_CHECK_ERROR(md_pme_plan_create(&plan, &pp, box, 0), MD_ERR_INVALID_ARGUMENT, "capacity");
    MD_CHECK_ERROR(md_pme_choose(0.0, 0.9, box, &a, g), MD_ERR_RANGE, "tolerance");
    MD_CHECK_ERROR(md_pme_choose(5e-4, -0.9, box, &a, g), MD_ERR_RANGE, "cutoff");
    MD_CHECK_ERROR(md_pme_choose(5e-4, 0.9, bad_box, &a, g), MD_ERR_RANGE, "box");
    MD_CHECK_OK(md_pme_plan_create(&plan, &pp, box, 10));
    MD_CHECK_ERROR(md_pme_compute(&plan, s.xyzq, 20, box, f, &e), MD_ERR_INVALID_ARGUMENT, "capacity");
    s.xyzq[3].x = INFINITY;
    MD_CHECK_ERROR(md_pme_compute(&plan, s.xyzq, 10, box, f, &e), MD_ERR_RANGE, "xyzq[3]");
    MD_CHECK_ERROR(md_pme_compute(&plan, s.xyzq, 10, bad_box, f, &e), MD_ERR_RANGE, "box");
    md_pme_plan_free(&plan);
    md_pme_plan_free(&plan); /* safe twice */
    for (i = 0; i < 3 * 20; i++) MD_CHECKF(f[i] == 7.0, "force %d was written on failure", i);
    MD_CHECK(e.coul_real == 7.0 && e.coul_recip == 0.0);
    md_system_free(&s);
}

static void make_tmpdir(void) {
    FILE *f;
    if ((f = fopen(TMPDIR "/.keep", "w"))) {
        fclose(f);
        return;
    }
    if (system("mkdir -p " TMPDIR) != 0) return;
}

int main(void) {
    make_tmpdir();
    MD_RUN(fft_matches_direct_dft);
    MD_RUN(fft3d_real_transforms);
    MD_RUN(fft_good_sizes);
    MD_RUN(pme_choose_is_openmms_rule);
    MD_RUN(bspline_values);
    MD_RUN(bspline_moduli);
    MD_RUN(madelung_rock_salt);
    MD_RUN(one_charge_in_background);
    MD_RUN(ewald_converged_invariants);
    MD_RUN(translation_invariance);
    MD_RUN(ewald_real_space_is_chapter_06s);
    MD_RUN(forces_are_minus_the_gradient);
    MD_RUN(pme_converges_to_ewald);
    MD_RUN(pme_plan_semantics);
    MD_RUN(ion_systems);
    MD_RUN(bad_input);
    return md_test_summary();
}
