/* Tests of chapter 08's CPU reference (md.h sections bonded, constraints, thermostat, sim,
 * checkpoint): harmonic bonds and angles against finite differences, analytic values and
 * box deformations; the force-field table reader and md_topology_from_psf; SETTLE against
 * SHAKE and against the constraint equations, RATTLE and the SETTLE velocity step; Philox
 * against Random123's known answers; the step's energy conservation with rigid water, its
 * thermostat's canonical kinetic-energy distribution, the barostat's density, restarts that
 * continue bit for bit, reproducibility with a seed, the errors that stop a run; the DCD
 * writer and the energies CSV.
 *
 * Seeds used: 101 (bonded systems), 202 (waters for SETTLE), 303 (chains for SHAKE), 7 and 8
 * (water boxes), 11 (argon velocities), 404 (thermostat seed), 505/506 (reproducibility). The
 * OpenMP rungs run with one thread here (tests/test_nb.c and test_pme.c cover the threaded
 * paths): on a loaded two-core machine spinning threads cost more than they give. */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"
#include "step_fixtures.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static double urand(md_rng *r, double lo, double hi) { return lo + (hi - lo) * md_rng_uniform(r); }

static void rand_unit(md_rng *r, double u[3]) {
    double n;
    do {
        int k;
        n = 0.0;
        for (k = 0; k < 3; k++) {
            u[k] = md_rng_normal(r);
            n += u[k] * u[k];
        }
    } while (n < 1e-6);
    n = sqrt(n);
    u[0] /= n, u[1] /= n, u[2] /= n;
}

/* A water at the given geometry, O at `o`, random orientation: 9 doubles. */
static void make_water(md_rng *r, const double o[3], double doh, double dhh, double w[9]) {
    double a[3], b[3], c[3], h = sqrt(doh * doh - 0.25 * dhh * dhh), n = 0.0;
    int k;
    rand_unit(r, a);
    do { /* b: a unit vector normal to a */
        rand_unit(r, c);
        b[0] = c[1] * a[2] - c[2] * a[1];
        b[1] = c[2] * a[0] - c[0] * a[2];
        b[2] = c[0] * a[1] - c[1] * a[0];
        n = sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2]);
    } while (n < 1e-3);
    for (k = 0; k < 3; k++) {
        b[k] /= n;
        w[k] = o[k];
        w[3 + k] = o[k] + h * a[k] + 0.5 * dhh * b[k];
        w[6 + k] = o[k] + h * a[k] - 0.5 * dhh * b[k];
    }
}

static double dist(const double *x, int i, int j) {
    double s = 0.0;
    int k;
    for (k = 0; k < 3; k++) s += (x[3 * i + k] - x[3 * j + k]) * (x[3 * i + k] - x[3 * j + k]);
    return sqrt(s);
}

static double max_abs(const double *v, size_t n) {
    double m = 0.0;
    size_t i;
    for (i = 0; i < n; i++)
        if (!(fabs(v[i]) <= m)) m = fabs(v[i]);
    return m;
}

/* A bonded system: nmol chains of 4 atoms (3 bonds, 2 angles), random geometry, some chains
 * straddling the box edge (positions wrapped atom by atom), random r0, k, theta0. */
typedef struct bsys {
    int n;
    double *x, box[3];
    md_bonded b;
} bsys;

static void bsys_free(bsys *s) {
    free(s->x);
    md_bonded_free(&s->b);
}

static int bsys_make(bsys *s, int nmol, uint64_t seed, int wrap) {
    md_rng r;
    int m, k, a;
    md_rng_seed(&r, seed);
    memset(s, 0, sizeof *s);
    s->n = 4 * nmol;
    s->box[0] = 2.0, s->box[1] = 2.2, s->box[2] = 2.4;
    s->x = (double *)malloc(3 * (size_t)s->n * sizeof(double));
    s->b.nbond = 3 * nmol;
    s->b.nangle = 2 * nmol;
    s->b.bond = (int *)malloc(2 * (size_t)s->b.nbond * sizeof(int));
    s->b.bond_r0 = (double *)malloc((size_t)s->b.nbond * sizeof(double));
    s->b.bond_k = (double *)malloc((size_t)s->b.nbond * sizeof(double));
    s->b.angle = (int *)malloc(3 * (size_t)s->b.nangle * sizeof(int));
    s->b.angle_theta0 = (double *)malloc((size_t)s->b.nangle * sizeof(double));
    s->b.angle_k = (double *)malloc((size_t)s->b.nangle * sizeof(double));
    if (!s->x || !s->b.bond || !s->b.bond_r0 || !s->b.bond_k || !s->b.angle || !s->b.angle_theta0 || !s->b.angle_k)
        return 0;
    for (m = 0; m < nmol; m++) {
        double p[3], u[3];
        for (k = 0; k < 3; k++) p[k] = urand(&r, 0.0, s->box[k]);
        for (a = 0; a < 4; a++) {
            if (a > 0) {
                double len = urand(&r, 0.09, 0.16);
                rand_unit(&r, u);
                for (k = 0; k < 3; k++) p[k] += len * u[k];
            }
            for (k = 0; k < 3; k++) {
                double v = p[k];
                if (wrap) v -= s->box[k] * floor(v / s->box[k]);
                s->x[3 * (4 * m + a) + k] = v;
            }
        }
        for (k = 0; k < 3; k++) {
            int i = 3 * m + k;
            s->b.bond[2 * i] = 4 * m + k;
            s->b.bond[2 * i + 1] = 4 * m + k + 1;
            s->b.bond_r0[i] = urand(&r, 0.1, 0.15);
            s->b.bond_k[i] = urand(&r, 1e5, 4e5);
        }
        for (k = 0; k < 2; k++) {
            int i = 2 * m + k;
            s->b.angle[3 * i] = 4 * m + k;
            s->b.angle[3 * i + 1] = 4 * m + k + 1;
            s->b.angle[3 * i + 2] = 4 * m + k + 2;
            s->b.angle_theta0[i] = urand(&r, 1.6, 2.2);
            s->b.angle_k[i] = urand(&r, 200.0, 600.0);
        }
    }
    return 1;
}

static double bonded_energy(const bsys *s, const double *x, const double *box) {
    md_energy e;
    memset(&e, 0, sizeof e);
    if (md_bonded_compute(&s->b, x, s->n, box, NULL, &e) != MD_OK) return NAN;
    return e.bonded;
}

/* ---- Philox and the Langevin noise ---- */

/* Random123's kat_vectors for philox4x32_10 (the same three every port checks). */
static void philox_known_answers(void) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    int v, k;
    for (v = 0; v < 3; v++) {
        uint32_t out[4];
        md_philox4x32_10(ctr[v], key[v], out);
        for (k = 0; k < 4; k++) MD_CHECKF(out[k] == want[v][k], "vector %d word %d: %08x, want %08x", v, k, out[k], want[v][k]);
    }
}

/* 3 x 200000 deviates: mean 0 within 5 standard errors (5 / sqrt(N)), variance 1 within 5
 * standard errors (5 sqrt(2 / N)), fourth moment 3 within 5 sqrt(96 / N) (the standard error
 * of the mean of z^4 is sqrt(E z^8 - 9) / sqrt(N) = sqrt(96 / N)); neighbouring atoms and steps
 * uncorrelated within 5 / sqrt(N); another seed gives other numbers. */
static void langevin_noise_moments(void) {
    const int N = 200000;
    double s1 = 0, s2 = 0, s4 = 0, c_atom = 0, c_step = 0, prev[3] = {0, 0, 0}, a[3], b[3], z[3];
    int i, k, same = 0;
    for (i = 0; i < N; i++) {
        md_langevin_normals(404, 17 + i / 1000, i % 1000, z);
        md_langevin_normals(404, 17 + i / 1000 + 1, i % 1000, b);
        for (k = 0; k < 3; k++) {
            s1 += z[k];
            s2 += z[k] * z[k];
            s4 += z[k] * z[k] * z[k] * z[k];
        }
        c_step += z[0] * b[0];
        if (i > 0) c_atom += z[1] * prev[1];
        for (k = 0; k < 3; k++) prev[k] = z[k];
        md_langevin_normals(405, 17 + i / 1000, i % 1000, a);
        same += a[0] == z[0];
    }
    s1 /= 3.0 * N, s2 /= 3.0 * N, s4 /= 3.0 * N;
    MD_CHECKF(fabs(s1) < 5.0 / sqrt(3.0 * N), "mean %g", s1);
    MD_CHECKF(fabs(s2 - 1.0) < 5.0 * sqrt(2.0 / (3.0 * N)), "variance %g", s2);
    MD_CHECKF(fabs(s4 - 3.0) < 5.0 * sqrt(96.0 / (3.0 * N)), "fourth moment %g", s4);
    MD_CHECKF(fabs(c_step / N) < 5.0 / sqrt((double)N), "step-to-step correlation %g", c_step / N);
    MD_CHECKF(fabs(c_atom / N) < 5.0 / sqrt((double)N), "atom-to-atom correlation %g", c_atom / N);
    MD_CHECKF(same < 5, "seeds 404 and 405 share %d deviates", same);
}

/* ---- bonded ---- */

/* Forces against central differences of the energy (h = 1e-6 nm): the truncation error is
 * h^2 E''' / 6 ~ 1e-12 relative and the rounding error ~ 1e-16 E / h ~ 1e-8 kJ/mol/nm for
 * energies of ~100 kJ/mol; allowed: 1e-6 of the largest force + 1e-5. Chains straddle the
 * box edges, so minimum images are exercised. */
