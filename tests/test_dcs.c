/* Tests of the direct-Coulomb-sum CPU ladder (md.h section "dcs").
 *
 * Every CPU rung is compared with an independent computation written here:
 * an input-oriented loop (atoms outer, points inner) accumulating in double,
 * with the grid point positions computed in double. It shares no code with
 * md.h's rungs.
 *
 * Seeds used: 11, 12, 13, 14 (random systems), 21 (atoms on grid points).
 *
 * Tolerances (error = md_max_rel_error: max |out - ref| / max |ref|):
 *   cpu_simple  2e-7. It accumulates in double like the test's reference; the only
 *               difference is the final rounding to float, at most 2^-24 = 6e-8 of
 *               each value, so at most 6e-8 of the largest one (3x headroom).
 *   float rungs 2e-5. Three float errors; measured up to 6.9e-6 on these systems
 *               (DCS_VERBOSE=1 prints every measured error):
 *               (1) the grid point coordinate ox + i * hx is formed in float: hx
 *                   rounded, the product rounded, the sum rounded, up to ~2 ulps
 *                   of |x| in dx (|x| <= 3.6 nm here: ~2.1e-7 nm). The relative
 *                   error of q/r is dx_err / r; the largest |V| sits at the point
 *                   nearest an atom and is dominated by that term, so the error
 *                   relative to max|V| is up to ~2.1e-7 nm / r_min. On the
 *                   13x11x9 system max|V| = 6773 kJ/mol/e (r_min ~ 0.02 nm), a bound
 *                   of ~1e-5, and this term alone gives the measured 6.9e-6: moving
 *                   the same system next to the origin drops it to 1.2e-6;
 *               (2) each term q/sqrtf(r2): sqrtf and the divide are correctly
 *                   rounded, 2 ulps (1.2e-7) of the term;
 *               (3) the float sum of n <= 200 terms: a random walk of n roundings,
 *                   ~sqrt(n) * 6e-8 * sum|q/r|, below 1e-6 of max|V| here.
 *               2e-5 is twice the bound of (1), and still far below what a bug
 *               gives: dropping one atom of 200 costs 5e-3 or more
 *               (tolerance_catches_a_missing_atom checks that the check can fail).
 * Outputs are poisoned with NaN before every run, so an unwritten point gives
 * an infinite error. */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"

#define CPU_RUNGS 4
static const md_dcs_variant cpu_rungs[CPU_RUNGS] = {MD_DCS_CPU_SIMPLE, MD_DCS_CPU_SCATTER,
                                                    MD_DCS_CPU_ROWS, MD_DCS_CPU_ROWS_OMP};

static double tol_of(md_dcs_variant v) { return v == MD_DCS_CPU_SIMPLE ? 2e-7 : 2e-5; }

static void poison(md_grid *g) {
    size_t p, c = md_grid_count(g);
    for (p = 0; p < c; p++) g->data[p] = NAN;
}

/* The independent reference: atoms outer, points inner, double throughout.
 * An atom within sqrt(MD_DCS_MIN_R2) of a point adds nothing to it. */
static int reference_dcs(const md_float4 *xyzq, int n, const md_grid *g, float *out) {
    size_t c = md_grid_count(g), p;
    double *acc = (double *)calloc(c, sizeof *acc);
    int a, i, j, k;
    if (!acc) return 0; /* out of memory: the caller fails the test */
    for (a = 0; a < n; a++)
        for (p = 0, k = 0; k < g->n[2]; k++)
            for (j = 0; j < g->n[1]; j++)
                for (i = 0; i < g->n[0]; i++, p++) {
                    double x = g->origin[0] + g->spacing[0] * i, y = g->origin[1] + g->spacing[1] * j,
                           z = g->origin[2] + g->spacing[2] * k;
                    double r = sqrt((x - xyzq[a].x) * (x - xyzq[a].x) + (y - xyzq[a].y) * (y - xyzq[a].y) +
                                    (z - xyzq[a].z) * (z - xyzq[a].z));
                    if (r * r >= (double)MD_DCS_MIN_R2) acc[p] += 138.935458 * xyzq[a].w / r;
                }
    for (p = 0; p < c; p++) out[p] = (float)acc[p];
    free(acc);
    return 1;
}

