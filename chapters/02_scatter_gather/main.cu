/* chapters/02_scatter_gather - the first GPU rungs of the direct Coulomb sum.
 *
 *   build/chapters/02_scatter_gather            the ladder on the default system
 *   build/chapters/02_scatter_gather --quick    small sizes, every rung checked (make test)
 *   build/chapters/02_scatter_gather --json F   append one md_bench JSON line per rung to F
 *
 * Rungs (md_cuda.cu.h, section dcs):
 *   cpu_rows_omp  chapter 01's best CPU rung: the baseline
 *   gpu_scatter   md__dcs_scatter_kernel: one thread per atom, atomicAdd into every point
 *   gpu_gather    md__dcs_gather_kernel: one thread per point, atoms from global memory
 *   exercise      your kernel in exercise.cu (it starts as a copy of the scatter idea)
 * Default system: 4000 random charges (seed LADDER_SEED) on a 128 x 128 x 32 grid, 0.1 nm
 * spacing: 2.1e9 atom-evals. Each rung runs on its own plan (md_cuda_dcs_plan) and is checked
 * (NaN-poisoned output, first, middle and last plane against md_dcs_simple in double,
 * tolerance 1e-4) before it is timed; a rung that fails shows FAIL and no rate. The ceiling
 * column is the rate over the MUFU rsqrt throughput measured on this GPU. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "ladder.h"
#include "exercise.cu"

/* The ladder, one row per rung: the library's rung, its name, the student's launcher (run on
 * the buffers of a gpu_gather plan: the grid unpadded). */
static const ladder_rung_row rows[] = {
    {MD_DCS_CPU_ROWS_OMP, "cpu_rows_omp", NULL, 0},
    {MD_DCS_GPU_SCATTER, "gpu_scatter", NULL, 0},
    {MD_DCS_GPU_GATHER, "gpu_gather", NULL, 0},
    {MD_DCS_GPU_GATHER, "exercise", LADDER_FN(exercise_dcs), 0},
};

int main(int argc, char **argv) {
    ladder l;
    ladder_opts o;
    ladder_dcs_case c;
    char device[320];
    double ceiling = NAN;
    int reps, rc = ladder_dcs_gpu_begin(&l, &o, argc, argv, "Chapter 02: scatter vs gather on the GPU.",
                                        "02_scatter_gather", "Chapter 02 - direct Coulomb sum: scatter vs gather", device,
                                        sizeof device, &ceiling);
    if (rc >= 0) return rc;
    reps = o.reps ? o.reps : (o.quick ? 3 : 11);
    /* --quick: 4001 atoms (not a multiple of a block) on 37 x 29 x 11 points; planes 0, nz/2,
     * nz-1 checked against md_dcs_simple */
    if (o.quick ? ladder_dcs_case_make(&c, &o, 4001, 37, 29, 11, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL)
                : ladder_dcs_case_make(&c, &o, 4000, 128, 128, 32, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL))
        return 1;
    printf("system: %d atoms, %d x %d x %d grid\n", c.sys.n, c.grid.n[0], c.grid.n[1], c.grid.n[2]);
    /* the CPU baseline is slow: one timed run */
    ladder_dcs_run(&l, &c, (int)(sizeof rows / sizeof rows[0]), ceiling, reps, 1);
    ladder_dcs_case_free(&c);
    return ladder_end(&l);
}