static void bonded_forces_match_finite_differences(void) {
    bsys s;
    md_energy e;
    double *f, h = 1e-6, worst = 0.0, fmax;
    int i;
    MD_CHECK(bsys_make(&s, 40, 101, 1));
    f = (double *)calloc(3 * (size_t)s.n, sizeof(double));
    MD_CHECK(f);
    memset(&e, 0, sizeof e);
    MD_CHECK_OK(md_bonded_compute(&s.b, s.x, s.n, s.box, f, &e));
    MD_CHECKF(e.bonded > 1.0 && isfinite(e.bonded), "energy %g", e.bonded);
    MD_CHECKF(fabs(e.bonded - bonded_energy(&s, s.x, s.box)) == 0.0, "energy without forces differs");
    fmax = max_abs(f, 3 * (size_t)s.n);
    for (i = 0; i < 3 * s.n; i++) {
        double keep = s.x[i], ep, em, fd;
        s.x[i] = keep + h;
        ep = bonded_energy(&s, s.x, s.box);
        s.x[i] = keep - h;
        em = bonded_energy(&s, s.x, s.box);
        s.x[i] = keep;
        fd = -(ep - em) / (2 * h);
        if (fabs(fd - f[i]) > worst) worst = fabs(fd - f[i]);
    }
    free(f);
    bsys_free(&s);
    MD_CHECKF(worst <= 1e-6 * fmax + 1e-5, "largest |F - FD| %g (largest force %g)", worst, fmax);
}

/* Energies of one bond and one angle by hand: a bond 0.15 nm long with r0 0.1 nm and k 1000
 * is 500 x 0.05^2 = 1.25 kJ/mol; an angle of 135 degrees with theta0 100 degrees and k 400 is
 * 200 (35 pi / 180)^2. The atoms sit across the box edge, so only minimum images give these. */
static void bonded_energy_by_hand(void) {
    md_bonded b;
    double x[9] = {1.90, 1.0, 1.0, 0.05, 1.0, 1.0, 0.15, 1.1, 1.0}, box[3] = {2.0, 2.0, 2.0}, f[9] = {0};
    int bond[2] = {0, 1}, ang[3] = {0, 1, 2};
    double r0 = 0.1, k = 1000.0, th0 = 100.0 * 3.14159265358979323846 / 180.0, ka = 400.0, want;
    md_energy e;
    memset(&b, 0, sizeof b);
    b.nbond = 1, b.bond = bond, b.bond_r0 = &r0, b.bond_k = &k;
    memset(&e, 0, sizeof e);
    MD_CHECK_OK(md_bonded_compute(&b, x, 3, box, f, &e));
    MD_CHECK_CLOSE(e.bonded, 1.25, 1e-12, 0.0);
    MD_CHECK_CLOSE(f[0], 1000.0 * 0.05, 1e-12, 1e-12); /* atom 0 is 0.15 nm on the -x side of atom 1: pulled to +x */
    MD_CHECK_CLOSE(f[3], -1000.0 * 0.05, 1e-12, 1e-12);
    memset(&b, 0, sizeof b);
    b.nangle = 1, b.angle = ang, b.angle_theta0 = &th0, b.angle_k = &ka;
    want = 200.0 * pow(35.0 * 3.14159265358979323846 / 180.0, 2); /* a = (-0.15, 0, 0), c = (0.1, 0.1, 0): 135 deg */
    MD_CHECK_OK(md_bonded_compute(&b, x, 3, box, NULL, &e));
    MD_CHECK_CLOSE(e.bonded, want, 1e-12, 0.0);
    MD_CHECK_OK(md_bonded_compute(&b, x, 3, NULL, NULL, &e)); /* without the box a = (1.85, 0, 0): 45 deg */
    MD_CHECKF(fabs(e.bonded - want) > 1.0, "no box gave the same energy %g", e.bonded);
}

/* The virial W_ab = sum r_a F_b against the energy's response to the deformation x_b += eps x_a
 * of every position (no box: whole molecules), dE/deps = -W_ab, by central differences with
 * eps = 1e-6; allowed 1e-6 of the largest |W| + 1e-6. */
static void bonded_virial_matches_deformation(void) {
    bsys s;
    md_energy e;
    double *y, eps = 1e-6, wmax;
    int a, b, i;
    MD_CHECK(bsys_make(&s, 30, 102, 0));
    y = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    MD_CHECK(y);
    memset(&e, 0, sizeof e);
    MD_CHECK_OK(md_bonded_compute(&s.b, s.x, s.n, NULL, NULL, &e));
    wmax = max_abs(e.virial, 9);
    MD_CHECK(wmax > 1.0);
    for (a = 0; a < 3; a++)
        for (b = 0; b < 3; b++) {
            double ep, em, d;
            for (i = 0; i < 3 * s.n; i++) y[i] = s.x[i];
            for (i = 0; i < s.n; i++) y[3 * i + b] += eps * s.x[3 * i + a];
            ep = bonded_energy(&s, y, NULL);
            for (i = 0; i < s.n; i++) y[3 * i + b] -= 2 * eps * s.x[3 * i + a];
            em = bonded_energy(&s, y, NULL);
            d = -(ep - em) / (2 * eps);
            MD_CHECKF(fabs(d - e.virial[3 * a + b]) <= 1e-6 * wmax + 1e-6, "W[%d][%d] = %g, -dE/deps = %g", a, b,
                      e.virial[3 * a + b], d);
        }
    free(y);
    bsys_free(&s);
}

/* The GPU's float arithmetic (md_bond_f32, md_angle_f32) against the double reference on the
 * same vectors: forces within 2e-5 of the largest force (float rounding of products of
 * ~0.1 nm vectors and constants of 1e5), energies within 2e-5 relative + 1e-5. */
static void bonded_float_matches_double(void) {
    bsys s;
    double fmax = 0.0, worst = 0.0, eworst = 0.0;
    int k, u;
    MD_CHECK(bsys_make(&s, 40, 103, 0));
    for (k = 0; k < s.b.nbond; k++) {
        int i = s.b.bond[2 * k], j = s.b.bond[2 * k + 1];
        float d[3], ef, fs;
        double dd[3], r, fsd, ed;
        for (u = 0; u < 3; u++) {
            dd[u] = s.x[3 * i + u] - s.x[3 * j + u];
            d[u] = (float)dd[u];
        }
        r = sqrt(dd[0] * dd[0] + dd[1] * dd[1] + dd[2] * dd[2]);
        fsd = -s.b.bond_k[k] * (r - s.b.bond_r0[k]) / r;
        ed = 0.5 * s.b.bond_k[k] * (r - s.b.bond_r0[k]) * (r - s.b.bond_r0[k]);
        fs = md_bond_f32(d, (float)s.b.bond_r0[k], (float)s.b.bond_k[k], &ef);
        for (u = 0; u < 3; u++) {
            fmax = fmax > fabs(fsd * dd[u]) ? fmax : fabs(fsd * dd[u]);
            worst = worst > fabs(fs * d[u] - fsd * dd[u]) ? worst : fabs(fs * d[u] - fsd * dd[u]);
        }
        eworst = eworst > fabs(ef - ed) / (fabs(ed) + 1.0) ? eworst : fabs(ef - ed) / (fabs(ed) + 1.0);
    }
    for (k = 0; k < s.b.nangle; k++) {
        const int *t = s.b.angle + 3 * k;
        md_bonded one;
        float a[3], c[3], fi[3], fk[3], ef;
        double f[12] = {0}, xs[9];
        int ids[3] = {0, 1, 2};
        md_energy e;
        for (u = 0; u < 3; u++) {
            xs[u] = s.x[3 * t[0] + u];
            xs[3 + u] = s.x[3 * t[1] + u];
            xs[6 + u] = s.x[3 * t[2] + u];
            a[u] = (float)(xs[u] - xs[3 + u]);
            c[u] = (float)(xs[6 + u] - xs[3 + u]);
        }
        memset(&one, 0, sizeof one);
        one.nangle = 1, one.angle = ids, one.angle_theta0 = &s.b.angle_theta0[k], one.angle_k = &s.b.angle_k[k];
        memset(&e, 0, sizeof e);
        MD_CHECK_OK(md_bonded_compute(&one, xs, 3, NULL, f, &e));
        md_angle_f32(a, c, (float)s.b.angle_theta0[k], (float)s.b.angle_k[k], fi, fk, &ef);
        for (u = 0; u < 3; u++) {
            fmax = fmax > fabs(f[u]) ? fmax : fabs(f[u]);
            worst = worst > fabs(fi[u] - f[u]) ? worst : fabs(fi[u] - f[u]);
            worst = worst > fabs(fk[u] - f[6 + u]) ? worst : fabs(fk[u] - f[6 + u]);
        }
        eworst = eworst > fabs(ef - e.bonded) / (fabs(e.bonded) + 1.0) ? eworst : fabs(ef - e.bonded) / (fabs(e.bonded) + 1.0);
    }
    bsys_free(&s);
    MD_CHECKF(worst <= 2e-5 * fmax, "largest float-double force difference %g (largest force %g)", worst, fmax);
    MD_CHECKF(eworst <= 2e-5, "largest relative energy difference %g", eworst);
}

/* Angles of a branched graph worked out by hand: bonds 0-1 1-2 2-3 1-4 (and 0-1 again) give
 * (0,1,2) (0,1,4) (2,1,4) at vertex 1 and (1,2,3) at vertex 2, in that order. */
static void angles_from_bonds_by_hand(void) {
    md_topology t;
    int bonds[10] = {0, 1, 1, 2, 2, 3, 1, 4, 1, 0};
    static const int want[12] = {0, 1, 2, 0, 1, 4, 2, 1, 4, 1, 2, 3};
    int k;
    MD_CHECK_OK(md_topology_alloc(&t, 5));
    MD_CHECK_OK(md_topology_set_bonds(&t, 5, bonds, NULL, NULL));
    MD_CHECK_OK(md_topology_angles_from_bonds(&t));
    MD_CHECKF(t.nangle == 4, "%d angles", t.nangle);
    for (k = 0; k < 12; k++) MD_CHECKF(t.angle[k] == want[k], "angle entry %d is %d, want %d", k, t.angle[k], want[k]);
    MD_CHECK(t.angle_k == NULL && t.angle_theta0 == NULL);
    md_topology_free(&t);
}