/* n random atoms in the grid's box widened by 0.2 nm on each side (so some lie
 * outside the grid), charges uniform in [-1, 1] e. */
static md_float4 *random_atoms(int n, const md_grid *g, uint64_t seed) {
    md_float4 *a = (md_float4 *)malloc((size_t)n * sizeof *a);
    md_rng r;
    int i;
    if (!a) return NULL;
    md_rng_seed(&r, seed);
    for (i = 0; i < n; i++) {
        double lo[3], span[3];
        int d;
        for (d = 0; d < 3; d++) {
            lo[d] = g->origin[d] - 0.2;
            span[d] = (g->n[d] - 1) * g->spacing[d] + 0.4;
        }
        a[i].x = (float)(lo[0] + span[0] * md_rng_uniform(&r));
        a[i].y = (float)(lo[1] + span[1] * md_rng_uniform(&r));
        a[i].z = (float)(lo[2] + span[2] * md_rng_uniform(&r));
        a[i].w = (float)(2.0 * md_rng_uniform(&r) - 1.0);
    }
    return a;
}

/* Run every CPU rung through md_dcs on one system and grid; check each against ref. */
static int check_rungs(const md_float4 *xyzq, int n, md_grid *g, const float *ref, const char *what) {
    int r;
    for (r = 0; r < CPU_RUNGS; r++) {
        double err;
        md_status st;
        poison(g);
        st = md_dcs(cpu_rungs[r], xyzq, n, g);
        if (st != MD_OK) {
            printf("  %s: %s returned %s: %s\n", what, md_dcs_variant_name(cpu_rungs[r]),
                   md_status_string(st), md_last_error());
            return 0;
        }
        err = md_max_rel_error(g->data, ref, md_grid_count(g));
        if (getenv("DCS_VERBOSE")) printf("  %s %s err %.2e\n", what, md_dcs_variant_name(cpu_rungs[r]), err);
        if (!(err <= tol_of(cpu_rungs[r]))) {
            printf("  %s: %s max rel error %.3e > %.1e\n", what, md_dcs_variant_name(cpu_rungs[r]), err,
                   tol_of(cpu_rungs[r]));
            return 0;
        }
    }
    return 1;
}

/* One random system on one grid; returns 1 if every rung passes. */
static int random_case(int nx, int ny, int nz, const double o[3], const double h[3], int n,
                       uint64_t seed) {
    md_grid g;
    md_float4 *atoms;
    float *ref;
    char what[96];
    int ok;
    if (md_grid_alloc(&g, nx, ny, nz, o, h) != MD_OK) return 0;
    atoms = random_atoms(n, &g, seed);
    ref = (float *)malloc(md_grid_count(&g) * sizeof *ref);
    if (!atoms || !ref) {
        free(atoms);
        free(ref);
        md_grid_free(&g);
        return 0;
    }
    if (!reference_dcs(atoms, n, &g, ref)) {
        free(atoms);
        free(ref);
        md_grid_free(&g);
        return 0;
    }
    snprintf(what, sizeof what, "%dx%dx%d grid, %d atoms, seed %llu", nx, ny, nz, n,
             (unsigned long long)seed);
    ok = check_rungs(atoms, n, &g, ref, what);
    free(atoms);
    free(ref);
    md_grid_free(&g);
    return ok;
}

/* Grids whose sizes are multiples of nothing, non-cubic spacing, non-zero
 * origins, and degenerate grids (one point, one row). */
static void every_rung_matches_reference_on_random_systems(void) {
    const double o1[3] = {-0.7, 0.35, 1.3}, h1[3] = {0.11, 0.07, 0.19};
    const double o2[3] = {2.5, -1.25, -0.4}, h2[3] = {0.09, 0.13, 0.05};
    const double o3[3] = {0.0, 0.0, 0.0}, h3[3] = {0.3, 0.3, 0.3};
    MD_CHECK(random_case(7, 5, 3, o1, h1, 57, 11));
    MD_CHECK(random_case(13, 11, 9, o2, h2, 200, 12));
    MD_CHECK(random_case(1, 1, 1, o1, h1, 31, 13));
    MD_CHECK(random_case(1, 17, 2, o2, h3, 3, 14));
    MD_CHECK(random_case(29, 1, 1, o3, h2, 101, 14));
}

