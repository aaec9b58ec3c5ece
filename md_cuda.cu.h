/* md_cuda.cu.h - the GPU versions of md.h's kernels.                  v0.1
 *
 * USING IT
 *   In exactly one .cu file of your project:
 *       #define MD_IMPLEMENTATION
 *       #define MD_CUDA_IMPLEMENTATION
 *       #include "md_cuda.cu.h"      (it includes md.h)
 *   Build with nvcc -std=c++17 -arch=sm_90 (any sm_70 or newer works).
 *   Other .cu files include "md_cuda.cu.h" without the defines.
 *
 * API
 *   Same units, error model and rungs as md.h. A GPU function returns
 *   md_status; a failed CUDA call or launch returns MD_ERR_CUDA (no device:
 *   MD_ERR_NO_DEVICE) with md_last_error() naming the call, file and line.
 *   Every CUDA call and every launch is checked. md_cuda_available() says
 *   whether a device can be used, and why not.
 *
 * EXAMPLE
 *       if (!md_cuda_available()) { printf("no GPU: %s\n", md_last_error()); return 0; }
 *       md_cuda_device_info info;  md_cuda_get_device_info(0, &info);
 *       ... md_cuda_dcs(MD_DCS_GPU_UNROLL8, sys.xyzq, sys.n, &grid, NULL);
 *
 * CONTENTS
 *   core      error conversion, device availability and info, poison fill
 *   timing    event timer, benchmark helper (warm-up, L2 flush, median)
 *   ceilings  micro-benchmarks of the units that bound the kernels
 *   dcs       direct Coulomb sum: the GPU rungs
 *   rdf       radial distribution functions: the GPU rungs
 */
#ifndef MD_CUDA_CU_H
#define MD_CUDA_CU_H

#include "md.h"
#include <cuda_runtime.h>

/** @file md_cuda.cu.h
 *  @brief GPU versions of md.h's kernels (CUDA C, host API callable from C++). */

/* ======================================================================== */
/* core                                                                     */
/* ======================================================================== */

/** @brief Turn a CUDA error into md_status (MD_ERR_CUDA, or MD_ERR_NO_DEVICE when
 *  there is no usable device) with a message naming @p what, @p file and @p line. */
md_status md_cuda_error(cudaError_t err, const char *what, const char *file, int line);

/** @brief Evaluate a CUDA runtime call; on failure return its md_status from the
 *  enclosing function (which must return md_status). */
#define MD_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t md__e = (call);                                                                \
        if (md__e != cudaSuccess) return md_cuda_error(md__e, #call, __FILE__, __LINE__);          \
    } while (0)

/** @brief Check the last kernel launch (cudaGetLastError); on failure return from the
 *  enclosing function with MD_ERR_CUDA naming @p kernel. */
#define MD_CUDA_TRY_LAUNCH(kernel)                                                                 \
    do {                                                                                           \
        cudaError_t md__e = cudaGetLastError();                                                    \
        if (md__e != cudaSuccess)                                                                  \
            return md_cuda_error(md__e, "launch of " kernel, __FILE__, __LINE__);                  \
    } while (0)

/** @brief 1 if a CUDA device can be used, else 0 with the reason in md_last_error()
 *  (no driver, no device, a device older than sm_70, ...). */
int md_cuda_available(void);

/** @brief What the project reads off a device. */
typedef struct md_cuda_device_info {
    char name[256];               /**< device name, e.g. "NVIDIA H100 80GB HBM3" */
    int major;                    /**< compute capability, major */
    int minor;                    /**< compute capability, minor */
    int sm_count;                 /**< number of streaming multiprocessors */
    int clock_khz;                /**< peak SM clock (kHz) */
    int mem_clock_khz;            /**< peak memory clock (kHz) */
    int mem_bus_bits;             /**< memory bus width (bits) */
    size_t global_mem;            /**< global memory (bytes) */
    int l2_bytes;                 /**< L2 cache size (bytes) */
    size_t smem_per_block_optin;  /**< shared memory a block may opt in to (bytes) */
    size_t smem_per_sm;           /**< shared memory per SM (bytes) */
    int max_threads_per_sm;       /**< resident threads per SM */
    int driver_version;           /**< CUDA driver version (e.g. 13000) */
    int runtime_version;          /**< CUDA runtime version */
} md_cuda_device_info;

/** @brief Fill @p info for device @p device. */
md_status md_cuda_get_device_info(int device, md_cuda_device_info *info);

/** @brief Fill @p count floats at device pointer @p d_ptr with NaN (bytes 0xFF), so an
 *  element a kernel fails to write shows up in the check. */
md_status md_cuda_poison(float *d_ptr, size_t count, cudaStream_t stream);

/* ======================================================================== */
/* timing                                                                   */
/* ======================================================================== */

/** @brief A pair of CUDA events on a stream. */
typedef struct md_cuda_timer {
    cudaEvent_t start;   /**< recorded by md_cuda_timer_start */
    cudaEvent_t stop;    /**< recorded by md_cuda_timer_stop */
    cudaStream_t stream; /**< stream the events are recorded on */
} md_cuda_timer;

