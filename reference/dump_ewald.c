/* dump_ewald OUTDIR: write Ewald, FFT and PME problems and md.h's answers for
 * reference/check_ewald.py (numpy) and reference/check_openmm_pme.py (OpenMM).
 *
 * Ewald cases (random charges, positions float, exclusions from bonds (3k, 3k+1), (3k, 3k+2)):
 *   a   120 atoms (seed 31) in 2.1 x 2.3 x 2.5 nm, alpha 3.1, rc 1.0, kmax 6 7 8, k2max 60
 *   b   the same atoms, alpha 2.4, rc 1.6 (beyond half the box: periodic images), kmax 5 6 6
 *   c   40 atoms (seed 32) with net charge +1.5 e, 1.7 x 1.9 x 2.2 nm, alpha 3.0, rc 0.8, kmax 6
 * Files per case X: X_meta.txt (n, box, alpha, rc, kmax, k2max, nexcl), X_pos.f64 (n x 3),
 * X_q.f64, X_excl.i32 (pairs), X_energy.f64 (real recip self excl), X_force.f64 (n x 3),
 * X_virial.f64 (3 x 3).
 * FFT: shapes 8x6x10, 5x7x9, 4x9x15, 1x3x4: fftN_meta.txt (dims), fftN_in.f64 (reals),
 * fftN_r2c.f64 (md_fft3d_r2c, complex interleaved), fftN_c2r.f64 (md_fft3d_c2r of that).
 * fft1d: lengths 90, 97, 98, 128 complex forward (fft1d_N_in.f64, fft1d_N_out.f64).
 * PME water for OpenMM: water.pdb (216 TIP3P molecules, seed 7) and salt.pdb (300 molecules,
 * 5 NaCl pairs, seed 41), charged.pdb (salt.pdb with its first Cl- made Na+: net charge +2 e,
 * for the neutralising background), written with md_water_pdb_names and read back so md.h computes on
 * exactly the positions OpenMM reads. Per system S: S_meta.txt (n, alpha, grid, order, rc),
 * S_energy.f64 (coul_real, coul_excl, coul_self, coul_recip), S_force.f64 (n x 3, all four
 * Coulomb parts: md_nb_compute with LJ off plus md_pme_compute).
 * Byte order: this machine's, named in meta.txt ("endian"). */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>
#include <stdlib.h>

static const char *dir;

static int put(const char *name, const void *p, size_t size, size_t n) {
    char path[1024];
    FILE *f;
    int ok;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb"))) return 0;
    ok = fwrite(p, size, n, f) == n;
    return (fclose(f) == 0) && ok;
}

static FILE *text(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fopen(path, "w");
}

static int fail(const char *what) {
    fprintf(stderr, "dump_ewald: %s: %s\n", what, md_last_error());
    return 1;
}

static int ewald_case(const char *tag, int n, uint64_t seed, const double box[3], double charge, double alpha,
                      double rc, int k0, int k1, int k2, double k2max) {
    md_system s;
    md_topology t;
    md_ewald_params p;
    md_energy e;
    int *bonds = (int *)malloc(4 * (size_t)n * sizeof(int)), nb = 0, k, i, ne = 0, *ex;
    double *pos = (double *)malloc(3 * (size_t)n * sizeof(double)), *q = (double *)malloc((size_t)n * sizeof(double));
    double *f = (double *)malloc(3 * (size_t)n * sizeof(double)), en[4];
    char name[64];
    FILE *m;
    if (!bonds || !pos || !q || !f) return fail("malloc");
    if (md_build_random_charges(&s, n, box, 1.0, seed) != MD_OK) return fail(tag);
    for (i = 0; i < n; i++) s.xyzq[i].w += (float)(charge / n);
    for (k = 0; 3 * k + 2 < n; k++, nb += 2) {
        bonds[2 * nb] = 3 * k, bonds[2 * nb + 1] = 3 * k + 1;
        bonds[2 * nb + 2] = 3 * k, bonds[2 * nb + 3] = 3 * k + 2;
    }
    if (md_topology_alloc(&t, n) != MD_OK || md_topology_set_bonds(&t, nb, bonds, NULL, NULL) != MD_OK ||
        md_topology_build_exclusions(&t, NULL) != MD_OK)
        return fail(tag);
    memset(&p, 0, sizeof p);
    p.alpha = alpha, p.rc = rc, p.kmax[0] = k0, p.kmax[1] = k1, p.kmax[2] = k2, p.k2max = k2max;
    if (md_ewald_compute(&p, &t, s.xyzq, n, box, f, &e) != MD_OK) return fail(tag);
    for (i = 0; i < n; i++) {
        pos[3 * i] = s.xyzq[i].x, pos[3 * i + 1] = s.xyzq[i].y, pos[3 * i + 2] = s.xyzq[i].z;
        q[i] = s.xyzq[i].w;
    }
    ex = (int *)malloc(((size_t)t.excl_start[n] + 1) * sizeof(int));
    if (!ex) return fail("malloc");
    for (i = 0; i < n; i++)
        for (k = t.excl_start[i]; k < t.excl_start[i + 1]; k++)
            if (t.excl[k] > i) ex[2 * ne] = i, ex[2 * ne + 1] = t.excl[k], ne++;
    en[0] = e.coul_real, en[1] = e.coul_recip, en[2] = e.coul_self, en[3] = e.coul_excl;
    snprintf(name, sizeof name, "%s_meta.txt", tag);
    if (!(m = text(name))) return fail(name);
    fprintf(m, "n %d\nbox %.17g %.17g %.17g\nalpha %.17g\nrc %.17g\nkmax %d %d %d\nk2max %.17g\nnexcl %d\n", n, box[0],
            box[1], box[2], alpha, rc, k0, k1, k2, k2max, ne);
    fclose(m);
#define PUT(suffix, ptr, size, count)                                                                                  \
    snprintf(name, sizeof name, "%s_%s", tag, suffix);                                                                 \
    if (!put(name, ptr, size, count)) return fail(name);
    PUT("pos.f64", pos, sizeof(double), 3 * (size_t)n);
    PUT("q.f64", q, sizeof(double), (size_t)n);
    PUT("excl.i32", ex, sizeof(int), 2 * (size_t)ne);
    PUT("energy.f64", en, sizeof(double), 4);
    PUT("force.f64", f, sizeof(double), 3 * (size_t)n);
    PUT("virial.f64", e.virial, sizeof(double), 9);
#undef PUT
    free(bonds), free(pos), free(q), free(f), free(ex);
    md_system_free(&s);
    md_topology_free(&t);
    return 0;
}

