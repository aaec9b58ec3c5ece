/* bench/hybrid_shapes.cu - the shape experiments behind the hybrid-rsqrt rung (tutorial 04).
 *
 *   build/bench/hybrid_shapes       one line per shape: time, atom-evals/s, x the MUFU ceiling
 *
 * A stand-alone direct-Coulomb-sum kernel WITHOUT the MD_DCS_MIN_R2 rule (random atoms never
 * sit on a grid point here), so the shapes can be compared with nothing else in the loop:
 * U = 8 points per thread along x (16 apart), R rows per thread (8 apart), block 16 x 8,
 * __launch_bounds__(128, B), 3072 atoms from the library's constant buffer (md_cuda_dcs_const_atom), two atoms per loop
 * iteration, 256 x 256 x 132 points 0.1 nm apart. Points whose bit is set in the mask (over
 * u; M0 for the first atom of a pair, M1 for the second) take md_soft_rsqrtf, the others MUFU.
 * Every shape is compared with the first (max rel error printed). No GPU: SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "hybrid_bench.h" /* the shared harness */

template <int R, int M0, int M1, int B>
__global__ void __launch_bounds__(128, B) shape_kernel(int n, float h, int onx, int ony, float *out) {
    enum { U = 8 };
    const int i0 = blockIdx.x * (U * 16) + threadIdx.x, j0 = blockIdx.y * (8 * R) + threadIdx.y, k = blockIdx.z;
    const float z = (float)k * h;
    float x[U], y[R], acc[R][U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = (float)(i0 + 16 * u) * h;
#pragma unroll
    for (int r = 0; r < R; r++) {
        y[r] = (float)(j0 + 8 * r) * h;
#pragma unroll
        for (int u = 0; u < U; u++) acc[r][u] = 0.0f;
    }
    for (int a = 0; a + 2 <= n; a += 2) {
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const float4 at = md_cuda_dcs_const_atom(a + s);
            const float dz = z - at.z, dz2 = dz * dz;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float dy = y[r] - at.y, d2 = fmaf(dy, dy, dz2);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const float dx = x[u] - at.x, r2 = fmaf(dx, dx, d2);
                    const float ri = (((s == 0 ? M0 : M1) >> u) & 1) ? md_soft_rsqrtf(r2) : md_cuda_rsqrt_mufu(r2);
                    acc[r][u] = fmaf(at.w, ri, acc[r][u]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < U; u++) out[((size_t)k * ony + j0 + 8 * r) * onx + i0 + 16 * u] = acc[r][u];
}

template <int R, int M0, int M1, int B> static md_status shape_launch(md_cuda_dcs_plan *p) {
    const int nx = p->out_dims[0], ny = p->out_dims[1], nz = p->out_dims[2];
    MD_CUDA_LAUNCH((shape_kernel<R, M0, M1, B>), dim3(nx / 128, ny / (8 * R), nz), dim3(16, 8), 0, p->queue.stream, p->n,
                   0.1f, nx, ny, p->d_out);
    return MD_OK;
}

int main(void) {
    static const hb_entry shapes[] = {
        {"8x1 mufu B8", shape_launch<1, 0, 0, 8>},      {"8x2 mufu B8", shape_launch<2, 0, 0, 8>},
        {"8x2 mufu B4", shape_launch<2, 0, 0, 4>},      {"8x4 mufu B4", shape_launch<4, 0, 0, 4>},
        {"8x2 soft 1/2 B8", shape_launch<2, 1, 3, 8>},  {"8x4 soft 1/1 B4", shape_launch<4, 1, 1, 4>},
        {"8x4 soft 1/2 B4", shape_launch<4, 1, 3, 4>},  {"8x4 soft 0x03 B4", shape_launch<4, 3, 3, 4>},
        {"8x4 soft 0x05/0x50", shape_launch<4, 5, 0x50, 4>}, {"8x4 soft 0x11 B4", shape_launch<4, 0x11, 0x11, 4>},
        {"8x4 soft 0x03 B5", shape_launch<4, 3, 3, 5>}, {"8x4 soft 0x03 B3", shape_launch<4, 3, 3, 3>},
        {"8x4 soft 2/3 B4", shape_launch<4, 3, 7, 4>},  {"8x4 soft 3/3 B4", shape_launch<4, 7, 7, 4>},
    };
    return hb_run_table(shapes, (int)(sizeof shapes / sizeof shapes[0]), "", 20);
}