/** @brief Create the two events of @p t on @p stream. */
md_status md_cuda_timer_create(md_cuda_timer *t, cudaStream_t stream);
/** @brief Record the start event. */
md_status md_cuda_timer_start(md_cuda_timer *t);
/** @brief Record the stop event, wait for it and return the elapsed seconds in @p seconds. */
md_status md_cuda_timer_stop(md_cuda_timer *t, double *seconds);
/** @brief Destroy the events of @p t (safe on a zeroed timer). */
void md_cuda_timer_destroy(md_cuda_timer *t);

/** @brief Work to be timed: enqueue one run on @p stream; return MD_OK or an error. */
typedef md_status (*md_cuda_bench_fn)(void *ctx, cudaStream_t stream);

/** @brief How md_cuda_bench times; a zero field takes its default. */
typedef struct md_cuda_bench_desc {
    int warmup;         /**< untimed runs first (default 2) */
    int reps;           /**< timed runs; the median is reported (default 11) */
    int keep_l2;        /**< 0 (default): flush L2 before every timed run by writing a buffer of
                             twice its size; 1: do not flush */
    cudaStream_t stream;/**< stream to run on (default: the legacy default stream) */
} md_cuda_bench_desc;

/** @brief Time @p fn with events: warm-up, L2 flush between runs (outside the timed
 *  region), median of reps. Writes the median seconds to @p median_s. */
md_status md_cuda_bench(md_cuda_bench_fn fn, void *ctx, const md_cuda_bench_desc *desc,
                        double *median_s);

/* ======================================================================== */
/* ceilings                                                                 */
/* ======================================================================== */

/** @brief The measured ceilings of the current device: the rates every chapter divides by.
 *
 *  Each is measured by md_cuda_measure_ceilings() (or the md_cuda_ceiling_* function named
 *  beside it) with a micro-benchmark that fills the GPU and cannot be folded by the compiler;
 *  times are medians of several CUDA-event-timed runs. A rate that could not be measured is NaN. */
typedef struct md_cuda_ceilings {
    double rsqrt_per_s;        /**< MUFU rsqrtf (MUFU.RSQ) results per second, whole GPU (md_cuda_ceiling_rsqrt) */
    double fma_per_s;          /**< FP32 FMA instructions per second, whole GPU; x2 = flop/s (md_cuda_ceiling_fma) */
    double dram_bytes_per_s;   /**< device-memory bandwidth of a large float4 copy, bytes read + written per s (md_cuda_ceiling_dram) */
    double memcpy_bytes_per_s; /**< the same copy by cudaMemcpyAsync device-to-device, bytes read + written per s (for comparison) */
    double smem_atomic_per_s;  /**< shared-memory atomicAdd (int) per second, whole GPU, every lane on its own word (md_cuda_ceiling_smem_atomic) */
    double launch_s;           /**< time per empty kernel launched back-to-back on a stream (md_cuda_ceiling_launch) */
    double graph_node_s;       /**< time per node of a replayed CUDA graph of many empty kernels (md_cuda_ceiling_launch) */
    int sm_count;              /**< streaming multiprocessors, to turn rates into per-SM numbers */
    int clock_khz;             /**< peak SM clock (kHz) as the device reports it, for per-SM-per-clock numbers */
    char device[256];          /**< device name */
} md_cuda_ceilings;

/** @brief Scale the work of the ceiling micro-benchmarks by @p effort in (0, 1] (default 1;
 *  values outside are clamped to [0.001, 1]). Below 1 the loops, buffers, launch counts and
 *  repeats shrink (and timing is no longer meaningful): for runs under compute-sanitizer. */
void md_cuda_ceilings_set_effort(double effort);

/** @brief MUFU reciprocal-square-root throughput: 8 independent chains x = rsqrtf(x) + c per
 *  thread (inner loop MUFU.RSQ + FADD), several waves of blocks; writes rsqrtf results per second
 *  of the whole GPU to @p per_s. Bounds the Coulomb sums (chapters 01-04). */
md_status md_cuda_ceiling_rsqrt(double *per_s);

/** @brief FP32 FMA throughput: 8 independent chains x = fmaf(x, a, b) per thread (inner loop
 *  FFMA); writes FMA instructions per second of the whole GPU to @p per_s (flop/s is twice it). */
md_status md_cuda_ceiling_fma(double *per_s);

/** @brief Device-memory bandwidth: a grid-stride float4 copy of 1 GiB into another 1 GiB; writes
 *  bytes read + written per second to @p bytes_per_s. Bounds streaming kernels (PME grids, MD step). */
md_status md_cuda_ceiling_dram(double *bytes_per_s);

/** @brief Shared-memory atomic throughput: every thread adds repeatedly to its own 4 int words
 *  (no bank conflicts, no address contention); writes atomicAdd per second of the whole GPU to
 *  @p per_s. Bounds privatized histograms (chapter 05, RDF). */
md_status md_cuda_ceiling_smem_atomic(double *per_s);

/** @brief Launch cost: 1000 empty kernels back-to-back on a stream (time per launch to
 *  @p launch_s) and a captured graph of 1000 empty-kernel nodes replayed (time per node to
 *  @p graph_node_s). Bounds small-system MD steps (chapters 08, 09). */