/* ---- the force-field table and PSF systems ---- */

static void ff_table_reads_entries(void) {
    md_ff_table t;
    MD_CHECK_OK(md_read_ff_table_mem(ff_text, strlen(ff_text), "ff.txt", &t));
    MD_CHECK(t.nlj == 6 && t.nbond == 4 && t.nangle == 4 && t.nwater == 1);
    MD_CHECK(strcmp(t.lj_type[2].s, "OH1") == 0 && t.lj_sigma[2] == 0.3154 && t.lj_epsilon[2] == 0.6368);
    MD_CHECK(strcmp(t.bond_type[2].s, "OH1") == 0 && strcmp(t.bond_type[3].s, "CT3") == 0 && t.bond_r0[1] == 0.142);
    MD_CHECK_CLOSE(t.angle_theta0[3], 104.52 * 3.14159265358979323846 / 180.0, 1e-15, 0.0);
    MD_CHECK(t.angle_k[2] == 481.16 && strcmp(t.angle_type[3 * 2 + 1].s, "OH1") == 0);
    MD_CHECK(strcmp(t.water_type[0].s, "OT") == 0 && strcmp(t.water_type[1].s, "HT") == 0);
    md_ff_table_free(&t);
    md_ff_table_free(&t); /* safe twice */
}

static void ff_table_rejects_bad_input(void) {
    md_ff_table t;
    const char *bad[][3] = {
        {"lj A 0.3 0.5\nangel A A A 100 10\n", "bad.ff:2", "keyword"},
        {"bond A B 0.1\n", "bad.ff:1", "bond"},
        {"bond A B 0.1 10 7\n", "bad.ff:1", "bond"},
        {"lj A 0.3x 0.5\n", "bad.ff:1", "sigma"},
        {"lj A 0.3 -0.5\n", "bad.ff:1", "epsilon"},
        {"bond A B 0 10\n", "bad.ff:1", "r0"},
        {"angle A B C 181 10\n", "bad.ff:1", "theta0"},
        {"lj A 0.3 nan\n", "bad.ff:1", "epsilon"},
        {"lj ABCDEFGHIJKLMNOPQ 0.3 0.5\n", "bad.ff:1", "type"},
        {"bond A B 0.1 10\n\nbond B A 0.12 10\n", "bad.ff:3", "line 1"},
        {"angle A B C 100 10\nangle C B A 100 10\n", "bad.ff:2", "line 1"},
        {"# only a comment\n\n", "bad.ff", "no entries"},
    };
    size_t k;
    for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        md_status st;
        md_clear_error();
        memset(&t, 0x5a, sizeof t);
        st = md_read_ff_table_mem(bad[k][0], strlen(bad[k][0]), "bad.ff", &t);
        MD_CHECKF(st == MD_ERR_PARSE || st == MD_ERR_RANGE, "case %zu returned %s", k, md_status_string(st));
        MD_CHECKF(strstr(md_last_error(), bad[k][1]) && strstr(md_last_error(), bad[k][2]) &&
                      strstr(md_last_error(), "bad.ff"),
                  "case %zu: message '%s' lacks '%s' or '%s'", k, md_last_error(), bad[k][1], bad[k][2]);
        MD_CHECKF(t.nlj == 0x5a5a5a5a, "case %zu wrote the output", k);
    }
    MD_CHECK_ERROR(md_read_ff_table("/nonexistent/ff.txt", &t), MD_ERR_IO, "nonexistent");
}

static void topology_from_psf_and_table(void) {
    md_ff_table tab;
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_psf_desc d;
    double *pos;
    int n, k, c, h;
    char *psf = make_psf(2, 2, 0.5, &pos, &n);
    MD_CHECK(psf);
    MD_CHECK_OK(md_read_ff_table_mem(ff_text, strlen(ff_text), "ff.txt", &tab));
    MD_CHECK_OK(md_read_psf_mem(psf, strlen(psf), "meoh.psf", &sys));
    memset(&d, 0, sizeof d);
    d.constrain_hbonds = 1;
    MD_CHECK_OK(md_topology_from_psf(&sys, &tab, &d, &t, &lj));
    MD_CHECK(t.n == 18 && lj.ntypes == 6);
    /* types in order of first appearance: CT3 HA3 OH1 H OT HT */
    MD_CHECK(t.lj_type[0] == 0 && t.lj_type[1] == 1 && t.lj_type[4] == 2 && t.lj_type[5] == 3 && t.lj_type[12] == 4 &&
             t.lj_type[13] == 5);
    MD_CHECK(lj.sigma[2] == 0.3154 && lj.epsilon[4] == 0.636386);
    MD_CHECK_CLOSE(lj.c6[0 * 6 + 2], 4 * sqrt(0.3347 * 0.6368) * pow(0.5 * (0.3671 + 0.3154), 6), 1e-14, 0.0);
    MD_CHECK(t.charge[5] == (float)0.43 && t.mass[4] == (float)15.999);
    MD_CHECK(t.nbond == 14 && t.bond_r0 && t.bond_k);
    for (k = 0; k < t.nbond; k++) {
        int a = t.bond[2 * k], b = t.bond[2 * k + 1];
        const char *ta = sys.type_name[a].s, *tb = sys.type_name[b].s;
        double want = (!strcmp(ta, "CT3") && !strcmp(tb, "HA3")) ? 0.111 : (!strcmp(tb, "OH1") || !strcmp(ta, "OH1")) && (!strcmp(ta, "CT3") || !strcmp(tb, "CT3")) ? 0.142 : !strcmp(ta, "OT") ? 0.09572 : 0.096;
        MD_CHECKF(t.bond_r0[k] == want, "bond %d (%s-%s) r0 %g, want %g", k, ta, tb, t.bond_r0[k], want);
    }
    /* per methanol: 6 angles at C (4 neighbours) and 1 at O; per water 1 */
    MD_CHECKF(t.nangle == 2 * 7 + 2, "%d angles", t.nangle);
    for (k = 0; k < t.nangle; k++) MD_CHECK(t.angle_k[k] > 0.0 && t.angle_theta0[k] > 1.8 && t.angle_theta0[k] < 1.92);
    MD_CHECK(t.nwater == 2 && t.water[0] == 12 && t.water[1] == 13 && t.water[2] == 14 && t.water[3] == 15);
    MD_CHECK_CLOSE(t.water_doh, 0.09572, 1e-15, 0.0);
    MD_CHECK_CLOSE(t.water_dhh, 2 * 0.09572 * sin(0.5 * 104.52 * 3.14159265358979323846 / 180), 1e-14, 0.0);
    /* hydrogen bonds of the methanols: 3 C-H and 1 O-H each, never a water's */
    MD_CHECKF(t.nconstraint == 8, "%d constraints", t.nconstraint);
    for (k = 0, c = 0, h = 0; k < t.nconstraint; k++) {
        c += t.constraint[2 * k] < 12;
        h += t.constraint_length[k] == 0.111 || t.constraint_length[k] == 0.096;
    }
    MD_CHECK(c == 8 && h == 8);
    MD_CHECK(md_topology_excluded(&t, 0, 5) && md_topology_excluded(&t, 1, 5) && !md_topology_excluded(&t, 0, 6));
    MD_CHECK_OK(md_topology_check(&t, &lj, "test"));
    md_topology_free(&t);
    md_lj_table_free(&lj);
    /* flexible water and no constraints */
    d.flexible_water = 1;
    d.constrain_hbonds = 0;
    MD_CHECK_OK(md_topology_from_psf(&sys, &tab, &d, &t, &lj));
    MD_CHECK(t.nwater == 0 && t.nconstraint == 0);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    md_ff_table_free(&tab);
    /* a missing angle entry names the atoms and types */
    {
        char *text = (char *)malloc(strlen(ff_text) + 1), *p;
        strcpy(text, ff_text);
        p = strstr(text, "angle OH1 CT3 HA3");
        p[0] = '#';
        MD_CHECK_OK(md_read_ff_table_mem(text, strlen(text), "ff2.txt", &tab));
        memset(&t, 0x5a, sizeof t);
        MD_CHECK_ERROR(md_topology_from_psf(&sys, &tab, NULL, &t, &lj), MD_ERR_INVALID_ARGUMENT, "'HA3' 'CT3' 'OH1'");
        MD_CHECK(t.n == 0x5a5a5a5a);
        md_ff_table_free(&tab);
        strcpy(text, ff_text);
        p = strstr(text, "lj H ");
        p[0] = '#';
        MD_CHECK_OK(md_read_ff_table_mem(text, strlen(text), "ff3.txt", &tab));
        MD_CHECK_ERROR(md_topology_from_psf(&sys, &tab, NULL, &t, &lj), MD_ERR_INVALID_ARGUMENT, "type 'H'");
        md_ff_table_free(&tab);
        free(text);
    }
    md_system_free(&sys);
    free(psf);
    free(pos);
}

/* ---- SETTLE, SHAKE, RATTLE ---- */

typedef struct wset {
    int nw;
    double *ref, *unc, *m;
    md_topology t;
} wset;