static int fft_cases(void) {
    static const int shapes[4][3] = {{8, 6, 10}, {5, 7, 9}, {4, 9, 15}, {1, 3, 4}};
    static const int lengths[4] = {90, 97, 98, 128};
    md_rng rng;
    int s, i;
    md_rng_seed(&rng, 33);
    for (s = 0; s < 4; s++) {
        const int *n = shapes[s];
        int N = n[0] * n[1] * n[2], nc = n[0] * n[1] * (n[2] / 2 + 1);
        double *x = (double *)malloc((size_t)N * sizeof(double)), *X = (double *)malloc(2 * (size_t)nc * sizeof(double));
        double *y = (double *)malloc((size_t)N * sizeof(double));
        md_fft3d f;
        char name[64];
        FILE *m;
        if (!x || !X || !y || md_fft3d_create(&f, n) != MD_OK) return fail("fft3d");
        for (i = 0; i < N; i++) x[i] = md_rng_uniform(&rng) - 0.5;
        md_fft3d_r2c(&f, x, X);
        snprintf(name, sizeof name, "fft%d_r2c.f64", s);
        if (!put(name, X, sizeof(double), 2 * (size_t)nc)) return fail(name);
        md_fft3d_c2r(&f, X, y);
        snprintf(name, sizeof name, "fft%d_in.f64", s);
        if (!put(name, x, sizeof(double), (size_t)N)) return fail(name);
        snprintf(name, sizeof name, "fft%d_c2r.f64", s);
        if (!put(name, y, sizeof(double), (size_t)N)) return fail(name);
        snprintf(name, sizeof name, "fft%d_meta.txt", s);
        if (!(m = text(name))) return fail(name);
        fprintf(m, "dims %d %d %d\n", n[0], n[1], n[2]);
        fclose(m);
        md_fft3d_free(&f);
        free(x), free(X), free(y);
    }
    for (s = 0; s < 4; s++) {
        int n = lengths[s];
        double *x = (double *)malloc(2 * (size_t)n * sizeof(double)), *w = (double *)malloc(4 * (size_t)n * sizeof(double));
        md_fft_plan p;
        char name[64];
        if (!x || !w || md_fft_plan_create(&p, n) != MD_OK) return fail("fft1d");
        for (i = 0; i < 2 * n; i++) x[i] = md_rng_uniform(&rng) - 0.5;
        snprintf(name, sizeof name, "fft1d_%d_in.f64", n);
        if (!put(name, x, sizeof(double), 2 * (size_t)n)) return fail(name);
        md_fft_complex(&p, x, -1, w);
        snprintf(name, sizeof name, "fft1d_%d_out.f64", n);
        if (!put(name, x, sizeof(double), 2 * (size_t)n)) return fail(name);
        md_fft_plan_free(&p);
        free(x), free(w);
    }
    return 0;
}