md_status md_cuda_ceiling_launch(double *launch_s, double *graph_node_s);

/** @brief Measure every ceiling on the current device into @p c. A part that fails is left NaN
 *  and the others are still measured; the return value is the first failure (MD_OK if none),
 *  with its message in md_last_error(). */
md_status md_cuda_measure_ceilings(md_cuda_ceilings *c);

/** @brief Format @p c as one JSON object (no newline) into @p buf: schema ("md_ceilings/1"),
 *  device, sm_count, clock_mhz, every rate of md_cuda_ceilings, flop_per_s, and the per-SM-per-clock
 *  numbers rsqrt_per_sm_clk, fma_per_sm_clk, smem_atomic_per_sm_clk (null when unknown). NaN is
 *  written as null. Returns the length the whole object needs (like snprintf); it was written
 *  whole only if that is < @p cap. */
int md_cuda_ceilings_json(char *buf, size_t cap, const md_cuda_ceilings *c);

/* ======================================================================== */
/* dcs                                                                      */
/* ======================================================================== */

/* @@dcs-gpu-declarations@@ */

/* ======================================================================== */
/* rdf                                                                      */
/* ======================================================================== */

/* @@rdf-gpu-declarations@@ */

#endif /* MD_CUDA_CU_H */

/* ======================================================================== */
/* implementation                                                           */
/* ======================================================================== */

#ifdef MD_CUDA_IMPLEMENTATION
#ifndef MD_CUDA_IMPLEMENTATION_INCLUDED
#define MD_CUDA_IMPLEMENTATION_INCLUDED

#include <math.h>
#include <string.h>

/* ---- core ---- */

md_status md_cuda_error(cudaError_t err, const char *what, const char *file, int line) {
    md_status st = (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                       ? MD_ERR_NO_DEVICE
                       : MD_ERR_CUDA;
    (void)cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
    return md_set_error(st, file, line, NULL, "%s failed: %s (%s)", what, cudaGetErrorString(err),
                        cudaGetErrorName(err));
}

int md_cuda_available(void) {
    int count = 0, major = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        md_cuda_error(e, "cudaGetDeviceCount", __FILE__, __LINE__);
        return 0;
    }
    if (count < 1) {
        md_set_error(MD_ERR_NO_DEVICE, "md_cuda_available", 0, NULL, "no CUDA device found");
        return 0;
    }
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (e != cudaSuccess) {
        md_cuda_error(e, "cudaDeviceGetAttribute", __FILE__, __LINE__);
        return 0;
    }
    if (major < 7) {
        md_set_error(MD_ERR_NO_DEVICE, "md_cuda_available", 0, NULL,
                     "device 0 has compute capability %d.x; md_cuda.cu.h needs 7.0 or newer", major);
        return 0;
    }
    return 1;
}

md_status md_cuda_get_device_info(int device, md_cuda_device_info *info) {
    cudaDeviceProp p;
    md_cuda_device_info r;
    if (!info) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_get_device_info", 0, "info", "is NULL");
    memset(&r, 0, sizeof r);
    MD_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    snprintf(r.name, sizeof r.name, "%s", p.name);
    r.major = p.major;
    r.minor = p.minor;
    r.sm_count = p.multiProcessorCount;
    MD_CUDA_TRY(cudaDeviceGetAttribute(&r.clock_khz, cudaDevAttrClockRate, device));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&r.mem_clock_khz, cudaDevAttrMemoryClockRate, device));
    r.mem_bus_bits = p.memoryBusWidth;
    r.global_mem = p.totalGlobalMem;
    r.l2_bytes = p.l2CacheSize;
    r.smem_per_block_optin = p.sharedMemPerBlockOptin;
    r.smem_per_sm = p.sharedMemPerMultiprocessor;
    r.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    MD_CUDA_TRY(cudaDriverGetVersion(&r.driver_version));
    MD_CUDA_TRY(cudaRuntimeGetVersion(&r.runtime_version));
    *info = r;
    return MD_OK;
}

md_status md_cuda_poison(float *d_ptr, size_t count, cudaStream_t stream) {
    MD_CUDA_TRY(cudaMemsetAsync(d_ptr, 0xFF, count * sizeof(float), stream));
    return MD_OK;
}

/* ---- timing ---- */

md_status md_cuda_timer_create(md_cuda_timer *t, cudaStream_t stream) {
    memset(t, 0, sizeof *t);
    t->stream = stream;
    MD_CUDA_TRY(cudaEventCreate(&t->start));
    MD_CUDA_TRY(cudaEventCreate(&t->stop));
    return MD_OK;
}

md_status md_cuda_timer_start(md_cuda_timer *t) {
    MD_CUDA_TRY(cudaEventRecord(t->start, t->stream));
    return MD_OK;
}

md_status md_cuda_timer_stop(md_cuda_timer *t, double *seconds) {
    float ms = 0.0f;
    MD_CUDA_TRY(cudaEventRecord(t->stop, t->stream));
    MD_CUDA_TRY(cudaEventSynchronize(t->stop));
    MD_CUDA_TRY(cudaEventElapsedTime(&ms, t->start, t->stop));
    *seconds = 1e-3 * ms;
    return MD_OK;
}

