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
 *   ... --reps N      timed runs per rung (median reported; the check run before them is the warm-up)
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

/* The ladder, one row per rung: md.h's rung, its name in the table, and the student's function
 * for the exercise. cpu_simple comes first: its map is the reference of the others. */
static const ladder_rung_row rows[] = {
    {MD_DCS_CPU_SIMPLE, "cpu_simple", NULL, 0},
    {MD_DCS_CPU_SIMPLE, "exercise", LADDER_FN(exercise_dcs), 0},
    {MD_DCS_CPU_SCATTER, "cpu_scatter", NULL, 0},
    {MD_DCS_CPU_ROWS, "cpu_rows", NULL, 0},
    {MD_DCS_CPU_ROWS_OMP, "cpu_rows_omp", NULL, 0},
};

int main(int argc, char **argv) {
    ladder_opts o;
    ladder l;
    ladder_dcs_case c;
    char device[64], title[200];
    int reps, threads = 1, pr, ng;

    if ((pr = ladder_parse(&o, argc, argv,
                           "Chapter 01: sequential Coulomb potential map, the CPU ladder.\n"
                           "Default 1,000 atoms on a 64^3 grid; --quick: 300 atoms on 24^3.")) != 0)
        return pr > 0 ? 0 : 2;
    ng = o.quick ? 24 : 64;
    reps = o.reps ? o.reps : 3;
#if defined(_OPENMP)
    threads = omp_get_max_threads();
#endif
    snprintf(device, sizeof device, "cpu: %d thread%s", threads, threads == 1 ? "" : "s");
    /* every plane checked; the reference is the cpu_simple row */
    if (ladder_dcs_case_make(&c, &o, o.quick ? 300 : 1000, ng, ng, ng, 0.05, 1, 0, rows, FLOAT_TOL)) return 1;
    snprintf(title, sizeof title,
             "Chapter 01: direct Coulomb sum, %d atoms on a %d x %d x %d grid (0.05 nm), %d timed run%s per rung",
             c.sys.n, c.grid.n[0], c.grid.n[1], c.grid.n[2], reps, reps == 1 ? "" : "s");
    ladder_begin(&l, &o, CHAPTER, title, "atom-evals/s", "atoms*points", device);
    ladder_dcs_run(&l, &c, (int)(sizeof rows / sizeof rows[0]), NAN, reps, reps);
    ladder_dcs_case_free(&c);
    return ladder_end(&l);
}
