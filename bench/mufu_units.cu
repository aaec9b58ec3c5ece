/* bench/mufu_units.cu - do other MUFU instructions add rsqrt throughput? (tutorial 04)
 *
 *   build/bench/mufu_units          one line per instruction mix: MUFU results per second
 *
 * A float rsqrt can also be had from the double-precision approximation MUFU.RSQ64H (the
 * float's exponent and mantissa moved into a double's high word, one LEA.HI, and back, one
 * LEA: about 20 good bits). If that instruction ran on a unit of its own, mixing it with
 * MUFU.RSQ would raise the rsqrt rate above the MUFU ceiling. Each thread runs 8 independent
 * chains x = f(x) + c; the mixes: all MUFU.RSQ, all MUFU.RSQ64H, half and half, and half
 * MUFU.EX2 as a control that is known to share the unit. Also prints the max relative error of
 * the RSQ64H path on every 97th float in [1, 4). No GPU: SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include <stdio.h>

/* 1/sqrt(x) through MUFU.RSQ64H: rebias the float's exponent into a double's high word. */
static __device__ __forceinline__ float mu_rsq64h(float x) {
    const int hi = (int)(__float_as_uint(x) >> 3) + ((1023 - 127) << 20);
    double r;
    asm volatile("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(__hiloint2double(hi, 0)));
    return __int_as_float((__double2hiint(r) - ((1023 - 127) << 20)) << 3);
}
static __device__ __forceinline__ float mu_ex2(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int MIX> __global__ void mu_kernel(const float *in, float *out, int iters) {
    float x[8];
    const float c = in[256];
#pragma unroll
    for (int i = 0; i < 8; i++) x[i] = in[(threadIdx.x + i) & 255];
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if (MIX == 0 || (MIX >= 2 && !(i & 1))) x[i] = md_cuda_rsqrt_mufu(x[i]) + c;
            else if (MIX == 1 || MIX == 2) x[i] = mu_rsq64h(x[i]) + c;
            else x[i] = mu_ex2(-x[i]) + c; /* MIX 3: converges, 2^-x < 1 for x > c > 0 */
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += x[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

__global__ void mu_error_kernel(const float *x, float *y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = mu_rsq64h(x[i]);
}

static md_status mu_ok(cudaError_t e, const char *what) {
    return e == cudaSuccess ? MD_OK : md_cuda_error(e, what, __FILE__, __LINE__);
}

typedef struct mu_ctx {
    const float *in;
    float *out;
    int blocks, iters, mix;
} mu_ctx;

static md_status mu_run(void *ctx, cudaStream_t s) {
    const mu_ctx *c = (const mu_ctx *)ctx;
    switch (c->mix) {
    case 0: MD_CUDA_LAUNCH(mu_kernel<0>, c->blocks, 256, 0, s, c->in, c->out, c->iters); break;
    case 1: MD_CUDA_LAUNCH(mu_kernel<1>, c->blocks, 256, 0, s, c->in, c->out, c->iters); break;
    case 2: MD_CUDA_LAUNCH(mu_kernel<2>, c->blocks, 256, 0, s, c->in, c->out, c->iters); break;
    default: MD_CUDA_LAUNCH(mu_kernel<3>, c->blocks, 256, 0, s, c->in, c->out, c->iters); break;
    }
    return MD_OK;
}

static md_status mu_error_run(const float *dx, float *dy, int n) {
    MD_CUDA_LAUNCH(mu_error_kernel, (n + 255) / 256, 256, 0, 0, dx, dy, n);
    return MD_OK;
}

#define MU_CHECK(call)                                                                             \
    do {                                                                                           \
        if ((call) != MD_OK) {                                                                     \
            printf("FAIL: %s\n", md_last_error());                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void) {
    static const char *names[] = {"MUFU.RSQ only", "MUFU.RSQ64H only", "half RSQ, half RSQ64H",
                                  "half RSQ, half EX2"};
    md_cuda_device_info info;
    float h[257], *in = NULL, *out = NULL, *hx = NULL, *hy = NULL, *dx = NULL, *dy = NULL;
    const int n = (0x40800000 - 0x3F800000) / 97;
    double t, worst = 0.0;
    mu_ctx c;
    int i;
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    MU_CHECK(md_cuda_get_device_info(0, &info));
    for (i = 0; i < 257; i++) h[i] = 1.0f + 0.003f * i;
    c.blocks = info.sm_count * 8;
    c.iters = 4096;
    MU_CHECK(mu_ok(cudaMalloc((void **)&in, sizeof h), "cudaMalloc"));
    MU_CHECK(mu_ok(cudaMalloc((void **)&out, (size_t)c.blocks * 256 * sizeof(float)), "cudaMalloc"));
    MU_CHECK(mu_ok(cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice), "cudaMemcpy"));
    c.in = in;
    c.out = out;
    printf("%-24s %10s %14s\n", "mix", "time (ms)", "MUFU results/s");
    for (c.mix = 0; c.mix < 4; c.mix++) {
        md_cuda_bench_desc bd = {0, 7, 0, 0};
        MU_CHECK(md_cuda_bench(mu_run, &c, &bd, &t));
        printf("%-24s %10.3f %14.4g\n", names[c.mix], 1e3 * t, (double)c.blocks * 256 * 8 * c.iters / t);
    }
    hx = (float *)malloc((size_t)n * sizeof *hx);
    hy = (float *)malloc((size_t)n * sizeof *hy);
    if (!hx || !hy) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    for (i = 0; i < n; i++) {
        const unsigned int b = 0x3F800000u + 97u * (unsigned int)i;
        memcpy(&hx[i], &b, sizeof b);
    }
    MU_CHECK(mu_ok(cudaMalloc((void **)&dx, (size_t)n * sizeof *dx), "cudaMalloc"));
    MU_CHECK(mu_ok(cudaMalloc((void **)&dy, (size_t)n * sizeof *dy), "cudaMalloc"));
    MU_CHECK(mu_ok(cudaMemcpy(dx, hx, (size_t)n * sizeof *dx, cudaMemcpyHostToDevice), "cudaMemcpy"));
    MU_CHECK(mu_error_run(dx, dy, n));
    MU_CHECK(mu_ok(cudaMemcpy(hy, dy, (size_t)n * sizeof *hy, cudaMemcpyDeviceToHost), "cudaMemcpy"));
    for (i = 0; i < n; i++) {
        const double e = fabs(hy[i] * sqrt((double)hx[i]) - 1.0);
        worst = e > worst ? e : worst;
    }
    printf("MUFU.RSQ64H as a float rsqrt: max relative error %.3e over %d floats in [1, 4)\n", worst, n);
    cudaFree(in);
    cudaFree(out);
    cudaFree(dx);
    cudaFree(dy);
    free(hx);
    free(hy);
    return 0;
}