void md_cuda_timer_destroy(md_cuda_timer *t) {
    if (!t) return;
    if (t->start) (void)cudaEventDestroy(t->start);
    if (t->stop) (void)cudaEventDestroy(t->stop);
    memset(t, 0, sizeof *t);
}

md_status md_cuda_bench(md_cuda_bench_fn fn, void *ctx, const md_cuda_bench_desc *desc,
                        double *median_s) {
    md_cuda_bench_desc d;
    md_cuda_timer timer;
    md_status st = MD_OK;
    double *times = NULL;
    void *flush = NULL;
    size_t flush_bytes = 0;
    int i, l2 = 0;
    if (!fn || !median_s)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_bench", 0, "fn/median_s", "is NULL");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.warmup <= 0) d.warmup = 2;
    if (d.reps <= 0) d.reps = 11;
    times = (double *)md_alloc_array((size_t)d.reps, sizeof(double));
    if (!times) return MD_ERR_OUT_OF_MEMORY;
    memset(&timer, 0, sizeof timer);
    if (!d.keep_l2) {
        cudaError_t e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
        if (e != cudaSuccess) { st = md_cuda_error(e, "cudaDeviceGetAttribute", __FILE__, __LINE__); goto done; }
        flush_bytes = 2 * (size_t)l2;
        e = cudaMalloc(&flush, flush_bytes);
        if (e != cudaSuccess) { st = md_cuda_error(e, "cudaMalloc(flush)", __FILE__, __LINE__); goto done; }
    }
    if ((st = md_cuda_timer_create(&timer, d.stream)) != MD_OK) goto done;
    for (i = 0; i < d.warmup; i++)
        if ((st = fn(ctx, d.stream)) != MD_OK) goto done;
    for (i = 0; i < d.reps; i++) {
        if (flush) {
            cudaError_t e = cudaMemsetAsync(flush, i & 0xFF, flush_bytes, d.stream);
            if (e != cudaSuccess) { st = md_cuda_error(e, "cudaMemsetAsync(flush)", __FILE__, __LINE__); goto done; }
        }
        if ((st = md_cuda_timer_start(&timer)) != MD_OK) goto done;
        if ((st = fn(ctx, d.stream)) != MD_OK) goto done;
        if ((st = md_cuda_timer_stop(&timer, &times[i])) != MD_OK) goto done;
    }
    *median_s = md_median(times, d.reps);
done:
    md_cuda_timer_destroy(&timer);
    if (flush) (void)cudaFree(flush);
    md_free(times);
    return st;
}

/* ---- ceilings ---- */

/* Every micro-benchmark here follows one shape: inputs loaded from device memory (so nothing
 * is a compile-time constant), many independent chains per thread (so latency hides behind
 * throughput), one result per thread always stored to global memory (so no work is dead), a grid
 * of MD__CEIL_WAVES times the blocks the device holds at once, and md_cuda_bench's median. */
#define MD__CEIL_BLOCK 256 /* threads per block of every ceiling kernel */
#define MD__CEIL_CHAINS 8  /* independent chains per thread */
#define MD__CEIL_WAVES 4   /* grid = this many full waves of resident blocks */
#define MD__CEIL_SMEM_WORDS 4 /* shared words per thread in the atomic benchmark */

static double md__ceil_effort = 1.0;

void md_cuda_ceilings_set_effort(double effort) {
    if (!(effort >= 0.001)) effort = 0.001; /* also catches NaN */
    if (effort > 1.0) effort = 1.0;
    md__ceil_effort = effort;
}

/* Scale a work count by the effort, keep it >= lo and a multiple of mult. */
static long long md__ceil_scaled(long long full, long long lo, long long mult) {
    long long v = (long long)((double)full * md__ceil_effort);
    if (v < lo) v = lo;
    return (v + mult - 1) / mult * mult;
}

static void md__ceil_bench_desc(md_cuda_bench_desc *d, cudaStream_t stream) {
    memset(d, 0, sizeof *d);
    d->warmup = md__ceil_effort < 1.0 ? 1 : 2;
    d->reps = md__ceil_effort < 1.0 ? 3 : 9;
    d->keep_l2 = 1; /* the compute kernels touch almost no memory; the copy is 2 GiB */
    d->stream = stream;
}

/* Blocks of MD__CEIL_BLOCK threads for MD__CEIL_WAVES full waves of kernel k on this device
 * (below full effort: one block per SM, enough to run every line under a sanitizer). */
static md_status md__ceil_grid(const void *kernel, int *grid) {
    int dev = 0, sms = 0, per_sm = 0;
    MD_CUDA_TRY(cudaGetDevice(&dev));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MD_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, MD__CEIL_BLOCK, 0));
    if (per_sm < 1) per_sm = 1;
    *grid = md__ceil_effort < 1.0 ? sms : MD__CEIL_WAVES * per_sm * sms;
    return MD_OK;
}

/* One MUFU.RSQ. rsqrtf() is the same instruction when compiled with -ftz=true (or
 * -use_fast_math); without it nvcc wraps each MUFU.RSQ in a denormal guard (FSETP + two FMUL),
 * which would make this loop measure the guard, not the unit. */
