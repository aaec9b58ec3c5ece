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
 * spacing: 2.1e9 atom-evals. Each rung is checked (NaN-poisoned output, first, middle and last
 * plane against md_dcs_simple in double, tolerance 1e-4) before it is timed. The ceiling
 * column is the rate over the MUFU rsqrt throughput measured on this GPU. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "dcs_gpu.h"
#include "exercise.cu"

int main(int argc, char **argv) {
    ladder l;
    ladder_opts o;
    dcs_gpu_case c;
    char device[320];
    double ceiling = NAN;
    int reps, rc = dcs_gpu_begin(&l, &o, argc, argv, "Chapter 02: scatter vs gather on the GPU.", "02_scatter_gather",
                                 "Chapter 02 - direct Coulomb sum: scatter vs gather", device, sizeof device, &ceiling);
    if (rc >= 0) return rc;
    reps = o.reps ? o.reps : (o.quick ? 3 : 11);
    /* --quick: 4001 atoms (not a multiple of a block) on 37 x 29 x 11 points */
    if (dcs_gpu_case_setup(&c, &o, 4000, 128, 128, 32)) return 1;
    printf("system: %d atoms, %d x %d x %d grid\n", c.sys.n, c.grid.n[0], c.grid.n[1], c.grid.n[2]);
    dcs_cpu_baseline(&l, &c);
    /* scatter: every point takes n atomics in turn; at most 3 timed runs */
    dcs_gpu_rung(&l, &c, "gpu_scatter", MD_DCS_GPU_SCATTER, 0, NULL, ceiling, reps < 3 ? reps : 3);
    dcs_gpu_rung(&l, &c, "gpu_gather", MD_DCS_GPU_GATHER, 0, NULL, ceiling, reps);
    dcs_gpu_rung(&l, &c, "exercise", MD_DCS_GPU_GATHER, 0, exercise_dcs, ceiling, reps);
    dcs_gpu_case_free(&c);
    return ladder_end(&l);
}
