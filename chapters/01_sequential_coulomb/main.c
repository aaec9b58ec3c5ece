/* Chapter 01: the sequential Coulomb potential map (direct Coulomb sum, DCS).
 *
 * Runs md.h's CPU ladder and the student's exercise_dcs() (exercise.c) on the
 * default system of the Coulomb chapters (ladder.h: random charges, seed
 * 2026, in a cube covered by the grid), checks every rung against
 * md_dcs_simple (double accumulation, the reference) and prints one table.
 *
 *   build/chapters/01_sequential_coulomb            1,000 atoms, 64^3 grid (~17 s on 2 cores)
 *   build/chapters/01_sequential_coulomb --quick    300 atoms, 24^3 grid, every rung checked
 *   ... --json FILE   append one md_bench JSON line per rung
 *   ... --reps N      timed runs per rung after one warm-up (median reported)
 *
 * Tolerance: max |V - V_ref| / max |V_ref| <= 5e-5 for the float rungs. The
 * dominant float error is the grid point coordinate formed in float (about
 * 2 ulps of |x| <= 3.15 nm, ~2.4e-7 nm) relative to the distance r_min between
 * the nearest atom and grid point, which also sets max |V|: 2.4e-7 / 0.003 nm
 * = 8e-5 at worst on this system, ~1e-5 measured. A missing atom of typical charge or a wrong
 * formula costs 1e-3 or more. */
#define MD_IMPLEMENTATION
#include "md.h"
#include "ladder.h"
#include "exercise.c"

#define CHAPTER "01_sequential_coulomb"
#define FLOAT_TOL 5e-5

typedef struct run_ctx {
    md_dcs_variant variant; /* the md.h rung, or -1 for exercise_dcs */
    const md_system *sys;
    md_grid *grid;
} run_ctx;

static md_status run_rung(void *p) {
    run_ctx *c = (run_ctx *)p;
    if ((int)c->variant < 0) return exercise_dcs(c->sys->xyzq, c->sys->n, c->grid);
    return md_dcs(c->variant, c->sys->xyzq, c->sys->n, c->grid);
}

int main(int argc, char **argv) {
    const md_dcs_variant rungs[] = {MD_DCS_CPU_SIMPLE, (md_dcs_variant)-1, MD_DCS_CPU_SCATTER,
                                    MD_DCS_CPU_ROWS, MD_DCS_CPU_ROWS_OMP};
    const int nrungs = (int)(sizeof rungs / sizeof rungs[0]);
    ladder_opts o;
    ladder l;
    md_system sys;
    md_grid grid;
    float *ref;
    char device[64], title[160];
    int natoms, ng, reps, r, threads = 1, pr;
    size_t count, p;
    double work;

    if ((pr = ladder_parse(&o, argc, argv,
                           "Chapter 01: sequential Coulomb potential map, the CPU ladder.\n"
                           "Default 1,000 atoms on a 64^3 grid; --quick: 300 atoms on 24^3.")) != 0)
        return pr > 0 ? 0 : 2;
    natoms = o.quick ? 300 : 1000;
    ng = o.quick ? 24 : 64;
    reps = o.reps ? o.reps : 3;
#if defined(_OPENMP)
    threads = omp_get_max_threads();
#endif
    snprintf(device, sizeof device, "cpu: %d thread%s", threads, threads == 1 ? "" : "s");
    if (ladder_dcs_system(&sys, &grid, natoms, ng, ng, ng, 0.05) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    count = md_grid_count(&grid);
    work = (double)natoms * (double)count;
    ref = (float *)md_alloc_array(count, sizeof *ref);
    if (!ref) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    snprintf(title, sizeof title,
             "Chapter 01: direct Coulomb sum, %d atoms on a %d^3 grid (0.05 nm), %d timed run%s per rung",
             natoms, ng, reps, reps == 1 ? "" : "s");
    ladder_begin(&l, &o, CHAPTER, title, "atom-evals/s", "atoms*points", device);

    for (r = 0; r < nrungs; r++) {
        run_ctx c;
        const char *name = (int)rungs[r] < 0 ? "exercise" : md_dcs_variant_name(rungs[r]);
        double t, err;
        c.variant = rungs[r];
        c.sys = &sys;
        c.grid = &grid;
        for (p = 0; p < count; p++) grid.data[p] = NAN; /* an unwritten point fails the check */
        t = ladder_time_cpu(run_rung, &c, reps);
        if (t < 0.0) {
            ladder_row_error(&l, name, md_last_error());
            continue;
        }
        if (rungs[r] == MD_DCS_CPU_SIMPLE) {
            memcpy(ref, grid.data, count * sizeof *ref);
            err = NAN; /* the reference */
        } else {
            err = md_max_rel_error(grid.data, ref, count);
        }
        ladder_row(&l, name, (long long)natoms * (long long)count, t, work, NAN, err, FLOAT_TOL);
    }
    md_free(ref);
    md_grid_free(&grid);
    md_system_free(&sys);
    return ladder_end(&l);
}