static __device__ __forceinline__ float md__ceil_rsqrt_ftz(float x) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* x = rsqrt(x) + c stays in [c, c + 1/sqrt(c)] for c >= 1: no denormal, no overflow. */
__global__ void md__ceil_rsqrt_kernel(const float *__restrict__ in, float *__restrict__ out,
                                      int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float c = in[MD__CEIL_BLOCK], x[MD__CEIL_CHAINS], s = 0.0f;
    int it, k, u;
#pragma unroll
    for (k = 0; k < MD__CEIL_CHAINS; k++) x[k] = in[(threadIdx.x + k) % MD__CEIL_BLOCK];
    for (it = 0; it < iters; it += 4) {
#pragma unroll
        for (u = 0; u < 4; u++)
#pragma unroll
            for (k = 0; k < MD__CEIL_CHAINS; k++) x[k] = md__ceil_rsqrt_ftz(x[k]) + c;
    }
#pragma unroll
    for (k = 0; k < MD__CEIL_CHAINS; k++) s += x[k];
    out[i] = s;
}

/* x = fmaf(x, a, b) with 0 < a < 1 converges to b / (1 - a): finite for ever. */
__global__ void md__ceil_fma_kernel(const float *__restrict__ in, float *__restrict__ out,
                                    int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float a = in[MD__CEIL_BLOCK], b = in[MD__CEIL_BLOCK + 1], x[MD__CEIL_CHAINS], s = 0.0f;
    int it, k, u;
#pragma unroll
    for (k = 0; k < MD__CEIL_CHAINS; k++) x[k] = in[(threadIdx.x + k) % MD__CEIL_BLOCK];
    for (it = 0; it < iters; it += 16) {
#pragma unroll
        for (u = 0; u < 16; u++)
#pragma unroll
            for (k = 0; k < MD__CEIL_CHAINS; k++) x[k] = fmaf(x[k], a, b);
    }
#pragma unroll
    for (k = 0; k < MD__CEIL_CHAINS; k++) s += x[k];
    out[i] = s;
}

/* Lane t of a block owns words t, t + 256, t + 512, t + 768: a warp's 32 lanes hit 32
 * consecutive words, so 32 different banks, and no two threads share a word. */
__global__ void md__ceil_smem_atomic_kernel(const int *__restrict__ in, int *__restrict__ out,
                                            int iters) {
    __shared__ int words[MD__CEIL_SMEM_WORDS * MD__CEIL_BLOCK];
    int t = threadIdx.x, v = in[t], it, k, s = 0;
#pragma unroll
    for (k = 0; k < MD__CEIL_SMEM_WORDS; k++)
        words[k * MD__CEIL_BLOCK + t] = in[(t + k) % MD__CEIL_BLOCK];
    for (it = 0; it < iters; it += 2) {
#pragma unroll
        for (k = 0; k < 2 * MD__CEIL_SMEM_WORDS; k++)
            atomicAdd(&words[(k % MD__CEIL_SMEM_WORDS) * MD__CEIL_BLOCK + t], v + k);
    }
#pragma unroll
    for (k = 0; k < MD__CEIL_SMEM_WORDS; k++) s += words[k * MD__CEIL_BLOCK + t];
    out[blockIdx.x * blockDim.x + t] = s;
}

