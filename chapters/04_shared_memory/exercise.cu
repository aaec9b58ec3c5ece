/* chapters/04_shared_memory/exercise.cu - your rung, run by main.cu as "exercise".
 *
 * It starts as chapter 03's answer in its plainest form: 8 points per thread, BLOCK_X apart,
 * dy^2 + dz^2 reused, atoms in __constant__ memory (chunks of EXERCISE_CHUNK atoms, one launch
 * each), bounds tests on the stores (no padding). Your task (README.md), one of:
 *   a. stage the atoms through shared memory: each block copies a tile of atoms (one per
 *      thread) from global memory, __syncthreads(), loops over the tile, __syncthreads();
 *      mind the threads outside the grid: they must still reach every __syncthreads();
 *   b. the hybrid rsqrt: compute some of the inverse square roots with md_soft_rsqrtf
 *      (md_cuda.cu.h, FMA pipe) instead of rsqrtf (MUFU): the library gives 19 of every 64
 *      rsqrts to software (MD_DCS_HYBRID_SOFT); try 1 of every P atoms, or S of 8 points,
 *      and find the split that runs fastest.
 * Compare your row with gpu_shared / gpu_hybrid.
 *
 * Contract: d_xyzq holds n atoms (x, y, z in nm, q in e) on the device; d_out holds
 * md_grid_count(g) floats, point (i, j, k) at ((k * ny) + j) * nx + i; write
 * MD_COULOMB * sum_atoms q / r there, skipping an atom closer than sqrt(MD_DCS_MIN_R2).
 * Enqueue everything on stream s (the copies into exercise_atoms included) and return without
 * waiting. exercise_atoms is this program's own __constant__ buffer: nothing else writes it. */
#include "md_cuda.cu.h"

#define EXERCISE_CHUNK 1024 /* 16 KB: md_cuda.cu.h's rungs hold the other 48 KB */
#define EXERCISE_U 8
#define EXERCISE_BX 16
#define EXERCISE_BY 8

__constant__ float4 exercise_atoms[EXERCISE_CHUNK];

__global__ void exercise_dcs_kernel(int n, int nx, int ny, float ox, float oy, float oz, float h0, float h1,
                                    float h2, float *out, int accumulate) {
    const int i0 = blockIdx.x * (EXERCISE_U * EXERCISE_BX) + threadIdx.x;
    const int j = blockIdx.y * EXERCISE_BY + threadIdx.y, k = blockIdx.z;
    const float y = oy + j * h1, z = oz + k * h2;
    float x[EXERCISE_U], acc[EXERCISE_U];
    for (int u = 0; u < EXERCISE_U; u++) {
        x[u] = ox + (i0 + u * EXERCISE_BX) * h0;
        acc[u] = 0.0f;
    }
    for (int a = 0; a < n; a++) { /* TODO: a shared-memory tile, or 1 in P rsqrts in software */
        const float4 at = exercise_atoms[a];
        const float dy = y - at.y, dz = z - at.z, dydz2 = dy * dy + dz * dz;
        for (int u = 0; u < EXERCISE_U; u++) {
            const float dx = x[u] - at.x, r2 = dx * dx + dydz2;
            if (r2 >= MD_DCS_MIN_R2) acc[u] += at.w * rsqrtf(r2);
        }
    }
    for (int u = 0; u < EXERCISE_U; u++) {
        const int i = i0 + u * EXERCISE_BX;
        if (i < nx && j < ny) {
            const size_t idx = ((size_t)k * ny + j) * nx + i;
            out[idx] = (accumulate ? out[idx] : 0.0f) + (float)MD_COULOMB * acc[u];
        }
    }
}

md_status exercise_dcs(const md_float4 *d_xyzq, int n, const md_grid *g, float *d_out, cudaStream_t s) {
    const dim3 block(EXERCISE_BX, EXERCISE_BY);
    const dim3 grid((g->n[0] + EXERCISE_U * EXERCISE_BX - 1) / (EXERCISE_U * EXERCISE_BX),
                    (g->n[1] + EXERCISE_BY - 1) / EXERCISE_BY, g->n[2]);
    for (int a0 = 0; a0 < n; a0 += EXERCISE_CHUNK) {
        const int m = n - a0 < EXERCISE_CHUNK ? n - a0 : EXERCISE_CHUNK;
        MD_CUDA_TRY(cudaMemcpyToSymbolAsync(exercise_atoms, d_xyzq + a0, (size_t)m * sizeof(float4), 0,
                                            cudaMemcpyDeviceToDevice, s));
        MD_CUDA_LAUNCH(exercise_dcs_kernel, grid, block, 0, s, m, g->n[0], g->n[1], (float)g->origin[0],
                       (float)g->origin[1], (float)g->origin[2], (float)g->spacing[0], (float)g->spacing[1],
                       (float)g->spacing[2], d_out, a0 > 0);
    }
    return MD_OK;
}
