/* bench/mufu_issue.cu - how many issue slots does one MUFU.RSQ take?
 *
 *   build/bench/mufu_issue          one line per K, then the fitted slot count
 *
 * Each thread runs 8 independent chains x = rsqrt(x) + 1 (MUFU.RSQ + FADD) and, beside each
 * MUFU, K dependent-per-chain FFMAs on 8 other chains. While the MUFU pipe (16 lanes per SM:
 * 8 clocks per warp instruction on each of the 4 schedulers) is the bound, the FFMAs are free;
 * once the scheduler's one warp-instruction per clock is the bound, the rate is
 *     MUFU/s = 128 * SMs * clock / (s + 1 + K)
 * where s is the issue slots of one MUFU instruction. The fit over the issue-bound K gives s.
 * tutorials/04_shared_memory.md uses it to bound the hybrid rsqrt. No GPU: SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include <stdio.h>

template <int K>
__global__ void __launch_bounds__(256) mufu_issue_kernel(const float *in, float *out, int iters) {
    float m[8], f[8];
    const float c = in[threadIdx.x & 7], d = in[8 + (threadIdx.x & 7)];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        m[i] = c + i;
        f[i] = d + i;
    }
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            m[i] = md_cuda_rsqrt_mufu(m[i]) + 1.0f;
#pragma unroll
            for (int k = 0; k < K; k++) f[i] = fmaf(f[i], 0.999f, 0.5f);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) s += m[i] + f[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

typedef struct mufu_ctx {
    const float *in;
    float *out;
    int blocks, iters;
    md_status (*launch)(const struct mufu_ctx *, cudaStream_t);
} mufu_ctx;

template <int K> static md_status mufu_launch(const mufu_ctx *c, cudaStream_t s) {
    MD_CUDA_LAUNCH(mufu_issue_kernel<K>, c->blocks, 256, 0, s, c->in, c->out, c->iters);
    return MD_OK;
}

static md_status mufu_run(void *ctx, cudaStream_t s) {
    const mufu_ctx *c = (const mufu_ctx *)ctx;
    return c->launch(c, s);
}

int main(void) {
    static md_status (*const launches[])(const mufu_ctx *, cudaStream_t) = {
        mufu_launch<0>, mufu_launch<2>, mufu_launch<4>, mufu_launch<6>, mufu_launch<8>,
        mufu_launch<10>, mufu_launch<12>, mufu_launch<14>};
    static const int ks[] = {0, 2, 4, 6, 8, 10, 12, 14};
    md_cuda_device_info info;
    mufu_ctx c;
    float h[16], *in = NULL, *out = NULL;
    double t, rate, slots_sum = 0.0, peak;
    int i, fitted = 0;
    cudaError_t e;
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    if (md_cuda_get_device_info(0, &info) != MD_OK) goto fail;
    for (i = 0; i < 16; i++) h[i] = 1.0f + 0.01f * i;
    c.blocks = info.sm_count * 8 * 2;
    c.iters = 2000;
    if ((e = cudaMalloc((void **)&in, sizeof h)) != cudaSuccess ||
        (e = cudaMalloc((void **)&out, (size_t)c.blocks * 256 * sizeof(float))) != cudaSuccess ||
        (e = cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice)) != cudaSuccess) {
        md_cuda_error(e, "cudaMalloc/cudaMemcpy", __FILE__, __LINE__);
        goto fail;
    }
    c.in = in;
    c.out = out;
    peak = 128.0 * info.sm_count * info.clock_khz * 1e3; /* thread-instructions issued per s */
    printf("%s: %d SMs, %d MHz; issue peak %.4g thread-instructions/s, MUFU peak (16/SM/clk) %.4g/s\n",
           info.name, info.sm_count, info.clock_khz / 1000, peak, peak / 8.0);
    printf("  K FFMA per MUFU    MUFU.RSQ/s   issue slots per MUFU+FADD+K FFMA\n");
    for (i = 0; i < 8; i++) {
        md_cuda_bench_desc d = {0, 5, 1, 0};
        c.launch = launches[i];
        if (md_cuda_bench(mufu_run, &c, &d, &t) != MD_OK) goto fail;
        rate = (double)c.blocks * 256 * c.iters * 8 / t;
        printf("  %2d             %12.4g   %6.2f\n", ks[i], rate, peak / rate);
        if (ks[i] >= 10) { /* issue-bound: slots = peak / rate = s + 1 + K */
            slots_sum += peak / rate - 1 - ks[i];
            fitted++;
        }
    }
    printf("issue slots of one MUFU.RSQ (fit over K >= 10): %.2f\n", slots_sum / fitted);
    (void)cudaFree(in);
    (void)cudaFree(out);
    return 0;
fail:
    printf("FAIL: %s\n", md_last_error());
    if (in) (void)cudaFree(in);
    if (out) (void)cudaFree(out);
    return 1;
}