/* A water (or salt water) box through a PDB and back, then md.h's Coulomb energies and forces:
 * real space (md_nb_compute, LJ off) and PME with OpenMM's alpha and grid for rc 0.9, order 5. */
static int pme_water(const char *tag, int salt) {
    md_system s, r;
    md_topology t, rt;
    md_lj_table lj, rl;
    md_nb_params np;
    md_nb_plan nb;
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e;
    double *f, en[4];
    char name[64], path[1024];
    FILE *m;
    if (salt) {
        md_salt_water_desc d;
        memset(&d, 0, sizeof d);
        d.water.molecules = 300;
        d.water.seed = 41;
        d.pairs = 5;
        if (md_build_salt_water(&s, &t, &lj, &d) != MD_OK) return fail(tag);
    } else {
        md_water_desc d;
        memset(&d, 0, sizeof d);
        d.molecules = 216;
        d.seed = 7;
        if (md_build_water_box(&s, &t, &lj, &d) != MD_OK) return fail(tag);
    }
    md_water_pdb_names(&s);
    if (salt == 2) { /* net charge +2: the first Cl- becomes Na+ */
        int i;
        for (i = 0; i < s.n && strcmp(s.resname[i].s, "CL") != 0; i++) continue;
        if (i == s.n) return fail("no CL");
        strcpy(s.resname[i].s, "NA");
        strcpy(s.name[i].s, "NA");
        s.mass[i] = 22.99f; /* md_write_pdb's element column comes from the mass */
    }
    snprintf(path, sizeof path, "%s/%s.pdb", dir, tag);
    if (md_write_pdb(path, &s) != MD_OK || md_read_pdb(path, &r) != MD_OK) return fail(path);
    if (md_topology_water_ions(&r, MD_WATER_TIP3P, &rt, &rl) != MD_OK ||
        md_topology_apply_charges(&rt, r.xyzq, r.n) != MD_OK)
        return fail(tag);
    memset(&np, 0, sizeof np);
    np.cutoff = 0.9;
    np.lj = MD_LJ_NONE;
    np.buffer = -1.0;
    memset(&pp, 0, sizeof pp);
    pp.cutoff = 0.9;
    if (md_nb_plan_create(&nb, &np, r.n) != MD_OK || md_pme_plan_create(&plan, &pp, r.box, r.n) != MD_OK)
        return fail(tag);
    if (!(f = (double *)malloc(3 * (size_t)r.n * sizeof(double)))) return fail("malloc");
    if (md_nb_compute(MD_NB_CPU_ALL_PAIRS, &nb, &rt, &rl, r.xyzq, r.box, f, &e) != MD_OK ||
        md_pme_compute(&plan, r.xyzq, r.n, r.box, f, &e) != MD_OK)
        return fail(tag);
    en[0] = e.coul_real, en[1] = e.coul_excl, en[2] = e.coul_self, en[3] = e.coul_recip;
    snprintf(name, sizeof name, "%s_meta.txt", tag);
    if (!(m = text(name))) return fail(name);
    fprintf(m, "n %d\nalpha %.17g\ngrid %d %d %d\norder %d\nrc 0.9\nbox %.17g %.17g %.17g\n", r.n, plan.params.alpha,
            plan.params.grid[0], plan.params.grid[1], plan.params.grid[2], plan.params.order, r.box[0], r.box[1],
            r.box[2]);
    fclose(m);
    snprintf(name, sizeof name, "%s_energy.f64", tag);
    if (!put(name, en, sizeof(double), 4)) return fail(name);
    snprintf(name, sizeof name, "%s_force.f64", tag);
    if (!put(name, f, sizeof(double), 3 * (size_t)r.n)) return fail(name);
    free(f);
    md_pme_plan_free(&plan);
    md_nb_plan_free(&nb);
    md_system_free(&s), md_system_free(&r);
    md_topology_free(&t), md_topology_free(&rt);
    md_lj_table_free(&lj), md_lj_table_free(&rl);
    return 0;
}

int main(int argc, char **argv) {
    static const double ba[3] = {2.1, 2.3, 2.5}, bc[3] = {1.7, 1.9, 2.2};
    int one = 1;
    FILE *m;
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    if (!(m = text("meta.txt"))) return fail("meta.txt");
    fprintf(m, "endian %s\n", *(unsigned char *)&one ? "little" : "big");
    fclose(m);
    if (ewald_case("a", 120, 31, ba, 0.0, 3.1, 1.0, 6, 7, 8, 60.0) || ewald_case("b", 120, 31, ba, 0.0, 2.4, 1.6, 5, 6, 6, 0.0) ||
        ewald_case("c", 40, 32, bc, 1.5, 3.0, 0.8, 6, 6, 6, 0.0) || fft_cases() || pme_water("water", 0) ||
        pme_water("salt", 1) || pme_water("charged", 2))
        return 1;
    return 0;
}