/* nw TIP3P waters with exact geometry (ref) and each atom moved by up to `step` nm (unc). */
static int wset_make(wset *w, int nw, double step, uint64_t seed) {
    md_water_params p;
    md_rng r;
    int k, i;
    memset(w, 0, sizeof *w);
    md_water_model_params(MD_WATER_TIP3P, &p);
    md_rng_seed(&r, seed);
    w->nw = nw;
    w->ref = (double *)malloc(9 * (size_t)nw * sizeof(double));
    w->unc = (double *)malloc(9 * (size_t)nw * sizeof(double));
    if (!w->ref || !w->unc || md_topology_alloc(&w->t, 3 * nw) != MD_OK) return 0;
    w->t.water = (int *)malloc(3 * (size_t)nw * sizeof(int));
    if (!w->t.water) return 0;
    w->t.nwater = nw;
    w->t.water_doh = p.d_oh;
    w->t.water_dhh = p.d_hh;
    for (k = 0; k < nw; k++) {
        double o[3] = {urand(&r, 0, 3), urand(&r, 0, 3), urand(&r, 0, 3)};
        make_water(&r, o, p.d_oh, p.d_hh, w->ref + 9 * k);
        for (i = 0; i < 3; i++) {
            w->t.water[3 * k + i] = 3 * k + i;
            w->t.mass[3 * k + i] = (float)(i == 0 ? p.mass_o : p.mass_h);
        }
    }
    for (i = 0; i < 9 * nw; i++) w->unc[i] = w->ref[i] + urand(&r, -step, step);
    return 1;
}

static void wset_free(wset *w) {
    free(w->ref);
    free(w->unc);
    md_topology_free(&w->t);
}

/* SETTLE on 300 waters moved by up to 0.01 nm per coordinate (five times a 2 fs step of
 * a hot hydrogen): every distance within 1e-12 relative of the model's (double rounding;
 * the card asks for 1e-6), the centre of mass of each water where the unconstrained one was
 * (1e-14 nm), the constraint displacements free of torque about the reference centre of
 * mass (1e-14 amu nm^2: the forces act along the reference bonds), and equal to SHAKE on the
 * same waters (three constraints each, tolerance 1e-14) within 1e-10 nm. */
static void settle_exact_momentum_and_shake(void) {
    wset w;
    md_constraints c, cs;
    md_constraints_desc sd;
    double *x, *y, worst_com = 0, worst_tq = 0, diff = 0;
    int k, i, a;
    MD_CHECK(wset_make(&w, 300, 0.01, 202));
    x = (double *)malloc(9 * (size_t)w.nw * sizeof(double));
    y = (double *)malloc(9 * (size_t)w.nw * sizeof(double));
    MD_CHECK(x && y);
    memcpy(x, w.unc, 9 * (size_t)w.nw * sizeof(double));
    memcpy(y, w.unc, 9 * (size_t)w.nw * sizeof(double));
    MD_CHECK_OK(md_constraints_create(&c, &w.t, NULL));
    MD_CHECK(c.nwater == 300 && c.npair == 0 && md_constraints_count(&c) == 900);
    MD_CHECK_OK(md_constraints_apply(&c, w.ref, x, NULL));
    MD_CHECKF(md_constraints_max_deviation(&c, x, NULL) < 1e-12, "deviation %g", md_constraints_max_deviation(&c, x, NULL));
    MD_CHECKF(md_constraints_max_deviation(&c, w.unc, NULL) > 1e-3, "the unconstrained waters were already rigid");
    for (k = 0; k < w.nw; k++) {
        double m[3] = {c.mass_o, c.mass_h, c.mass_h}, M = c.mass_o + 2 * c.mass_h, rc[3] = {0, 0, 0}, tq[3] = {0, 0, 0};
        for (a = 0; a < 3; a++) {
            double com_x = 0, com_u = 0;
            for (i = 0; i < 3; i++) {
                com_x += m[i] * x[9 * k + 3 * i + a];
                com_u += m[i] * w.unc[9 * k + 3 * i + a];
                rc[a] += m[i] * w.ref[9 * k + 3 * i + a] / M;
            }
            worst_com = fmax(worst_com, fabs(com_x - com_u) / M);
        }
        for (i = 0; i < 3; i++) {
            double r[3], dd[3];
            for (a = 0; a < 3; a++) {
                r[a] = w.ref[9 * k + 3 * i + a] - rc[a];
                dd[a] = m[i] * (x[9 * k + 3 * i + a] - w.unc[9 * k + 3 * i + a]);
            }
            tq[0] += r[1] * dd[2] - r[2] * dd[1];
            tq[1] += r[2] * dd[0] - r[0] * dd[2];
            tq[2] += r[0] * dd[1] - r[1] * dd[0];
        }
        worst_tq = fmax(worst_tq, max_abs(tq, 3));
    }
    MD_CHECKF(worst_com < 1e-14, "centre of mass moved by %g nm", worst_com);
    MD_CHECKF(worst_tq < 1e-14, "constraint displacements carry a torque of %g amu nm^2", worst_tq);
    memset(&sd, 0, sizeof sd);
    sd.water_by_shake = 1;
    sd.tolerance = 1e-14;
    MD_CHECK_OK(md_constraints_create(&cs, &w.t, &sd));
    MD_CHECK(cs.nwater == 0 && cs.npair == 900 && md_constraints_count(&cs) == 900);
    MD_CHECK_OK(md_constraints_apply(&cs, w.ref, y, NULL));
    MD_CHECK(cs.last_iterations > 2);
    for (i = 0; i < 9 * w.nw; i++) diff = fmax(diff, fabs(x[i] - y[i]));
    MD_CHECKF(diff < 1e-10, "SETTLE and SHAKE differ by %g nm", diff);
    /* a rigid water that did not move stays where it is */
    memcpy(x, w.ref, 9 * (size_t)w.nw * sizeof(double));
    MD_CHECK_OK(md_constraints_apply(&c, w.ref, x, NULL));
    for (i = 0, diff = 0; i < 9 * w.nw; i++) diff = fmax(diff, fabs(x[i] - w.ref[i]));
    MD_CHECKF(diff < 1e-14, "a resting water moved by %g nm", diff);
    md_constraints_free(&c);
    md_constraints_free(&cs);
    free(x);
    free(y);
    wset_free(&w);
}

/* The velocity step: random velocities (1 nm/ps per component) made rigid by
 * md_settle_velocities: every bond's relative velocity below 1e-12 nm/ps, momentum kept to
 * 1e-13 amu nm/ps, equal to RATTLE (three constraints per water, tolerance 1e-14) within 1e-9
 * nm/ps, and a second application changes nothing (1e-13). */
static void settle_velocities_match_rattle(void) {
    wset w;
    md_constraints c, cs;
    md_constraints_desc sd;
    md_rng r;
    double *v, *u, *v0, worst = 0, dp = 0, diff = 0;
    int k, i, a;
    MD_CHECK(wset_make(&w, 200, 0.0, 203));
    v = (double *)malloc(9 * (size_t)w.nw * sizeof(double));
    u = (double *)malloc(9 * (size_t)w.nw * sizeof(double));
    v0 = (double *)malloc(9 * (size_t)w.nw * sizeof(double));
    MD_CHECK(v && u && v0);
    md_rng_seed(&r, 204);
    for (i = 0; i < 9 * w.nw; i++) v0[i] = v[i] = u[i] = md_rng_normal(&r);
    MD_CHECK_OK(md_constraints_create(&c, &w.t, NULL));
    MD_CHECK_OK(md_constraints_apply_velocities(&c, w.ref, v, NULL));
    for (k = 0; k < w.nw; k++) {
        static const int pa[3] = {0, 0, 1}, pb[3] = {1, 2, 2};
        double m[3] = {c.mass_o, c.mass_h, c.mass_h};
        int p;
        for (p = 0; p < 3; p++) {
            double e[3], rv = 0, len = dist(w.ref + 9 * k, pa[p], pb[p]);
            for (a = 0; a < 3; a++) e[a] = (w.ref[9 * k + 3 * pb[p] + a] - w.ref[9 * k + 3 * pa[p] + a]) / len;
            for (a = 0; a < 3; a++) rv += (v[9 * k + 3 * pb[p] + a] - v[9 * k + 3 * pa[p] + a]) * e[a];
            worst = fmax(worst, fabs(rv));
        }
        for (a = 0; a < 3; a++) {
            double p0 = 0, p1 = 0;
            for (i = 0; i < 3; i++) {
                p0 += m[i] * v0[9 * k + 3 * i + a];
                p1 += m[i] * v[9 * k + 3 * i + a];
            }
            dp = fmax(dp, fabs(p1 - p0));
        }
    }
    MD_CHECKF(worst < 1e-12, "relative velocity along a bond %g nm/ps", worst);
    MD_CHECKF(dp < 1e-13, "momentum changed by %g", dp);
    memset(&sd, 0, sizeof sd);
    sd.water_by_shake = 1;
    sd.tolerance = 1e-14;
    MD_CHECK_OK(md_constraints_create(&cs, &w.t, &sd));
    MD_CHECK_OK(md_constraints_apply_velocities(&cs, w.ref, u, NULL));
    for (i = 0; i < 9 * w.nw; i++) diff = fmax(diff, fabs(u[i] - v[i]));
    MD_CHECKF(diff < 1e-9, "SETTLE and RATTLE velocities differ by %g nm/ps", diff);
    memcpy(u, v, 9 * (size_t)w.nw * sizeof(double));
    MD_CHECK_OK(md_constraints_apply_velocities(&c, w.ref, u, NULL));
    for (i = 0, diff = 0; i < 9 * w.nw; i++) diff = fmax(diff, fabs(u[i] - v[i]));
    MD_CHECKF(diff < 1e-13, "a second application changed the velocities by %g", diff);
    md_constraints_free(&c);
    md_constraints_free(&cs);
    free(v);
    free(u);
    free(v0);
    wset_free(&w);
}

