/* exercise.cu - chapter 07: your PME charge-spreading kernel.
 *
 * The harness (main.cu) uploads the water box, zeroes the plan's real grid (plan->d_real,
 * K0 x K1 x K2 floats, index (x K1 + y) K2 + z), calls exercise_spread(), checks the grid
 * against md.h's CPU spread (md_pme_spread, double) to 1e-4 of the largest grid value and
 * times it beside the library's spread rungs.
 *
 * The stub below is the starting rung, and it is correct: one thread per atom, the atom's
 * 5 x 5 x 5 B-spline weights (order 5, md_cuda_pme_bspline), 125 float atomicAdds into the
 * grid. It has two faults. Fix them and measure each step:
 *   1. it is not repeatable: float additions in the order the atomics land give a grid that
 *      differs in the last bits from run to run (run it twice and compare). Sum in 64-bit
 *      fixed point (md_fixed_from_float with MD_CUDA_PME_GRID_SCALE, atomicAdd on unsigned
 *      long long) into a second grid and convert it to float afterwards: now the grid is the
 *      same bits on every run, whatever the order;
 *   2. it has too little parallelism: 23,568 atoms are 23,568 threads, a fraction of what an
 *      H100 keeps resident. Give each atom P x P threads. Which two stencil axes should they
 *      take? The 32 lanes of a warp issue an atomicAdd together: count the 32-byte sectors one
 *      instruction touches when each lane walks z along its own row, and when consecutive
 *      lanes hold consecutive z and each walks x;
 *   3. compare with the gather formulation (MD_CUDA_PME_SPREAD_GATHER): no atomics on the
 *      grid at all, but atoms binned into bricks and every grid point testing the atoms of
 *      up to 27 bricks. Which wins here, and why? What changes with the spline order?
 * The solution is the atomic spread kernel in md_cuda.cu.h's pme section (steps 1 and 2). Keep
 * md_cuda_pme_locate and md_cuda_pme_bspline: they are what makes every rung's weights the same. */
#ifndef MD_IMPLEMENTATION
#define MD_IMPLEMENTATION
#endif
#ifndef MD_CUDA_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#endif
#include "md_cuda.cu.h"

#define EXERCISE_BLOCK 128
#define EXERCISE_ORDER 5

__global__ void exercise_spread_kernel(const float4 *__restrict__ xyzq, int n, const double *__restrict__ box, int K0,
                                       int K1, int K2, float *__restrict__ grid) {
    const int i = blockIdx.x * EXERCISE_BLOCK + threadIdx.x;
    float w0[EXERCISE_ORDER], w1[EXERCISE_ORDER], w2[EXERCISE_ORDER], d0, d1, d2;
    int b0, b1, b2, ix, iy, iz;
    float4 a;
    if (i >= n) return;
    a = xyzq[i];
    md_cuda_pme_locate(a.x, (float)(1.0 / box[0]), K0, &b0, &d0);
    md_cuda_pme_locate(a.y, (float)(1.0 / box[1]), K1, &b1, &d1);
    md_cuda_pme_locate(a.z, (float)(1.0 / box[2]), K2, &b2, &d2);
    md_cuda_pme_bspline<EXERCISE_ORDER>(d0, w0, NULL);
    md_cuda_pme_bspline<EXERCISE_ORDER>(d1, w1, NULL);
    md_cuda_pme_bspline<EXERCISE_ORDER>(d2, w2, NULL);
    for (ix = 0; ix < EXERCISE_ORDER; ix++)
        for (iy = 0; iy < EXERCISE_ORDER; iy++)
            for (iz = 0; iz < EXERCISE_ORDER; iz++) {
                const int gx = (b0 + ix) % K0, gy = (b1 + iy) % K1, gz = (b2 + iz) % K2;
                atomicAdd(grid + ((size_t)gx * K1 + gy) * K2 + gz, a.w * w0[ix] * w1[iy] * w2[iz]);
            }
}

/* Spread the n atoms at d_xyzq (device) for the box d_box (device, 3 doubles) into the plan's
 * real grid, on the plan's stream. The plan's order must be EXERCISE_ORDER. */
static md_status exercise_spread(const md_cuda_pme_plan *plan, const float4 *d_xyzq, int n, const double *d_box) {
    const int *K = plan->params.grid;
    cudaStream_t s = plan->queue.stream;
    if (plan->params.order != EXERCISE_ORDER)
        return md_set_error(MD_ERR_UNSUPPORTED, "exercise_spread", 0, "order", "the exercise is written for order %d",
                            EXERCISE_ORDER);
    MD_CUDA_TRY(cudaMemsetAsync(plan->d_real, 0, (size_t)K[0] * K[1] * K[2] * sizeof(float), s));
    exercise_spread_kernel<<<(n + EXERCISE_BLOCK - 1) / EXERCISE_BLOCK, EXERCISE_BLOCK, 0, s>>>(d_xyzq, n, d_box, K[0],
                                                                                                K[1], K[2], plan->d_real);
    MD_CUDA_TRY_LAUNCH("exercise_spread_kernel");
    return MD_OK;
}