/* One atom: V = k q / r, written out from the formula at a few points. */
static void one_atom_is_coulomb_law(void) {
    const double o[3] = {-0.5, 0.25, 1.0}, h[3] = {0.1, 0.2, 0.15};
    md_float4 atom;
    md_grid g;
    int r, t;
    /* (i, j, k) of the points checked: a corner, the far corner, interior points. */
    static const int pts[5][3] = {{0, 0, 0}, {10, 6, 4}, {3, 2, 1}, {7, 0, 3}, {5, 3, 2}};
    atom.x = 0.0625f; /* exactly representable: the test's distances carry no extra rounding */
    atom.y = 0.8125f;
    atom.z = 1.4375f;
    atom.w = -0.75f;
    MD_CHECK_OK(md_grid_alloc(&g, 11, 7, 5, o, h));
    for (r = 0; r < CPU_RUNGS; r++) {
        poison(&g);
        MD_CHECK_OK(md_dcs(cpu_rungs[r], &atom, 1, &g));
        for (t = 0; t < 5; t++) {
            const int i = pts[t][0], j = pts[t][1], k = pts[t][2];
            const double x = -0.5 + 0.1 * i, y = 0.25 + 0.2 * j, z = 1.0 + 0.15 * k;
            const double rr = sqrt((x - 0.0625) * (x - 0.0625) + (y - 0.8125) * (y - 0.8125) +
                                   (z - 1.4375) * (z - 1.4375));
            const double v = 138.935458 * -0.75 / rr;
            const float got = g.data[((size_t)k * 7 + j) * 11 + i];
            /* one term: simple is exact to the float rounding of the result (6e-8);
             * a float rung adds the float coordinate rounding (~1e-7 nm over r >= 0.05 nm)
             * and the rounding of sqrtf and the divide: 1e-5 relative is ample. */
            MD_CHECK_CLOSE(got, v, cpu_rungs[r] == MD_DCS_CPU_SIMPLE ? 2e-7 : 1e-5, 0);
            MD_CHECK(got < 0.0f); /* a negative charge has a negative potential everywhere */
        }
    }
    md_grid_free(&g);
}

/* Atoms exactly on grid points: by MD_DCS_MIN_R2 that point receives the sum of
 * the other atoms only (every point stays finite). Origin and spacing are
 * powers of two so the grid points and the atoms are exact in float. */
static void atoms_on_grid_points_skip_self(void) {
    const double o[3] = {-0.5, 0.25, -1.0}, h[3] = {0.125, 0.0625, 0.25};
    md_float4 atoms[6];
    md_grid g;
    float *ref;
    md_rng rr;
    int a, r;
    static const int on[4][3] = {{0, 0, 0}, {4, 3, 2}, {8, 6, 4}, {2, 5, 1}};
    MD_CHECK_OK(md_grid_alloc(&g, 9, 7, 5, o, h));
    md_rng_seed(&rr, 21);
    for (a = 0; a < 6; a++) {
        if (a < 4) { /* on grid point (i, j, k) */
            atoms[a].x = (float)(o[0] + h[0] * on[a][0]);
            atoms[a].y = (float)(o[1] + h[1] * on[a][1]);
            atoms[a].z = (float)(o[2] + h[2] * on[a][2]);
        } else { /* two more off the grid points */
            atoms[a].x = (float)(o[0] + 1.0 * md_rng_uniform(&rr));
            atoms[a].y = (float)(o[1] + 0.375 * md_rng_uniform(&rr));
            atoms[a].z = (float)(o[2] + 1.0 * md_rng_uniform(&rr));
        }
        atoms[a].w = (float)(2.0 * md_rng_uniform(&rr) - 1.0);
    }
    ref = (float *)malloc(md_grid_count(&g) * sizeof *ref);
    MD_CHECK(ref != NULL);
    MD_CHECK(reference_dcs(atoms, 6, &g, ref));
    for (r = 0; r < CPU_RUNGS; r++) {
        poison(&g);
        MD_CHECK_OK(md_dcs(cpu_rungs[r], atoms, 6, &g));
        for (a = 0; a < 4; a++) {
            const int i = on[a][0], j = on[a][1], k = on[a][2];
            const double x = o[0] + h[0] * i, y = o[1] + h[1] * j, z = o[2] + h[2] * k;
            double v = 0.0;
            int b;
            for (b = 0; b < 6; b++) /* the other atoms only, from the formula */
                if (b != a)
                    v += 138.935458 * atoms[b].w /
                         sqrt((x - atoms[b].x) * (x - atoms[b].x) + (y - atoms[b].y) * (y - atoms[b].y) +
                              (z - atoms[b].z) * (z - atoms[b].z));
            /* a sum of 5 terms: same float error budget as the header comment */
            MD_CHECK_CLOSE(g.data[((size_t)k * 7 + j) * 9 + i], v, tol_of(cpu_rungs[r]), 1e-3);
        }
        MD_CHECKF(md_max_rel_error(g.data, ref, md_grid_count(&g)) <= tol_of(cpu_rungs[r]),
                  "%s differs from the reference", md_dcs_variant_name(cpu_rungs[r]));
    }
    free(ref);
    md_grid_free(&g);
}