/* SHAKE and RATTLE on chains: 60 chains of 5 atoms (4 constraints each, masses 1 to 16),
 * reference at the constraint lengths, atoms moved by up to 0.005 nm: afterwards every
 * constraint within the tolerance 1e-10 (plus 1e-15 of rounding), momentum sum m x kept to
 * 1e-13 amu nm; RATTLE leaves |r . v_ij| <= 1e-10 d^2. Across the box edge (box given). */
static void shake_rattle_chains(void) {
    const int nmol = 60, per = 5;
    md_topology t;
    md_constraints c;
    md_rng r;
    double box[3] = {2.0, 2.0, 2.0}, *ref, *x, *v, mx0[3] = {0, 0, 0}, mx1[3] = {0, 0, 0};
    int m, i, a, k;
    md_rng_seed(&r, 303);
    MD_CHECK_OK(md_topology_alloc(&t, nmol * per));
    t.nconstraint = nmol * (per - 1);
    t.constraint = (int *)malloc(2 * (size_t)t.nconstraint * sizeof(int));
    t.constraint_length = (double *)malloc((size_t)t.nconstraint * sizeof(double));
    ref = (double *)malloc(3 * (size_t)t.n * sizeof(double));
    x = (double *)malloc(3 * (size_t)t.n * sizeof(double));
    v = (double *)malloc(3 * (size_t)t.n * sizeof(double));
    MD_CHECK(t.constraint && t.constraint_length && ref && x && v);
    for (m = 0; m < nmol; m++) {
        double p[3] = {urand(&r, 0, 2), urand(&r, 0, 2), urand(&r, 0, 2)};
        for (i = 0; i < per; i++) {
            int at = per * m + i;
            t.mass[at] = (float)(i % 2 ? 1.008 : 12.0 + 4.0 * md_rng_uniform(&r));
            if (i > 0) {
                double u[3], len = urand(&r, 0.1, 0.15);
                int kk = (per - 1) * m + i - 1;
                rand_unit(&r, u);
                for (a = 0; a < 3; a++) p[a] += len * u[a];
                t.constraint[2 * kk] = at - 1;
                t.constraint[2 * kk + 1] = at;
                t.constraint_length[kk] = len;
            }
            for (a = 0; a < 3; a++) ref[3 * at + a] = p[a] - box[a] * floor(p[a] / box[a]);
        }
    }
    for (i = 0; i < 3 * t.n; i++) {
        x[i] = ref[i] + urand(&r, -0.005, 0.005);
        v[i] = md_rng_normal(&r);
    }
    for (i = 0; i < t.n; i++)
        for (a = 0; a < 3; a++) mx0[a] += t.mass[i] * x[3 * i + a];
    MD_CHECK_OK(md_constraints_create(&c, &t, NULL));
    MD_CHECK(c.npair == t.nconstraint && c.nwater == 0);
    MD_CHECK_OK(md_constraints_apply(&c, ref, x, box));
    MD_CHECKF(md_constraints_max_deviation(&c, x, box) < 1e-10 + 1e-15, "deviation %g after %d sweeps",
              md_constraints_max_deviation(&c, x, box), c.last_iterations);
    MD_CHECK(c.last_iterations > 1 && c.last_iterations < 200);
    for (i = 0; i < t.n; i++)
        for (a = 0; a < 3; a++) mx1[a] += t.mass[i] * x[3 * i + a];
    for (a = 0; a < 3; a++) MD_CHECKF(fabs(mx1[a] - mx0[a]) < 1e-13 * t.n * 16, "sum m x changed by %g", mx1[a] - mx0[a]);
    MD_CHECK_OK(md_constraints_apply_velocities(&c, x, v, box));
    for (k = 0; k < c.npair; k++) {
        int p = c.pair[2 * k], q = c.pair[2 * k + 1];
        double d[3], dot = 0;
        for (a = 0; a < 3; a++) {
            d[a] = x[3 * p + a] - x[3 * q + a];
            d[a] -= box[a] * rint(d[a] / box[a]);
            dot += d[a] * (v[3 * p + a] - v[3 * q + a]);
        }
        MD_CHECKF(fabs(dot) <= 1e-10 * c.length[k] * c.length[k] * 1.0001, "constraint %d: r.v = %g", k, dot);
    }
    /* a step far too large for SHAKE is an error, not a wrong answer */
    for (i = 0; i < 3 * t.n; i++) x[i] = ref[i] + urand(&r, -0.3, 0.3);
    MD_CHECK_ERROR(md_constraints_apply(&c, ref, x, box), MD_ERR_RANGE, "constraint");
    md_constraints_free(&c);
    md_topology_free(&t);
    free(ref);
    free(x);
    free(v);
}

static void constraints_reject_bad_topologies(void) {
    wset w;
    md_constraints c;
    md_constraints_desc sd;
    MD_CHECK(wset_make(&w, 4, 0.0, 205));
    w.t.mass[4] = 2.0f; /* one deuterium */
    memset(&c, 0x5a, sizeof c);
    MD_CHECK_ERROR(md_constraints_create(&c, &w.t, NULL), MD_ERR_INVALID_ARGUMENT, "water");
    MD_CHECK(c.n == 0x5a5a5a5a);
    memset(&sd, 0, sizeof sd);
    sd.water_by_shake = 1; /* SHAKE takes any masses */
    MD_CHECK_OK(md_constraints_create(&c, &w.t, &sd));
    md_constraints_free(&c);
    w.t.mass[4] = w.t.mass[5] = 2.0f; /* a heavy-water molecule among light ones */
    MD_CHECK_ERROR(md_constraints_create(&c, &w.t, NULL), MD_ERR_INVALID_ARGUMENT, "water 1");
    w.t.mass[4] = w.t.mass[5] = w.t.mass[2];
    w.t.water[5] = 0; /* an atom in two waters */
    MD_CHECK_ERROR(md_constraints_create(&c, &w.t, NULL), MD_ERR_INVALID_ARGUMENT, "two waters");
    w.t.water[5] = 5;
    w.t.water_dhh = 3 * w.t.water_doh;
    MD_CHECK_ERROR(md_constraints_create(&c, &w.t, NULL), MD_ERR_RANGE, "triangle");
    w.t.water_dhh = 0.15;
    sd.water_by_shake = 0;
    sd.tolerance = -1;
    MD_CHECK_ERROR(md_constraints_create(&c, &w.t, &sd), MD_ERR_RANGE, "tolerance");
    wset_free(&w);
}

/* ---- the step ---- */

/* A small TIP3P box (194 molecules in 1.8 nm, seed `seed`), cutoff 0.7 nm, buffer 0.1, PME. */
static md_status water_sim(md_sim *s, md_system *sys, md_topology *t, md_lj_table *lj, double edge, int molecules,
                           uint64_t seed, const md_sim_desc *extra) {
    md_water_desc wd;
    md_sim_desc d;
    md_status st;
    memset(&wd, 0, sizeof wd);
    wd.edge = edge;
    wd.molecules = molecules;
    wd.seed = seed;
    if ((st = md_build_water_box(sys, t, lj, &wd)) != MD_OK) return st;
    if (extra) d = *extra;
    else memset(&d, 0, sizeof d);
    d.nb.cutoff = 0.7;
    d.nb.buffer = 0.1;
    return md_sim_create(s, sys, t, lj, &d);
}

static void free_all(md_sim *s, md_system *sys, md_topology *t, md_lj_table *lj) {
    md_sim_free(s);
    md_system_free(sys);
    md_topology_free(t);
    md_lj_table_free(lj);
}

/* Least-squares slope of y(t) and the largest |y - y[0]|. */
typedef struct fit {
    double sx, sy, sxx, sxy, y0, dev;
    int n;
} fit;

static void fit_add(fit *f, double t, double y) {
    if (f->n == 0) f->y0 = y;
    f->sx += t, f->sy += y - f->y0, f->sxx += t * t, f->sxy += t * (y - f->y0), f->n++;
    f->dev = fmax(f->dev, fabs(y - f->y0));
}

static double fit_slope(const fit *f) { return (f->n * f->sxy - f->sx * f->sy) / (f->n * f->sxx - f->sx * f->sx); }

/* NVE with rigid water and smooth forces: 27 TIP3P molecules condensed in a 1 nm cube inside a
 * 4 nm box, reaction field (eps infinite: force and energy go to 0 at rc) and LJ force switch
 * (0.6 to 1.9 nm), no pair reaching the cutoff. Leapfrog + SETTLE, 2 fs. After 3 ps (the
 * cluster condenses and heats from 200 K) the total energy over the next 6 ps may wander by at
 * most 0.3% of the kinetic energy with a slope below 0.03 kJ/mol/ps (measured: see the line
 * the test prints): with forces that are smooth functions of the positions the only
 * error left is the integrator's O(dt^2) fluctuation, so this bounds any drift the step
 * itself could add. */