/* Grid-stride float4 copy, four loads in flight per thread before the four stores. */
__global__ void md__ceil_copy_kernel(const float4 *__restrict__ src, float4 *__restrict__ dst,
                                     size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        float4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void md__ceil_empty_kernel(void) {}

/* ---- compute-bound kernels: rsqrt, fma, shared atomics ---- */

typedef enum { MD__CEIL_RSQRT, MD__CEIL_FMA, MD__CEIL_SMEM_ATOMIC } md__ceil_kind;

typedef struct md__ceil_compute {
    md__ceil_kind kind;
    void *in, *out;
    int grid, iters;
} md__ceil_compute;

static md_status md__ceil_compute_run(void *ctx, cudaStream_t stream) {
    md__ceil_compute *c = (md__ceil_compute *)ctx;
    switch (c->kind) {
    case MD__CEIL_RSQRT:
        md__ceil_rsqrt_kernel<<<c->grid, MD__CEIL_BLOCK, 0, stream>>>((const float *)c->in,
                                                                      (float *)c->out, c->iters);
        MD_CUDA_TRY_LAUNCH("md__ceil_rsqrt_kernel");
        break;
    case MD__CEIL_FMA:
        md__ceil_fma_kernel<<<c->grid, MD__CEIL_BLOCK, 0, stream>>>((const float *)c->in,
                                                                    (float *)c->out, c->iters);
        MD_CUDA_TRY_LAUNCH("md__ceil_fma_kernel");
        break;
    case MD__CEIL_SMEM_ATOMIC:
        md__ceil_smem_atomic_kernel<<<c->grid, MD__CEIL_BLOCK, 0, stream>>>((const int *)c->in,
                                                                            (int *)c->out, c->iters);
        MD_CUDA_TRY_LAUNCH("md__ceil_smem_atomic_kernel");
        break;
    }
    return MD_OK;
}

/* Inputs: MD__CEIL_BLOCK starting values in [1, 2) (ints 1..256 for the atomics), then the
 * constants c = 1 (rsqrt) or a = 0.999, b = 0.001 (fma). Returns operations per second. */
static md_status md__ceil_compute_measure(md__ceil_kind kind, long long full_iters, double ops_per_iter,
                                          const char *fn, double *per_s) {
    md__ceil_compute c;
    md_cuda_bench_desc d;
    float hin[MD__CEIL_BLOCK + 2];
    int i;
    double t = 0.0;
    md_status st = MD_OK;
    cudaError_t e;
    if (!per_s) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "per_s", "is NULL");
    *per_s = NAN;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    for (i = 0; i < MD__CEIL_BLOCK; i++) {
        if (kind == MD__CEIL_SMEM_ATOMIC) {
            int v = i + 1;
            memcpy(&hin[i], &v, sizeof v);
        } else {
            hin[i] = 1.0f + (float)i / MD__CEIL_BLOCK;
        }
    }
    hin[MD__CEIL_BLOCK] = kind == MD__CEIL_FMA ? 0.999f : 1.0f;
    hin[MD__CEIL_BLOCK + 1] = 0.001f;
    st = md__ceil_grid(kind == MD__CEIL_RSQRT ? (const void *)md__ceil_rsqrt_kernel
                       : kind == MD__CEIL_FMA ? (const void *)md__ceil_fma_kernel
                                              : (const void *)md__ceil_smem_atomic_kernel,
                       &c.grid);
    if (st != MD_OK) return st;
    c.iters = (int)md__ceil_scaled(full_iters, 16, 16);
    if ((e = cudaMalloc(&c.in, sizeof hin)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMalloc(in)", __FILE__, __LINE__);
        goto done;
    }
    if ((e = cudaMalloc(&c.out, (size_t)c.grid * MD__CEIL_BLOCK * sizeof(float))) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMalloc(out)", __FILE__, __LINE__);
        goto done;
    }
    if ((e = cudaMemcpy(c.in, hin, sizeof hin, cudaMemcpyHostToDevice)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemcpy(in)", __FILE__, __LINE__);
        goto done;
    }
    md__ceil_bench_desc(&d, 0);
    if ((st = md_cuda_bench(md__ceil_compute_run, &c, &d, &t)) != MD_OK) goto done;
    if (!(t > 0.0)) {
        st = md_set_error(MD_ERR_CUDA, fn, 0, "time", "measured %g s for the kernel", t);
        goto done;
    }
    *per_s = (double)c.grid * MD__CEIL_BLOCK * (double)c.iters * ops_per_iter / t;
done:
    if (c.in) (void)cudaFree(c.in);
    if (c.out) (void)cudaFree(c.out);
    return st;
}

md_status md_cuda_ceiling_rsqrt(double *per_s) {
    /* 2048 iterations x 8 chains: about 4 ms on an H100 at 16 MUFU.RSQ per SM per clock */
    return md__ceil_compute_measure(MD__CEIL_RSQRT, 2048, MD__CEIL_CHAINS, "md_cuda_ceiling_rsqrt", per_s);
}

md_status md_cuda_ceiling_fma(double *per_s) {
    /* 8192 iterations x 8 chains: about 2 ms on an H100 at 128 FFMA per SM per clock */
    return md__ceil_compute_measure(MD__CEIL_FMA, 8192, MD__CEIL_CHAINS, "md_cuda_ceiling_fma", per_s);
}

md_status md_cuda_ceiling_smem_atomic(double *per_s) {
    /* 1024 iterations x 4 words per thread */
    return md__ceil_compute_measure(MD__CEIL_SMEM_ATOMIC, 1024, MD__CEIL_SMEM_WORDS,
                                    "md_cuda_ceiling_smem_atomic", per_s);
}

/* ---- DRAM ---- */

typedef struct md__ceil_copy {
    float4 *src, *dst;
    size_t n; /* float4 elements */
    int grid;
} md__ceil_copy;

static md_status md__ceil_copy_run(void *ctx, cudaStream_t stream) {
    md__ceil_copy *c = (md__ceil_copy *)ctx;
    md__ceil_copy_kernel<<<c->grid, MD__CEIL_BLOCK, 0, stream>>>(c->src, c->dst, c->n);
    MD_CUDA_TRY_LAUNCH("md__ceil_copy_kernel");
    return MD_OK;
}

static md_status md__ceil_memcpy_run(void *ctx, cudaStream_t stream) {
    md__ceil_copy *c = (md__ceil_copy *)ctx;
    MD_CUDA_TRY(cudaMemcpyAsync(c->dst, c->src, c->n * sizeof(float4), cudaMemcpyDeviceToDevice, stream));
    return MD_OK;
}

/* The kernel copy (and, if memcpy_bytes_per_s is not NULL, cudaMemcpyAsync of the same buffers). */
static md_status md__ceil_dram(double *bytes_per_s, double *memcpy_bytes_per_s) {
    const char *fn = "md_cuda_ceiling_dram";
    md__ceil_copy c;
    md_cuda_bench_desc d;
    size_t bytes;
    double t = 0.0;
    float probe[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    md_status st = MD_OK;
    cudaError_t e;
    if (!bytes_per_s) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "bytes_per_s", "is NULL");
    *bytes_per_s = NAN;
    if (memcpy_bytes_per_s) *memcpy_bytes_per_s = NAN;
    memset(&c, 0, sizeof c);
    /* 1 GiB each way at full effort (far beyond any L2), at least 16 MiB, at most a quarter
     * of the free memory each */
    bytes = (size_t)md__ceil_scaled(1LL << 30, 16LL << 20, 1LL << 20);
    {
        size_t free_b = 0, total_b = 0;
        MD_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
        while (bytes > ((size_t)16 << 20) && bytes > free_b / 4) bytes /= 2;
    }
    c.n = bytes / sizeof(float4);
    if ((st = md__ceil_grid((const void *)md__ceil_copy_kernel, &c.grid)) != MD_OK) return st;
    if ((e = cudaMalloc(&c.src, bytes)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMalloc(src)", __FILE__, __LINE__);
        goto done;
    }
    if ((e = cudaMalloc(&c.dst, bytes)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMalloc(dst)", __FILE__, __LINE__);
        goto done;
    }
    /* 0x3F bytes: every float is 0.747059... (finite, nonzero) */
    if ((e = cudaMemset(c.src, 0x3F, bytes)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemset(src)", __FILE__, __LINE__);
        goto done;
    }
    if ((e = cudaMemset(c.dst, 0xFF, bytes)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemset(dst)", __FILE__, __LINE__);
        goto done;
    }
    md__ceil_bench_desc(&d, 0);
    if ((st = md_cuda_bench(md__ceil_copy_run, &c, &d, &t)) != MD_OK) goto done;
    /* the copy must have happened: the last float4 of dst now holds src's bytes */
    if ((e = cudaMemcpy(probe, c.dst + c.n - 1, sizeof probe, cudaMemcpyDeviceToHost)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemcpy(probe)", __FILE__, __LINE__);
        goto done;
    }
    {
        unsigned char want[sizeof probe];
        memset(want, 0x3F, sizeof want);
        if (memcmp(probe, want, sizeof want) != 0 || !(t > 0.0)) {
            st = md_set_error(MD_ERR_CUDA, fn, 0, "dst", "the copy kernel did not copy (time %g s)", t);
            goto done;
        }
    }
    *bytes_per_s = 2.0 * (double)bytes / t;
    if (memcpy_bytes_per_s) {
        if ((st = md_cuda_bench(md__ceil_memcpy_run, &c, &d, &t)) != MD_OK) goto done;
        if (t > 0.0) *memcpy_bytes_per_s = 2.0 * (double)bytes / t;
    }
done:
    if (c.src) (void)cudaFree(c.src);
    if (c.dst) (void)cudaFree(c.dst);
    return st;
}

md_status md_cuda_ceiling_dram(double *bytes_per_s) { return md__ceil_dram(bytes_per_s, NULL); }

/* ---- launch and graph ---- */

typedef struct md__ceil_launch {
    int count;
    cudaGraphExec_t exec;
} md__ceil_launch;

static md_status md__ceil_launch_run(void *ctx, cudaStream_t stream) {
    md__ceil_launch *c = (md__ceil_launch *)ctx;
    int i;
    for (i = 0; i < c->count; i++) {
        md__ceil_empty_kernel<<<1, 1, 0, stream>>>();
        MD_CUDA_TRY_LAUNCH("md__ceil_empty_kernel");
    }
    return MD_OK;
}

static md_status md__ceil_graph_run(void *ctx, cudaStream_t stream) {
    md__ceil_launch *c = (md__ceil_launch *)ctx;
    MD_CUDA_TRY(cudaGraphLaunch(c->exec, stream));
    return MD_OK;
}

md_status md_cuda_ceiling_launch(double *launch_s, double *graph_node_s) {
    const char *fn = "md_cuda_ceiling_launch";
    md__ceil_launch c;
    md_cuda_bench_desc d;
    cudaStream_t stream = NULL;
    cudaGraph_t graph = NULL;
    double t = 0.0;
    md_status st = MD_OK;
    cudaError_t e;
    if (!launch_s || !graph_node_s)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "launch_s/graph_node_s", "is NULL");
    *launch_s = *graph_node_s = NAN;
    memset(&c, 0, sizeof c);
    c.count = (int)md__ceil_scaled(1000, 20, 10);
    /* a stream of its own: the legacy default stream cannot be captured */
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
        goto done;
    }
    md__ceil_bench_desc(&d, stream);
    if ((st = md_cuda_bench(md__ceil_launch_run, &c, &d, &t)) != MD_OK) goto done;
    *launch_s = t / c.count;

    if ((e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaStreamBeginCapture", __FILE__, __LINE__);
        goto done;
    }
    st = md__ceil_launch_run(&c, stream); /* records c.count kernel nodes */
    e = cudaStreamEndCapture(stream, &graph); /* always end the capture, even after a failure */
    if (st != MD_OK) goto done;
    if (e != cudaSuccess) {
        st = md_cuda_error(e, "cudaStreamEndCapture", __FILE__, __LINE__);
        goto done;
    }
    if ((e = cudaGraphInstantiate(&c.exec, graph, 0)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaGraphInstantiate", __FILE__, __LINE__);
        goto done;
    }
    if ((e = cudaGraphUpload(c.exec, stream)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaGraphUpload", __FILE__, __LINE__);
        goto done;
    }
    if ((st = md_cuda_bench(md__ceil_graph_run, &c, &d, &t)) != MD_OK) goto done;
    *graph_node_s = t / c.count;
done:
    if (c.exec) (void)cudaGraphExecDestroy(c.exec);
    if (graph) (void)cudaGraphDestroy(graph);
    if (stream) {
        (void)cudaStreamSynchronize(stream);
        (void)cudaStreamDestroy(stream);
    }
    return st;
}

/* ---- all of them ---- */

md_status md_cuda_measure_ceilings(md_cuda_ceilings *c) {
    md_cuda_ceilings r;
    md_cuda_device_info info;
    md_status first = MD_OK, st;
    char first_msg[512];
    int dev = 0;
    cudaError_t e;
    if (!c) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_measure_ceilings", 0, "c", "is NULL");
    memset(&r, 0, sizeof r);
    r.rsqrt_per_s = r.fma_per_s = r.dram_bytes_per_s = r.memcpy_bytes_per_s = NAN;
    r.smem_atomic_per_s = r.launch_s = r.graph_node_s = NAN;
    first_msg[0] = '\0';
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) {
        *c = r;
        return md_cuda_error(e, "cudaGetDevice", __FILE__, __LINE__);
    }
    if ((st = md_cuda_get_device_info(dev, &info)) != MD_OK) {
        *c = r;
        return st;
    }
    memcpy(r.device, info.name, sizeof r.device);
    r.device[sizeof r.device - 1] = '\0';
    r.sm_count = info.sm_count;
    r.clock_khz = info.clock_khz;
#define MD__CEIL_STEP(call)                                                                        \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != MD_OK && first == MD_OK) {                                                       \
            first = st;                                                                            \
            snprintf(first_msg, sizeof first_msg, "%s", md_last_error());                          \
        }                                                                                          \
    } while (0)
    MD__CEIL_STEP(md_cuda_ceiling_rsqrt(&r.rsqrt_per_s));
    MD__CEIL_STEP(md_cuda_ceiling_fma(&r.fma_per_s));
    MD__CEIL_STEP(md__ceil_dram(&r.dram_bytes_per_s, &r.memcpy_bytes_per_s));
    MD__CEIL_STEP(md_cuda_ceiling_smem_atomic(&r.smem_atomic_per_s));
    MD__CEIL_STEP(md_cuda_ceiling_launch(&r.launch_s, &r.graph_node_s));
#undef MD__CEIL_STEP
    *c = r;
    if (first != MD_OK) return md_set_error(first, "md_cuda_measure_ceilings", 0, NULL, "%s", first_msg);
    return MD_OK;
}

int md_cuda_ceilings_json(char *buf, size_t cap, const md_cuda_ceilings *c) {
    md__sb b;
    double per_clk = (c && c->sm_count > 0 && c->clock_khz > 0) ? (double)c->sm_count * c->clock_khz * 1e3 : NAN;
    if (!c) return -1;
    b.buf = buf;
    b.cap = buf ? cap : 0;
    b.len = 0;
    md__sb_printf(&b, "{\"schema\":\"md_ceilings/1\"");
    md__json_string(&b, "device", c->device);
    md__sb_printf(&b, ",\"sm_count\":%d", c->sm_count);
    md__json_number(&b, "clock_mhz", c->clock_khz > 0 ? c->clock_khz * 1e-3 : NAN);
    md__json_number(&b, "rsqrt_per_s", c->rsqrt_per_s);
    md__json_number(&b, "rsqrt_per_sm_clk", c->rsqrt_per_s / per_clk);
    md__json_number(&b, "fma_per_s", c->fma_per_s);
    md__json_number(&b, "fma_per_sm_clk", c->fma_per_s / per_clk);
    md__json_number(&b, "flop_per_s", 2.0 * c->fma_per_s);
    md__json_number(&b, "dram_bytes_per_s", c->dram_bytes_per_s);
    md__json_number(&b, "memcpy_bytes_per_s", c->memcpy_bytes_per_s);
    md__json_number(&b, "smem_atomic_per_s", c->smem_atomic_per_s);
    md__json_number(&b, "smem_atomic_per_sm_clk", c->smem_atomic_per_s / per_clk);
    md__json_number(&b, "launch_s", c->launch_s);
    md__json_number(&b, "graph_node_s", c->graph_node_s);
    md__sb_printf(&b, "}");
    return b.len > (size_t)INT_MAX ? INT_MAX : (int)b.len;
}

/* ---- dcs ---- */

/* @@dcs-gpu-implementation@@ */

/* ---- rdf ---- */

/* @@rdf-gpu-implementation@@ */

#endif /* MD_CUDA_IMPLEMENTATION_INCLUDED */
#endif /* MD_CUDA_IMPLEMENTATION */