/* The check can fail: leaving out the last atom of the 13x11x9 system of
 * seed 12 must exceed the tolerance by far (its term q/r at the nearest point
 * is a sizeable part of max|V|). */
static void tolerance_catches_a_missing_atom(void) {
    const double o[3] = {2.5, -1.25, -0.4}, h[3] = {0.09, 0.13, 0.05};
    md_grid g;
    md_float4 *atoms;
    float *ref;
    int r;
    MD_CHECK_OK(md_grid_alloc(&g, 13, 11, 9, o, h));
    atoms = random_atoms(200, &g, 12);
    ref = (float *)malloc(md_grid_count(&g) * sizeof *ref);
    MD_CHECK(atoms && ref);
    MD_CHECK(reference_dcs(atoms, 200, &g, ref));
    for (r = 0; r < CPU_RUNGS; r++) {
        double err;
        poison(&g);
        MD_CHECK_OK(md_dcs(cpu_rungs[r], atoms, 199, &g));
        err = md_max_rel_error(g.data, ref, md_grid_count(&g));
        if (getenv("DCS_VERBOSE")) printf("  without one atom: %s err %.2e\n", md_dcs_variant_name(cpu_rungs[r]), err);
        MD_CHECKF(err > 100 * tol_of(MD_DCS_CPU_SCATTER), "%s without one atom: error only %.2e",
                  md_dcs_variant_name(cpu_rungs[r]), err);
    }
    free(atoms);
    free(ref);
    md_grid_free(&g);
}

/* Rows and rows_omp run the same plane code: each plane is computed by one
 * thread in the same order, so the results are bitwise identical. */
static void rows_omp_is_bitwise_rows(void) {
    const double o[3] = {0.3, -0.2, 0.1}, h[3] = {0.08, 0.1, 0.12};
    md_grid a, b;
    md_float4 *atoms;
    MD_CHECK_OK(md_grid_alloc(&a, 23, 19, 17, o, h));
    MD_CHECK_OK(md_grid_alloc(&b, 23, 19, 17, o, h));
    atoms = random_atoms(150, &a, 12);
    MD_CHECK(atoms != NULL);
    poison(&a);
    poison(&b);
    MD_CHECK_OK(md_dcs_rows(atoms, 150, &a));
    MD_CHECK_OK(md_dcs_rows_omp(atoms, 150, &b));
    MD_CHECK(memcmp(a.data, b.data, md_grid_count(&a) * sizeof(float)) == 0);
    /* the dispatcher calls the same functions */
    poison(&b);
    MD_CHECK_OK(md_dcs(MD_DCS_CPU_ROWS, atoms, 150, &b));
    MD_CHECK(memcmp(a.data, b.data, md_grid_count(&a) * sizeof(float)) == 0);
    free(atoms);
    md_grid_free(&a);
    md_grid_free(&b);
}

