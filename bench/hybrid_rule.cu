/* bench/hybrid_rule.cu - what the MD_DCS_MIN_R2 rule costs inside the hybrid loop (tutorial 04).
 *
 *   build/bench/hybrid_rule         one line per way of applying the rule
 *
 * The 8 x 4 points-per-thread hybrid shape (2 of 8 points per atom in software, 4 resident
 * blocks per SM), 3072 random atoms from the library's constant buffer (md_cuda_dcs_const_atom),
 * 256 x 256 x 132 points. Per
 * pair of atoms the loads and dy^2 + dz^2 come first, then the rule is applied three ways:
 *   none        no rule (the atoms are random: none sits on a grid point)
 *   ifelse      the library's structure: minimum of dy^2 + dz^2, if/else to a careful path
 *   branchfree  charge 0 and dy^2 + dz^2 = 1 for an atom on a row, careful path beside it
 * and, for comparison, the same with every rsqrt on MUFU. All must agree (max rel error vs
 * the first); the rate against the measured MUFU ceiling is the point. No GPU: SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "hybrid_bench.h" /* the shared harness */

template <int HYB, int MODE>
__global__ void __launch_bounds__(128, 4) rule_kernel(int n, float h, int onx, int ony, float *out) {
    enum { U = 8, R = 4 };
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
        float4 at[2];
        float d2[2][R], q[2], dmin = 3.0e38f;
#pragma unroll
        for (int s = 0; s < 2; s++) {
            at[s] = md_cuda_dcs_const_atom(a + s);
            q[s] = at[s].w;
            const float dz = z - at[s].z, dz2 = dz * dz;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float dy = y[r] - at[s].y;
                d2[s][r] = fmaf(dy, dy, dz2);
                dmin = fminf(dmin, d2[s][r]);
            }
        }
        if (MODE != 0 && !(dmin >= MD_DCS_MIN_R2)) { /* careful path: a select per point */
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const float dx = x[u] - at[s].x, r2 = fmaf(dx, dx, d2[s][r]);
                        acc[r][u] = fmaf(at[s].w, r2 >= MD_DCS_MIN_R2 ? md_cuda_rsqrt_mufu(r2) : 0.0f, acc[r][u]);
                    }
            if (MODE == 1) continue;
            q[0] = q[1] = 0.0f; /* MODE 2: the fast body below adds nothing for these atoms */
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int r = 0; r < R; r++) d2[s][r] = 1.0f;
        }
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const float dx = x[u] - at[s].x, r2 = fmaf(dx, dx, d2[s][r]);
                    const float ri = ((HYB >> u) & 1) ? md_soft_rsqrtf(r2) : md_cuda_rsqrt_mufu(r2);
                    acc[r][u] = fmaf(q[s], ri, acc[r][u]);
                }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < U; u++) out[((size_t)k * ony + j0 + 8 * r) * onx + i0 + 16 * u] = acc[r][u];
}

template <int HYB, int MODE> static md_status way_launch(md_cuda_dcs_plan *p) {
    const int nx = p->out_dims[0], ny = p->out_dims[1], nz = p->out_dims[2];
    MD_CUDA_LAUNCH((rule_kernel<HYB, MODE>), dim3(nx / 128, ny / 32, nz), dim3(16, 8), 0, p->queue.stream, p->n, 0.1f,
                   nx, ny, p->d_out);
    return MD_OK;
}

int main(void) {
    static const hb_entry ways[] = {
        {"hybrid none", way_launch<3, 0>},  {"hybrid ifelse", way_launch<3, 1>}, {"hybrid branchfree", way_launch<3, 2>},
        {"mufu none", way_launch<0, 0>},    {"mufu ifelse", way_launch<0, 1>},   {"mufu branchfree", way_launch<0, 2>},
    };
    return hb_run_table(ways, (int)(sizeof ways / sizeof ways[0]), ", 8 x 4 points per thread", 18);
}