static void nve_rigid_water_conserves_energy(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim s;
    md_sim_desc d;
    md_water_desc wd;
    fit f;
    double ke = 0.0;
    int k;
    memset(&wd, 0, sizeof wd);
    wd.edge = 1.0, wd.molecules = 27, wd.seed = 7, wd.temperature = 200;
    MD_CHECK_OK(md_build_water_box(&sys, &t, &lj, &wd));
    sys.box[0] = sys.box[1] = sys.box[2] = 4.0;
    memset(&d, 0, sizeof d);
    d.nb.cutoff = 1.9, d.nb.buffer = 0.1, d.nb.coul = MD_COUL_REACTION_FIELD, d.nb.lj = MD_LJ_FORCE_SWITCH;
    d.nb.switch_radius = 0.6;
    MD_CHECK_OK(md_sim_create(&s, &sys, &t, &lj, &d));
    MD_CHECK(!s.use_pme && s.ndof == 3 * 81 - 81 - 3);
    MD_CHECK_OK(md_sim_step(&s, 1500));
    memset(&f, 0, sizeof f);
    for (k = 0; k <= 60; k++) {
        md_energy e;
        if (k > 0) MD_CHECK_OK(md_sim_step(&s, 50));
        MD_CHECK_OK(md_sim_energy(&s, &e));
        fit_add(&f, s.time_ps, md_energy_total(&e));
        ke += e.kinetic / 61;
    }
    printf("  NVE water cluster, smooth forces, 6 ps: drift %.3g kJ/mol/ps, largest excursion %.3g kJ/mol (%.2g of KE %.1f)\n",
           fit_slope(&f), f.dev, f.dev / ke, ke);
    MD_CHECKF(f.dev < 0.003 * ke, "energy wandered by %g kJ/mol (kinetic %g)", f.dev, ke);
    MD_CHECKF(fabs(fit_slope(&f)) < 0.03, "drift %g kJ/mol/ps", fit_slope(&f));
    MD_CHECKF(md_constraints_max_deviation(&s.cons, s.x, s.box) < 1e-10, "constraint deviation %g",
              md_constraints_max_deviation(&s.cons, s.x, s.box));
    free_all(&s, &sys, &t, &lj);
}

/* NVE of a periodic TIP3P box with PME: relaxed with a strong Langevin friction (20/ps, 600
 * steps, from the builder's lattice), then 2000 leapfrog steps of 2 fs (4 ps). The Ewald
 * real-space cutoff (erfc(beta rc) = 1e-3 at the default tolerance) and the LJ force step at
 * the cutoff make the energy take small random steps, so over 4 ps the slope is mostly noise
 * (measured: 0.05 to 0.15 kJ/mol/ps per 1000 degrees of freedom at 2 fs; the device benchmark
 * measures drift over 100 ps on the 23,568-atom box). Allowed: 0.5 per 1000 degrees of freedom
 * and an RMS excursion below 0.5% of the kinetic energy; constraints within 1e-10; total
 * momentum zero (1e-9 amu nm/ps). */
static void nve_pme_water_box(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim s, s2;
    md_sim_desc d;
    fit f;
    double rms = 0, ke = 0, p[3] = {0, 0, 0}, slope;
    int k, i, a;
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.friction = 20.0;
    d.seed = 7;
    MD_CHECK_OK(water_sim(&s, &sys, &t, &lj, 1.8, 0, 7, &d));
    MD_CHECK_OK(md_sim_step(&s, 600));
    MD_CHECK_OK(md_sim_get_system(&s, &sys));
    memset(&d, 0, sizeof d);
    d.nb.cutoff = 0.7;
    d.nb.buffer = 0.1;
    MD_CHECK_OK(md_sim_create(&s2, &sys, &t, &lj, &d));
    MD_CHECK(s2.use_pme && s2.ndof == 3 * s2.n - 3 * t.nwater - 3);
    memset(&f, 0, sizeof f);
    for (k = 0; k <= 200; k++) {
        md_energy e;
        if (k > 0) MD_CHECK_OK(md_sim_step(&s2, 10));
        MD_CHECK_OK(md_sim_energy(&s2, &e));
        fit_add(&f, s2.time_ps, md_energy_total(&e));
        rms += (md_energy_total(&e) - f.y0) * (md_energy_total(&e) - f.y0) / 201;
        ke += e.kinetic / 201;
    }
    slope = fit_slope(&f);
    rms = sqrt(rms);
    printf("  NVE PME box of %d atoms, 4 ps: drift %.4g kJ/mol/ps (%.3g per 1000 dof), rms %.4g kJ/mol (%.3g of KE %.1f)\n",
           s2.n, slope, slope / s2.ndof * 1000, rms, rms / ke, ke);
    MD_CHECKF(fabs(slope) / s2.ndof * 1000 < 0.5, "drift %g kJ/mol/ps", slope);
    MD_CHECKF(rms < 0.005 * ke, "rms excursion %g kJ/mol (kinetic %g)", rms, ke);
    MD_CHECKF(md_constraints_max_deviation(&s2.cons, s2.x, s2.box) < 1e-10, "constraint deviation %g",
              md_constraints_max_deviation(&s2.cons, s2.x, s2.box));
    for (i = 0; i < s2.n; i++)
        for (a = 0; a < 3; a++) p[a] += s2.v[3 * i + a] / s2.inv_mass[i];
    MD_CHECKF(max_abs(p, 3) < 1e-9, "total momentum %g %g %g", p[0], p[1], p[2]);
    md_sim_free(&s2);
    free_all(&s, &sys, &t, &lj);
}

/* The Langevin thermostat samples the canonical kinetic energy: 108 argon atoms (LJ only, cut
 * at 0.75 nm), 120 K, friction 5/ps, 5 fs steps, 2000 steps to equilibrate, then 40000
 * samples of the kinetic energy. The mean temperature must be 120 K within 4 standard errors
 * and the relative variance of the kinetic energy 2 / ndof (its canonical value) within 4
 * standard errors; both standard errors from block averages (40 blocks of 1000 steps, much
 * longer than the 1 / (2 gamma) = 0.1 ps = 20 step correlation time). */
static void langevin_samples_canonical_kinetic_energy(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim s;
    md_sim_desc d;
    md_fcc_desc fd;
    const int nblk = 40, per = 1000;
    double bm[40], bv[40], mean = 0, var = 0, se_m = 0, se_v = 0, T0 = 120.0, rv_want;
    int b, k;
    memset(&fd, 0, sizeof fd);
    fd.cells = 3;
    fd.temperature = 120.0;
    fd.seed = 11;
    MD_CHECK_OK(md_build_lj_fluid(&sys, &t, &lj, &fd));
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.temperature = T0;
    d.friction = 5.0;
    d.dt = 0.005;
    d.seed = 404;
    d.nb.cutoff = 0.75;
    d.nb.buffer = 0.05;
    d.nb.coul = MD_COUL_NONE;
    MD_CHECK_OK(md_sim_create(&s, &sys, &t, &lj, &d));
    MD_CHECK(s.ndof == 3 * 108 - 3);
    MD_CHECK_OK(md_sim_step(&s, 2000));
    for (b = 0; b < nblk; b++) {
        double m1 = 0, m2 = 0;
        for (k = 0; k < per; k++) {
            md_energy e;
            MD_CHECK_OK(md_sim_step(&s, 1));
            MD_CHECK_OK(md_sim_energy(&s, &e));
            m1 += e.kinetic;
            m2 += e.kinetic * e.kinetic;
        }
        m1 /= per;
        bm[b] = m1;
        bv[b] = m2 / per - m1 * m1;
        mean += bm[b] / nblk;
    }
    for (b = 0; b < nblk; b++) var += bv[b] / nblk;
    for (b = 0; b < nblk; b++) {
        se_m += (bm[b] - mean) * (bm[b] - mean) / (nblk * (nblk - 1.0));
        se_v += (bv[b] / (bm[b] * bm[b]) - var / (mean * mean)) * (bv[b] / (bm[b] * bm[b]) - var / (mean * mean)) /
                (nblk * (nblk - 1.0));
    }
    se_m = sqrt(se_m);
    se_v = sqrt(se_v);
    rv_want = 2.0 / s.ndof;
    printf("  T %.3f K (want %.1f, SE %.3f), var(KE)/KE^2 %.5g (want %.5g, SE %.2g)\n", md_sim_temperature(&s, mean), T0,
           md_sim_temperature(&s, se_m), var / (mean * mean), rv_want, se_v);
    MD_CHECKF(fabs(md_sim_temperature(&s, mean) - T0) < 4 * md_sim_temperature(&s, se_m) + 1e-9, "mean temperature %g K",
              md_sim_temperature(&s, mean));
    MD_CHECKF(fabs(var / (mean * mean) - rv_want) < 4 * se_v, "relative variance %g, want %g", var / (mean * mean), rv_want);
    MD_CHECK(se_v < 0.2 * rv_want); /* the check can fail: the error bar is narrow enough */
    free_all(&s, &sys, &t, &lj);
}

/* Restart: run A takes 30 steps (Langevin, barostat every 5), writes a checkpoint, takes 30
 * more; run B is made from the same system, restores the checkpoint read back from the file
 * and takes 30 steps: positions, velocities and box must equal A's bit for bit, and so must
 * the barostat's counters. Also: the checkpoint read back equals the one written. */
static void checkpoint_restart_is_bitwise(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim a, b;
    md_sim_desc d;
    md_checkpoint ck, rd;
    const char *path = "build/test_step_checkpoint.bin";
    size_t bytes;
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.barostat_interval = 5;
    d.seed = 77;
    d.nb.cutoff = 0.7;
    d.nb.buffer = 0.1;
    MD_CHECK_OK(water_sim(&a, &sys, &t, &lj, 1.8, 0, 8, &d));
    MD_CHECK_OK(md_sim_create(&b, &sys, &t, &lj, &d));
    MD_CHECK_OK(md_sim_step(&a, 30));
    MD_CHECK_OK(md_sim_checkpoint(&a, &ck));
    MD_CHECK_OK(md_checkpoint_write(path, &ck));
    MD_CHECK_OK(md_checkpoint_read(path, &rd));
    bytes = 3 * (size_t)ck.n * sizeof(double);
    MD_CHECK(rd.n == ck.n && rd.step == 30 && rd.step == ck.step && rd.time_ps == ck.time_ps && rd.seed == 77);
    MD_CHECK(!memcmp(rd.x, ck.x, bytes) && !memcmp(rd.v, ck.v, bytes) && !memcmp(rd.box, ck.box, sizeof rd.box));
    MD_CHECK(!memcmp(&rd.baro.rng, &ck.baro.rng, sizeof rd.baro.rng) && rd.baro.scale == ck.baro.scale &&
             rd.baro.total_attempted == 6 && rd.baro.total_accepted == ck.baro.total_accepted);
    MD_CHECK_OK(md_sim_step(&a, 30));
    MD_CHECK_OK(md_sim_restore(&b, &rd));
    MD_CHECK_OK(md_sim_step(&b, 30));
    MD_CHECK(a.step == 60 && b.step == 60);
    MD_CHECKF(!memcmp(a.x, b.x, bytes), "positions differ after the restart");
    MD_CHECKF(!memcmp(a.v, b.v, bytes), "velocities differ after the restart");
    MD_CHECKF(!memcmp(a.box, b.box, sizeof a.box), "boxes differ: %.17g vs %.17g", a.box[0], b.box[0]);
    MD_CHECK(a.baro.total_accepted == b.baro.total_accepted && a.baro.scale == b.baro.scale);
    MD_CHECK(memcmp(a.x, ck.x, bytes) != 0); /* the run moved on from the checkpoint */
    md_checkpoint_free(&ck);
    md_checkpoint_free(&rd);
    md_sim_free(&b);
    free_all(&a, &sys, &t, &lj);
    remove(path);
}