/* Bad arguments return the right status, name the field, and leave the grid untouched. */
static void bad_arguments_are_rejected(void) {
    const double o[3] = {0, 0, 0}, h[3] = {0.1, 0.1, 0.1};
    md_float4 atom;
    md_grid g, empty;
    int r;
    atom.x = atom.y = atom.z = 0.05f;
    atom.w = 1.0f;
    MD_CHECK_OK(md_grid_alloc(&g, 3, 2, 2, o, h));
    for (r = 0; r < CPU_RUNGS; r++) {
        md_dcs_variant v = cpu_rungs[r];
        poison(&g);
        MD_CHECK_ERROR(md_dcs(v, NULL, 1, &g), MD_ERR_INVALID_ARGUMENT, "field xyzq");
        MD_CHECK_ERROR(md_dcs(v, &atom, 0, &g), MD_ERR_INVALID_ARGUMENT, "field n");
        MD_CHECK_ERROR(md_dcs(v, &atom, -3, &g), MD_ERR_INVALID_ARGUMENT, "field n");
        MD_CHECK_ERROR(md_dcs(v, &atom, 1, NULL), MD_ERR_INVALID_ARGUMENT, "field grid");
        empty = g;
        empty.data = NULL;
        MD_CHECK_ERROR(md_dcs(v, &atom, 1, &empty), MD_ERR_INVALID_ARGUMENT, "field grid");
        empty = g;
        empty.n[1] = 0;
        MD_CHECK_ERROR(md_dcs(v, &atom, 1, &empty), MD_ERR_INVALID_ARGUMENT, "field grid.n");
        MD_CHECK(isnan(g.data[0]) && isnan(g.data[11])); /* untouched on failure */
    }
    for (r = 0; r < MD_DCS_VARIANT_COUNT; r++)
        if (md_dcs_variant_is_gpu((md_dcs_variant)r))
            MD_CHECK_ERROR(md_dcs((md_dcs_variant)r, &atom, 1, &g), MD_ERR_UNSUPPORTED, "GPU rung");
    MD_CHECK_ERROR(md_dcs(MD_DCS_VARIANT_COUNT, &atom, 1, &g), MD_ERR_INVALID_ARGUMENT, "field variant");
    MD_CHECK_ERROR(md_dcs((md_dcs_variant)-1, &atom, 1, &g), MD_ERR_INVALID_ARGUMENT, "field variant");
    MD_CHECK(isnan(g.data[0]));
    md_grid_free(&g);
}

static void variant_names(void) {
    int v, w;
    MD_CHECK(strcmp(md_dcs_variant_name(MD_DCS_CPU_SIMPLE), "cpu_simple") == 0);
    MD_CHECK(strcmp(md_dcs_variant_name(MD_DCS_CPU_ROWS_OMP), "cpu_rows_omp") == 0);
    MD_CHECK(strcmp(md_dcs_variant_name(MD_DCS_VARIANT_COUNT), "unknown") == 0);
    MD_CHECK(strcmp(md_dcs_variant_name((md_dcs_variant)-5), "unknown") == 0);
    for (v = 0; v < CPU_RUNGS; v++) MD_CHECK(!md_dcs_variant_is_gpu(cpu_rungs[v]));
    MD_CHECK(md_dcs_variant_is_gpu(MD_DCS_GPU_SCATTER));
    MD_CHECK(!md_dcs_variant_is_gpu(MD_DCS_VARIANT_COUNT));
    for (v = 0; v < MD_DCS_VARIANT_COUNT; v++) { /* every rung is named, and the names are distinct */
        MD_CHECK(strcmp(md_dcs_variant_name((md_dcs_variant)v), "unknown") != 0);
        for (w = v + 1; w < MD_DCS_VARIANT_COUNT; w++)
            MD_CHECKF(strcmp(md_dcs_variant_name((md_dcs_variant)v), md_dcs_variant_name((md_dcs_variant)w)) != 0,
                      "rungs %d and %d share the name %s", v, w, md_dcs_variant_name((md_dcs_variant)v));
    }
}

int main(void) {
    MD_RUN(every_rung_matches_reference_on_random_systems);
    MD_RUN(one_atom_is_coulomb_law);
    MD_RUN(atoms_on_grid_points_skip_self);
    MD_RUN(tolerance_catches_a_missing_atom);
    MD_RUN(rows_omp_is_bitwise_rows);
    MD_RUN(bad_arguments_are_rejected);
    MD_RUN(variant_names);
    return md_test_summary();
}
