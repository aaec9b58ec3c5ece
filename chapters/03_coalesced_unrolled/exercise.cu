/* chapters/03_coalesced_unrolled/exercise.cu - your rung, run by main.cu as "exercise".
 *
 * It starts as chapter 02's gather rung: one thread per point, every atom read from global
 * memory, dx, dy and dz recomputed for every pair. Your task (README.md):
 *   1. put the atoms in __constant__ memory, in chunks of at most EXERCISE_CHUNK atoms
 *      (md_cuda.cu.h's rungs already hold 48 KB of the 64 KB), one launch per chunk adding
 *      into the output;
 *   2. give each thread U points of a row, BLOCK_X apart, so a warp's stores stay contiguous,
 *      and compute dy^2 + dz^2 once per atom for all U points;
 *   3. (optional) pad the output to whole tiles - then the contract below changes, so keep
 *      the bounds test on the stores instead.
 * Compare your row with gpu_unroll4 / gpu_unroll8.
 *
 * Contract: d_xyzq holds n atoms (x, y, z in nm, q in e) on the device; d_out holds
 * md_grid_count(g) floats, point (i, j, k) at ((k * ny) + j) * nx + i; write
 * MD_COULOMB * sum_atoms q / r there, skipping an atom closer than sqrt(MD_DCS_MIN_R2).
 * Enqueue everything on stream s (copies into your __constant__ buffer included:
 * cudaMemcpyToSymbolAsync on s) and return without waiting. */
#include "md_cuda.cu.h"

#define EXERCISE_CHUNK 1024 /* 16 KB of constant memory is free for you */

__global__ void exercise_dcs_kernel(const float4 *atoms, int n, int nx, int ny, float ox, float oy, float oz,
                                    float h0, float h1, float h2, float *out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    const float x = ox + i * h0, y = oy + j * h1, z = oz + k * h2;
    float v = 0.0f;
    for (int a = 0; a < n; a++) { /* TODO: constant memory, U points per thread, dy^2 + dz^2 reused */
        const float4 at = atoms[a];
        const float dx = x - at.x, dy = y - at.y, dz = z - at.z;
        const float r2 = dx * dx + dy * dy + dz * dz;
        if (r2 >= MD_DCS_MIN_R2) v += at.w * rsqrtf(r2);
    }
    out[((size_t)k * ny + j) * nx + i] = (float)MD_COULOMB * v;
}

md_status exercise_dcs(const md_float4 *d_xyzq, int n, const md_grid *g, float *d_out, cudaStream_t s) {
    const dim3 block(32, 4), grid((g->n[0] + 31) / 32, (g->n[1] + 3) / 4, g->n[2]);
    MD_CUDA_LAUNCH(exercise_dcs_kernel, grid, block, 0, s, (const float4 *)d_xyzq, n, g->n[0], g->n[1],
                   (float)g->origin[0], (float)g->origin[1], (float)g->origin[2], (float)g->spacing[0],
                   (float)g->spacing[1], (float)g->spacing[2], d_out);
    return MD_OK;
}