/* The reader rejects damaged files, naming the field; its output stays untouched. */
static void checkpoint_reader_rejects_damage(void) {
    md_checkpoint ck, out;
    unsigned char *buf;
    FILE *f;
    long size;
    const char *path = "build/test_step_damaged.bin";
    double x[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, v[6] = {1, 2, 3, 4, 5, 6};
    memset(&ck, 0, sizeof ck);
    ck.n = 2, ck.step = 5, ck.time_ps = 0.01, ck.box[0] = ck.box[1] = ck.box[2] = 2.0, ck.x = x, ck.v = v;
    MD_CHECK_OK(md_checkpoint_write(path, &ck));
    f = fopen(path, "rb");
    MD_CHECK(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    MD_CHECK(size == 128 + 48 * 2 + 8);
    buf = (unsigned char *)malloc((size_t)size);
    MD_CHECK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    memset(&out, 0x5a, sizeof out);
    MD_CHECK_ERROR(md_checkpoint_read_mem(buf, (size_t)size - 1, "ck", &out), MD_ERR_PARSE, "size");
    MD_CHECK_ERROR(md_checkpoint_read_mem(buf, 100, "ck", &out), MD_ERR_PARSE, "too short");
    buf[3] ^= 1;
    MD_CHECK_ERROR(md_checkpoint_read_mem(buf, (size_t)size, "ck", &out), MD_ERR_PARSE, "magic");
    buf[3] ^= 1;
    buf[8] = 2;
    MD_CHECK_ERROR(md_checkpoint_read_mem(buf, (size_t)size, "ck", &out), MD_ERR_PARSE, "version");
    buf[8] = 1;
    buf[200] ^= 0x10;
    MD_CHECK_ERROR(md_checkpoint_read_mem(buf, (size_t)size, "ck", &out), MD_ERR_PARSE, "hash");
    buf[200] ^= 0x10;
    MD_CHECK(out.n == 0x5a5a5a5a);
    MD_CHECK_OK(md_checkpoint_read_mem(buf, (size_t)size, "ck", &out));
    MD_CHECK(out.n == 2 && out.x[5] == 0.6 && out.v[0] == 1.0 && out.step == 5);
    md_checkpoint_free(&out);
    x[4] = NAN;
    MD_CHECK_OK(md_checkpoint_write(path, &ck));
    memset(&out, 0, sizeof out);
    MD_CHECK_ERROR(md_checkpoint_read(path, &out), MD_ERR_RANGE, "not finite");
    x[4] = 0.5;
    ck.box[1] = -1.0;
    MD_CHECK_OK(md_checkpoint_write(path, &ck));
    MD_CHECK_ERROR(md_checkpoint_read(path, &out), MD_ERR_RANGE, "box");
    MD_CHECK_ERROR(md_checkpoint_read("/nonexistent/ck.bin", &out), MD_ERR_IO, "nonexistent");
    /* a file written by an independent writer (tests/fuzz/make_checkpoint_corpus.py) */
    MD_CHECK_OK(md_checkpoint_read("tests/fuzz/corpus/checkpoint/n3.chk", &out));
    MD_CHECK(out.n == 3 && out.step == 1000 && out.time_ps == 2.0 && out.box[1] == 2.5 && out.seed == 12345);
    MD_CHECK(out.baro.rng.s[3] == 4 && out.baro.scale == 0.08 && out.baro.attempted == 7 && out.baro.accepted == 3);
    MD_CHECK(out.baro.total_attempted == 70 && out.x[8] == 0.1 * 8 && out.v[8] == -0.01 * 8);
    md_checkpoint_free(&out);
    MD_CHECK_ERROR(md_checkpoint_read("tests/fuzz/corpus/checkpoint/bad_hash.chk", &out), MD_ERR_PARSE, "hash");
    free(buf);
    remove(path);
}

/* The barostat pulls a dilute box toward the liquid's density: 194 TIP3P molecules at 0.90
 * g/cm^3, Langevin 300 K (friction 5/ps), a volume move every 5 steps at 1 bar, 1500 steps
 * (3 ps). The density must rise by at least 0.04 g/cm^3 and end between 0.93 and 1.08 (TIP3P
 * with PME is near 0.98-1.0 g/cm^3 at 300 K; a box this small fluctuates by ~2%). */
static void barostat_moves_density_toward_liquid(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim s;
    md_sim_desc d;
    md_water_desc wd;
    double rho0, rho1 = 0;
    int k;
    memset(&wd, 0, sizeof wd);
    wd.molecules = 194;
    wd.density = 0.90;
    wd.seed = 9;
    MD_CHECK_OK(md_build_water_box(&sys, &t, &lj, &wd));
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.friction = 5.0;
    d.barostat_interval = 5;
    d.seed = 31;
    d.nb.cutoff = 0.7;
    d.nb.buffer = 0.1;
    MD_CHECK_OK(md_sim_create(&s, &sys, &t, &lj, &d));
    rho0 = md_sim_density(&s);
    MD_CHECK_CLOSE(rho0, 0.90, 1e-3, 0.0);
    MD_CHECK_OK(md_sim_step(&s, 1000));
    for (k = 0; k < 10; k++) { /* the mean over the last 500 steps */
        MD_CHECK_OK(md_sim_step(&s, 50));
        rho1 += md_sim_density(&s) / 10;
    }
    printf("  density %.4f -> %.4f g/cm3 (%lld of %lld volume moves accepted)\n", rho0, rho1, s.baro.total_accepted,
           s.baro.total_attempted);
    MD_CHECK(s.baro.total_attempted == 300 && s.baro.total_accepted > 10);
    MD_CHECKF(rho1 > rho0 + 0.04 && rho1 > 0.93 && rho1 < 1.08, "density %g -> %g", rho0, rho1);
    MD_CHECKF(md_constraints_max_deviation(&s.cons, s.x, s.box) < 1e-10, "constraints after volume moves: %g",
              md_constraints_max_deviation(&s.cons, s.x, s.box));
    free_all(&s, &sys, &t, &lj);
}

/* The same seed gives the same trajectory bit for bit; another seed another one. */
static void langevin_is_reproducible_with_a_seed(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim a, b, c;
    md_sim_desc d;
    size_t bytes;
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.barostat_interval = 4;
    d.seed = 505;
    d.nb.cutoff = 0.7;
    d.nb.buffer = 0.1;
    MD_CHECK_OK(water_sim(&a, &sys, &t, &lj, 1.8, 0, 8, &d));
    MD_CHECK_OK(md_sim_create(&b, &sys, &t, &lj, &d));
    d.seed = 506;
    MD_CHECK_OK(md_sim_create(&c, &sys, &t, &lj, &d));
    MD_CHECK_OK(md_sim_step(&a, 20));
    MD_CHECK_OK(md_sim_step(&b, 20));
    MD_CHECK_OK(md_sim_step(&c, 20));
    bytes = 3 * (size_t)a.n * sizeof(double);
    MD_CHECK(!memcmp(a.x, b.x, bytes) && !memcmp(a.v, b.v, bytes) && !memcmp(a.box, b.box, sizeof a.box));
    MD_CHECK(memcmp(a.x, c.x, bytes) != 0 && memcmp(a.v, c.v, bytes) != 0);
    md_sim_free(&b);
    md_sim_free(&c);
    free_all(&a, &sys, &t, &lj);
}

/* A flexible molecule system from a PSF and the table: 27 methanols (bonds, angles, SHAKE on
 * the bonds to hydrogen) and 37 rigid waters in a 2.38 nm box, PME. After 1000 Langevin steps
 * of 1 fs (friction 10/ps, from the lattice) 1000 NVE steps: the total energy may wander by at
 * most 0.2% of the kinetic energy (measured: 0.07%), constraints hold within 1e-9, the bonded
 * energy stays positive and finite. */
static void flexible_molecules_from_psf(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim s;
    md_sim_desc d;
    fit f;
    double ke = 0;
    int k;
    MD_CHECK_OK(psf_system(27, 37, 0.37, 4 * 0.37 + 0.9, 1, &sys, &t, &lj));
    memset(&d, 0, sizeof d);
    d.dt = 0.001;
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.friction = 10.0;
    d.nb.cutoff = 0.8;
    d.nb.buffer = 0.1;
    MD_CHECK_OK(md_sim_create(&s, &sys, &t, &lj, &d));
    MD_CHECK(s.bonded.nbond == 27 * 1 && s.bonded.nangle == 27 * 7); /* C-O only; water angles skipped */
    MD_CHECK(md_constraints_count(&s.cons) == 27 * 4 + 3 * 37);
    MD_CHECK_OK(md_sim_step(&s, 1000));
    MD_CHECK_OK(md_sim_get_system(&s, &sys));
    md_sim_free(&s);
    d.thermostat = MD_THERMOSTAT_NONE;
    MD_CHECK_OK(md_sim_create(&s, &sys, &t, &lj, &d));
    memset(&f, 0, sizeof f);
    for (k = 0; k <= 50; k++) {
        md_energy e;
        if (k > 0) MD_CHECK_OK(md_sim_step(&s, 20));
        MD_CHECK_OK(md_sim_energy(&s, &e));
        MD_CHECK(e.bonded > 0.0 && isfinite(e.bonded));
        fit_add(&f, s.time_ps, md_energy_total(&e));
        ke += e.kinetic / 51;
    }
    printf("  methanol + water NVE, 1 ps: drift %.3g kJ/mol/ps, largest excursion %.3g kJ/mol (%.2g of KE %.1f)\n",
           fit_slope(&f), f.dev, f.dev / ke, ke);
    MD_CHECKF(f.dev < 0.002 * ke, "energy wandered by %g kJ/mol (kinetic %g)", f.dev, ke);
    MD_CHECKF(md_constraints_max_deviation(&s.cons, s.x, s.box) < 1e-9, "deviation %g",
              md_constraints_max_deviation(&s.cons, s.x, s.box));
    free_all(&s, &sys, &t, &lj);
}

/* What stops a run: an atom far too fast (it would escape the neighbour search), a
 * non-finite energy, bad settings. */
static void sim_stops_on_errors(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim s, z;
    md_sim_desc d;
    MD_CHECK_OK(water_sim(&s, &sys, &t, &lj, 1.8, 0, 7, NULL));
    s.v[3 * 30] = 40.0; /* an oxygen at 40 nm/ps: 0.08 nm in one step; its water follows */
    MD_CHECK_ERROR(md_sim_step(&s, 5), MD_ERR_RANGE, "moved");
    MD_CHECK(strstr(md_last_error(), "step 0") != NULL);
    md_sim_free(&s);
    /* two waters on one spot: the Coulomb and LJ energies are infinite */
    sys.xyzq[3] = sys.xyzq[0];
    sys.xyzq[4] = sys.xyzq[1];
    sys.xyzq[5] = sys.xyzq[2];
    memset(&z, 0x5a, sizeof z);
    memset(&d, 0, sizeof d);
    d.nb.cutoff = 0.7;
    MD_CHECK_ERROR(md_sim_create(&z, &sys, &t, &lj, &d), MD_ERR_RANGE, "finite");
    MD_CHECK(z.n == 0x5a5a5a5a);
    md_system_free(&sys);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    MD_CHECK_OK(water_sim(&s, &sys, &t, &lj, 1.8, 0, 7, NULL));
    md_sim_free(&s);
    d.dt = -0.001;
    MD_CHECK_ERROR(md_sim_create(&z, &sys, &t, &lj, &d), MD_ERR_RANGE, "dt");
    d.dt = 0;
    d.thermostat = (md_thermostat)7;
    MD_CHECK_ERROR(md_sim_create(&z, &sys, &t, &lj, &d), MD_ERR_INVALID_ARGUMENT, "thermostat");
    d.thermostat = MD_THERMOSTAT_NONE;
    d.nb.cutoff = 0.9; /* 0.9 + 0.1 > 1.8 / 2 */
    MD_CHECK_ERROR(md_sim_create(&z, &sys, &t, &lj, &d), MD_ERR_RANGE, "cutoff");
    sys.box[2] = 0;
    MD_CHECK_ERROR(md_sim_create(&z, &sys, &t, &lj, NULL), MD_ERR_RANGE, "box");
    md_system_free(&sys);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* ---- output ---- */

/* Frames appended one by one read back with md_dcd_open/next: positions to float rounding of
 * Angstrom (1e-6 nm), boxes, the frame count in the header after every frame (the file is
 * valid while it is being written). */
static void dcd_writer_appends_frames(void) {
    md_dcd_writer w;
    md_dcd_reader r;
    md_system fr;
    md_float4 p[5];
    double box[3] = {3.0, 3.1, 3.2};
    const char *path = "build/test_step_append.dcd";
    int f, i, got;
    memset(&fr, 0, sizeof fr);
    MD_CHECK_OK(md_dcd_writer_open(&w, path, 5, NULL));
    for (f = 0; f < 3; f++) {
        for (i = 0; i < 5; i++) {
            p[i].x = 0.1f * i + f;
            p[i].y = 0.2f * i;
            p[i].z = 0.3f * i - f;
            p[i].w = 0;
        }
        box[0] = 3.0 + f;
        MD_CHECK_OK(md_dcd_writer_append(&w, p, box));
        MD_CHECK_OK(md_dcd_open(&r, path)); /* readable while open */
        MD_CHECK(r.nframes_header == f + 1 && r.natoms == 5 && r.has_cell);
        md_dcd_close(&r);
    }
    p[2].y = NAN;
    MD_CHECK_ERROR(md_dcd_writer_append(&w, p, box), MD_ERR_RANGE, "not finite");
    MD_CHECK_OK(md_dcd_writer_close(&w));
    MD_CHECK_OK(md_dcd_writer_close(&w)); /* safe on a closed writer */
    MD_CHECK_OK(md_dcd_open(&r, path));
    for (f = 0; f < 3; f++) {
        MD_CHECK_OK(md_dcd_next(&r, &fr, &got));
        MD_CHECK(got == 1 && fr.n == 5);
        MD_CHECK_CLOSE(fr.box[0], 3.0 + f, 1e-12, 0.0);
        for (i = 0; i < 5; i++) {
            MD_CHECK_CLOSE(fr.xyzq[i].x, 0.1f * i + f, 0, 1e-6);
            MD_CHECK_CLOSE(fr.xyzq[i].z, 0.3f * i - f, 0, 1e-6);
        }
    }
    MD_CHECK_OK(md_dcd_next(&r, &fr, &got));
    MD_CHECK(got == 0);
    md_dcd_close(&r);
    md_system_free(&fr);
    MD_CHECK_ERROR(md_dcd_writer_open(&w, "/nonexistent/x.dcd", 5, NULL), MD_ERR_IO, "nonexistent");
    MD_CHECK_ERROR(md_dcd_writer_open(&w, path, 0, NULL), MD_ERR_INVALID_ARGUMENT, "natoms");
    remove(path);
}

/* The CSV header names 17 columns and a row holds 17 numbers that read back; the progress line
 * carries the step, temperature and ns/day. */
static void energies_csv_and_progress_line(void) {
    md_sim_report r;
    char line[2048], *tok;
    FILE *f = tmpfile();
    int ncol = 0;
    double v[17];
    MD_CHECK(f);
    memset(&r, 0, sizeof r);
    r.step = 1234, r.time_ps = 2.468, r.energy.lj = 100.5, r.energy.coul_real = -2000.25, r.energy.kinetic = 700.125;
    r.temperature = 299.5, r.volume = 5.832, r.density = 0.9971;
    MD_CHECK_OK(md_energy_csv_header(f));
    MD_CHECK_OK(md_energy_csv_row(f, &r));
    rewind(f);
    MD_CHECK(fgets(line, sizeof line, f));
    for (tok = strtok(line, ",\n"); tok; tok = strtok(NULL, ",\n")) ncol++;
    MD_CHECK(ncol == 17);
    MD_CHECK(fgets(line, sizeof line, f));
    ncol = 0;
    for (tok = strtok(line, ",\n"); tok && ncol < 17; tok = strtok(NULL, ",\n")) v[ncol++] = atof(tok);
    fclose(f);
    MD_CHECK(ncol == 17 && v[0] == 1234 && v[1] == 2.468 && v[2] == 100.5 - 2000.25 && v[3] == 700.125 &&
             v[4] == 100.5 - 2000.25 + 700.125 && v[5] == 299.5 && v[8] == 100.5 && v[11] == -2000.25);
    md_progress_line(line, sizeof line, &r, 5000, 812.3);
    MD_CHECKF(strstr(line, "step 1234/5000") && strstr(line, "299.50 K") && strstr(line, "812.3 ns/day"), "'%s'", line);
    md_progress_line(line, sizeof line, &r, 5000, NAN);
    MD_CHECK(!strstr(line, "ns/day"));
}

int main(void) {
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    MD_RUN(philox_known_answers);
    MD_RUN(langevin_noise_moments);
    MD_RUN(bonded_forces_match_finite_differences);
    MD_RUN(bonded_energy_by_hand);
    MD_RUN(bonded_virial_matches_deformation);
    MD_RUN(bonded_float_matches_double);
    MD_RUN(angles_from_bonds_by_hand);
    MD_RUN(ff_table_reads_entries);
    MD_RUN(ff_table_rejects_bad_input);
    MD_RUN(topology_from_psf_and_table);
    MD_RUN(settle_exact_momentum_and_shake);
    MD_RUN(settle_velocities_match_rattle);
    MD_RUN(shake_rattle_chains);
    MD_RUN(constraints_reject_bad_topologies);
    MD_RUN(dcd_writer_appends_frames);
    MD_RUN(energies_csv_and_progress_line);
    MD_RUN(checkpoint_reader_rejects_damage);
    MD_RUN(sim_stops_on_errors);
    MD_RUN(langevin_is_reproducible_with_a_seed);
    MD_RUN(checkpoint_restart_is_bitwise);
    MD_RUN(flexible_molecules_from_psf);
    MD_RUN(nve_rigid_water_conserves_energy);
    MD_RUN(nve_pme_water_box);
    MD_RUN(barostat_moves_density_toward_liquid);
    MD_RUN(langevin_samples_canonical_kinetic_energy);
    return md_test_summary();
}
