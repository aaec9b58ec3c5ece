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

/* @@ceilings-declarations@@ */

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
    strncpy(r.name, p.name, sizeof r.name - 1);
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

/* @@ceilings-implementation@@ */

/* ---- dcs ---- */

/* @@dcs-gpu-implementation@@ */

/* ---- rdf ---- */

/* @@rdf-gpu-implementation@@ */

#endif /* MD_CUDA_IMPLEMENTATION_INCLUDED */
#endif /* MD_CUDA_IMPLEMENTATION */
