/* chapters/04_shared_memory - where the atoms come from: constant cache, L1, shared memory;
 * and the hybrid rsqrt that moves part of the MUFU work to the FMA pipe.
 *
 *   build/chapters/04_shared_memory            the ladder on the default system
 *   build/chapters/04_shared_memory --quick    small sizes, every rung checked (make test)
 *   build/chapters/04_shared_memory --json F   append one md_bench JSON line per rung to F
 *
 * Rungs (md_cuda.cu.h, section dcs), all the coarsened kernel md__dcs_unroll_kernel:
 *   gpu_unroll8x2  chapter 03's best: 8 x 2 points per thread, atoms in __constant__ memory
 *   gpu_l1         the same, atoms read from global memory through L1 (__ldg)
 *   gpu_shared     the same, atom tiles of MD_DCS_SHARED_TILE staged in shared memory
 *   gpu_hybrid     8 x 4 points, constant memory, MD_DCS_HYBRID_SOFT of every 64 rsqrts
 *                  in software (md_soft_rsqrtf on the FMA pipe), no MIN_R2 test in the loop
 *   hybrid_sN      the same for every compiled split N (md_cuda_dcs_hybrid_splits): the
 *                  tuning sweep for MD_DCS_HYBRID_SOFT
 *   exercise       your kernel in exercise.cu (it starts as an unroll-8 constant-memory kernel
 *                  with its own 16 KB __constant__ buffer)
 * Default system: 4000 random charges (seed LADDER_SEED) on 256 x 256 x 132 points, 0.1 nm
 * apart: 3.5e10 atom-evals. Each rung runs on its own plan (hybrid_sN: md_cuda_dcs_plan_set_split)
 * and is checked (NaN-poisoned output, planes 0, 66, 131 against md_dcs_simple in double,
 * tolerance 1e-4, the hybrid too) before it is timed; a failed rung shows no rate. Ceiling: the
 * measured MUFU rsqrt rate; only the hybrid can pass 100%. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "ladder.h"
#include "exercise.cu"

int main(int argc, char **argv) {
    ladder l;
    ladder_opts o;
    ladder_dcs_case c;
    /* the ladder, one row per rung; the hybrid_sN rows are added from the splits compiled in,
     * and the exercise runs on a gpu_gather plan's buffers (the grid unpadded) */
    ladder_rung_row rows[32] = {
        {MD_DCS_GPU_UNROLL8X2, "gpu_unroll8x2", NULL, 0},
        {MD_DCS_GPU_L1, "gpu_l1", NULL, 0},
        {MD_DCS_GPU_SHARED, "gpu_shared", NULL, 0},
        {MD_DCS_GPU_HYBRID, "gpu_hybrid", NULL, 0},
    };
    char device[320], names[16][32];
    double ceiling = NAN;
    int reps, splits[16], np, i, nrows = 4;
    int rc = ladder_dcs_gpu_begin(&l, &o, argc, argv, "Chapter 04: constant vs L1 vs shared memory; the hybrid rsqrt.",
                                  "04_shared_memory", "Chapter 04 - direct Coulomb sum: shared memory and the hybrid rsqrt",
                                  device, sizeof device, &ceiling);
    if (rc >= 0) return rc;
    reps = o.reps ? o.reps : (o.quick ? 3 : 11);
    np = md_cuda_dcs_hybrid_splits(splits, 16);
    for (i = 0; i < np && i < 16; i++) {
        snprintf(names[i], sizeof names[i], "hybrid_s%d", splits[i]);
        rows[nrows].variant = MD_DCS_GPU_HYBRID;
        rows[nrows].name = names[i];
        rows[nrows].launcher = NULL;
        rows[nrows++].split = splits[i];
    }
    rows[nrows].variant = MD_DCS_GPU_GATHER;
    rows[nrows].name = "exercise";
    rows[nrows].launcher = LADDER_FN(exercise_dcs);
    rows[nrows++].split = 0;
    /* --quick: 4001 atoms (not a multiple of a tile or a chunk, odd) on 37 x 29 x 11 */
    if (o.quick ? ladder_dcs_case_make(&c, &o, 4001, 37, 29, 11, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL)
                : ladder_dcs_case_make(&c, &o, 4000, 256, 256, 132, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL))
        return 1;
    printf("system: %d atoms, %d x %d x %d grid; MD_DCS_HYBRID_SOFT %d\n", c.sys.n, c.grid.n[0], c.grid.n[1],
           c.grid.n[2], MD_DCS_HYBRID_SOFT);
    ladder_dcs_run(&l, &c, nrows, ceiling, reps, 1);
    ladder_dcs_case_free(&c);
    return ladder_end(&l);
}
