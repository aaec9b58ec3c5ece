/* chapters/02_scatter_gather/exercise.cu - your rung, run by main.cu as "exercise".
 *
 * It starts as the scatter rung: one thread per atom, each adding q/r to every grid point
 * with atomicAdd. It is correct, and slow. Your task (README.md): turn it into a gather
 * kernel - one thread per grid point, looping over the atoms and writing its point once -
 * then compare your row with gpu_gather. main.cu checks it against md_dcs_simple before it
 * times it, exactly like the header's rungs.
 *
 * Contract: d_xyzq holds n atoms (x, y, z in nm, q in e) on the device; d_out holds
 * md_grid_count(g) floats, point (i, j, k) at ((k * ny) + j) * nx + i; write
 * MD_COULOMB * sum_atoms q / r there, skipping an atom closer than sqrt(MD_DCS_MIN_R2).
 * Enqueue everything on stream s and return without waiting (the harness times the enqueue
 * with events on s). Launch with MD_CUDA_LAUNCH(kernel, grid, block, shared bytes, stream,
 * arguments...): it launches, checks the launch and registers the kernel, as the library does. */
#include "md_cuda.cu.h"

__global__ void exercise_dcs_kernel(const float4 *atoms, int n, int nx, int ny, int nz, float ox, float oy,
                                    float oz, float h0, float h1, float h2, float *out) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x; /* TODO: one thread per point instead */
    if (a >= n) return;
    const float4 at = atoms[a];
    for (int k = 0; k < nz; k++)
        for (int j = 0; j < ny; j++)
            for (int i = 0; i < nx; i++) {
                const float dx = ox + i * h0 - at.x, dy = oy + j * h1 - at.y, dz = oz + k * h2 - at.z;
                const float r2 = dx * dx + dy * dy + dz * dz;
                if (r2 >= MD_DCS_MIN_R2)
                    atomicAdd(&out[((size_t)k * ny + j) * nx + i], (float)MD_COULOMB * at.w * rsqrtf(r2));
            }
}

md_status exercise_dcs(const md_float4 *d_xyzq, int n, const md_grid *g, float *d_out, cudaStream_t s) {
    /* TODO: a gather kernel writes every point, so it needs no zeroing and a 2D/3D launch */
    MD_CUDA_TRY(cudaMemsetAsync(d_out, 0, md_grid_count(g) * sizeof(float), s));
    MD_CUDA_LAUNCH(exercise_dcs_kernel, (n + 127) / 128, 128, 0, s, (const float4 *)d_xyzq, n, g->n[0], g->n[1],
                   g->n[2], (float)g->origin[0], (float)g->origin[1], (float)g->origin[2], (float)g->spacing[0],
                   (float)g->spacing[1], (float)g->spacing[2], d_out);
    return MD_OK;
}
