/* md_cuda.cu.h - the GPU versions of md.h's kernels.                  v0.1
 *
 * USING IT
 *   In exactly one .cu file of your project:
 *       #define MD_IMPLEMENTATION
 *       #define MD_CUDA_IMPLEMENTATION
 *       #include "md_cuda.cu.h"      (it includes md.h)
 *   Build with nvcc -std=c++17 -arch=sm_90 (any sm_70 or newer works).
 *   Other .cu files include "md_cuda.cu.h" without the defines. md.h's
 *   implementation may live in a file of its own instead (a .c file, say):
 *   then this .cu file defines only MD_CUDA_IMPLEMENTATION
 *   (tests/gpu_split_tu.cu builds that way).
 *
 * API
 *   Same units, error model and rungs as md.h. A GPU function returns
 *   md_status; a failed CUDA call or launch returns MD_ERR_CUDA (no device:
 *   MD_ERR_NO_DEVICE) with md_last_error() naming the call, file and line.
 *   Every CUDA call and every launch is checked. md_cuda_available() says
 *   whether a device can be used, and why not.
 *
 * PLANS
 *   Every capability is a plan made once and used many times: create (buffers, its own
 *   non-blocking stream), upload, enqueue (launches only; capturable into a CUDA graph),
 *   sync (the one synchronisation point; device flags become an md_status), destroy.
 *   One-call wrappers (md_cuda_dcs, md_cuda_rdf_accumulate) are built on the plans.
 *   Section "plans" below states the convention.
 *
 * EXAMPLE
 *       if (!md_cuda_available()) { printf("no GPU: %s\n", md_last_error()); return 0; }
 *       md_cuda_dcs(MD_DCS_GPU_UNROLL8, sys.xyzq, sys.n, &grid);  (same contract as md_dcs)
 *
 *       md_cuda_dcs_plan p;                      (or: a plan, for many maps)
 *       if (md_cuda_dcs_plan_create(&p, MD_DCS_GPU_SHARED, sys.n, &grid) != MD_OK) return 1;
 *       for (int frame = 0; frame < nframes; frame++) {
 *           md_cuda_dcs_plan_upload(&p, frames[frame], sys.n);   (async, pinned staging)
 *           md_cuda_dcs_plan_enqueue(&p);                        (launches only)
 *           if (md_cuda_dcs_plan_sync(&p, &grid) != MD_OK) break; (waits; map into grid)
 *       }
 *       md_cuda_dcs_plan_destroy(&p);
 *
 * CONTENTS
 *   core      md_cuda_error, MD_CUDA_TRY, md_cuda_available, md_cuda_get_device_info,
 *             md_cuda_poison (NaN fill), md_cuda_rsqrt_mufu (one MUFU.RSQ);
 *             MD_CUDA_LAUNCH (every launch: checked and registered) and the kernel
 *             registry md_cuda_kernel_register/name/count/at
 *   plans     the plan convention (create / upload / enqueue / sync / destroy);
 *             md_cuda_queue (a plan's stream and device flags), md_cuda_flag_raise,
 *             md_cuda_alloc, md_cuda_alloc_pinned
 *   timing    md_cuda_timer_create/start/stop/destroy, md_cuda_bench (warm-up,
 *             L2 flush, median)
 *   ceilings  md_cuda_measure_ceilings, md_cuda_ceiling_rsqrt/fma/dram/
 *             smem_atomic/launch, md_cuda_ceilings_json: micro-benchmarks of the
 *             units that bound the kernels
 *   dcs       md_cuda_dcs_plan_create/set_split/upload/enqueue/sync/destroy, md_cuda_dcs
 *             (one call, host arrays), md_cuda_dcs_device (device arrays, no plan),
 *             md_cuda_dcs_out_count/out_dims, md_cuda_dcs_launch_shape,
 *             md_cuda_dcs_hybrid_splits, md_cuda_dcs_hybrid_device: direct Coulomb
 *             sum, the GPU rungs
 *   rdf       md_cuda_rdf_plan_create/enqueue/sync/destroy, md_cuda_rdf_accumulate (one
 *             frame, one call), md_cuda_rdf_plan_gather, md_cuda_rdf_geom_set,
 *             md_cuda_rdf_bin (the pair rule), md_cuda_rdf_max_bins: radial distribution
 *             functions, the GPU rungs
 *   nb        md_cuda_state (the MD state API: create/upload/zero/download/poll/destroy,
 *             md_cuda_energy_term), md_cuda_cell_list (GPU cell lists, CUB radix sort),
 *             md_cuda_nb_plan_create/enqueue/poll/grow/destroy (nonbonded forces: tiles,
 *             full and half Verlet lists, cluster pairs), md_cuda_vv_enqueue (NVE),
 *             md_cuda_hold_stream (timing one kernel of a queued batch)
 *   pme       md_cuda_pme_plan_create/destroy/set_spread/upload/enqueue/enqueue_own/
 *             sync/read, the stages md_cuda_pme_enqueue_spread/forward/solve/backward/
 *             gather, md_cuda_pme (one call), md_cuda_pme_locate, md_cuda_pme_bspline:
 *             particle-mesh Ewald with cuFFT, forces and energy added in 64-bit
 *             fixed point
 *   step      md_cuda_sim_create/enqueue/run/poll/download/get_system/checkpoint/
 *             restore/barostat/profile/destroy: the GPU-resident MD step (integrate +
 *             SETTLE/SHAKE + Langevin in one kernel, nonbonded and PME on two streams);
 *             md_cuda_bonded_plan: harmonic bonds and angles
 *   graph     md_cuda_graph_capture, md_cuda_graph_instantiate, md_cuda_graph_walk, the comparator registry
 *             (md_cuda_graph_register, MD_CUDA_GRAPH_RULES, md_cuda_graph_rules),
 *             md_cuda_graph_compare, md_cuda_graph_cache_capture/launch/destroy,
 *             md_cuda_graph_family, md_cuda_graph_kernel_diff, md_cuda_graph_exec_set_kernels,
 *             md_cuda_graph_kernel_node/_set (arguments set per launch), md_cuda_graph_add_child,
 *             md_cuda_graph_cond_handle/node/from_word, md_cuda_graph_loop, md_cuda_graph_run_if
 *             (IF and WHILE nodes decided on the device), md_cuda_timestamp_enqueue: CUDA graphs
 *             of enqueues (chapter 09)
 *   sched     md_cuda_sched_run (tasks run sequentially, on threads or as coroutines),
 *             md_cuda_task_begin/wait/barrier, md_cuda_sched_stats (GPU busy fraction
 *             from events, per-task counters that show starvation): many replicas on
 *             one GPU (chapter 10)
 *   mapped    md_cuda_mapped_alloc/free (pinned host memory with a device address),
 *             md_cuda_mapped_store/publish (device) and md_cuda_mapped_load (host),
 *             md_cuda_report_enqueue (the per-step report gathered into mapped memory):
 *             zero-copy reads (chapter 11)
 *   tiles     md_cuda_tiles_run (a dynamic tile scheduler over host workers bound to
 *             devices, with retry and retirement), md_cuda_dcs_tiles (a potential map in
 *             z-slabs), md_cuda_rdf_tiles (a multi-frame RDF in frame ranges, bitwise the
 *             one-worker result), md_cuda_energy_begin/end (joules, watts, SM clock from
 *             NVML, loaded at run time): many GPUs (chapter 12)
 */
#ifndef MD_CUDA_CU_H
#define MD_CUDA_CU_H

#include "md.h"
#include <cuda_runtime.h>
#include <atomic> /* MD_CUDA_LAUNCH_NAMED: the per-site registration check */
#include <utility> /* std::forward in md__launch_pdl */

/** @file md_cuda.cu.h
 *  @brief GPU versions of md.h's kernels (CUDA C, host API callable from C++). */

/* ======================================================================== */
/* core                                                                     */
/* ======================================================================== */

/** @brief Turn a CUDA error into md_status (MD_ERR_CUDA, or MD_ERR_NO_DEVICE when
 *  there is no usable device; its message then says "no NVIDIA driver / no GPU") with a
 *  message naming @p what, @p file and @p line. */
md_status md_cuda_error(cudaError_t err, const char *what, const char *file, int line);

/** @brief Evaluate a CUDA runtime call; on failure return its md_status from the
 *  enclosing function (which must return md_status). */
#define MD_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t md__e = (call);                                                                \
        if (md__e != cudaSuccess) return md_cuda_error(md__e, #call, __FILE__, __LINE__);          \
    } while (0)

/** @brief Check the last kernel launch (cudaGetLastError); on failure return from the
 *  enclosing function with MD_ERR_CUDA naming @p kernel (a string). For a launch made some
 *  other way than MD_CUDA_LAUNCH, which checks its own launch and is to be preferred. */
#define MD_CUDA_TRY_LAUNCH(kernel)                                                                 \
    do {                                                                                           \
        cudaError_t md__e = cudaGetLastError();                                                    \
        if (md__e != cudaSuccess)                                                                  \
            return md_cuda_error(md__e, "launch of " kernel, __FILE__, __LINE__);                  \
    } while (0)

/* ---- the kernel launch registry ---- */

/** @brief Launch @p kernel through the registry (see MD_CUDA_LAUNCH_NAMED), registering it
 *  under its own spelling (the stringized @p kernel). A template kernel goes in parentheses so its commas do not
 *  split the macro's arguments: MD_CUDA_LAUNCH((my_kernel<4, 2>), grid, block, 0, s, x, n).
 *  At least one kernel argument is required (C++17 variadic macros). */
#define MD_CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                                     \
    MD_CUDA_LAUNCH_NAMED(kernel, #kernel, grid, block, smem, stream, __VA_ARGS__)

/** @brief Launch @p kernel on @p grid x @p block threads with @p smem bytes of dynamic shared memory
 *  on @p stream, check the launch and register the kernel: the one way every kernel of
 *  md_cuda.cu.h is launched.
 *
 *  - registers {(const void *)kernel, name} in the process-wide kernel registry
 *    (md_cuda_kernel_register) the first time this launch site sees that kernel; @p name (a
 *    `const char *` expression, evaluated only then, copied by the registry) is what
 *    md_cuda_kernel_name() returns for it; template launchers pass a name with the template
 *    arguments written out;
 *  - launches it with the triple-chevron syntax (so a launch inside stream capture becomes a
 *    kernel node whose function pointer is the registered one);
 *  - checks the launch with cudaGetLastError() and, on failure, returns MD_ERR_CUDA from the
 *    enclosing function (which must return md_status) with a message naming @p name, the file
 *    and the line (md_cuda_launch_error).
 *  The check after registration costs one relaxed atomic load per launch. */
#define MD_CUDA_LAUNCH_NAMED(kernel, name, grid, block, smem, stream, ...)                         \
    MD__LAUNCH_SITE(kernel, name, 0, grid, block, smem, stream, __VA_ARGS__)

/** @cond */
/* The one launch site (MD_CUDA_LAUNCH_NAMED, MD__LAUNCH_PDL): @p pdl 1 launches with
 * programmatic dependent launch where md__pdl_enabled() allows it (see md__launch_pdl). */
#define MD__LAUNCH_SITE(kernel, name, pdl, grid, block, smem, stream, ...)                          \
    do {                                                                                           \
        static std::atomic<const void *> md__seen_(nullptr);                                      \
        const void *md__fn_ = (const void *)(kernel);                                              \
        cudaError_t md__le_;                                                                       \
        if (md__seen_.load(std::memory_order_relaxed) != md__fn_) {                                \
            (void)md_cuda_kernel_register(md__fn_, (name));                                        \
            md__seen_.store(md__fn_, std::memory_order_relaxed);                                   \
        }                                                                                          \
        if ((pdl) && md__pdl_enabled()) {                                                          \
            md__le_ = md__launch_pdl((kernel), dim3(grid), dim3(block), (size_t)(smem), (stream), __VA_ARGS__); \
        } else {                                                                                   \
            kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__); /* the one launch site */  \
            md__le_ = cudaGetLastError();                                                          \
        }                                                                                          \
        if (md__le_ != cudaSuccess) return md_cuda_launch_error(md__le_, md__fn_, __FILE__, __LINE__); \
    } while (0)

/* A kernel launched so must call md__pdl_wait() before its first access to global memory. */
#define MD__LAUNCH_PDL(kernel, grid, block, smem, stream, ...)                                     \
    MD__LAUNCH_SITE(kernel, #kernel, 1, grid, block, smem, stream, __VA_ARGS__)
/** @endcond */

/** @brief 1 (the default): PME's kernels (the spread rungs' kernels but the binned rungs' scan
 *  and scatter, the grid conversion, the solve and the gather; see md_cuda_pme_plan_enqueue)
 *  are launched with programmatic dependent launch on devices of compute capability 9.0 and
 *  later (the launch asks the current device's): a kernel's blocks may be scheduled while the
 *  kernel before it on the stream finishes, and each waits (griddepcontrol.wait) for that
 *  kernel's results before it reads or writes anything. The same kernels, the same bits; 0
 *  launches them the ordinary way. Measured on an H200 (tutorial 07, section 8): the
 *  forces-only evaluation 43.25 -> 42.5 us at 23,568 atoms and 96.95 -> 94.75 us at 95,766; the
 *  nonbonded step kernels launched so made chapter 08's step 5% slower at 95,766 atoms and
 *  are launched the ordinary way. */
#ifndef MD_CUDA_PDL
#define MD_CUDA_PDL 1
#endif

/** @cond */
/* Whether the current device takes programmatic dependent launch (compute capability >= 9.0;
 * cached per device ordinal) and MD_CUDA_PDL asks for it. */
static inline int md__pdl_enabled(void) {
#if MD_CUDA_PDL
    static std::atomic<int> cc[64]; /* 0 not asked yet, 1 no, 2 yes (static storage: zero) */
    int dev = 0, major = 0, v;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        (void)cudaGetLastError();
        return 0;
    }
    v = cc[dev].load(std::memory_order_relaxed);
    if (!v) {
        v = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 ? 2 : 1;
        (void)cudaGetLastError();
        cc[dev].store(v, std::memory_order_relaxed);
    }
    return v == 2;
#else
    return 0;
#endif
}

/* cudaLaunchKernelEx with cudaLaunchAttributeProgrammaticStreamSerialization: the kernel may
 * start while the stream's previous kernel finishes (in a capture, a programmatic edge). */
template <typename... E, typename... A>
static cudaError_t md__launch_pdl(void (*kernel)(E...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                  A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    cudaError_t e, l;
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...); /* the one programmatic launch */
    l = cudaGetLastError();
    return e != cudaSuccess ? e : l;
}

/* First statement of a kernel launched with MD__LAUNCH_PDL: wait until the stream's previous
 * kernel has finished and its writes are visible (a no-op when launched the ordinary way). */
static __device__ __forceinline__ void md__pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/** @endcond */

/** @brief Most kernels the registry holds (define before including, in the file with
 *  MD_CUDA_IMPLEMENTATION, to change it). A kernel past the limit still launches; it is just
 *  not registered (md_cuda_kernel_register returns -1). */
#ifndef MD_CUDA_KERNEL_REGISTRY_MAX
#define MD_CUDA_KERNEL_REGISTRY_MAX 1024
#endif
/** @brief Longest kernel name the registry keeps (longer names are cut, with the end kept
 *  NUL-terminated). */
#define MD_CUDA_KERNEL_NAME_MAX 160

/** @brief Register kernel @p func under @p name (copied) in the process-wide, thread-safe kernel
 *  registry; a function already registered keeps its first name. Returns its index (0, 1, ... in
 *  order of first registration), or -1 if @p func or @p name is NULL or the registry is full.
 *  MD_CUDA_LAUNCH calls it; call it yourself for a kernel launched another way (a library
 *  kernel, cudaLaunchCooperativeKernel). */
int md_cuda_kernel_register(const void *func, const char *name);

/** @brief Name of a registered kernel (the host function pointer a launch or a graph kernel
 *  node carries), or NULL if @p func was never registered. Chapter 09's graph comparator
 *  keys its rules by this table. */
const char *md_cuda_kernel_name(const void *func);

/** @brief Number of kernels registered so far. */
int md_cuda_kernel_count(void);

/** @brief Kernel @p i (0 <= i < md_cuda_kernel_count()) of the registry: its function pointer
 *  and name (either output may be NULL). Errors: @p i out of range (MD_ERR_RANGE). */
md_status md_cuda_kernel_at(int i, const void **func, const char **name);

/** @brief The md_status of a failed launch of @p func: MD_ERR_CUDA (or MD_ERR_NO_DEVICE) with
 *  the message of md_cuda_error() for "launch of <its registered name>". MD_CUDA_LAUNCH_NAMED
 *  calls it. */
md_status md_cuda_launch_error(cudaError_t err, const void *func, const char *file, int line);

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

/** @brief One MUFU.RSQ: the hardware's approximate 1/sqrt(x) (PTX rsqrt.approx.ftz.f32), with
 *  no denormal fix-up. rsqrtf() is the same instruction only under -ftz=true (or
 *  -use_fast_math); without it nvcc wraps each MUFU.RSQ in a denormal guard (FSETP + two
 *  FMUL). Every Coulomb rung uses it (each r^2 that reaches it is >= MD_DCS_MIN_R2 or is
 *  discarded by a select), and so does the MUFU ceiling benchmark, which would otherwise
 *  measure the guard, not the unit. */
static __device__ __forceinline__ float md_cuda_rsqrt_mufu(float x) {
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/** @brief Fill @p count floats at device pointer @p d_ptr with NaN (bytes 0xFF), so an
 *  element a kernel fails to write shows up in the check. */
md_status md_cuda_poison(float *d_ptr, size_t count, cudaStream_t stream);

/* ======================================================================== */
/* plans: the state every GPU capability keeps                              */
/* ======================================================================== */

/* THE PLAN CONVENTION. A GPU capability (the DCS and RDF here; nonbonded forces, PME and the
 * MD step later) is a plan object with five kinds of call:
 *
 *   md_cuda_X_plan_create(&p, ...)   once. Sized by a capacity: device buffers (md_cuda_alloc),
 *       pinned host buffers (md_cuda_alloc_pinned, cudaHostAlloc), kernel attributes, cuFFT
 *       plans, and the plan's md_cuda_queue: its own stream, made with
 *       cudaStreamCreateWithFlags(cudaStreamNonBlocking), and its device flags. It may
 *       synchronise. On failure everything made so far is released and the plan is zeroed.
 *   md_cuda_X_plan_upload(&p, ...)   (where inputs come from host arrays) host data is copied
 *       into a pinned staging buffer and from there by cudaMemcpyAsync on the plan's stream.
 *   md_cuda_X_plan_enqueue(&p, ...)  every step. Launches (MD_CUDA_LAUNCH), device-to-device
 *       copies and memsets on the plan's stream, and nothing else: no cudaMalloc or cudaFree,
 *       no synchronisation, no copy to or from pageable memory, no __constant__ upload, no
 *       attribute setting, no reading of results. Data that changes from call to call lives
 *       in device memory (the plan's buffers), so the arguments a stream capture records stay
 *       valid; what a plan takes as a kernel argument (a box, an atom count) is named in its
 *       documentation. A problem the device finds (a non-finite coordinate, an exceeded
 *       capacity) raises a flag (md_cuda_flag_raise) in the queue's flags word instead of
 *       failing the call. Host-side argument errors are returned at once.
 *   md_cuda_X_plan_sync(&p, ...)     the one synchronisation point. It enqueues the copies of
 *       results and of the flags word into pinned memory, waits for the plan's stream
 *       (md_cuda_queue_sync), turns a raised flag into an md_status, and only if all is well
 *       writes the caller's outputs. Any number of enqueues may come before one sync.
 *   md_cuda_X_plan_destroy(&p)       waits for the plan's stream, frees everything and zeroes
 *       the plan; safe on a zeroed plan.
 *
 * and md_cuda_X(...), the one-call wrapper for users who want one: create, upload, enqueue,
 * sync, destroy. A plan is used from one host thread at a time; different plans are
 * independent (different streams, buffers and flags) and may run concurrently. The one
 * exception is the constant-memory rungs of the DCS: __constant__ memory is process-global,
 * so one plan at a time may hold it (md_cuda_dcs_plan_create says how). */

/** @brief The device flags of a queue: what a kernel found wrong. Each flag has a detail word;
 *  md_cuda_flag_raise() combines the details of every raise so the result does not depend on
 *  thread order. */
typedef enum md_cuda_flag {
    MD_CUDA_FLAG_NONFINITE = 0, /**< a non-finite input value; detail: the smallest index at fault */
    MD_CUDA_FLAG_OVERFLOW,      /**< a capacity was exceeded; detail: the largest size needed */
    MD_CUDA_FLAG_RANGE,         /**< a value outside its valid range; detail: the smallest index at fault */
    MD_CUDA_FLAG_COUNT          /**< number of flags */
} md_cuda_flag;

/** @brief Words of a flags block: word 0 holds bit f for each raised flag f, word 1 + f the
 *  detail of flag f (0 while it is not raised). */
#define MD_CUDA_FLAG_WORDS (1 + MD_CUDA_FLAG_COUNT)

/** @brief Raise @p flag with @p detail in the flags block @p flags (MD_CUDA_FLAG_WORDS words in
 *  device memory, md_cuda_queue::d_flags), from device code. The detail kept is the smallest
 *  index (MD_CUDA_FLAG_NONFINITE, MD_CUDA_FLAG_RANGE; stored as ~index, so an atomicMax keeps
 *  it) or the largest size (MD_CUDA_FLAG_OVERFLOW) over all raises since the last sync. */
static __device__ __forceinline__ void md_cuda_flag_raise(unsigned long long *flags, md_cuda_flag flag,
                                                          unsigned long long detail) {
    atomicOr(&flags[0], 1ull << (int)flag);
    atomicMax(&flags[1 + (int)flag], flag == MD_CUDA_FLAG_OVERFLOW ? detail : ~detail);
}

/** @brief How md_cuda_queue_sync() words a raised flag: the field at fault and a printf format
 *  with one %llu (the detail: an index, or the size needed). A NULL member takes the default:
 *  field "input", "element %llu is not finite" (MD_CUDA_FLAG_NONFINITE); field "capacity",
 *  "exceeded: %llu needed" (MD_CUDA_FLAG_OVERFLOW); field "input", "element %llu is out of
 *  range" (MD_CUDA_FLAG_RANGE). */
typedef struct md_cuda_flag_text {
    const char *field;  /**< field named in the message */
    const char *format; /**< message, one %llu */
} md_cuda_flag_text;

/** @brief What every plan holds first: the device it was made on, its own stream and its
 *  device flags with their pinned mirror. */
typedef struct md_cuda_queue {
    int device;                  /**< device current when the queue was made; use the plan with it current */
    cudaStream_t stream;         /**< the plan's own stream (cudaStreamNonBlocking) */
    unsigned long long *d_flags; /**< MD_CUDA_FLAG_WORDS words of device memory, zero until a flag is raised */
    unsigned long long *h_flags; /**< pinned mirror of d_flags as of the last md_cuda_queue_sync() */
} md_cuda_queue;

/** @brief Make a queue on the current device: a non-blocking stream, a zeroed flags block and its
 *  pinned mirror. On failure @p q is zeroed. */
md_status md_cuda_queue_create(md_cuda_queue *q);

/** @brief Give @p q's stream the device's greatest scheduling priority (@p high 1) or the default
 *  (@p high 0): its kernels are then started first whenever kernels of lower-priority streams
 *  also wait for SMs (cudaStreamCreateWithPriority). Waits for the queue's work, then replaces
 *  its stream: call it before anything keeps the old handle (a cuFFT plan, a capture). On error
 *  @p q is unchanged. */
md_status md_cuda_queue_prioritize(md_cuda_queue *q, int high);

/** @brief The synchronisation point of a plan: enqueue the copy of the flags block into pinned
 *  memory, wait for the stream, and turn a raised flag into MD_ERR_RANGE with a message naming
 *  @p where, the field and the detail (@p text: MD_CUDA_FLAG_COUNT entries, or NULL for the
 *  defaults; the first raised flag in enum order is reported). Raised flags are then cleared
 *  (an enqueued memset), so the next batch starts clean. Returns the stream's own error if the
 *  work failed. */
md_status md_cuda_queue_sync(md_cuda_queue *q, const char *where, const md_cuda_flag_text *text);

/** @brief 1 if @p flag was raised in the batch the last md_cuda_queue_sync() checked, with its
 *  detail in @p detail (may be NULL): the index, or the size needed. 0 otherwise. */
int md_cuda_queue_flag(const md_cuda_queue *q, md_cuda_flag flag, unsigned long long *detail);

/** @brief Wait for the queue's stream, then destroy it and free the flags; safe on a zeroed
 *  queue. */
void md_cuda_queue_destroy(md_cuda_queue *q);

/** @brief cudaMalloc of @p count * @p size bytes (the product checked for overflow) into @p *d;
 *  a failure names @p what and the size. For a plan's create. */
md_status md_cuda_alloc(void **d, size_t count, size_t size, const char *what);

/** @brief cudaHostAlloc (pinned, cudaHostAllocDefault) of @p count * @p size bytes into @p *h;
 *  a failure names @p what and the size. For a plan's create. */
md_status md_cuda_alloc_pinned(void **h, size_t count, size_t size, const char *what);

/** @brief cudaFree, ignoring NULL; for teardown (an error is not reported). */
void md_cuda_free(void *d);

/** @brief cudaFreeHost, ignoring NULL; for teardown (an error is not reported). */
void md_cuda_free_pinned(void *h);

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

/* The GPU rungs of the direct Coulomb sum (md.h's md_dcs_variant), slow to fast. Each is a
 * kernel, a launcher and a case of one dispatcher (md__dcs_run), which a plan's enqueue and
 * md_cuda_dcs_device() call:
 *   MD_DCS_GPU_SCATTER  md__dcs_scatter_kernel   thread per atom, atomicAdd into every point
 *   MD_DCS_GPU_GATHER   md__dcs_gather_kernel    thread per point, atoms from global memory
 *   MD_DCS_GPU_CONST    md__dcs_const_kernel     gather, atoms in __constant__ chunks
 *   MD_DCS_GPU_UNROLL4    md__dcs_unroll_kernel<MD__DCS_UNROLL4>    4 points per thread
 *   MD_DCS_GPU_UNROLL8    md__dcs_unroll_kernel<MD__DCS_UNROLL8>    8 points, padded output
 *   MD_DCS_GPU_UNROLL8X2  md__dcs_unroll_kernel<MD__DCS_UNROLL8X2>  8 points in each of 2 rows
 *   MD_DCS_GPU_L1         md__dcs_unroll_kernel<MD__DCS_L1>         8 x 2, atoms via __ldg
 *   MD_DCS_GPU_SHARED     md__dcs_unroll_kernel<MD__DCS_SHARED>     8 x 2, atom tiles in shared memory
 *   MD_DCS_GPU_HYBRID     md__dcs_unroll_kernel<MD__DCS_HYBRID(S)>  8 x 4, S of 64 rsqrts by md_soft_rsqrtf
 * Run one: build/chapters/02_scatter_gather, 03_coalesced_unrolled, 04_shared_memory;
 * check all: build/tests/gpu_dcs. Work is counted in atom-evals (atoms x grid points). */

/** @brief Atoms per constant-memory chunk of the constant-memory rungs: 3072 float4 =
 *  48 KB of the 64 KB of __constant__ memory a program may declare, leaving 16 KB (1024
 *  atoms) for a program's own kernels (the chapters' exercises). More atoms run chunk after
 *  chunk, each launch adding into the output. */
#define MD_DCS_CONST_CHUNK 3072

/** @brief Threads of a block of the unrolled rungs along x (the spacing between a thread's
 *  points) and along y. */
#define MD_DCS_BLOCK_X 16
/** @copydoc MD_DCS_BLOCK_X */
#define MD_DCS_BLOCK_Y 8

/** @brief Atoms staged per shared-memory tile (MD_DCS_GPU_SHARED): one per thread of a block. */
#define MD_DCS_SHARED_TILE (MD_DCS_BLOCK_X * MD_DCS_BLOCK_Y)

#include <string.h> /* memcpy in md_soft_rsqrtf's host path */

#ifndef MD_DCS_HYBRID_SOFT
/** @brief MD_DCS_GPU_HYBRID computes MD_DCS_HYBRID_SOFT of every 64 inverse square roots in
 *  software (md_soft_rsqrtf, FMA pipe) and the rest with MUFU rsqrt. A thread of the hybrid
 *  kernel takes two atoms at a time on its 8 x 4 points: 64 atom-evals, of which a fixed mask
 *  chooses the software ones. One of md_cuda_dcs_hybrid_splits() (8, 16, 19 or 24); define it
 *  before including to choose another. The default, 19 (30%), was the fastest split measured
 *  on an H100 (tutorials/04_shared_memory.md, bench/hybrid_masks.cu). */
#define MD_DCS_HYBRID_SOFT 19
#endif

/** @brief Software reciprocal square root on the FMA pipe, for normal positive @p x
 *  (every r^2 the hybrid kernel keeps, MD_DCS_MIN_R2 and up).
 *
 *  A bit-level initial guess y0 = bits(M - ceil(bits(x) / 2)) with the magic constant
 *  M = 0x5F2FF000 (IADD3 and SHF.R on the integer pipe), then one fifth-order Householder step with minimax
 *  coefficients: with t = x y0^2 (which lies in [0.8745, 0.9918] for every float),
 *  1/sqrt(x) = y0 t^(-1/2) ~ y0 (1 + P(t - tc)), P a degree-4 polynomial fitted to
 *  t^(-1/2) - 1 over that interval (tutorials/scripts/soft_rsqrt_design.py derives M, tc and
 *  the coefficients; approximation error 1.5e-8). The final FMA y0 + y0 P rounds once.
 *  Cost: 2 integer + 7 FP32 instructions, no MUFU.
 *  Max relative error over every float in [MD_DCS_MIN_R2, 1e6]: 9.10e-8 (1.53 x 2^-24; MUFU.RSQ
 *  is specified to 2 ulp), checked by tests/gpu_dcs.cu on the CPU; the device build is
 *  checked bit for bit against the host build. */
static inline __host__ __device__ float md_soft_rsqrtf(float x) {
    unsigned int b;
    float y, w, u, p;
#ifdef __CUDA_ARCH__
    b = __float_as_uint(x);
#else
    memcpy(&b, &x, sizeof b);
#endif
    b = (0xBE5FE000u - b) >> 1; /* M - ceil(bits(x) / 2), M = 0x5F2FF000 */
#ifdef __CUDA_ARCH__
    y = __uint_as_float(b);
#else
    memcpy(&y, &b, sizeof y);
#endif
    w = x * y;
    u = fmaf(w, y, -9.331159592e-01f); /* t - tc */
    p = fmaf(fmaf(fmaf(fmaf(3.751776516e-01f, u, -3.997197151e-01f), u, 4.458512664e-01f), u,
                  -5.547094345e-01f), u, 3.521889821e-02f);
    return fmaf(y, p, y);
}

/** @brief A DCS plan: one rung, a capacity in atoms and a grid geometry, made once; atoms
 *  uploaded, maps computed and brought back as often as wanted (the plan convention, section
 *  "plans").
 *
 *  The constant-memory rungs (MD_DCS_GPU_CONST, _UNROLL4, _UNROLL8, _UNROLL8X2, _HYBRID) read
 *  their atoms from one __constant__ buffer of MD_DCS_CONST_CHUNK atoms. __constant__ memory is
 *  process-global, so a plan of such a rung holds the buffer from create to destroy, and while it
 *  does, a second such plan (or md_cuda_dcs / md_cuda_dcs_device of such a rung) is refused with
 *  MD_ERR_UNSUPPORTED. With at most MD_DCS_CONST_CHUNK atoms, the upload also copies them into the
 *  buffer and the enqueue only launches. With more, the enqueue copies chunk after chunk into the
 *  buffer (device to device, in stream order) before each chunk's launch: the one documented
 *  exception to "no __constant__ upload in an enqueue", safe because the plan holds the buffer.
 *  Every other rung may have any number of plans at once. */
typedef struct md_cuda_dcs_plan {
    md_dcs_variant variant;         /**< the GPU rung */
    int soft;                       /**< MD_DCS_GPU_HYBRID: software rsqrts of every 64 (md_cuda_dcs_plan_set_split) */
    int capacity;                   /**< most atoms an upload may bring */
    int n;                          /**< atoms of the last upload (0 before the first) */
    md_grid geometry;               /**< dimensions, origin and spacing of the map (data is NULL) */
    int out_dims[3];                /**< dimensions of d_out (padded for some rungs; md_cuda_dcs_out_dims) */
    size_t out_count;               /**< floats in d_out */
    md_cuda_queue queue;            /**< the plan's stream and flags */
    md_float4 *d_xyzq;              /**< capacity atoms on the device */
    md_float4 *h_stage;             /**< pinned staging buffer of the upload, capacity atoms */
    float *d_out;                   /**< the (padded) map on the device, out_count floats */
    float *h_out;                   /**< pinned, md_grid_count(geometry) floats: the cropped map of the last sync */
    cudaEvent_t staged;             /**< recorded after an upload's copy: h_stage is free once it completes */
    unsigned long long const_claim; /**< nonzero while the plan holds the __constant__ atom buffer */
    int const_resident;             /**< 1 if the upload put every atom in the __constant__ buffer */
} md_cuda_dcs_plan;

/** @brief Make a plan for GPU rung @p variant, up to @p capacity atoms, on the grid shaped like
 *  @p geometry (its dimensions, origin and spacing; data is not read). Allocates the atoms, the
 *  (padded) map, a pinned staging buffer and a pinned map, and the plan's queue; claims the
 *  __constant__ buffer for a constant-memory rung. Errors: a CPU rung, capacity < 1, a bad
 *  geometry (MD_ERR_INVALID_ARGUMENT); the constant buffer held by another plan
 *  (MD_ERR_UNSUPPORTED, naming the rungs that do not need it); CUDA errors. On failure @p p is
 *  zeroed. */
md_status md_cuda_dcs_plan_create(md_cuda_dcs_plan *p, md_dcs_variant variant, int capacity,
                                  const md_grid *geometry);

/** @brief Choose the hybrid split of an MD_DCS_GPU_HYBRID plan: @p soft of every 64 atom-evals
 *  of a thread get their rsqrt from md_soft_rsqrtf(), the rest from MUFU rsqrt; @p soft must be
 *  one of md_cuda_dcs_hybrid_splits() (the default is MD_DCS_HYBRID_SOFT). Host only. */
md_status md_cuda_dcs_plan_set_split(md_cuda_dcs_plan *p, int soft);

/** @brief Bring @p n atoms (host array: x, y, z in nm, q in e) into the plan: copied into the
 *  pinned staging buffer, then by cudaMemcpyAsync on the plan's stream. Returns before the copy
 *  is done; it waits only for the previous upload's copy to have left the staging buffer. The
 *  enqueues after it see these atoms. Errors: NULL, n < 1 (MD_ERR_INVALID_ARGUMENT), n above
 *  the capacity (MD_ERR_RANGE, field n), CUDA errors. A graph captured from an enqueue stays
 *  valid across uploads of the same n (the atom count is a kernel argument). */
md_status md_cuda_dcs_plan_upload(md_cuda_dcs_plan *p, const md_float4 *xyzq, int n);

/** @brief Enqueue the rung on the plan's stream: launches only (and, for a constant-memory rung
 *  with more than MD_DCS_CONST_CHUNK atoms, the chunk copies described at md_cuda_dcs_plan).
 *  Every element of d_out is written. Errors: no upload yet (MD_ERR_INVALID_ARGUMENT), a failed
 *  launch. */
md_status md_cuda_dcs_plan_enqueue(md_cuda_dcs_plan *p);

/** @brief The synchronisation point: wait for every enqueue so far and, if @p grid is not NULL,
 *  copy the map (cropped to the grid) into grid->data, which must have the plan's dimensions.
 *  grid->data is written only after everything succeeded. */
md_status md_cuda_dcs_plan_sync(md_cuda_dcs_plan *p, md_grid *grid);

/** @brief Wait for the plan's stream, free everything, give back the __constant__ buffer, zero
 *  the plan. Safe on a zeroed plan. */
void md_cuda_dcs_plan_destroy(md_cuda_dcs_plan *p);

/** @brief Compute the potential map (kJ mol^-1 e^-1) of @p n charges @p xyzq (host array,
 *  x, y, z in nm and q in e) on every point of @p grid with the GPU rung @p variant,
 *  overwriting grid->data: the same contract as md_dcs().
 *
 *  The one-call wrapper of the plan: md_cuda_dcs_plan_create (capacity n), _upload, the map
 *  filled with NaN (md_cuda_poison) so an element a rung failed to write comes back as NaN,
 *  _enqueue, _sync, _destroy. grid->data is written only after everything succeeded. Errors: a
 *  CPU rung or unknown variant, NULL pointers, n < 1, a grid without data
 *  (MD_ERR_INVALID_ARGUMENT); a constant-memory rung while a plan holds the constant buffer
 *  (MD_ERR_UNSUPPORTED); no device (MD_ERR_NO_DEVICE); a failed CUDA call (MD_ERR_CUDA). */
md_status md_cuda_dcs(md_dcs_variant variant, const md_float4 *xyzq, int n, md_grid *grid);

/** @brief Number of floats md_cuda_dcs_device() writes for @p variant on a grid shaped like
 *  @p geometry: md_grid_count(geometry), or more for a rung that pads the grid to whole tiles
 *  (MD_DCS_GPU_UNROLL8, _UNROLL8X2, _L1, _SHARED, _HYBRID). The padded layout is x fastest with
 *  md_cuda_dcs_out_dims() points per row and rows per plane. 0 for a bad argument. */
size_t md_cuda_dcs_out_count(md_dcs_variant variant, const md_grid *geometry);

/** @brief Dimensions of the (possibly padded) output of @p variant on @p geometry: point
 *  (i, j, k) of the grid is at d_out[((size_t)k * dims[1] + j) * dims[0] + i]. */
md_status md_cuda_dcs_out_dims(md_dcs_variant variant, const md_grid *geometry, int dims[3]);

/** @brief DCS on device arrays without a plan: @p d_xyzq holds @p n atoms on the device, @p d_out
 *  md_cuda_dcs_out_count(variant, geometry) floats; enqueue the rung on @p stream. Only the
 *  dimensions, origin and spacing of @p geometry are read. Every element of the (padded) output
 *  is written. A rung without constant memory only launches. A constant-memory rung claims the
 *  __constant__ buffer for the call (MD_ERR_UNSUPPORTED if a plan holds it), copies the chunks
 *  in, launches, and waits for @p stream before giving the buffer back, so it synchronises and
 *  cannot be captured: for repeated or captured work, make a plan. */
md_status md_cuda_dcs_device(md_dcs_variant variant, const md_float4 *d_xyzq, int n,
                             const md_grid *geometry, float *d_out, cudaStream_t stream);

/** @brief Launch shape of the main kernel of @p variant on @p geometry: @p blocks is the number
 *  of thread blocks one launch runs, @p blocks_per_wave how many of them device 0 holds at once
 *  (resident blocks per SM, from the occupancy calculator, times the SM count). A launch takes
 *  ceil(blocks / blocks_per_wave) waves; the last one may leave SMs idle (wave quantization). */
md_status md_cuda_dcs_launch_shape(md_dcs_variant variant, const md_grid *geometry, long long *blocks,
                                   int *blocks_per_wave);

/** @brief The hybrid splits compiled in (how many of every 64 atom-evals of a thread get their
 *  rsqrt in software): writes up to @p cap of them to @p splits and returns how many there are. */
int md_cuda_dcs_hybrid_splits(int *splits, int cap);

/** @brief md_cuda_dcs_device() of the hybrid rung with a chosen split: @p soft of every 64
 *  atom-evals of a thread get their rsqrt from md_soft_rsqrtf(), the rest from MUFU rsqrt.
 *  @p soft must be one of md_cuda_dcs_hybrid_splits(); the output is shaped as for
 *  MD_DCS_GPU_HYBRID. Like md_cuda_dcs_device() for a constant-memory rung, it claims the
 *  __constant__ buffer for the call and waits for @p stream; a plan with
 *  md_cuda_dcs_plan_set_split() does the same without waiting. */
md_status md_cuda_dcs_hybrid_device(int soft, const md_float4 *d_xyzq, int n,
                                    const md_grid *geometry, float *d_out, cudaStream_t stream);

/* ======================================================================== */
/* rdf                                                                      */
/* ======================================================================== */

/** @brief Threads per block of the RDF kernels (one A atom per thread). */
#define MD_CUDA_RDF_BLOCK 256
/** @brief B atoms per tile: one block pairs its MD_CUDA_RDF_BLOCK A atoms with one tile. */
#define MD_CUDA_RDF_TILE 1024
/** @brief Most pairs one launch may count: every 32-bit counter of a launch stays below
 *  2^32 because no counter can exceed the number of pairs the launch visits. */
#define MD_CUDA_RDF_MAX_LAUNCH_PAIRS 4294967295ULL

/** @brief Options of the GPU RDF; a zero field takes its default. */
typedef struct md_cuda_rdf_opts {
    unsigned long long max_pairs_per_launch; /**< split launches so none visits more pairs (default and
                                                  upper limit MD_CUDA_RDF_MAX_LAUNCH_PAIRS); tests lower it */
    int max_bins_per_pass;                   /**< MD_RDF_GPU_PASSES: bins per pass (default: as many as one
                                                  block's shared memory holds); tests lower it */
} md_cuda_rdf_opts;

/** @brief The float geometry of one frame, exactly as md.h's CPU rungs compute it from the box
 *  and the accumulator (md_cuda_rdf_geom_set); md_cuda_rdf_bin() is the pair rule on it. */
typedef struct md_cuda_rdf_geom {
    float L[3];  /**< box edges, (float)box[d] */
    float iL[3]; /**< (float)(1 / box[d]) */
    float rmax2; /**< (float)(rmax^2) */
    float inv_w; /**< (float)(nbins / rmax): bins per nm */
    int nbins;   /**< bins */
} md_cuda_rdf_geom;

/** @brief Fill @p g for a frame in @p box (nm) counted into an accumulator shaped like @p r.
 *  Errors: box edges below 2 rmax (MD_ERR_RANGE, field box, md_rdf_check_box), NULLs. */
md_status md_cuda_rdf_geom_set(md_cuda_rdf_geom *g, const md_rdf *r, const double box[3]);

/** @brief The pair rule of every RDF rung: the bin of the pair (@p a, @p b) of wrapped positions
 *  (x, y, z of float4s that md_cuda_rdf_plan_gather() wrote), or -1 when r^2 >= rmax^2. The
 *  same float operations as md.h's CPU rungs, each explicitly rounded (__fsub_rn, __fmaf_rn,
 *  ...) so no compiler flag can change a bin: that is what makes the GPU counts equal the CPU
 *  counts exactly. */
static __device__ __forceinline__ int md_cuda_rdf_bin(const md_cuda_rdf_geom *g, float4 a, float4 b) {
    const float ex = __fsub_rn(b.x, a.x), ey = __fsub_rn(b.y, a.y), ez = __fsub_rn(b.z, a.z);
    /* the minimum image: min(|d|, L - |d|), one FADD and one FMNMX */
    const float dx = fminf(fabsf(ex), __fsub_rn(g->L[0], fabsf(ex)));
    const float dy = fminf(fabsf(ey), __fsub_rn(g->L[1], fabsf(ey)));
    const float dz = fminf(fabsf(ez), __fsub_rn(g->L[2], fabsf(ez)));
    const float r2 = __fmaf_rn(dx, dx, __fmaf_rn(dy, dy, __fmul_rn(dz, dz)));
    int k;
    if (!(r2 < g->rmax2)) return -1; /* out of range: no square root */
    k = (int)__fmul_rn(__fsqrt_rn(r2), g->inv_w);
    return k < g->nbins ? k : g->nbins - 1;
}

/** @brief A GPU RDF plan (the plan convention, section "plans"): selections uploaded and
 *  buffers made once; frames enqueued without any synchronisation; 64-bit totals kept on the
 *  device across frames until md_cuda_rdf_plan_sync() brings them back.
 *
 *  Each enqueued frame gathers the selected positions (wrapped into the box, the atom index in
 *  .w; a non-finite coordinate raises MD_CUDA_FLAG_NONFINITE with the atom's index), counts
 *  pairs in launches of at most md_cuda_rdf_opts::max_pairs_per_launch pairs into a 32-bit
 *  histogram, and adds each launch's histogram into the 64-bit totals. Kernel arguments: the
 *  frame's float geometry (from its box) and the device pointer of its positions; everything
 *  else is the plan's buffers. Each enqueue also records its frame's box on the host (the
 *  normalisation the sync adds), so an RDF enqueue is not one to capture into a CUDA graph: a
 *  replay would add counts no sync knows the frame of. */
typedef struct md_cuda_rdf_plan {
    int natoms;                /**< atoms per frame */
    int na;                    /**< atoms in selection A */
    int nb;                    /**< atoms in selection B (na when A = B) */
    int same;                  /**< 1 if A = B (unordered pairs i < j) */
    int nbins;                 /**< bins (must equal md_rdf::nbins of the accumulator) */
    double pairs;              /**< pairs counted per frame (md_rdf_selection_pairs) */
    double centers;            /**< centres per frame (md_rdf_selection_pairs) */
    md_cuda_queue queue;       /**< the plan's stream and flags */
    int *d_sel_a;              /**< selection A on the device */
    int *d_sel_b;              /**< selection B on the device (NULL when A = B) */
    md_float4 *d_a;            /**< gathered, wrapped positions of A (.w: atom index bits) */
    md_float4 *d_b;            /**< gathered, wrapped positions of B (== d_a when A = B) */
    unsigned int *d_h32;       /**< 32-bit histogram of one launch */
    unsigned long long *d_h64; /**< 64-bit totals of the frames enqueued since the last sync */
    unsigned long long *h_h64; /**< pinned copy of d_h64, written by md_cuda_rdf_plan_sync */
    int max_bins_shared;       /**< most bins MD_RDF_GPU_SHARED holds in one block's shared memory */
    int max_bins_warp;         /**< most bins MD_RDF_GPU_WARP holds */
    md_cuda_rdf_opts opts;     /**< options (defaults filled in) */
    long long pending;         /**< frames enqueued since the last sync */
    double rmax;               /**< rmax of those frames' accumulator */
    double *boxes;             /**< their boxes, 3 doubles each (host memory, grown as needed) */
    long long boxes_cap;       /**< frames md_cuda_rdf_plan::boxes holds */
    long long launches;        /**< counting launches of the last enqueued frame (the overflow tests read it) */
    int passes;                /**< bin-range passes per launch of the last enqueued frame */
    void *cell;                /**< MD_RDF_GPU_CELL's buffers (cell lists of A and B), made by create */
} md_cuda_rdf_plan;

/** @brief Make a plan for frames of @p natoms atoms, selections A (@p sel_a, @p na) and B
 *  (@p sel_b, @p nb; host arrays, same rules as md_rdf_selection_pairs()) and @p nbins bins.
 *  @p opts may be NULL. Uploads the selections, allocates the buffers, sets the counting
 *  kernels' shared-memory attribute, makes the plan's queue. Errors: those of
 *  md_rdf_selection_pairs(), nbins outside 1..2^26 or nb above 65535 * MD_CUDA_RDF_TILE
 *  (MD_ERR_RANGE), CUDA errors. On failure @p p is zeroed. */
md_status md_cuda_rdf_plan_create(md_cuda_rdf_plan *p, int natoms, const int *sel_a, int na, const int *sel_b,
                                  int nb, int nbins, const md_cuda_rdf_opts *opts);

/** @brief Wait for the plan's stream, release its device, pinned and host buffers, zero it
 *  (safe on a zeroed plan). Frames enqueued and not synced are dropped. */
void md_cuda_rdf_plan_destroy(md_cuda_rdf_plan *p);

/** @brief Most bins a GPU rung can hold in one block's shared memory on the current device
 *  (MD_RDF_GPU_GLOBAL and MD_RDF_GPU_PASSES: no limit, INT_MAX). */
md_status md_cuda_rdf_max_bins(md_rdf_variant variant, int *max_bins);

/** @brief Enqueue one frame with GPU rung @p variant: @p d_xyz holds the frame's p->natoms
 *  positions on the device, @p box its orthorhombic box (nm); @p r (read only: rmax, nbins) is
 *  the accumulator the frame will be added to at the next md_cuda_rdf_plan_sync().
 *
 *  No synchronisation: the counts stay in the plan's 64-bit device totals. Host-side errors are
 *  returned at once and enqueue nothing: a CPU rung (MD_ERR_UNSUPPORTED), r->nbins != p->nbins
 *  or an rmax other than that of the frames already enqueued since the last sync
 *  (MD_ERR_INVALID_ARGUMENT), box edges below 2 rmax (MD_ERR_RANGE, field box),
 *  MD_RDF_GPU_SHARED / MD_RDF_GPU_WARP with more bins than shared memory holds
 *  (MD_ERR_UNSUPPORTED, field nbins: use MD_RDF_GPU_PASSES). A non-finite coordinate is found
 *  on the device and reported by the sync. */
md_status md_cuda_rdf_plan_enqueue(md_rdf_variant variant, md_cuda_rdf_plan *p, const md_rdf *r,
                                   const md_float4 *d_xyz, const double box[3]);

/** @brief The synchronisation point: wait for every frame enqueued since the last sync, then
 *  add their counts and their normalisation (md_rdf_add_frame, frame by frame, in order) to
 *  @p r. The counts equal md_rdf_accumulate()'s exactly (same float operations), frame for
 *  frame. Errors: @p r not shaped as the frames' accumulator (MD_ERR_INVALID_ARGUMENT); a
 *  non-finite coordinate in any of the frames (MD_ERR_RANGE, field xyz, naming the smallest
 *  such atom index); CUDA errors. On failure @p r is untouched and the frames are dropped. With
 *  nothing enqueued it only waits. */
md_status md_cuda_rdf_plan_sync(md_cuda_rdf_plan *p, md_rdf *r);

/** @brief One frame, one call: md_cuda_rdf_plan_enqueue() then md_cuda_rdf_plan_sync(), so it
 *  blocks until the counts are in @p r. Errors: those two functions'; on failure @p r is
 *  untouched. For many frames, enqueue them and sync once. */
md_status md_cuda_rdf_accumulate(md_rdf_variant variant, md_cuda_rdf_plan *p, md_rdf *r,
                                 const md_float4 *d_xyz, const double box[3]);

/** @brief The first step of an enqueue alone, for a counting kernel of one's own (chapter 05's
 *  exercise): gather the frame's selected positions, wrapped into @p box, into p->d_a and p->d_b
 *  on the plan's stream, and write the frame's geometry to @p g. Adds nothing to the totals.
 *  Errors: as md_cuda_rdf_plan_enqueue()'s for the box and the accumulator. */
md_status md_cuda_rdf_plan_gather(md_cuda_rdf_plan *p, const md_rdf *r, const md_float4 *d_xyz,
                                  const double box[3], md_cuda_rdf_geom *g);

/* ======================================================================== */
/* nb: the MD state, GPU cell lists, nonbonded forces, velocity Verlet      */
/* ======================================================================== */

/* THE MD STATE AND THE NONBONDED LADDER (chapter 06; chapters 07-10 build on the state).
 *
 * md_cuda_state holds one system on the device, made once with a capacity in atoms:
 *   d_xyzq        float4 (x, y, z nm, q e) per atom, in the state's INTERNAL order;
 *   d_vel_invmass float4 (vx, vy, vz nm/ps, 1/m 1/amu);
 *   d_type        LJ type per atom;  d_order[i] = caller index of internal slot i,
 *                 d_rank[c] = internal slot of caller atom c;
 *   d_force       md_fixed forces in SoA layout: x at d_force[i], y at d_force[stride + i],
 *                 z at d_force[2 stride + i]; stride = capacity rounded up to a multiple of 32;
 *                 units MD_FORCE_FIXED_SCALE per kJ mol^-1 nm^-1;
 *   d_box         3 doubles (nm) in device memory, so a captured kernel's arguments stay
 *                 valid when the box changes;
 *   d_step        the step counter (long long) in device memory;
 *   d_energy      MD_CUDA_E_COUNT md_fixed terms indexed by md_cuda_energy_term (units
 *                 MD_ENERGY_FIXED_SCALE per kJ/mol), copied to pinned memory and turned into
 *                 an md_energy only by md_cuda_state_poll() / md_cuda_nb_plan_poll().
 * The internal order starts as the caller's (md_cuda_state_upload) and changes only when a
 * nonbonded plan sorts the atoms spatially (md_cuda_nb_enqueue with a sort: every per-atom
 * array is permuted together and every atom is wrapped into the box); md_cuda_state_download
 * gives positions, velocities and forces back in the caller's order. A capability that keeps
 * per-atom data of its own between calls maps it through d_rank (topology indices stay in
 * the caller's numbering and are mapped at use).
 *
 * Every capability (this nonbonded plan, chapter 07's PME plan) enqueues on the state's
 * stream, reads d_xyzq, n, d_box, and ADDS into d_force (SoA, stride) and d_energy; the
 * state zeroes both at the start of an evaluation (md_cuda_state_zero). No enqueue
 * allocates, synchronises, copies to or from pageable memory or writes __constant__
 * memory; every kernel goes through MD_CUDA_LAUNCH. The one exception to the launch rule
 * is CUB (cub::DeviceRadixSort, cub::DeviceScan), a library whose kernels launch
 * themselves; its status is checked like any CUDA call.
 *
 * A problem found on the device (a non-finite coordinate, a capacity exceeded, a box too
 * small for the cutoff, a fixed-point overflow) raises a flag in the state's queue; the
 * poll reports it. After a capacity overflow the host calls md_cuda_nb_plan_grow() (outside
 * any graph) and evaluates again.
 *
 * Nonbonded rungs (md.h's md_nb_variant), one plan per rung, all on the same state:
 *   MD_NB_GPU_TILES         all pairs in shared-memory tiles (the n-body pattern); each pair
 *                           computed twice, only the i force written
 *   MD_NB_GPU_FULL_LIST     full Verlet list (ELL, column-major), thread per atom, each pair
 *                           twice, only the i force written, no atomics, masks instead of
 *                           branches in the inner loop
 *   MD_NB_GPU_HALF_LIST     half Verlet list, thread per atom, 64-bit atomics for the j forces
 *   MD_NB_GPU_CLUSTER       cluster pairs: i-clusters of MD_CUDA_NB_CI atoms, j-clusters of
 *                           warp / MD_CUDA_NB_CI atoms, super-clusters of MD_CUDA_NB_SUPER
 *                           i-clusters per warp, exclusions as bitmasks, j forces reduced with
 *                           warp shuffles; LJ table read through L1
 *   MD_NB_GPU_CLUSTER_SMEM  the same with the LJ table in shared memory
 * The first three use md.h's float pair arithmetic (md_nb_pair_f32) and convert every pair
 * term with md_fixed_from_float(), so their raw fixed-point forces, energies and virial are
 * bitwise equal to md_nb_compute(MD_NB_CPU_FIXED) on the same float coordinates. The cluster
 * rungs compute with rsqrtf and a polynomial Ewald kernel (md_cuda_nb_pair_fast), sum a
 * thread's terms in float and convert once per atom per tile: they agree with the CPU to float
 * rounding (tests/gpu_nb.cu states the tolerance) and are bitwise repeatable run to run (the
 * pair list is built in a fixed order; sums across threads are fixed point). Excluded pairs
 * (the Ewald exclusion correction), the 1-4 pairs, the self energy and the dispersion
 * correction are added by one exact code shared by every rung (md__nb_bonded_body): a kernel of
 * its own after the pair kernel, or, for the cluster rungs, blocks appended to the pair kernel's
 * grid, which run in its tail.
 *
 * Neighbour search. A sort (CUB radix sort of a cell key; cells >= cutoff + buffer, and within
 * a cell serpentine sub-columns along z, see md_cuda_cell_list) orders the atoms by cell; the
 * cluster rungs cut each cell's atoms into i- and j-clusters. A cluster-pair entry is listed
 * when the clusters' bounding boxes are within cutoff + buffer; the first evaluation after a
 * build prunes every entry to the i-clusters with an atom pair within cutoff + buffer (the
 * kernel computes those distances anyway), which the later evaluations skip. The list is rebuilt on the device: every
 * evaluation starts with a displacement kernel that sets a rebuild flag in device memory
 * when some atom moved more than half the buffer (minimum image) from where it was at the
 * last build, or the box changed; the rebuild kernels run every evaluation and return at
 * once unless the flag is set, so no host decision is in the per-step path. The sort itself
 * (CUB launches cannot read a device flag) is a host decision: done on the first evaluation
 * after an upload or after another plan sorted the state, when `what` has MD_CUDA_NB_SORT, and
 * every md_cuda_nb_opts::sort_interval steps in md_cuda_vv_enqueue. Between sorts the clusters
 * keep their atoms and only their bounding boxes and the lists are rebuilt: atoms that left
 * their cell are found because the search widens by the largest distance any atom has moved
 * out of its cell (the "escape", measured at each rebuild). Correctness never depends on the
 * sort, only the cluster efficiency does. Chapter 09 turns the flag into a conditional node.
 *
 * Warp size. The cluster tile is MD_CUDA_NB_CI i atoms x (W / MD_CUDA_NB_CI) j atoms for a
 * warp of W lanes, read from the device (cudaDevAttrWarpSize) at plan create; every shape,
 * mask width and reduction follows from W, so a 64- or 128-lane warp needs only another
 * instantiation (md_cuda_nb_opts::warp also selects a smaller virtual warp, 8 or 16, on the
 * same GPU: tests/gpu_nb.cu checks that build).
 *
 * EXAMPLE (one evaluation, then an NVE run)
 *       md_cuda_state s; md_cuda_nb_plan p; md_energy e;
 *       md_cuda_state_create(&s, sys.n);
 *       md_cuda_state_upload(&s, &sys, &top, &lj);
 *       md_cuda_nb_plan_create(&p, &s, MD_NB_GPU_CLUSTER, &params, NULL);
 *       md_cuda_state_zero(&s);
 *       md_cuda_nb_enqueue(&p, &s, MD_CUDA_NB_ENERGY);
 *       if (md_cuda_nb_plan_poll(&p, &s, &e) != MD_OK) ...    (md_cuda_nb_plan_grow on overflow)
 *       md_cuda_vv_enqueue(&s, &p, 0.002, 1000, MD_CUDA_NB_ENERGY);
 *       md_cuda_nb_plan_poll(&p, &s, &e);  md_cuda_state_download(&s, &sys, NULL);
 *       md_cuda_nb_plan_destroy(&p); md_cuda_state_destroy(&s);
 * Run: build/tests/gpu_nb (checks), build/chapters/06_nonbonded (the timed ladder),
 * build/examples/lj_fluid (NVE with a DCD). */

/** @brief Indices of md_cuda_state::d_energy: every energy term and the virial, in fixed point
 *  (MD_ENERGY_FIXED_SCALE units per kJ/mol), the one list every GPU capability adds into.
 *  The fields of md.h's md_energy in order, then the nine virial entries W_ab (row-major). */
typedef enum md_cuda_energy_term {
    MD_CUDA_E_LJ = 0,         /**< md_energy::lj */
    MD_CUDA_E_LJ_DISPERSION,  /**< md_energy::lj_dispersion */
    MD_CUDA_E_LJ14,           /**< md_energy::lj14 */
    MD_CUDA_E_COUL_REAL,      /**< md_energy::coul_real */
    MD_CUDA_E_COUL14,         /**< md_energy::coul14 */
    MD_CUDA_E_COUL_EXCL,      /**< md_energy::coul_excl */
    MD_CUDA_E_COUL_RECIP,     /**< md_energy::coul_recip (chapter 07's PME) */
    MD_CUDA_E_COUL_SELF,      /**< md_energy::coul_self */
    MD_CUDA_E_BONDED,         /**< md_energy::bonded */
    MD_CUDA_E_KINETIC,        /**< md_energy::kinetic */
    MD_CUDA_E_VIRIAL_XX,      /**< md_energy::virial[0] (W_xx); XY .. ZZ follow in row-major order */
    MD_CUDA_E_VIRIAL_XY,      /**< md_energy::virial[1] */
    MD_CUDA_E_VIRIAL_XZ,      /**< md_energy::virial[2] */
    MD_CUDA_E_VIRIAL_YX,      /**< md_energy::virial[3] */
    MD_CUDA_E_VIRIAL_YY,      /**< md_energy::virial[4] */
    MD_CUDA_E_VIRIAL_YZ,      /**< md_energy::virial[5] */
    MD_CUDA_E_VIRIAL_ZX,      /**< md_energy::virial[6] */
    MD_CUDA_E_VIRIAL_ZY,      /**< md_energy::virial[7] */
    MD_CUDA_E_VIRIAL_ZZ,      /**< md_energy::virial[8] */
    MD_CUDA_E_COUNT           /**< number of terms */
} md_cuda_energy_term;

/** @brief Turn @p terms (MD_CUDA_E_COUNT raw fixed-point sums) into an md_energy. */
void md_cuda_energy_from_fixed(const md_fixed *terms, md_energy *e);

/** @brief Round @p capacity up to the force stride of a state: a multiple of 32. */
#define MD_CUDA_STRIDE(capacity) ((((capacity) + 31) / 32) * 32)

/** @brief One system on the device (see the section's manual): coordinates, velocities, types,
 *  fixed-point forces and energies, the box and the step, in the state's internal order, with
 *  the force-field data the nonbonded plans read. Made once with a capacity. */
typedef struct md_cuda_state {
    md_cuda_queue q;         /**< the state's stream and device flags (every capability enqueues here) */
    int capacity;            /**< most atoms */
    int stride;              /**< force SoA stride: MD_CUDA_STRIDE(capacity) */
    int n;                   /**< atoms uploaded (0 until md_cuda_state_upload) */
    float4 *d_xyzq;          /**< capacity positions (nm) and charges (e), internal order */
    float4 *d_vel_invmass;   /**< capacity velocities (nm/ps) and inverse masses (1/amu) */
    int *d_type;             /**< capacity LJ types */
    int *d_order;            /**< internal slot -> caller index */
    int *d_rank;             /**< caller index -> internal slot */
    md_fixed *d_force;       /**< 3 stride fixed-point forces, SoA (x, then y, then z) */
    double *d_box;           /**< 3 box edges (nm) */
    long long *d_step;       /**< step counter */
    md_fixed *d_energy;      /**< MD_CUDA_E_COUNT fixed-point energy terms and virial */
    md_fixed *h_energy;      /**< pinned mirror of d_energy as of the last poll */
    int ntypes;              /**< LJ types of the uploaded table */
    float2 *d_lj;            /**< ntypes^2 (c6, c12) as floats, (float)c6 and (float)c12 of the md_lj_table */
    int *d_excl_start;       /**< capacity + 1 CSR offsets of the exclusions (caller numbering) */
    int *d_excl;             /**< excluded partners (caller numbering, ascending per atom) */
    int max_excl;            /**< most exclusions of one atom */
    int nexcl_pairs;         /**< excluded pairs i < j */
    int2 *d_excl_pairs;      /**< the excluded pairs i < j (caller numbering) */
    int npair14;             /**< scaled 1-4 pairs */
    int2 *d_pair14;          /**< the 1-4 pairs a < b (caller numbering) */
    float2 *d_pair14_lj;     /**< their (c6, c12) times fudge_lj, each rounded once to float */
    float fudge_qq;          /**< Coulomb scale of the 1-4 pairs, as float */
    double sum_q2;           /**< sum of q^2 (e^2), for the Ewald self energy */
    double disp_c6;          /**< mean c6 over the N (N + 1) / 2 pairs i <= j (dispersion correction) */
    double disp_c12;         /**< mean c12 over the same pairs */
    double box[3];           /**< box of the last upload (nm) */
    long long epoch;         /**< host count of changes of the internal order (uploads and sorts) */
    long long ff_epoch;      /**< host count of uploads (force field and charges may have changed) */
    int forces_valid;        /**< 1 once d_force holds the forces of the current positions (md_cuda_vv_enqueue) */
    int cap_topo;            /**< allocated entries of the exclusion and pair arrays */
    void *h_stage;           /**< pinned staging buffer for uploads and downloads */
    size_t stage_bytes;      /**< its size */
    void *d_scratch;         /**< device scratch for downloads: capacity x 64 bytes */
} md_cuda_state;

/** @brief Make a state for up to @p capacity atoms on the current device: its queue, every
 *  per-atom buffer, the box, step and energy words (zeroed), pinned staging. On failure
 *  @p s is zeroed. */
md_status md_cuda_state_create(md_cuda_state *s, int capacity);

/** @brief Copy a system into the state, in the caller's order: positions from sys->xyzq (x, y,
 *  z), charges from t->charge, velocities from sys->vel, inverse masses from t->mass, LJ types
 *  from t->lj_type, the box from sys->box; the LJ table (as floats), the exclusions, the 1-4
 *  pairs and their fudge factors; the step counter is set to 0. Synchronous (it may grow the
 *  topology arrays): not for the per-step path.
 *
 *  Errors: sys->n != t->n, n above the capacity (MD_ERR_RANGE, field n), a topology that fails
 *  md_topology_check against @p lj, a mass not finite and > 0, a box edge not finite and > 0,
 *  a non-finite coordinate or velocity. On failure the state keeps its previous contents. */
md_status md_cuda_state_upload(md_cuda_state *s, const md_system *sys, const md_topology *t, const md_lj_table *lj);

/** @brief Enqueue the zeroing of the forces and of every energy term (the start of an evaluation). */
md_status md_cuda_state_zero(md_cuda_state *s);

/** @brief Enqueue the kinetic energy sum m v^2 / 2 of every atom, added into MD_CUDA_E_KINETIC. */
md_status md_cuda_state_enqueue_kinetic(md_cuda_state *s);

/** @brief Wait for the state's stream and copy back, in the caller's order: positions (and
 *  charges) into sys->xyzq and velocities into sys->vel (when @p sys is not NULL; sys->n must
 *  equal s->n), forces (kJ mol^-1 nm^-1, x y z per atom) into @p force (when not NULL), and
 *  the raw fixed-point forces (x y z per atom, as md_nb_plan::fixed_force) into @p fixed_force
 *  (when not NULL). Device flags are not checked here (poll them). */
md_status md_cuda_state_download(md_cuda_state *s, md_system *sys, double *force, md_fixed *fixed_force);

/** @brief The synchronisation point: wait for the stream, copy the energy terms, the step and
 *  the flags; a raised flag becomes MD_ERR_RANGE naming it. On success writes @p e (may be NULL)
 *  and @p step (may be NULL). md_cuda_nb_plan_poll() words a plan's flags more precisely. */
md_status md_cuda_state_poll(md_cuda_state *s, md_energy *e, long long *step);

/** @brief Wait for the stream, free everything and zero the state; safe on a zeroed state. */
void md_cuda_state_destroy(md_cuda_state *s);

/* ---- GPU cell lists (the nonbonded plans and the RDF's cell rung) ---- */

/** @brief The geometry of a cell grid over an orthorhombic box, as kernels read it (device
 *  memory, written by md_cuda_cell_list_enqueue from the device box). */
typedef struct md_cuda_cell_grid {
    int dim[3];      /**< cells along x, y, z */
    int ncell;       /**< dim[0] dim[1] dim[2] */
    float cell[3];   /**< cell edges (nm) */
    float inv_cell[3]; /**< their inverses */
    float box[3];    /**< (float) box edges */
    float inv_box[3];/**< (float)(1 / box) */
    int columns;     /**< the sort's sub-columns per cell edge in x and y (md_cuda_cell_list::sub_bits 12) */
} md_cuda_cell_grid;

/** @brief Atoms sorted by cell on the device: cub::DeviceRadixSort of a 32-bit key (cell index,
 *  then optionally a position within the cell), then the first sorted position of every cell.
 *  Cells are at least min_cell on every edge (with cluster_cells, larger: about three
 *  super-clusters of atoms); if the grid would have more than the capacity of cells, the longest
 *  dimension is halved until it fits (cells only grow).
 *
 *  With sub_bits 12 the atoms of a cell are ordered like GROMACS's grid columns: the cell is cut
 *  into columns x columns sub-columns in x and y (as many as fit at least 2.7^(1/3) mean atom
 *  spacings wide, about 0.30 nm in water), visited in a serpentine, and each sub-column is
 *  traversed along z, up and down alternately (6-bit column index, 6-bit z). Consecutive atoms
 *  are then close in space, so clusters cut from the sorted order are compact (measured on the
 *  23,568-atom water box: cluster efficiency 0.24 against 0.20 for a Morton order of sub-cells
 *  and 0.235 for a Hilbert order, with cells of min_cell; tests/gpu_nb.cu prints it). */
typedef struct md_cuda_cell_list {
    int cap_atoms;            /**< most atoms */
    int cap_cells;            /**< most cells */
    int sub_bits;             /**< 12: the key orders the atoms within a cell by sub-columns; 0: not */
    int cluster_cells;        /**< 1 (the cluster rungs set it after create; needs sub_bits 12): cells as large as
                                   three super-clusters of atoms at the system's density when that is larger than
                                   min_cell (at most 1.25 min_cell), and sub-columns from the density
                                   (md__cell_grid_make); 0 (create's default): cells of min_cell */
    int key_bits;             /**< bits the radix sort looks at */
    md_cuda_cell_grid *d_grid;/**< the grid of the last build */
    unsigned int *d_key;      /**< cap_atoms keys of the input order */
    unsigned int *d_key_sorted; /**< the keys sorted */
    int *d_idx;               /**< cap_atoms input indices 0..n-1 (the sort's values) */
    int *d_idx_sorted;        /**< input index of every sorted position */
    int *d_cell_start;        /**< cap_cells + 1: cell c holds sorted positions cell_start[c] .. cell_start[c+1]-1 */
    void *d_temp;             /**< CUB temporary storage */
    size_t temp_bytes;        /**< its size */
} md_cuda_cell_list;

/** @brief Allocate a cell list for @p cap_atoms atoms and @p cap_cells cells (1 .. 2^(31-sub_bits));
 *  @p sub_bits is 0 or 12. On failure @p cl is zeroed. */
md_status md_cuda_cell_list_create(md_cuda_cell_list *cl, int cap_atoms, int cap_cells, int sub_bits);

/** @brief Enqueue a build for @p n atoms at @p d_xyz (only x, y, z are read; any position, it is
 *  wrapped into the box for binning) in the box @p d_box (3 doubles, device) with cells of at
 *  least @p min_cell nm, on @p stream. A non-finite coordinate raises MD_CUDA_FLAG_NONFINITE in
 *  @p d_flags (an md_cuda_queue's flags block; its detail is d_order[i] when @p d_order is not
 *  NULL, else i); a box edge not finite and > 0 raises MD_CUDA_FLAG_RANGE. */
md_status md_cuda_cell_list_enqueue(md_cuda_cell_list *cl, const float4 *d_xyz, int n, const double *d_box,
                                    double min_cell, cudaStream_t stream, unsigned long long *d_flags,
                                    const int *d_order);

/** @brief Free a cell list and zero it; safe on a zeroed one. */
void md_cuda_cell_list_destroy(md_cuda_cell_list *cl);

/* ---- the nonbonded plan ---- */

/** @brief Atoms per i-cluster of the cluster rungs. */
#define MD_CUDA_NB_CI 8
/** @brief i-clusters per super-cluster: one warp keeps their i forces in registers over its
 *  whole j list, so each j cluster's forces are reduced and written once per super-cluster. */
#define MD_CUDA_NB_SUPER 8
/** @brief Threads per block of the nonbonded kernels. */
#define MD_CUDA_NB_BLOCK 128
#ifndef MD_CUDA_NB_CLUSTER_BLOCK
/** @brief Threads per block of the cluster rungs' pair kernel: 32, 64, 128, 256 or 512 (the
 *  launch bound keeps 1024 threads per SM, 64 registers); measured at md__nb_cluster_kernel. */
#define MD_CUDA_NB_CLUSTER_BLOCK 32
#endif
#ifndef MD_CUDA_NB_ITEM_WARPS
/** @brief Work items per SM the default md_cuda_nb_opts::chunk aims at (entries per item =
 *  expected entries / (1.6 x SMs x this), clamped to 8..64). Measured on an
 *  H100 (chapter 06, TIP3P boxes, pair kernel): 16 gave 51 / 116 / 377 us for 4,050 / 23,568 /
 *  95,766 atoms, 128 gives 33 / 109 / 378 us: small systems need more, smaller items to fill
 *  the GPU (one warp per item; a 4,050-atom box has too few super-clusters otherwise).
 *  Checked again with the search target of 24 (chapter-08 step, 23,568 / 95,766 atoms): 64 /
 *  128 / 256 gave 213.7 / 211.2 / 225.7 us and 644.3 / 642.4 / 643.1 us. With the list build's
 *  later changes (2026-11-27, H100, chapter 08's --race, 1000 steps, two runs each) the entries
 *  per item were swept directly: at 23,568 atoms with 5 search slices 17 (what 128 gives) / 16
 *  / 24 / 32 entries: 139.0 / 140.2 / 137.6 / 144.8 us and 138.9 / 141.5 / 137.8 / 144.9 us; at
 *  95,766 atoms 62 (128) / 32 / 24 / 16: 421.5 / 422.6 / 434.6 / 455.6 us and 421.8 / 423.2 /
 *  435.3 / 457.8 us. So 96: 23 entries at 23,568 atoms, 64 (the clamp) at 95,766; 8 (the clamp)
 *  for the 4,050- and 5,100-atom boxes either way. Chapter 06's timing of the pair kernel alone
 *  (repeated evaluations of one list, no builds or prunes) is 2% slower with it at both sizes
 *  (H200, side by side: 90.9 / 92.3 -> 92.5 / 94.0 us and 297.6 / 297.2 -> 302.7 / 303.5 us).
 *  With work items of equal size and the long ones first (2026-11-28, H200, one call, two runs
 *  each), a larger clamp at 95,766 atoms (7,737 items instead of 9,124): clamp 64 / 96 / 128, the
 *  pair kernel alone (bench/nb_cluster) 215.3 / 216.2, 223.9 / 225.6, 225.1 / 226.2 us; the race
 *  335.1 / 333.8, 335.6 / 335.5, 335.9 / 335.8 us; so the clamp stays 64. */
#define MD_CUDA_NB_ITEM_WARPS 96
#endif
#ifndef MD_CUDA_NB_SEARCH_WARPS
/** @brief Search warps per SM the list build aims at. One warp per super-cluster leaves a
 *  23,568-atom box with 375 warps (its cells of 1.24 nm) for 132 SMs, so each super-cluster's neighbour cells are
 *  split among md_cuda_nb_plan::search_slices warps (cell k of its range to warp k mod
 *  slices), each making its own entries and work items: slices = round(SMs x this /
 *  super-clusters), 1 to 9, or 1 to 7 when there are more super-clusters than SMs (the
 *  measurements at MD__NB_SEARCH_FULL_SLICES). Measured on an H100 (chapters 06 and 08, TIP3P): 1 / 4 / 9 slices
 *  built the 23,568-atom list in 201 / 108 / 104 us, but at 95,766 atoms more slices slow the
 *  pair kernel (297 / 314 / 334 us for 1 / 4 / 8: more, shorter work items), hence a target
 *  rather than a constant. The chapter-08 step (bench/race.sh's settings, 1000 steps) with
 *  targets 12 / 24 / 48 / 96: 219 / 209 us at 23,568 atoms (4 / 9 slices; 48 and 96 also give
 *  9), 691 / 641 / 648 / 676 us at 95,766 (1 / 2 / 4 / 8 slices), so 24 then. Since a search
 *  unit steps through its own cells only (md__nb_search_kernel) a slice costs less; measured
 *  again on an H200 (2026-11-27, side by side, two runs each): 95,766 atoms, target 24 / 48
 *  (2 / 4 slices) the search 226-247 / 171-174 us a build under Nsight Compute and the step
 *  425.5 / 425.2 -> 416.7 / 416.4 us; 23,568 atoms unchanged (9 slices); 96 with up to 18
 *  slices (MD__NB_SEARCH_MAX_SLICES) slower at both sizes (150.7 and 437.9 us). So 48. */
#define MD_CUDA_NB_SEARCH_WARPS 48
#endif
/** @brief Degree of the polynomials of the cluster rungs' Ewald kernel (md_cuda_nb_fast). */
#define MD_CUDA_NB_EWALD_DEGREE 11
/** @brief Largest fit error of those polynomials (relative to their value at 0) that
 *  md_cuda_nb_plan_create accepts for a cluster rung. */
#define MD_CUDA_NB_EWALD_MAX_FIT_ERROR 2e-6
/** @brief Most LJ types MD_NB_GPU_CLUSTER_SMEM keeps in shared memory (64^2 float2 = 32 KB). */
#define MD_CUDA_NB_SMEM_TYPES 64

/** @brief `what` bit of md_cuda_nb_enqueue: add the energies (else only forces). */
#define MD_CUDA_NB_ENERGY 1u
/** @brief `what` bit: add the virial (and the energies with it). */
#define MD_CUDA_NB_VIRIAL 2u
/** @brief `what` bit: sort the atoms spatially before this evaluation (and rebuild the list). */
#define MD_CUDA_NB_SORT 4u
/** @brief `what` bit: rebuild the list at this evaluation whatever the displacements. */
#define MD_CUDA_NB_REBUILD 8u
/** @brief `what` bit: count the pairs within the cutoff (md_cuda_nb_stats::pairs_in_cutoff) and
 *  add the energies; MD_NB_GPU_CLUSTER with 32-lane warps only, costs a little time. Virtual
 *  warps of 8 or 16 lanes always add energies and virial. */
#define MD_CUDA_NB_COUNT 16u
/** @brief `what` bit: the displacement check of this evaluation was done already, so the plan
 *  skips its own kernel for it (one launch fewer per evaluation). Pass it only when a kernel of
 *  the caller, after the last move of the positions, has set the plan's rebuild word for every
 *  atom whose float mirror lies more than half the buffer from its reference position and for a
 *  changed box: md_cuda_sim_enqueue's integrate kernel does so (md__nb_moved, md__nb_box_check);
 *  the cluster and list rungs only (MD_NB_GPU_TILES keeps no list). */
#define MD_CUDA_NB_CHECKED 32u

/** @brief Float constants of the cluster rungs' pair arithmetic (md_cuda_nb_pair_fast), made
 *  by md_cuda_nb_plan_create from the resolved parameters.
 *
 *  Coulomb for every mode in one formula, with k = MD_COULOMB folded into the charges and
 *  t = 2 r^2 / rc^2 - 1 in [-1, 1] inside the cutoff: F/r = qq (1/r^3 - G(t)), E = qq (1/r - E(t)),
 *  G and E polynomials of degree MD_CUDA_NB_EWALD_DEGREE. Ewald: G = beta^3 g(z), E = beta e(z) with
 *  z = beta^2 r^2, e(z) = erf(sqrt z) / sqrt z and g(z) = -2 de/dz = (e(z) - 2/sqrt(pi) exp(-z)) / z
 *  (so erfc(beta r) / r = 1/r - beta e), fitted at plan create by Chebyshev interpolation on
 *  [0, (beta rc)^2]; reaction field: G = 2 k_rf, E = c_rf - k_rf r^2 (exact, degree 0 and 1);
 *  plain cutoff: both 0. LJ: F/r = ir6 (c12' ir6 - c6') / r^2 with the table scaled,
 *  c6' = 6 c6, c12' = 12 c12; E = c12 (ir12 - sh12) - c6 (ir6 - sh6). */
typedef struct md_cuda_nb_fast {
    float rc2;      /**< cutoff squared (nm^2) */
    float rl2;      /**< cutoff + buffer, squared (nm^2): the prune radius */
    float t_scale;  /**< 2 / rc^2: t = t_scale r^2 - 1 */
    float sh6;      /**< LJ potential shift 1/rc^6 (0 for a plain cutoff) */
    float sh12;     /**< LJ potential shift 1/rc^12 */
    float kc;       /**< Coulomb constant applied to the i charges (0: no Coulomb) */
    float g[MD_CUDA_NB_EWALD_DEGREE + 1]; /**< G(t) coefficients, constant term first */
    float e[MD_CUDA_NB_EWALD_DEGREE + 1]; /**< E(t) coefficients, constant term first */
} md_cuda_nb_fast;

/** @brief A polynomial of degree MD_CUDA_NB_EWALD_DEGREE (coefficients @p c, constant term first)
 *  at @p t by Horner's rule in float with fmaf, as the cluster rungs evaluate G and E;
 *  md_cuda_nb_plan_create measures the fit's error with this same evaluation. Its even and odd
 *  halves side by side (a dependency chain of 7 instead of 11, one operation more) measured no
 *  faster on an H200 (2026-12-01, bench/ab.sh, two rounds: chapter 08's race step 0.998 / 0.999
 *  of this Horner's, the force-only pair kernel 0.964-0.991 where the predicate mask test alone
 *  gave 0.971-0.993), so the chain stays. */
static inline __host__ __device__ float md_cuda_nb_poly(const float *c, float t) {
    float v = c[MD_CUDA_NB_EWALD_DEGREE];
    int k;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (k = MD_CUDA_NB_EWALD_DEGREE - 1; k >= 0; k--) v = fmaf(v, t, c[k]);
    return v;
}

/** @brief One pair of a cluster rung: F/r (kJ mol^-1 nm^-2) from r^2, 1/r (rsqrtf on the
 *  device), the product @p qq of the k-scaled i charge and the j charge, and the pair's scaled
 *  (6 c6, 12 c12); with @p energy the LJ and Coulomb energies are written too. Host and device
 *  share it, so the host test measures its accuracy. */
static inline __host__ __device__ float md_cuda_nb_pair_fast(const md_cuda_nb_fast *c, float r2, float rinv, float qq,
                                                             float c6s, float c12s, int energy, float *elj,
                                                             float *ec) {
    const float rinv2 = rinv * rinv, ir6 = rinv2 * rinv2 * rinv2;
    const float t = fmaf(c->t_scale, r2, -1.0f);
    const float g = md_cuda_nb_poly(c->g, t);
    const float frl = ir6 * fmaf(c12s, ir6, -c6s), frc = qq * (rinv * rinv2 - g);
    if (energy) {
        const float e = md_cuda_nb_poly(c->e, t);
        *elj = fmaf(c12s * (1.0f / 12.0f), fmaf(ir6, ir6, -c->sh12), -(c6s * (1.0f / 6.0f)) * (ir6 - c->sh6));
        *ec = qq * (rinv - e);
    }
    return fmaf(frl, rinv2, frc);
}

/** @brief Options of a nonbonded plan; a zero field takes its default. */
typedef struct md_cuda_nb_opts {
    int warp;                /**< cluster rungs: (virtual) warp size 8, 16 or 32 (default: the device's) */
    int max_neighbors;       /**< Verlet rungs: list width per atom (default: from the density, x 1.5) */
    long long list_capacity; /**< cluster rungs: cluster-pair entries (default: from the density) */
    long long excl_capacity; /**< cluster rungs: entries with an exclusion mask (default: 4 per i-cluster + 1024) */
    int chunk;               /**< cluster rungs: entries per work item (default: about MD_CUDA_NB_ITEM_WARPS items per SM, at least 8 entries each) */
    int sort_interval;       /**< md_cuda_vv_enqueue: sort every this many steps (default 100; negative: never) */
    int time_kernel;         /**< 1: record CUDA events around the pair kernel; the poll writes its time to
                                  md_cuda_nb_stats::kernel_s (0, default: no events) */
    int if_node_build;       /**< list rungs: 1, in a stream capture the list build becomes an IF node decided on
                                  the device (md_cuda_graph_run_if), so a graph launch skips its two kernels
                                  on the steps that build nothing; 0 (default): the two device-gated kernels
                                  in a capture too, as on a stream (they return at once unless the rebuild
                                  word is set). The IF node measured slower: side by side on an H200
                                  (2026-11-28, two rounds) chapter 09's captured steps 0.91-0.97x the stream
                                  rung with it, 0.97-1.04x without, and chapter 10's coroutines + graphs
                                  1.54 / 1.55x the sequential rung with it, 1.66 / 1.70x without (tutorial
                                  09, section 6). A graph that is to become a child graph
                                  (md_cuda_graph_add_child) may hold no conditional node: keep 0 there.
                                  Read at every md_cuda_nb_enqueue, so it may be switched between captures */
} md_cuda_nb_opts;

/** @brief Counters of a plan, read by md_cuda_nb_plan_poll. */
typedef struct md_cuda_nb_stats {
    long long rebuilds;        /**< list builds on the device so far */
    long long sorts;           /**< spatial sorts enqueued so far */
    long long evaluations;     /**< md_cuda_nb_enqueue calls so far */
    long long entries;         /**< cluster-pair entries (cluster rungs) or list pairs (Verlet rungs) of the last build */
    long long work_items;      /**< cluster rungs: work items of the last build */
    long long masked_entries;  /**< cluster rungs: entries with an exclusion mask */
    long long computed_pairs;  /**< pairs a kernel computes per evaluation, padding included: cluster rungs, lanes x
                                    i-cluster steps of the pruned list (of the fresh list before the first evaluation);
                                    Verlet rungs, list entries (each pair twice in the full list) */
    long long computed_unpruned; /**< cluster rungs: lanes x steps of the list as built, before the prune */
    double kernel_s;           /**< seconds of the last pair kernel (md_cuda_nb_opts::time_kernel; else 0) */
    long long pairs_in_cutoff; /**< pairs within the cutoff at the last MD_CUDA_NB_COUNT evaluation (cluster rungs) */
    double escape;             /**< largest distance (nm) an atom was outside its cell at the last build */
} md_cuda_nb_stats;

/** @brief A nonbonded plan: one rung, its parameters, its neighbour-search buffers, made once
 *  for a state (its capacity) and used for every evaluation. */
typedef struct md_cuda_nb_plan {
    md_nb_variant variant;     /**< the rung */
    md_nb_params params;       /**< resolved parameters */
    md_nb_coeffs coeffs;       /**< md.h's float constants (exact rungs) */
    md_cuda_nb_fast fast;      /**< the cluster rungs' constants */
    double fit_error;          /**< cluster rungs: the Ewald polynomials' fit error (relative) */
    md_cuda_nb_opts opts;      /**< options, defaults filled in */
    int warp;                  /**< cluster rungs: warp size W of the kernels */
    int cj;                    /**< cluster rungs: atoms per j-cluster, W / MD_CUDA_NB_CI */
    int capacity;              /**< atoms (the state's capacity) */
    int stride;                /**< the state's stride */
    int cap_ic;                /**< most i-clusters */
    int cap_sc;                /**< most super-clusters */
    long long cap_entries;     /**< cluster-pair entries */
    long long cap_items;       /**< work items */
    long long grid_items;      /**< work items the pair kernel's grid covers, one warp each: cap_items until
                                    md_cuda_nb_plan_poll sees a build, then its count and a quarter more,
                                    set again only when a build's count leaves [grid_items / 2, grid_items];
                                    the warps take the items past it in turn (md__nb_cluster_kernel) */
    long long cap_excl;        /**< exclusion-mask entries */
    int max_nb;                /**< Verlet rungs: list width */
    int excl_width;            /**< columns of d_exl: the most exclusions of one atom when the plan was made */
    int chunk;                 /**< entries per work item */
    int search_slices;         /**< warps per super-cluster in the list build (MD_CUDA_NB_SEARCH_WARPS) */
    int search_blocks_per_sm;  /**< cluster rungs: the search's grid per SM, at most what is resident at once
                                    (cudaOccupancyMaxActiveBlocksPerMultiprocessor; at most 32) */
    int sm_count;              /**< multiprocessors of the device */
    long long sorted_epoch;    /**< the state's epoch this plan last sorted (or indexed) at; -1 never */
    long long ff_epoch;        /**< the state's ff_epoch the scaled LJ table was made at; -1 never */
    long long steps_since_sort;/**< md_cuda_vv_enqueue steps since the last sort */
    md_cuda_nb_stats stats;    /**< counters as of the last md_cuda_nb_plan_poll */
    md_cuda_cell_list cells;   /**< the cell list of the sort */
    int *d_ic_count;           /**< cap_cells + 1 i-clusters per cell (scan input) */
    int *d_ic_start;           /**< cap_cells + 1 first i-cluster of every cell (scan output; last = total) */
    int *d_sc_count;           /**< cap_cells + 1 super-clusters per cell */
    int *d_sc_start;           /**< cap_cells + 1 first super-cluster of every cell (last = total) */
    void *d_scan_temp;         /**< CUB scan temporary storage */
    size_t scan_temp_bytes;    /**< its size */
    int2 *d_ci;                /**< cap_ic (first atom, atom count) per i-cluster */
    int *d_ci_cell;            /**< cap_ic cell of every i-cluster */
    int4 *d_sc;                /**< cap_sc (first i-cluster, i-clusters, cell, 0) per super-cluster */
    float4 *d_bb;              /**< 2 cap_ic (MD_CUDA_NB_CI / cj) bounding boxes (lo, hi) per j-cluster */
    float4 *d_ref;             /**< capacity positions at the last build (displacement check) */
    int *d_exn;                /**< capacity exclusion counts (internal order) */
    int *d_exl;                /**< max_excl x stride exclusion partners (internal slots, ascending, column-major) */
    int4 *d_entries;           /**< cap_entries (first j atom, imask | shift << 8 | minimg << 13 | j atoms << 14, mask slot
                                    or -1, j-cluster) */
    int4 *d_items;             /**< cap_items (super-cluster, first entry, end entry, 0): a build's long items
                                    from index 0 up, its short ones from cap_items - 1 down */
    unsigned int *d_masks;     /**< cap_excl x MD_CUDA_NB_SUPER exclusion masks (bit jj * CI + ii: pair computed) */
    int *d_nb;                 /**< Verlet rungs: max_nb x stride neighbours (column-major) */
    int *d_nbn;                /**< Verlet rungs: capacity neighbour counts */
    float2 *d_lj_scaled;       /**< cluster rungs: ntypes^2 (6 c6, 12 c12) */
    int lj_ntypes;             /**< types of d_lj_scaled */
    float4 *d_tmp4;            /**< capacity x 2 float4 scratch for the permutation */
    int *d_tmpi;               /**< capacity x 3 int scratch */
    md_fixed *d_tmpf;          /**< 3 stride scratch forces */
    cudaEvent_t ev[2];         /**< events around the pair kernel (md_cuda_nb_opts::time_kernel) */
    long long *d_ctl;          /**< device control words (see md_cuda.cu.h: MD__NB_CTL_*) */
    long long *h_ctl;          /**< pinned mirror of d_ctl as of the last poll */
    cudaStream_t build_stream; /**< list rungs: the stream a capture records the list build's IF-node body on
                                    (md_cuda_nb_opts::if_node_build, md_cuda_graph_run_if); no work runs on it */
} md_cuda_nb_plan;

/** @brief Make a plan of rung @p variant (a GPU rung of md_nb_variant) for state @p s (uploaded:
 *  its box sizes the cell grid and the list estimates) with @p params (NULL: defaults) and
 *  @p opts (NULL: defaults).
 *
 *  Errors: a CPU rung (MD_ERR_UNSUPPORTED), a state with no atoms, parameters md_nb_params_resolve
 *  rejects, cutoff + buffer above half the shortest box edge (MD_ERR_RANGE, field cutoff), a
 *  cluster rung with MD_LJ_FORCE_SWITCH or with an Ewald fit error above
 *  MD_CUDA_NB_EWALD_MAX_FIT_ERROR (MD_ERR_UNSUPPORTED), MD_NB_GPU_CLUSTER_SMEM with more than
 *  MD_CUDA_NB_SMEM_TYPES types, a warp size without an instantiation, CUDA errors. On failure
 *  @p p is zeroed. */
md_status md_cuda_nb_plan_create(md_cuda_nb_plan *p, md_cuda_state *s, md_nb_variant variant,
                                 const md_nb_params *params, const md_cuda_nb_opts *opts);

/** @brief Enqueue one nonbonded evaluation on the state's stream: (a sort when needed, see the
 *  section manual,) the displacement check, the device-gated list rebuild, the pair kernel and
 *  the exact pairs: excluded and 1-4 pairs, self energy and dispersion correction (a kernel of
 *  their own, or for the cluster rungs the pair kernel's last blocks). The
 *  rebuild (bounding boxes and search) is two kernels that return at once unless the rebuild
 *  word is set, on a stream and in a stream capture alike; with md_cuda_nb_opts::if_node_build
 *  it goes through md_cuda_graph_run_if, which in a capture makes it an IF node decided on the
 *  device, so a graph launch skips them (measured slower: see that option). Forces
 *  are ADDED into s->d_force and, with MD_CUDA_NB_ENERGY / MD_CUDA_NB_VIRIAL in @p what, energies
 *  and virial into s->d_energy (call md_cuda_state_zero first). Launches only; host errors
 *  (a plan of another state's capacity, no atoms) are returned at once. */
md_status md_cuda_nb_enqueue(md_cuda_nb_plan *p, md_cuda_state *s, unsigned what);

/** @brief The state's poll (md_cuda_state_poll) plus the plan's counters (p->stats) and
 *  messages that name what went wrong: which capacity overflowed and what it needs (call
 *  md_cuda_nb_plan_grow), a box too small for cutoff + buffer, a fixed-point overflow. */
md_status md_cuda_nb_plan_poll(md_cuda_nb_plan *p, md_cuda_state *s, md_energy *e);

/** @brief After a poll that reported a capacity overflow: reallocate every capacity the last
 *  build needed more of (with 25% headroom) and make the next evaluation rebuild. Synchronous;
 *  call it outside any graph. Writes 1 to @p grown (may be NULL) if something was grown. */
md_status md_cuda_nb_plan_grow(md_cuda_nb_plan *p, md_cuda_state *s, int *grown);

/** @brief Wait for the stream, free the plan and zero it; safe on a zeroed plan. */
void md_cuda_nb_plan_destroy(md_cuda_nb_plan *p);

/** @brief Enqueue a kernel that keeps the GPU busy for about @p microseconds (one thread spinning on
 *  the SM clock): enqueued before a batch of launches, it lets the host queue the whole batch
 *  while the GPU waits, so events around one kernel of the batch time that kernel alone, not the
 *  host's launch latency (chapter 06 and bench/nb_cluster time the pair kernel this way). */
md_status md_cuda_hold_stream(cudaStream_t stream, double microseconds);

/** @brief Enqueue @p nsteps velocity Verlet (NVE) steps on the state with plan @p p and time step
 *  @p dt (ps): v += F/m dt/2; x += v dt; zero; forces (md_cuda_nb_enqueue with @p what); v +=
 *  F/m dt/2; kinetic energy (into MD_CUDA_E_KINETIC); step += 1. The first call after an upload
 *  evaluates the forces first. Sorts every md_cuda_nb_opts::sort_interval steps. Positions and
 *  velocities stay float on the device; the forces are the fixed-point sums converted once per
 *  atom per kick. Launches only (poll to read the energies). */
md_status md_cuda_vv_enqueue(md_cuda_state *s, md_cuda_nb_plan *p, double dt, int nsteps, unsigned what);
/* pme: particle-mesh Ewald on the GPU (cuFFT)                              */
/* ======================================================================== */

/* The reciprocal part of the Ewald sum on the GPU, the five stages of md.h's CPU PME
 * (md_pme_spread / forward / solve / backward / gather; see md.h's pme section for the
 * method and the grid layout, which is cuFFT's own: K0 x K1 x K2 reals, last axis fastest,
 * K0 x K1 x (K2/2 + 1) complex values after the real-to-complex transform):
 *   spread    every charge onto order^3 points, summed in 64-bit fixed point (scale
 *             MD_CUDA_PME_GRID_SCALE) and then converted to float, so the grid does not depend
 *             on the order of the additions: three rungs,
 *               MD_CUDA_PME_SPREAD_ATOMIC  (scatter) P x P threads per atom, one per stencil
 *                                          column (y, z), each adding the P points along x with
 *                                          64-bit atomicAdd into a global fixed-point grid
 *                                          (consecutive lanes on consecutive z: a warp's atomic
 *                                          lands on a few sectors, not on 32 rows);
 *               MD_CUDA_PME_SPREAD_GATHER  atoms binned into bricks of 8^3 points (counting
 *                                          sort), then one thread per grid point sums the
 *                                          atoms whose stencil covers it: no atomics on the
 *                                          grid, more arithmetic;
 *               MD_CUDA_PME_SPREAD_TILED   atoms binned by brick as for the gather rung, then
 *                                          one block per brick adds its atoms' stencils into
 *                                          a (8 + order - 1)^3 tile in shared memory (shared
 *                                          atomics) and adds the tile to the grid: one global
 *                                          atomic per tile point instead of one per stencil
 *                                          point (5x fewer at order 5 on water);
 *               MD_CUDA_PME_SPREAD_WINDOW  no binning: 32 consecutive atoms per block add
 *                                          their stencils into a shared-memory window around
 *                                          them (32-bit integer atomics on the two halves of
 *                                          each term), then the window into the grid; fewer
 *                                          global atomics when consecutive atoms lie close
 *                                          together (md_cuda_sim's sorted atoms: its default);
 *             all add the same fixed-point terms, so their grids are bitwise equal;
 *   forward   cufftExecR2C on the plan's stream (outside a stream capture as the graph of that
 *             call captured at create: see MD_CUDA_PME_FFT_GRAPH);
 *   solve     one thread per complex value: influence function with the B-spline moduli of
 *             md_pme_bspline_moduli (uploaded at create), energy and virial summed in fixed
 *             point, the neutralising background for a net charge;
 *   backward  cufftExecC2R;
 *   gather    order-many lanes per atom (lane k reads stencil column k of every row): the
 *             force from the potential grid, summed over the lanes, added in fixed point.
 * The box lives in device memory (3 doubles) and is read by the kernels, so a captured graph
 * stays valid when the box changes; the atom count n is a kernel argument (a new n needs a new
 * capture). Spline orders 4, 5 and 6 are compiled (templates); the B-spline weights are
 * md_cuda_pme_bspline(), float arithmetic with every product rounded on its own. */

#include <cufft.h>

/** @brief Fixed-point units per e of a spread grid value (2^32; a grid value is a sum of
 *  charges times weights below 1, so the range +-2^31 e is never approached). */
#define MD_CUDA_PME_GRID_SCALE 4294967296.0
/** @brief Edge (points) of the bricks the gather-formulation spread bins atoms into; a brick
 *  is one thread block of MD_CUDA_PME_BRICK^3 threads. Must be >= MD_PME_MAX_ORDER - 1. */
#define MD_CUDA_PME_BRICK 8

/** @brief 1 (the default): md_cuda_pme_enqueue_forward and md_cuda_pme_enqueue_backward launch
 *  their transform as a CUDA graph that md_cuda_pme_plan_create captured from one
 *  cufftExecR2C / cufftExecC2R call (cudaGraphLaunch), except while the plan's stream is being
 *  captured, where they call cuFFT, so its kernels become nodes of the caller's graph. The same
 *  cuFFT kernels on the same buffers either way: the same bits. Why: a cufftExec call costs the
 *  launching thread about 12.5 us of host time (cuFFT's own work around its three kernel
 *  launches), a graph launch about 1.8 us (measured on an H200 machine, 2026-11-28): chapter 08's
 *  step took 66-75 us of host time to enqueue with the calls and 39-40 us with the graphs, and
 *  each transform 12.1 -> 10.7 us of GPU time (tutorial 08, section 6). 0: cufftExec on every
 *  call (a build to compare with). */
#ifndef MD_CUDA_PME_FFT_GRAPH
#define MD_CUDA_PME_FFT_GRAPH 1
#endif

/** @brief 1 (the default): md_cuda_pme_plan_enqueue() launches its whole evaluation (spread,
 *  forward transform, solve, backward transform, gather) as one CUDA graph, captured at the first
 *  call on the plan's stream and launched again while the call's arguments (device pointers,
 *  atom count, stride, the plan's spread rung and atoms per window) stay those of the capture; a
 *  call with other arguments captures again (two graphs are kept, one with and one without energies). While the
 *  plan's stream is being captured by the caller it enqueues the stages, which become nodes of the
 *  caller's graph. The same kernels on the same buffers either way: the same bits. Why: the stages
 *  cost the launching thread six launches per evaluation, the graph one. Measured side by side on
 *  an H200 machine (2026-11-28, builds with 0 and 1): the host time to enqueue one step of chapter
 *  08 39.87 -> 17.29 us (23,568 atoms), chapter 09's stream rung 48.3 -> 25.7 us (4,050 atoms),
 *  and chapter 10's coroutine rung, whose one host thread enqueues twelve replicas' steps, 1.38x /
 *  1.47x -> 1.72x / 1.71x the sequential rung in two rounds (tutorial 10). Needs the transforms'
 *  graphs (MD_CUDA_PME_FFT_GRAPH), whose creation ran cuFFT's first call outside any capture.
 *  0: the stages on every call (a build to compare with). */
#ifndef MD_CUDA_PME_GRAPH
#define MD_CUDA_PME_GRAPH 1
#endif

/** @brief The arguments a graph of md_cuda_pme_plan_enqueue() was captured with
 *  (md_cuda_pme_plan::graph_key; internal): a call that differs in one of them captures again. */
typedef struct md_cuda_pme_graph_key {
    const void *xyzq;   /**< the call's atoms */
    const void *box;    /**< the call's box */
    const void *force;  /**< the call's forces */
    const void *energy; /**< the call's energy (NULL: none) */
    const void *virial; /**< the call's virial (NULL: none) */
    long long n;        /**< the call's atom count */
    long long stride;   /**< the call's force stride */
    long long spread;   /**< the plan's spread rung at the capture */
    long long window_atoms; /**< the plan's atoms per window at the capture */
} md_cuda_pme_graph_key;

/** @brief The spread rungs (see the section's introduction). */
typedef enum md_cuda_pme_spread {
    MD_CUDA_PME_SPREAD_ATOMIC = 0, /**< scatter: 64-bit fixed-point atomicAdd per stencil point (the default) */
    MD_CUDA_PME_SPREAD_GATHER,     /**< gather: atoms binned into 8^3 bricks, one thread per grid point */
    MD_CUDA_PME_SPREAD_TILED,      /**< tiled scatter: per brick, shared-memory atomics into a halo tile, then the tile
                                        into the grid */
    MD_CUDA_PME_SPREAD_WINDOW,     /**< windowed scatter: consecutive atoms into a shared-memory window (32-bit
                                        atomics), each window into the grid; fast when nearby atoms are close in
                                        memory (md_cuda_sim's sorted atoms) */
    MD_CUDA_PME_SPREAD_COUNT       /**< number of spread rungs */
} md_cuda_pme_spread;

/** @brief Short name of a spread rung ("spread_atomic", "spread_gather", "spread_tiled"), never NULL. */
const char *md_cuda_pme_spread_name(md_cuda_pme_spread spread);

/** @brief Which buffer md_cuda_pme_plan_read() copies. */
typedef enum md_cuda_pme_buffer {
    MD_CUDA_PME_REAL = 0, /**< the K0 K1 K2 floats: charges after spread, potential after backward */
    MD_CUDA_PME_COMPLEX   /**< the K0 K1 (K2/2 + 1) complex floats (re, im): after forward or solve */
} md_cuda_pme_buffer;

/** @brief A GPU PME plan: grids, cuFFT plans on the plan's stream, moduli, the gather rung's
 *  bins, and its own atom, box and output buffers for md_cuda_pme_plan_upload / enqueue_own /
 *  sync. Made once (md_cuda_pme_plan_create), used for many evaluations. */
typedef struct md_cuda_pme_plan {
    md_cuda_queue queue;          /**< the plan's stream and device flags */
    md_pme_params params;         /**< resolved parameters (alpha, grid, order) */
    int capacity;                 /**< most atoms per evaluation */
    int nh;                       /**< grid[2] / 2 + 1 */
    int nbrick[3];                /**< bricks per axis, ceil(grid / MD_CUDA_PME_BRICK) */
    md_cuda_pme_spread spread;    /**< spread rung of md_cuda_pme_plan_enqueue (default atomic) */
    int window_atoms;             /**< atoms per block of the windowed spread (md_cuda_pme_plan_set_window_atoms) */
    cufftHandle fft_forward;      /**< cuFFT R2C plan, stream set to queue.stream */
    cufftHandle fft_backward;     /**< cuFFT C2R plan, stream set to queue.stream */
    int have_forward;             /**< 1 once fft_forward exists (internal) */
    int have_backward;            /**< 1 once fft_backward exists (internal) */
    cudaGraphExec_t fft_exec[2];  /**< the forward and the backward transform captured at create (MD_CUDA_PME_FFT_GRAPH),
                                       NULL when that is 0 */
    cudaGraphExec_t graph[2];     /**< md_cuda_pme_plan_enqueue() captured whole, without [0] and with [1] energies
                                       (MD_CUDA_PME_GRAPH), NULL until the first such call */
    md_cuda_pme_graph_key graph_key[2]; /**< the arguments each of graph[] was captured with */
    float *d_moduli;              /**< grid[0] + grid[1] + grid[2] B-spline moduli */
    md_fixed *d_grid_fixed;       /**< the atomic rung's fixed-point grid (K0 K1 K2), zero between spreads (the
                                       conversion to floats resets it) */
    float *d_real;                /**< K0 K1 K2 floats (cufftReal) */
    float2 *d_complex;            /**< K0 K1 nh complex (cufftComplex) */
    md_fixed *d_charge;           /**< 2: sum of the charges and of their squares (MD_FORCE_FIXED_SCALE),
                                       written by the spread */
    int *d_brick_count;           /**< atoms per brick (gather rung) */
    int *d_brick_start;           /**< nbricks + 1 offsets into d_sorted (gather rung) */
    int *d_sorted;                /**< capacity atom indices ordered by brick (gather rung) */
    int *d_rank;                  /**< capacity: each atom's place within its brick (gather rung) */
    int4 *d_base;                 /**< capacity: first grid index per axis and the brick (gather rung) */
    float *d_theta;               /**< capacity * 3 * order weights (gather rung) */
    float4 *d_xyzq;               /**< own atoms (md_cuda_pme_plan_upload) */
    double *d_box;                /**< own box, 3 doubles */
    md_fixed *d_out;              /**< own outputs: 3 capacity forces (x block, y block, z block),
                                       1 energy, 9 virial */
    md_float4 *h_xyzq;            /**< pinned staging of the atoms */
    double *h_box;                /**< pinned staging of the box */
    md_fixed *h_out;              /**< pinned copy of d_out and d_charge */
    cudaEvent_t staged;           /**< recorded after the upload's copies (internal) */
    int n;                        /**< atoms of the last upload */
} md_cuda_pme_plan;

/** @brief Make a plan on the current device for up to @p capacity atoms: the parameters are
 *  resolved as md_pme_params_resolve() does (@p box is needed when the grid is automatic; the
 *  grid stays fixed, the box of each evaluation may differ), cuFFT R2C and C2R plans bound to
 *  the plan's stream (cufftSetStream) and each captured as a graph (MD_CUDA_PME_FFT_GRAPH), the moduli computed by md_pme_bspline_moduli() and
 *  uploaded, every buffer allocated. It synchronises. Errors: those of md_pme_params_resolve(),
 *  capacity < 1, CUDA or cuFFT failures (MD_ERR_CUDA), no device. On failure @p p is zeroed. */
md_status md_cuda_pme_plan_create(md_cuda_pme_plan *p, const md_pme_params *params, const double box[3],
                                  int capacity);

/** @brief Wait for the plan's stream, destroy the transforms' graphs and the cuFFT plans, free everything and zero the
 *  plan. Safe on a zeroed plan. */
void md_cuda_pme_plan_destroy(md_cuda_pme_plan *p);

/** @brief Choose the spread rung md_cuda_pme_plan_enqueue() uses. */
md_status md_cuda_pme_plan_set_spread(md_cuda_pme_plan *p, md_cuda_pme_spread spread);

/** @brief Atoms per block of the windowed spread (MD_CUDA_PME_SPREAD_WINDOW): @p atoms
 *  consecutive atoms, 32 at a time, share a block's windows; 32, 64, ..., 256, or 0 for the
 *  default, 32. More atoms per block: fewer blocks, and fewer windows to flush to the grid with
 *  global atomics when the atoms lie close together (not counted), but each block's batches run
 *  one after another.
 *  The grid is the same bits for every value. Alone, 32 is the fastest at both of chapter 07's
 *  boxes; beside the pair kernel in md_cuda_sim's step, more than 32 pays for large systems
 *  (md_cuda_sim_opts::pme_window_atoms). Error MD_ERR_RANGE for another value. */
md_status md_cuda_pme_plan_set_window_atoms(md_cuda_pme_plan *p, int atoms);

/** @brief Stage 1, spread: enqueue the spreading of @p n atoms at @p d_xyzq (device; x y z nm,
 *  w charge e; positions anywhere, wrapped) for the box @p d_box (device, 3 doubles) into
 *  p->d_real, with rung @p spread; also sums the charges into p->d_charge. A non-finite
 *  coordinate or charge raises MD_CUDA_FLAG_NONFINITE with the atom's index (the atom is
 *  skipped; md_cuda_queue_sync reports it). Host errors: n outside 1..capacity, NULL. */
md_status md_cuda_pme_enqueue_spread(md_cuda_pme_plan *p, md_cuda_pme_spread spread, const float4 *d_xyzq, int n,
                                     const double *d_box);

/** @brief Stage 2, forward: cufftExecR2C of p->d_real into p->d_complex on the plan's stream
 *  (launched as p->fft_exec[0] outside a stream capture, see MD_CUDA_PME_FFT_GRAPH). */
md_status md_cuda_pme_enqueue_forward(md_cuda_pme_plan *p);

/** @brief Stage 3, solve: multiply p->d_complex by the influence function for @p d_box and ADD
 *  the reciprocal energy (with the background of the charge sum of the last spread) to
 *  @p d_energy (one md_fixed, MD_ENERGY_FIXED_SCALE) and the virial to @p d_virial (9 md_fixed,
 *  or NULL: not computed). @p d_energy NULL: forces only, neither energy nor virial is summed
 *  (an MD step that reports no energy; the grid it leaves is the same bits either way). */
md_status md_cuda_pme_enqueue_solve(md_cuda_pme_plan *p, const double *d_box, md_fixed *d_energy, md_fixed *d_virial);

/** @brief Stage 4, backward: cufftExecC2R of p->d_complex into p->d_real (the potential;
 *  launched as p->fft_exec[1] outside a stream capture, see MD_CUDA_PME_FFT_GRAPH). */
md_status md_cuda_pme_enqueue_backward(md_cuda_pme_plan *p);

/** @brief Stage 5, gather: ADD the reciprocal forces of the @p n atoms to @p d_force (fixed
 *  point, MD_FORCE_FIXED_SCALE; x of atom i at d_force[i], y at [stride + i], z at
 *  [2 stride + i]; stride >= n). */
md_status md_cuda_pme_enqueue_gather(md_cuda_pme_plan *p, const float4 *d_xyzq, int n, const double *d_box,
                                     md_fixed *d_force, int stride);

/** @brief The five stages with the plan's spread rung: ADDS the reciprocal forces to @p d_force
 *  (SoA, see md_cuda_pme_enqueue_gather), the energy to @p d_energy_recip and the virial to
 *  @p d_virial (NULL: none; @p d_energy_recip NULL: forces only, see
 *  md_cuda_pme_enqueue_solve; without energies the atomic and windowed spreads skip the charge
 *  sums, which only the energy's neutralising background reads: p->d_charge is then zero).
 *  Launches, cuFFT executions and memsets on the plan's stream only:
 *  capturable into a CUDA graph. Outside a capture, one launch of a graph of the five stages that
 *  the plan captured at the first call with these arguments (MD_CUDA_PME_GRAPH; a call with other
 *  pointers, n, stride or spread settings captures again, about the cost of an instantiation). The
 *  caller's buffers are the MD state's (the nonbonded and PME forces add into one fixed-point array). */
md_status md_cuda_pme_plan_enqueue(md_cuda_pme_plan *p, const float4 *d_xyzq, int n, const double *d_box,
                                   md_fixed *d_force, int stride, md_fixed *d_energy_recip, md_fixed *d_virial);

/** @brief For a plan used on its own: copy @p n atoms and the @p box from the host into the
 *  plan's buffers (pinned staging, cudaMemcpyAsync on the plan's stream). */
md_status md_cuda_pme_plan_upload(md_cuda_pme_plan *p, const md_float4 *xyzq, int n, const double box[3]);

/** @brief Zero the plan's own outputs and enqueue md_cuda_pme_plan_enqueue() on its own atoms,
 *  box and outputs (what md_cuda_pme_plan_upload() filled). */
md_status md_cuda_pme_plan_enqueue_own(md_cuda_pme_plan *p);

/** @brief The synchronisation point of a plan used on its own: wait, turn a raised flag into an
 *  error, then, as md_pme_compute() does, ADD the forces to @p force (3 n doubles, x y z per
 *  atom; may be NULL) and the virial to energy->virial, and SET energy->coul_recip and
 *  energy->coul_self (-k alpha / sqrt(pi) sum q^2; @p energy may be NULL). On failure the
 *  outputs are untouched. */
md_status md_cuda_pme_plan_sync(md_cuda_pme_plan *p, double *force, md_energy *energy);

/** @brief Copy one of the plan's grids to @p host (after waiting for the plan's stream): the
 *  stage-by-stage checks of tests/gpu_pme.cu and chapter 07. @p host holds K0 K1 K2 floats
 *  (MD_CUDA_PME_REAL) or 2 K0 K1 nh floats (MD_CUDA_PME_COMPLEX). */
md_status md_cuda_pme_plan_read(md_cuda_pme_plan *p, md_cuda_pme_buffer which, float *host);

/** @brief One call: create a plan for @p n atoms, upload, enqueue, sync (the semantics of
 *  md_pme_compute(): forces and virial added, coul_recip and coul_self set), destroy. */
md_status md_cuda_pme(const md_pme_params *params, const md_float4 *xyzq, int n, const double box[3], double *force,
                      md_energy *energy);

/** @brief Where a coordinate @p x falls on an axis of @p K grid points with inverse edge
 *  @p invL (float): the first stencil point @p base in 0..K-1 and the fraction @p dr in [0, 1)
 *  of u = K frac(x invL). Every PME kernel locates atoms with this one function (and so should
 *  a kernel of your own), so the spread rungs and the gather agree to the bit. */
static __host__ __device__ inline void md_cuda_pme_locate(float x, float invL, int K, int *base, float *dr) {
    float s = md__fmul(x, invL), u;
    int b;
    s = s - floorf(s);
    u = md__fmul(s, (float)K);
    b = (int)u;
    if (b >= K) { /* s rounded up to 1 */
        b -= K;
        u -= (float)K;
    }
    *base = b;
    *dr = u - (float)b;
}

/** @brief B-spline weights of order @p P (4..6) for the fraction @p dr in [0, 1) of a
 *  fractional grid position, in float: w[j] is the weight of grid point floor(u) + j, the same
 *  convention as md.h's md_pme_bspline(), and dw[j] its derivative (dw may be NULL). The
 *  in-place recursion of Essmann et al. (and OpenMM's kernels), every product rounded on its
 *  own (md__fmul), so every kernel that calls it gets the same bits (host or device). */
template <int P>
static __host__ __device__ inline void md_cuda_pme_bspline(float dr, float *w, float *dw) {
    int k, l, j;
    w[P - 1] = 0.0f;
    w[1] = dr;
    w[0] = 1.0f - dr;
    for (k = 3; k < P; k++) {
        const float div = 1.0f / (float)(k - 1);
        w[k - 1] = md__fmul(md__fmul(div, dr), w[k - 2]);
        for (l = 1; l < k - 1; l++)
            w[k - l - 1] = md__fmul(div, md__fmul(dr + (float)l, w[k - l - 2]) + md__fmul((float)(k - l) - dr, w[k - l - 1]));
        w[0] = md__fmul(md__fmul(div, 1.0f - dr), w[0]);
    }
    if (dw) { /* the derivative of the order-P spline is the difference of two order-(P-1) ones */
        dw[0] = -w[0];
        for (j = 1; j < P; j++) dw[j] = w[j - 1] - w[j];
    }
    {
        const float div = 1.0f / (float)(P - 1);
        w[P - 1] = md__fmul(md__fmul(div, dr), w[P - 2]);
        for (l = 1; l < P - 1; l++)
            w[P - l - 1] = md__fmul(div, md__fmul(dr + (float)l, w[P - l - 2]) + md__fmul((float)(P - l) - dr, w[P - l - 1]));
        w[0] = md__fmul(md__fmul(div, 1.0f - dr), w[0]);
    }
}

/* ======================================================================== */
/* step: the MD step on the GPU (chapter 08)                                */
/* ======================================================================== */

/* THE GPU-RESIDENT STEP. md_cuda_sim is md.h's md_sim on the device: the same integrator
 * (leapfrog in OpenMM's VerletIntegrator / LangevinMiddleIntegrator form), the same Langevin
 * noise (md_langevin_normals: Philox of (seed, step, atom), so the CPU and the GPU draw the
 * same numbers), the same SETTLE (md_settle_water, md_settle_velocities: one code for host and
 * device), SHAKE and RATTLE, centre-of-mass removal and Monte Carlo barostat; the forces are
 * chapter 06's nonbonded plan, chapter 07's PME plan and a bonded plan, all adding into the MD
 * state's fixed-point SoA force array. One step, as enqueued by md_cuda_sim_enqueue:
 *
 *   integrate   ONE kernel: a rigid water on one thread, or on three lanes of a warp (one
 *               atom each, SETTLE solved in all three on the atoms they exchange by shuffles;
 *               the same bits) when all those warps fit on the GPU at once
 *               (md_cuda_sim_opts::water_lanes); a cluster of atoms joined by constraints on
 *               one thread (SHAKE / RATTLE), a free atom on one thread. Per atom:
 *               subtract the centre-of-mass velocity of the previous step, kick with F(x) read
 *               from the fixed-point forces (then zero them for the next evaluation), the
 *               Langevin part, drift, constrain, the velocity correction, the runaway and NaN
 *               checks, write the float4 positions (wrapped) the force kernels read; the block
 *               sums of m v go to a fixed-point accumulator, the last block to finish turns it
 *               into the centre-of-mass velocity for the next step and advances the step
 *               counter in device memory (a "last block" reduction: no second launch).
 *   forces      fork: PME (md_cuda_pme_plan_enqueue) on the PME plan's stream, concurrently
 *               with the nonbonded plan (md_cuda_nb_enqueue: displacement check, device-gated
 *               list rebuild, pair kernel) and the bonded kernel on the state's stream; join.
 *               Both add into one fixed-point force array (order-independent sums, so the
 *               overlap changes no bit). On the steps the nonbonded plan sorts the atoms (it
 *               permutes the state's arrays) PME waits for it. The state's stream has the
 *               device's greatest priority (md_cuda_sim_opts::plain_priority 0): when both
 *               streams have kernels waiting for SMs, the critical path's start first.
 *   energies    only when asked (MD_CUDA_SIM_ENERGY on the last step of an enqueue): the
 *               energy words are zeroed before the forces, the force kernels add their terms,
 *               and the integrate kernel in kinetic mode adds the kinetic energy of
 *               v(t) = v(t - dt/2) + dt/2 F/m, constrained, as md_sim_energy does.
 * Everything per step lives in device memory (positions and velocities in double, the step,
 * the box, the centre-of-mass velocity), so the enqueue only launches: no allocation, no
 * synchronisation, no pageable copy, and chapter 09 can capture it as it is. The positions are
 * kept in double in the caller's atom order (md_cuda_step_plan::d_x, d_v); the state's float4
 * d_xyzq is their wrapped float mirror in the state's internal order (the nonbonded plan sorts
 * it; the integrate kernel maps atoms through d_rank).
 *
 * THE BAROSTAT needs an energy decision, which is made on the host outside the captured step:
 * md_cuda_sim_run() enqueues barostat_interval steps, then md_cuda_sim_barostat() evaluates
 * the energy, scales the molecule centres and the box (a kernel), evaluates again, decides with
 * the same md_rng as md_sim and, on rejection, restores positions and box (device copies) and
 * recomputes the forces. Three force evaluations and two synchronisations per attempt, every
 * barostat_interval steps (OpenMM's GPU barostat decides on the host as well).
 *
 * ERRORS a step finds on the device raise flags that md_cuda_sim_poll() reports: an atom that
 * moved more than max_displacement in one step (it would escape the neighbour list between
 * checks: the run has exploded), a non-finite position or velocity, SETTLE without a solution,
 * SHAKE or RATTLE not converged (MD_ERR_RANGE naming the atom); a non-finite energy term;
 * the nonbonded and PME plans' own flags (capacity overflow: md_cuda_sim_poll grows the plan
 * and returns MD_ERR_RANGE so the caller may restart from a checkpoint).
 *
 * EXAMPLE
 *       md_cuda_sim g; md_energy e; md_sim_desc d = {0};
 *       d.thermostat = MD_THERMOSTAT_LANGEVIN;
 *       md_cuda_sim_create(&g, &sys, &top, &lj, &d, NULL);
 *       md_cuda_sim_enqueue(&g, 5000, MD_CUDA_SIM_ENERGY);   (launches only)
 *       md_cuda_sim_poll(&g, &e, NULL);                       (waits; energies of step 5000)
 *       md_cuda_sim_get_system(&g, &sys);  md_cuda_sim_destroy(&g); */


/** @brief Threads per block of the step's kernels. */
#define MD_CUDA_STEP_BLOCK 64
/** @brief Most atoms of one constraint cluster (a heavy atom and its hydrogens has 2 to 5);
 *  larger clusters are rejected at create. */
#define MD_CUDA_STEP_MAX_CLUSTER 8
/** @brief `what` bit of md_cuda_sim_enqueue(): the last step computes the energies (potential
 *  terms of the new positions and the kinetic energy), for md_cuda_sim_poll(). */
#define MD_CUDA_SIM_ENERGY 1u

/** @brief The harmonic bonds and angles of an md_bonded on the device (chapter 08's bonded
 *  kernel: one thread per term, md.h's md_bond_f32 / md_angle_f32 arithmetic, forces and
 *  energy added in fixed point). */
typedef struct md_cuda_bonded_plan {
    int nbond;        /**< bonds */
    int nangle;       /**< angles */
    int2 *d_bond;     /**< nbond atom pairs (caller numbering) */
    float2 *d_bondp;  /**< nbond (r0, k) as floats */
    int4 *d_angle;    /**< nangle (i, j, k, 0), j the vertex */
    float2 *d_anglep; /**< nangle (theta0, k) as floats */
} md_cuda_bonded_plan;

/** @brief Upload the terms of @p b (a copy; @p b may be freed afterwards). Synchronous. An empty
 *  md_bonded gives a plan whose enqueue launches nothing. On failure @p p is zeroed. */
md_status md_cuda_bonded_plan_create(md_cuda_bonded_plan *p, const md_bonded *b);

/** @brief Enqueue the bonded forces on @p stream: positions @p d_xyzq (float4, the state's
 *  internal order) of the caller's atoms mapped through @p d_rank (NULL: identity), minimum
 *  images in the box @p d_box (3 doubles, device); ADDS forces to @p d_force (SoA fixed point,
 *  @p stride), the energy to @p d_energy (one md_fixed, may be NULL: not computed) and the
 *  virial to @p d_virial (9 md_fixed, may be NULL). Launches only. */
md_status md_cuda_bonded_enqueue(const md_cuda_bonded_plan *p, cudaStream_t stream, const float4 *d_xyzq,
                                 const int *d_rank, const double *d_box, md_fixed *d_force, int stride,
                                 md_fixed *d_energy, md_fixed *d_virial);

/** @brief Free the plan and zero it; safe on a zeroed plan (waits for the device). */
void md_cuda_bonded_plan_destroy(md_cuda_bonded_plan *p);

/* md_cuda_mirror_coord with the reciprocal of the edge given: the image x + k L nearest prev,
 * k = rint((prev - x) / L). One multiplication where wrapping x into the box first took two
 * double divisions per axis (each a long inlined sequence with a slow path; in the integrate
 * kernel's SASS the old function's copies were 973 instructions). md__step_store passes
 * 1.0 / L, the reciprocal md__box_f32 makes for the displacement check too. */
static __host__ __device__ inline float md__mirror_coord(double x, float prev, double L, double invL) {
    return (float)(x + L * rint(((double)prev - x) * invL));
}

/** @brief The float coordinate of the state's position mirror (md_cuda_state::d_xyzq) for an atom
 *  now at @p x (nm, any image) on an axis of edge @p L whose mirror value was @p prev: the image
 *  of x nearest to prev. Between two sorts the mirror must move continuously: the cluster
 *  lists store a periodic shift per entry, so an atom wrapped back into the box between list
 *  builds would leave its pairs behind (missing forces until the next build). The sort wraps
 *  the mirror into the box again, so it never strays further than the atoms move between
 *  sorts. Every kernel that writes the mirror of a running list uses this (the integrate
 *  kernel, chapter 08's exercise). */
static __host__ __device__ inline float md_cuda_mirror_coord(double x, float prev, double L) {
    return md__mirror_coord(x, prev, L, 1.0 / L);
}

/** @brief Flags words of md_cuda_step_plan::d_flags (the md_cuda_flag layout), read by
 *  md_cuda_sim_poll(): MD_CUDA_FLAG_RANGE an atom moved more than max_displacement (detail:
 *  the atom), MD_CUDA_FLAG_NONFINITE a non-finite position or velocity (the atom),
 *  MD_CUDA_FLAG_OVERFLOW SETTLE without a solution or SHAKE / RATTLE not converged (detail:
 *  the unit's first atom plus 1). When several are raised the poll reports one, in the order
 *  RANGE, OVERFLOW, NONFINITE: a runaway atom is what the others follow from. */
typedef struct md_cuda_step_plan {
    md_sim_desc desc;       /**< resolved settings (md_sim_create's defaults) */
    int n;                  /**< atoms */
    int stride;             /**< the state's force stride */
    int nwater;             /**< SETTLE units */
    int ncluster;           /**< SHAKE units */
    int nsingle;            /**< free atoms */
    int nunit;              /**< nwater + ncluster + nsingle */
    int water_lanes;        /**< lanes per rigid water in the integrate kernel: 1 or 3 (md_cuda_sim_opts::water_lanes) */
    int nmol;               /**< molecules (barostat) */
    double mass_o;          /**< SETTLE oxygen mass */
    double mass_h;          /**< SETTLE hydrogen mass */
    double doh;             /**< SETTLE O-H distance */
    double dhh;             /**< SETTLE H-H distance */
    double total_mass;      /**< sum of the masses (amu) */
    int4 *d_water;          /**< nwater (O, H1, H2, 0) caller indices */
    int *d_cstart;          /**< ncluster + 1 offsets into d_catom */
    int *d_catom;           /**< the clusters' atoms (caller indices) */
    int *d_kstart;          /**< ncluster + 1 offsets into d_kpair / d_klen */
    int2 *d_kpair;          /**< constraint atom pairs as positions within their cluster */
    double *d_klen;         /**< their lengths (nm) */
    int *d_single;          /**< nsingle caller indices */
    int *d_mstart;          /**< nmol + 1 offsets into d_matom */
    int *d_matom;           /**< atoms by molecule */
    double *d_x;            /**< 3 n positions (nm), caller order, not wrapped */
    double *d_v;            /**< 3 n velocities (nm/ps): v(t - dt/2) before the centre-of-mass correction */
    double *d_inv_mass;     /**< n inverse masses */
    float *d_charge;        /**< n charges (caller order) for the float4 mirror */
    double *d_x_save;       /**< 3 n positions saved by the barostat */
    double *d_vcom;         /**< 4 doubles: the centre-of-mass velocity to subtract at the next step, then the
                                 barostat's scale */
    md_fixed *d_pacc;       /**< 3 fixed-point momentum sums of the running step (MD_FORCE_FIXED_SCALE units) */
    unsigned int *d_done;   /**< blocks finished in the running step (the last-block reduction) */
    unsigned long long *d_flags; /**< MD_CUDA_FLAG_WORDS words (see above) */
    unsigned long long *h_flags; /**< pinned mirror */
    double *h_stage;        /**< pinned staging: 6 n + 8 doubles */
} md_cuda_step_plan;

/** @brief Options of md_cuda_sim_create(); a zero field takes its default. */
typedef struct md_cuda_sim_opts {
    md_nb_variant nb_variant;   /**< nonbonded rung (default MD_NB_GPU_CLUSTER_SMEM, or MD_NB_GPU_CLUSTER
                                     with more than MD_CUDA_NB_SMEM_TYPES types); a CPU rung is an error */
    md_cuda_nb_opts nb;         /**< the nonbonded plan's options (sort_interval: steps between sorts) */
    md_cuda_pme_spread spread;  /**< PME spread rung; 0 (MD_CUDA_PME_SPREAD_ATOMIC's value) takes the default,
                                     MD_CUDA_PME_SPREAD_WINDOW: the simulation keeps its atoms sorted by cell,
                                     which is what the windowed spread needs (chapter 08's race, H100: 168.8
                                     -> 156.6 us per step at 23,568 atoms, 500.4 -> 503.7 us at 95,766). To run
                                     the atomic rung in a simulation, call md_cuda_pme_plan_set_spread on its
                                     `pme` plan after md_cuda_sim_create */
    int serial_pme;             /**< 1: PME on the state's stream after the nonbonded kernels (no overlap);
                                     0 (default): concurrent on the PME plan's stream */
    int plain_priority;         /**< 1: the state's stream at the default priority; 0 (default): at the
                                     device's greatest (md_cuda_queue_prioritize), so the nonbonded
                                     kernels and the integrator, the step's critical path, start
                                     before PME's whenever both wait for SMs; any other value is refused.
                                     PME's stream keeps the default priority: PME's stream high was slower
                                     (tutorial 08, section 5) */
    int water_lanes;            /**< lanes per rigid water in the integrate kernel: 1 (SETTLE on one
                                     thread) or 3 (an atom per lane, SETTLE solved in all three);
                                     0 (default): 3 when all the waters' warps fit on the GPU at once
                                     (cudaOccupancyMaxActiveBlocksPerMultiprocessor), else 1 */
    int pme_window_atoms;       /**< atoms per block of the windowed spread (md_cuda_pme_plan_set_window_atoms):
                                     32, 64, ..., 256; 0 (default): the whole batches of 32 per block that
                                     bring the spread's blocks nearest to one wave of resident blocks (32 at
                                     23,568 atoms, 64 at 95,766 on an H200; measured in md_cuda.cu.h at
                                     md__sim_window_atoms and in tutorial 08) */
} md_cuda_sim_opts;

/** @brief A GPU MD run (see the section's manual): the state, the force plans, the step plan,
 *  the fork/join events and the host-side bookkeeping (step count, barostat). */
typedef struct md_cuda_sim {
    md_sim_desc desc;           /**< resolved settings */
    md_cuda_sim_opts opts;      /**< options, defaults filled in */
    md_cuda_state state;        /**< the MD state (positions' float mirror, forces, energies, box, step) */
    md_cuda_nb_plan nb;         /**< nonbonded plan */
    md_cuda_pme_plan pme;       /**< PME plan (when the Coulomb mode is Ewald) */
    int use_pme;                /**< 1 with PME */
    md_cuda_bonded_plan bonded; /**< bonds and angles (rigid ones left out) */
    md_cuda_step_plan step;     /**< integrator, constraints, thermostat */
    cudaEvent_t ev_fork;        /**< recorded on the state's stream before PME */
    cudaEvent_t ev_join;        /**< recorded on PME's stream after it */
    int ndof;                   /**< degrees of freedom of the temperature (as md_sim) */
    long long steps;            /**< steps enqueued */
    long long since_sort;       /**< steps since the last sort of the nonbonded plan */
    double time_ps;             /**< simulated time (ps) of the steps enqueued */
    double box[3];              /**< the box (host copy; the device's is state.d_box) */
    double *h_box;              /**< pinned 3 doubles for box writes */
    md_barostat baro;           /**< the Monte Carlo barostat's state (md.h's, as md_sim's) */
    int energy_valid;           /**< 1 when the last enqueue computed energies */
} md_cuda_sim;

/** @brief Make a GPU run of @p sys with force field @p t, @p lj and settings @p desc (NULL:
 *  defaults; md_sim_create's rules), @p opts (NULL: defaults), on the current device.
 *
 *  As md_sim_create: the initial positions are constrained (against themselves), the
 *  velocities constrained and their centre-of-mass motion removed (on the host, in double,
 *  with md.h's md_constraints), then uploaded and the initial forces computed. Synchronous.
 *  Errors: those of md_sim_create's checks, of the state, nonbonded, PME and bonded plans, a
 *  constraint cluster above MD_CUDA_STEP_MAX_CLUSTER atoms (MD_ERR_UNSUPPORTED), CUDA errors.
 *  On failure @p s is zeroed. */
md_status md_cuda_sim_create(md_cuda_sim *s, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                             const md_sim_desc *desc, const md_cuda_sim_opts *opts);

/** @brief Enqueue @p nsteps steps (see the section's manual); with MD_CUDA_SIM_ENERGY in @p what
 *  the last one also computes the energies of its new positions. Launches, device copies,
 *  memsets and event records only. The barostat is not applied here (md_cuda_sim_run). */
md_status md_cuda_sim_enqueue(md_cuda_sim *s, int nsteps, unsigned what);

/** @brief The second half of a step alone, for code that integrates with a kernel of its own
 *  (chapter 08's exercise): enqueue the forces of the current positions (nonbonded, PME,
 *  bonded), ADDED into the state's forces, which the integrate kernel leaves zeroed; with
 *  MD_CUDA_SIM_ENERGY the energy words are zeroed first and the energies and the kinetic energy
 *  added (md_cuda_sim_poll reads them). Each call counts as a step towards the next spatial
 *  sort (every md_cuda_nb_opts::sort_interval calls, as md_cuda_sim_enqueue's steps do: without
 *  sorts the clusters spread and the list outgrows its capacity). Launches only. */
md_status md_cuda_sim_enqueue_forces(md_cuda_sim *s, unsigned what);

/** @brief @p nsteps steps with the barostat: enqueues in chunks ending on the multiples of
 *  barostat_interval and applies md_cuda_sim_barostat() there (without a barostat: one enqueue).
 *  With MD_CUDA_SIM_ENERGY the last step computes the energies. Synchronises at every barostat
 *  move. */
md_status md_cuda_sim_run(md_cuda_sim *s, int nsteps, unsigned what);

/** @brief One Monte Carlo volume move on the device (see the section's manual). Synchronous. */
md_status md_cuda_sim_barostat(md_cuda_sim *s);

/** @brief The synchronisation point: wait for the streams, check the step's, the nonbonded and
 *  the PME flags, and (when the last enqueue asked for them) write the energies to @p e (may be
 *  NULL; MD_ERR_INVALID_ARGUMENT when they were not computed) and the device's step counter
 *  to @p step (may be NULL). A non-finite energy term is MD_ERR_RANGE naming it. */
md_status md_cuda_sim_poll(md_cuda_sim *s, md_energy *e, long long *step);

/** @brief Copy the run's positions and velocities (double, caller order, centre-of-mass
 *  correction applied as the next step would) and box to the host: @p x and @p v hold 3 n
 *  doubles each (either may be NULL). Synchronous. */
md_status md_cuda_sim_download(md_cuda_sim *s, double *x, double *v, double box[3]);

/** @brief md_sim_get_system's counterpart: positions wrapped into the box (floats), velocities
 *  and box into @p sys (sys->n must equal the run's). */
md_status md_cuda_sim_get_system(md_cuda_sim *s, md_system *sys);

/** @brief The run's restartable state as an md_checkpoint (md.h's format; a GPU checkpoint
 *  restores into md_sim and the reverse). Synchronous. */
md_status md_cuda_sim_checkpoint(md_cuda_sim *s, md_checkpoint *ck);

/** @brief Continue from @p ck: positions, velocities, box, step, time, seed and barostat state
 *  set exactly, the forces recomputed. Synchronous. Errors: ck->n differs, non-finite values. */
md_status md_cuda_sim_restore(md_cuda_sim *s, const md_checkpoint *ck);

/** @brief Kinetic temperature (K) of @p kinetic (kJ/mol) with the run's degrees of freedom. */
double md_cuda_sim_temperature(const md_cuda_sim *s, double kinetic);

/** @brief Mass density (g/cm^3) in the current box. */
double md_cuda_sim_density(const md_cuda_sim *s);

/** @brief Where the time of a step goes, measured by md_cuda_sim_profile(): GPU time (s) per
 *  step of each part, with the parts run one after another (PME not overlapped), and of the
 *  whole step as md_cuda_sim_enqueue runs it. */
typedef struct md_cuda_step_profile {
    int steps;          /**< steps measured */
    double integrate;   /**< the integrate kernel */
    double nonbonded;   /**< md_cuda_nb_enqueue: displacement check, list rebuild (when due), pair kernels */
    double pme_spread;  /**< PME spread (and charge sums) */
    double pme_forward; /**< cuFFT R2C */
    double pme_solve;   /**< influence function, energy */
    double pme_backward;/**< cuFFT C2R */
    double pme_gather;  /**< forces from the grid */
    double bonded;      /**< bonds and angles (0 without them) */
    double parts_sum;   /**< the sum of the parts */
    double step_serial; /**< elapsed GPU time per step with the parts back to back (event to event
                             over all steps): parts_sum plus the GPU's idle gaps between launches */
    double step;        /**< elapsed time per step of md_cuda_sim_enqueue (PME overlapped), event to
                             event over all steps */
    double host_enqueue;/**< host wall time per step spent in md_cuda_sim_enqueue */
} md_cuda_step_profile;

/** @brief Measure @p nsteps steps part by part (events around each kernel group, PME stage by
 *  stage) and then @p nsteps ordinary steps (see md_cuda_step_profile). The run advances by
 *  2 @p nsteps steps. Not for capture (it records events between launches and synchronises). */
md_status md_cuda_sim_profile(md_cuda_sim *s, int nsteps, md_cuda_step_profile *out);

/** @brief Wait for the device, free everything and zero the run; safe on a zeroed run. */
void md_cuda_sim_destroy(md_cuda_sim *s);

/* ======================================================================== */
/* graph: CUDA graphs of enqueues (chapter 09)                              */
/* ======================================================================== */

/* CUDA GRAPHS OF AN ENQUEUE. An enqueue (section "plans") only launches work on one stream, so it
 * can be captured into a CUDA graph and the graph launched instead: one host call for the whole
 * step. This section holds what chapter 09 builds on that:
 *
 *   capture     md_cuda_graph_capture: an enqueue callback (md_cuda_bench_fn, the type
 *               md_cuda_bench times) captured on its stream into a graph.
 *   walk        md_cuda_graph_walk: every node of a graph (child graphs included) with its type,
 *               kernel, launch shape and arguments, in a fixed order.
 *   registry    md_cuda_graph_register / MD_CUDA_GRAPH_RULES: how each kernel's arguments compare
 *               (must match, may differ, ignore), keyed by the kernel's function pointer (the key
 *               of the launch registry, md_cuda_kernel_register); offsets and sizes come from
 *               cudaFuncGetParamInfo. An unregistered kernel compares bytewise: every argument
 *               must match.
 *   compare     md_cuda_graph_compare: may a new graph update the executable one
 *               (cudaGraphExecUpdate), or must it be instantiated anew, and why (the node and
 *               the argument that decided).
 *   cache       md_cuda_graph_cache: capture, compare, then keep, update or instantiate; counts
 *               each.
 *   dynamic     md_cuda_graph_kernel_node / md_cuda_graph_kernel_node_set: explicit kernel nodes
 *               added into a capture, whose arguments are then set on the executable graph
 *               (cudaGraphExecKernelNodeSetParams) without capturing again.
 *   conditional md_cuda_graph_cond_handle, md_cuda_graph_cond_node, md_cuda_graph_cond_from_word,
 *               md_cuda_graph_loop, md_cuda_graph_run_if: IF and WHILE nodes whose condition a
 *               kernel sets on the device (cudaGraphSetConditional), so one host launch runs a
 *               whole loop; md_cuda_graph_add_child puts a graph captured before into a capture
 *               (a multi-stream step into a WHILE body).
 *
 * Captures use cudaStreamCaptureModeThreadLocal: other threads may go on calling CUDA. A graph
 * holds kernel arguments by value: a pointer argument keeps pointing at the buffer it was
 * captured with, so after a plan reallocates a buffer (a grow) its enqueue is captured again,
 * and the comparison sees the new pointer.
 *
 * What the comparison cannot see, and so never calls identical: the arguments of a kernel the
 * runtime has no parameter information for (cudaFuncGetParamInfo fails) and the bodies of
 * conditional nodes (the CUDA 13.0 runtime has no call that returns them). Such nodes make a
 * graph updatable at best, and cudaGraphExecUpdate decides. Kernel node attributes (priority,
 * cluster shape) are not compared. */

/** @brief How one kernel argument (or a kernel node's launch shape) may differ between a new
 *  graph and the executable graph it would update. */
typedef enum md_cuda_param_rule {
    MD_CUDA_PARAM_MUST_MATCH = 0, /**< letter 'M': a difference means instantiating anew. For sizes, counts,
                                       anything the launch shape or the graph's topology was derived from */
    MD_CUDA_PARAM_MAY_DIFFER,     /**< letter 'D': a difference is updated by cudaGraphExecUpdate. For
                                       buffers, step numbers, scalars that only feed arithmetic */
    MD_CUDA_PARAM_IGNORE          /**< letter 'I': never compared, so a difference alone leaves the executable
                                       graph with the OLD value. Only for an argument the results do not depend on */
} md_cuda_param_rule;

/** @brief Most parameters of a kernel the comparator handles; a kernel with more compares as one
 *  without parameter information (updatable at best). */
#define MD_CUDA_GRAPH_MAX_PARAMS 32
/** @brief Most kernels the comparator registry holds (rules and parameter layouts); past it,
 *  registration fails and layouts are queried again at every lookup. */
#define MD_CUDA_GRAPH_REGISTRY_MAX 256
/** @brief Bytes of a family name md_cuda_graph_family keeps, the NUL included (longer names are cut). */
#define MD_CUDA_GRAPH_FAMILY_MAX 64

/** @brief A kernel's parameter layout and comparison rules, as the comparator uses them
 *  (md_cuda_graph_rules). */
typedef struct md_cuda_kernel_rules {
    const void *func;                                  /**< the kernel (host function pointer) */
    int registered;                                    /**< 1: rules from md_cuda_graph_register; 0: the bytewise default */
    int nparams;                                       /**< parameters, from cudaFuncGetParamInfo (-1: no information) */
    size_t offset[MD_CUDA_GRAPH_MAX_PARAMS];           /**< offset of each in the device-side parameter layout (bytes) */
    size_t size[MD_CUDA_GRAPH_MAX_PARAMS];             /**< size of each (bytes) */
    md_cuda_param_rule rule[MD_CUDA_GRAPH_MAX_PARAMS]; /**< rule of each */
    md_cuda_param_rule launch;                         /**< rule of the launch shape (grid, block, dynamic shared memory) */
    char family[MD_CUDA_GRAPH_FAMILY_MAX];             /**< md_cuda_graph_family's family ("" if none) */
} md_cuda_kernel_rules;

/** @brief Register how the arguments of kernel @p func compare: @p rules has one letter per
 *  parameter, in order: 'M' (MD_CUDA_PARAM_MUST_MATCH), 'D' (MD_CUDA_PARAM_MAY_DIFFER) or 'I'
 *  (MD_CUDA_PARAM_IGNORE); @p launch is the rule of the node's grid, block and dynamic shared
 *  memory. Makes no CUDA call: the number of letters is checked against cudaFuncGetParamInfo when
 *  the comparator first looks the kernel up (md_cuda_graph_rules), which then fails naming the
 *  kernel. Registering the same rules again does nothing.
 *
 *  Errors (MD_ERR_INVALID_ARGUMENT): NULL @p func or @p rules, a letter other than M, D or I, more
 *  than MD_CUDA_GRAPH_MAX_PARAMS letters, @p launch not a rule, @p func already registered with
 *  other rules; a full registry (MD_ERR_OUT_OF_MEMORY). */
md_status md_cuda_graph_register(const void *func, const char *rules, md_cuda_param_rule launch);

/** @brief Register @p kernel's comparator rules once per call site (md_cuda_graph_register), beside
 *  its launch; on failure return the md_status from the enclosing function. After the first
 *  time it costs one relaxed atomic load. */
#define MD_CUDA_GRAPH_RULES(kernel, rules, launch)                                                 \
    do {                                                                                           \
        static std::atomic<int> md__ruled_(0);                                                     \
        if (!md__ruled_.load(std::memory_order_relaxed)) {                                         \
            md_status md__rs_ = md_cuda_graph_register((const void *)(kernel), (rules), (launch)); \
            if (md__rs_ != MD_OK) return md__rs_;                                                  \
            md__ruled_.store(1, std::memory_order_relaxed);                                        \
        }                                                                                          \
    } while (0)

/** @brief The layout and rules the comparator uses for kernel @p func: its registered rules, or,
 *  for an unregistered kernel, MD_CUDA_PARAM_MUST_MATCH for every parameter and the launch shape
 *  (bytewise). Offsets and sizes come from cudaFuncGetParamInfo, asked once per kernel and kept;
 *  nparams is -1 when the runtime has none for @p func. Errors: NULL arguments; registered rules
 *  whose letters are not as many as the kernel's parameters (MD_ERR_INVALID_ARGUMENT, naming the
 *  kernel and both counts). */
md_status md_cuda_graph_rules(const void *func, md_cuda_kernel_rules *out);

/** @brief Put kernel @p func in the family @p family (copied): kernels of one family with the same
 *  parameter layout (count, offsets and sizes from cudaFuncGetParamInfo) may replace one another
 *  in a kernel node, and the comparison then calls the node updatable (cudaGraphExecUpdate and
 *  cudaGraphExecKernelNodeSetParams may change a node's kernel within one module) and compares
 *  the arguments by the new kernel's rules. For the instantiations of one template that differ
 *  in what they compute, not in their arguments (a kernel with and without energies). Without
 *  a family, a kernel replaced by another means instantiating anew. Makes no CUDA call.
 *  Errors (MD_ERR_INVALID_ARGUMENT): NULL or empty arguments, @p func already in another family;
 *  a full registry (MD_ERR_OUT_OF_MEMORY). */
md_status md_cuda_graph_family(const void *func, const char *family);

/** @brief Capture what @p enqueue(@p ctx, @p stream) enqueues on @p stream into a new graph
 *  (cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal, cudaStreamEndCapture). The
 *  capture is always ended, also when @p enqueue fails; on failure *@p graph is NULL and the
 *  status is @p enqueue's or the capture's. @p stream must not be the legacy default stream. The
 *  caller destroys the graph (cudaGraphDestroy). A graph keeps the launch shapes of its capture:
 *  capture an MD step (md_cuda_sim_enqueue, md_cuda_nb_enqueue) after md_cuda_sim_poll or
 *  md_cuda_nb_plan_poll has seen a list build, since until then the pair kernel's grid covers the
 *  list's capacity (md_cuda_nb_plan::grid_items; in chapter 09, 23,568 atoms, that grid cost a
 *  captured step about 6 µs of GPU time, tutorial 09, section 8). */
md_status md_cuda_graph_capture(cudaStream_t stream, md_cuda_bench_fn enqueue, void *ctx, cudaGraph_t *graph);

/** @brief Instantiate @p g and upload it on @p stream. With cudaGraphInstantiateFlagUseNodePriority:
 *  each kernel node runs at the priority its stream had when it was captured (the MD step's state
 *  stream high, PME's default: md_cuda_queue_prioritize), not at the priority of the stream the
 *  graph is launched into, which would otherwise apply to every node. On failure *@p exec is
 *  NULL. */
md_status md_cuda_graph_instantiate(cudaGraph_t g, cudaStream_t stream, cudaGraphExec_t *exec);

/** @brief One node as md_cuda_graph_walk shows it. The argument pointers point into the graph's
 *  own storage: valid during the visit only. */
typedef struct md_cuda_graph_node {
    int index;              /**< position in the walk of its graph (0, 1, ...) */
    int depth;              /**< 0: the walked graph; 1: a child graph of it; ... */
    cudaGraphNode_t node;   /**< the node */
    cudaGraphNodeType type; /**< its type */
    int ndeps;              /**< its dependencies (edges into it) */
    const void *func;       /**< kernel nodes: the kernel (else NULL) */
    const char *name;       /**< kernel nodes: md_cuda_kernel_name(func), NULL if not in the launch registry */
    dim3 grid;              /**< kernel nodes: grid */
    dim3 block;             /**< kernel nodes: block */
    unsigned int smem;      /**< kernel nodes: dynamic shared memory (bytes) */
    int nparams;            /**< kernel nodes: parameters (cudaFuncGetParamInfo; -1: unknown) */
    void **args;            /**< kernel nodes: pointers to the nparams argument values (NULL when unknown) */
} md_cuda_graph_node;

/** @brief A visitor of md_cuda_graph_walk: return MD_OK to go on, anything else to stop the walk,
 *  which then returns it. */
typedef md_status (*md_cuda_graph_visit_fn)(void *ctx, const md_cuda_graph_node *node);

/** @brief Visit every node of @p graph in the walk order: the order of cudaGraphGetNodes, which for
 *  a captured graph is the order the work was enqueued. A child-graph node is visited, then the
 *  nodes of its graph (depth + 1). Errors: NULL arguments, CUDA errors, or the visitor's status. */
md_status md_cuda_graph_walk(cudaGraph_t graph, md_cuda_graph_visit_fn visit, void *ctx);

/** @brief What md_cuda_graph_compare decided. */
typedef enum md_cuda_graph_match {
    MD_CUDA_GRAPH_IDENTICAL = 0, /**< nothing compared differs: launch the executable graph as it is */
    MD_CUDA_GRAPH_UPDATABLE,     /**< same topology, differences only where allowed: cudaGraphExecUpdate */
    MD_CUDA_GRAPH_REINSTANTIATE  /**< a difference that must not be updated: instantiate the new graph */
} md_cuda_graph_match;

/** @brief The name of a verdict: "identical", "updatable" or "re-instantiate". */
const char *md_cuda_graph_match_name(md_cuda_graph_match match);

/** @brief The verdict of md_cuda_graph_compare, with its reason. */
typedef struct md_cuda_graph_verdict {
    md_cuda_graph_match match; /**< the decision */
    int node;                  /**< walk index, in the top-level graph, of the node that decided (-1: the
                                    graph as a whole, e.g. its node count) */
    int param;                 /**< the argument of that node that decided (-1: not an argument: the
                                    topology, the node type, the kernel, the launch shape) */
    const void *func;          /**< that node's kernel (NULL: not a kernel node) */
    int differing;             /**< nodes whose compared values differ */
    int nodes;                 /**< nodes compared (child graphs included) */
    char reason[320];          /**< one sentence naming the node, its kernel and the argument */
} md_cuda_graph_verdict;

/** @brief Compare graph @p b (newly captured) with graph @p a (the one the executable graph was made
 *  or last updated from), node by node in the walk order:
 *  - the topology: the node and edge counts, every node's type and every edge (as walk indices,
 *    with its edge data) must match, else MD_CUDA_GRAPH_REINSTANTIATE;
 *  - kernel nodes: the kernel must be the same (else re-instantiate); each argument is compared
 *    bytewise over its size (cudaFuncGetParamInfo) and a difference counts as its registered
 *    rule says (md_cuda_graph_register; unregistered: must match); the launch shape likewise;
 *  - memset nodes: destination and value may differ, width, height, pitch and element size must
 *    match; memcpy nodes: the pointers may differ, extent, pitches, positions and kind must
 *    match; event nodes: the event may differ; host nodes: function and data may differ; child
 *    graphs are compared recursively; other nodes (conditionals among them) are updatable at best.
 *  The verdict is the strongest difference found; its reason names the first node that has it.
 *  Errors: NULL arguments, CUDA errors, a registered kernel whose rules do not fit it. */
md_status md_cuda_graph_compare(cudaGraph_t a, cudaGraph_t b, md_cuda_graph_verdict *verdict);

/** @brief The kernel nodes that differ (kernel, launch shape or any argument byte) between graphs
 *  @p a and @p b of the same topology, paired as md_cuda_graph_compare pairs them: node k of the
 *  list is @p in_a[k] in @p a and @p in_b[k] in @p b (arrays of @p cap), their number in
 *  *@p count. These are the nodes whose parameters must be set to turn an executable graph of
 *  @p a into one of @p b (md_cuda_graph_exec_set_kernels): a step's kernels whose arguments
 *  change between kinds of step. Errors: NULL arguments; a difference in topology, in a node
 *  that is not a kernel node or inside a child graph, or more than @p cap nodes
 *  (MD_ERR_INVALID_ARGUMENT, naming it); CUDA errors. */
md_status md_cuda_graph_kernel_diff(cudaGraph_t a, cudaGraph_t b, cudaGraphNode_t *in_a, cudaGraphNode_t *in_b, int cap,
                                    int *count);

/** @brief For k < @p count: give node @p in_exec[k] of executable graph @p exec (a node of the graph
 *  @p exec was instantiated from) the kernel, launch shape and arguments of kernel node
 *  @p src[k] of any graph (cudaGraphKernelNodeGetParams, cudaGraphExecKernelNodeSetParams): the
 *  per-step parameter update of chapter 09's rung 3, with no capture. Errors: NULL arguments,
 *  CUDA errors (a kernel change CUDA does not allow among them). */
md_status md_cuda_graph_exec_set_kernels(cudaGraphExec_t exec, const cudaGraphNode_t *in_exec, const cudaGraphNode_t *src,
                                         int count);

/** @brief What an md_cuda_graph_cache does with a new capture. */
typedef enum md_cuda_graph_policy {
    MD_CUDA_GRAPH_POLICY_COMPARE = 0,  /**< compare with the registry: keep, update or instantiate anew */
    MD_CUDA_GRAPH_POLICY_REINSTANTIATE /**< instantiate every capture anew (chapter 09's rung 2) */
} md_cuda_graph_policy;

/** @brief An executable graph kept across captures: the graph it was made or last updated from,
 *  the executable graph, the last verdict and counters. A zeroed cache is empty with
 *  MD_CUDA_GRAPH_POLICY_COMPARE; set md_cuda_graph_cache::policy before the first capture for the
 *  other. Used from one host thread at a time. */
typedef struct md_cuda_graph_cache {
    md_cuda_graph_policy policy; /**< what to do with a new capture */
    cudaGraph_t graph;           /**< the graph @c exec was made or last updated from (owned) */
    cudaGraphExec_t exec;        /**< the executable graph (owned) */
    md_cuda_graph_verdict last;  /**< the verdict of the last capture */
    long long captures;          /**< captures so far */
    long long instantiations;    /**< cudaGraphInstantiate calls, the first included */
    long long updates;           /**< captures applied by cudaGraphExecUpdate */
    long long identical;         /**< captures found identical (nothing done) */
    long long refused;           /**< updates cudaGraphExecUpdate refused (then instantiated anew) */
    long long launches;          /**< md_cuda_graph_cache_launch calls */
    void *snap;                  /**< internal: what the comparison read of @c graph */
} md_cuda_graph_cache;

/** @brief Capture @p enqueue(@p ctx, @p stream) and bring the executable graph up to date. The
 *  first capture is instantiated (and uploaded, cudaGraphUpload); a later one, with
 *  MD_CUDA_GRAPH_POLICY_COMPARE, is compared with the kept graph and then dropped (identical),
 *  applied by cudaGraphExecUpdate (updatable; should CUDA refuse, counted in
 *  md_cuda_graph_cache::refused and instantiated anew) or instantiated anew, the new graph then
 *  being kept; with MD_CUDA_GRAPH_POLICY_REINSTANTIATE it is instantiated anew. Re-instantiations
 *  avoided = identical + updates. Launches nothing. Errors: those of the capture, the comparison
 *  and CUDA; on failure the cache keeps its previous executable graph. */
md_status md_cuda_graph_cache_capture(md_cuda_graph_cache *c, cudaStream_t stream, md_cuda_bench_fn enqueue,
                                      void *ctx);

/** @brief Launch the cache's executable graph on @p stream (cudaGraphLaunch). Errors: an empty cache
 *  (MD_ERR_INVALID_ARGUMENT), CUDA errors. */
md_status md_cuda_graph_cache_launch(md_cuda_graph_cache *c, cudaStream_t stream);

/** @brief Free the cache's graphs and zero it; safe on a zeroed cache. It does not wait for
 *  launches in flight: synchronise their stream first. */
void md_cuda_graph_cache_destroy(md_cuda_graph_cache *c);

/** @brief Launch kernel @p func (@p grid x @p block threads, @p smem bytes of dynamic shared
 *  memory, @p nargs arguments: @p args[i] points to a value of exactly the kernel's i-th parameter
 *  type, as for cudaLaunchKernel) on @p stream; when @p stream is capturing, as an explicit kernel
 *  node: it is added to the graph being captured after the capture's current dependencies
 *  (cudaStreamGetCaptureInfo, cudaGraphAddNode with their edge data), made the stream's only
 *  dependency (cudaStreamUpdateCaptureDependencies) and written to *@p node, so that its
 *  arguments can later be set on the executable graph (md_cuda_graph_kernel_node_set) without
 *  capturing again. When @p stream is not capturing the kernel is launched (cudaLaunchKernel) and
 *  *@p node is NULL. Registers @p func under @p name (may be NULL) in the launch registry.
 *
 *  A node handle is valid while its graph lives: with an md_cuda_graph_cache, use
 *  MD_CUDA_GRAPH_POLICY_REINSTANTIATE (every capture is kept), or keep the handles of the
 *  capture the cache kept. Errors: NULL @p func or @p node, @p nargs not the kernel's parameter
 *  count (when the runtime knows it), CUDA errors. */
md_status md_cuda_graph_kernel_node(cudaStream_t stream, const void *func, const char *name, dim3 grid, dim3 block,
                                    unsigned int smem, void **args, int nargs, cudaGraphNode_t *node);

/** @brief Set the arguments and launch shape of kernel node @p node in executable graph @p exec
 *  (cudaGraphExecKernelNodeSetParams): the next launch of @p exec runs @p func with them. The
 *  arguments as for md_cuda_graph_kernel_node; @p func must be the node's kernel. Only the
 *  executable graph changes, not the graph it came from: so a cache whose executable is set this
 *  way should not also compare new captures (policy MD_CUDA_GRAPH_POLICY_COMPARE), which would
 *  compare them with the captured arguments, not the ones set. Errors: NULL arguments, CUDA
 *  errors. */
md_status md_cuda_graph_kernel_node_set(cudaGraphExec_t exec, cudaGraphNode_t node, const void *func, dim3 grid,
                                        dim3 block, unsigned int smem, void **args, int nargs);

/** @brief In a capture on @p stream: add a copy of graph @p child (cudaGraphAddNode, a child-graph
 *  node that clones it) after the work captured so far; the work captured after it depends on
 *  it. A step captured once (with all the streams it forks to) thus becomes one node of another
 *  capture, e.g. the body of a WHILE loop (md_cuda_graph_loop), whose capture runs on a stream of
 *  its own that the step's other streams could not join. @p child must not contain conditional
 *  nodes. Writes the node to @p node (may be NULL). Errors: NULL @p child, @p stream not
 *  capturing (MD_ERR_INVALID_ARGUMENT), CUDA errors. */
md_status md_cuda_graph_add_child(cudaStream_t stream, cudaGraph_t child, cudaGraphNode_t *node);

/** @brief In a capture on @p stream: create a conditional handle on the graph being captured
 *  (cudaGraphConditionalHandleCreate). With @p assign_default non-zero, every launch of the graph
 *  starts with the condition at @p default_value; otherwise it holds what a kernel last set.
 *  Errors: @p stream not capturing (MD_ERR_INVALID_ARGUMENT), CUDA errors. */
md_status md_cuda_graph_cond_handle(cudaStream_t stream, unsigned int default_value, int assign_default,
                                    cudaGraphConditionalHandle *handle);

/** @brief In a capture on @p stream: add a conditional node of @p type on @p handle after the work
 *  captured so far (the work captured after it depends on it). cudaGraphCondTypeIf: its body runs
 *  once if the condition is non-zero; cudaGraphCondTypeWhile: its body runs again and again while
 *  the condition is non-zero, checked before every pass. The body is what @p body(@p ctx,
 *  @p body_stream) enqueues, captured into the node's body graph (cudaStreamBeginCaptureToGraph)
 *  on @p body_stream, a stream of the caller's that is not capturing. A kernel sets the condition
 *  on the device with cudaGraphSetConditional(handle, value). Writes the node to @p node (may be
 *  NULL). Errors: NULL @p body, @p body_stream NULL or @p stream, a type other than IF and WHILE,
 *  @p stream not capturing, @p body's status, CUDA errors. */
md_status md_cuda_graph_cond_node(cudaStream_t stream, cudaStream_t body_stream, cudaGraphConditionalNodeType type,
                                  cudaGraphConditionalHandle handle, md_cuda_bench_fn body, void *ctx,
                                  cudaGraphNode_t *node);

/** @brief Enqueue on @p stream one thread that sets @p handle's condition to (*@p d_word != 0): an
 *  IF node after it runs its body exactly when the device word is set, e.g. the rebuild flag a
 *  displacement kernel wrote. Errors: NULL @p d_word, launch errors. */
md_status md_cuda_graph_cond_from_word(cudaStream_t stream, cudaGraphConditionalHandle handle, const long long *d_word);

/** @brief In a capture on @p stream: a WHILE loop that runs @p body exactly @p n times per launch of
 *  the graph, fewer if a device flag is raised. A kernel sets *@p d_count = 0 and the condition to
 *  (n > 0 and no flag); the WHILE node's body is @p body(@p ctx, @p body_stream) then a kernel
 *  that adds 1 to *@p d_count and sets the condition to (*d_count < n and no flag). @p d_flags
 *  (may be NULL) is a queue's flags block (md_cuda_queue::d_flags): a raised flag (word 0
 *  non-zero) ends the loop after the pass that raised it. After a launch *@p d_count holds the
 *  passes run; body kernels may read it (the index of the pass). @p n is an argument of those two
 *  kernels (registered MD_CUDA_PARAM_MAY_DIFFER). Errors: NULL arguments, @p n < 0, those of
 *  md_cuda_graph_cond_node. */
md_status md_cuda_graph_loop(cudaStream_t stream, cudaStream_t body_stream, long long *d_count, long long n,
                             const unsigned long long *d_flags, md_cuda_bench_fn body, void *ctx);

/** @brief Enqueue @p body(@p ctx, ...) so that it runs only when the device word *@p d_word is
 *  non-zero, in a way that suits both paths of an enqueue: when @p stream is capturing, as an IF
 *  node decided on the device (md_cuda_graph_cond_handle, md_cuda_graph_cond_from_word,
 *  md_cuda_graph_cond_node with @p body_stream), so a graph launch skips the body's kernels
 *  altogether; otherwise @p body(@p ctx, @p stream) is enqueued on @p stream as it is, and its
 *  kernels must themselves do nothing while the word is zero (device-gated, as a neighbour-list
 *  rebuild is). The same enqueue code thus gives a stream step and an IF-node graph step with
 *  the same results. Errors: NULL @p d_word or @p body, those of the calls named. */
md_status md_cuda_graph_run_if(cudaStream_t stream, cudaStream_t body_stream, const long long *d_word,
                               md_cuda_bench_fn body, void *ctx);

/** @brief Enqueue on @p stream one thread that writes the GPU's global timer (ns, %globaltimer) to
 *  @p d_times[*@p d_next] and adds 1 to *@p d_next, unless *@p d_next >= @p cap: a timestamp on the
 *  GPU's timeline, in stream order, that works the same on a stream, in a captured graph and in a
 *  WHILE body. Chapter 09 stamps the start and end of every step with it to measure the GPU's
 *  idle gaps between steps (the stamp itself takes the GPU about as long as an empty kernel).
 *  Errors: NULL pointers, @p cap < 0, launch errors. */
md_status md_cuda_timestamp_enqueue(cudaStream_t stream, unsigned long long *d_times, long long *d_next, long long cap);

/* ======================================================================== */
/* sched: many tasks (replicas) on one GPU (chapter 10)                     */
/* ======================================================================== */

/* MANY SMALL SYSTEMS ON ONE GPU. A replica's host code is sequential: enqueue some steps on its
 * stream, wait for them, read its energy, decide, enqueue again. One such replica leaves the GPU
 * idle while its host waits and decides; several run one after another leave it idle as often.
 * md_cuda_sched_run runs N tasks, each an ordinary function of that shape, in one of three ways
 * (md_cuda_sched_mode), and measures how busy they keep the GPU:
 *
 *   MD_CUDA_SCHED_SEQUENTIAL  one task at a time: a wait blocks (cudaEventSynchronize) and the
 *       same task goes on; at a barrier the next task runs. The baseline.
 *   MD_CUDA_SCHED_THREADS     one host thread per task: a wait blocks that thread, a barrier is
 *       a mutex and a condition variable. The GPU sees all streams at once; the host pays for
 *       threads, locks and the operating system's context switches.
 *   MD_CUDA_SCHED_COROUTINES  one host thread, every task a coroutine (md.h, section co): a wait
 *       records an event on the task's stream and yields; the scheduler polls the waiting tasks'
 *       events round robin (cudaEventQuery) and resumes each whose event has completed, in the
 *       same pass. A ready task is thus resumed within one pass over the tasks: none starves
 *       while others are busy, and the counters (md_cuda_task_stats) show it.
 *
 * A task calls, from its function (md_cuda_task_fn):
 *   md_cuda_task_begin(t, stream)  before it enqueues a batch of GPU work: records the batch's
 *       start event (for the busy measure; optional);
 *   md_cuda_task_wait(t, stream)   when it needs the results of everything enqueued on the stream
 *       so far: records the batch's end event and returns once it has completed;
 *   md_cuda_task_barrier(t, fn, arg) where every task must arrive before any goes on (a replica
 *       exchange reads every replica's energy): fn(arg) runs once, after the last live task has
 *       arrived and before any leaves; every task gets its status. A task that returns leaves
 *       the barrier count, so the others do not wait for it.
 * The same function runs unchanged under the three modes, so their results can be compared
 * bitwise (tests/gpu_replicas.cu).
 *
 * GPU BUSY. Each batch between a begin and the wait after it gives an interval of the GPU's clock
 * (cudaEventElapsedTime from an origin event); the busy time is the length of the union of all
 * tasks' intervals, the span from the first begin to the last end, and busy_fraction their
 * ratio: the fraction of the run during which some stream had work in flight. It counts the
 * launch gaps inside a batch as busy (the stream holds queued work then), and the host's time
 * between a completed batch and its next begin as idle, which is what the modes differ in. A
 * batch without a begin is not measured (md_cuda_task_stats::unmeasured).
 *
 * Errors. A task that returns an error ends; every later wait or barrier of the other tasks
 * returns MD_ERR_INVALID_ARGUMENT ("another task failed"), so they unwind, and md_cuda_sched_run
 * returns the first failure's status with its message. CUDA errors of a batch (a kernel fault)
 * are returned by the wait that finds them. Tasks run on the device that was current when
 * md_cuda_sched_run was called (thread tasks make it current on their thread). */

/** @brief How md_cuda_sched_run runs its tasks (see the section's manual). */
typedef enum md_cuda_sched_mode {
    MD_CUDA_SCHED_SEQUENTIAL = 0, /**< one task at a time, blocking waits */
    MD_CUDA_SCHED_THREADS,        /**< a host thread per task, blocking waits */
    MD_CUDA_SCHED_COROUTINES,     /**< coroutines on one thread: a wait yields, events polled round robin */
    MD_CUDA_SCHED_MODE_COUNT      /**< number of modes */
} md_cuda_sched_mode;

/** @brief Short name of a mode: "sequential", "threads", "coroutines" ("?" otherwise). */
const char *md_cuda_sched_mode_name(md_cuda_sched_mode mode);

/** @brief A task's counters (md_cuda_task::stats; md_cuda_sched_run also copies them out). */
typedef struct md_cuda_task_stats {
    long long waits;         /**< md_cuda_task_wait calls */
    long long barriers;      /**< md_cuda_task_barrier calls */
    long long resumes;       /**< coroutines: times the scheduler resumed it (waits + barriers + 1 when all went well) */
    long long polls;         /**< coroutines: cudaEventQuery calls on its wait events */
    long long ready_first;   /**< coroutines: waits whose event had completed at the first poll (the GPU waited
                                  for the host: this stream was idle) */
    long long max_lag;       /**< the most completed waits it was behind the task furthest ahead, at any of its
                                  completions (a starving task's lag keeps growing) */
    long long unmeasured;    /**< waits that closed a batch without a md_cuda_task_begin */
    double gpu_s;            /**< sum of its batches' GPU intervals (s) */
    double host_wait_s;      /**< host seconds from its waits to the resumes after them */
    size_t stack_used;       /**< coroutines: bytes of its stack it used (md_co_stack_used) */
} md_cuda_task_stats;

/** @brief What md_cuda_sched_run measured. */
typedef struct md_cuda_sched_stats {
    md_cuda_sched_mode mode; /**< the mode run */
    int ntask;               /**< tasks */
    double wall_s;           /**< host seconds of the run */
    double span_s;           /**< GPU seconds from the first batch's begin to the last batch's end */
    double busy_s;           /**< GPU seconds with at least one batch in flight (union of the intervals) */
    double busy_fraction;    /**< busy_s / span_s (NaN when nothing was measured) */
    long long batches;       /**< measured batches, all tasks */
    long long passes;        /**< coroutines: passes of the scheduler over the tasks */
    long long idle_passes;   /**< coroutines: passes that resumed nothing (every task waiting on the GPU) */
    long long max_lag;       /**< the largest md_cuda_task_stats::max_lag */
    long long timeline_n;    /**< batches written to md_cuda_sched_desc::timeline */
} md_cuda_sched_stats;

/** @brief A task of a run, as its function sees it. */
typedef struct md_cuda_task {
    int index;                /**< this task, 0 .. ntask - 1 */
    int ntask;                /**< tasks in the run */
    md_cuda_sched_mode mode;  /**< how the run schedules */
    md_cuda_task_stats stats; /**< its counters so far */
    void *run;                /**< internal: the run */
} md_cuda_task;

/** @brief A task's body: the whole sequential life of a replica. Return MD_OK, or an error (which
 *  ends the run, see the manual). */
typedef md_status (*md_cuda_task_fn)(md_cuda_task *t, void *arg);

/** @brief Work done once at a barrier, when every live task has arrived (a replica exchange). */
typedef md_status (*md_cuda_barrier_fn)(void *arg);

/** @brief Options of md_cuda_sched_run; a zero field takes its default. */
typedef struct md_cuda_sched_desc {
    md_cuda_sched_mode mode; /**< how to run (default MD_CUDA_SCHED_SEQUENTIAL) */
    size_t stack_size;       /**< coroutine stack per task, bytes (default 1 MiB: the CUDA runtime's calls need tens of KiB) */
    double *timeline;        /**< optional: room for timeline_cap measured batches, 3 doubles each (task, GPU begin s,
                                  GPU end s, from the run's origin), in task order then batch order (for figures) */
    long long timeline_cap;  /**< batches @c timeline holds */
} md_cuda_sched_desc;

/** @brief Run @p ntask tasks @p fn(task, @p args[i]) to completion as @p desc says (NULL: defaults)
 *  and measure them: run-wide numbers into @p stats, each task's counters into @p per_task
 *  (@p ntask entries); either may be NULL. Errors: NULL @p fn, @p ntask < 1, a mode out of range
 *  (MD_ERR_INVALID_ARGUMENT), coroutines unavailable (MD_ERR_UNSUPPORTED), CUDA errors, and the
 *  first task's failure (see the manual). @p args may be NULL (every task gets NULL). */
md_status md_cuda_sched_run(const md_cuda_sched_desc *desc, int ntask, md_cuda_task_fn fn, void *const *args,
                            md_cuda_sched_stats *stats, md_cuda_task_stats *per_task);

/** @brief From a task: record the start of a batch of GPU work on @p stream (call it before the
 *  batch's first enqueue). Errors: @p t not a task of a running run, CUDA errors. */
md_status md_cuda_task_begin(md_cuda_task *t, cudaStream_t stream);

/** @brief From a task: return once everything enqueued on @p stream so far has completed (see the
 *  modes). Errors: the batch's CUDA error, another task's failure, @p t not a task. */
md_status md_cuda_task_wait(md_cuda_task *t, cudaStream_t stream);

/** @brief From a task: wait until every live task has arrived; the last arrival's @p fn(@p arg)
 *  (may be NULL) runs once before any task goes on, and its status is returned to all. Every
 *  task should pass the same @p fn and @p arg. Errors: @p fn's, another task's failure. */
md_status md_cuda_task_barrier(md_cuda_task *t, md_cuda_barrier_fn fn, void *arg);

/* ======================================================================== */
/* mapped: pinned host memory the GPU writes and reads (chapter 11)         */
/* ======================================================================== */

/* ZERO-COPY READS OF WHAT THE HOST NEEDS EVERY STEP. A replica's host reads a few words after
 * each step: energies, a "list rebuilt" count, NaN and overflow flags; and writes a few: the
 * exchange decision (a velocity factor). A cudaMemcpyAsync per step costs a copy on the stream
 * (a DMA set-up and its completion, a few microseconds of latency) for a few hundred bytes.
 * Mapped memory (cudaHostAlloc with cudaHostAllocMapped) is pinned host memory with a device
 * address (cudaHostGetDevicePointer): a kernel's stores to it travel over the bus (PCIe or
 * NVLink-C2C) straight into host memory, with no copy to enqueue.
 *
 *   md_cuda_mapped           a mapped block: host and device addresses of the same bytes;
 *   md_cuda_report_enqueue   one small kernel that gathers up to MD_CUDA_REPORT_MAX_SEGMENTS
 *                            device arrays of 64-bit words into a report (mapped memory, or a
 *                            device buffer for the copy rung), then publishes a sequence number;
 *   md_cuda_mapped_store / md_cuda_mapped_publish (device) and md_cuda_mapped_load (host).
 *
 * MEMORY ORDERING, what the tests check (tests/gpu_mapped.cu):
 *   1. After an event: the host reads a report after cudaEventQuery / cudaEventSynchronize of
 *      an event recorded after the kernel says it completed. Completed work's writes to mapped
 *      memory are visible to the host then; nothing more is needed than reads the compiler
 *      cannot keep in a register from before the wait (md_cuda_mapped_load: a volatile-strength
 *      atomic load with acquire order, so on AArch64 hosts (Grace) later reads are not hoisted
 *      above it either).
 *   2. While the kernel runs (polling, no event): the device writes the payload, then
 *      __threadfence_system(), then the sequence word (md_cuda_mapped_publish). The fence
 *      orders the payload's stores before the sequence word's for every observer, the host
 *      included; the host loads the sequence word with acquire order, then the payload. A host
 *      that sees sequence s sees the payload of s or of a later publish, never an older one.
 *   3. No torn words: every word is written with one aligned 64-bit store (st.volatile.u64) and
 *      read with one aligned 64-bit load, so a reader sees the old or the new value of a word,
 *      never half of each. Structures wider than 8 bytes have no such guarantee: use rule 2.
 * Device reads of mapped memory (the exchange decision) cross the bus each time: fine for a word
 * per step, slow for arrays (chapter 11 measures where mapped memory loses). Writes the host makes
 * before it enqueues the kernel that reads them are seen by that kernel (the launch orders them).
 */

/** @brief A block of mapped pinned host memory: the same bytes at a host and a device address. */
typedef struct md_cuda_mapped {
    void *host;   /**< host address (pinned, write-back cached on the host) */
    void *device; /**< the device's address of the same memory (cudaHostGetDevicePointer) */
    size_t bytes; /**< size */
} md_cuda_mapped;

/** @brief Allocate @p bytes of mapped pinned memory (cudaHostAlloc, cudaHostAllocMapped |
 *  cudaHostAllocPortable), zero it and get its device address. Errors: NULL @p m, @p bytes 0
 *  (MD_ERR_INVALID_ARGUMENT), a device that cannot map host memory (MD_ERR_UNSUPPORTED), CUDA
 *  errors (out of pinned memory). On failure @p m is untouched. */
md_status md_cuda_mapped_alloc(md_cuda_mapped *m, size_t bytes);

/** @brief Free a mapped block (cudaFreeHost) and zero it; safe on a zeroed block. The caller makes
 *  sure no kernel still uses it. */
void md_cuda_mapped_free(md_cuda_mapped *m);

/** @brief Device: store @p v at @p p with one aligned 64-bit volatile store (never torn, never kept
 *  in a register or cache by the compiler). */
static __device__ __forceinline__ void md_cuda_mapped_store(unsigned long long *p, unsigned long long v) {
    *(volatile unsigned long long *)p = v;
}

/** @brief Device: publish sequence number @p seq at @p seq_word after the payload this thread (or,
 *  after a __syncthreads(), this block) stored: __threadfence_system() orders those stores before
 *  this one for every observer, the host included (rule 2 of the section's manual). */
static __device__ __forceinline__ void md_cuda_mapped_publish(unsigned long long *seq_word, unsigned long long seq) {
    __threadfence_system();
    md_cuda_mapped_store(seq_word, seq);
}

/** @brief Host: load the 64-bit word at @p p (8-byte aligned) with one atomic load in acquire order:
 *  never torn, always read from memory, and later reads are not moved before it. */
static inline unsigned long long md_cuda_mapped_load(const void *p) {
    return __atomic_load_n((const unsigned long long *)p, __ATOMIC_ACQUIRE);
}

/** @brief Host: store @p v at the 8-byte aligned word @p p with one atomic store in release order
 *  (for words a kernel reads, e.g. an exchange decision, or a stop word a running kernel polls). */
static inline void md_cuda_mapped_store_host(void *p, unsigned long long v) {
    __atomic_store_n((unsigned long long *)p, v, __ATOMIC_RELEASE);
}

/** @brief Enqueue a grid-stride copy of @p bytes (a multiple of 16, both addresses 16-byte aligned) from
 *  @p src to @p dst, device addresses of device or mapped memory, by a kernel (not a DMA copy): what
 *  a kernel pays to write its results straight into mapped memory, or to read its inputs from it
 *  (chapter 11 times both against device memory and cudaMemcpyAsync). Errors: NULL or misaligned
 *  pointers, @p bytes not a multiple of 16 (MD_ERR_INVALID_ARGUMENT), launch errors. */
md_status md_cuda_mapped_copy_enqueue(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/** @brief Most device arrays one report gathers. */
#define MD_CUDA_REPORT_MAX_SEGMENTS 8

/** @brief What md_cuda_report_enqueue gathers: @p nseg device arrays of 64-bit words, @p src[k]
 *  with @p count[k] words, concatenated in order. Passed to the kernel by value, so a captured
 *  graph keeps the addresses (the arrays' contents may change). */
typedef struct md_cuda_report_desc {
    int nseg;                                               /**< arrays, 1 .. MD_CUDA_REPORT_MAX_SEGMENTS */
    const unsigned long long *src[MD_CUDA_REPORT_MAX_SEGMENTS]; /**< device addresses */
    int count[MD_CUDA_REPORT_MAX_SEGMENTS];                 /**< words of each (>= 0) */
} md_cuda_report_desc;

/** @brief Words of a report for @p d: the gathered words and the sequence word after them. */
int md_cuda_report_words(const md_cuda_report_desc *d);

/** @brief Enqueue on @p stream one kernel (one block) that copies the words of @p d into @p dst
 *  (a device address: a mapped block's md_cuda_mapped::device, or device memory for the copy
 *  rung), each with one 64-bit store, then adds 1 to the device counter *@p d_seq and publishes
 *  the new value at dst[total words] (md_cuda_mapped_publish). @p dst holds
 *  md_cuda_report_words(@p d) words. Capturable; a graph replay publishes the next sequence
 *  number. Errors: NULL pointers, a bad descriptor (MD_ERR_INVALID_ARGUMENT), launch errors. */
md_status md_cuda_report_enqueue(const md_cuda_report_desc *d, unsigned long long *dst, unsigned long long *d_seq,
                                 cudaStream_t stream);

#endif /* MD_CUDA_CU_H */

/* ======================================================================== */
/* implementation                                                           */
/* ======================================================================== */

#ifdef MD_CUDA_IMPLEMENTATION
#ifndef MD_CUDA_IMPLEMENTATION_INCLUDED
#define MD_CUDA_IMPLEMENTATION_INCLUDED

#include <math.h>
#include <string.h>
#include <mutex>

/* ---- core ---- */

md_status md_cuda_error(cudaError_t err, const char *what, const char *file, int line) {
    md_status st = (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                       ? MD_ERR_NO_DEVICE
                       : MD_ERR_CUDA;
    (void)cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
    return md_set_error(st, file, line, NULL, "%s%s failed: %s (%s)",
                        st == MD_ERR_NO_DEVICE ? "no NVIDIA driver / no GPU: " : "", what,
                        cudaGetErrorString(err), cudaGetErrorName(err));
}

/* ---- the kernel registry: a fixed table, appended under a mutex, never moved ---- */

typedef struct md__kernel_entry {
    const void *func;
    char name[MD_CUDA_KERNEL_NAME_MAX];
} md__kernel_entry;

static md__kernel_entry md__kernels[MD_CUDA_KERNEL_REGISTRY_MAX];
static std::atomic<int> md__kernel_count(0); /* entries [0, count) are complete */
static std::mutex md__kernel_mutex;          /* serialises appends */

static int md__kernel_find(const void *func, int count) {
    for (int i = 0; i < count; i++)
        if (md__kernels[i].func == func) return i;
    return -1;
}

int md_cuda_kernel_register(const void *func, const char *name) {
    int i, n;
    if (!func || !name) return -1;
    std::lock_guard<std::mutex> lock(md__kernel_mutex);
    n = md__kernel_count.load(std::memory_order_relaxed);
    if ((i = md__kernel_find(func, n)) >= 0) return i;
    if (n >= MD_CUDA_KERNEL_REGISTRY_MAX) return -1;
    md__kernels[n].func = func;
    snprintf(md__kernels[n].name, sizeof md__kernels[n].name, "%s", name);
    md__kernel_count.store(n + 1, std::memory_order_release); /* publish the whole entry */
    return n;
}

const char *md_cuda_kernel_name(const void *func) {
    const int i = md__kernel_find(func, md__kernel_count.load(std::memory_order_acquire));
    return i >= 0 ? md__kernels[i].name : NULL;
}

int md_cuda_kernel_count(void) { return md__kernel_count.load(std::memory_order_acquire); }

md_status md_cuda_kernel_at(int i, const void **func, const char **name) {
    const int n = md__kernel_count.load(std::memory_order_acquire);
    if (i < 0 || i >= n)
        return md_set_error(MD_ERR_RANGE, "md_cuda_kernel_at", 0, "i", "%d is outside 0..%d", i, n - 1);
    if (func) *func = md__kernels[i].func;
    if (name) *name = md__kernels[i].name;
    return MD_OK;
}

md_status md_cuda_launch_error(cudaError_t err, const void *func, const char *file, int line) {
    char what[MD_CUDA_KERNEL_NAME_MAX + 32];
    const char *name = md_cuda_kernel_name(func);
    if (name) snprintf(what, sizeof what, "launch of %s", name);
    else snprintf(what, sizeof what, "launch of kernel %p", func);
    return md_cuda_error(err, what, file, line);
}

int md_cuda_available(void) {
    int count = 0, major = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        md_cuda_error(e, "cudaGetDeviceCount", __FILE__, __LINE__);
        return 0;
    }
    if (count < 1) {
        md_set_error(MD_ERR_NO_DEVICE, "md_cuda_available", 0, NULL, "no NVIDIA driver / no GPU: no CUDA device found");
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

/* ---- plans ---- */

/* cudaMalloc (pinned = 0) or cudaHostAlloc (pinned = 1) of count * size bytes, checked for
 * overflow; a failure names what and the size. */
static md_status md__cuda_alloc(void **p, size_t count, size_t size, const char *what, int pinned) {
    const char *fn = pinned ? "cudaHostAlloc" : "cudaMalloc";
    size_t bytes;
    cudaError_t e;
    *p = NULL;
    if (size != 0 && count > (size_t)-1 / size)
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, what, "%zu x %zu bytes overflow", count, size);
    bytes = count * size != 0 ? count * size : 1;
    e = pinned ? cudaHostAlloc(p, bytes, cudaHostAllocDefault) : cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        char w[160];
        *p = NULL;
        snprintf(w, sizeof w, "%s(%s, %zu bytes)", fn, what ? what : "buffer", count * size);
        return md_cuda_error(e, w, __FILE__, __LINE__);
    }
    return MD_OK;
}

md_status md_cuda_alloc(void **d, size_t count, size_t size, const char *what) {
    return md__cuda_alloc(d, count, size, what, 0);
}

md_status md_cuda_alloc_pinned(void **h, size_t count, size_t size, const char *what) {
    return md__cuda_alloc(h, count, size, what, 1);
}

void md_cuda_free(void *d) {
    if (d) (void)cudaFree(d);
}

void md_cuda_free_pinned(void *h) {
    if (h) (void)cudaFreeHost(h);
}

void md_cuda_queue_destroy(md_cuda_queue *q) {
    if (!q) return;
    if (q->stream) {
        (void)cudaStreamSynchronize(q->stream);
        (void)cudaStreamDestroy(q->stream);
    }
    md_cuda_free(q->d_flags);
    md_cuda_free_pinned(q->h_flags);
    memset(q, 0, sizeof *q);
}

md_status md_cuda_queue_prioritize(md_cuda_queue *q, int high) {
    int least, greatest;
    cudaStream_t s;
    cudaError_t e;
    if (!q || !q->stream)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_queue_prioritize", 0, "q", "is not made (md_cuda_queue_create)");
    if ((e = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess ||
        (e = cudaStreamSynchronize(q->stream)) != cudaSuccess ||
        (e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high ? greatest : least)) != cudaSuccess)
        return md_cuda_error(e, "md_cuda_queue_prioritize", __FILE__, __LINE__);
    (void)cudaStreamDestroy(q->stream);
    q->stream = s;
    return MD_OK;
}

md_status md_cuda_queue_create(md_cuda_queue *q) {
    md_cuda_queue t;
    md_status st;
    cudaError_t e;
    if (!q) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_queue_create", 0, "q", "is NULL");
    memset(q, 0, sizeof *q);
    memset(&t, 0, sizeof t);
    if ((e = cudaGetDevice(&t.device)) != cudaSuccess) return md_cuda_error(e, "cudaGetDevice", __FILE__, __LINE__);
    if ((e = cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking)) != cudaSuccess) {
        t.stream = NULL;
        return md_cuda_error(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    if ((st = md_cuda_alloc((void **)&t.d_flags, MD_CUDA_FLAG_WORDS, sizeof *t.d_flags, "flags")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_flags, MD_CUDA_FLAG_WORDS, sizeof *t.h_flags, "flags mirror")) != MD_OK)
        goto fail;
    memset(t.h_flags, 0, MD_CUDA_FLAG_WORDS * sizeof *t.h_flags);
    if ((e = cudaMemsetAsync(t.d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof *t.d_flags, t.stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(t.stream)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemsetAsync(flags)", __FILE__, __LINE__);
        goto fail;
    }
    *q = t;
    return MD_OK;
fail:
    md_cuda_queue_destroy(&t);
    return st;
}

int md_cuda_queue_flag(const md_cuda_queue *q, md_cuda_flag flag, unsigned long long *detail) {
    unsigned long long d;
    if (!q || !q->h_flags || (int)flag < 0 || flag >= MD_CUDA_FLAG_COUNT) return 0;
    if (!((q->h_flags[0] >> (int)flag) & 1ull)) return 0;
    d = q->h_flags[1 + (int)flag];
    if (detail) *detail = flag == MD_CUDA_FLAG_OVERFLOW ? d : ~d;
    return 1;
}

md_status md_cuda_queue_sync(md_cuda_queue *q, const char *where, const md_cuda_flag_text *text) {
    static const char *const fields[MD_CUDA_FLAG_COUNT] = {"input", "capacity", "input"};
    static const char *const formats[MD_CUDA_FLAG_COUNT] = {"element %llu is not finite", "exceeded: %llu needed",
                                                           "element %llu is out of range"};
    char msg[256];
    unsigned long long detail = 0;
    int f;
    if (!q || !q->stream || !q->d_flags)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where ? where : "md_cuda_queue_sync", 0, "queue",
                            "is not made (md_cuda_queue_create)");
    MD_CUDA_TRY(cudaMemcpyAsync(q->h_flags, q->d_flags, MD_CUDA_FLAG_WORDS * sizeof *q->h_flags,
                                cudaMemcpyDeviceToHost, q->stream));
    MD_CUDA_TRY(cudaStreamSynchronize(q->stream));
    if (q->h_flags[0] == 0) return MD_OK;
    MD_CUDA_TRY(cudaMemsetAsync(q->d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof *q->d_flags, q->stream));
    for (f = 0; f < MD_CUDA_FLAG_COUNT; f++)
        if (md_cuda_queue_flag(q, (md_cuda_flag)f, &detail)) break;
    if (f == MD_CUDA_FLAG_COUNT)
        return md_set_error(MD_ERR_RANGE, where, 0, "flags", "unknown device flags 0x%llx", q->h_flags[0]);
    /* the format comes from the caller's table or the defaults above; it takes one %llu */
    snprintf(msg, sizeof msg, text && text[f].format ? text[f].format : formats[f], detail);
    return md_set_error(MD_ERR_RANGE, where, 0, text && text[f].field ? text[f].field : fields[f], "%s", msg);
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
            for (k = 0; k < MD__CEIL_CHAINS; k++) x[k] = md_cuda_rsqrt_mufu(x[k]) + c;
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

/* Empty; the argument is there because MD_CUDA_LAUNCH needs one. */
__global__ void md__ceil_empty_kernel(int unused) { (void)unused; }

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
        MD_CUDA_LAUNCH(md__ceil_rsqrt_kernel, c->grid, MD__CEIL_BLOCK, 0, stream, (const float *)c->in,
                       (float *)c->out, c->iters);
        break;
    case MD__CEIL_FMA:
        MD_CUDA_LAUNCH(md__ceil_fma_kernel, c->grid, MD__CEIL_BLOCK, 0, stream, (const float *)c->in,
                       (float *)c->out, c->iters);
        break;
    case MD__CEIL_SMEM_ATOMIC:
        MD_CUDA_LAUNCH(md__ceil_smem_atomic_kernel, c->grid, MD__CEIL_BLOCK, 0, stream, (const int *)c->in,
                       (int *)c->out, c->iters);
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
    MD_CUDA_LAUNCH(md__ceil_copy_kernel, c->grid, MD__CEIL_BLOCK, 0, stream, c->src, c->dst, c->n);
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
        MD_CUDA_LAUNCH(md__ceil_empty_kernel, 1, 1, 0, stream, 0);
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
    if ((st = md_cuda_graph_instantiate(graph, stream, &c.exec)) != MD_OK) goto done;
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

/* One JSON number as md.h's md_bench_json writes it: %.6g, or null for NaN and infinities. */
static void md__cuda_json_number(char *buf, size_t cap, double v) {
    if (isfinite(v)) snprintf(buf, cap, "%.6g", v);
    else snprintf(buf, cap, "null");
}

int md_cuda_ceilings_json(char *buf, size_t cap, const md_cuda_ceilings *c) {
    enum { NUM = 12 };
    char dev[6 * sizeof c->device], num[NUM][32];
    double v[NUM], per_clk;
    size_t k = 0, i;
    if (!c) return -1;
    /* the device name as a JSON string: quote and backslash escaped, control characters as \u00XX */
    for (i = 0; i < sizeof c->device && c->device[i]; i++) {
        const unsigned char ch = (unsigned char)c->device[i];
        if (ch == '"' || ch == '\\') k += (size_t)snprintf(dev + k, sizeof dev - k, "\\%c", ch);
        else if (ch < 0x20) k += (size_t)snprintf(dev + k, sizeof dev - k, "\\u%04x", ch);
        else dev[k++] = (char)ch;
    }
    dev[k] = '\0';
    per_clk = (c->sm_count > 0 && c->clock_khz > 0) ? (double)c->sm_count * c->clock_khz * 1e3 : NAN;
    v[0] = c->clock_khz > 0 ? c->clock_khz * 1e-3 : NAN;
    v[1] = c->rsqrt_per_s;
    v[2] = c->rsqrt_per_s / per_clk;
    v[3] = c->fma_per_s;
    v[4] = c->fma_per_s / per_clk;
    v[5] = 2.0 * c->fma_per_s;
    v[6] = c->dram_bytes_per_s;
    v[7] = c->memcpy_bytes_per_s;
    v[8] = c->smem_atomic_per_s;
    v[9] = c->smem_atomic_per_s / per_clk;
    v[10] = c->launch_s;
    v[11] = c->graph_node_s;
    for (i = 0; i < NUM; i++) md__cuda_json_number(num[i], sizeof num[i], v[i]);
    /* one snprintf: it returns the length the whole object needs, as the contract says */
    return snprintf(buf, buf ? cap : 0,
                    "{\"schema\":\"md_ceilings/1\",\"device\":\"%s\",\"sm_count\":%d,\"clock_mhz\":%s,\"rsqrt_per_s\":%s,"
                    "\"rsqrt_per_sm_clk\":%s,\"fma_per_s\":%s,\"fma_per_sm_clk\":%s,\"flop_per_s\":%s,"
                    "\"dram_bytes_per_s\":%s,\"memcpy_bytes_per_s\":%s,\"smem_atomic_per_s\":%s,"
                    "\"smem_atomic_per_sm_clk\":%s,\"launch_s\":%s,\"graph_node_s\":%s}",
                    dev, c->sm_count, num[0], num[1], num[2], num[3], num[4], num[5], num[6], num[7], num[8], num[9],
                    num[10], num[11]);
}

/* ---- dcs ---- */

/* Every DCS kernel reads the grid geometry in float: point (i, j, k) is at
 * (ox + i hx, oy + j hy, oz + k hz). The output has onx points per row and ony rows per
 * plane: the grid's own nx, ny, or more when the rung pads to whole tiles. */
typedef struct md__dcs_geom {
    float ox, oy, oz, hx, hy, hz;
    int nx, ny, nz, onx, ony;
} md__dcs_geom;

/* The atoms of the constant-memory rungs, one chunk at a time. Every thread of a warp reads
 * the same atom at the same time: the constant cache broadcasts it in one transaction. */
__constant__ float4 md__dcs_catoms[MD_DCS_CONST_CHUNK];

/* Public, in the file with MD_CUDA_IMPLEMENTATION only (the buffer lives there): atom a of the
 * constant buffer, for a kernel of one's own that reads the atoms a DCS plan of a
 * constant-memory rung put there (bench/hybrid_shapes.cu, bench/hybrid_rule.cu). Make such a
 * plan with at most MD_DCS_CONST_CHUNK atoms (p.const_resident is then 1 after the upload) and
 * read md_cuda_dcs_const_atom(0 .. n - 1) on the plan's stream while the plan exists. */
static __device__ __forceinline__ float4 md_cuda_dcs_const_atom(int a) { return md__dcs_catoms[a]; }

/* Rung 1, scatter: one thread per atom adds q/r to every point with atomicAdd. All threads
 * of a warp add to the same point at the same time, so the L2 applies their atomics one
 * after another; the output must start at zero. */
__global__ void md__dcs_scatter_kernel(const float4 *__restrict__ atoms, int n, md__dcs_geom g,
                                       float *out) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n) return;
    const float4 at = atoms[a];
    const float q = (float)MD_COULOMB * at.w;
    float *p = out;
    for (int k = 0; k < g.nz; k++) {
        const float dz = fmaf((float)k, g.hz, g.oz) - at.z;
        for (int j = 0; j < g.ny; j++) {
            const float dy = fmaf((float)j, g.hy, g.oy) - at.y;
            for (int i = 0; i < g.nx; i++, p++) {
                const float dx = fmaf((float)i, g.hx, g.ox) - at.x;
                const float r2 = dx * dx + dy * dy + dz * dz;
                if (r2 >= MD_DCS_MIN_R2) atomicAdd(p, q * md_cuda_rsqrt_mufu(r2));
            }
        }
    }
}

/* Rung 2, gather: one thread per point loops over every atom in global memory and writes
 * its point once. No atomics, no zeroing. */
__global__ void md__dcs_gather_kernel(const float4 *__restrict__ atoms, int n, md__dcs_geom g,
                                      float *out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= g.nx || j >= g.ny) return;
    const float x = fmaf((float)i, g.hx, g.ox), y = fmaf((float)j, g.hy, g.oy);
    const float z = fmaf((float)k, g.hz, g.oz);
    float v = 0.0f;
    for (int a = 0; a < n; a++) {
        const float4 at = atoms[a];
        const float dx = x - at.x, dy = y - at.y, dz = z - at.z;
        const float r2 = dx * dx + dy * dy + dz * dz;
        v = fmaf(at.w, r2 >= MD_DCS_MIN_R2 ? md_cuda_rsqrt_mufu(r2) : 0.0f, v);
    }
    out[((size_t)k * g.ony + j) * g.onx + i] = (float)MD_COULOMB * v;
}

/* Rung 3, const: the gather kernel with the atoms of one chunk in __constant__ memory.
 * Chunk after chunk, each launch adds its part to the output (accumulate = 0 on the first). */
__global__ void md__dcs_const_kernel(int n, md__dcs_geom g, float *out, int accumulate) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= g.nx || j >= g.ny) return;
    const float x = fmaf((float)i, g.hx, g.ox), y = fmaf((float)j, g.hy, g.oy);
    const float z = fmaf((float)k, g.hz, g.oz);
    float v = 0.0f;
    for (int a = 0; a < n; a++) {
        const float4 at = md__dcs_catoms[a];
        const float dx = x - at.x, dy = y - at.y, dz = z - at.z;
        const float r2 = dx * dx + dy * dy + dz * dz;
        v = fmaf(at.w, r2 >= MD_DCS_MIN_R2 ? md_cuda_rsqrt_mufu(r2) : 0.0f, v);
    }
    const size_t idx = ((size_t)k * g.ony + j) * g.onx + i;
    out[idx] = (accumulate ? out[idx] : 0.0f) + (float)MD_COULOMB * v;
}

/* Where the unrolled kernel reads its atoms from. */
enum { MD__DCS_SRC_CONST = 0, MD__DCS_SRC_L1 = 1, MD__DCS_SRC_SHARED = 2 };

template <int SRC>
static __device__ __forceinline__ float4 md__dcs_load_atom(const float4 *p, int a) {
    if (SRC == MD__DCS_SRC_CONST) return md__dcs_catoms[a];   /* constant cache, broadcast */
    if (SRC == MD__DCS_SRC_L1) return __ldg(p + a);           /* read-only path through L1 */
    return p[a];                                              /* a shared-memory tile */
}

/* One atom on a thread's U points, applying the MD_DCS_MIN_R2 rule point by point: the path
 * for an atom that lies (within 1e-5 nm) on the row of the thread's points. */
template <int U>
static __device__ __forceinline__ void md__dcs_atom_careful(float4 at, float dydz2, const float (&x)[U],
                                                            float (&acc)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const float dx = x[u] - at.x, r2 = fmaf(dx, dx, dydz2);
        acc[u] = fmaf(at.w, r2 >= MD_DCS_MIN_R2 ? md_cuda_rsqrt_mufu(r2) : 0.0f, acc[u]);
    }
}

/* Atoms [a0, a1) on a thread's U x R points (x[u], y[r], z), two atoms at a time. dy^2 + dz^2
 * is computed once per atom and row and reused for the U points of the row. Per atom-eval the
 * body costs one FADD (dx), one FFMA for r^2, one rsqrt and one FFMA for the sum.
 * The MD_DCS_MIN_R2 rule, two ways:
 *  - the MUFU-only rungs (HYB == 0) test the pair of atoms once per row: if both are farther
 *    than 1e-5 nm from every row, no point can be closer either (r^2 >= dy^2 + dz^2) and the
 *    body needs no select; the rare pair with an atom on a row takes the careful path instead;
 *  - the hybrid rungs (HYB != 0) test nothing here: md__dcs_fixup_kernel rewrites, after the
 *    sum, the few points that lie within 1e-4 nm of an atom, so the loop is the body alone.
 * HYB is a 64-bit mask over (atom of the pair s, row r, point u), bit (s R + r) U + u (mod 64):
 * the evals whose bit is set get their rsqrt from md_soft_rsqrtf (FMA pipe), the others from
 * MUFU. */
template <int U, int R, unsigned long long HYB, int SRC>
static __device__ __forceinline__ void md__dcs_accumulate(const float4 *p, int a0, int a1, const float (&x)[U],
                                                          const float (&y)[R], float z, float (&acc)[R][U]) {
    int a = a0;
    for (; a + 2 <= a1; a += 2) {
        float4 at[2];
        float d2[2][R], q[2], dmin = 3.0e38f;
#pragma unroll
        for (int s = 0; s < 2; s++) {
            at[s] = md__dcs_load_atom<SRC>(p, a + s);
            q[s] = at[s].w;
            const float dz = z - at[s].z, dz2 = dz * dz;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float dy = y[r] - at[s].y;
                d2[s][r] = fmaf(dy, dy, dz2);
                if (HYB == 0) dmin = fminf(dmin, d2[s][r]);
            }
        }
        if (HYB == 0 && !(dmin >= MD_DCS_MIN_R2)) {
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int r = 0; r < R; r++) md__dcs_atom_careful<U>(at[s], d2[s][r], x, acc[r]);
            continue;
        }
#pragma unroll
        for (int s = 0; s < 2; s++)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const float dx = x[u] - at[s].x, r2 = fmaf(dx, dx, d2[s][r]);
                    const float rinv = ((HYB >> (((s * R + r) * U + u) & 63)) & 1) ? md_soft_rsqrtf(r2)
                                                                                  : md_cuda_rsqrt_mufu(r2);
                    acc[r][u] = fmaf(q[s], rinv, acc[r][u]);
                }
    }
    for (; a < a1; a++) { /* the last atom of an odd count */
        const float4 at = md__dcs_load_atom<SRC>(p, a);
        const float dz = z - at.z;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float dy = y[r] - at.y;
            md__dcs_atom_careful<U>(at, fmaf(dy, dy, dz * dz), x, acc[r]);
        }
    }
}

/* Rungs 4-9: thread coarsening. A block of MD_DCS_BLOCK_X x MD_DCS_BLOCK_Y threads covers
 * U * MD_DCS_BLOCK_X points of R * MD_DCS_BLOCK_Y rows of plane k; thread (tx, ty) owns the U
 * points tx, tx + BLOCK_X, tx + 2 BLOCK_X, ... of the R rows ty, ty + BLOCK_Y, ..., so a
 * warp's stores are contiguous and each atom's dz^2 serves R rows and its dy^2 + dz^2 U points.
 * PAD = 1: the output is padded to whole tiles and every thread stores without a test.
 * SRC: atoms from constant memory (one chunk per launch), global memory via L1 (__ldg),
 * or shared-memory tiles that the block stages together. MINB: resident blocks per SM the
 * launch bounds ask for (16: at most 32 registers a thread; 4: up to 128, room for the
 * 2-row and 4-row accumulators and the independent chains that keep MUFU busy). */
template <int U, int R, unsigned long long HYB, int SRC, int PAD, int MINB>
__global__ void __launch_bounds__(MD_DCS_BLOCK_X *MD_DCS_BLOCK_Y, MINB)
md__dcs_unroll_kernel(const float4 *__restrict__ atoms, int n, md__dcs_geom g, float *out, int accumulate) {
    const int i0 = blockIdx.x * (U * MD_DCS_BLOCK_X) + threadIdx.x;
    const int j0 = blockIdx.y * (R * MD_DCS_BLOCK_Y) + threadIdx.y, k = blockIdx.z;
    const float z = fmaf((float)k, g.hz, g.oz);
    float x[U], y[R], acc[R][U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = fmaf((float)(i0 + u * MD_DCS_BLOCK_X), g.hx, g.ox);
#pragma unroll
    for (int r = 0; r < R; r++) {
        y[r] = fmaf((float)(j0 + r * MD_DCS_BLOCK_Y), g.hy, g.oy);
#pragma unroll
        for (int u = 0; u < U; u++) acc[r][u] = 0.0f;
    }
    if (SRC == MD__DCS_SRC_SHARED) {
        __shared__ float4 tile[MD_DCS_SHARED_TILE];
        const int t = threadIdx.y * MD_DCS_BLOCK_X + threadIdx.x;
        for (int a0 = 0; a0 < n; a0 += MD_DCS_SHARED_TILE) {
            const int m = min(MD_DCS_SHARED_TILE, n - a0);
            if (t < m) tile[t] = atoms[a0 + t];
            __syncthreads();
            md__dcs_accumulate<U, R, HYB, SRC>(tile, 0, m, x, y, z, acc);
            __syncthreads();
        }
    } else {
        md__dcs_accumulate<U, R, HYB, SRC>(atoms, 0, n, x, y, z, acc);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + u * MD_DCS_BLOCK_X, j = j0 + r * MD_DCS_BLOCK_Y;
            if (PAD || (i < g.nx && j < g.ny)) {
                const size_t idx = ((size_t)k * g.ony + j) * g.onx + i;
                out[idx] = (accumulate ? out[idx] : 0.0f) + (float)MD_COULOMB * acc[r][u];
            }
        }
}

/* Points closer than this (nm^2) to an atom are recomputed by md__dcs_fixup_kernel: 100 x
 * MD_DCS_MIN_R2, so the float rounding of r^2 cannot hide a point the rule applies to. */
#define MD__DCS_NEAR_R2 1e-8f
/* The hybrid rungs move the rule out of their loop only on grids whose every spacing is at
 * least this (nm): then a point other than the one nearest an atom is at least 5e-4 nm from
 * it, far outside MD__DCS_NEAR_R2. Finer grids run the same shape with MUFU and the rule. */
#define MD__DCS_FIXUP_MIN_H 1e-3f

/* The grid index nearest to coordinate c along one axis, clamped to the (padded) output. */
static __device__ __forceinline__ int md__dcs_nearest(float c, float o, float h, int n) {
    return (int)fminf(fmaxf(rintf((c - o) / h), 0.0f), (float)(n - 1));
}

/* After a hybrid sum, whose loop has no MD_DCS_MIN_R2 test (a point on an atom holds inf, NaN
 * or a huge value there), rewrite the points the rule applies to. One thread per atom looks
 * at the output point (padding included) nearest to it, with r^2 computed as the main kernel
 * computes it; if that is below MD__DCS_NEAR_R2, the thread's warp recomputes the point over
 * all n atoms with the rule and overwrites it. With every spacing >= MD__DCS_FIXUP_MIN_H no
 * other point can be that close. Two atoms on one point rewrite it with the same bits. */
__global__ void md__dcs_fixup_kernel(const float4 *__restrict__ atoms, int n, md__dcs_geom g, float *out) {
    const int a = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    int i = 0, j = 0, k = 0, near = 0;
    if (a < n) {
        const float4 at = atoms[a];
        i = md__dcs_nearest(at.x, g.ox, g.hx, g.onx);
        j = md__dcs_nearest(at.y, g.oy, g.hy, g.ony);
        k = md__dcs_nearest(at.z, g.oz, g.hz, g.nz);
        const float dz = fmaf((float)k, g.hz, g.oz) - at.z, dy = fmaf((float)j, g.hy, g.oy) - at.y;
        const float dx = fmaf((float)i, g.hx, g.ox) - at.x;
        near = fmaf(dx, dx, fmaf(dy, dy, dz * dz)) < MD__DCS_NEAR_R2;
    }
    for (unsigned int todo = __ballot_sync(0xffffffffu, near); todo != 0; todo &= todo - 1) {
        const int src = __ffs(todo) - 1;
        const int pi = __shfl_sync(0xffffffffu, i, src), pj = __shfl_sync(0xffffffffu, j, src);
        const int pk = __shfl_sync(0xffffffffu, k, src);
        const float x = fmaf((float)pi, g.hx, g.ox), y = fmaf((float)pj, g.hy, g.oy);
        const float z = fmaf((float)pk, g.hz, g.oz);
        float v = 0.0f;
        for (int b = lane; b < n; b += 32) {
            const float4 at = atoms[b];
            const float dz = z - at.z, dy = y - at.y, dx = x - at.x;
            const float r2 = fmaf(dx, dx, fmaf(dy, dy, dz * dz));
            v = fmaf(at.w, r2 >= MD_DCS_MIN_R2 ? md_cuda_rsqrt_mufu(r2) : 0.0f, v);
        }
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) out[((size_t)pk * g.ony + pj) * g.onx + pi] = (float)MD_COULOMB * v;
    }
}

static int md__dcs_padded(md_dcs_variant v) {
    return v == MD_DCS_GPU_UNROLL8 || v == MD_DCS_GPU_UNROLL8X2 || v == MD_DCS_GPU_L1 || v == MD_DCS_GPU_SHARED ||
           v == MD_DCS_GPU_HYBRID;
}

static int md__dcs_points_per_thread(md_dcs_variant v) {
    if (v == MD_DCS_GPU_UNROLL4) return 4;
    if (md__dcs_padded(v)) return 8;
    return 1;
}

/* Rows per thread of the unrolled rungs: 1, 2 (unroll8x2, l1, shared) or 4 (hybrid). */
static int md__dcs_rows_per_thread(md_dcs_variant v) {
    if (v == MD_DCS_GPU_HYBRID) return 4;
    if (v == MD_DCS_GPU_UNROLL8X2 || v == MD_DCS_GPU_L1 || v == MD_DCS_GPU_SHARED) return 2;
    return 1;
}

md_status md_cuda_dcs_out_dims(md_dcs_variant variant, const md_grid *geometry, int dims[3]) {
    const char *fn = "md_cuda_dcs_out_dims";
    if (dims) dims[0] = dims[1] = dims[2] = 0;
    if (!md_dcs_variant_is_gpu(variant))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "%s is not a GPU rung",
                            md_dcs_variant_name(variant));
    if (!geometry || !dims) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "geometry/dims", "is NULL");
    if (geometry->n[0] < 1 || geometry->n[1] < 1 || geometry->n[2] < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "geometry.n", "dimensions must be >= 1");
    if (geometry->n[2] > 65535 || geometry->n[1] > 65535 * 4)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "geometry.n",
                            "at most 65535 planes and 262140 rows per plane (got %d, %d)", geometry->n[2],
                            geometry->n[1]);
    dims[0] = geometry->n[0];
    dims[1] = geometry->n[1];
    dims[2] = geometry->n[2];
    if (md__dcs_padded(variant)) {
        const int tx = md__dcs_points_per_thread(variant) * MD_DCS_BLOCK_X;
        const int ty = md__dcs_rows_per_thread(variant) * MD_DCS_BLOCK_Y;
        dims[0] = (dims[0] + tx - 1) / tx * tx;
        dims[1] = (dims[1] + ty - 1) / ty * ty;
    }
    return MD_OK;
}

size_t md_cuda_dcs_out_count(md_dcs_variant variant, const md_grid *geometry) {
    int d[3];
    if (md_cuda_dcs_out_dims(variant, geometry, d) != MD_OK) return 0;
    return (size_t)d[0] * (size_t)d[1] * (size_t)d[2];
}

/* ---- launchers: one per rung ---- */

static md_status md__dcs_scatter_launch(const float4 *atoms, int n, md__dcs_geom g, float *out,
                                        cudaStream_t s) {
    MD_CUDA_TRY(cudaMemsetAsync(out, 0, (size_t)g.nx * g.ny * g.nz * sizeof(float), s));
    MD_CUDA_LAUNCH(md__dcs_scatter_kernel, (n + 127) / 128, 128, 0, s, atoms, n, g, out);
    return MD_OK;
}

static md_status md__dcs_gather_launch(const float4 *atoms, int n, md__dcs_geom g, float *out,
                                       cudaStream_t s) {
    const dim3 block(32, 4), grid((g.nx + 31) / 32, (g.ny + 3) / 4, g.nz);
    MD_CUDA_LAUNCH(md__dcs_gather_kernel, grid, block, 0, s, atoms, n, g, out);
    return MD_OK;
}

/* Copy one chunk of atoms (device to device) into md__dcs_catoms, in stream order. Only the
 * holder of the constant buffer calls it (md_cuda_dcs_plan, md_cuda_dcs_device). */
static md_status md__dcs_const_upload(const float4 *atoms, int a0, int m, cudaStream_t s) {
    MD_CUDA_TRY(cudaMemcpyToSymbolAsync(md__dcs_catoms, atoms + a0, (size_t)m * sizeof(float4), 0,
                                        cudaMemcpyDeviceToDevice, s));
    return MD_OK;
}

/* resident = 1: the n <= MD_DCS_CONST_CHUNK atoms are already in md__dcs_catoms (a plan's
 * upload put them there), so the launch is all there is to do. */
static md_status md__dcs_const_launch(const float4 *atoms, int n, md__dcs_geom g, float *out,
                                      cudaStream_t s, int resident) {
    const dim3 block(32, 4), grid((g.nx + 31) / 32, (g.ny + 3) / 4, g.nz);
    for (int a0 = 0; a0 < n; a0 += MD_DCS_CONST_CHUNK) {
        const int m = n - a0 < MD_DCS_CONST_CHUNK ? n - a0 : MD_DCS_CONST_CHUNK;
        if (!resident) {
            md_status st = md__dcs_const_upload(atoms, a0, m, s);
            if (st != MD_OK) return st;
        }
        MD_CUDA_LAUNCH(md__dcs_const_kernel, grid, block, 0, s, m, g, out, a0 > 0);
    }
    return MD_OK;
}

/* The registry name of one instantiation of md__dcs_unroll_kernel, template arguments written out. */
static const char *md__dcs_unroll_name(char *buf, size_t cap, int u, int r, unsigned long long hyb, int src, int pad,
                                       int minb) {
    snprintf(buf, cap, "md__dcs_unroll_kernel<%d, %d, 0x%llx, %d, %d, %d>", u, r, hyb, src, pad, minb);
    return buf;
}

/* The unrolled rungs: constant memory chunk by chunk, or all atoms in one launch (L1, shared). */
template <int U, int R, unsigned long long HYB, int SRC, int PAD, int MINB>
static md_status md__dcs_unroll_launch(const float4 *atoms, int n, md__dcs_geom g, float *out,
                                       cudaStream_t s, int resident) {
    const dim3 block(MD_DCS_BLOCK_X, MD_DCS_BLOCK_Y);
    const dim3 grid((g.nx + U * MD_DCS_BLOCK_X - 1) / (U * MD_DCS_BLOCK_X),
                    (g.ny + R * MD_DCS_BLOCK_Y - 1) / (R * MD_DCS_BLOCK_Y), g.nz);
    const int chunk = SRC == MD__DCS_SRC_CONST ? MD_DCS_CONST_CHUNK : n;
    char name[MD_CUDA_KERNEL_NAME_MAX]; /* written only when the launch registers the kernel */
    for (int a0 = 0; a0 < n; a0 += chunk) {
        const int m = n - a0 < chunk ? n - a0 : chunk;
        if (SRC == MD__DCS_SRC_CONST && !resident) {
            md_status st = md__dcs_const_upload(atoms, a0, m, s);
            if (st != MD_OK) return st;
        }
        MD_CUDA_LAUNCH_NAMED((md__dcs_unroll_kernel<U, R, HYB, SRC, PAD, MINB>),
                             md__dcs_unroll_name(name, sizeof name, U, R, HYB, SRC, PAD, MINB), grid, block, 0, s,
                             atoms + a0, m, g, out, a0 > 0);
    }
    return MD_OK;
}

/* The shape of each unrolled rung, in one place: <U, R, HYB, SRC, PAD, MINB>. */
#define MD__DCS_UNROLL4 4, 1, 0, MD__DCS_SRC_CONST, 0, 16
#define MD__DCS_UNROLL8 8, 1, 0, MD__DCS_SRC_CONST, 1, 16
#define MD__DCS_UNROLL8X2 8, 2, 0, MD__DCS_SRC_CONST, 1, 4
#define MD__DCS_L1 8, 2, 0, MD__DCS_SRC_L1, 1, 4
#define MD__DCS_SHARED 8, 2, 0, MD__DCS_SRC_SHARED, 1, 4
/* The hybrid's masks: bit (s R + r) U + u set = atom s of the pair, row r, point u takes
 * md_soft_rsqrtf. 8 of 64: u = 7; 16: u = 0 and 7; 19: u = 0 and 7, and u = 3 in rows 2 (first
 * atom), 0 and 2 (second atom); 24: u = 0, 3 and 7. The instruction mix depends only on the
 * count, but where the software points sit changes the schedule the compiler builds, by up to
 * 10%: bench/hybrid_masks.cu times the placements these were chosen from. */
#define MD__DCS_HYBRID_MASK(soft)                                                                    \
    ((soft) == 8 ? 0x8080808080808080ull : (soft) == 16 ? 0x8181818181818181ull                      \
                                         : (soft) == 19 ? 0x8189818981898181ull : 0x8989898989898989ull)
#define MD__DCS_HYBRID(soft) 8, 4, MD__DCS_HYBRID_MASK(soft), MD__DCS_SRC_CONST, 1, 4
#define MD__DCS_HYBRID_FINE 8, 4, 0, MD__DCS_SRC_CONST, 1, 4

/* The hybrid splits compiled in (software rsqrts per 64 atom-evals of a thread);
 * MD_DCS_HYBRID_SOFT must be one of them. */
static const int md__dcs_hybrid_splits[] = {8, 16, 19, 24};

static int md__dcs_hybrid_compiled(int soft) {
    for (size_t i = 0; i < sizeof md__dcs_hybrid_splits / sizeof md__dcs_hybrid_splits[0]; i++)
        if (md__dcs_hybrid_splits[i] == soft) return 1;
    return 0;
}

/* The hybrid rung: the sum without the rule, then md__dcs_fixup_kernel; on a grid finer than
 * MD__DCS_FIXUP_MIN_H, the same 8 x 4 shape with MUFU alone and the rule in the loop. */
static md_status md__dcs_hybrid_launch(int soft, const float4 *a, int n, md__dcs_geom g, float *o,
                                       cudaStream_t s, int resident) {
    md_status st;
    if (!(g.hx >= MD__DCS_FIXUP_MIN_H && g.hy >= MD__DCS_FIXUP_MIN_H && g.hz >= MD__DCS_FIXUP_MIN_H))
        return md__dcs_unroll_launch<MD__DCS_HYBRID_FINE>(a, n, g, o, s, resident);
    if (soft == 8) st = md__dcs_unroll_launch<MD__DCS_HYBRID(8)>(a, n, g, o, s, resident);
    else if (soft == 16) st = md__dcs_unroll_launch<MD__DCS_HYBRID(16)>(a, n, g, o, s, resident);
    else if (soft == 19) st = md__dcs_unroll_launch<MD__DCS_HYBRID(19)>(a, n, g, o, s, resident);
    else st = md__dcs_unroll_launch<MD__DCS_HYBRID(24)>(a, n, g, o, s, resident);
    if (st != MD_OK) return st;
    MD_CUDA_LAUNCH(md__dcs_fixup_kernel, (n + 127) / 128, 128, 0, s, a, n, g, o);
    return MD_OK;
}

int md_cuda_dcs_hybrid_splits(int *splits, int cap) {
    const int count = (int)(sizeof md__dcs_hybrid_splits / sizeof md__dcs_hybrid_splits[0]);
    for (int i = 0; splits && i < cap && i < count; i++) splits[i] = md__dcs_hybrid_splits[i];
    return count;
}

/* Check a split: one of md__dcs_hybrid_splits. */
static md_status md__dcs_check_split(const char *fn, int soft) {
    if (!md__dcs_hybrid_compiled(soft))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "soft",
                            "%d software rsqrts of 64 is not compiled in (8, 16, 19 or 24)", soft);
    return MD_OK;
}

/* Fill the kernels' float geometry from a grid (already checked by md_cuda_dcs_out_dims). */
static void md__dcs_geom_set(md__dcs_geom *g, const md_grid *geometry, const int dims[3]) {
    memset(g, 0, sizeof *g);
    g->ox = (float)geometry->origin[0];
    g->oy = (float)geometry->origin[1];
    g->oz = (float)geometry->origin[2];
    g->hx = (float)geometry->spacing[0];
    g->hy = (float)geometry->spacing[1];
    g->hz = (float)geometry->spacing[2];
    g->nx = geometry->n[0];
    g->ny = geometry->n[1];
    g->nz = geometry->n[2];
    g->onx = dims[0];
    g->ony = dims[1];
}

/* Check the arguments of the device entry points and fill the kernels' geometry. */
static md_status md__dcs_prepare(const char *fn, md_dcs_variant variant, const md_float4 *d_xyzq, int n,
                                 const md_grid *geometry, const float *d_out, md__dcs_geom *g) {
    int d[3] = {0, 0, 0};
    md_status st;
    memset(g, 0, sizeof *g);
    if (!md_dcs_variant_is_gpu(variant))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "%s is not a GPU rung (use md_dcs)",
                            md_dcs_variant_name(variant));
    if (!d_xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyzq", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (!d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "out", "is NULL");
    if ((st = md_cuda_dcs_out_dims(variant, geometry, d)) != MD_OK) return st;
    md__dcs_geom_set(g, geometry, d);
    return MD_OK;
}

/* The dispatcher: enqueue rung `variant` (hybrid split `soft`) on stream s. resident: the
 * atoms are already in the constant buffer (see md__dcs_const_launch). */
static md_status md__dcs_run(md_dcs_variant variant, int soft, const float4 *a, int n, md__dcs_geom g, float *out,
                             cudaStream_t s, int resident) {
    switch (variant) {
    case MD_DCS_GPU_SCATTER: return md__dcs_scatter_launch(a, n, g, out, s);
    case MD_DCS_GPU_GATHER: return md__dcs_gather_launch(a, n, g, out, s);
    case MD_DCS_GPU_CONST: return md__dcs_const_launch(a, n, g, out, s, resident);
    case MD_DCS_GPU_UNROLL4: return md__dcs_unroll_launch<MD__DCS_UNROLL4>(a, n, g, out, s, resident);
    case MD_DCS_GPU_UNROLL8: return md__dcs_unroll_launch<MD__DCS_UNROLL8>(a, n, g, out, s, resident);
    case MD_DCS_GPU_UNROLL8X2: return md__dcs_unroll_launch<MD__DCS_UNROLL8X2>(a, n, g, out, s, resident);
    case MD_DCS_GPU_L1: return md__dcs_unroll_launch<MD__DCS_L1>(a, n, g, out, s, 0);
    case MD_DCS_GPU_SHARED: return md__dcs_unroll_launch<MD__DCS_SHARED>(a, n, g, out, s, 0);
    case MD_DCS_GPU_HYBRID: return md__dcs_hybrid_launch(soft, a, n, g, out, s, resident);
    default: break;
    }
    return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_dcs", 0, "variant", "unknown rung %d", (int)variant);
}

/* ---- the __constant__ atom buffer: one holder at a time ---- */

/* 1 for the rungs that read md__dcs_catoms. */
static int md__dcs_uses_const(md_dcs_variant v) {
    return v == MD_DCS_GPU_CONST || v == MD_DCS_GPU_UNROLL4 || v == MD_DCS_GPU_UNROLL8 || v == MD_DCS_GPU_UNROLL8X2 ||
           v == MD_DCS_GPU_HYBRID;
}

static std::atomic<unsigned long long> md__dcs_const_holder(0); /* ticket of the holder, 0: free */
static std::atomic<unsigned long long> md__dcs_const_tickets(0);

/* Take the constant buffer for the caller (a new ticket in *ticket), or fail naming the rule. */
static md_status md__dcs_const_claim(const char *fn, md_dcs_variant v, unsigned long long *ticket) {
    unsigned long long t = md__dcs_const_tickets.fetch_add(1) + 1, expect = 0;
    if (!md__dcs_const_holder.compare_exchange_strong(expect, t))
        return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "variant",
                            "%s reads its atoms from the __constant__ buffer, which another DCS plan holds "
                            "(constant memory is process-global: one such plan at a time); destroy that plan "
                            "first, or use gpu_gather, gpu_l1 or gpu_shared, which need no constant memory",
                            md_dcs_variant_name(v));
    *ticket = t;
    return MD_OK;
}

static void md__dcs_const_release(unsigned long long *ticket) {
    unsigned long long expect = *ticket;
    if (expect) (void)md__dcs_const_holder.compare_exchange_strong(expect, 0);
    *ticket = 0;
}

md_status md_cuda_dcs_device(md_dcs_variant variant, const md_float4 *d_xyzq, int n, const md_grid *geometry,
                             float *d_out, cudaStream_t stream) {
    const char *fn = "md_cuda_dcs_device";
    md__dcs_geom g;
    unsigned long long ticket = 0;
    md_status st = md__dcs_prepare(fn, variant, d_xyzq, n, geometry, d_out, &g);
    cudaError_t e;
    if (st != MD_OK) return st;
    if (!md__dcs_uses_const(variant))
        return md__dcs_run(variant, MD_DCS_HYBRID_SOFT, (const float4 *)d_xyzq, n, g, d_out, stream, 0);
    if ((st = md__dcs_const_claim(fn, variant, &ticket)) != MD_OK) return st;
    st = md__dcs_run(variant, MD_DCS_HYBRID_SOFT, (const float4 *)d_xyzq, n, g, d_out, stream, 0);
    /* the buffer is given back only when no kernel of this call can still read it */
    e = cudaStreamSynchronize(stream);
    md__dcs_const_release(&ticket);
    if (st == MD_OK && e != cudaSuccess) st = md_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
    return st;
}

md_status md_cuda_dcs_hybrid_device(int soft, const md_float4 *d_xyzq, int n, const md_grid *geometry,
                                    float *d_out, cudaStream_t stream) {
    const char *fn = "md_cuda_dcs_hybrid_device";
    md__dcs_geom g;
    unsigned long long ticket = 0;
    md_status st = md__dcs_prepare(fn, MD_DCS_GPU_HYBRID, d_xyzq, n, geometry, d_out, &g);
    cudaError_t e;
    if (st != MD_OK || (st = md__dcs_check_split(fn, soft)) != MD_OK) return st;
    if ((st = md__dcs_const_claim(fn, MD_DCS_GPU_HYBRID, &ticket)) != MD_OK) return st;
    st = md__dcs_hybrid_launch(soft, (const float4 *)d_xyzq, n, g, d_out, stream, 0);
    e = cudaStreamSynchronize(stream); /* no kernel of this call reads the buffer any more */
    md__dcs_const_release(&ticket);
    if (st == MD_OK && e != cudaSuccess) st = md_cuda_error(e, "cudaStreamSynchronize", __FILE__, __LINE__);
    return st;
}

md_status md_cuda_dcs_launch_shape(md_dcs_variant variant, const md_grid *geometry, long long *blocks,
                                   int *blocks_per_wave) {
    const char *fn = "md_cuda_dcs_launch_shape";
    const void *kernel = NULL;
    int d[3] = {0, 0, 0}, per_sm = 0, sms = 0, threads = MD_DCS_BLOCK_X * MD_DCS_BLOCK_Y, dev = 0;
    long long bx = 0, by = 0;
    md_status st;
    if (!blocks || !blocks_per_wave)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "blocks/blocks_per_wave", "is NULL");
    if ((st = md_cuda_dcs_out_dims(variant, geometry, d)) != MD_OK) return st;
    switch (variant) {
    case MD_DCS_GPU_SCATTER: kernel = (const void *)md__dcs_scatter_kernel; threads = 128; break;
    case MD_DCS_GPU_GATHER: kernel = (const void *)md__dcs_gather_kernel; threads = 128; break;
    case MD_DCS_GPU_CONST: kernel = (const void *)md__dcs_const_kernel; threads = 128; break;
    case MD_DCS_GPU_UNROLL4: kernel = (const void *)md__dcs_unroll_kernel<MD__DCS_UNROLL4>; break;
    case MD_DCS_GPU_UNROLL8: kernel = (const void *)md__dcs_unroll_kernel<MD__DCS_UNROLL8>; break;
    case MD_DCS_GPU_UNROLL8X2: kernel = (const void *)md__dcs_unroll_kernel<MD__DCS_UNROLL8X2>; break;
    case MD_DCS_GPU_L1: kernel = (const void *)md__dcs_unroll_kernel<MD__DCS_L1>; break;
    case MD_DCS_GPU_SHARED: kernel = (const void *)md__dcs_unroll_kernel<MD__DCS_SHARED>; break;
    default: kernel = (const void *)md__dcs_unroll_kernel<MD__DCS_HYBRID(MD_DCS_HYBRID_SOFT)>; break;
    }
    if (variant == MD_DCS_GPU_SCATTER) {
        *blocks = 0; /* depends on the atom count: ceil(n / 128) */
    } else if (threads == 128 && (variant == MD_DCS_GPU_GATHER || variant == MD_DCS_GPU_CONST)) {
        bx = (geometry->n[0] + 31) / 32;
        by = (geometry->n[1] + 3) / 4;
        *blocks = bx * by * geometry->n[2];
    } else {
        const int tx = md__dcs_points_per_thread(variant) * MD_DCS_BLOCK_X;
        const int ty = md__dcs_rows_per_thread(variant) * MD_DCS_BLOCK_Y;
        bx = (geometry->n[0] + tx - 1) / tx;
        by = (geometry->n[1] + ty - 1) / ty;
        *blocks = bx * by * geometry->n[2];
    }
    MD_CUDA_TRY(cudaGetDevice(&dev));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MD_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    *blocks_per_wave = per_sm * sms;
    return MD_OK;
}

/* ---- the plan ---- */

void md_cuda_dcs_plan_destroy(md_cuda_dcs_plan *p) {
    if (!p) return;
    md_cuda_queue_destroy(&p->queue); /* waits for the stream first */
    if (p->staged) (void)cudaEventDestroy(p->staged);
    md_cuda_free(p->d_xyzq);
    md_cuda_free(p->d_out);
    md_cuda_free_pinned(p->h_stage);
    md_cuda_free_pinned(p->h_out);
    md__dcs_const_release(&p->const_claim);
    memset(p, 0, sizeof *p);
}

md_status md_cuda_dcs_plan_create(md_cuda_dcs_plan *p, md_dcs_variant variant, int capacity,
                                  const md_grid *geometry) {
    const char *fn = "md_cuda_dcs_plan_create";
    md_cuda_dcs_plan t;
    md_status st;
    cudaError_t e;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    memset(p, 0, sizeof *p);
    memset(&t, 0, sizeof t);
    if (!md_dcs_variant_is_gpu(variant))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "%s is not a GPU rung (use md_dcs)",
                            md_dcs_variant_name(variant));
    if (capacity < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "capacity", "must be >= 1 (got %d)", capacity);
    if ((st = md_cuda_dcs_out_dims(variant, geometry, t.out_dims)) != MD_OK) return st;
    t.variant = variant;
    t.soft = MD_DCS_HYBRID_SOFT;
    t.capacity = capacity;
    t.geometry = *geometry;
    t.geometry.data = NULL;
    t.out_count = (size_t)t.out_dims[0] * t.out_dims[1] * t.out_dims[2];
    if (md__dcs_uses_const(variant) && (st = md__dcs_const_claim(fn, variant, &t.const_claim)) != MD_OK) return st;
    if ((st = md_cuda_queue_create(&t.queue)) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_xyzq, (size_t)capacity, sizeof(md_float4), "atoms")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_out, t.out_count, sizeof(float), "map")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_stage, (size_t)capacity, sizeof(md_float4), "atom staging")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_out, md_grid_count(geometry), sizeof(float), "map")) != MD_OK)
        goto fail;
    if ((e = cudaEventCreateWithFlags(&t.staged, cudaEventDisableTiming)) != cudaSuccess) {
        t.staged = NULL;
        st = md_cuda_error(e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
        goto fail;
    }
    *p = t;
    return MD_OK;
fail:
    md_cuda_dcs_plan_destroy(&t);
    return st;
}

md_status md_cuda_dcs_plan_set_split(md_cuda_dcs_plan *p, int soft) {
    const char *fn = "md_cuda_dcs_plan_set_split";
    md_status st;
    if (!p || !p->d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_dcs_plan_create)");
    if (p->variant != MD_DCS_GPU_HYBRID)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "%s has no split (only gpu_hybrid)",
                            md_dcs_variant_name(p->variant));
    if ((st = md__dcs_check_split(fn, soft)) != MD_OK) return st;
    p->soft = soft;
    return MD_OK;
}

md_status md_cuda_dcs_plan_upload(md_cuda_dcs_plan *p, const md_float4 *xyzq, int n) {
    const char *fn = "md_cuda_dcs_plan_upload";
    if (!p || !p->d_xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_dcs_plan_create)");
    if (!xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyzq", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (n > p->capacity)
        return md_set_error(MD_ERR_RANGE, fn, 0, "n", "%d atoms exceed the plan's capacity of %d", n, p->capacity);
    MD_CUDA_TRY(cudaEventSynchronize(p->staged)); /* the previous upload's copy has left h_stage */
    memcpy(p->h_stage, xyzq, (size_t)n * sizeof *xyzq);
    MD_CUDA_TRY(cudaMemcpyAsync(p->d_xyzq, p->h_stage, (size_t)n * sizeof *xyzq, cudaMemcpyHostToDevice,
                                p->queue.stream));
    p->const_resident = 0;
    if (p->const_claim && n <= MD_DCS_CONST_CHUNK) {
        md_status st = md__dcs_const_upload((const float4 *)p->d_xyzq, 0, n, p->queue.stream);
        if (st != MD_OK) return st;
        p->const_resident = 1;
    }
    MD_CUDA_TRY(cudaEventRecord(p->staged, p->queue.stream));
    p->n = n;
    return MD_OK;
}

md_status md_cuda_dcs_plan_enqueue(md_cuda_dcs_plan *p) {
    const char *fn = "md_cuda_dcs_plan_enqueue";
    md__dcs_geom g;
    if (!p || !p->d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_dcs_plan_create)");
    if (p->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "no atoms uploaded (md_cuda_dcs_plan_upload)");
    md__dcs_geom_set(&g, &p->geometry, p->out_dims);
    return md__dcs_run(p->variant, p->soft, (const float4 *)p->d_xyzq, p->n, g, p->d_out, p->queue.stream,
                       p->const_resident);
}

/* Public, in the file with MD_CUDA_IMPLEMENTATION only (it instantiates the kernel): for tuning
 * the hybrid rung (bench/hybrid_masks.cu). Enqueue an MD_DCS_GPU_HYBRID plan with the 64-bit
 * mask MASK instead of a compiled split: bit (s R + r) U + u set = atom s of the pair, row r,
 * point u takes md_soft_rsqrtf (U = 8 points, R = 4 rows); then the fix-up, as the plan's own
 * enqueue does. Errors: not a hybrid plan or no atoms (MD_ERR_INVALID_ARGUMENT), a grid finer
 * than the fix-up allows (MD_ERR_UNSUPPORTED: the plan's enqueue falls back; this does not). */
template <unsigned long long MASK> md_status md_cuda_dcs_plan_enqueue_mask(md_cuda_dcs_plan *p) {
    const char *fn = "md_cuda_dcs_plan_enqueue_mask";
    md__dcs_geom g;
    md_status st;
    if (!p || !p->d_out || p->variant != MD_DCS_GPU_HYBRID || p->n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "needs a gpu_hybrid plan with atoms uploaded");
    md__dcs_geom_set(&g, &p->geometry, p->out_dims);
    if (!(g.hx >= MD__DCS_FIXUP_MIN_H && g.hy >= MD__DCS_FIXUP_MIN_H && g.hz >= MD__DCS_FIXUP_MIN_H))
        return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "geometry", "spacing below %g nm: no mask runs there",
                            (double)MD__DCS_FIXUP_MIN_H);
    st = md__dcs_unroll_launch<8, 4, MASK, MD__DCS_SRC_CONST, 1, 4>((const float4 *)p->d_xyzq, p->n, g, p->d_out,
                                                                   p->queue.stream, p->const_resident);
    if (st != MD_OK) return st;
    MD_CUDA_LAUNCH(md__dcs_fixup_kernel, (p->n + 127) / 128, 128, 0, p->queue.stream, (const float4 *)p->d_xyzq, p->n,
                   g, p->d_out);
    return MD_OK;
}

md_status md_cuda_dcs_plan_sync(md_cuda_dcs_plan *p, md_grid *grid) {
    const char *fn = "md_cuda_dcs_plan_sync";
    const int *d;
    md_status st;
    int k;
    if (!p || !p->d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_dcs_plan_create)");
    if (grid && (!grid->data || grid->n[0] != p->geometry.n[0] || grid->n[1] != p->geometry.n[1] ||
                 grid->n[2] != p->geometry.n[2]))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "grid", "needs data and the plan's %d x %d x %d points",
                            p->geometry.n[0], p->geometry.n[1], p->geometry.n[2]);
    d = p->out_dims;
    if (grid) {
        const int nx = p->geometry.n[0], ny = p->geometry.n[1], nz = p->geometry.n[2];
        const size_t row = (size_t)nx * sizeof(float), pitch = (size_t)d[0] * sizeof(float);
        /* crop the padded rows and planes while copying: row pitch d[0], d[1] rows a plane */
        if (d[1] == ny)
            MD_CUDA_TRY(cudaMemcpy2DAsync(p->h_out, row, p->d_out, pitch, row, (size_t)ny * nz, cudaMemcpyDeviceToHost,
                                          p->queue.stream));
        else
            for (k = 0; k < nz; k++)
                MD_CUDA_TRY(cudaMemcpy2DAsync(p->h_out + (size_t)k * nx * ny, row, p->d_out + (size_t)k * d[0] * d[1], pitch,
                                              row, (size_t)ny, cudaMemcpyDeviceToHost, p->queue.stream));
    }
    if ((st = md_cuda_queue_sync(&p->queue, fn, NULL)) != MD_OK) return st;
    if (grid) memcpy(grid->data, p->h_out, md_grid_count(grid) * sizeof(float));
    return MD_OK;
}

md_status md_cuda_dcs(md_dcs_variant variant, const md_float4 *xyzq, int n, md_grid *grid) {
    const char *fn = "md_cuda_dcs";
    md_cuda_dcs_plan p;
    md_status st;
    if (!md_dcs_variant_is_gpu(variant))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "%s is not a GPU rung (use md_dcs)",
                            md_dcs_variant_name(variant));
    if (!xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyzq", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (!grid || !grid->data) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "grid", "has no data");
    if ((st = md_cuda_dcs_plan_create(&p, variant, n, grid)) != MD_OK) return st;
    /* NaN first: an element a rung failed to write comes back as NaN, never as stale memory */
    if ((st = md_cuda_dcs_plan_upload(&p, xyzq, n)) == MD_OK && (st = md_cuda_poison(p.d_out, p.out_count, p.queue.stream)) == MD_OK &&
        (st = md_cuda_dcs_plan_enqueue(&p)) == MD_OK)
        st = md_cuda_dcs_plan_sync(&p, grid);
    md_cuda_dcs_plan_destroy(&p);
    return st;
}

/* ---- rdf ---- */

#include <limits.h>

/* The RDF rungs (md_rdf_variant), all in md__rdf_kernel<MODE> after md__rdf_gather_kernel:
 *   MD_RDF_GPU_GLOBAL   MODE 0  atomicAdd per in-range pair into the launch's global histogram
 *   MD_RDF_GPU_SHARED   MODE 1  one shared histogram per block, B tile in shared memory
 *   MD_RDF_GPU_WARP     MODE 2  one shared histogram per warp (8 per block), B tile in shared
 *   MD_RDF_GPU_PASSES   MODE 1  once per range of bins that fits in shared memory
 * Each frame is cut into launches of at most md_cuda_rdf_opts::max_pairs_per_launch pairs
 * (32-bit counters), added into 64-bit totals by md__rdf_add_kernel. Run them:
 *   build/tests/gpu_rdf                   every rung against the CPU, exactly
 *   build/chapters/05_histograms          the timed ladder (--quick: small) */

/* Kernel arguments: the gathered positions, the launch's rows of A, the bins this pass
 * counts and the frame's float geometry (computed on the host exactly as md.h does). */
struct md__rdf_kp {
    const float4 *a, *b;
    unsigned int *hist;
    int a0, a1, nb, same, bin_lo, bin_n;
    md_cuda_rdf_geom g;
};

md_status md_cuda_rdf_geom_set(md_cuda_rdf_geom *g, const md_rdf *r, const double box[3]) {
    const char *fn = "md_cuda_rdf_geom_set";
    md_status st;
    int d;
    if (!g || !r) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "g/r", "is NULL");
    if ((st = md_rdf_check_box(fn, box, r->rmax)) != MD_OK) return st;
    for (d = 0; d < 3; d++) { /* the float geometry, exactly as md.h's CPU rungs form it */
        g->L[d] = (float)box[d];
        g->iL[d] = (float)(1.0 / box[d]);
    }
    g->rmax2 = (float)(r->rmax * r->rmax);
    g->inv_w = (float)((double)r->nbins / r->rmax);
    g->nbins = r->nbins;
    return MD_OK;
}

/* Gather the selected positions, wrapped into [0, L) as md.h does, the atom index in .w.
 * A non-finite coordinate raises MD_CUDA_FLAG_NONFINITE with the atom's index. */
__global__ void md__rdf_gather_kernel(const md_float4 *__restrict__ xyz, const int *__restrict__ sel, int n,
                                      float4 *__restrict__ out, md_cuda_rdf_geom g, unsigned long long *flags) {
    int k = blockIdx.x * blockDim.x + threadIdx.x, i;
    md_float4 q;
    if (k >= n) return;
    i = sel[k];
    q = xyz[i];
    if (!isfinite(q.x) || !isfinite(q.y) || !isfinite(q.z))
        md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)i);
    out[k] = make_float4(__fmaf_rn(-g.L[0], floorf(__fmul_rn(q.x, g.iL[0])), q.x),
                         __fmaf_rn(-g.L[1], floorf(__fmul_rn(q.y, g.iL[1])), q.y),
                         __fmaf_rn(-g.L[2], floorf(__fmul_rn(q.z, g.iL[2])), q.z), __int_as_float(i));
}

/* One thread per A row of the launch, one block per (256 rows, 1024-atom tile of B).
 * MODE 0: atomics straight into the global 32-bit histogram (B read through L1);
 * MODE 1: one shared histogram per block; MODE 2: one shared histogram per warp.
 * MODE 1 and 2 stage the B tile in shared memory. Only bins [bin_lo, bin_lo + bin_n)
 * are counted (passes). A = B: pairs j > i only; a block whose tile lies wholly at
 * or below its first row has nothing to do (the test is uniform over the block). */
template <int MODE>
__global__ void __launch_bounds__(MD_CUDA_RDF_BLOCK) md__rdf_kernel(md__rdf_kp p) {
    extern __shared__ float4 md__rdf_smem[];
    const int tid = threadIdx.x;
    const int first = p.a0 + blockIdx.x * MD_CUDA_RDF_BLOCK, i = first + tid;
    const int j0 = blockIdx.y * MD_CUDA_RDF_TILE, j1 = min(j0 + MD_CUDA_RDF_TILE, p.nb);
    float4 *tile = md__rdf_smem;
    unsigned int *h = (unsigned int *)(md__rdf_smem + MD_CUDA_RDF_TILE);
    int j, k;
    if (p.same && j1 - 1 <= first) return;
    if (MODE == 2) h += (tid >> 5) * p.bin_n;
    if (MODE != 0) {
        const int words = MODE == 2 ? (MD_CUDA_RDF_BLOCK / 32) * p.bin_n : p.bin_n;
        unsigned int *h0 = (unsigned int *)(md__rdf_smem + MD_CUDA_RDF_TILE);
        for (k = tid; k < words; k += MD_CUDA_RDF_BLOCK) h0[k] = 0u;
        for (k = tid; k < j1 - j0; k += MD_CUDA_RDF_BLOCK) tile[k] = p.b[j0 + k];
        __syncthreads();
    }
    if (i < p.a1) {
        const float4 a = p.a[i];
        const int ia = __float_as_int(a.w);
        if (p.same) { /* two loops, so the inner one carries no test of p.same */
#pragma unroll 4
            for (j = max(j0, i + 1); j < j1; j++) {
                k = md_cuda_rdf_bin(&p.g, a, MODE == 0 ? p.b[j] : tile[j - j0]) - p.bin_lo;
                if (k >= 0 && k < p.bin_n) {
                    if (MODE == 0) atomicAdd(&p.hist[p.bin_lo + k], 1u);
                    else atomicAdd(&h[k], 1u);
                }
            }
        } else {
#pragma unroll 4
            for (j = j0; j < j1; j++) {
                const float4 b = MODE == 0 ? p.b[j] : tile[j - j0];
                k = md_cuda_rdf_bin(&p.g, a, b) - p.bin_lo;
                if (k >= 0 && k < p.bin_n && __float_as_int(b.w) != ia) {
                    if (MODE == 0) atomicAdd(&p.hist[p.bin_lo + k], 1u);
                    else atomicAdd(&h[k], 1u);
                }
            }
        }
    }
    if (MODE != 0) {
        const unsigned int *h0 = (const unsigned int *)(md__rdf_smem + MD_CUDA_RDF_TILE);
        __syncthreads();
        for (k = tid; k < p.bin_n; k += MD_CUDA_RDF_BLOCK) {
            unsigned int s = h0[k];
            if (MODE == 2)
                for (j = 1; j < MD_CUDA_RDF_BLOCK / 32; j++) s += h0[j * p.bin_n + k];
            if (s) atomicAdd(&p.hist[p.bin_lo + k], s);
        }
    }
}

/* 64-bit totals += this launch's 32-bit counts. */
__global__ void md__rdf_add_kernel(unsigned long long *__restrict__ h64, const unsigned int *__restrict__ h32, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) h64[k] += h32[k];
}

static size_t md__rdf_smem_bytes(int mode, int bin_n) {
    return mode == 0 ? 0 : MD_CUDA_RDF_TILE * sizeof(float4) +
                               (size_t)(mode == 2 ? MD_CUDA_RDF_BLOCK / 32 : 1) * (size_t)bin_n * sizeof(unsigned int);
}

md_status md_cuda_rdf_max_bins(md_rdf_variant variant, int *max_bins) {
    int optin = 0, dev = 0;
    size_t avail;
    if (!max_bins) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_rdf_max_bins", 0, "max_bins", "is NULL");
    if (variant == MD_RDF_GPU_GLOBAL || variant == MD_RDF_GPU_PASSES) {
        *max_bins = INT_MAX;
        return MD_OK;
    }
    if (variant == MD_RDF_GPU_CELL) { /* one shared histogram per block, nothing else */
        MD_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
        *max_bins = optin / (int)sizeof(unsigned int);
        return MD_OK;
    }
    if (variant != MD_RDF_GPU_SHARED && variant != MD_RDF_GPU_WARP)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_rdf_max_bins", 0, "variant", "%s is not a GPU rung",
                            md_rdf_variant_name(variant));
    MD_CUDA_TRY(cudaGetDevice(&dev));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    avail = (size_t)optin > MD_CUDA_RDF_TILE * sizeof(float4) ? (size_t)optin - MD_CUDA_RDF_TILE * sizeof(float4) : 0;
    *max_bins = (int)(avail / sizeof(unsigned int) / (variant == MD_RDF_GPU_WARP ? MD_CUDA_RDF_BLOCK / 32 : 1));
    return MD_OK;
}

/* MD_RDF_GPU_CELL's buffers (the region "rdf: the cell-list rung" below). */
static void md__rdf_cell_free(void *v);
static md_status md__rdf_cell_create(md_cuda_rdf_plan *p);

void md_cuda_rdf_plan_destroy(md_cuda_rdf_plan *p) {
    if (!p) return;
    md_cuda_queue_destroy(&p->queue); /* waits for the stream first */
    md_cuda_free(p->d_sel_a);
    md_cuda_free(p->d_sel_b);
    md_cuda_free(p->d_a);
    if (p->d_b != p->d_a) md_cuda_free(p->d_b);
    md_cuda_free(p->d_h32);
    md_cuda_free(p->d_h64);
    md_cuda_free_pinned(p->h_h64);
    md_free(p->boxes);
    md__rdf_cell_free(p->cell);
    memset(p, 0, sizeof *p);
}

/* Upload a selection (NULL: 0 .. n-1) on the plan's stream and wait for it: create may wait,
 * and the copy is then done before any enqueue on that stream (or any other) can read it. */
static md_status md__rdf_upload_sel(int **d, const int *sel, int n, cudaStream_t s) {
    int *tmp = NULL, k;
    md_status st;
    cudaError_t e = cudaSuccess;
    if (!sel) {
        if (!(tmp = (int *)md_alloc_array((size_t)n, sizeof(int)))) return MD_ERR_OUT_OF_MEMORY;
        for (k = 0; k < n; k++) tmp[k] = k;
        sel = tmp;
    }
    if ((st = md_cuda_alloc((void **)d, (size_t)n, sizeof(int), "selection")) == MD_OK &&
        ((e = cudaMemcpyAsync(*d, sel, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, s)) != cudaSuccess ||
         (e = cudaStreamSynchronize(s)) != cudaSuccess))
        st = md_cuda_error(e, "cudaMemcpyAsync(selection)", __FILE__, __LINE__);
    md_free(tmp);
    return st;
}

md_status md_cuda_rdf_plan_create(md_cuda_rdf_plan *p, int natoms, const int *sel_a, int na, const int *sel_b,
                                  int nb, int nbins, const md_cuda_rdf_opts *opts) {
    const char *fn = "md_cuda_rdf_plan_create";
    md_cuda_rdf_plan t;
    md_status st;
    cudaError_t e;
    int optin = 0;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    memset(p, 0, sizeof *p);
    if (nbins < 1 || nbins > (1 << 26))
        return md_set_error(MD_ERR_RANGE, fn, 0, "nbins", "must be in 1..%d (got %d)", 1 << 26, nbins);
    memset(&t, 0, sizeof t);
    if ((st = md_rdf_selection_pairs(natoms, sel_a, na, sel_b, nb, &t.pairs, &t.centers)) != MD_OK) return st;
    t.same = sel_b == NULL || (sel_b == sel_a && nb == na);
    t.natoms = natoms;
    t.na = na;
    t.nb = t.same ? na : nb;
    t.nbins = nbins;
    if (t.nb > 65535 * MD_CUDA_RDF_TILE)
        return md_set_error(MD_ERR_RANGE, fn, 0, "nb", "%d atoms exceed the %d one launch grid can tile", t.nb,
                            65535 * MD_CUDA_RDF_TILE);
    if (opts) t.opts = *opts;
    if (t.opts.max_pairs_per_launch == 0 || t.opts.max_pairs_per_launch > MD_CUDA_RDF_MAX_LAUNCH_PAIRS)
        t.opts.max_pairs_per_launch = MD_CUDA_RDF_MAX_LAUNCH_PAIRS;
    if ((st = md_cuda_queue_create(&t.queue)) != MD_OK) return st;
    if ((st = md__rdf_upload_sel(&t.d_sel_a, sel_a, na, t.queue.stream)) != MD_OK) goto fail;
    if (!t.same && (st = md__rdf_upload_sel(&t.d_sel_b, sel_b, nb, t.queue.stream)) != MD_OK) goto fail;
    if ((st = md_cuda_alloc((void **)&t.d_a, (size_t)na, sizeof(md_float4), "positions A")) != MD_OK) goto fail;
    if (t.same) t.d_b = t.d_a;
    else if ((st = md_cuda_alloc((void **)&t.d_b, (size_t)nb, sizeof(md_float4), "positions B")) != MD_OK) goto fail;
    if ((st = md_cuda_alloc((void **)&t.d_h32, (size_t)nbins, sizeof(unsigned int), "histogram")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_h64, (size_t)nbins, sizeof(unsigned long long), "totals")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_h64, (size_t)nbins, sizeof(unsigned long long), "totals")) != MD_OK)
        goto fail;
    if ((e = cudaMemsetAsync(t.d_h64, 0, (size_t)nbins * sizeof(unsigned long long), t.queue.stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(t.queue.stream)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemsetAsync(totals)", __FILE__, __LINE__);
        goto fail;
    }
    if ((st = md_cuda_rdf_max_bins(MD_RDF_GPU_SHARED, &t.max_bins_shared)) != MD_OK ||
        (st = md_cuda_rdf_max_bins(MD_RDF_GPU_WARP, &t.max_bins_warp)) != MD_OK)
        goto fail;
    /* Let the shared-histogram kernels use all the shared memory a block may opt in to. The
     * attribute belongs to the kernel, not the plan: setting it to the device's largest value
     * means no plan can lower it under another. */
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, t.queue.device)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaDeviceGetAttribute", __FILE__, __LINE__);
        goto fail;
    }
    if (optin > 48 * 1024 &&
        ((e = cudaFuncSetAttribute(md__rdf_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin)) != cudaSuccess ||
         (e = cudaFuncSetAttribute(md__rdf_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin)) != cudaSuccess)) {
        st = md_cuda_error(e, "cudaFuncSetAttribute(md__rdf_kernel)", __FILE__, __LINE__);
        goto fail;
    }
    if ((st = md__rdf_cell_create(&t)) != MD_OK) goto fail;
    *p = t;
    return MD_OK;
fail:
    md_cuda_rdf_plan_destroy(&t);
    return st;
}

/* The host-side checks of an enqueue: the plan, the accumulator, the box (into *g). */
static md_status md__rdf_check(const char *fn, const md_cuda_rdf_plan *p, const md_rdf *r, const md_float4 *d_xyz,
                               const double box[3], md_cuda_rdf_geom *g) {
    if (!p || !p->d_h64) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_rdf_plan_create)");
    if (!r || !r->counts) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "r", "is not initialized (md_rdf_init)");
    if (!d_xyz) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_xyz", "is NULL");
    if (r->nbins != p->nbins)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nbins", "accumulator has %d bins, plan %d", r->nbins, p->nbins);
    if (p->pending > 0 && r->rmax != p->rmax)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rmax",
                            "%g nm, but the %lld frames enqueued since the last sync have rmax %g nm", r->rmax,
                            p->pending, p->rmax);
    return md_cuda_rdf_geom_set(g, r, box);
}

/* Enqueue the gathers of A (and B) with geometry g. */
static md_status md__rdf_enqueue_gather(md_cuda_rdf_plan *p, const md_float4 *d_xyz, const md_cuda_rdf_geom *g) {
    const cudaStream_t s = p->queue.stream;
    MD_CUDA_LAUNCH(md__rdf_gather_kernel, (p->na + 255) / 256, 256, 0, s, d_xyz, p->d_sel_a, p->na, (float4 *)p->d_a,
                   *g, p->queue.d_flags);
    if (!p->same)
        MD_CUDA_LAUNCH(md__rdf_gather_kernel, (p->nb + 255) / 256, 256, 0, s, d_xyz, p->d_sel_b, p->nb,
                       (float4 *)p->d_b, *g, p->queue.d_flags);
    return MD_OK;
}

md_status md_cuda_rdf_plan_gather(md_cuda_rdf_plan *p, const md_rdf *r, const md_float4 *d_xyz, const double box[3],
                                  md_cuda_rdf_geom *g) {
    md_cuda_rdf_geom t;
    md_status st;
    if ((st = md__rdf_check("md_cuda_rdf_plan_gather", p, r, d_xyz, box, &t)) != MD_OK) return st;
    if ((st = md__rdf_enqueue_gather(p, d_xyz, &t)) != MD_OK) return st;
    if (g) *g = t;
    return MD_OK;
}

/* The counting launches of one frame (after its gather), each adding into the totals. */
static md_status md__rdf_count(md_cuda_rdf_plan *p, int mode, int bin_step, const md_cuda_rdf_geom *g) {
    const cudaStream_t s = p->queue.stream;
    md__rdf_kp kp;
    unsigned long long rows;
    int a0, a1, k;
    memset(&kp, 0, sizeof kp);
    kp.g = *g;
    kp.nb = p->nb;
    kp.same = p->same;
    kp.a = (const float4 *)p->d_a;
    kp.b = (const float4 *)p->d_b;
    kp.hist = p->d_h32;
    /* every counter of one launch is bounded by the pairs the launch visits: at most
     * rows * nb <= max_pairs_per_launch <= 2^32 - 1, so no 32-bit counter overflows */
    rows = p->opts.max_pairs_per_launch / (unsigned long long)p->nb;
    if (rows < 1) rows = 1;
    p->launches = 0;
    p->passes = (p->nbins + bin_step - 1) / bin_step;
    for (a0 = 0; a0 < p->na; a0 = a1) {
        a1 = (unsigned long long)(p->na - a0) > rows ? a0 + (int)rows : p->na;
        dim3 grid((unsigned)((a1 - a0 + MD_CUDA_RDF_BLOCK - 1) / MD_CUDA_RDF_BLOCK),
                  (unsigned)((p->nb + MD_CUDA_RDF_TILE - 1) / MD_CUDA_RDF_TILE));
        kp.a0 = a0;
        kp.a1 = a1;
        MD_CUDA_TRY(cudaMemsetAsync(p->d_h32, 0, (size_t)p->nbins * sizeof(unsigned int), s));
        for (k = 0; k < p->nbins; k += bin_step) {
            kp.bin_lo = k;
            kp.bin_n = p->nbins - k < bin_step ? p->nbins - k : bin_step;
            if (mode == 0) MD_CUDA_LAUNCH(md__rdf_kernel<0>, grid, MD_CUDA_RDF_BLOCK, 0, s, kp);
            else if (mode == 1)
                MD_CUDA_LAUNCH(md__rdf_kernel<1>, grid, MD_CUDA_RDF_BLOCK, md__rdf_smem_bytes(1, kp.bin_n), s, kp);
            else MD_CUDA_LAUNCH(md__rdf_kernel<2>, grid, MD_CUDA_RDF_BLOCK, md__rdf_smem_bytes(2, kp.bin_n), s, kp);
        }
        MD_CUDA_LAUNCH(md__rdf_add_kernel, (p->nbins + 255) / 256, 256, 0, s, p->d_h64, p->d_h32, p->nbins);
        p->launches++;
    }
    return MD_OK;
}

/* Drop the frames enqueued since the last sync: zero the totals (in stream order). Returns the
 * memset's error without recording it, so a caller on an error path keeps its own message. */
static cudaError_t md__rdf_drop(md_cuda_rdf_plan *p) {
    p->pending = 0;
    return cudaMemsetAsync(p->d_h64, 0, (size_t)p->nbins * sizeof(unsigned long long), p->queue.stream);
}

/* ---- rdf: the cell-list rung (MD_RDF_GPU_CELL) ---- */

/* The buffers of MD_RDF_GPU_CELL, made by md_cuda_rdf_plan_create: a GPU cell list
 * (md_cuda_cell_list, cells >= rmax) of A and one of B (A != B), their positions in cell order,
 * and the frame's box in device memory. At most natoms + 64 cells: the grid coarsens past that,
 * which keeps every cell >= rmax. */
struct md__rdf_cell {
    md_cuda_cell_list ca, cb;
    float4 *sa, *sb;
    double *d_box;
};

static void md__rdf_cell_free(void *v) {
    md__rdf_cell *c = (md__rdf_cell *)v;
    if (!c) return;
    md_cuda_cell_list_destroy(&c->ca);
    md_cuda_cell_list_destroy(&c->cb);
    md_cuda_free(c->sa);
    md_cuda_free(c->sb);
    md_cuda_free(c->d_box);
    md_free(c);
}

/* The frame's box into device memory, in stream order (kernel arguments are copied at launch,
 * so frames enqueued one after another each get their own box). */
__global__ void md__rdf_cell_box_kernel(double *box, double x, double y, double z) {
    box[0] = x;
    box[1] = y;
    box[2] = z;
}

/* Positions in cell order: out[k] = in[idx_sorted[k]]. */
__global__ void md__rdf_cell_gather_kernel(const float4 *__restrict__ in, const int *__restrict__ idx, int n,
                                           float4 *__restrict__ out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) out[k] = in[idx[k]];
}

/* The distinct cells within one cell of c along an axis of dim cells (fewer than 3 when dim < 3). */
static __device__ __forceinline__ int md__rdf_axis_cells(int c, int dim, int out[3]) {
    int m = 0;
    for (int o = -1; o <= 1; o++) {
        const int v = ((c + o) % dim + dim) % dim;
        int dup = 0;
        for (int k = 0; k < m; k++) dup |= out[k] == v;
        if (!dup) out[m++] = v;
    }
    return m;
}

/* One thread per A atom in cell order; B atoms of the neighbouring cells. A = B: each unordered
 * pair once (a neighbour cell after the own cell: all its atoms; the own cell: later positions;
 * cells before: none). A != B: every B atom whose index differs. One shared 32-bit histogram
 * per block (a block visits far fewer than 2^32 pairs), added into the 64-bit totals. The pair
 * rule is md_cuda_rdf_bin, so the counts are md_rdf_accumulate's. */
__global__ void __launch_bounds__(256) md__rdf_cell_kernel(md_cuda_rdf_geom g, int na, int same,
                                                           const float4 *__restrict__ sa, const float4 *__restrict__ sb,
                                                           const unsigned *__restrict__ key_a,
                                                           const int *__restrict__ start_b,
                                                           const md_cuda_cell_grid *__restrict__ gp,
                                                           unsigned long long *__restrict__ h64) {
    extern __shared__ unsigned int md__rdf_cell_hist[];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = threadIdx.x; k < g.nbins; k += blockDim.x) md__rdf_cell_hist[k] = 0u;
    __syncthreads();
    if (i < na) {
        const md_cuda_cell_grid cg = *gp;
        const float4 a = sa[i];
        const int c = (int)key_a[i], ia = __float_as_int(a.w);
        const int cx = c % cg.dim[0], cy = (c / cg.dim[0]) % cg.dim[1], cz = c / (cg.dim[0] * cg.dim[1]);
        int nx[3], ny[3], nz[3];
        const int mx = md__rdf_axis_cells(cx, cg.dim[0], nx), my = md__rdf_axis_cells(cy, cg.dim[1], ny),
                  mz = md__rdf_axis_cells(cz, cg.dim[2], nz);
        for (int u = 0; u < mz; u++)
            for (int v = 0; v < my; v++)
                for (int w = 0; w < mx; w++) {
                    const int cell = (nz[u] * cg.dim[1] + ny[v]) * cg.dim[0] + nx[w];
                    int j = start_b[cell];
                    const int j1 = start_b[cell + 1];
                    if (same) {
                        if (cell < c) continue;
                        if (cell == c) j = i + 1;
                        for (; j < j1; j++) {
                            const int k = md_cuda_rdf_bin(&g, a, sb[j]);
                            if (k >= 0) atomicAdd(&md__rdf_cell_hist[k], 1u);
                        }
                    } else {
                        for (; j < j1; j++) {
                            const float4 b = sb[j];
                            const int k = md_cuda_rdf_bin(&g, a, b);
                            if (k >= 0 && __float_as_int(b.w) != ia) atomicAdd(&md__rdf_cell_hist[k], 1u);
                        }
                    }
                }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < g.nbins; k += blockDim.x)
        if (md__rdf_cell_hist[k]) atomicAdd(&h64[k], (unsigned long long)md__rdf_cell_hist[k]);
}

static md_status md__rdf_cell_create(md_cuda_rdf_plan *p) {
    md__rdf_cell *c = (md__rdf_cell *)md_alloc_array(1, sizeof(md__rdf_cell));
    md_status st;
    int optin = 0;
    cudaError_t e;
    if (!c) return MD_ERR_OUT_OF_MEMORY;
    memset(c, 0, sizeof *c);
    if ((st = md_cuda_cell_list_create(&c->ca, p->na, p->na + 64, 0)) != MD_OK ||
        (!p->same && (st = md_cuda_cell_list_create(&c->cb, p->nb, p->na + 64, 0)) != MD_OK) ||
        (st = md_cuda_alloc((void **)&c->sa, (size_t)p->na, sizeof(float4), "rdf cell A")) != MD_OK ||
        (!p->same && (st = md_cuda_alloc((void **)&c->sb, (size_t)p->nb, sizeof(float4), "rdf cell B")) != MD_OK) ||
        (st = md_cuda_alloc((void **)&c->d_box, 3, sizeof(double), "rdf cell box")) != MD_OK) {
        md__rdf_cell_free(c);
        return st;
    }
    /* as the other shared-histogram kernels: all the shared memory a block may opt in to */
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, p->queue.device)) != cudaSuccess ||
        (optin > 48 * 1024 &&
         (e = cudaFuncSetAttribute(md__rdf_cell_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin)) != cudaSuccess)) {
        md__rdf_cell_free(c);
        return md_cuda_error(e, "cudaFuncSetAttribute(md__rdf_cell_kernel)", __FILE__, __LINE__);
    }
    p->cell = c;
    return MD_OK;
}

/* MD_RDF_GPU_CELL's counting for one frame, after the gather: A (and B) sorted into cells of at
 * least rmax (1 + 1e-5) with md_cuda_cell_list, then the neighbouring-cell count into the totals. */
static md_status md__rdf_cell_count(md_cuda_rdf_plan *p, const md_cuda_rdf_geom *g, const md_rdf *r,
                                    const double box[3]) {
    const cudaStream_t s = p->queue.stream;
    md__rdf_cell *c = (md__rdf_cell *)p->cell;
    const double min_cell = r->rmax * (1.0 + 1e-5);
    const size_t smem = (size_t)p->nbins * sizeof(unsigned int);
    md_status st;
    if (!c) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_rdf_plan_enqueue", 0, "p", "has no cell lists");
    MD_CUDA_LAUNCH(md__rdf_cell_box_kernel, 1, 1, 0, s, c->d_box, box[0], box[1], box[2]);
    if ((st = md_cuda_cell_list_enqueue(&c->ca, (const float4 *)p->d_a, p->na, c->d_box, min_cell, s, NULL, NULL)) != MD_OK)
        return st;
    MD_CUDA_LAUNCH(md__rdf_cell_gather_kernel, (p->na + 255) / 256, 256, 0, s, (const float4 *)p->d_a,
                   c->ca.d_idx_sorted, p->na, c->sa);
    if (!p->same) {
        if ((st = md_cuda_cell_list_enqueue(&c->cb, (const float4 *)p->d_b, p->nb, c->d_box, min_cell, s, NULL, NULL)) !=
            MD_OK)
            return st;
        MD_CUDA_LAUNCH(md__rdf_cell_gather_kernel, (p->nb + 255) / 256, 256, 0, s, (const float4 *)p->d_b,
                       c->cb.d_idx_sorted, p->nb, c->sb);
    }
    MD_CUDA_LAUNCH(md__rdf_cell_kernel, (p->na + 255) / 256, 256, smem, s, *g, p->na, p->same, c->sa,
                   p->same ? c->sa : c->sb, c->ca.d_key_sorted, p->same ? c->ca.d_cell_start : c->cb.d_cell_start,
                   c->ca.d_grid, p->d_h64);
    p->launches = 1;
    p->passes = 1;
    return MD_OK;
}

md_status md_cuda_rdf_plan_enqueue(md_rdf_variant variant, md_cuda_rdf_plan *p, const md_rdf *r,
                                   const md_float4 *d_xyz, const double box[3]) {
    const char *fn = "md_cuda_rdf_plan_enqueue";
    md_cuda_rdf_geom g;
    md_status st;
    int mode, bin_step, max_bins;
    if (!md_rdf_variant_is_gpu(variant))
        return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "variant", "%s is not a GPU rung: run it with md_rdf_accumulate",
                            md_rdf_variant_name(variant));
    if ((st = md__rdf_check(fn, p, r, d_xyz, box, &g)) != MD_OK) return st;
    mode = variant == MD_RDF_GPU_GLOBAL ? 0 : variant == MD_RDF_GPU_WARP ? 2 : 1;
    max_bins = variant == MD_RDF_GPU_WARP ? p->max_bins_warp : p->max_bins_shared;
    bin_step = p->nbins;
    if (variant == MD_RDF_GPU_PASSES) {
        if (p->opts.max_bins_per_pass > 0 && p->opts.max_bins_per_pass < max_bins) max_bins = p->opts.max_bins_per_pass;
        bin_step = p->nbins < max_bins ? p->nbins : max_bins;
    } else if (mode != 0 && p->nbins > max_bins) {
        return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "nbins",
                            "%d bins do not fit in shared memory for %s (at most %d): use MD_RDF_GPU_PASSES",
                            p->nbins, md_rdf_variant_name(variant), max_bins);
    }
    if (p->pending == p->boxes_cap) { /* room for this frame's box (host memory) */
        const long long cap = p->boxes_cap ? 2 * p->boxes_cap : 16;
        double *b = (double *)md_alloc_array((size_t)cap, 3 * sizeof(double));
        if (!b) return MD_ERR_OUT_OF_MEMORY;
        if (p->pending) memcpy(b, p->boxes, (size_t)p->pending * 3 * sizeof(double));
        md_free(p->boxes);
        p->boxes = b;
        p->boxes_cap = cap;
    }
    if ((st = md__rdf_enqueue_gather(p, d_xyz, &g)) != MD_OK ||
        (st = variant == MD_RDF_GPU_CELL ? md__rdf_cell_count(p, &g, r, box) : md__rdf_count(p, mode, bin_step, &g)) != MD_OK) {
        (void)md__rdf_drop(p); /* part of this frame may be in the totals: the batch is lost */
        return st;
    }
    memcpy(p->boxes + 3 * p->pending, box, 3 * sizeof(double));
    p->rmax = r->rmax;
    p->pending++;
    return MD_OK;
}

md_status md_cuda_rdf_plan_sync(md_cuda_rdf_plan *p, md_rdf *r) {
    const char *fn = "md_cuda_rdf_plan_sync";
    md_cuda_flag_text text[MD_CUDA_FLAG_COUNT];
    md_status st;
    cudaError_t e;
    long long f, frames;
    int k;
    if (!p || !p->d_h64) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_rdf_plan_create)");
    if (p->pending > 0 && (!r || !r->counts || r->nbins != p->nbins || r->rmax != p->rmax))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "r",
                            "is not the accumulator the frames were enqueued for (%d bins, rmax %g nm)", p->nbins,
                            p->rmax);
    memset(text, 0, sizeof text);
    text[MD_CUDA_FLAG_NONFINITE].field = "xyz";
    text[MD_CUDA_FLAG_NONFINITE].format = "atom %llu has a non-finite coordinate";
    if (p->pending > 0)
        MD_CUDA_TRY(cudaMemcpyAsync(p->h_h64, p->d_h64, (size_t)p->nbins * sizeof *p->h_h64, cudaMemcpyDeviceToHost,
                                    p->queue.stream));
    if ((st = md_cuda_queue_sync(&p->queue, fn, text)) != MD_OK) {
        (void)md__rdf_drop(p); /* the batch is lost; the plan is ready for the next */
        return st;
    }
    if ((frames = p->pending) == 0) return MD_OK;
    if ((e = md__rdf_drop(p)) != cudaSuccess) /* zero the totals for the next batch */
        return md_cuda_error(e, "cudaMemsetAsync(totals)", __FILE__, __LINE__);
    for (k = 0; k < p->nbins; k++) r->counts[k] += p->h_h64[k];
    for (f = 0; f < frames; f++) (void)md_rdf_add_frame(r, p->boxes + 3 * f, p->pairs, p->centers);
    return MD_OK;
}

md_status md_cuda_rdf_accumulate(md_rdf_variant variant, md_cuda_rdf_plan *p, md_rdf *r,
                                 const md_float4 *d_xyz, const double box[3]) {
    md_status st = md_cuda_rdf_plan_enqueue(variant, p, r, d_xyz, box);
    if (st != MD_OK) return st;
    return md_cuda_rdf_plan_sync(p, r);
}

/* ---- nb: the MD state ---- */

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

void md_cuda_energy_from_fixed(const md_fixed *t, md_energy *e) {
    const double sc = MD_ENERGY_FIXED_SCALE;
    int k;
    if (!t || !e) return;
    e->lj = md_fixed_to_double(t[MD_CUDA_E_LJ], sc);
    e->lj_dispersion = md_fixed_to_double(t[MD_CUDA_E_LJ_DISPERSION], sc);
    e->lj14 = md_fixed_to_double(t[MD_CUDA_E_LJ14], sc);
    e->coul_real = md_fixed_to_double(t[MD_CUDA_E_COUL_REAL], sc);
    e->coul14 = md_fixed_to_double(t[MD_CUDA_E_COUL14], sc);
    e->coul_excl = md_fixed_to_double(t[MD_CUDA_E_COUL_EXCL], sc);
    e->coul_recip = md_fixed_to_double(t[MD_CUDA_E_COUL_RECIP], sc);
    e->coul_self = md_fixed_to_double(t[MD_CUDA_E_COUL_SELF], sc);
    e->bonded = md_fixed_to_double(t[MD_CUDA_E_BONDED], sc);
    e->kinetic = md_fixed_to_double(t[MD_CUDA_E_KINETIC], sc);
    for (k = 0; k < 9; k++) e->virial[k] = md_fixed_to_double(t[MD_CUDA_E_VIRIAL_XX + k], sc);
}

/* atomicAdd of a fixed-point force whose old value nobody reads, as a reduction (PTX red). nvcc
 * 13 compiled the cluster kernel's force atomicAdds as returning atomics (ATOMG with a discarded
 * result), and a warp waited on them at its next entry (see md__nb_cluster_kernel); in the list,
 * bonded and PME gather kernels it made REDG of the same call. Every fixed-point force
 * accumulation goes through this helper, so none depends on that choice. */
static __device__ __forceinline__ void md__red_add(md_fixed *p, md_fixed v) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* The (virtual) warp of W lanes a thread belongs to: its lanes in the hardware warp. */
template <int W>
static __device__ __forceinline__ unsigned md__vmask(void) {
    if (W >= 32) return 0xffffffffu;
    return ((1u << (W & 31)) - 1u) << ((threadIdx.x & 31) & ~(W - 1));
}

/* Lane k's value of @p v in every lane of the (virtual) warp of W lanes. For a whole hardware warp
 * it is a redux.sync over the lane's value or zero, whose result nvcc keeps in a uniform register:
 * what depends on it only (the pair kernel's i-cluster mask tests, its exclusion-slot test) then
 * compiles to uniform branches, without the convergence regions (BSSY / BSYNC) a value read by a
 * shuffle needs around each test, and the Ewald polynomial's coefficients stay in uniform registers
 * for an entry instead of being loaded again at every i-cluster step (SASS of md__nb_cluster_kernel:
 * 55 -> 47 instructions a force-only step, 86 -> 71 with energies). Measured side by side on an
 * H100 (2026-12-07, bench/ab.sh, two rounds): bench/nb_cluster's gpu_cluster_smem with energies
 * 70.4 / 69.0 -> 64.4 / 65.9 us at 23,568 atoms and 209.6 / 210.2 -> 197.6 / 199.5 at 95,766;
 * chapter 08's race 103.7 / 104.1 -> 101.8 / 102.7 and 318.9 / 320.6 -> 311.4 / 313.1 us, the same
 * potential energies. A virtual warp of fewer lanes takes the shuffle. */
template <int W>
static __device__ __forceinline__ int md__lane_value(int v, int k, unsigned vm) {
    if (W == 32) return (int)__reduce_or_sync(0xffffffffu, (threadIdx.x & 31) == (unsigned)k ? (unsigned)v : 0u);
    return __shfl_sync(vm, v, k, W);
}

/* The bitwise OR of @p v over the (virtual) warp of W lanes, in every lane: redux.sync for a whole
 * hardware warp (a uniform register, as in md__lane_value), a butterfly of shuffles otherwise. */
template <int W>
static __device__ __forceinline__ unsigned md__warp_or(unsigned v, unsigned vm) {
    if (W == 32) {
        v = __reduce_or_sync(0xffffffffu, v);
    } else {
#pragma unroll
        for (int o = W / 2; o > 0; o >>= 1) v |= (unsigned)__shfl_xor_sync(vm, (int)v, o, W);
    }
    return v;
}

/* A fixed-point value from a double times a scale (host-computed constants added on the device). */
static __device__ __forceinline__ md_fixed md__fixed_from_double(double v, double scale) {
    double s = v * scale;
    if (!(s > -9.2e18 && s < 9.2e18)) return MD_FIXED_INVALID;
    return (md_fixed)__double2ll_rn(s);
}

/* Sum a 64-bit value over a warp of W lanes (order independent: integers). */
template <int W>
static __device__ __forceinline__ md_fixed md__warp_sum_fixed(md_fixed v, unsigned mask) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, W);
    return v;
}

template <int W>
static __device__ __forceinline__ float md__warp_sum_float(float v, unsigned mask) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, W);
    return v;
}

/* Out-of-order gather for downloads: caller slot order[i] gets internal slot i. */
__global__ void md__state_gather_kernel(const float4 *__restrict__ xyzq, const float4 *__restrict__ vel,
                                        const md_fixed *__restrict__ f, const int *__restrict__ order, int n,
                                        int stride, float4 *__restrict__ oxyzq, float4 *__restrict__ ovel,
                                        md_fixed *__restrict__ of) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, c;
    if (i >= n) return;
    c = order[i];
    oxyzq[c] = xyzq[i];
    ovel[c] = vel[i];
    of[3 * (size_t)c] = f[i];
    of[3 * (size_t)c + 1] = f[stride + i];
    of[3 * (size_t)c + 2] = f[2 * (size_t)stride + i];
}

/* The kinetic energy m v^2 / 2 of velocity v (with 1/m in v.w; 1/m = 0: a frozen atom, 0). */
static __device__ __forceinline__ float md__kinetic(float4 v) {
    return v.w > 0.0f ? 0.5f * (v.x * v.x + v.y * v.y + v.z * v.z) / v.w : 0.0f;
}

/* Add a block's kinetic energies (one per thread, 256 threads) to MD_CUDA_E_KINETIC: summed in
 * float per block, converted once. Every thread of the block calls it. */
static __device__ __forceinline__ void md__kinetic_block_add(float ke, md_fixed *energy) {
    __shared__ float part[8];
    ke = md__warp_sum_float<32>(ke, 0xffffffffu);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ke;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < 8; w++) s += part[w];
        atomicAdd(&energy[MD_CUDA_E_KINETIC], md_fixed_from_float(s, (float)MD_ENERGY_FIXED_SCALE));
    }
}

/* Kinetic energy of every atom into MD_CUDA_E_KINETIC. */
__global__ void __launch_bounds__(256) md__kinetic_kernel(const float4 *__restrict__ vel, int n, md_fixed *energy) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    md__kinetic_block_add(i < n ? md__kinetic(vel[i]) : 0.0f, energy);
}

void md_cuda_state_destroy(md_cuda_state *s) {
    if (!s) return;
    if (s->q.stream) (void)cudaStreamSynchronize(s->q.stream);
    md_cuda_free(s->d_xyzq);
    md_cuda_free(s->d_vel_invmass);
    md_cuda_free(s->d_type);
    md_cuda_free(s->d_order);
    md_cuda_free(s->d_rank);
    md_cuda_free(s->d_force);
    md_cuda_free(s->d_box);
    md_cuda_free(s->d_step);
    md_cuda_free(s->d_energy);
    md_cuda_free_pinned(s->h_energy);
    md_cuda_free(s->d_lj);
    md_cuda_free(s->d_excl_start);
    md_cuda_free(s->d_excl);
    md_cuda_free(s->d_excl_pairs);
    md_cuda_free(s->d_pair14);
    md_cuda_free(s->d_pair14_lj);
    md_cuda_free_pinned(s->h_stage);
    md_cuda_free(s->d_scratch);
    md_cuda_queue_destroy(&s->q);
    memset(s, 0, sizeof *s);
}

md_status md_cuda_state_create(md_cuda_state *s, int capacity) {
    const char *fn = "md_cuda_state_create";
    md_cuda_state t;
    md_status st;
    size_t cap;
    if (!s) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is NULL");
    memset(s, 0, sizeof *s);
    if (capacity < 1 || capacity > (1 << 30))
        return md_set_error(MD_ERR_RANGE, fn, 0, "capacity", "must be in 1..%d (got %d)", 1 << 30, capacity);
    memset(&t, 0, sizeof t);
    t.capacity = capacity;
    t.stride = MD_CUDA_STRIDE(capacity);
    cap = (size_t)capacity;
    t.stage_bytes = cap * 64 + 4096;
    if ((st = md_cuda_queue_create(&t.q)) != MD_OK) return st;
    if ((st = md_cuda_alloc((void **)&t.d_xyzq, cap, sizeof(float4), "state xyzq")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_vel_invmass, cap, sizeof(float4), "state velocities")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_type, cap, sizeof(int), "state types")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_order, cap, sizeof(int), "state order")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_rank, cap, sizeof(int), "state rank")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_force, 3 * (size_t)t.stride, sizeof(md_fixed), "state forces")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_box, 3, sizeof(double), "state box")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_step, 1, sizeof(long long), "state step")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_energy, MD_CUDA_E_COUNT, sizeof(md_fixed), "state energy")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_energy, MD_CUDA_E_COUNT + 1, sizeof(md_fixed), "energy mirror")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_excl_start, cap + 1, sizeof(int), "state exclusion offsets")) != MD_OK ||
        (st = md_cuda_alloc_pinned(&t.h_stage, t.stage_bytes, 1, "state staging")) != MD_OK ||
        (st = md_cuda_alloc(&t.d_scratch, cap, 64, "state scratch")) != MD_OK)
        goto fail;
    {
        cudaError_t e;
        if ((e = cudaMemsetAsync(t.d_force, 0, 3 * (size_t)t.stride * sizeof(md_fixed), t.q.stream)) != cudaSuccess ||
            (e = cudaMemsetAsync(t.d_energy, 0, MD_CUDA_E_COUNT * sizeof(md_fixed), t.q.stream)) != cudaSuccess ||
            (e = cudaMemsetAsync(t.d_box, 0, 3 * sizeof(double), t.q.stream)) != cudaSuccess ||
            (e = cudaMemsetAsync(t.d_step, 0, sizeof(long long), t.q.stream)) != cudaSuccess ||
            (e = cudaStreamSynchronize(t.q.stream)) != cudaSuccess) {
            st = md_cuda_error(e, "cudaMemsetAsync(state)", __FILE__, __LINE__);
            goto fail;
        }
    }
    memset(t.h_energy, 0, (MD_CUDA_E_COUNT + 1) * sizeof(md_fixed));
    *s = t;
    return MD_OK;
fail:
    md_cuda_state_destroy(&t);
    return st;
}

/* Copy host bytes to the device through the pinned staging buffer (synchronous). */
static md_status md__state_put(md_cuda_state *s, void *d, const void *h, size_t bytes) {
    const unsigned char *src = (const unsigned char *)h;
    unsigned char *dst = (unsigned char *)d;
    while (bytes > 0) {
        size_t k = bytes < s->stage_bytes ? bytes : s->stage_bytes;
        memcpy(s->h_stage, src, k);
        MD_CUDA_TRY(cudaMemcpyAsync(dst, s->h_stage, k, cudaMemcpyHostToDevice, s->q.stream));
        MD_CUDA_TRY(cudaStreamSynchronize(s->q.stream));
        src += k;
        dst += k;
        bytes -= k;
    }
    return MD_OK;
}

/* Grow a device array to at least `count` elements (upload only: it may synchronise). */
static md_status md__state_grow(void **d, size_t count, size_t size, const char *what) {
    md_cuda_free(*d);
    *d = NULL;
    return md_cuda_alloc(d, count ? count : 1, size, what);
}

md_status md_cuda_state_upload(md_cuda_state *s, const md_system *sys, const md_topology *t, const md_lj_table *lj) {
    const char *fn = "md_cuda_state_upload";
    md_status st;
    int n, i, k, nt, maxex = 0, nexcl = 0, npairs = 0;
    float4 *x = NULL, *v = NULL;
    int *ty = NULL, *ord = NULL;
    int2 *ep = NULL, *p14 = NULL;
    float2 *tab = NULL, *p14lj = NULL;
    double q2 = 0.0, s6 = 0.0, s12 = 0.0, *count = NULL;
    if (!s || !s->d_xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is not made (md_cuda_state_create)");
    if (!sys || !t || !lj || !sys->xyzq || !sys->vel)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/t/lj", "is NULL or empty");
    n = sys->n;
    if (n != t->n) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has %d atoms, the system %d", t->n, n);
    if (n < 1 || n > s->capacity)
        return md_set_error(MD_ERR_RANGE, fn, 0, "n", "%d atoms do not fit the state's capacity %d", n, s->capacity);
    if ((st = md_topology_check(t, lj, fn)) != MD_OK) return st;
    for (k = 0; k < 3; k++)
        if (!(sys->box[k] > 0.0) || !isfinite(sys->box[k]))
            return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edges must be finite and > 0 (got %g %g %g)", sys->box[0],
                                sys->box[1], sys->box[2]);
    for (i = 0; i < n; i++) {
        char field[32];
        if (!(t->mass[i] > 0.0f) || !isfinite(t->mass[i])) {
            snprintf(field, sizeof field, "mass[%d]", i);
            return md_set_error(MD_ERR_RANGE, fn, 0, field, "must be finite and > 0 (got %g)", t->mass[i]);
        }
        if (!isfinite(sys->xyzq[i].x) || !isfinite(sys->xyzq[i].y) || !isfinite(sys->xyzq[i].z)) {
            snprintf(field, sizeof field, "xyzq[%d]", i);
            return md_set_error(MD_ERR_RANGE, fn, 0, field, "is not finite");
        }
        if (!isfinite(sys->vel[i].x) || !isfinite(sys->vel[i].y) || !isfinite(sys->vel[i].z)) {
            snprintf(field, sizeof field, "vel[%d]", i);
            return md_set_error(MD_ERR_RANGE, fn, 0, field, "is not finite");
        }
        nexcl = t->excl_start[i + 1];
        if (t->excl_start[i + 1] - t->excl_start[i] > maxex) maxex = t->excl_start[i + 1] - t->excl_start[i];
    }
    nt = lj->ntypes;
    x = (float4 *)md_alloc_array((size_t)n, sizeof(float4));
    v = (float4 *)md_alloc_array((size_t)n, sizeof(float4));
    ty = (int *)md_alloc_array((size_t)n, sizeof(int));
    ord = (int *)md_alloc_array((size_t)n, sizeof(int));
    tab = (float2 *)md_alloc_array((size_t)nt * (size_t)nt, sizeof(float2));
    ep = (int2 *)md_alloc_array((size_t)nexcl / 2 + 1, sizeof(int2));
    p14 = (int2 *)md_alloc_array((size_t)t->npair14 + 1, sizeof(int2));
    p14lj = (float2 *)md_alloc_array((size_t)t->npair14 + 1, sizeof(float2));
    count = (double *)md_alloc_array((size_t)nt, sizeof(double));
    if (!x || !v || !ty || !ord || !tab || !ep || !p14 || !p14lj || !count) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot stage %d atoms", n);
        goto done;
    }
    for (k = 0; k < nt; k++) count[k] = 0.0;
    for (i = 0; i < n; i++) {
        x[i] = make_float4(sys->xyzq[i].x, sys->xyzq[i].y, sys->xyzq[i].z, t->charge[i]);
        v[i] = make_float4(sys->vel[i].x, sys->vel[i].y, sys->vel[i].z, (float)(1.0 / (double)t->mass[i]));
        ty[i] = t->lj_type[i];
        ord[i] = i;
        q2 += (double)t->charge[i] * t->charge[i];
        count[t->lj_type[i]] += 1.0;
        for (k = t->excl_start[i]; k < t->excl_start[i + 1]; k++)
            if (t->excl[k] > i) ep[npairs++] = make_int2(i, t->excl[k]);
    }
    for (k = 0; k < nt * nt; k++) tab[k] = make_float2((float)lj->c6[k], (float)lj->c12[k]);
    for (k = 0; k < t->npair14; k++) {
        int a = t->pair14[2 * k], b = t->pair14[2 * k + 1];
        size_t tb = (size_t)t->lj_type[a] * (size_t)nt + (size_t)t->lj_type[b];
        p14[k] = make_int2(a, b);
        p14lj[k] = make_float2((float)(t->fudge_lj * lj->c6[tb]), (float)(t->fudge_lj * lj->c12[tb]));
    }
    /* the means of md_nb_dispersion_correction (OpenMM's convention: pairs i <= j) */
    for (i = 0; i < nt; i++) {
        if (count[i] == 0.0) continue;
        for (k = i; k < nt; k++) {
            double pairs = i == k ? count[i] * (count[i] + 1.0) / 2.0 : count[i] * count[k];
            s6 += pairs * lj->c6[(size_t)i * nt + k];
            s12 += pairs * lj->c12[(size_t)i * nt + k];
        }
    }
    /* device arrays sized by the topology */
    MD_CUDA_TRY(cudaStreamSynchronize(s->q.stream));
    if (nt * nt > s->ntypes * s->ntypes || !s->d_lj) {
        if ((st = md__state_grow((void **)&s->d_lj, (size_t)nt * nt, sizeof(float2), "state LJ table")) != MD_OK) goto done;
    }
    if (nexcl + 1 > s->cap_topo || npairs + 1 > s->cap_topo || t->npair14 + 1 > s->cap_topo || !s->d_excl) {
        int c = nexcl + 1;
        if (t->npair14 + 1 > c) c = t->npair14 + 1;
        if ((st = md__state_grow((void **)&s->d_excl, (size_t)c, sizeof(int), "state exclusions")) != MD_OK ||
            (st = md__state_grow((void **)&s->d_excl_pairs, (size_t)c, sizeof(int2), "state excluded pairs")) != MD_OK ||
            (st = md__state_grow((void **)&s->d_pair14, (size_t)c, sizeof(int2), "state 1-4 pairs")) != MD_OK ||
            (st = md__state_grow((void **)&s->d_pair14_lj, (size_t)c, sizeof(float2), "state 1-4 LJ")) != MD_OK) {
            s->cap_topo = 0;
            goto done;
        }
        s->cap_topo = c;
    }
    if ((st = md__state_put(s, s->d_xyzq, x, (size_t)n * sizeof(float4))) != MD_OK ||
        (st = md__state_put(s, s->d_vel_invmass, v, (size_t)n * sizeof(float4))) != MD_OK ||
        (st = md__state_put(s, s->d_type, ty, (size_t)n * sizeof(int))) != MD_OK ||
        (st = md__state_put(s, s->d_order, ord, (size_t)n * sizeof(int))) != MD_OK ||
        (st = md__state_put(s, s->d_rank, ord, (size_t)n * sizeof(int))) != MD_OK ||
        (st = md__state_put(s, s->d_box, sys->box, 3 * sizeof(double))) != MD_OK ||
        (st = md__state_put(s, s->d_lj, tab, (size_t)nt * nt * sizeof(float2))) != MD_OK ||
        (st = md__state_put(s, s->d_excl_start, t->excl_start, ((size_t)n + 1) * sizeof(int))) != MD_OK ||
        (nexcl > 0 && (st = md__state_put(s, s->d_excl, t->excl, (size_t)nexcl * sizeof(int))) != MD_OK) ||
        (npairs > 0 && (st = md__state_put(s, s->d_excl_pairs, ep, (size_t)npairs * sizeof(int2))) != MD_OK) ||
        (t->npair14 > 0 && (st = md__state_put(s, s->d_pair14, p14, (size_t)t->npair14 * sizeof(int2))) != MD_OK) ||
        (t->npair14 > 0 && (st = md__state_put(s, s->d_pair14_lj, p14lj, (size_t)t->npair14 * sizeof(float2))) != MD_OK))
        goto done;
    {
        cudaError_t e;
        if ((e = cudaMemsetAsync(s->d_step, 0, sizeof(long long), s->q.stream)) != cudaSuccess ||
            (e = cudaStreamSynchronize(s->q.stream)) != cudaSuccess) {
            st = md_cuda_error(e, "cudaMemsetAsync(step)", __FILE__, __LINE__);
            goto done;
        }
    }
    s->n = n;
    s->ntypes = nt;
    s->max_excl = maxex;
    s->nexcl_pairs = npairs;
    s->npair14 = t->npair14;
    s->fudge_qq = (float)t->fudge_qq;
    s->sum_q2 = q2;
    s->disp_c6 = s6 / ((double)n * ((double)n + 1.0) / 2.0);
    s->disp_c12 = s12 / ((double)n * ((double)n + 1.0) / 2.0);
    for (k = 0; k < 3; k++) s->box[k] = sys->box[k];
    s->epoch++;
    s->ff_epoch++;
    s->forces_valid = 0;
    st = MD_OK;
done:
    md_free(x);
    md_free(v);
    md_free(ty);
    md_free(ord);
    md_free(tab);
    md_free(ep);
    md_free(p14);
    md_free(p14lj);
    md_free(count);
    return st;
}

md_status md_cuda_state_zero(md_cuda_state *s) {
    if (!s || !s->d_force)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_state_zero", 0, "s", "is not made (md_cuda_state_create)");
    MD_CUDA_TRY(cudaMemsetAsync(s->d_force, 0, 3 * (size_t)s->stride * sizeof(md_fixed), s->q.stream));
    MD_CUDA_TRY(cudaMemsetAsync(s->d_energy, 0, MD_CUDA_E_COUNT * sizeof(md_fixed), s->q.stream));
    return MD_OK;
}

md_status md_cuda_state_enqueue_kinetic(md_cuda_state *s) {
    if (!s || !s->d_force || s->n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_state_enqueue_kinetic", 0, "s", "has no atoms (upload first)");
    MD_CUDA_LAUNCH(md__kinetic_kernel, (s->n + 255) / 256, 256, 0, s->q.stream, s->d_vel_invmass, s->n, s->d_energy);
    return MD_OK;
}

md_status md_cuda_state_download(md_cuda_state *s, md_system *sys, double *force, md_fixed *fixed_force) {
    const char *fn = "md_cuda_state_download";
    float4 *ox, *ov;
    md_fixed *of;
    unsigned char *h;
    size_t n;
    int i;
    if (!s || !s->d_xyzq || s->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "has no atoms (upload first)");
    if (sys && (sys->n != s->n || !sys->xyzq || !sys->vel))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "has %d atoms, the state %d", sys->n, s->n);
    n = (size_t)s->n;
    ox = (float4 *)s->d_scratch;
    ov = ox + n;
    of = (md_fixed *)(ov + n);
    MD_CUDA_LAUNCH(md__state_gather_kernel, (s->n + 255) / 256, 256, 0, s->q.stream, s->d_xyzq, s->d_vel_invmass,
                   s->d_force, s->d_order, s->n, s->stride, ox, ov, of);
    MD_CUDA_TRY(cudaMemcpyAsync(s->h_stage, s->d_scratch, n * 56, cudaMemcpyDeviceToHost, s->q.stream));
    MD_CUDA_TRY(cudaStreamSynchronize(s->q.stream));
    h = (unsigned char *)s->h_stage;
    if (sys) {
        const float4 *hx = (const float4 *)h, *hv = hx + n;
        for (i = 0; i < s->n; i++) {
            sys->xyzq[i].x = hx[i].x;
            sys->xyzq[i].y = hx[i].y;
            sys->xyzq[i].z = hx[i].z;
            sys->xyzq[i].w = hx[i].w;
            sys->vel[i].x = hv[i].x;
            sys->vel[i].y = hv[i].y;
            sys->vel[i].z = hv[i].z;
        }
    }
    {
        const md_fixed *hf = (const md_fixed *)(h + n * 32);
        if (force)
            for (i = 0; i < 3 * s->n; i++) force[i] = md_fixed_to_double(hf[i], MD_FORCE_FIXED_SCALE);
        if (fixed_force) memcpy(fixed_force, hf, 3 * n * sizeof(md_fixed));
    }
    return MD_OK;
}

md_status md_cuda_state_poll(md_cuda_state *s, md_energy *e, long long *step) {
    const char *fn = "md_cuda_state_poll";
    md_status st;
    if (!s || !s->d_energy) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is not made (md_cuda_state_create)");
    MD_CUDA_TRY(cudaMemcpyAsync(s->h_energy, s->d_energy, MD_CUDA_E_COUNT * sizeof(md_fixed), cudaMemcpyDeviceToHost,
                                s->q.stream));
    MD_CUDA_TRY(cudaMemcpyAsync(s->h_energy + MD_CUDA_E_COUNT, s->d_step, sizeof(long long), cudaMemcpyDeviceToHost,
                                s->q.stream));
    if ((st = md_cuda_queue_sync(&s->q, fn, NULL)) != MD_OK) return st;
    if (e) md_cuda_energy_from_fixed(s->h_energy, e);
    if (step) *step = (long long)s->h_energy[MD_CUDA_E_COUNT];
    return MD_OK;
}

/* ---- nb: GPU cell lists ---- */

/* The grid of a cell list for a box: cells >= min_cell, at most cap_cells (the longest dimension
 * halved until it fits, which only makes cells bigger). Returns 0 if a box edge is not finite
 * and > 0 (then a unit box is used). Host and device share it.
 *
 * clustered (the cluster rungs' lists, sub_bits 12): cells also about as large as it takes to
 * hold MD__CELL_CLUSTER_ATOMS atoms at the system's density (three super-clusters), but at most
 * MD__CELL_MAX_GROWTH x min_cell; with that below 1.5 an axis never gets fewer than min(3, the
 * count min_cell allows) cells, so a box that has three cells of min_cell keeps them (with fewer,
 * every super-cluster would take the minimum image per pair);
 * and sub-columns at least MD__CELL_COLUMN_ATOMS^(1/3) mean atom spacings wide (the columns
 * count is the cell edge over that width, rounded down). Both rules were chosen on the host, by
 * the cluster search of tests/gpu_nb.cu on the two benchmark water boxes (23,568 and 95,766
 * atoms): cells of 1.03 / 1.10 nm with 3 x 3 sub-columns (the rule before: cells of min_cell,
 * sub-columns about a 6-atom cluster wide) gave a cluster efficiency of 0.304 / 0.306 after the
 * prune and 112,353 / 464,696 entries; cells of 1.24 nm with 4 x 4 sub-columns give 0.339 / 0.336
 * and 93,674 / 385,807 entries. Of the other cell sizes tried (1.03 to 2.07 nm, 2 to 7 columns)
 * the columns rule picked the best count at all but 1.15 nm (the 4,050-atom box: 4 x 4 gave
 * 0.330, the rule's 3 x 3 0.315); tutorial 06, section 7 has the table.
 * Measured side by side on an H200 (2026-11-28): the pair kernel 93-94 -> 88-89 us at 23,568
 * atoms and 302-305 -> 274-280 us at 95,766 (bench/nb_cluster), the search 66-79 -> 45-48 and
 * 124-172 -> 103-109 us a build (Nsight Compute), chapter 08's race step 398 -> 387 us at 95,766
 * atoms and unchanged at 23,568 (134 us, with MD__NB_SEARCH_FULL_SLICES 7). The cap: in chapter
 * 06's argon NVE run (32,000 atoms at 21 atoms / nm^3, where three super-clusters need cells of
 * 2.1 nm, twice min_cell) the uncapped rule made the step 90.6-91.8 -> 99.9-101.2 us, with the
 * cap (10 cells of 1.14 nm instead of 11 of 1.04) 81.0-83.3 us (H200, side by side, six runs
 * each); the water boxes' grids are the same with and without it. */
/** @cond INTERNAL */
#define MD__CELL_CLUSTER_ATOMS (3 * MD_CUDA_NB_SUPER * MD_CUDA_NB_CI)
#define MD__CELL_COLUMN_ATOMS 2.7
#ifndef MD__CELL_MAX_GROWTH /* clustered cells at most this many times min_cell */
#define MD__CELL_MAX_GROWTH 1.25
#endif
static_assert(MD__CELL_MAX_GROWTH >= 1.0 && MD__CELL_MAX_GROWTH < 1.5,
              "MD__CELL_MAX_GROWTH: in [1, 1.5), so a box with three cells of min_cell keeps three");
/** @endcond */
static inline __host__ __device__ int md__cell_grid_make(const double *box, double min_cell, int cap_cells, int natoms,
                                                         int clustered, md_cuda_cell_grid *g) {
    long long dims[3];
    double L[3], vol_per_atom;
    int d, ok = 1;
    for (d = 0; d < 3; d++) {
        L[d] = box[d];
        if (!(L[d] > 0.0) || !isfinite(L[d])) {
            ok = 0;
            L[d] = 1.0;
        }
    }
    vol_per_atom = L[0] * L[1] * L[2] / (natoms > 0 ? natoms : 1);
    for (d = 0; d < 3; d++) {
        dims[d] = (long long)floor(L[d] / min_cell);
        if (clustered) {
            const long long big = (long long)floor(L[d] / cbrt(MD__CELL_CLUSTER_ATOMS * vol_per_atom) + 0.5),
                            fewest = (long long)ceil(L[d] / (MD__CELL_MAX_GROWTH * min_cell)),
                            grown = big > fewest ? big : fewest;
            if (grown < dims[d]) dims[d] = grown;
        }
        if (dims[d] < 1) dims[d] = 1;
        if (dims[d] > 1024) dims[d] = 1024;
    }
    while (dims[0] * dims[1] * dims[2] > cap_cells) {
        int big = dims[1] > dims[0] ? 1 : 0;
        if (dims[2] > dims[big]) big = 2;
        dims[big] = (dims[big] + 1) / 2;
    }
    for (d = 0; d < 3; d++) {
        g->dim[d] = (int)dims[d];
        g->cell[d] = (float)(L[d] / (double)dims[d]);
        g->inv_cell[d] = (float)((double)dims[d] / L[d]);
        g->box[d] = (float)L[d];
        g->inv_box[d] = (float)(1.0 / L[d]);
    }
    g->ncell = (int)(dims[0] * dims[1] * dims[2]);
    { /* sub-columns (only the sort key of sub_bits 12 uses them) */
        const double w = cbrt(MD__CELL_COLUMN_ATOMS * vol_per_atom);
        int k = (int)floor(0.5 * (L[0] / dims[0] + L[1] / dims[1]) / w);
        g->columns = k < 1 ? 1 : (k > 8 ? 8 : k);
    }
    return ok;
}

/* The grid on the device, from the device box (one thread). */
__global__ void md__cell_grid_kernel(md_cuda_cell_grid *g, const double *__restrict__ box, double min_cell,
                                     int cap_cells, int natoms, int clustered, unsigned long long *flags) {
    if (!md__cell_grid_make(box, min_cell, cap_cells, natoms, clustered, g) && flags) md_cuda_flag_raise(flags, MD_CUDA_FLAG_RANGE, 0);
}

/* The coordinate x wrapped into [0, L): x - L floor(x / L) in float (one rounded FMA), moved
 * into [0, L) where rounding left it on L or a hair below 0. Wrapping a wrapped value gives it
 * back unchanged, so sorting again does not move atoms. The sort stores exactly this value, so
 * an atom's cell and its stored coordinate agree. */
static inline __host__ __device__ float md__wrap_f32(float x, float L, float invL) {
    float w = fmaf(-L, floorf(md__fmul(x, invL)), x);
    if (w < 0.0f) w += L;
    return w >= L ? 0.0f : w;
}

static inline __host__ __device__ int md__cell_of(float xw, float inv_cell, int dim) {
    int c = (int)md__fmul(xw, inv_cell);
    return c < 0 ? 0 : (c >= dim ? dim - 1 : c);
}

/* The sort key of a position: cell index << sub_bits | (with sub_bits 12) its sub-column (6 bits,
 * serpentine in x and y) and its z within the cell (6 bits, reversed in odd sub-columns). */
static inline __host__ __device__ unsigned md__cell_key(float x, float y, float z, const md_cuda_cell_grid &g,
                                                        int sub_bits) {
    const float w[3] = {md__wrap_f32(x, g.box[0], g.inv_box[0]), md__wrap_f32(y, g.box[1], g.inv_box[1]),
                        md__wrap_f32(z, g.box[2], g.inv_box[2])};
    const int K = g.columns;
    int c[3], q[3], d;
    for (d = 0; d < 3; d++) {
        const float t = md__fmul(w[d], g.inv_cell[d]);
        const int res = d < 2 ? K : 64;
        c[d] = md__cell_of(w[d], g.inv_cell[d], g.dim[d]);
        q[d] = (int)((t - (float)c[d]) * (float)res);
        q[d] = q[d] < 0 ? 0 : (q[d] > res - 1 ? res - 1 : q[d]);
    }
    {
        const unsigned k = (unsigned)((c[2] * g.dim[1] + c[1]) * g.dim[0] + c[0]);
        const int col = q[1] * K + ((q[1] & 1) ? K - 1 - q[0] : q[0]);
        const int zq = (col & 1) ? 63 - q[2] : q[2];
        return sub_bits ? (k << sub_bits) | (unsigned)(col << 6) | (unsigned)zq : k;
    }
}

/* Key of every atom. */
__global__ void md__cell_key_kernel(const float4 *__restrict__ xyz, int n, const md_cuda_cell_grid *__restrict__ gp,
                                    int sub_bits, unsigned int *__restrict__ key, int *__restrict__ idx,
                                    unsigned long long *flags, const int *__restrict__ order) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 p;
    if (i >= n) return;
    p = xyz[i];
    if (!isfinite(p.x) || !isfinite(p.y) || !isfinite(p.z)) {
        if (flags) md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)(order ? order[i] : i));
        p.x = p.y = p.z = 0.0f;
    }
    key[i] = md__cell_key(p.x, p.y, p.z, *gp, sub_bits);
    idx[i] = i;
}

/* First sorted position of every cell: cell_start[c] for c in (cell of i - 1, cell of i]; the
 * last atom closes the cells after it with n. */
__global__ void md__cell_start_kernel(const unsigned int *__restrict__ key_sorted, int n, int sub_bits,
                                      const md_cuda_cell_grid *__restrict__ gp, int *__restrict__ cell_start) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int c, cp, k;
    if (i >= n) return;
    c = (int)(key_sorted[i] >> sub_bits);
    cp = i > 0 ? (int)(key_sorted[i - 1] >> sub_bits) : -1;
    for (k = cp + 1; k <= c; k++) cell_start[k] = i;
    if (i == n - 1)
        for (k = c + 1; k <= gp->ncell; k++) cell_start[k] = n;
}

void md_cuda_cell_list_destroy(md_cuda_cell_list *cl) {
    if (!cl) return;
    md_cuda_free(cl->d_grid);
    md_cuda_free(cl->d_key);
    md_cuda_free(cl->d_key_sorted);
    md_cuda_free(cl->d_idx);
    md_cuda_free(cl->d_idx_sorted);
    md_cuda_free(cl->d_cell_start);
    md_cuda_free(cl->d_temp);
    memset(cl, 0, sizeof *cl);
}

md_status md_cuda_cell_list_create(md_cuda_cell_list *cl, int cap_atoms, int cap_cells, int sub_bits) {
    const char *fn = "md_cuda_cell_list_create";
    md_cuda_cell_list t;
    md_status st;
    cudaError_t e;
    int bits = 1;
    if (!cl) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "cl", "is NULL");
    memset(cl, 0, sizeof *cl);
    if (sub_bits != 0 && sub_bits != 12)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sub_bits", "must be 0 or 12 (got %d)", sub_bits);
    if (cap_atoms < 1 || cap_cells < 1 || (long long)cap_cells > (1LL << (31 - sub_bits)))
        return md_set_error(MD_ERR_RANGE, fn, 0, "cap_cells", "atoms %d and cells %d must be >= 1, cells below 2^%d",
                            cap_atoms, cap_cells, 31 - sub_bits);
    while ((1LL << bits) < (long long)cap_cells) bits++;
    memset(&t, 0, sizeof t);
    t.cap_atoms = cap_atoms;
    t.cap_cells = cap_cells;
    t.sub_bits = sub_bits;
    t.key_bits = bits + sub_bits;
    if ((st = md_cuda_alloc((void **)&t.d_grid, 1, sizeof(md_cuda_cell_grid), "cell grid")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_key, (size_t)cap_atoms, sizeof(unsigned), "cell keys")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_key_sorted, (size_t)cap_atoms, sizeof(unsigned), "sorted cell keys")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_idx, (size_t)cap_atoms, sizeof(int), "cell indices")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_idx_sorted, (size_t)cap_atoms, sizeof(int), "sorted cell indices")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_cell_start, (size_t)cap_cells + 1, sizeof(int), "cell starts")) != MD_OK)
        goto fail;
    if ((e = cub::DeviceRadixSort::SortPairs(NULL, t.temp_bytes, t.d_key, t.d_key_sorted, t.d_idx, t.d_idx_sorted,
                                             cap_atoms, 0, t.key_bits)) != cudaSuccess) {
        st = md_cuda_error(e, "cub::DeviceRadixSort::SortPairs (size query)", __FILE__, __LINE__);
        goto fail;
    }
    if ((st = md_cuda_alloc(&t.d_temp, t.temp_bytes ? t.temp_bytes : 1, 1, "CUB sort storage")) != MD_OK) goto fail;
    *cl = t;
    return MD_OK;
fail:
    md_cuda_cell_list_destroy(&t);
    return st;
}

md_status md_cuda_cell_list_enqueue(md_cuda_cell_list *cl, const float4 *d_xyz, int n, const double *d_box,
                                    double min_cell, cudaStream_t stream, unsigned long long *d_flags,
                                    const int *d_order) {
    const char *fn = "md_cuda_cell_list_enqueue";
    size_t bytes;
    if (!cl || !cl->d_key) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "cl", "is not made (md_cuda_cell_list_create)");
    if (!d_xyz || !d_box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_xyz/d_box", "is NULL");
    if (n < 1 || n > cl->cap_atoms)
        return md_set_error(MD_ERR_RANGE, fn, 0, "n", "%d atoms (capacity %d)", n, cl->cap_atoms);
    if (!(min_cell > 0.0) || !isfinite(min_cell))
        return md_set_error(MD_ERR_RANGE, fn, 0, "min_cell", "must be finite and > 0 (got %g)", min_cell);
    MD_CUDA_LAUNCH(md__cell_grid_kernel, 1, 1, 0, stream, cl->d_grid, d_box, min_cell, cl->cap_cells, n, cl->cluster_cells,
                   d_flags);
    MD_CUDA_LAUNCH(md__cell_key_kernel, (n + 255) / 256, 256, 0, stream, d_xyz, n, cl->d_grid, cl->sub_bits, cl->d_key,
                   cl->d_idx, d_flags, d_order);
    bytes = cl->temp_bytes;
    MD_CUDA_TRY(cub::DeviceRadixSort::SortPairs(cl->d_temp, bytes, cl->d_key, cl->d_key_sorted, cl->d_idx,
                                                cl->d_idx_sorted, n, 0, cl->key_bits, stream));
    MD_CUDA_LAUNCH(md__cell_start_kernel, (n + 255) / 256, 256, 0, stream, cl->d_key_sorted, n, cl->sub_bits,
                   cl->d_grid, cl->d_cell_start);
    return MD_OK;
}

/* ---- nb: the nonbonded plan ---- */

/* Control words of a plan in device memory (md_cuda_nb_plan::d_ctl). */
enum {
    MD__NB_CTL_REBUILD = 0, /* nonzero: rebuild the list at this evaluation */
    MD__NB_CTL_ESCAPE,      /* float bits: largest distance an atom is outside its cell (this build) */
    MD__NB_CTL_DONE,        /* blocks of the search kernel that finished (the last one resets) */
    MD__NB_CTL_NENTRIES,    /* entries (cluster) or list pairs (Verlet) of this build */
    MD__NB_CTL_NITEMS,      /* work items of this build by class (md__nb_nitems: their count): long ones,
                               a unit's items of half a chunk or more (low 32 bits, placed from index
                               0 up), and short ones (high 32 bits, from cap_items - 1 down); one
                               atomic counts both, so every unit's place is tested against the
                               capacity with the counts of its moment. The pair kernel takes the
                               long ones first (longest-first order, two classes). Side by side on an
                               H200 (2026-11-28, one call, two runs each): bench/nb_cluster's
                               gpu_cluster_smem 221.4 / 219.6 -> 215.5 / 213.9 us at 95,766 atoms
                               (71.7 / 70.5 -> 69.7 / 70.1 at 23,568); chapter 08's race 336.3 /
                               336.2 -> 335.1 / 335.0 us (110.2 / 110.1 -> 109.4 / 110.0) */
    MD__NB_CTL_NEXCL,       /* exclusion-mask entries of this build */
    MD__NB_CTL_COMPUTED,    /* lanes x steps (cluster) of this build */
    MD__NB_CTL_REBUILDS,    /* builds so far */
    MD__NB_CTL_NEED_ENTRIES,/* largest entry count a build needed beyond the capacity */
    MD__NB_CTL_NEED_ITEMS,  /* likewise work items */
    MD__NB_CTL_NEED_EXCL,   /* likewise mask entries */
    MD__NB_CTL_NEED_NB,     /* likewise list width (Verlet) */
    MD__NB_CTL_REASON,      /* bits: 1 box too small for cutoff + buffer, 2 fixed-point overflow */
    MD__NB_CTL_PAIRS_CUT,   /* pairs within the cutoff (MD_CUDA_NB_COUNT) */
    MD__NB_CTL_BOX,         /* 3 words: the box (double bits) of the last build */
    MD__NB_CTL_ESCAPE_LAST = MD__NB_CTL_BOX + 3, /* escape of the last build (float bits) */
    MD__NB_CTL_OVF,         /* nonzero: this build overflowed a capacity (the list stays invalid) */
    MD__NB_CTL_PRUNE,       /* nonzero: the next cluster kernel prunes the fresh list (set by a build) */
    MD__NB_CTL_KDONE,       /* blocks of the cluster kernel that finished (the last one clears PRUNE) */
    MD__NB_CTL_PRUNED,      /* lanes x steps of the list after the prune (cluster rungs) */
    MD__NB_CTL_MINIMG,      /* nonzero: an entry of this build needs the minimum image per pair (small boxes) */
    MD__NB_CTL_WORK,        /* units of the cluster search handed out (the last block resets) */
    MD__NB_CTL_WORDS = 24
};

/* Work items of a build from its MD__NB_CTL_NITEMS word: long ones plus short ones. */
static __host__ __device__ inline long long md__nb_nitems(long long w) {
    return (w & 0xffffffffll) + (long long)((unsigned long long)w >> 32);
}

/* The float minimum-image box of a device box (md.h's md_nb_box_f32_make). */
static __device__ __forceinline__ md_nb_box_f32 md__box_f32(const double *box) { return md_nb_box_f32_make(box); }

/* -- the sort: permute every per-atom array of the state by the cell list -- */

__global__ void md__nb_permute_kernel(const int *__restrict__ idx, int n, int stride,
                                      const md_cuda_cell_grid *__restrict__ gp, const float4 *__restrict__ xyzq,
                                      const float4 *__restrict__ vel, const int *__restrict__ type,
                                      const int *__restrict__ order, const md_fixed *__restrict__ f,
                                      float4 *__restrict__ txyzq, float4 *__restrict__ tvel, int *__restrict__ ttype,
                                      int *__restrict__ torder, md_fixed *__restrict__ tf) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int o;
    float4 p;
    if (i >= n) return;
    o = idx[i];
    p = xyzq[o];
    p.x = md__wrap_f32(p.x, gp->box[0], gp->inv_box[0]);
    p.y = md__wrap_f32(p.y, gp->box[1], gp->inv_box[1]);
    p.z = md__wrap_f32(p.z, gp->box[2], gp->inv_box[2]);
    txyzq[i] = p;
    tvel[i] = vel[o];
    ttype[i] = type[o];
    torder[i] = order[o];
    tf[i] = f[o];
    tf[stride + i] = f[stride + o];
    tf[2 * (size_t)stride + i] = f[2 * (size_t)stride + o];
}

__global__ void md__nb_unpermute_kernel(int n, int stride, const float4 *__restrict__ txyzq,
                                        const float4 *__restrict__ tvel, const int *__restrict__ ttype,
                                        const int *__restrict__ torder, const md_fixed *__restrict__ tf,
                                        float4 *__restrict__ xyzq, float4 *__restrict__ vel, int *__restrict__ type,
                                        int *__restrict__ order, int *__restrict__ rank, md_fixed *__restrict__ f) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    xyzq[i] = txyzq[i];
    vel[i] = tvel[i];
    type[i] = ttype[i];
    order[i] = torder[i];
    rank[torder[i]] = i;
    f[i] = tf[i];
    f[stride + i] = tf[stride + i];
    f[2 * (size_t)stride + i] = tf[2 * (size_t)stride + i];
}

/* i-clusters and super-clusters per cell (zero past the grid, so the scans give totals). */
__global__ void md__nb_cluster_count_kernel(const int *__restrict__ cell_start, const md_cuda_cell_grid *__restrict__ gp,
                                            int cap_cells, int *__restrict__ ic_count, int *__restrict__ sc_count) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    int nic = 0;
    if (c > cap_cells) return;
    if (c < gp->ncell) nic = (cell_start[c + 1] - cell_start[c] + MD_CUDA_NB_CI - 1) / MD_CUDA_NB_CI;
    ic_count[c] = nic;
    sc_count[c] = (nic + MD_CUDA_NB_SUPER - 1) / MD_CUDA_NB_SUPER;
}

__global__ void md__nb_cluster_fill_kernel(const int *__restrict__ cell_start, const md_cuda_cell_grid *__restrict__ gp,
                                           const int *__restrict__ ic_start, const int *__restrict__ sc_start,
                                           int2 *__restrict__ ci, int *__restrict__ ci_cell, int4 *__restrict__ sc) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    int k, a0, na, i0, nic;
    if (c >= gp->ncell) return;
    a0 = cell_start[c];
    na = cell_start[c + 1] - a0;
    i0 = ic_start[c];
    nic = ic_start[c + 1] - i0;
    for (k = 0; k < nic; k++) {
        int cnt = na - k * MD_CUDA_NB_CI;
        ci[i0 + k] = make_int2(a0 + k * MD_CUDA_NB_CI, cnt < MD_CUDA_NB_CI ? cnt : MD_CUDA_NB_CI);
        ci_cell[i0 + k] = c;
    }
    for (k = 0; sc_start[c] + k < sc_start[c + 1]; k++) {
        int cnt = nic - k * MD_CUDA_NB_SUPER;
        sc[sc_start[c] + k] = make_int4(i0 + k * MD_CUDA_NB_SUPER, cnt < MD_CUDA_NB_SUPER ? cnt : MD_CUDA_NB_SUPER, c, 0);
    }
}

/* Exclusion partners of every internal slot as internal slots, ascending (column-major). */
__global__ void md__nb_excl_index_kernel(int n, int stride, const int *__restrict__ order, const int *__restrict__ rank,
                                         const int *__restrict__ excl_start, const int *__restrict__ excl,
                                         int *__restrict__ exn, int *__restrict__ exl) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int c, b, m, k, j, v;
    if (i >= n) return;
    c = order[i];
    b = excl_start[c];
    m = excl_start[c + 1] - b;
    for (k = 0; k < m; k++) { /* insertion sort in place: lists are short */
        v = rank[excl[b + k]];
        for (j = k; j > 0 && exl[(size_t)(j - 1) * stride + i] > v; j--)
            exl[(size_t)j * stride + i] = exl[(size_t)(j - 1) * stride + i];
        exl[(size_t)j * stride + i] = v;
    }
    exn[i] = m;
}

/* 1 if internal slot j is an exclusion partner of i (binary search of i's sorted partners). */
static __device__ __forceinline__ int md__nb_excluded(const int *__restrict__ exn, const int *__restrict__ exl, int stride,
                                                      int i, int j) {
    int lo = 0, hi = exn[i];
    while (lo < hi) {
        int mid = (lo + hi) >> 1, v = exl[(size_t)mid * stride + i];
        if (v == j) return 1;
        if (v < j) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* The cluster rungs' LJ table: (6 c6, 12 c12). */
__global__ void md__nb_scale_lj_kernel(const float2 *__restrict__ lj, int count, int lj_on, float2 *__restrict__ out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    out[k] = lj_on ? make_float2(6.0f * lj[k].x, 12.0f * lj[k].y) : make_float2(0.0f, 0.0f);
}

/* -- every evaluation: the displacement check (sets the rebuild flag) -- */

/* A box that differs from the last build's (one thread): rebuild, with the cells of the last sort
 * scaled to it (the same cell counts, so the grid stays periodic; the escape measures how far
 * atoms are off their cells). md__nb_disp_kernel and the integrate kernel of md_cuda_sim. */
static __device__ __forceinline__ void md__nb_box_check(const double *box, long long *ctl, md_cuda_cell_grid *grid) {
    if (box[0] == __longlong_as_double(ctl[MD__NB_CTL_BOX]) && box[1] == __longlong_as_double(ctl[MD__NB_CTL_BOX + 1]) &&
        box[2] == __longlong_as_double(ctl[MD__NB_CTL_BOX + 2]))
        return;
    for (int k = 0; k < 3; k++) {
        const double L = box[k] > 0.0 ? box[k] : 1.0;
        grid->cell[k] = (float)(L / (double)grid->dim[k]);
        grid->inv_cell[k] = (float)((double)grid->dim[k] / L);
        grid->box[k] = (float)L;
        grid->inv_box[k] = (float)(1.0 / L);
    }
    ctl[MD__NB_CTL_REBUILD] = 1;
}

/* 1 when the float position p lies more than sqrt(half2) (half the buffer) from its reference r. */
static __device__ __forceinline__ int md__nb_moved(float4 p, float4 r, const md_nb_box_f32 &b, float half2) {
    float d[3];
    return md_nb_delta_f32(p.x, p.y, p.z, r.x, r.y, r.z, &b, d) > half2;
}

__global__ void md__nb_disp_kernel(const float4 *__restrict__ xyzq, const float4 *__restrict__ ref, int n,
                                  const double *__restrict__ box, float half2, long long *ctl, unsigned long long *flags,
                                  const int *__restrict__ order, md_cuda_cell_grid *grid) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 p;
    if (i == 0) md__nb_box_check(box, ctl, grid);
    if (ctl[MD__NB_CTL_REBUILD]) return; /* decided already: the build kernels check every atom */
    if (i >= n) return;
    p = xyzq[i];
    if (!isfinite(p.x) || !isfinite(p.y) || !isfinite(p.z)) {
        md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)order[i]);
        return;
    }
    if (md__nb_moved(p, ref[i], md__box_f32(box), half2)) ctl[MD__NB_CTL_REBUILD] = 1;
}

/* -- the rebuild (every evaluation; returns at once unless the flag is set) -- */

/* Bounding boxes of every j-cluster of CJ atoms, the reference positions, the escape. Thread 0
 * also resets the build counters, records the box and checks cutoff + buffer against it. */
template <int CJ>
__global__ void md__nb_bbox_kernel(const float4 *__restrict__ xyzq, const int2 *__restrict__ ci,
                                   const int *__restrict__ ci_cell, const int *__restrict__ ic_start, int cap_cells,
                                   const md_cuda_cell_grid *__restrict__ gp, const double *__restrict__ box, float rlist,
                                   float4 *__restrict__ ref, float4 *__restrict__ bb, long long *ctl,
                                   unsigned long long *flags, const int *__restrict__ order) {
    constexpr int R = MD_CUDA_NB_CI / CJ;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    int c, cc[3], k, jf, jc, nic;
    int2 at;
    float lo[3], hi[3], esc = 0.0f;
    md_cuda_cell_grid g;
    if (!ctl[MD__NB_CTL_REBUILD]) return;
    if (t == 0) {
        double shortest = box[0] < box[1] ? box[0] : box[1];
        if (box[2] < shortest) shortest = box[2];
        ctl[MD__NB_CTL_NENTRIES] = 0;
        ctl[MD__NB_CTL_NITEMS] = 0;
        ctl[MD__NB_CTL_NEXCL] = 0;
        ctl[MD__NB_CTL_COMPUTED] = 0;
        ctl[MD__NB_CTL_PRUNED] = 0;
        ctl[MD__NB_CTL_MINIMG] = 0;
        ctl[MD__NB_CTL_OVF] = 0;
        for (k = 0; k < 3; k++) ctl[MD__NB_CTL_BOX + k] = __double_as_longlong(box[k]);
        if (!(2.0 * (double)rlist <= shortest)) {
            atomicOr((unsigned long long *)&ctl[MD__NB_CTL_REASON], 1ull);
            md_cuda_flag_raise(flags, MD_CUDA_FLAG_RANGE, 0);
        }
    }
    nic = ic_start[cap_cells];
    if (t >= nic * R) return;
    g = *gp;
    at = ci[t / R];
    jf = at.x + (t % R) * CJ;
    jc = at.y - (t % R) * CJ;
    jc = jc < 0 ? 0 : (jc > CJ ? CJ : jc);
    c = ci_cell[t / R];
    cc[0] = c % g.dim[0];
    cc[1] = (c / g.dim[0]) % g.dim[1];
    cc[2] = c / (g.dim[0] * g.dim[1]);
    for (k = 0; k < 3; k++) {
        lo[k] = INFINITY;
        hi[k] = -INFINITY;
    }
    for (int a = jf; a < jf + jc; a++) {
        float4 p = xyzq[a];
        float x[3];
        if (!isfinite(p.x) || !isfinite(p.y) || !isfinite(p.z)) {
            md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)order[a]);
            p.x = p.y = p.z = 0.0f;
        }
        ref[a] = p;
        x[0] = p.x;
        x[1] = p.y;
        x[2] = p.z;
        for (k = 0; k < 3; k++) {
            float cl = (float)cc[k] * g.cell[k], ch = (float)(cc[k] + 1) * g.cell[k];
            lo[k] = fminf(lo[k], x[k]);
            hi[k] = fmaxf(hi[k], x[k]);
            esc = fmaxf(esc, fmaxf(cl - x[k], x[k] - ch));
        }
    }
    bb[2 * t] = make_float4(lo[0], lo[1], lo[2], (float)jc);
    bb[2 * t + 1] = make_float4(hi[0], hi[1], hi[2], 0.0f);
    if (esc > 0.0f) atomicMax(&ctl[MD__NB_CTL_ESCAPE], (long long)__float_as_int(esc));
}

/* Squared distance between two boxes; with minimg, per axis the nearest periodic image of the
 * centres, less the half extents. */
static inline __host__ __device__ float md__bb_dist2(float4 alo, float4 ahi, float4 blo, float4 bhi, int minimg,
                                                    const md_cuda_cell_grid &g) {
    float d[3];
    d[0] = fmaxf(0.0f, fmaxf(blo.x - ahi.x, alo.x - bhi.x));
    d[1] = fmaxf(0.0f, fmaxf(blo.y - ahi.y, alo.y - bhi.y));
    d[2] = fmaxf(0.0f, fmaxf(blo.z - ahi.z, alo.z - bhi.z));
    if (minimg) {
        const float ca[3] = {0.5f * (alo.x + ahi.x), 0.5f * (alo.y + ahi.y), 0.5f * (alo.z + ahi.z)};
        const float cb[3] = {0.5f * (blo.x + bhi.x), 0.5f * (blo.y + bhi.y), 0.5f * (blo.z + bhi.z)};
        const float ea[3] = {0.5f * (ahi.x - alo.x), 0.5f * (ahi.y - alo.y), 0.5f * (ahi.z - alo.z)};
        const float eb[3] = {0.5f * (bhi.x - blo.x), 0.5f * (bhi.y - blo.y), 0.5f * (bhi.z - blo.z)};
        for (int k = 0; k < 3; k++) {
            float dc = ca[k] - cb[k];
            dc = fabsf(fmaf(-g.box[k], rintf(dc * g.inv_box[k]), dc));
            d[k] = fmaxf(0.0f, dc - ea[k] - eb[k]);
        }
    }
    return fmaf(d[0], d[0], fmaf(d[1], d[1], d[2] * d[2]));
}

/* The cell range a box [lo, hi] reaches along one axis: every cell whose nominal extent, widened
 * by reach, overlaps [lo - reach, hi + reach]. Up to dim cells, each is met once, at the one
 * image k that can hold a partner (so its shift is the minimum image); more than dim would meet
 * a cell twice: then the function returns 1 and every cell, 0 .. dim-1, and pairs need the
 * minimum image. */
static inline __host__ __device__ int md__cell_range(float lo, float hi, float reach, float inv_cell, int dim, int *kmin,
                                                    int *kmax) {
    const float a = floorf((lo - reach) * inv_cell), b = floorf((hi + reach) * inv_cell);
    if (!(b - a + 1.0f <= (float)dim) || a < (float)-dim || b >= (float)(2 * dim)) {
        *kmin = 0;
        *kmax = dim - 1;
        return 1;
    }
    *kmin = (int)a;
    *kmax = (int)b;
    return 0;
}

/* Cell k of an axis wrapped into 0 .. dim-1, and the image shift (-1, 0, 1) it was reached by. */
static inline __host__ __device__ int md__wrap_cell(int k, int dim, int *shift) {
    if (k < 0) {
        *shift = -1;
        return k + dim;
    }
    if (k >= dim) {
        *shift = 1;
        return k - dim;
    }
    *shift = 0;
    return k;
}

/** @cond INTERNAL */
/* Exclusion partners of an i-cluster the search keeps one by one when they lie more than
 * MD__NB_NEAR slots from it (a molecule split between two cells by the sort: its partners are a
 * cell's worth of slots away), at most MD__NB_FAR of them; more, and the whole range stands in. */
#define MD__NB_NEAR 64
#define MD__NB_FAR 4
/* Exclusion partners of an i-cluster the search copies into its shared-memory summary, with the
 * atom they exclude (md__nb_cand_masks reads them there instead of the exclusion lists in global
 * memory); an i-cluster with more reads the lists. A water's atoms have two partners each: 16. */
#define MD__NB_PLIST 32
/** @endcond */

/* What the search keeps of a super-cluster's i-clusters: bounding boxes, atom ranges, and where
 * their exclusion partners (internal slots) are: the range of the near ones [pmin, pmax] (within
 * MD__NB_NEAR slots of the i-cluster), the far ones one by one (nfar of them, or, if more than
 * MD__NB_FAR, the range of all partners [wmin, wmax]). A j-cluster that holds none of them needs
 * no exclusion mask: the test that keeps md__nb_cand_masks' per-atom loop to the few that do. */
struct md__nb_sc_data {
    float4 lo[MD_CUDA_NB_SUPER], hi[MD_CUDA_NB_SUPER];
    int f[MD_CUDA_NB_SUPER], n[MD_CUDA_NB_SUPER], pmin[MD_CUDA_NB_SUPER], pmax[MD_CUDA_NB_SUPER];
    int nfar[MD_CUDA_NB_SUPER], wmin[MD_CUDA_NB_SUPER], wmax[MD_CUDA_NB_SUPER], far[MD_CUDA_NB_SUPER][MD__NB_FAR];
    int np[MD_CUDA_NB_SUPER];                     /* exclusion pairs of the i-cluster (all of them counted) */
    int plist[MD_CUDA_NB_SUPER][MD__NB_PLIST];    /* the first MD__NB_PLIST: partner * CI + atom of the i-cluster */
};

/* Fill i-cluster s (< MD_CUDA_NB_SUPER) of super-cluster sc (first i-cluster, i-clusters, cell):
 * the union of its R = CI / cj j-cluster boxes, its atoms, its partners' range, and a copy of its
 * first MD__NB_PLIST exclusion pairs. */
static inline __host__ __device__ void md__nb_sc_fill(md__nb_sc_data *d, int s, int4 sc, const int2 *ci, const float4 *bb,
                                                     const int *exn, const int *exl, int stride, int cj) {
    const int R = MD_CUDA_NB_CI / cj;
    float4 lo = make_float4(INFINITY, INFINITY, INFINITY, 0.0f), hi = make_float4(-INFINITY, -INFINITY, -INFINITY, 0.0f);
    int f = 0, cnt = 0, pmin = INT_MAX, pmax = -1, nfar = 0, wmin = INT_MAX, wmax = -1, np = 0;
    if (s < sc.y) {
        const int ic = sc.x + s;
        const int2 at = ci[ic];
        f = at.x;
        cnt = at.y;
        for (int r = 0; r < R && r * cj < cnt; r++) {
            const float4 bl = bb[2 * (ic * R + r)], bh = bb[2 * (ic * R + r) + 1];
            lo = make_float4(fminf(lo.x, bl.x), fminf(lo.y, bl.y), fminf(lo.z, bl.z), 0.0f);
            hi = make_float4(fmaxf(hi.x, bh.x), fmaxf(hi.y, bh.y), fmaxf(hi.z, bh.z), 0.0f);
        }
        /* partner k of every atom at once: the loads of one k are independent (eight in flight
         * instead of one after the other: the search's units start with this, and were waiting
         * on it). The order the partners are met in does not matter to what is kept. */
        int m[MD_CUDA_NB_CI], mmax = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
        for (int q = 0; q < MD_CUDA_NB_CI; q++) {
            m[q] = q < cnt ? exn[f + q] : 0;
            mmax = mmax > m[q] ? mmax : m[q];
        }
        for (int k = 0; k < mmax; k++) {
            int pk[MD_CUDA_NB_CI];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
            for (int q = 0; q < MD_CUDA_NB_CI; q++) pk[q] = k < m[q] ? exl[(size_t)k * stride + f + q] : 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
            for (int q = 0; q < MD_CUDA_NB_CI; q++) {
                const int p = pk[q];
                if (k >= m[q]) continue;
                if (np < MD__NB_PLIST) d->plist[s][np] = p * MD_CUDA_NB_CI + q;
                np++;
                wmin = wmin < p ? wmin : p;
                wmax = wmax > p ? wmax : p;
                if (p >= f - MD__NB_NEAR && p < f + cnt + MD__NB_NEAR) {
                    pmin = pmin < p ? pmin : p;
                    pmax = pmax > p ? pmax : p;
                } else {
                    if (nfar < MD__NB_FAR) d->far[s][nfar] = p;
                    nfar++;
                }
            }
        }
    }
    d->lo[s] = lo;
    d->hi[s] = hi;
    d->f[s] = f;
    d->n[s] = cnt;
    d->pmin[s] = pmin;
    d->pmax[s] = pmax;
    d->nfar[s] = nfar;
    d->wmin[s] = wmin;
    d->wmax[s] = wmax;
    d->np[s] = np;
}

/* Whether the j-cluster [jf, jf + jc) may hold an exclusion partner of i-cluster q (never a false
 * no; a false yes costs only md__nb_cand_masks' exact loop). */
static inline __host__ __device__ int md__nb_may_exclude(const md__nb_sc_data &d, int q, int jf, int jc) {
    int hit = d.pmax[q] >= jf && d.pmin[q] < jf + jc;
    if (d.nfar[q] > MD__NB_FAR) return hit | (d.wmax[q] >= jf && d.wmin[q] < jf + jc);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int k = 0; k < MD__NB_FAR; k++) hit |= k < d.nfar[q] && d.far[q][k] >= jf && d.far[q][k] < jf + jc;
    return hit;
}

/* The cells a super-cluster of nci i-clusters reaches: its box [lo, hi] (the union of its
 * i-clusters' boxes, returned) widened by reach; returns minimg. */
static inline __host__ __device__ int md__nb_sc_reach(const md__nb_sc_data &d, int nci, const md_cuda_cell_grid &g,
                                                     float reach, int kmin[3], int kmax[3], float4 *ulo, float4 *uhi) {
    float4 lo = make_float4(INFINITY, INFINITY, INFINITY, 0.0f), hi = make_float4(-INFINITY, -INFINITY, -INFINITY, 0.0f);
    int minimg, k;
    for (k = 0; k < nci; k++) {
        lo = make_float4(fminf(lo.x, d.lo[k].x), fminf(lo.y, d.lo[k].y), fminf(lo.z, d.lo[k].z), 0.0f);
        hi = make_float4(fmaxf(hi.x, d.hi[k].x), fmaxf(hi.y, d.hi[k].y), fmaxf(hi.z, d.hi[k].z), 0.0f);
    }
    *ulo = lo;
    *uhi = hi;
    minimg = md__cell_range(lo.x, hi.x, reach, g.inv_cell[0], g.dim[0], &kmin[0], &kmax[0]);
    minimg |= md__cell_range(lo.y, hi.y, reach, g.inv_cell[1], g.dim[1], &kmin[1], &kmax[1]);
    minimg |= md__cell_range(lo.z, hi.z, reach, g.inv_cell[2], g.dim[2], &kmin[2], &kmax[2]);
    if (minimg)
        for (k = 0; k < 3; k++) {
            kmin[k] = 0;
            kmax[k] = g.dim[k] - 1;
        }
    return minimg;
}

/* Which i-clusters (bit s) list the j-cluster of jc atoms from jf with box [bl, bh] (already
 * shifted to the image the cell was reached by): box distance below rlist, and the half-list
 * rule: its last atom after the i-cluster's first. First the super-cluster's box [ulo, uhi]
 * (md__nb_sc_reach): it holds every i-cluster's box, so its distance is no larger than any of
 * theirs (each float step is monotone: the same holds after rounding), and a j-cluster at least
 * rlist from it meets none of them; without minimg only (the per-axis image of the centres
 * could differ between the union and a member). The eight box tests were a quarter of the
 * search's instructions (Nsight Compute, 23,568 atoms, H100), and 29% of the candidates in
 * reach fail the one test (the benchmark box in tests/gpu_nb.cu, which also checks that no mask
 * changes): the search 81-84 -> 70-71 us a build at 23,568 atoms and 277-344 -> 226-247 us at
 * 95,766 (Nsight Compute, H200, side by side). */
static inline __host__ __device__ unsigned md__nb_cand_imask(const md__nb_sc_data &d, int nci, int jf, int jc, float4 bl,
                                                            float4 bh, int minimg, const md_cuda_cell_grid &g,
                                                            float rl2, float4 ulo, float4 uhi) {
    unsigned im = 0;
    if (!minimg && md__bb_dist2(ulo, uhi, bl, bh, 0, g) >= rl2) return 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int q = 0; q < MD_CUDA_NB_SUPER; q++)
        if (q < nci && jf + jc - 1 > d.f[q] && md__bb_dist2(d.lo[q], d.hi[q], bl, bh, minimg, g) < rl2) im |= 1u << q;
    return im;
}

/* The mask bits (jj * CI + ii) of the excluded pairs between i-cluster q and the j-cluster
 * [jf, jf + jc): from the summary's copy of the partners (shared memory in the search) when it
 * holds them all, else (LISTS, or more than MD__NB_PLIST pairs) from the exclusion lists. The two
 * ways give the same bits (tests/gpu_nb.cu, exclusion_partner_summary). Nsight Compute on a
 * 23,568-atom build (H100): the loop over the lists in global memory held 28% of the search's
 * warp stall samples, most of them waiting on its loads. */
template <int LISTS = 0>
static inline __host__ __device__ unsigned md__nb_excl_bits(const md__nb_sc_data &d, int q, int jf, int jc, const int *exn,
                                                           const int *exl, int stride) {
    const int CI = MD_CUDA_NB_CI;
    unsigned m = 0;
    if (!LISTS && d.np[q] <= MD__NB_PLIST) {
        for (int k = 0; k < d.np[q]; k++) {
            const int e = d.plist[q][k], p = e / CI;
            if (p >= jf && p < jf + jc) m |= 1u << ((p - jf) * CI + (e - p * CI));
        }
        return m;
    }
    for (int ii = 0; ii < d.n[q]; ii++) {
        const int at = d.f[q] + ii, na = exn[at];
        for (int k = 0; k < na; k++) {
            const int p = exl[(size_t)k * stride + at];
            if (p >= jf && p < jf + jc) m |= 1u << ((p - jf) * CI + ii);
        }
    }
    return m;
}

/* The masks of one entry, bit jj * CI + ii of mk[s] for the pair (atom ii of i-cluster s, atom jj
 * of the j-cluster): cleared for pairs a >= b when the j-cluster lies inside the i-cluster (the
 * half-list rule on the diagonal) and for excluded pairs. Returns 1 if any mask is not full. */
static inline __host__ __device__ int md__nb_cand_masks(const md__nb_sc_data &d, unsigned im, int jf, int jc,
                                                       const int *exn, const int *exl, int stride, int cj,
                                                       unsigned mk[MD_CUDA_NB_SUPER]) {
    const int CI = MD_CUDA_NB_CI;
    const unsigned full = cj * CI >= 32 ? 0xffffffffu : ((1u << (cj * CI)) - 1u);
    int any = 0;
    for (int q = 0; q < MD_CUDA_NB_SUPER; q++) {
        const int fi = d.f[q], ni = d.n[q];
        mk[q] = full;
        if (!((im >> q) & 1u)) continue;
        if (jf < fi + ni) {
            unsigned m = 0;
            for (int jj = 0; jj < cj; jj++)
                for (int ii = 0; ii < CI; ii++)
                    if (fi + ii < jf + jj) m |= 1u << (jj * CI + ii);
            mk[q] = m;
            any = 1;
        }
        if (md__nb_may_exclude(d, q, jf, jc)) {
            const unsigned m = md__nb_excl_bits(d, q, jf, jc, exn, exl, stride);
            mk[q] &= ~m;
            any |= m != 0u;
        }
    }
    return any;
}

/* The end of a list build, reached by every thread of every block of a search kernel: the last
 * block to finish closes the build (keeps the escape for the statistics and resets it, counts
 * the build, asks the next cluster kernel to prune when `prune`, and clears the rebuild flag
 * unless a capacity overflowed: an overflowed list is never used). */
static __device__ __forceinline__ void md__nb_build_done(long long *ctl, int prune) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_DONE], 1ull) == (unsigned long long)gridDim.x - 1) {
            __threadfence();
            ctl[MD__NB_CTL_ESCAPE_LAST] = ctl[MD__NB_CTL_ESCAPE];
            ctl[MD__NB_CTL_DONE] = 0;
            ctl[MD__NB_CTL_WORK] = 0;
            ctl[MD__NB_CTL_ESCAPE] = 0;
            ctl[MD__NB_CTL_REBUILDS] += 1;
            if (prune) ctl[MD__NB_CTL_PRUNE] = 1;
            ctl[MD__NB_CTL_REBUILD] = ctl[MD__NB_CTL_OVF];
        }
    }
}

/* Arguments of the cluster search. */
struct md__nb_search_args {
    const float4 *bb;
    const int2 *ci;
    const int4 *sc;
    const int *ic_start, *sc_start;
    int cap_cells;
    const md_cuda_cell_grid *grid;
    const int *exn, *exl;
    int stride;
    int4 *entries;
    int4 *items;
    unsigned int *masks;
    long long cap_entries, cap_items, cap_excl;
    int chunk;
    int slices; /* warps per super-cluster */
    long long *ctl;
    unsigned long long *flags;
    float rlist;
};

/** @cond INTERNAL */
/* Bytes of shared memory per search block that remember the first sweep's hits (8 bytes each),
 * shared among its (virtual) warps: 256 hits at W = 32. */
#define MD__NB_SEARCH_HIT_BYTES 2048 /* per 32 lanes */
/* Threads per search block: one hardware warp. The super-clusters' searches differ in length
 * (cells in reach, candidates per cell), and a block's warps wait for its slowest at the end
 * (the build's closing barrier): with four warps per block, one unit each, a third of the warp
 * time went to that wait (Nsight Compute, 23,568 atoms: stall_barrier 33% of the samples). */
#ifndef MD__NB_SEARCH_BLOCK
#define MD__NB_SEARCH_BLOCK 32
#endif
/* Search blocks per SM at most: each (virtual) warp takes units (a super-cluster's share of its
 * cells) from a counter until none are left, so the grid need not cover them. The grid is also
 * what a step that builds nothing pays to launch: 4,224 blocks on an H100 return in 5.2-5.6 us
 * (the 2,104 blocks of four warps before: 3.9-4.3 us); 16 and 24 per SM made the builds slower
 * by more than that (tutorial 06). */
#ifndef MD__NB_SEARCH_MAX_SLICES /* the most slices per super-cluster (MD_CUDA_NB_SEARCH_WARPS) */
#define MD__NB_SEARCH_MAX_SLICES 9.0
#endif
/* The most slices when there are more super-clusters than SMs. Each slice makes its own work
 * items, so slices cost the pair kernel (more, shorter items) what they save the build. Measured
 * side by side (chapter 08's --race, 1000 steps, 2026-11-27): at 23,568 atoms (368
 * super-clusters) 9 / 6 / 5 / 4 slices gave 141.6 / 138.1 / 137.2 / 137.1 us and 140.7 / 138.1 /
 * 136.4 / 137.3 us per step (H200), 9 / 5 slices 147.4 / 139.0 and 144.3 / 138.9 us (H100); the
 * 95,766-atom box has 4 either way. With fewer super-clusters than SMs the build needs the warps:
 * 9 -> 5 slices made chapter 09's 4,050-atom step 72.5 -> 75.0 us and chapter 10's sequential
 * rung (12 x 5,100 atoms) 10,712 / 10,673 -> 9,989 / 9,930 steps/s (H200). With the cluster
 * rungs' larger cells (md__cell_grid_make: 375 super-clusters at 23,568 atoms, cells of 1.24 nm)
 * 5 slices lost what the cells gained there: side by side on an H200 (2026-11-28, race, 1000
 * steps; three calls of two runs each, the 7-slice build in two, the 9-slice build in one) the
 * cells of min_cell with 5 slices 134.5 / 134.6 / 134.3 / 134.0 /
 * 134.4 / 134.4 us, the larger cells with 5 / 7 / 9 slices 137.6 / 137.5 / 138.1 / 137.5 /
 * 137.6 / 138.1, 134.3 / 134.0 / 134.3 / 133.9 and 134.3 / 134.3 us; at 95,766 atoms 398.1 /
 * 398.0 / 397.0 / 398.5 / 398.4 / 398.4 against 387.3 / 387.5 / 386.2 / 386.3 / 387.3 / 386.5
 * (5), 386.8 / 387.0 / 388.2 / 387.4 (7) and 386.5 / 388.2 (9), the same 4 slices in each (the
 * 95,766-atom box has more super-clusters than the target asks slices for). So 7. */
#ifndef MD__NB_SEARCH_FULL_SLICES
#define MD__NB_SEARCH_FULL_SLICES 7.0
#endif
#ifndef MD__NB_SEARCH_BLOCKS_PER_SM /* at most; md_cuda_nb_plan::search_blocks_per_sm: at most what is resident */
#define MD__NB_SEARCH_BLOCKS_PER_SM 32
#endif
/** @endcond */

/* Write entry `pos` of the list: j-cluster cj (first atom jf, jc atoms) with i-cluster mask im and
 * periodic shift `shift`, its exclusion masks if any. */
template <int CJ>
static __device__ __forceinline__ void md__nb_search_emit(const md__nb_search_args &a, const md__nb_sc_data &d, unsigned im,
                                                          int jf, int jc, unsigned shift, int minimg, int cj,
                                                          long long pos, long long *computed, int W) {
    constexpr int S = MD_CUDA_NB_SUPER;
    unsigned mk[S];
    int slot = -1;
    long long *ctl = a.ctl;
    *computed += (long long)__popc(im) * W;
    if (md__nb_cand_masks(d, im, jf, jc, a.exn, a.exl, a.stride, CJ, mk)) {
        slot = (int)atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_NEXCL], 1ull);
        if (slot < a.cap_excl) {
            for (int q = 0; q < S; q++) a.masks[(size_t)slot * S + q] = mk[q];
        } else {
            atomicMax(&ctl[MD__NB_CTL_NEED_EXCL], (long long)slot + 1);
            ctl[MD__NB_CTL_OVF] = 1;
            md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_OVERFLOW, (unsigned long long)slot + 1);
            slot = -1;
        }
    }
    a.entries[pos] = make_int4(jf, (int)(im | (shift << 8) | ((unsigned)minimg << 13) | ((unsigned)jc << 14) | (im << 17)),
                               slot, cj);
}

/* One (virtual) warp of W lanes per super-cluster: the j-clusters within rlist (box to box) of any
 * of its i-clusters, in a fixed order (cells z, y, x, then j-clusters in order), each once, with the
 * half-list rule (md__nb_cand_imask, md__nb_cand_masks). Pass 0 sweeps the cells and counts, and
 * keeps the hits (j-cluster, mask, shift) in shared memory; pass 1 writes them from there, or
 * sweeps again when there were more than the warp's share of MD__NB_SEARCH_HIT_BYTES holds. The
 * lanes test W candidates at a time and a ballot keeps the order, so both ways write the same list.
 * Work comes in units, a super-cluster's share of its cells (md_cuda_nb_plan::search_slices per
 * super-cluster): a warp's first unit is its index, later ones come from a counter, so a warp
 * with short units takes more and no grid has to cover them all (MD__NB_SEARCH_BLOCKS_PER_SM).
 * The last block to finish clears the rebuild flag (unless a capacity overflowed: then the list
 * stays invalid). Measured on an H100 (Nsight Compute, chapter 08's 23,568-atom race box, a build
 * in the steady state): 133 -> 92 us for one-warp blocks, units from a counter, far exclusion
 * partners kept one by one (md__nb_sc_data) and no division per cell; the race step 172.2 ->
 * 168.9 us (23,568 atoms), 517.8 -> 504.2 us (95,766). Blocks of four warps with the same counter:
 * 167.4 and 513.8 us. */
template <int W>
__global__ void __launch_bounds__(MD__NB_SEARCH_BLOCK) md__nb_search_kernel(md__nb_search_args a) {
    constexpr int CI = MD_CUDA_NB_CI, CJ = W / CI, R = CI / CJ, S = MD_CUDA_NB_SUPER, NW = MD__NB_SEARCH_BLOCK / W;
    constexpr unsigned WMASK = W >= 32 ? 0xffffffffu : ((1u << (W & 31)) - 1u);
    constexpr int HITS = MD__NB_SEARCH_HIT_BYTES / 8 / (32 / W);
    const int SL = a.slices;
    __shared__ md__nb_sc_data s_d[NW];
    __shared__ int2 s_hit[NW][HITS]; /* pass 0's hits: (j-cluster, mask | shift << 8) */
    const int wib = threadIdx.x / W, lane = threadIdx.x % W;
    const unsigned vm = md__vmask<W>();
    const int lane_base = (threadIdx.x & 31) & ~(W - 1);
    long long *ctl = a.ctl;
    if (!ctl[MD__NB_CTL_REBUILD]) return;
    const long long units = (long long)a.sc_start[a.cap_cells] * SL, warps = (long long)gridDim.x * NW;
    /* units (super-cluster vw, its share `slice` of the cells): the first by the warp's index,
     * the rest from a counter, in turn (a counter for the first ones too would have every warp's
     * atomic on one word at once) */
    for (long long u = (long long)blockIdx.x * NW + wib;;) {
        if (u >= units) break;
        const int vw = (int)(u / SL), slice = (int)(u % SL);
        __syncwarp(vm); /* every lane is done with the last unit's s_d and s_hit */
        const int4 sc = a.sc[vw];
        const md_cuda_cell_grid g = *a.grid;
        const float esc = __int_as_float((int)ctl[MD__NB_CTL_ESCAPE]);
        const float reach = a.rlist * 1.0001f + esc + 1e-4f, rl2 = a.rlist * a.rlist * 1.0002f;
        md__nb_sc_data &d = s_d[wib];
        int kmin[3], kmax[3], minimg, s, pass, total = 0;
        float4 ulo, uhi;
        long long base = 0, computed = 0;
        for (s = lane; s < S; s += W) md__nb_sc_fill(&d, s, sc, a.ci, a.bb, a.exn, a.exl, a.stride, CJ);
        __syncwarp(vm);
        minimg = md__nb_sc_reach(d, sc.y, g, reach, kmin, kmax, &ulo, &uhi);
        for (pass = 0; pass < 2; pass++) {
            int cnt = 0;
            if (pass == 1 && total <= HITS) { /* the hits of pass 0, in their order */
                __syncwarp(vm);
                for (int h = lane; h < total; h += W) {
                    const int2 hit = s_hit[wib][h];
                    const int cj = hit.x;
                    const int2 at = a.ci[cj / R];
                    const int jf = at.x + (cj % R) * CJ, jc = min(CJ, at.y - (cj % R) * CJ);
                    md__nb_search_emit<CJ>(a, d, (unsigned)hit.y & 0xffu, jf, jc, (unsigned)hit.y >> 8, minimg, cj,
                                           base + h, &computed, W);
                }
                cnt = total;
            } else {
                /* This unit's cells: numbered in z, y, x order over the range, cell c belongs to slice
                 * c mod SL. The unit steps through its own, c = slice, slice + SL, ..., with the
                 * x, y, z counters carried along (one division per unit). Visiting every cell and
                 * skipping the other slices' took a fifth of the search's instructions (Nsight
                 * Compute, 23,568 atoms, 9 slices). */
                const int nx = kmax[0] - kmin[0] + 1, ny = kmax[1] - kmin[1] + 1, ncell = nx * ny * (kmax[2] - kmin[2] + 1);
                int ix = slice % nx, iy = slice / nx % ny, iz = slice / (nx * ny);
                for (int c = slice; c < ncell; c += SL) {
                    int sx, sy, sz;
                    const int kx = kmin[0] + ix, ky = kmin[1] + iy, kz = kmin[2] + iz;
                    for (ix += SL; ix >= nx;) { /* the next cell of the slice */
                        ix -= nx;
                        if (++iy == ny) {
                            iy = 0;
                            iz++;
                        }
                    }
                    const int cx = md__wrap_cell(kx, g.dim[0], &sx), cy = md__wrap_cell(ky, g.dim[1], &sy),
                              cz = md__wrap_cell(kz, g.dim[2], &sz);
                    const int cell = (cz * g.dim[1] + cy) * g.dim[0] + cx;
                    const int jb = a.ic_start[cell] * R, je = a.ic_start[cell + 1] * R;
                    const float shx = (float)sx * g.box[0], shy = (float)sy * g.box[1], shz = (float)sz * g.box[2];
                    const unsigned shift = minimg ? 13u : (unsigned)((sx + 1) + 3 * (sy + 1) + 9 * (sz + 1));
                    for (int j0 = jb; j0 < je; j0 += W) {
                        const int cj = j0 + lane;
                        unsigned im = 0, bal;
                        int jf = 0, jc = 0;
                        if (cj < je) {
                            const int2 at = a.ci[cj / R];
                            jf = at.x + (cj % R) * CJ;
                            jc = min(CJ, at.y - (cj % R) * CJ);
                            if (jc > 0) {
                                float4 bl = a.bb[2 * cj], bh = a.bb[2 * cj + 1];
                                bl.x += shx;
                                bl.y += shy;
                                bl.z += shz;
                                bh.x += shx;
                                bh.y += shy;
                                bh.z += shz;
                                im = md__nb_cand_imask(d, sc.y, jf, jc, bl, bh, minimg, g, rl2, ulo, uhi);
                            }
                        }
                        bal = (__ballot_sync(vm, im != 0) >> lane_base) & WMASK;
                        if (im) {
                            const int h = cnt + __popc(bal & ((1u << lane) - 1u));
                            if (pass == 1)
                                md__nb_search_emit<CJ>(a, d, im, jf, jc, shift, minimg, cj, base + h, &computed, W);
                            else if (h < HITS)
                                s_hit[wib][h] = make_int2(cj, (int)(im | (shift << 8)));
                        }
                        cnt += __popc(bal);
                    }
                }
            }
            if (pass == 0) {
                total = cnt;
                if (minimg && total && lane == 0) ctl[MD__NB_CTL_MINIMG] = 1; /* every writer stores 1 */
                if (lane == 0) base = (long long)atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_NENTRIES], (unsigned long long)total);
                base = __shfl_sync(vm, base, 0, W);
                if (base + total > a.cap_entries) {
                    if (lane == 0) {
                        atomicMax(&ctl[MD__NB_CTL_NEED_ENTRIES], base + total);
                        ctl[MD__NB_CTL_OVF] = 1;
                        md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_OVERFLOW, (unsigned long long)(base + total));
                    }
                    break;
                }
            } else {
                const int nit = (total + a.chunk - 1) / a.chunk;
                long long ib = 0;
                computed = (long long)md__warp_sum_fixed<W>((md_fixed)computed, vm);
                if (lane == 0) {
                    atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_COMPUTED], (unsigned long long)computed);
                    if (nit) { /* placed by class: see MD__NB_CTL_NITEMS and md__nb_cluster_kernel */
                        const int longer = 2 * total >= nit * a.chunk; /* items of at least half a chunk */
                        const unsigned long long o = atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_NITEMS],
                                                               longer ? (unsigned long long)nit : (unsigned long long)nit << 32);
                        const long long h = (long long)(o & 0xffffffffull), l = (long long)(o >> 32);
                        ib = h + l; /* the count before: the capacity test below */
                        if (ib + nit <= a.cap_items) ib = longer ? h : a.cap_items - l - nit;
                    }
                }
                ib = __shfl_sync(vm, ib, 0, W);
                if (ib + nit > a.cap_items) {
                    if (lane == 0) {
                        atomicMax(&ctl[MD__NB_CTL_NEED_ITEMS], ib + nit);
                        ctl[MD__NB_CTL_OVF] = 1;
                        md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_OVERFLOW, (unsigned long long)(ib + nit));
                    }
                } else {
                    for (int k = lane; k < nit; k += W) {
                        /* the unit's entries cut into nit items of equal size (+-1), not chunk-sized
                         * items and a remainder: a unit's items are consecutive, so mostly the two
                         * warps of one block of the pair kernel, which retires when the longer one
                         * ends. Side by side on an H200 (2026-11-28, one call, two runs each):
                         * bench/nb_cluster's gpu_cluster_smem 75.0 / 74.3 -> 71.8 / 70.2 us at
                         * 23,568 atoms and 246.8 / 247.2 -> 220.4 / 221.2 us at 95,766 (Nsight
                         * Compute: warps active 28.2 -> 31.9% and 30.6 -> 37.1% of the SM's 64);
                         * chapter 08's race step 111.5 / 111.9 -> 109.8 / 109.6 us and 351.0 /
                         * 350.8 -> 337.4 / 338.1 us, the same potential energy */
                        const long long e0 = base + (long long)total * k / nit, e1 = base + (long long)total * (k + 1) / nit;
                        a.items[ib + k] = make_int4(vw, (int)e0, (int)e1, 0);
                    }
                }
            }
        }
        if (units <= warps) break; /* the first units were all there were */
        if (lane == 0) u = warps + (long long)atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_WORK], 1ull);
        u = __shfl_sync(vm, u, 0, W);
    }
    md__nb_build_done(ctl, 1);
}

/* The Verlet rungs' list: one thread per atom searches the cells its rlist sphere (widened by the
 * escape) reaches; pairs with float minimum-image r^2 < rlist^2 (a little more, never less), not
 * excluded; HALF: j > i only. ELL layout: neighbour k of i at nb[k * stride + i]. */
template <int HALF>
__global__ void __launch_bounds__(MD_CUDA_NB_BLOCK)
    md__nb_verlet_search_kernel(const float4 *__restrict__ xyzq, int n, const int *__restrict__ cell_start,
                                const md_cuda_cell_grid *__restrict__ gp, const double *__restrict__ box,
                                const int *__restrict__ exn, const int *__restrict__ exl, int stride,
                                int *__restrict__ nb, int *__restrict__ nbn, int max_nb, long long *ctl,
                                unsigned long long *flags, float rlist) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long n_here = 0;
    if (!ctl[MD__NB_CTL_REBUILD]) return;
    if (i < n) {
        const md_cuda_cell_grid g = *gp;
        const md_nb_box_f32 b = md__box_f32(box);
        const float4 p = xyzq[i];
        const float esc = __int_as_float((int)ctl[MD__NB_CTL_ESCAPE]);
        const float reach = rlist * 1.0001f + esc + 1e-4f, rl2 = rlist * rlist * 1.0002f;
        int kmin[3], kmax[3], full = 0, cnt = 0;
        full |= md__cell_range(p.x, p.x, reach, g.inv_cell[0], g.dim[0], &kmin[0], &kmax[0]);
        full |= md__cell_range(p.y, p.y, reach, g.inv_cell[1], g.dim[1], &kmin[1], &kmax[1]);
        full |= md__cell_range(p.z, p.z, reach, g.inv_cell[2], g.dim[2], &kmin[2], &kmax[2]);
        (void)full;
        for (int kz = kmin[2]; kz <= kmax[2]; kz++)
            for (int ky = kmin[1]; ky <= kmax[1]; ky++)
                for (int kx = kmin[0]; kx <= kmax[0]; kx++) {
                    int s0, s1, s2;
                    const int cell = (md__wrap_cell(kz, g.dim[2], &s2) * g.dim[1] + md__wrap_cell(ky, g.dim[1], &s1)) *
                                         g.dim[0] +
                                     md__wrap_cell(kx, g.dim[0], &s0);
                    for (int j = cell_start[cell]; j < cell_start[cell + 1]; j++) {
                        float d[3];
                        float4 q;
                        if (HALF ? j <= i : j == i) continue;
                        q = xyzq[j];
                        if (md_nb_delta_f32(p.x, p.y, p.z, q.x, q.y, q.z, &b, d) < rl2 &&
                            !md__nb_excluded(exn, exl, stride, i, j)) {
                            if (cnt < max_nb) nb[(size_t)cnt * stride + i] = j;
                            cnt++;
                        }
                    }
                }
        nbn[i] = cnt < max_nb ? cnt : max_nb;
        if (cnt > max_nb) {
            atomicMax(&ctl[MD__NB_CTL_NEED_NB], (long long)cnt);
            ctl[MD__NB_CTL_OVF] = 1;
            md_cuda_flag_raise(flags, MD_CUDA_FLAG_OVERFLOW, (unsigned long long)cnt);
        }
        n_here = cnt;
    }
    n_here = (long long)md__warp_sum_fixed<32>((md_fixed)n_here, 0xffffffffu);
    if ((threadIdx.x & 31) == 0 && n_here) atomicAdd((unsigned long long *)&ctl[MD__NB_CTL_NENTRIES], (unsigned long long)n_here);
    md__nb_build_done(ctl, 0);
}

/* -- the pair kernels -- */

/* Arguments of the exact rungs (tiles, full and half list) and of the exact bonded kernel. */
struct md__nb_exact_args {
    const float4 *xyzq;
    const int *type;
    const int *order;
    const float2 *lj;
    int ntypes, n, stride;
    const int *exn, *exl;
    const int *nb, *nbn;
    const double *box;
    md_fixed *force, *energy;
    long long *ctl;
    unsigned long long *flags;
    md_nb_coeffs k;
};

static __device__ __forceinline__ float md__mask_f(float v, unsigned m) { return __uint_as_float(__float_as_uint(v) & m); }

/* One pair with md.h's float arithmetic, every term converted to fixed point on its own (so any
 * order of the sums gives the same bits): the force components on i go to q; with FLAGS & 1 the
 * LJ and Coulomb energies, with FLAGS & 2 the virial d (x) f, are added to e and w. m masks the
 * pair (0: contributes nothing, whatever the arithmetic gave, NaN included), me masks its energy
 * and virial (a pair seen from both atoms counts them once). */
template <int FLAGS>
static __device__ __forceinline__ void md__exact_pair(const md_nb_coeffs &k, const md_nb_box_f32 &b, float4 pi,
                                                      float4 pj, float2 lj, unsigned m, unsigned me, md_fixed q[3],
                                                      md_fixed e[2], md_fixed w[9], int &bad) {
    const float fsc = (float)MD_FORCE_FIXED_SCALE, esc = (float)MD_ENERGY_FIXED_SCALE;
    float d[3], f[3], elj, ec, fs;
    const float r2 = md_nb_delta_f32(pi.x, pi.y, pi.z, pj.x, pj.y, pj.z, &b, d);
    m &= 0u - (unsigned)(r2 < k.rc2);
    me &= m;
    fs = md_nb_pair_f32(&k, r2, md__fmul(pi.w, pj.w), lj.x, lj.y, &elj, &ec);
#pragma unroll
    for (int x = 0; x < 3; x++) {
        f[x] = md__mask_f(md__fmul(fs, d[x]), m);
        q[x] = md_fixed_from_float(f[x], fsc);
        bad |= q[x] == MD_FIXED_INVALID;
    }
    if (FLAGS & 1) {
        const md_fixed a = md_fixed_from_float(md__mask_f(elj, me), esc), c = md_fixed_from_float(md__mask_f(ec, me), esc);
        bad |= (a == MD_FIXED_INVALID) | (c == MD_FIXED_INVALID);
        e[0] += a;
        e[1] += c;
    }
    if (FLAGS & 2) {
#pragma unroll
        for (int x = 0; x < 3; x++)
#pragma unroll
            for (int y = 0; y < 3; y++) w[3 * x + y] += md_fixed_from_float(md__mask_f(md__fmul(d[x], f[y]), me), esc);
    }
}

/* Add a warp's energies and virial (each lane's fixed-point sums) to the state, one atomic per
 * term per warp; a lane that saw an out-of-range conversion raises MD_CUDA_FLAG_RANGE. Every lane
 * of the (full, 32-lane) warp calls it. */
template <int FLAGS>
static __device__ __forceinline__ void md__exact_flush(md_fixed *energy, const md_fixed e[2], const md_fixed w[9], int bad,
                                                       int term_a, int term_b, long long *ctl,
                                                       unsigned long long *flags) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    if (FLAGS & 1) {
        const md_fixed a = md__warp_sum_fixed<32>(e[0], full), c = md__warp_sum_fixed<32>(e[1], full);
        if (lane == 0) {
            if (a && term_a >= 0) atomicAdd(&energy[term_a], a);
            if (c && term_b >= 0) atomicAdd(&energy[term_b], c);
        }
    }
    if (FLAGS & 2)
        for (int x = 0; x < 9; x++) {
            const md_fixed v = md__warp_sum_fixed<32>(w[x], full);
            if (lane == 0 && v) atomicAdd(&energy[MD_CUDA_E_VIRIAL_XX + x], v);
        }
    if (__any_sync(full, bad) && lane == 0) {
        atomicOr((unsigned long long *)&ctl[MD__NB_CTL_REASON], 2ull);
        md_cuda_flag_raise(flags, MD_CUDA_FLAG_RANGE, 0);
    }
}

/* MD_NB_GPU_TILES: thread i, all atoms j in tiles of MD_CUDA_NB_BLOCK staged in shared memory;
 * exclusions by walking i's sorted partner list as j increases; each pair twice, only i written. */
template <int FLAGS>
__global__ void __launch_bounds__(MD_CUDA_NB_BLOCK) md__nb_tiles_kernel(md__nb_exact_args a) {
    __shared__ float4 sx[MD_CUDA_NB_BLOCK];
    __shared__ int st[MD_CUDA_NB_BLOCK];
    const int i = blockIdx.x * MD_CUDA_NB_BLOCK + threadIdx.x;
    const int act = i < a.n;
    const md_nb_box_f32 b = md__box_f32(a.box);
    const float4 pi = act ? a.xyzq[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int ti = act ? a.type[i] * a.ntypes : 0, m = act ? a.exn[i] : 0;
    if (act && !(isfinite(pi.x) && isfinite(pi.y) && isfinite(pi.z)))
        md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)a.order[i]);
    int kx = 0, nex = m > 0 ? a.exl[i] : INT_MAX, bad = 0;
    md_fixed f[3] = {0, 0, 0}, e[2] = {0, 0}, w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int j0 = 0; j0 < a.n; j0 += MD_CUDA_NB_BLOCK) {
        const int jn = min(MD_CUDA_NB_BLOCK, a.n - j0);
        __syncthreads();
        if (threadIdx.x < jn) {
            sx[threadIdx.x] = a.xyzq[j0 + threadIdx.x];
            st[threadIdx.x] = a.type[j0 + threadIdx.x];
        }
        __syncthreads();
        for (int t = 0; t < jn; t++) {
            const int j = j0 + t, hit = j == nex;
            md_fixed q[3];
            unsigned mk;
            if (hit) { /* the next partner: rare, so a branch costs nothing here */
                kx++;
                nex = kx < m ? a.exl[(size_t)kx * a.stride + i] : INT_MAX;
            }
            mk = 0u - (unsigned)(act & (j != i) & !hit);
            md__exact_pair<FLAGS>(a.k, b, pi, sx[t], a.lj[ti + st[t]], mk, j > i ? mk : 0u, q, e, w, bad);
            f[0] += q[0];
            f[1] += q[1];
            f[2] += q[2];
        }
    }
    if (act) {
        a.force[i] += f[0];
        a.force[a.stride + i] += f[1];
        a.force[2 * (size_t)a.stride + i] += f[2];
    }
    md__exact_flush<FLAGS>(a.energy, e, w, bad, MD_CUDA_E_LJ, MD_CUDA_E_COUL_REAL, a.ctl, a.flags);
}

/* MD_NB_GPU_FULL_LIST (HALF 0): thread i over its full list (ELL, column-major, so a warp's
 * loads of its k-th neighbours are one transaction); the warp runs to its longest list, masking
 * the rest: no branch in the loop, no atomics (each pair twice, only the i force written).
 * MD_NB_GPU_HALF_LIST (HALF 1): the half list (j > i), the j forces by 64-bit atomicAdd. */
template <int FLAGS, int HALF>
__global__ void __launch_bounds__(MD_CUDA_NB_BLOCK) md__nb_list_kernel(md__nb_exact_args a) {
    const int i = blockIdx.x * MD_CUDA_NB_BLOCK + threadIdx.x;
    const int act = i < a.n, ii = act ? i : 0;
    const md_nb_box_f32 b = md__box_f32(a.box);
    const float4 pi = a.xyzq[ii];
    const int ti = a.type[ii] * a.ntypes, cnt = act ? a.nbn[i] : 0;
    int kmax = cnt, bad = 0;
    md_fixed f[3] = {0, 0, 0}, e[2] = {0, 0}, w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (act && !(isfinite(pi.x) && isfinite(pi.y) && isfinite(pi.z)))
        md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)a.order[i]);
    for (int o = 16; o > 0; o >>= 1) kmax = max(kmax, __shfl_xor_sync(0xffffffffu, kmax, o));
    for (int k = 0; k < kmax; k++) {
        const unsigned mk = 0u - (unsigned)(k < cnt);
        const int jl = a.nb[(size_t)k * a.stride + ii];
        const int j = mk ? jl : ii; /* a select: padding pairs i with itself, masked */
        md_fixed q[3];
        md__exact_pair<FLAGS>(a.k, b, pi, a.xyzq[j], a.lj[ti + a.type[j]], mk, HALF || j > i ? mk : 0u, q, e, w, bad);
        f[0] += q[0];
        f[1] += q[1];
        f[2] += q[2];
        if (HALF && mk)
            for (int x = 0; x < 3; x++)
                if (q[x]) md__red_add(&a.force[(size_t)x * a.stride + j], (md_fixed)0 - q[x]);
    }
    if (act)
        for (int x = 0; x < 3; x++) {
            if (HALF) md__red_add(&a.force[(size_t)x * a.stride + i], f[x]);
            else a.force[(size_t)x * a.stride + i] += f[x];
        }
    md__exact_flush<FLAGS>(a.energy, e, w, bad, MD_CUDA_E_LJ, MD_CUDA_E_COUL_REAL, a.ctl, a.flags);
}

/* Arguments of the cluster kernel. */
/* The exact pairs every rung shares: Ewald exclusion corrections (every excluded pair, at its
 * minimum image), scaled 1-4 pairs, and from thread 0 the Ewald self energy and the dispersion
 * correction (energy E / V, virial diagonal W / V with V from the device box). The float
 * arithmetic and per-pair fixed-point conversions of md.h's MD_NB_CPU_FIXED. */
struct md__nb_bonded_args {
    const float4 *xyzq;
    const int *rank;
    const int2 *excl_pairs;
    int nexcl;
    const int2 *pair14;
    const float2 *pair14_lj;
    int npair14;
    float fudge_qq;
    int lj_on, coul_on, ewald;
    const double *box;
    md_fixed *force, *energy;
    int stride;
    double self_energy, disp_e, disp_w;
    double reach; /* cutoff (tiles) or cutoff + buffer (lists): must be at most half the box */
    long long *ctl;
    unsigned long long *flags;
    md_nb_coeffs k;
};

/* Thread t of the exact pairs (whole warps: warp sums). */
template <int FLAGS>
static __device__ __forceinline__ void md__nb_bonded_body(const md__nb_bonded_args &a, int t) {
    const float fsc = (float)MD_FORCE_FIXED_SCALE, esc = (float)MD_ENERGY_FIXED_SCALE;
    const int ne = a.ewald ? a.nexcl : 0;
    md_fixed ex = 0, l14 = 0, c14 = 0, w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    int bad = 0;
    if (t < ne + a.npair14) {
        const md_nb_box_f32 b = md__box_f32(a.box);
        const int2 pr = t < ne ? a.excl_pairs[t] : a.pair14[t - ne];
        const int ia = a.rank[pr.x], ib = a.rank[pr.y];
        const float4 pa = a.xyzq[ia], pb = a.xyzq[ib];
        float d[3], f[3], r2, fs, el = 0.0f, ec = 0.0f;
        r2 = md_nb_delta_f32(pa.x, pa.y, pa.z, pb.x, pb.y, pb.z, &b, d);
        if (t < ne) {
            fs = md_nb_excl_f32(&a.k, r2, md__fmul(pa.w, pb.w), &ec);
            ex = md_fixed_from_float(ec, esc);
            bad |= ex == MD_FIXED_INVALID;
        } else {
            const float2 lj = a.lj_on ? a.pair14_lj[t - ne] : make_float2(0.0f, 0.0f);
            const float qq = a.coul_on ? md__fmul(a.fudge_qq, md__fmul(pa.w, pb.w)) : 0.0f;
            fs = md_nb_pair14_f32(&a.k, r2, qq, lj.x, lj.y, &el, &ec);
            l14 = md_fixed_from_float(el, esc);
            c14 = md_fixed_from_float(ec, esc);
            bad |= (l14 == MD_FIXED_INVALID) | (c14 == MD_FIXED_INVALID);
        }
        for (int x = 0; x < 3; x++) {
            md_fixed q;
            f[x] = md__fmul(fs, d[x]);
            q = md_fixed_from_float(f[x], fsc);
            bad |= q == MD_FIXED_INVALID;
            md__red_add(&a.force[(size_t)x * a.stride + ia], q);
            md__red_add(&a.force[(size_t)x * a.stride + ib], (md_fixed)0 - q);
        }
        if (FLAGS & 2)
            for (int x = 0; x < 3; x++)
                for (int y = 0; y < 3; y++) w[3 * x + y] = md_fixed_from_float(md__fmul(d[x], f[y]), esc);
    }
    if (FLAGS & 1) {
        const md_fixed e1 = md__warp_sum_fixed<32>(ex, 0xffffffffu), e2 = md__warp_sum_fixed<32>(l14, 0xffffffffu),
                       e3 = md__warp_sum_fixed<32>(c14, 0xffffffffu);
        if ((threadIdx.x & 31) == 0) {
            if (e1) atomicAdd(&a.energy[MD_CUDA_E_COUL_EXCL], e1);
            if (e2) atomicAdd(&a.energy[MD_CUDA_E_LJ14], e2);
            if (e3) atomicAdd(&a.energy[MD_CUDA_E_COUL14], e3);
        }
    }
    if (FLAGS & 2)
        for (int x = 0; x < 9; x++) {
            const md_fixed v = md__warp_sum_fixed<32>(w[x], 0xffffffffu);
            if ((threadIdx.x & 31) == 0 && v) atomicAdd(&a.energy[MD_CUDA_E_VIRIAL_XX + x], v);
        }
    if (t == 0) {
        const double vol = a.box[0] * a.box[1] * a.box[2];
        const double shortest = fmin(a.box[0], fmin(a.box[1], a.box[2]));
        if (!(2.0 * a.reach <= shortest)) { /* the box may have changed on the device */
            atomicOr((unsigned long long *)&a.ctl[MD__NB_CTL_REASON], 1ull);
            md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_RANGE, 0);
        }
        if (FLAGS & 1) {
            atomicAdd(&a.energy[MD_CUDA_E_COUL_SELF], md__fixed_from_double(a.self_energy, MD_ENERGY_FIXED_SCALE));
            atomicAdd(&a.energy[MD_CUDA_E_LJ_DISPERSION], md__fixed_from_double(a.disp_e / vol, MD_ENERGY_FIXED_SCALE));
        }
        if (FLAGS & 2)
            for (int x = 0; x < 3; x++)
                atomicAdd(&a.energy[MD_CUDA_E_VIRIAL_XX + 4 * x], md__fixed_from_double(a.disp_w / vol, MD_ENERGY_FIXED_SCALE));
    }
    if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) {
        atomicOr((unsigned long long *)&a.ctl[MD__NB_CTL_REASON], 2ull);
        md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_RANGE, 0);
    }
}

/* The exact pairs as a kernel of their own (the rungs other than the cluster rungs, whose pair
 * kernel runs them in blocks after its items: md__nb_cluster_kernel). */
template <int FLAGS>
__global__ void __launch_bounds__(MD_CUDA_NB_BLOCK) md__nb_bonded_kernel(md__nb_bonded_args a) {
    md__nb_bonded_body<FLAGS>(a, blockIdx.x * blockDim.x + threadIdx.x);
}

struct md__nb_cluster_args {
    const float4 *xyzq;
    const int *type;
    const int2 *ci;
    const int4 *sc;
    const int4 *entries;
    const int4 *items;
    const unsigned int *masks;
    const float2 *lj;
    int ntypes;
    long long cap_items;
    const double *box;
    md_fixed *force, *energy;
    int stride;
    long long *ctl;
    unsigned long long *flags;
    md_cuda_nb_fast c;
    long long item_blocks; /* blocks of work items; the blocks after them run the exact pairs */
    long long item_stride; /* item_blocks x warps per block: a warp takes items item, item + stride, ... */
    md__nb_bonded_args exact;
};

/* A float2 from a 32-bit shared-memory address (__cvta_generic_to_shared). The pair kernel's LJ
 * lookup with it: s_ti holds row ti's byte offset and an entry computes column tj's address once,
 * so an i-cluster step adds one register to another (SASS, force-only: 6 instructions for the
 * lookup before, 3 now: nvcc rebuilt the table's address from the block's shared window,
 * S2R SR_CgaCtaId, at every step). Side by side on an H200 (2026-11-28, one call, two runs each,
 * with the mask test written as one predicate): bench/nb_cluster's gpu_cluster_smem (energies)
 * 81.2 -> 74.6 / 77.3 us at 23,568 atoms and 255.9 -> 244.4 / 246.6 us at 95,766 (one run of
 * the code before came back whole); chapter 08's race step 113.4 / 113.4 -> 112.0 / 112.2 us
 * and 356.7 / 356.8 -> 350.9 / 350.0 us, the same potential energy to the last digit. */
static __device__ __forceinline__ float2 md__lds_float2(unsigned addr) {
    float2 v;
    asm("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}

/* Whether bit @p bit of @p x is set and @p r2 < @p rc2, as one predicate, in PTX the compiler
 * does not rewrite. From (x & (1 << s)) != 0 && r2 < rc2 with a constant s nvcc made a shift, an
 * and, an integer compare, the float compare and a predicate and (SASS of md__nb_cluster_kernel,
 * five instructions per i-cluster step); written here it is a LOP3 to a predicate and an FSETP
 * that ands it in. */
static __device__ __forceinline__ int md__bit_and_lt(unsigned x, unsigned bit, float r2, float rc2) {
    int ok;
    asm("{\n\t.reg .pred pb, pr;\n\t.reg .b32 t;\n\t"
        "and.b32 t, %1, %2;\n\t"
        "setp.ne.b32 pb, t, 0;\n\t"
        "setp.lt.and.f32 pr, %3, %4, pb;\n\t"
        "selp.s32 %0, 1, 0, pr;\n\t}"
        : "=r"(ok)
        : "r"(x), "r"(bit), "f"(r2), "f"(rc2));
    return ok;
}

/* The body of the cluster kernel for one work item (see md__nb_cluster_kernel). PRUNE: the first
 * evaluation after a build: the entry's outer i-cluster mask (bits 17-24) is computed and each
 * entry's inner mask (bits 0-7) is rewritten to the i-clusters with an atom pair within
 * cutoff + buffer (a ballot per i-cluster); otherwise the inner mask is used. MI: the list may
 * hold entries that take the minimum image per pair (small boxes); 0 compiles that branch out. */
template <int W, int FLAGS, int SMEM, int PRUNE, int MI>
static __device__ __forceinline__ void md__nb_cluster_item(const md__nb_cluster_args &a, long long item, int wib,
                                                           float4 (*s_xi)[MD_CUDA_NB_SUPER * MD_CUDA_NB_CI],
                                                           int (*s_ti)[MD_CUDA_NB_SUPER * MD_CUDA_NB_CI],
                                                           const float2 *s_lj, const float4 *s_shift, float4 *s_fi) {
    constexpr int CI = MD_CUDA_NB_CI, CJ = W / CI, S = MD_CUDA_NB_SUPER;
    const int lane = threadIdx.x % W, ii = lane % CI, jj = lane / CI;
    const unsigned vm = md__vmask<W>();
    const float fsc = (float)MD_FORCE_FIXED_SCALE;
    const int4 it = a.items[item];
    const int4 sc = a.sc[it.x];
    const md_cuda_nb_fast &c = a.c;
    const float L0 = (float)a.box[0], L1 = (float)a.box[1], L2 = (float)a.box[2];
    const float iL0 = (float)(1.0 / a.box[0]), iL1 = (float)(1.0 / a.box[1]), iL2 = (float)(1.0 / a.box[2]);
    float elj = 0.0f, ecl = 0.0f, vir[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    unsigned ivalid = 0; /* bit s: atom ii of i-cluster s is real */
    int bad = 0, npc = 0;
    long long kept = 0; /* PRUNE: i-cluster steps kept */
    /* The item's first W entries, loaded before the i-clusters are staged so the load's latency
     * passes during the staging (Nsight Compute, 23,568 atoms: the warps stalled on this load,
     * made after the staging, in 9.3% of the kernel's stall samples) */
    int4 my = it.y + lane < it.z ? a.entries[it.y + lane] : make_int4(0, 0, -1, 0);
    __syncwarp(vm); /* a warp's previous item read s_xi and every lane's s_fi */
    for (int k = lane; k < S * CI; k += W) {
        const int s = k / CI, q = k % CI;
        float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int t = 0;
        if (s < sc.y) {
            const int2 at = a.ci[sc.x + s];
            p = a.xyzq[at.x + (q < at.y ? q : 0)];
            t = a.type[at.x + (q < at.y ? q : 0)];
            p.w = q < at.y ? p.w * c.kc : 0.0f;
        }
        s_xi[wib][k] = p;
        s_ti[wib][k] = SMEM ? t * a.ntypes * (int)sizeof(float2) : t * a.ntypes; /* SMEM: a byte offset */
    }
#pragma unroll
    for (int s = 0; s < S; s++) {
        s_fi[s * W + lane] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (s < sc.y && ii < a.ci[sc.x + s].y) ivalid |= 1u << s;
    }
    __syncwarp(vm);
    for (int e0 = it.y; e0 < it.z; e0 += W) {
        if (e0 != it.y) my = e0 + lane < it.z ? a.entries[e0 + lane] : make_int4(0, 0, -1, 0);
        const int ne = min(W, it.z - e0);
        for (int k = 0; k < ne; k++) {
            const unsigned info = (unsigned)md__lane_value<W>(my.y, k, vm);
            const unsigned imask = PRUNE ? (info >> 17) & 0xffu : info & 0xffu;
            if (!imask) continue; /* pruned away: uniform over the warp */
            {
                const int jf = __shfl_sync(vm, my.x, k, W);
                const int slot = md__lane_value<W>(my.z, k, vm);
                const unsigned sh = (info >> 8) & 31u, mi = MI ? (info >> 13) & 1u : 0u;
                const int jc = (int)(info >> 14) & 7;
                const int vj = jj < jc, aj = jf + (vj ? jj : 0);
                float4 pj = a.xyzq[aj];
                const int tj = a.type[aj];
                const float2 *ljrow = a.lj + tj;
                /* SMEM: the 32-bit shared-memory address of column tj of the table (see md__lds_float2) */
                const unsigned ljj = SMEM ? (unsigned)__cvta_generic_to_shared(s_lj + tj) : 0u;
                unsigned okb = vj ? ivalid : 0u, near = 0; /* okb bit s: this lane's pair with i-cluster s may count */
                float fjx = 0.0f, fjy = 0.0f, fjz = 0.0f;
                if (slot >= 0) { /* an entry with exclusions or the diagonal: this lane's bit of each mask */
                    unsigned eb = 0;
#pragma unroll
                    for (int s = 0; s < S; s++) eb |= ((a.masks[(size_t)slot * S + s] >> lane) & 1u) << s;
                    okb &= eb;
                }
                if (!mi) { /* the periodic image: one shared-memory read (md__nb_cluster_kernel's table) */
                    const float4 sv = s_shift[sh];
                    pj.x += sv.x;
                    pj.y += sv.y;
                    pj.z += sv.z;
                }
                /* the i-cluster steps: the mask's 8 bits tested in turn, unrolled (uniform
                 * branches; each step's shared-memory offsets are constants), each lane's i forces
                 * in shared memory (see md__nb_cluster_kernel) */
#pragma unroll
                for (int s = 0; s < S; s++) { /* uniform over the warp */
                    if (!((imask >> s) & 1u)) continue;
                    float4 f = s_fi[s * W + lane];
                    const float4 pi = s_xi[wib][s * CI + ii];
                    const int ti = s_ti[wib][s * CI + ii];
                    const float2 lj = SMEM ? md__lds_float2(ljj + (unsigned)ti) : __ldg(ljrow + ti);
                    float dx = pi.x - pj.x, dy = pi.y - pj.y, dz = pi.z - pj.z, r2, fs, el = 0.0f, ec = 0.0f;
                    int ok;
                    if (mi) { /* small boxes: minimum image per pair (uniform branch) */
                        dx = fmaf(-L0, rintf(dx * iL0), dx);
                        dy = fmaf(-L1, rintf(dy * iL1), dy);
                        dz = fmaf(-L2, rintf(dz * iL2), dz);
                    }
                    r2 = fmaf(dx, dx, fmaf(dy, dy, dz * dz));
                    ok = md__bit_and_lt(okb, 1u << s, r2, c.rc2);
                    if (PRUNE) /* bit s: this lane's real pair with i-cluster s is within cutoff + buffer */
                        near |= md__bit_and_lt(okb, 1u << s, r2, c.rl2) ? 1u << s : 0u;
                    fs = md_cuda_nb_pair_fast(&c, r2, md_cuda_rsqrt_mufu(r2), pi.w * pj.w, lj.x, lj.y, FLAGS & 1, &el, &ec);
                    fs = ok ? fs : 0.0f;
                    f.x = fmaf(fs, dx, f.x);
                    f.y = fmaf(fs, dy, f.y);
                    f.z = fmaf(fs, dz, f.z);
                    fjx = fmaf(-fs, dx, fjx);
                    fjy = fmaf(-fs, dy, fjy);
                    fjz = fmaf(-fs, dz, fjz);
                    if (FLAGS & 1) {
                        elj += ok ? el : 0.0f;
                        ecl += ok ? ec : 0.0f;
                    }
                    if (FLAGS & 2) {
                        const float gx = fs * dx, gy = fs * dy, gz = fs * dz;
                        vir[0] = fmaf(gx, dx, vir[0]);
                        vir[1] = fmaf(gy, dx, vir[1]);
                        vir[2] = fmaf(gz, dx, vir[2]);
                        vir[3] = fmaf(gy, dy, vir[3]);
                        vir[4] = fmaf(gz, dy, vir[4]);
                        vir[5] = fmaf(gz, dz, vir[5]);
                    }
                    if (FLAGS & 4) npc += ok;
                    s_fi[s * W + lane] = f;
                }
                if (PRUNE) { /* keep the i-clusters with a real pair within cutoff + buffer: one OR
                              * over the warp per entry instead of a ballot per i-cluster step (SASS:
                              * a force-only prune step 63 -> 49-50 instructions, 94 -> 73-74 with
                              * energies; the same inner masks). Side by side on an H100 (2026-12-08,
                              * bench/ab.sh, two rounds, both with the windowed spread's change):
                              * chapter 08's race 101.0 / 101.0 -> 99.0 / 99.0 us at 23,568 atoms,
                              * 308.3 / 307.6 -> 301.0 / 301.0 us at 95,766 */
                    const unsigned inner = md__warp_or<W>(near, vm);
                    if (lane == 0) { /* this warp owns the entry: rewrite its inner mask */
                        int4 *ent = (int4 *)&a.entries[e0 + k];
                        ent->y = (int)((info & ~0xffu) | inner);
                        kept += __popc(inner);
                    }
                }
                { /* j force over the CI lanes of atom jj: transposed, 4 shuffles, lane ii ends with component ii */
                    float x1 = (ii & 1) ? fjy : fjx, y1 = (ii & 1) ? fjx : fjy, c2, d2;
                    x1 += __shfl_xor_sync(vm, y1, 1, W);
                    fjz += __shfl_xor_sync(vm, fjz, 1, W);
                    c2 = (ii & 2) ? fjz : x1;
                    d2 = (ii & 2) ? x1 : fjz;
                    c2 += __shfl_xor_sync(vm, d2, 2, W);
                    c2 += __shfl_xor_sync(vm, c2, 4, W);
                    if (ii < 3 && vj) {
                        const md_fixed q = md_fixed_from_float(c2, fsc);
                        bad |= q == MD_FIXED_INVALID;
                        if (q) md__red_add(&a.force[(size_t)ii * a.stride + aj], q);
                    }
                }
            }
        }
    }
    /* i forces: each (i-cluster s, atom q) of the super-cluster summed over the CJ slots of its
     * lanes in shared memory by one lane, in the order of a butterfly over jj ((f0 + f1) + (f2 +
     * f3) for CJ 4), and its three components added by that lane: consecutive lanes take
     * consecutive atoms. A butterfly of shuffles per i-cluster, with one lane per component
     * adding, gave the same sums more slowly: side by side on an H200 (2026-11-28, two runs each)
     * bench/nb_cluster 87.62 / 85.23 -> 81.02 / 80.96 us at 23,568 atoms, chapter 08's race step
     * 123.8 / 124.5 -> 120.1 / 120.5 us and 369.9 / 370.0 -> 362.0 / 362.9 us at 95,766. */
    __syncwarp(vm);
    for (int p = lane; p < S * CI; p += W) {
        const int s = p / CI, q = p % CI;
        float4 t[CJ];
#pragma unroll
        for (int j = 0; j < CJ; j++) t[j] = s_fi[s * W + j * CI + q];
#pragma unroll
        for (int o = 1; o < CJ; o <<= 1)
#pragma unroll
            for (int j = 0; j + o < CJ; j += 2 * o) {
                t[j].x += t[j + o].x;
                t[j].y += t[j + o].y;
                t[j].z += t[j + o].z;
            }
        if (s < sc.y) {
            const int2 at = a.ci[sc.x + s];
            if (q < at.y) {
                const float v[3] = {t[0].x, t[0].y, t[0].z};
#pragma unroll
                for (int x = 0; x < 3; x++) {
                    const md_fixed f = md_fixed_from_float(v[x], fsc);
                    bad |= f == MD_FIXED_INVALID;
                    if (f) md__red_add(&a.force[(size_t)x * a.stride + at.x + q], f);
                }
            }
        }
    }
    if (FLAGS & 1) {
        elj = md__warp_sum_float<W>(elj, vm);
        ecl = md__warp_sum_float<W>(ecl, vm);
        if (lane == 0) {
            const md_fixed ql = md_fixed_from_float(elj, (float)MD_ENERGY_FIXED_SCALE);
            const md_fixed qc = md_fixed_from_float(ecl, (float)MD_ENERGY_FIXED_SCALE);
            bad |= (ql == MD_FIXED_INVALID) | (qc == MD_FIXED_INVALID);
            atomicAdd(&a.energy[MD_CUDA_E_LJ], ql);
            atomicAdd(&a.energy[MD_CUDA_E_COUL_REAL], qc);
        }
    }
    if (FLAGS & 2) {
        /* W_ab = sum (F/r) d_a d_b is symmetric: vir holds xx, xy, xz, yy, yz, zz */
        float s6[6];
        for (int x = 0; x < 6; x++) s6[x] = md__warp_sum_float<W>(vir[x], vm);
        if (lane == 0)
            for (int x = 0; x < 9; x++) {
                const int lo = min(x / 3, x % 3), hi = max(x / 3, x % 3);
                atomicAdd(&a.energy[MD_CUDA_E_VIRIAL_XX + x],
                          md_fixed_from_float(s6[lo == 0 ? hi : (lo == 1 ? hi + 2 : 5)], (float)MD_ENERGY_FIXED_SCALE));
            }
    }
    if (FLAGS & 4) {
        for (int o = W / 2; o > 0; o >>= 1) npc += __shfl_xor_sync(vm, npc, o, W);
        if (lane == 0 && npc) atomicAdd((unsigned long long *)&a.ctl[MD__NB_CTL_PAIRS_CUT], (unsigned long long)npc);
    }
    if (PRUNE && lane == 0 && kept)
        atomicAdd((unsigned long long *)&a.ctl[MD__NB_CTL_PRUNED], (unsigned long long)(kept * W));
    if (__any_sync(vm, bad) && lane == 0) {
        atomicOr((unsigned long long *)&a.ctl[MD__NB_CTL_REASON], 2ull);
        md_cuda_flag_raise(a.flags, MD_CUDA_FLAG_RANGE, 0);
    }
}

/* The cluster rungs. One (virtual) warp of W lanes per work item: a super-cluster (up to
 * MD_CUDA_NB_SUPER i-clusters of CI atoms, staged in shared memory) and a run of its list entries.
 * Lane = jj * CI + ii: the lane holds j atom jj of the entry's j-cluster (CJ = W / CI atoms) and
 * pairs it with atom ii of every i-cluster the entry's mask names. Padding, the pairs a < b rule
 * on the diagonal and exclusions are masks; r^2 >= rc^2 is a mask; no lane branches. The j force
 * is reduced over the CI lanes of its atom with 4 shuffles (transposed: each lane ends with one
 * component) and written by 3 lanes as fixed point, once per entry; each lane's i forces stay in
 * shared memory (s_fi, one float4 per i-cluster, its own slot) until the item ends, and an entry
 * tests the bits of its mask in an unrolled loop. FLAGS: 1 energy, 2 virial, 4 count pairs in
 * the cutoff. SMEM: LJ table in shared memory (else read through L1). The first launch after a
 * build prunes the list (md__nb_cluster_item); its last block clears the prune flag. At least
 * 1024 threads per SM: 64 registers instead of the 80 nvcc picks on its own, 32 warps per SM
 * instead of 24 for a latency-bound kernel. Measured on an H100: pair kernel 96.7 -> 95.4 us,
 * chapter-08 step 204-206 -> 200 us (23,568 atoms) and 644 -> 626 us (95,766).
 * The i forces were held in registers (three per i-cluster, 24 in all) with a test of each of
 * the mask's 8 bits; at 64 registers that spilled (ptxas -v, W 32: 76 bytes stored and 340 loaded
 * per thread force-only, 172 / 468 with energy). In shared memory (8 KiB per block of 64) there
 * are no spills, the same sums in the same order (the same bits: the race's potential energy
 * agrees to the last printed digit) and a loop over the set bits (__ffs) instead of 8 tests. Measured
 * side by side on an H200 (2026-11-28, two calls of two runs each): chapter 08's race step 128.5 / 129.0 /
 * 128.5 / 128.9 -> 127.1 / 127.2 / 127.1 / 127.5 us at 23,568 atoms and 384.4 / 384.2 / 383.4 /
 * 383.1 -> 381.2 / 381.0 / 380.5 / 379.9 us at 95,766; bench/nb_cluster's gpu_cluster_smem (with
 * energies) unchanged (89.5 / 90.0 / 92.4 / 90.2 -> 90.1 / 89.2 / 90.3 / 91.8 us at 23,568 atoms).
 * Two steps per loop iteration (two independent chains) spilled again (296 / 516 bytes) and was
 * slower (90.4 / 91.9 and 284.3 / 283.3 us).
 * The grid covered the items' capacity (5.5 times the 5,204 items of the 23,568-atom list): the
 * blocks past the items started, read the item count and ended, after the last items' blocks and
 * before the exact pairs' (Nsight Compute: 28,408 warps launched, 6% of the stall samples on their
 * instructions). It now covers the last polled build's items and a quarter more
 * (md_cuda_nb_plan::grid_items), each warp taking item, item + grid's warps, ...; and the loop over
 * the mask's set bits is 8 unrolled tests, so each step's shared-memory offsets are constants
 * (ptxas, W 32: no spill force-only or with energy, as before; with energy and virial 20 / 116
 * bytes stored / loaded per thread, against 16 / 128 and 24 / 208 before; the counting kernel
 * 4 / 4, against none). Side by side on an H200 (2026-11-28, chapter 08's race, 1,000 steps, two
 * calls): the grid alone 120.5 / 119.9 -> 118.6 / 119.3 us at 23,568 atoms but 362.4 / 361.8 ->
 * 364.0 / 364.6 us at 95,766; the tests alone 120.2 / 120.4 / 120.7 -> 120.4 / 119.6 / 120.1 and
 * 362.9 / 363.2 / 363.1 -> 363.5 / 363.4 / 362.2 us; both 117.5 / 117.1 and 117.1 / 117.2 / 117.8
 * us, 360.3 / 359.7 and 361.2 / 360.6 / 360.6 us (kept); bench/nb_cluster's gpu_cluster_smem 81.2 /
 * 80.8 -> 80.6 / 78.7 us.
 * Persistent item blocks (as many as fit at once, each
 * warp taking items from a counter, the last warp resetting it) were slower at both sizes:
 * 106.8-117.2 us at 23,568 atoms and 295-317 us at 95,766, the race 140-146 and 378-395 us
 * (not investigated further).
 * Blocks of MD_CUDA_NB_CLUSTER_BLOCK threads (a block retires when its last warp ends, so smaller
 * blocks free their slots sooner) and blocks past the list's items skipping the set-up: measured
 * side by side on an H100 (bench/nb_cluster, 23,568 atoms, gpu_cluster_smem, two runs each):
 * 128 threads 92.1 / 92.4 us, 64 threads 90.3 / 90.3, 32 threads 90.5 / 90.9; chapter 08's race
 * at 95,766 atoms 501.8 (128) / 499.7 (64) / 495.3 (32) us, at 23,568 atoms within the runs'
 * spread (155.3-159.1 us), so 64. Computing two i-clusters per mask branch (two independent
 * chains) spilled more (212 / 468 bytes) and was slower (94.8 us). Measured again with work items
 * of equal size and the long ones first (H200, 2026-11-28, one call, two runs each, 64 -> 32
 * threads): bench/nb_cluster 69.7 / 70.1 -> 69.7 / 69.4 us and 215.5 / 213.9 -> 215.7 / 214.1
 * us; chapter 08's race 109.4 / 110.0 -> 109.9 / 109.3 us and 335.1 / 335.0 -> 333.8 / 333.8
 * us, so 32 (a block is one warp: nothing waits for a sibling's longer item). */
static_assert(MD_CUDA_NB_CLUSTER_BLOCK % 32 == 0 && 1024 % MD_CUDA_NB_CLUSTER_BLOCK == 0 && MD_CUDA_NB_CLUSTER_BLOCK <= 512,
              "MD_CUDA_NB_CLUSTER_BLOCK: 32, 64, 128, 256 or 512");
template <int W, int FLAGS, int SMEM>
__global__ void __launch_bounds__(MD_CUDA_NB_CLUSTER_BLOCK, 1024 / MD_CUDA_NB_CLUSTER_BLOCK)
    md__nb_cluster_kernel(md__nb_cluster_args a) {
    constexpr int S = MD_CUDA_NB_SUPER, CI = MD_CUDA_NB_CI, NW = MD_CUDA_NB_CLUSTER_BLOCK / W;
    extern __shared__ float2 md__nb_lj_smem[];
    __shared__ float4 s_xi[NW][S * CI];
    __shared__ int s_ti[NW][S * CI];
    __shared__ float4 s_shift[27]; /* shift code sh (0..26) -> ((sh % 3 - 1) L0, (sh / 3 % 3 - 1) L1, (sh / 9 - 1) L2) */
    __shared__ float4 s_fi[NW][S * W]; /* lane l's i force for i-cluster s at [s * W + l] */
    const int wib = threadIdx.x / W;
    const long long item = (long long)blockIdx.x * NW + wib;
    const int prune = a.ctl[MD__NB_CTL_PRUNE] != 0; /* the same for every block: cleared only after all */
    const int minimg = a.ctl[MD__NB_CTL_MINIMG] != 0; /* set by the build, the same for every block */
    const long long iw = a.ctl[MD__NB_CTL_NITEMS];
    long long nitems = md__nb_nitems(iw);
    if (nitems > a.cap_items) nitems = a.cap_items;
    /* The exact pairs (md__nb_bonded_body) in the blocks after the items': they run in the items'
     * tail instead of as a kernel of their own after this one, on the step's critical path.
     * Measured side by side (chapter 08's --race, 1000 steps, H200, 2026-11-28, three runs each):
     * 131.8 / 132.5 / 132.8 -> 128.6 / 128.9 / 128.8 us per step at 23,568 atoms, 384.4 / 384.4 /
     * 383.9 -> 383.6 / 382.8 / 383.5 us at 95,766. */
    if ((long long)blockIdx.x >= a.item_blocks) {
        md__nb_bonded_body<FLAGS & 3>(a.exact, (int)(((long long)blockIdx.x - a.item_blocks) * blockDim.x) +
                                                   (int)threadIdx.x);
        nitems = 0;
    } else if ((long long)blockIdx.x * NW < nitems) { /* a block past the items skips the set-up */
        if (SMEM)
            for (int k = threadIdx.x; k < a.ntypes * a.ntypes; k += blockDim.x) md__nb_lj_smem[k] = a.lj[k];
        for (int k = threadIdx.x; k < 27; k += blockDim.x) /* each product exact: (-1, 0 or 1) x L */
            s_shift[k] = make_float4((float)(k % 3 - 1) * (float)a.box[0], (float)(k / 3 % 3 - 1) * (float)a.box[1],
                                     (float)(k / 9 - 1) * (float)a.box[2], 0.0f);
        __syncthreads();
    }
    /* the build's long items first, then its short ones (MD__NB_CTL_NITEMS), so the grid's last
     * warps, which run while the device empties, take the short work */
    const long long nlong = iw & 0xffffffffll;
    for (int it0 = (int)item; it0 < (int)nitems; it0 += (int)a.item_stride) {
        const int it = it0 < nlong ? it0 : (int)(a.cap_items - 1 - (it0 - nlong));
        /* the prune too has a body without the minimum-image branch: the first evaluation after a
         * build computes the fresh list's every pair, and the branch costs instructions per pair
         * step whether taken or not (SASS, force-only: 73 -> 68 per i-cluster step). Measured side
         * by side on an H200 (Nsight Compute, race boxes): the prune evaluation 131.6-136.4 ->
         * 123.3-129.0 us at 23,568 atoms, 459-492 -> 427-456 us at 95,766; the step 142.7 / 142.7
         * / 141.7 -> 141.0 / 140.6 / 141.5 us and 416.2 / 418.3 / 416.5 -> 412.5 / 412.9 / 412.6 us */
        if (prune && minimg) md__nb_cluster_item<W, FLAGS, SMEM, 1, 1>(a, it, wib, s_xi, s_ti, md__nb_lj_smem, s_shift, s_fi[wib]);
        else if (prune) md__nb_cluster_item<W, FLAGS, SMEM, 1, 0>(a, it, wib, s_xi, s_ti, md__nb_lj_smem, s_shift, s_fi[wib]);
        else if (minimg) md__nb_cluster_item<W, FLAGS, SMEM, 0, 1>(a, it, wib, s_xi, s_ti, md__nb_lj_smem, s_shift, s_fi[wib]);
        else md__nb_cluster_item<W, FLAGS, SMEM, 0, 0>(a, it, wib, s_xi, s_ti, md__nb_lj_smem, s_shift, s_fi[wib]);
    }
    if (prune) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            if (atomicAdd((unsigned long long *)&a.ctl[MD__NB_CTL_KDONE], 1ull) == (unsigned long long)gridDim.x - 1) {
                a.ctl[MD__NB_CTL_KDONE] = 0;
                a.ctl[MD__NB_CTL_PRUNE] = 0;
            }
        }
    }
}

/* -- velocity Verlet -- */

/* v += F/m dt/2; x += v dt (float; the force is the fixed-point sum, converted once). */
__global__ void md__vv_kick_drift_kernel(float4 *__restrict__ xyzq, float4 *__restrict__ vel,
                                         const md_fixed *__restrict__ f, int stride, int n, float half_dt, float dt) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 v, p;
    float h;
    if (i >= n) return;
    v = vel[i];
    p = xyzq[i];
    h = half_dt * v.w;
    v.x = fmaf(h, (float)md_fixed_to_double(f[i], MD_FORCE_FIXED_SCALE), v.x);
    v.y = fmaf(h, (float)md_fixed_to_double(f[stride + i], MD_FORCE_FIXED_SCALE), v.y);
    v.z = fmaf(h, (float)md_fixed_to_double(f[2 * (size_t)stride + i], MD_FORCE_FIXED_SCALE), v.z);
    p.x = fmaf(dt, v.x, p.x);
    p.y = fmaf(dt, v.y, p.y);
    p.z = fmaf(dt, v.z, p.z);
    vel[i] = v;
    xyzq[i] = p;
}

/* v += F/m dt/2, the kinetic energy into MD_CUDA_E_KINETIC, and the step counter. */
__global__ void __launch_bounds__(256) md__vv_kick_kernel(float4 *__restrict__ vel, const md_fixed *__restrict__ f,
                                                          int stride, int n, float half_dt, md_fixed *energy,
                                                          long long *step) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float ke = 0.0f;
    if (i < n) {
        float4 v = vel[i];
        const float h = half_dt * v.w;
        v.x = fmaf(h, (float)md_fixed_to_double(f[i], MD_FORCE_FIXED_SCALE), v.x);
        v.y = fmaf(h, (float)md_fixed_to_double(f[stride + i], MD_FORCE_FIXED_SCALE), v.y);
        v.z = fmaf(h, (float)md_fixed_to_double(f[2 * (size_t)stride + i], MD_FORCE_FIXED_SCALE), v.z);
        vel[i] = v;
        ke = md__kinetic(v);
    }
    md__kinetic_block_add(ke, energy);
    if (i == 0) *step += 1;
}

/* -- host side of the plan -- */

/* E(z) = erf(sqrt z) / sqrt z and G(z) = -2 E'(z) = (E(z) - 2/sqrt(pi) e^-z) / z, in double
 * (their series near 0, where the closed forms cancel). */
static double md__ewald_E(double z) {
    const double tsp = 1.1283791670955126; /* 2 / sqrt(pi) */
    if (z < 1e-3) return tsp * (1.0 - z / 3.0 + z * z / 10.0 - z * z * z / 42.0);
    return erf(sqrt(z)) / sqrt(z);
}

static double md__ewald_G(double z) {
    const double tsp = 1.1283791670955126;
    if (z < 1e-2) return 2.0 * tsp * (1.0 / 3.0 - z / 5.0 + z * z / 14.0 - z * z * z / 54.0 + z * z * z * z / 264.0);
    return (md__ewald_E(z) - tsp * exp(-z)) / z;
}

/* Chebyshev interpolation of f on [0, zmax] at MD_CUDA_NB_EWALD_DEGREE + 1 nodes, written as
 * monomials in t = 2 z / zmax - 1 (constant first); returns the largest error of its float
 * evaluation by md_cuda_nb_poly, the kernel's, on a fine grid, relative to f(0). */
static double md__cheb_fit(double (*f)(double), double zmax, float *out) {
    const int deg = MD_CUDA_NB_EWALD_DEGREE;
    const double pi = 3.14159265358979323846;
    double c[MD_CUDA_NB_EWALD_DEGREE + 1], T[MD_CUDA_NB_EWALD_DEGREE + 1][MD_CUDA_NB_EWALD_DEGREE + 1];
    double mono[MD_CUDA_NB_EWALD_DEGREE + 1], worst = 0.0, f0 = f(0.0);
    const int N = deg + 1;
    int k, j;
    memset(T, 0, sizeof T);
    memset(mono, 0, sizeof mono);
    for (k = 0; k < N; k++) {
        double s = 0.0;
        for (j = 0; j < N; j++) {
            const double x = cos(pi * (j + 0.5) / N);
            s += f(0.5 * zmax * (x + 1.0)) * cos(pi * k * (j + 0.5) / N);
        }
        c[k] = 2.0 * s / N;
    }
    c[0] *= 0.5;
    T[0][0] = 1.0;
    if (N > 1) T[1][1] = 1.0;
    for (k = 2; k < N; k++)
        for (j = 0; j < N; j++) T[k][j] = (j > 0 ? 2.0 * T[k - 1][j - 1] : 0.0) - T[k - 2][j];
    for (k = 0; k < N; k++)
        for (j = 0; j < N; j++) mono[j] += c[k] * T[k][j];
    for (j = 0; j < N; j++) out[j] = (float)mono[j];
    for (k = 0; k <= 4000; k++) {
        const float t = (float)(-1.0 + 2.0 * k / 4000.0), v = md_cuda_nb_poly(out, t);
        const double e = fabs((double)v - f(0.5 * zmax * ((double)t + 1.0))) / f0;
        if (e > worst) worst = e;
    }
    return worst;
}

/* The cluster rungs' constants of resolved parameters (md_cuda_nb_fast). */
static void md__nb_fast_make(const md_nb_params *p, md_cuda_nb_fast *c, double *fit_error) {
    const double rc = p->cutoff, rl = p->cutoff + p->buffer;
    int k;
    memset(c, 0, sizeof *c);
    *fit_error = 0.0;
    c->rc2 = (float)(rc * rc);
    c->rl2 = (float)(rl * rl);
    c->t_scale = (float)(2.0 / (rc * rc));
    c->kc = p->coul == MD_COUL_NONE ? 0.0f : (float)MD_COULOMB;
    if (p->lj == MD_LJ_POTENTIAL_SHIFT) {
        c->sh6 = (float)pow(rc, -6.0);
        c->sh12 = (float)pow(rc, -12.0);
    }
    if (p->coul == MD_COUL_EWALD) {
        const double b = p->ewald_beta, zmax = b * b * rc * rc;
        float g[MD_CUDA_NB_EWALD_DEGREE + 1], e[MD_CUDA_NB_EWALD_DEGREE + 1];
        const double e1 = md__cheb_fit(md__ewald_G, zmax, g);
        const double e2 = md__cheb_fit(md__ewald_E, zmax, e);
        for (k = 0; k <= MD_CUDA_NB_EWALD_DEGREE; k++) {
            c->g[k] = (float)((double)g[k] * b * b * b);
            c->e[k] = (float)((double)e[k] * b);
        }
        *fit_error = e1 > e2 ? e1 : e2;
    } else if (p->coul == MD_COUL_REACTION_FIELD) {
        const double krf = p->epsilon_rf == 0.0 ? 0.5 / (rc * rc * rc)
                                                : (p->epsilon_rf - 1.0) / ((2.0 * p->epsilon_rf + 1.0) * rc * rc * rc);
        const double crf = 1.0 / rc + krf * rc * rc;
        c->g[0] = (float)(2.0 * krf);
        c->e[0] = (float)(crf - 0.5 * krf * rc * rc); /* c_rf - k_rf r^2 with r^2 = rc^2 (t + 1) / 2 */
        c->e[1] = (float)(-0.5 * krf * rc * rc);
    }
}

static int md__nb_is_cluster(md_nb_variant v) { return v == MD_NB_GPU_CLUSTER || v == MD_NB_GPU_CLUSTER_SMEM; }

void md_cuda_nb_plan_destroy(md_cuda_nb_plan *p) {
    if (!p) return;
    md_cuda_cell_list_destroy(&p->cells);
    md_cuda_free(p->d_ic_count);
    md_cuda_free(p->d_ic_start);
    md_cuda_free(p->d_sc_count);
    md_cuda_free(p->d_sc_start);
    md_cuda_free(p->d_scan_temp);
    md_cuda_free(p->d_ci);
    md_cuda_free(p->d_ci_cell);
    md_cuda_free(p->d_sc);
    md_cuda_free(p->d_bb);
    md_cuda_free(p->d_ref);
    md_cuda_free(p->d_exn);
    md_cuda_free(p->d_exl);
    md_cuda_free(p->d_entries);
    md_cuda_free(p->d_items);
    md_cuda_free(p->d_masks);
    md_cuda_free(p->d_nb);
    md_cuda_free(p->d_nbn);
    md_cuda_free(p->d_lj_scaled);
    md_cuda_free(p->d_tmp4);
    md_cuda_free(p->d_tmpi);
    md_cuda_free(p->d_tmpf);
    md_cuda_free(p->d_ctl);
    md_cuda_free_pinned(p->h_ctl);
    if (p->ev[0]) (void)cudaEventDestroy(p->ev[0]);
    if (p->ev[1]) (void)cudaEventDestroy(p->ev[1]);
    if (p->build_stream) (void)cudaStreamDestroy(p->build_stream);
    memset(p, 0, sizeof *p);
}

/* (Re)allocate the capacity-sized list arrays of a plan: entries, items, masks (cluster) or the
 * neighbour list (Verlet); zeroed, so a list never holds an index outside the state. */
static md_status md__nb_alloc_lists(md_cuda_nb_plan *p, cudaStream_t st) {
    md_status s;
    md_cuda_free(p->d_entries);
    md_cuda_free(p->d_items);
    md_cuda_free(p->d_masks);
    md_cuda_free(p->d_nb);
    p->d_entries = NULL;
    p->d_items = NULL;
    p->d_masks = NULL;
    p->d_nb = NULL;
    if (md__nb_is_cluster(p->variant)) {
        if ((s = md_cuda_alloc((void **)&p->d_entries, (size_t)p->cap_entries, sizeof(int4), "cluster-pair entries")) != MD_OK ||
            (s = md_cuda_alloc((void **)&p->d_items, (size_t)p->cap_items, sizeof(int4), "work items")) != MD_OK ||
            (s = md_cuda_alloc((void **)&p->d_masks, (size_t)p->cap_excl * MD_CUDA_NB_SUPER, sizeof(unsigned), "exclusion masks")) != MD_OK)
            return s;
        MD_CUDA_TRY(cudaMemsetAsync(p->d_entries, 0, (size_t)p->cap_entries * sizeof(int4), st));
        MD_CUDA_TRY(cudaMemsetAsync(p->d_items, 0, (size_t)p->cap_items * sizeof(int4), st));
    } else if (p->variant == MD_NB_GPU_FULL_LIST || p->variant == MD_NB_GPU_HALF_LIST) {
        if ((s = md_cuda_alloc((void **)&p->d_nb, (size_t)p->max_nb * p->stride, sizeof(int), "neighbour list")) != MD_OK) return s;
        MD_CUDA_TRY(cudaMemsetAsync(p->d_nb, 0, (size_t)p->max_nb * p->stride * sizeof(int), st));
    }
    return MD_OK;
}

typedef void (*md__nb_cluster_fn)(md__nb_cluster_args);

/* The cluster kernel for a warp, `what` flags (0 forces, 1 + energy, 3 + virial) and table
 * placement. Only these are instantiated: 32 lanes (the hardware warp) for every flag and
 * both tables, plus counting; the virtual warps of 8 and 16 lanes (tests) with energy and virial. */
static md__nb_cluster_fn md__nb_cluster_pick(int warp, int flags, int smem) {
    if (warp == 8) return md__nb_cluster_kernel<8, 3, 0>;
    if (warp == 16) return md__nb_cluster_kernel<16, 3, 0>;
    if (flags == 5) return md__nb_cluster_kernel<32, 5, 0>;
    if (smem) return flags == 0 ? md__nb_cluster_kernel<32, 0, 1> : flags == 1 ? md__nb_cluster_kernel<32, 1, 1>
                                                                               : md__nb_cluster_kernel<32, 3, 1>;
    return flags == 0 ? md__nb_cluster_kernel<32, 0, 0> : flags == 1 ? md__nb_cluster_kernel<32, 1, 0>
                                                                     : md__nb_cluster_kernel<32, 3, 0>;
}

md_status md_cuda_nb_plan_create(md_cuda_nb_plan *p, md_cuda_state *s, md_nb_variant variant,
                                 const md_nb_params *params, const md_cuda_nb_opts *opts) {
    const char *fn = "md_cuda_nb_plan_create";
    md_cuda_nb_plan t;
    md_status st;
    double rlist, vol, rho, edge, per_sc;
    long long cells = 1;
    int d, dev = 0, devwarp = 32, cluster, sort;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    memset(p, 0, sizeof *p);
    if (!md_nb_variant_is_gpu(variant))
        return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "variant", "%s is not a GPU rung (md_nb_compute runs it)",
                            md_nb_variant_name(variant));
    if (!s || !s->d_xyzq || s->n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "has no atoms (md_cuda_state_upload first)");
    memset(&t, 0, sizeof t);
    t.variant = variant;
    if ((st = md_nb_params_resolve(params, &t.params)) != MD_OK) return st;
    if ((st = md_nb_coeffs_make(&t.params, &t.coeffs)) != MD_OK) return st;
    if ((st = md_nb_check_box(fn, &t.params, s->box)) != MD_OK) return st;
    cluster = md__nb_is_cluster(variant);
    sort = variant != MD_NB_GPU_TILES;
    if (opts) t.opts = *opts;
    if (t.opts.sort_interval == 0) t.opts.sort_interval = 100;
    MD_CUDA_TRY(cudaGetDevice(&dev));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&devwarp, cudaDevAttrWarpSize, dev));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&t.sm_count, cudaDevAttrMultiProcessorCount, dev));
    t.warp = t.opts.warp ? t.opts.warp : devwarp;
    if (cluster) {
        if (t.params.lj == MD_LJ_FORCE_SWITCH)
            return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "lj", "the cluster rungs have no force switch: use the exact rungs");
        if (t.warp != 8 && t.warp != 16 && t.warp != 32)
            return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "warp",
                                "%d lanes: the cluster kernels are instantiated for 8, 16 and 32 (add an instantiation)",
                                t.warp);
        if (variant == MD_NB_GPU_CLUSTER_SMEM && t.warp != 32)
            return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "warp", "MD_NB_GPU_CLUSTER_SMEM is instantiated for 32 lanes only");
        if (variant == MD_NB_GPU_CLUSTER_SMEM && s->ntypes > MD_CUDA_NB_SMEM_TYPES)
            return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "ntypes", "%d LJ types do not fit shared memory (at most %d)",
                                s->ntypes, MD_CUDA_NB_SMEM_TYPES);
        md__nb_fast_make(&t.params, &t.fast, &t.fit_error);
        /* the comparator's rules for the pair kernels this plan may launch: argument block and
         * launch shape may differ between two captures. The grid and the item stride follow
         * grid_items (another split of the same work) and the pointers follow the buffers, so a
         * graph comparison updates the node (cudaGraphExecUpdate changes both) instead of
         * instantiating the graph anew; unregistered, every byte and the shape must match */
        for (d = 0; d < 4; d++) {
            static const int fl[4] = {0, 1, 3, 5};
            if ((st = md_cuda_graph_register((const void *)md__nb_cluster_pick(t.warp, fl[d], variant == MD_NB_GPU_CLUSTER_SMEM),
                                             "D", MD_CUDA_PARAM_MAY_DIFFER)) != MD_OK)
                return st;
        }
        if (t.fit_error > MD_CUDA_NB_EWALD_MAX_FIT_ERROR)
            return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "ewald_tolerance",
                                "beta rc = %g: the degree-%d Ewald polynomials fit to %.1e only (limit %.0e); use a "
                                "larger tolerance or an exact rung",
                                t.params.ewald_beta * t.params.cutoff, MD_CUDA_NB_EWALD_DEGREE, t.fit_error,
                                MD_CUDA_NB_EWALD_MAX_FIT_ERROR);
    }
    t.cj = t.warp / MD_CUDA_NB_CI;
    if (t.cj < 1) t.cj = 1;
    t.capacity = s->capacity;
    t.stride = s->stride;
    t.sorted_epoch = -1;
    t.ff_epoch = -1;
    /* sizes from the uploaded box and density */
    rlist = t.params.cutoff + t.params.buffer;
    vol = s->box[0] * s->box[1] * s->box[2];
    rho = (double)s->n / vol;
    for (d = 0; d < 3; d++) {
        long long g = (long long)floor(s->box[d] / rlist);
        cells *= g < 1 ? 1 : (g > 1024 ? 1024 : g);
    }
    cells = 2 * cells + 64;
    if (cells > (1 << 19)) cells = 1 << 19;
    t.cap_ic = (int)((t.capacity + MD_CUDA_NB_CI - 1) / MD_CUDA_NB_CI + cells + 8);
    t.cap_sc = (int)(t.cap_ic / MD_CUDA_NB_SUPER + cells + 8);
    t.excl_width = s->max_excl > 0 ? s->max_excl : 1;
    edge = cbrt((double)(MD_CUDA_NB_CI * MD_CUDA_NB_SUPER) / rho);
    per_sc = rho / t.cj * pow(edge + 2.0 * rlist + 0.4, 3.0) * 0.65;
    t.cap_entries = t.opts.list_capacity > 0 ? t.opts.list_capacity
                                             : (long long)(per_sc * ((double)t.capacity / 64.0 + (double)cells)) + 1024;
    t.chunk = t.opts.chunk > 0 ? t.opts.chunk
                               : (int)fmax(8.0, fmin(64.0, (double)t.cap_entries / 1.6 /
                                                                        (t.sm_count * (double)MD_CUDA_NB_ITEM_WARPS + 1.0)));
    {
        const double nsc = (double)t.capacity / (MD_CUDA_NB_CI * MD_CUDA_NB_SUPER) + 1.0; /* super-clusters */
        const double most = nsc > t.sm_count ? MD__NB_SEARCH_FULL_SLICES : MD__NB_SEARCH_MAX_SLICES;
        t.search_slices = (int)fmax(1.0, fmin(most, rint((double)t.sm_count * MD_CUDA_NB_SEARCH_WARPS / nsc)));
    }
    t.cap_items = t.cap_entries / t.chunk + (long long)t.cap_sc * t.search_slices + 64;
    if (cluster) { /* a grid of resident blocks: a block that waits for a slot would hold its first
                    * unit until a resident one retires (at 72 registers a thread 28 of 32 fit on an
                    * SM of an H200: 1.14 waves at 95,766 atoms, Nsight Compute, tutorial 06) */
        int nb = 0;
        cudaError_t e = t.warp == 8    ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, md__nb_search_kernel<8>, MD__NB_SEARCH_BLOCK, 0)
                        : t.warp == 16 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, md__nb_search_kernel<16>, MD__NB_SEARCH_BLOCK, 0)
                                       : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, md__nb_search_kernel<32>, MD__NB_SEARCH_BLOCK, 0);
        if (e != cudaSuccess) return md_cuda_error(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor(search)", __FILE__, __LINE__);
        t.search_blocks_per_sm = nb < 1 ? 1 : (nb > MD__NB_SEARCH_BLOCKS_PER_SM ? MD__NB_SEARCH_BLOCKS_PER_SM : nb);
    } else {
        t.search_blocks_per_sm = MD__NB_SEARCH_BLOCKS_PER_SM;
    }
    t.grid_items = t.cap_items;
    t.cap_excl = t.opts.excl_capacity > 0 ? t.opts.excl_capacity : (long long)t.cap_ic * 4 * (4 / t.cj) + 1024;
    t.max_nb = t.opts.max_neighbors > 0
                   ? t.opts.max_neighbors
                   : (int)(rho * 4.0 / 3.0 * 3.14159265358979 * rlist * rlist * rlist * 1.5) + 32;
    if (sort) {
        if ((st = md_cuda_cell_list_create(&t.cells, t.capacity, (int)cells, 12)) != MD_OK) goto fail;
        t.cells.cluster_cells = cluster;
        if ((st = md_cuda_alloc((void **)&t.d_ic_count, (size_t)cells + 1, sizeof(int), "i-clusters per cell")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_ic_start, (size_t)cells + 1, sizeof(int), "first i-clusters")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_sc_count, (size_t)cells + 1, sizeof(int), "super-clusters per cell")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_sc_start, (size_t)cells + 1, sizeof(int), "first super-clusters")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_ci, (size_t)t.cap_ic, sizeof(int2), "i-clusters")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_ci_cell, (size_t)t.cap_ic, sizeof(int), "i-cluster cells")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_sc, (size_t)t.cap_sc, sizeof(int4), "super-clusters")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_bb, 2 * (size_t)t.cap_ic * (MD_CUDA_NB_CI / t.cj), sizeof(float4), "bounding boxes")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_ref, (size_t)t.capacity, sizeof(float4), "reference positions")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_nbn, (size_t)t.capacity, sizeof(int), "neighbour counts")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_tmp4, 2 * (size_t)t.capacity, sizeof(float4), "sort scratch")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_tmpi, 2 * (size_t)t.capacity, sizeof(int), "sort scratch")) != MD_OK ||
            (st = md_cuda_alloc((void **)&t.d_tmpf, 3 * (size_t)t.stride, sizeof(md_fixed), "sort scratch")) != MD_OK)
            goto fail;
        {
            cudaError_t e = cub::DeviceScan::ExclusiveSum(NULL, t.scan_temp_bytes, t.d_ic_count, t.d_ic_start, (int)cells + 1);
            if (e != cudaSuccess) {
                st = md_cuda_error(e, "cub::DeviceScan::ExclusiveSum (size query)", __FILE__, __LINE__);
                goto fail;
            }
            if ((st = md_cuda_alloc(&t.d_scan_temp, t.scan_temp_bytes ? t.scan_temp_bytes : 1, 1, "CUB scan storage")) != MD_OK)
                goto fail;
        }
    }
    if ((st = md_cuda_alloc((void **)&t.d_exn, (size_t)t.capacity, sizeof(int), "exclusion counts")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_exl, (size_t)t.excl_width * t.stride, sizeof(int), "exclusion partners")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_ctl, MD__NB_CTL_WORDS, sizeof(long long), "plan control words")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_ctl, MD__NB_CTL_WORDS, sizeof(long long), "plan control mirror")) != MD_OK)
        goto fail;
    if (cluster) {
        t.lj_ntypes = s->ntypes;
        if ((st = md_cuda_alloc((void **)&t.d_lj_scaled, (size_t)s->ntypes * s->ntypes, sizeof(float2), "scaled LJ table")) != MD_OK)
            goto fail;
    }
    if ((st = md__nb_alloc_lists(&t, s->q.stream)) != MD_OK) goto fail;
    if (sort) {
        cudaError_t e = cudaStreamCreateWithFlags(&t.build_stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            st = md_cuda_error(e, "cudaStreamCreateWithFlags(build)", __FILE__, __LINE__);
            goto fail;
        }
    }
    if (t.opts.time_kernel) {
        cudaError_t e = cudaEventCreate(&t.ev[0]);
        if (e == cudaSuccess) e = cudaEventCreate(&t.ev[1]);
        if (e != cudaSuccess) {
            st = md_cuda_error(e, "cudaEventCreate", __FILE__, __LINE__);
            goto fail;
        }
    }
    memset(t.h_ctl, 0, MD__NB_CTL_WORDS * sizeof(long long));
    t.h_ctl[MD__NB_CTL_REBUILD] = 1;
    {
        cudaError_t e = cudaMemcpyAsync(t.d_ctl, t.h_ctl, MD__NB_CTL_WORDS * sizeof(long long), cudaMemcpyHostToDevice,
                                        s->q.stream);
        if (e == cudaSuccess && sort) e = cudaMemsetAsync(t.d_nbn, 0, (size_t)t.capacity * sizeof(int), s->q.stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s->q.stream);
        if (e != cudaSuccess) {
            st = md_cuda_error(e, "cudaMemcpyAsync/cudaStreamSynchronize(plan create)", __FILE__, __LINE__);
            goto fail;
        }
    }
    t.h_ctl[MD__NB_CTL_REBUILD] = 0;
    *p = t;
    return MD_OK;
fail:
    md_cuda_nb_plan_destroy(&t);
    return st;
}

/* Enqueue the spatial sort: cell list (CUB radix sort), the state permuted (every atom wrapped
 * into the box), clusters and super-clusters per cell (CUB scans), the exclusion index, and a
 * rebuild. The state's epoch moves on. */
static md_status md__nb_sort(md_cuda_nb_plan *p, md_cuda_state *s) {
    const cudaStream_t st = s->q.stream;
    const int n = s->n, cc = p->cells.cap_cells;
    const int nb = (n + 255) / 256;
    size_t bytes;
    md_status r;
    if ((r = md_cuda_cell_list_enqueue(&p->cells, s->d_xyzq, n, s->d_box, p->params.cutoff + p->params.buffer, st,
                                       s->q.d_flags, s->d_order)) != MD_OK)
        return r;
    MD_CUDA_LAUNCH(md__nb_permute_kernel, nb, 256, 0, st, p->cells.d_idx_sorted, n, s->stride, p->cells.d_grid,
                   s->d_xyzq, s->d_vel_invmass, s->d_type, s->d_order, s->d_force, p->d_tmp4, p->d_tmp4 + p->capacity,
                   p->d_tmpi, p->d_tmpi + p->capacity, p->d_tmpf);
    MD_CUDA_LAUNCH(md__nb_unpermute_kernel, nb, 256, 0, st, n, s->stride, p->d_tmp4, p->d_tmp4 + p->capacity, p->d_tmpi,
                   p->d_tmpi + p->capacity, p->d_tmpf, s->d_xyzq, s->d_vel_invmass, s->d_type, s->d_order, s->d_rank,
                   s->d_force);
    MD_CUDA_LAUNCH(md__nb_cluster_count_kernel, (cc + 1 + 255) / 256, 256, 0, st, p->cells.d_cell_start,
                   p->cells.d_grid, cc, p->d_ic_count, p->d_sc_count);
    bytes = p->scan_temp_bytes;
    MD_CUDA_TRY(cub::DeviceScan::ExclusiveSum(p->d_scan_temp, bytes, p->d_ic_count, p->d_ic_start, cc + 1, st));
    bytes = p->scan_temp_bytes;
    MD_CUDA_TRY(cub::DeviceScan::ExclusiveSum(p->d_scan_temp, bytes, p->d_sc_count, p->d_sc_start, cc + 1, st));
    MD_CUDA_LAUNCH(md__nb_cluster_fill_kernel, (cc + 255) / 256, 256, 0, st, p->cells.d_cell_start, p->cells.d_grid,
                   p->d_ic_start, p->d_sc_start, p->d_ci, p->d_ci_cell, p->d_sc);
    MD_CUDA_LAUNCH(md__nb_excl_index_kernel, nb, 256, 0, st, n, s->stride, s->d_order, s->d_rank, s->d_excl_start,
                   s->d_excl, p->d_exn, p->d_exl);
    MD_CUDA_TRY(cudaMemsetAsync(p->d_ctl + MD__NB_CTL_REBUILD, 1, 1, st));
    s->epoch++;
    p->sorted_epoch = s->epoch;
    p->stats.sorts++;
    p->steps_since_sort = 0;
    return MD_OK;
}

typedef void (*md__nb_exact_fn)(md__nb_exact_args);
typedef void (*md__nb_bonded_fn)(md__nb_bonded_args);

/* A kernel's registry name with its template arguments written out (evaluated at registration only). */
static const char *md__nb_kname(char *buf, size_t cap, const char *base, int a, int b, int c) {
    if (c >= 0) snprintf(buf, cap, "%s<%d, %d, %d>", base, a, b, c);
    else if (c == -2) snprintf(buf, cap, "%s<%d, %d>", base, a, b);
    else snprintf(buf, cap, "%s<%d>", base, a);
    return buf;
}

/* The list build of the cluster and list rungs, on stream `st`: bounding boxes and reference
 * positions, then the search; both kernels return at once unless the rebuild word is set.
 * md_cuda_nb_enqueue enqueues it as it is, or with md_cuda_nb_opts::if_node_build through
 * md_cuda_graph_run_if (an IF node when captured). */
typedef struct md__nb_build_ctx {
    md_cuda_nb_plan *p;
    md_cuda_state *s;
} md__nb_build_ctx;

static md_status md__nb_build_enqueue(void *ctx, cudaStream_t st) {
    md_cuda_nb_plan *p = ((md__nb_build_ctx *)ctx)->p;
    md_cuda_state *s = ((md__nb_build_ctx *)ctx)->s;
    const int R = MD_CUDA_NB_CI / p->cj, n = s->n, cluster = md__nb_is_cluster(p->variant);
    const float rlist = (float)(p->params.cutoff + p->params.buffer);
    const unsigned bb_blocks = (unsigned)(((long long)p->cap_ic * R + 255) / 256);
    switch (p->cj) {
    case 1:
        MD_CUDA_LAUNCH((md__nb_bbox_kernel<1>), bb_blocks, 256, 0, st, s->d_xyzq, p->d_ci, p->d_ci_cell, p->d_ic_start,
                       p->cells.cap_cells, p->cells.d_grid, s->d_box, rlist, p->d_ref, p->d_bb, p->d_ctl, s->q.d_flags,
                       s->d_order);
        break;
    case 2:
        MD_CUDA_LAUNCH((md__nb_bbox_kernel<2>), bb_blocks, 256, 0, st, s->d_xyzq, p->d_ci, p->d_ci_cell, p->d_ic_start,
                       p->cells.cap_cells, p->cells.d_grid, s->d_box, rlist, p->d_ref, p->d_bb, p->d_ctl, s->q.d_flags,
                       s->d_order);
        break;
    default:
        MD_CUDA_LAUNCH((md__nb_bbox_kernel<4>), bb_blocks, 256, 0, st, s->d_xyzq, p->d_ci, p->d_ci_cell, p->d_ic_start,
                       p->cells.cap_cells, p->cells.d_grid, s->d_box, rlist, p->d_ref, p->d_bb, p->d_ctl, s->q.d_flags,
                       s->d_order);
    }
    if (cluster) {
        md__nb_search_args a;
        const long long need = ((long long)p->cap_sc * p->search_slices * p->warp + MD__NB_SEARCH_BLOCK - 1) /
                               MD__NB_SEARCH_BLOCK;
        const long long most = (long long)p->sm_count * p->search_blocks_per_sm;
        const unsigned blocks = (unsigned)(need < most ? need : most);
        memset(&a, 0, sizeof a); /* its padding too: two captures of the same search compare equal bytewise */
        a.bb = p->d_bb;
        a.ci = p->d_ci;
        a.sc = p->d_sc;
        a.ic_start = p->d_ic_start;
        a.sc_start = p->d_sc_start;
        a.cap_cells = p->cells.cap_cells;
        a.grid = p->cells.d_grid;
        a.exn = p->d_exn;
        a.exl = p->d_exl;
        a.stride = s->stride;
        a.entries = p->d_entries;
        a.items = p->d_items;
        a.masks = p->d_masks;
        a.cap_entries = p->cap_entries;
        a.cap_items = p->cap_items;
        a.cap_excl = p->cap_excl;
        a.chunk = p->chunk;
        a.slices = p->search_slices;
        a.ctl = p->d_ctl;
        a.flags = s->q.d_flags;
        a.rlist = rlist;
        if (p->warp == 8) MD_CUDA_LAUNCH((md__nb_search_kernel<8>), blocks, MD__NB_SEARCH_BLOCK, 0, st, a);
        else if (p->warp == 16) MD_CUDA_LAUNCH((md__nb_search_kernel<16>), blocks, MD__NB_SEARCH_BLOCK, 0, st, a);
        else MD_CUDA_LAUNCH((md__nb_search_kernel<32>), blocks, MD__NB_SEARCH_BLOCK, 0, st, a);
    } else {
        const unsigned blocks = (unsigned)((n + MD_CUDA_NB_BLOCK - 1) / MD_CUDA_NB_BLOCK);
        if (p->variant == MD_NB_GPU_HALF_LIST)
            MD_CUDA_LAUNCH((md__nb_verlet_search_kernel<1>), blocks, MD_CUDA_NB_BLOCK, 0, st, s->d_xyzq, n,
                           p->cells.d_cell_start, p->cells.d_grid, s->d_box, p->d_exn, p->d_exl, s->stride, p->d_nb,
                           p->d_nbn, p->max_nb, p->d_ctl, s->q.d_flags, rlist);
        else
            MD_CUDA_LAUNCH((md__nb_verlet_search_kernel<0>), blocks, MD_CUDA_NB_BLOCK, 0, st, s->d_xyzq, n,
                           p->cells.d_cell_start, p->cells.d_grid, s->d_box, p->d_exn, p->d_exl, s->stride, p->d_nb,
                           p->d_nbn, p->max_nb, p->d_ctl, s->q.d_flags, rlist);
    }
    return MD_OK;
}

/* The exact pairs' arguments for an evaluation of plan p on state s; returns how many pairs. */
static int md__nb_exact_pairs_args(const md_cuda_nb_plan *p, const md_cuda_state *s, md__nb_bonded_args *out) {
    md__nb_bonded_args &b = *out;
    const double rc = p->params.cutoff, pre = 2.0 * 3.14159265358979323846 * (double)s->n * (double)s->n;
    const int disp = p->params.dispersion_correction && p->params.lj != MD_LJ_NONE;
    b.xyzq = s->d_xyzq;
    b.rank = s->d_rank;
    b.excl_pairs = s->d_excl_pairs;
    b.nexcl = s->nexcl_pairs;
    b.pair14 = s->d_pair14;
    b.pair14_lj = s->d_pair14_lj;
    b.npair14 = s->npair14;
    b.fudge_qq = s->fudge_qq;
    b.lj_on = p->params.lj != MD_LJ_NONE;
    b.coul_on = p->params.coul != MD_COUL_NONE;
    b.ewald = p->params.coul == MD_COUL_EWALD;
    b.box = s->d_box;
    b.force = s->d_force;
    b.energy = s->d_energy;
    b.stride = s->stride;
    b.self_energy = b.ewald ? -MD_COULOMB * p->params.ewald_beta / sqrt(3.14159265358979323846) * s->sum_q2 : 0.0;
    b.disp_e = disp ? pre * (s->disp_c12 / (9.0 * pow(rc, 9.0)) - s->disp_c6 / (3.0 * rc * rc * rc)) : 0.0;
    b.disp_w = disp ? pre * (4.0 * s->disp_c12 / (9.0 * pow(rc, 9.0)) - 2.0 * s->disp_c6 / (3.0 * rc * rc * rc)) : 0.0;
    b.reach = p->variant == MD_NB_GPU_TILES ? p->params.cutoff : p->params.cutoff + p->params.buffer;
    b.ctl = p->d_ctl;
    b.flags = s->q.d_flags;
    b.k = p->coeffs;
    return (b.ewald ? s->nexcl_pairs : 0) + s->npair14;
}

md_status md_cuda_nb_enqueue(md_cuda_nb_plan *p, md_cuda_state *s, unsigned what) {
    const char *fn = "md_cuda_nb_enqueue";
    const int cluster = p ? md__nb_is_cluster(p->variant) : 0;
    int flags = (int)(what & 3u), n;
    if (flags == 2) flags = 3; /* a virial comes with the energies (fewer kernels to compile) */
    cudaStream_t st;
    char nm[96];
    if (!p || !p->d_ctl) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not made (md_cuda_nb_plan_create)");
    if (!s || !s->d_xyzq || s->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "has no atoms");
    if (s->capacity != p->capacity || s->stride != p->stride)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "has capacity %d, the plan was made for %d", s->capacity,
                            p->capacity);
    if (s->max_excl > p->excl_width || (cluster && s->ntypes > p->lj_ntypes))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s",
                            "the uploaded topology has more exclusions per atom (%d) or LJ types (%d) than the plan "
                            "was made for (%d, %d): make the plan again",
                            s->max_excl, s->ntypes, p->excl_width, p->lj_ntypes);
    st = s->q.stream;
    n = s->n;
    if (cluster && p->ff_epoch != s->ff_epoch) {
        const int cnt = s->ntypes * s->ntypes;
        MD_CUDA_LAUNCH(md__nb_scale_lj_kernel, (cnt + 255) / 256, 256, 0, st, s->d_lj, cnt,
                       p->params.lj != MD_LJ_NONE, p->d_lj_scaled);
        p->ff_epoch = s->ff_epoch;
    }
    if (p->variant == MD_NB_GPU_TILES) {
        if (p->sorted_epoch != s->epoch) {
            MD_CUDA_LAUNCH(md__nb_excl_index_kernel, (n + 255) / 256, 256, 0, st, n, s->stride, s->d_order, s->d_rank,
                           s->d_excl_start, s->d_excl, p->d_exn, p->d_exl);
            p->sorted_epoch = s->epoch;
        }
    } else {
        const float half = (float)(0.5 * p->params.buffer);
        md_status r;
        if (((what & MD_CUDA_NB_SORT) || p->sorted_epoch != s->epoch) && (r = md__nb_sort(p, s)) != MD_OK) return r;
        if (what & MD_CUDA_NB_REBUILD) MD_CUDA_TRY(cudaMemsetAsync(p->d_ctl + MD__NB_CTL_REBUILD, 1, 1, st));
        if (!(what & MD_CUDA_NB_CHECKED))
            MD_CUDA_LAUNCH(md__nb_disp_kernel, (n + 255) / 256, 256, 0, st, s->d_xyzq, p->d_ref, n, s->d_box,
                           half * half, p->d_ctl, s->q.d_flags, s->d_order, p->cells.d_grid);
        {
            md__nb_build_ctx bc;
            bc.p = p;
            bc.s = s;
            r = !p->opts.if_node_build ? md__nb_build_enqueue(&bc, st)
                                    : md_cuda_graph_run_if(st, p->build_stream, p->d_ctl + MD__NB_CTL_REBUILD,
                                                           md__nb_build_enqueue, &bc);
            if (r != MD_OK) return r;
        }
    }
    if (cluster) {
        md__nb_cluster_args a;
        const int nw = MD_CUDA_NB_CLUSTER_BLOCK / p->warp, smem = p->variant == MD_NB_GPU_CLUSTER_SMEM;
        const long long gi = p->grid_items >= 1 && p->grid_items < p->cap_items ? p->grid_items : p->cap_items;
        const long long iblocks = (gi + nw - 1) / nw;
        const int exact = md__nb_exact_pairs_args(p, s, &a.exact);
        const unsigned blocks = (unsigned)(iblocks + (exact + MD_CUDA_NB_CLUSTER_BLOCK) / MD_CUDA_NB_CLUSTER_BLOCK);
        const size_t sbytes = smem ? (size_t)s->ntypes * s->ntypes * sizeof(float2) : 0;
        md__nb_cluster_fn k;
        a.item_blocks = iblocks;
        a.item_stride = iblocks * nw;
        a.xyzq = s->d_xyzq;
        a.type = s->d_type;
        a.ci = p->d_ci;
        a.sc = p->d_sc;
        a.entries = p->d_entries;
        a.items = p->d_items;
        a.masks = p->d_masks;
        a.lj = p->d_lj_scaled;
        a.ntypes = s->ntypes;
        a.cap_items = p->cap_items;
        a.box = s->d_box;
        a.force = s->d_force;
        a.energy = s->d_energy;
        a.stride = s->stride;
        a.ctl = p->d_ctl;
        a.flags = s->q.d_flags;
        a.c = p->fast;
        if ((what & MD_CUDA_NB_COUNT) && p->warp == 32 && !smem) {
            MD_CUDA_TRY(cudaMemsetAsync(p->d_ctl + MD__NB_CTL_PAIRS_CUT, 0, sizeof(long long), st));
            flags = 5;
        } else if (p->warp != 32) {
            flags = 3;
        }
        k = md__nb_cluster_pick(p->warp, flags, smem);
        if (p->ev[0]) MD_CUDA_TRY(cudaEventRecord(p->ev[0], st));
        MD_CUDA_LAUNCH_NAMED(k, md__nb_kname(nm, sizeof nm, "md__nb_cluster_kernel", p->warp, flags, smem), blocks,
                             MD_CUDA_NB_CLUSTER_BLOCK, sbytes, st, a);
        if (p->ev[1]) MD_CUDA_TRY(cudaEventRecord(p->ev[1], st));
    } else {
        md__nb_exact_args a;
        const unsigned blocks = (unsigned)((n + MD_CUDA_NB_BLOCK - 1) / MD_CUDA_NB_BLOCK);
        md__nb_exact_fn k;
        const char *base;
        a.xyzq = s->d_xyzq;
        a.type = s->d_type;
        a.order = s->d_order;
        a.lj = s->d_lj;
        a.ntypes = s->ntypes;
        a.n = n;
        a.stride = s->stride;
        a.exn = p->d_exn;
        a.exl = p->d_exl;
        a.nb = p->d_nb;
        a.nbn = p->d_nbn;
        a.box = s->d_box;
        a.force = s->d_force;
        a.energy = s->d_energy;
        a.ctl = p->d_ctl;
        a.flags = s->q.d_flags;
        a.k = p->coeffs;
        if (p->variant == MD_NB_GPU_TILES) {
            base = "md__nb_tiles_kernel";
            k = flags == 0 ? md__nb_tiles_kernel<0> : flags == 1 ? md__nb_tiles_kernel<1> : md__nb_tiles_kernel<3>;
        } else if (p->variant == MD_NB_GPU_FULL_LIST) {
            base = "md__nb_list_kernel";
            k = flags == 0 ? md__nb_list_kernel<0, 0> : flags == 1 ? md__nb_list_kernel<1, 0> : md__nb_list_kernel<3, 0>;
        } else {
            base = "md__nb_list_kernel";
            k = flags == 0 ? md__nb_list_kernel<0, 1> : flags == 1 ? md__nb_list_kernel<1, 1> : md__nb_list_kernel<3, 1>;
        }
        if (p->ev[0]) MD_CUDA_TRY(cudaEventRecord(p->ev[0], st));
        MD_CUDA_LAUNCH_NAMED(k, p->variant == MD_NB_GPU_TILES ? md__nb_kname(nm, sizeof nm, base, flags, 0, -1)
                                : md__nb_kname(nm, sizeof nm, base, flags, p->variant == MD_NB_GPU_HALF_LIST, -2),
                             blocks, MD_CUDA_NB_BLOCK, 0, st, a);
        if (p->ev[1]) MD_CUDA_TRY(cudaEventRecord(p->ev[1], st));
    }
    if (!cluster) { /* the exact pairs: the cluster kernel ran them in its last blocks */
        md__nb_bonded_args b;
        const int bf = flags & 3, total = md__nb_exact_pairs_args(p, s, &b);
        const unsigned blocks = (unsigned)((total + MD_CUDA_NB_BLOCK) / MD_CUDA_NB_BLOCK);
        md__nb_bonded_fn k = bf == 0 ? md__nb_bonded_kernel<0> : bf == 1 ? md__nb_bonded_kernel<1> : md__nb_bonded_kernel<3>;
        MD_CUDA_LAUNCH_NAMED(k, md__nb_kname(nm, sizeof nm, "md__nb_bonded_kernel", bf, 0, -1), blocks, MD_CUDA_NB_BLOCK, 0,
                             st, b);
    }
    p->stats.evaluations++;
    return MD_OK;
}

/* The pair kernel's grid from the control word MD__NB_CTL_NITEMS of the last build: its items and
 * a quarter more, kept while they fit (a graph captured after this keeps its launch shape across
 * builds). md_cuda_nb_plan_poll reads the word; chapter 10's replica exchange reads it from its
 * report instead (no synchronisation of its own). */
static void md__nb_fit_grid(md_cuda_nb_plan *p, long long items_word) {
    const long long w = md__nb_nitems(items_word);
    if (w > 0 && w <= p->cap_items && (w > p->grid_items || 2 * w < p->grid_items))
        p->grid_items = w + w / 4 + 64 < p->cap_items ? w + w / 4 + 64 : p->cap_items;
}

md_status md_cuda_nb_plan_poll(md_cuda_nb_plan *p, md_cuda_state *s, md_energy *e) {
    const char *fn = "md_cuda_nb_plan_poll";
    md_status st;
    unsigned long long detail = 0;
    const long long *h;
    if (!p || !p->d_ctl) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not made (md_cuda_nb_plan_create)");
    if (!s || !s->d_energy) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is not made (md_cuda_state_create)");
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_ctl, p->d_ctl, MD__NB_CTL_WORDS * sizeof(long long), cudaMemcpyDeviceToHost,
                                s->q.stream));
    st = md_cuda_state_poll(s, e, NULL);
    h = p->h_ctl;
    p->stats.rebuilds = h[MD__NB_CTL_REBUILDS];
    p->stats.entries = h[MD__NB_CTL_NENTRIES];
    p->stats.work_items = md__nb_nitems(h[MD__NB_CTL_NITEMS]);
    md__nb_fit_grid(p, h[MD__NB_CTL_NITEMS]);
    p->stats.masked_entries = h[MD__NB_CTL_NEXCL];
    p->stats.computed_pairs = !md__nb_is_cluster(p->variant) ? h[MD__NB_CTL_NENTRIES]
                              : h[MD__NB_CTL_PRUNED] ? h[MD__NB_CTL_PRUNED] : h[MD__NB_CTL_COMPUTED];
    p->stats.computed_unpruned = md__nb_is_cluster(p->variant) ? h[MD__NB_CTL_COMPUTED] : p->stats.computed_pairs;
    p->stats.pairs_in_cutoff = h[MD__NB_CTL_PAIRS_CUT];
    if (p->ev[0]) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[0], p->ev[1]) == cudaSuccess) p->stats.kernel_s = 1e-3 * ms;
        else (void)cudaGetLastError();
    }
    {
        int bits = (int)h[MD__NB_CTL_ESCAPE_LAST];
        float f;
        memcpy(&f, &bits, sizeof f);
        p->stats.escape = f;
    }
    if (st != MD_ERR_RANGE) return st;
    if (h[MD__NB_CTL_REASON]) MD_CUDA_TRY(cudaMemsetAsync(p->d_ctl + MD__NB_CTL_REASON, 0, sizeof(long long), s->q.stream));
    if (md_cuda_queue_flag(&s->q, MD_CUDA_FLAG_NONFINITE, &detail))
        return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq", "atom %llu (caller numbering) has a non-finite coordinate", detail);
    if (h[MD__NB_CTL_REASON] & 1)
        return md_set_error(MD_ERR_RANGE, fn, 0, "cutoff",
                            "cutoff%s = %g nm is more than half the shortest box edge: the minimum image would miss pairs",
                            p->variant == MD_NB_GPU_TILES ? "" : " + buffer",
                            p->variant == MD_NB_GPU_TILES ? p->params.cutoff : p->params.cutoff + p->params.buffer);
    if (md_cuda_queue_flag(&s->q, MD_CUDA_FLAG_OVERFLOW, &detail)) {
        if (h[MD__NB_CTL_NEED_ENTRIES] > p->cap_entries)
            return md_set_error(MD_ERR_RANGE, fn, 0, "list_capacity",
                                "the cluster-pair list needs %lld entries, capacity %lld: call md_cuda_nb_plan_grow",
                                h[MD__NB_CTL_NEED_ENTRIES], p->cap_entries);
        if (h[MD__NB_CTL_NEED_ITEMS] > p->cap_items)
            return md_set_error(MD_ERR_RANGE, fn, 0, "chunk", "the list needs %lld work items, capacity %lld: call md_cuda_nb_plan_grow",
                                h[MD__NB_CTL_NEED_ITEMS], p->cap_items);
        if (h[MD__NB_CTL_NEED_EXCL] > p->cap_excl)
            return md_set_error(MD_ERR_RANGE, fn, 0, "excl_capacity",
                                "the list needs %lld exclusion masks, capacity %lld: call md_cuda_nb_plan_grow",
                                h[MD__NB_CTL_NEED_EXCL], p->cap_excl);
        if (h[MD__NB_CTL_NEED_NB] > p->max_nb)
            return md_set_error(MD_ERR_RANGE, fn, 0, "max_neighbors",
                                "an atom has %lld neighbours within cutoff + buffer, the list holds %d: call md_cuda_nb_plan_grow",
                                h[MD__NB_CTL_NEED_NB], p->max_nb);
        return md_set_error(MD_ERR_RANGE, fn, 0, "capacity", "a capacity was exceeded (%llu needed)", detail);
    }
    if (h[MD__NB_CTL_REASON] & 2)
        return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq",
                            "a pair force or energy overflows the fixed-point range (overlapping atoms?)");
    return st;
}

md_status md_cuda_nb_plan_grow(md_cuda_nb_plan *p, md_cuda_state *s, int *grown) {
    const char *fn = "md_cuda_nb_plan_grow";
    long long *h;
    int g = 0;
    md_status st;
    if (grown) *grown = 0;
    if (!p || !p->d_ctl || !s || !s->q.stream)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p/s", "is not made");
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_ctl, p->d_ctl, MD__NB_CTL_WORDS * sizeof(long long), cudaMemcpyDeviceToHost,
                                s->q.stream));
    MD_CUDA_TRY(cudaStreamSynchronize(s->q.stream));
    h = p->h_ctl;
    if (h[MD__NB_CTL_NEED_ENTRIES] > p->cap_entries) {
        p->cap_entries = h[MD__NB_CTL_NEED_ENTRIES] + h[MD__NB_CTL_NEED_ENTRIES] / 4 + 1024;
        g = 1;
    }
    if (g || h[MD__NB_CTL_NEED_ITEMS] > p->cap_items) {
        long long want = p->cap_entries / p->chunk + (long long)p->cap_sc * p->search_slices + 64;
        long long need = h[MD__NB_CTL_NEED_ITEMS] + h[MD__NB_CTL_NEED_ITEMS] / 4 + 64;
        p->cap_items = want > need ? want : need;
        p->grid_items = p->cap_items;
        g = 1;
    }
    if (h[MD__NB_CTL_NEED_EXCL] > p->cap_excl) {
        p->cap_excl = h[MD__NB_CTL_NEED_EXCL] + h[MD__NB_CTL_NEED_EXCL] / 4 + 1024;
        g = 1;
    }
    if (h[MD__NB_CTL_NEED_NB] > p->max_nb) {
        p->max_nb = (int)(h[MD__NB_CTL_NEED_NB] + h[MD__NB_CTL_NEED_NB] / 4 + 8);
        g = 1;
    }
    if (!g) return MD_OK;
    if ((st = md__nb_alloc_lists(p, s->q.stream)) != MD_OK) return st;
    h[MD__NB_CTL_NEED_ENTRIES] = h[MD__NB_CTL_NEED_ITEMS] = h[MD__NB_CTL_NEED_EXCL] = h[MD__NB_CTL_NEED_NB] = 0;
    h[MD__NB_CTL_NENTRIES] = h[MD__NB_CTL_NITEMS] = h[MD__NB_CTL_NEXCL] = 0;
    h[MD__NB_CTL_REBUILD] = 1;
    MD_CUDA_TRY(cudaMemcpyAsync(p->d_ctl, h, MD__NB_CTL_WORDS * sizeof(long long), cudaMemcpyHostToDevice, s->q.stream));
    MD_CUDA_TRY(cudaStreamSynchronize(s->q.stream));
    if (grown) *grown = 1;
    return MD_OK;
}

/* One thread spins until `cycles` SM clock cycles have passed. */
__global__ void md__hold_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

md_status md_cuda_hold_stream(cudaStream_t stream, double microseconds) {
    int khz = 0;
    MD_CUDA_TRY(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    MD_CUDA_LAUNCH(md__hold_kernel, 1, 1, 0, stream, (long long)(microseconds * 1e-3 * khz));
    return MD_OK;
}

md_status md_cuda_vv_enqueue(md_cuda_state *s, md_cuda_nb_plan *p, double dt, int nsteps, unsigned what) {
    const char *fn = "md_cuda_vv_enqueue";
    md_status st;
    int k, nb;
    if (!s || !s->d_xyzq || s->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "has no atoms");
    if (!p || !p->d_ctl) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not made (md_cuda_nb_plan_create)");
    if (!(dt > 0.0) || !isfinite(dt)) return md_set_error(MD_ERR_RANGE, fn, 0, "dt", "must be finite and > 0 (got %g)", dt);
    if (nsteps < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nsteps", "must be >= 0 (got %d)", nsteps);
    nb = (s->n + 255) / 256;
    if (!s->forces_valid) {
        if ((st = md_cuda_state_zero(s)) != MD_OK || (st = md_cuda_nb_enqueue(p, s, what)) != MD_OK) return st;
        s->forces_valid = 1;
    }
    for (k = 0; k < nsteps; k++) {
        unsigned w = what;
        MD_CUDA_LAUNCH(md__vv_kick_drift_kernel, nb, 256, 0, s->q.stream, s->d_xyzq, s->d_vel_invmass, s->d_force,
                       s->stride, s->n, (float)(0.5 * dt), (float)dt);
        if ((st = md_cuda_state_zero(s)) != MD_OK) return st;
        if (p->opts.sort_interval > 0 && ++p->steps_since_sort >= p->opts.sort_interval) w |= MD_CUDA_NB_SORT;
        if ((st = md_cuda_nb_enqueue(p, s, w)) != MD_OK) return st;
        MD_CUDA_LAUNCH(md__vv_kick_kernel, nb, 256, 0, s->q.stream, s->d_vel_invmass, s->d_force, s->stride, s->n,
                       (float)(0.5 * dt), s->d_energy, s->d_step);
    }
    return MD_OK;
}

/* ---- pme ---- */

#include <cub/block/block_scan.cuh>

static const char *const md__pme_spread_names[MD_CUDA_PME_SPREAD_COUNT + 1] = {"spread_atomic", "spread_gather",
                                                                               "spread_tiled",
                                                                               "spread_window", "unknown"};

const char *md_cuda_pme_spread_name(md_cuda_pme_spread spread) {
    return md__pme_spread_names[(int)spread >= 0 && spread < MD_CUDA_PME_SPREAD_COUNT ? (int)spread
                                                                                      : MD_CUDA_PME_SPREAD_COUNT];
}

static md_status md__cufft_error(cufftResult r, const char *what, int line) {
    return md_set_error(MD_ERR_CUDA, __FILE__, line, NULL, "%s failed: cuFFT error %d", what, (int)r);
}

/* One spread term q wy wz wx in fixed point: the same association in every rung. The product
 * q wy wz comes first because it is shared by the P terms of a stencil row along x: the windowed
 * rung computes it once per row (md__pme_spread_window_kernel) and gets these very bits. */
static __device__ __forceinline__ md_fixed md__pme_term(float q, float wx, float wy, float wz) {
    return md_fixed_from_float(md__fmul(md__fmul(md__fmul(q, wy), wz), wx), (float)MD_CUDA_PME_GRID_SCALE);
}

static __device__ __forceinline__ md_fixed md__pme_warp_sum(md_fixed v) {
    int o;
    for (o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum NV fixed-point values over the block (every thread calls it; blockDim.x a multiple of
 * 32) and add each total to dst[k] (skipped when NULL). Integer sums: order independent. */
template <int NV>
static __device__ void md__pme_block_add(const md_fixed *v, md_fixed *const *dst) {
    __shared__ md_fixed s[NV][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    int k;
    for (k = 0; k < NV; k++) {
        md_fixed x = md__pme_warp_sum(v[k]);
        if (lane == 0) s[k][warp] = x;
    }
    __syncthreads();
    if (warp == 0)
        for (k = 0; k < NV; k++) {
            md_fixed x = md__pme_warp_sum(lane < nwarps ? s[k][lane] : 0ull);
            if (lane == 0 && dst[k] && x) atomicAdd(dst[k], x);
        }
}

static __device__ __forceinline__ int md__pme_finite(float4 a) {
    return isfinite(a.x) && isfinite(a.y) && isfinite(a.z) && isfinite(a.w);
}

/* Scatter rung: thread (atom, iy, iz) adds the P points (ix, iy, iz), ix = 0..P-1. Consecutive
 * lanes hold consecutive iz, so each atomic instruction of a warp lands on P-long runs of
 * adjacent words (a few sectors) instead of 32 rows. The first thread zeroes the charge sums,
 * which md__pme_fixed_to_real_kernel adds next (no memset of their own: one call fewer). */
template <int P>
__global__ void md__pme_spread_atomic_kernel(const float4 *__restrict__ xyzq, int n, const double *__restrict__ box,
                                             int K0, int K1, int K2, md_fixed *__restrict__ grid, md_fixed *charge,
                                             unsigned long long *flags) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int atom = (int)(t / (P * P)), r = (int)(t % (P * P)), iy = r / P, iz = r % P;
    if (t == 0) charge[0] = charge[1] = 0ull;
    if (atom < n) {
        const float4 a = xyzq[atom];
        if (!md__pme_finite(a)) {
            if (r == 0) md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)atom);
        } else {
            float w0[P], w1[P], w2[P], d0, d1, d2;
            int b0, b1, b2, gy, gz, ix;
            md_cuda_pme_locate(a.x, (float)(1.0 / box[0]), K0, &b0, &d0);
            md_cuda_pme_locate(a.y, (float)(1.0 / box[1]), K1, &b1, &d1);
            md_cuda_pme_locate(a.z, (float)(1.0 / box[2]), K2, &b2, &d2);
            md_cuda_pme_bspline<P>(d0, w0, NULL);
            md_cuda_pme_bspline<P>(d1, w1, NULL);
            md_cuda_pme_bspline<P>(d2, w2, NULL);
            gy = b1 + iy < K1 ? b1 + iy : b1 + iy - K1;
            gz = b2 + iz < K2 ? b2 + iz : b2 + iz - K2;
#pragma unroll
            for (ix = 0; ix < P; ix++) {
                const int gx = b0 + ix < K0 ? b0 + ix : b0 + ix - K0;
                atomicAdd(grid + ((size_t)gx * K1 + gy) * K2 + gz, md__pme_term(a.w, w0[ix], w1[iy], w2[iz]));
            }
        }
    }
}

/* The fixed-point grid to floats, zeroing it as it is read: the next atomic spread finds it
 * clean without a memset of its own (one pass over the grid instead of two). With @p charge,
 * also the charge sums of the @p n atoms (sum q, sum q^2; finite atoms only, as the spread takes
 * them) for the solve's neutralising background: integer sums, the same bits in any order. */
__global__ void md__pme_fixed_to_real_kernel(md_fixed *__restrict__ g, float *__restrict__ real, long long count,
                                             const float4 *__restrict__ xyzq, int n, md_fixed *charge) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        real[i] = (float)md_fixed_to_double(g[i], MD_CUDA_PME_GRID_SCALE);
        g[i] = 0ull;
    }
    /* the same for the whole launch: every thread of a block takes part in its block sum; a block
     * past the atoms has none to add (a large grid: most of the blocks) */
    if (charge && (long long)blockIdx.x * blockDim.x < n) {
        md_fixed cq[2] = {0ull, 0ull};
        md_fixed *dst[2] = {charge, charge + 1};
        for (long long k = i; k < n; k += (long long)gridDim.x * blockDim.x) {
            const float4 a = xyzq[k];
            if (md__pme_finite(a)) {
                cq[0] += md_fixed_from_float(a.w, (float)MD_FORCE_FIXED_SCALE);
                cq[1] += md_fixed_from_float(md__fmul(a.w, a.w), (float)MD_FORCE_FIXED_SCALE);
            }
        }
        md__pme_block_add<2>(cq, dst);
    }
}

/* Gather rung, step 1: each atom's stencil origin, weights and brick; count the atoms per brick. */
template <int P>
__global__ void md__pme_theta_kernel(const float4 *__restrict__ xyzq, int n, const double *__restrict__ box, int K0,
                                     int K1, int K2, int nb1, int nb2, float *__restrict__ theta, int4 *__restrict__ base,
                                     int *brick_count, int *__restrict__ rank, md_fixed *charge,
                                     unsigned long long *flags) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    md_fixed cq[2] = {0ull, 0ull};
    md_fixed *dst[2] = {charge, charge + 1};
    if (i < n) {
        const float4 a = xyzq[i];
        if (!md__pme_finite(a)) {
            md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)i);
            base[i] = make_int4(0, 0, 0, -1);
        } else {
            float w[P], d0, d1, d2;
            int b0, b1, b2, j, brick;
            md_cuda_pme_locate(a.x, (float)(1.0 / box[0]), K0, &b0, &d0);
            md_cuda_pme_locate(a.y, (float)(1.0 / box[1]), K1, &b1, &d1);
            md_cuda_pme_locate(a.z, (float)(1.0 / box[2]), K2, &b2, &d2);
            md_cuda_pme_bspline<P>(d0, w, NULL);
            for (j = 0; j < P; j++) theta[(size_t)(3 * i) * P + j] = w[j];
            md_cuda_pme_bspline<P>(d1, w, NULL);
            for (j = 0; j < P; j++) theta[(size_t)(3 * i + 1) * P + j] = w[j];
            md_cuda_pme_bspline<P>(d2, w, NULL);
            for (j = 0; j < P; j++) theta[(size_t)(3 * i + 2) * P + j] = w[j];
            brick = ((b0 / MD_CUDA_PME_BRICK) * nb1 + b1 / MD_CUDA_PME_BRICK) * nb2 + b2 / MD_CUDA_PME_BRICK;
            base[i] = make_int4(b0, b1, b2, brick);
            rank[i] = atomicAdd(brick_count + brick, 1);
            cq[0] = md_fixed_from_float(a.w, (float)MD_FORCE_FIXED_SCALE);
            cq[1] = md_fixed_from_float(md__fmul(a.w, a.w), (float)MD_FORCE_FIXED_SCALE);
        }
    }
    md__pme_block_add<2>(cq, dst);
}

/* Gather rung, step 2: exclusive prefix sum of the brick counts (one block of 1024 threads,
 * each a contiguous segment; CUB's block scan across the segments); start[nb] = total. */
__global__ void __launch_bounds__(1024) md__pme_brick_scan_kernel(const int *__restrict__ count, int nb,
                                                                  int *__restrict__ start) {
    typedef cub::BlockScan<int, 1024> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    const int per = (nb + 1023) / 1024, lo = threadIdx.x * per, hi = lo + per < nb ? lo + per : nb;
    int b, sum = 0, prefix;
    for (b = lo; b < hi; b++) sum += count[b];
    scan_t(tmp).ExclusiveSum(sum, prefix);
    for (b = lo; b < hi; b++) {
        start[b] = prefix;
        prefix += count[b];
    }
    if (threadIdx.x == 1023) start[nb] = prefix;
}

/* Gather rung, step 3: the atoms in brick order. */
__global__ void md__pme_bin_kernel(const int4 *__restrict__ base, const int *__restrict__ rank, int n,
                                   const int *__restrict__ start, int *__restrict__ sorted) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && base[i].w >= 0) sorted[start[base[i].w] + rank[i]] = i;
}

/** @cond INTERNAL */
#define MD__PME_CHUNK 128
/** @endcond */

/* Gather rung, step 4: one block per brick, one thread per grid point. The atoms that can reach
 * the brick are those of the bricks holding stencil origins lo - P + 1 .. hi along each axis
 * (at most 3 bricks per axis); they pass through shared memory in chunks, and every thread adds
 * the terms of the atoms whose stencil covers its point. */
template <int P>
__global__ void __launch_bounds__(512) md__pme_spread_gather_kernel(
    const float4 *__restrict__ xyzq, const float *__restrict__ theta, const int4 *__restrict__ base,
    const int *__restrict__ start, const int *__restrict__ sorted, int K0, int K1, int K2, int nb0, int nb1, int nb2,
    float *__restrict__ real) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    const int B = MD_CUDA_PME_BRICK, t = threadIdx.x;
    const int bz = blockIdx.x % nb2, by = (blockIdx.x / nb2) % nb1, bx = blockIdx.x / (nb2 * nb1);
    const int gx = bx * B + t / (B * B), gy = by * B + (t / B) % B, gz = bz * B + t % B;
    const int valid = gx < K0 && gy < K1 && gz < K2;
    __shared__ int src[3][4], nsrc[3];
    __shared__ float s_q[MD__PME_CHUNK], s_w[MD__PME_CHUNK][3 * P];
    __shared__ int s_b[MD__PME_CHUNK][3];
    md_fixed sum = 0ull;
    int sx, sy, sz;
    if (t < 3) { /* the bricks along axis t holding stencil origins lo - P + 1 .. hi (mod K) */
        const int K = t == 0 ? K0 : (t == 1 ? K1 : K2), b = t == 0 ? bx : (t == 1 ? by : bz);
        const int lo = b * B, hi = (lo + B < K ? lo + B : K) - 1;
        int v, m = 0, k;
        for (v = lo - P + 1; v <= hi; v++) {
            int c = (((v % K) + K) % K) / B, seen = 0;
            for (k = 0; k < m; k++) seen |= src[t][k] == c;
            if (!seen && m < 4) src[t][m++] = c;
        }
        nsrc[t] = m;
    }
    __syncthreads();
    for (sx = 0; sx < nsrc[0]; sx++)
        for (sy = 0; sy < nsrc[1]; sy++)
            for (sz = 0; sz < nsrc[2]; sz++) {
                const int sb = (src[0][sx] * nb1 + src[1][sy]) * nb2 + src[2][sz], a0 = start[sb], a1 = start[sb + 1];
                int c0;
                for (c0 = a0; c0 < a1; c0 += MD__PME_CHUNK) {
                    const int m = a1 - c0 < MD__PME_CHUNK ? a1 - c0 : MD__PME_CHUNK;
                    int k;
                    for (k = t; k < m * 3 * P; k += blockDim.x) {
                        const int i = sorted[c0 + k / (3 * P)];
                        s_w[k / (3 * P)][k % (3 * P)] = theta[(size_t)i * 3 * P + k % (3 * P)];
                    }
                    for (k = t; k < m; k += blockDim.x) {
                        const int i = sorted[c0 + k];
                        const int4 bb = base[i];
                        s_q[k] = xyzq[i].w;
                        s_b[k][0] = bb.x;
                        s_b[k][1] = bb.y;
                        s_b[k][2] = bb.z;
                    }
                    __syncthreads();
                    if (valid)
                        for (k = 0; k < m; k++) {
                            int dx = gx - s_b[k][0], dy = gy - s_b[k][1], dz = gz - s_b[k][2];
                            if (dx < 0) dx += K0;
                            if (dy < 0) dy += K1;
                            if (dz < 0) dz += K2;
                            if (dx < P && dy < P && dz < P)
                                sum += md__pme_term(s_q[k], s_w[k][dx], s_w[k][P + dy], s_w[k][2 * P + dz]);
                        }
                    __syncthreads();
                }
            }
    if (valid) real[((size_t)gx * K1 + gy) * K2 + gz] = (float)md_fixed_to_double(sum, MD_CUDA_PME_GRID_SCALE);
}

/* Tiled rung, step 4: one block per brick. Its atoms (those whose stencil origin lies in the
 * brick) add their terms with shared-memory atomics into a tile of (B + P - 1)^3 points that
 * starts at the brick's first point; then every nonzero tile point is added to the global
 * fixed-point grid (indices mod K). The terms are md__pme_term's, so the grid is bitwise the
 * atomic rung's. */
template <int P>
__global__ void __launch_bounds__(256) md__pme_spread_tiled_kernel(
    const float4 *__restrict__ xyzq, const float *__restrict__ theta, const int4 *__restrict__ base,
    const int *__restrict__ start, const int *__restrict__ sorted, int K0, int K1, int K2, int nb1, int nb2,
    md_fixed *__restrict__ grid) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    constexpr int B = MD_CUDA_PME_BRICK, T = B + P - 1, T3 = T * T * T;
    __shared__ md_fixed tile[T3];
    const int bz = blockIdx.x % nb2, by = (blockIdx.x / nb2) % nb1, bx = blockIdx.x / (nb2 * nb1);
    const int a0 = start[blockIdx.x], m = start[blockIdx.x + 1] - a0;
    int k;
    if (m == 0) return; /* the same for the whole block */
    for (k = threadIdx.x; k < T3; k += blockDim.x) tile[k] = 0ull;
    __syncthreads();
    for (k = threadIdx.x; k < m * P * P; k += blockDim.x) {
        const int i = sorted[a0 + k / (P * P)], r = k % (P * P), ix = r / P, iy = r % P;
        const int4 bb = base[i];
        const float *w = theta + (size_t)i * 3 * P;
        const float q = xyzq[i].w;
        md_fixed *row = tile + ((bb.x - bx * B + ix) * T + (bb.y - by * B + iy)) * T + (bb.z - bz * B);
#pragma unroll
        for (int iz = 0; iz < P; iz++) atomicAdd(row + iz, md__pme_term(q, w[ix], w[P + iy], w[2 * P + iz]));
    }
    __syncthreads();
    for (k = threadIdx.x; k < T3; k += blockDim.x) {
        const md_fixed v = tile[k];
        if (v) {
            /* mod K: a grid smaller than the tile wraps more than once */
            const int gx = (bx * B + k / (T * T)) % K0, gy = (by * B + (k / T) % T) % K1, gz = (bz * B + k % T) % K2;
            atomicAdd(grid + ((size_t)gx * K1 + gy) * K2 + gz, v);
        }
    }
}

/* Windowed rung: md_cuda_pme_plan::window_atoms consecutive atoms per block (default
 * MD__PME_WINDOW_ATOMS), taken 32 at a time. Warp 0
 * locates a batch (weights and bases into shared memory) and measures its stencils' extent
 * along each axis (around its first atom, mod K); the batch adds its terms with 32-bit
 * shared-memory atomics into a window of at most MD__PME_WINDOW_POINTS points when all its
 * stencils fit the current window, else the window is added to the global grid (one 64-bit
 * atomic per nonzero point) and a new one is placed around the batch; a batch wider than any
 * window adds its terms to the global grid directly, and so does a batch with a charge of 2^14 e
 * or more. Each term t (md__pme_term's, so the grid is bitwise the atomic rung's) goes in as
 * t >> 24 and t & 0xffffff, two 32-bit integer sums: with at most 256 atoms per window the low sum
 * stays below 2^32, so hi 2^24 + lo is the exact 64-bit sum (|t| < 2^46 for |q| < 2^14 e, so the
 * high sums fit too). Atoms that lie close in memory share a window:
 * md_cuda_sim's sorted atoms (a cell's atoms are consecutive) do; atoms in any order still get
 * the right grid, only more global atomics. A window is the batch's extent (grown only when more
 * batches of the block follow) and is zeroed when it is placed, warp 0 stores each atom's origin
 * in it as one index (s_base: the add loop does no division), and the flush walks only the window's extent,
 * row by row (md__pme_window_flush: a nonzero point costs one division and two modulos instead of
 * four and three). Before, every window was grown to MD__PME_WINDOW_POINTS, the add loop took six
 * modulos per term row, and Nsight Compute counted 14.6 M warp instructions for 737 blocks (23,568
 * atoms) against the atomic rung's 7.4 M (which part took which share was not profiled). Measured side by side on an H100 (chapter 07, two runs each): spread_window 30 -> 23 us
 * (23,568 atoms) and 105 -> 63 us (95,766); pme_graph_sorted 61.8 -> 53.9 us and 150.4 -> 119.3 us;
 * chapter 08's race 155.8 / 155.7 -> 148.7 / 150.4 us and 502.0 / 501.8 -> 473.5 / 471.8 us.
 * Since 2026-12-08 the add loop takes a thread's row (iy, iz) of one atom after another, q wy wz
 * once per row (md__pme_term's association), with no range test (|q| < 2^14) and no division
 * (131 -> 78 SASS instructions a pass of a thread), and the flush carries its rows (above).
 * Side by side on an H100 (bench/ab.sh --chapters 07, two rounds): spread_window 25.5 / 24.9 ->
 * 23.1 / 23.8 us (23,568 atoms, builder's order) and 47.3 / 47.3 -> 40.1 / 39.8 us (95,766);
 * pme_graph_forces 42.6 / 43.2 -> 42.4 / 42.9 us and 93.2 / 93.6 -> 86.1 / 86.3 us; chapter 08's
 * race 102.1 / 102.8 -> 101.0 / 101.0 us and 311.1 / 313.3 -> 308.3 / 307.6 us. */
#ifndef MD__PME_WINDOW_ATOMS /* the plan's default. 32, 64, 128 measured in chapter 08's race (H100, 2026-11-23):
                                156.6 / 157.8 / 160.0 us per step at 23,568 atoms, 503.7 / 507.3 / 511.0 us at
                                95,766, so one batch per block; for md_cuda_sim's choice today see
                                md__sim_window_atoms */
#define MD__PME_WINDOW_ATOMS 32
#endif
#ifndef MD__PME_WINDOW_BLOCK
#define MD__PME_WINDOW_BLOCK 128
#endif
#ifndef MD__PME_WINDOW_POINTS /* 16 KB of window: 12 blocks per SM instead of 6 with 4096 points. Side by side on an
                                 H100 (chapter 07, two runs each, 4096 -> 2048): pme_graph_sorted 54 -> 52 us (23,568
                                 atoms) and 118-119 -> 108-109 us (95,766); spread_window on the builder's order 23-24 ->
                                 28 us (more batches too wide for a window) and 62 -> 51 us; the race's step 149.5 /
                                 149.7 -> 149.2 / 149.8 us and 471.5 / 472.4 -> 467.8 / 467.7 us */
#define MD__PME_WINDOW_POINTS 2048
#endif
static_assert(MD__PME_WINDOW_ATOMS % 32 == 0 && MD__PME_WINDOW_ATOMS <= 256, "atoms per window: 32..256, whole batches");
static_assert(MD__PME_WINDOW_BLOCK % 32 == 0 && MD__PME_WINDOW_BLOCK >= 6 * 6,
              "windowed spread: whole warps, and at least a row (iy, iz) per thread for every stencil column of order 6");

/* Add the window's points to the global grid, zeroing them (every thread of the block). A warp
 * takes whole rows (lx, ly) of the window, 32 / e[2] rows at a time when a row fits a warp, so a
 * lane keeps its z (and its grid index mod K2) for the whole call. A thread finds its first row's
 * grid x and y with one division and two modulos and walks on to its later rows (a constant step
 * of rows) by carrying them, so a nonzero point costs its loads, its 64-bit atomic and no
 * division. (It took a division and two modulos per point before: about 130 SASS instructions
 * a nonzero point, about 45 now.) */
static __device__ void md__pme_window_flush(unsigned *lo, int *hi, const int *o, const int *e, int K0, int K1, int K2,
                                            md_fixed *__restrict__ grid) {
    const int e1 = e[1], e2 = e[2], rows = e[0] * e1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = e2 <= 32 ? 32 / e2 : 1, sub = e2 <= 32 ? lane / e2 : 0, lz0 = lane - sub * e2;
    const int step = nw * per, qs = step / e1, rs = step - qs * e1; /* a step of rows: qs along x, rs along y */
    int r = warp * per + sub;
    if (sub >= per || r >= rows) return;
    int gx = (o[0] + r / e1) % K0, gy = (o[1] + r % e1) % K1, ly = r % e1;
    const int gz0 = (o[2] + lz0) % K2;
    auto point = [&](size_t row, int k, int gz) { /* window point k -> grid point row + gz */
        const unsigned l = lo[k];
        const int h = hi[k];
        if (l | (unsigned)h) {
            lo[k] = 0u;
            hi[k] = 0;
            atomicAdd(grid + row + gz, (md_fixed)((long long)h * 16777216ll + (long long)l));
        }
    };
    for (; r < rows; r += step) {
        const size_t row = ((size_t)gx * K1 + gy) * K2;
        if (e2 <= 32)
            point(row, r * e2 + lz0, gz0);
        else
            for (int lz = lane; lz < e2; lz += 32) point(row, r * e2 + lz, (o[2] + lz) % K2);
        /* row r + step: (x, y) + (qs, rs), y carried into x; grid x and y kept in [0, K) */
        gx += qs;
        ly += rs;
        gy += rs;
        if (ly >= e1) {
            ly -= e1;
            gy -= e1;
            gx++;
        }
        if (gx >= K0) gx = gx - K0 < K0 ? gx - K0 : gx % K0;    /* a modulo only where a step passes */
        if ((unsigned)gy >= (unsigned)K1) gy = (gy % K1 + K1) % K1; /* a whole grid (tiny grids) */
    }
}

/* x mod K for x in [-K, 2K): the window's offsets, which differ by less than a grid's length. */
static __device__ __forceinline__ int md__pme_wrap1(int x, int K) { return x < 0 ? x + K : (x >= K ? x - K : x); }

template <int P>
__global__ void __launch_bounds__(MD__PME_WINDOW_BLOCK) md__pme_spread_window_kernel(
    const float4 *__restrict__ xyzq, int n, int per_block, const double *__restrict__ box, int K0, int K1, int K2,
    md_fixed *__restrict__ grid, md_fixed *charge, unsigned long long *flags) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    __shared__ unsigned s_lo[MD__PME_WINDOW_POINTS];
    __shared__ int s_hi[MD__PME_WINDOW_POINTS];
    __shared__ float s_w[32][3 * P], s_q[32], s_qs[32];
    __shared__ int s_b[32][3], s_base[32], s_o[3], s_e[3], s_no[3], s_ne[3], s_mode; /* mode: 0 add, 1 new window, 2 global */
    const int K[3] = {K0, K1, K2};
    const int a0 = blockIdx.x * per_block, a1 = min(n, a0 + per_block);
    const int lane = threadIdx.x & 31;
    /* the add loop's rows: thread t adds row r = t mod P^2 (iy, iz) of atoms t / P^2, + G, + 2G, ... */
    constexpr int PP = P * P;
    const int G = (int)blockDim.x / PP, r = (int)threadIdx.x % PP, iy = r / P, iz = r - iy * P;
    int open = 0; /* the same in every thread: a window holds terms */
    if (blockIdx.x == 0 && threadIdx.x == 0) charge[0] = charge[1] = 0ull; /* md__pme_fixed_to_real_kernel adds them */
    for (int b0 = a0; b0 < a1; b0 += 32) {
        if (threadIdx.x < 32) { /* warp 0: locate the batch, measure it, decide */
            const int atom = b0 + lane;
            int ok = atom < a1, b[3], lo3[3], hi3[3];
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (ok) {
                a = xyzq[atom];
                if (!md__pme_finite(a)) {
                    md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)atom);
                    ok = 0;
                }
            }
            if (ok) {
                float d[3];
                md_cuda_pme_locate(a.x, (float)(1.0 / box[0]), K0, &b[0], &d[0]);
                md_cuda_pme_locate(a.y, (float)(1.0 / box[1]), K1, &b[1], &d[1]);
                md_cuda_pme_locate(a.z, (float)(1.0 / box[2]), K2, &b[2], &d[2]);
                for (int c = 0; c < 3; c++) md_cuda_pme_bspline<P>(d[c], &s_w[lane][c * P], NULL);
            } else {
                b[0] = b[1] = b[2] = 0;
            }
            s_q[lane] = ok ? a.w : 0.0f;
            for (int c = 0; c < 3; c++) {
                /* the base relative to the batch's first atom, in [-K/2, K/2) (periodic) */
                const int ref = __shfl_sync(0xffffffffu, b[c], 0);
                const int rel = md__pme_wrap1(b[c] - ref + K[c] / 2, K[c]) - K[c] / 2; /* bases in [0, K) */
                s_b[lane][c] = ok ? b[c] : -1;
                lo3[c] = ok ? rel : K[c];
                hi3[c] = ok ? rel : -K[c];
                for (int off = 16; off > 0; off >>= 1) {
                    lo3[c] = min(lo3[c], __shfl_xor_sync(0xffffffffu, lo3[c], off));
                    hi3[c] = max(hi3[c], __shfl_xor_sync(0xffffffffu, hi3[c], off));
                }
                lo3[c] += ref; /* the extent [lo3, hi3 + P) around the first atom, not yet mod K */
                hi3[c] += ref;
            }
            /* a charge of 2^14 e or more could carry a term's 32-bit halves out of range (below) */
            const int big = __any_sync(0xffffffffu, ok && !(fabsf(a.w) < 16384.0f));
            ok = __any_sync(0xffffffffu, ok); /* from here: the batch has an atom to add */
            {
                /* fits the open window: every atom's stencil inside it (mod K) */
                int fits = open;
                for (int c = 0; c < 3 && fits; c++) {
                    const int l = md__pme_wrap1(b[c] - s_o[c], K[c]);
                    fits = s_b[lane][c] < 0 || l + P <= s_e[c];
                    fits = __all_sync(0xffffffffu, fits);
                }
                fits = __all_sync(0xffffffffu, fits);
                if (lane == 0) {
                    if (!ok) s_mode = 0; /* no atom to add */
                    else if (big) s_mode = 2;
                    else if (fits) s_mode = 0;
                    else {
                        int ext[3], g = 0, e[3];
                        for (int c = 0; c < 3; c++) ext[c] = hi3[c] - lo3[c] + P;
                        if ((long long)ext[0] * ext[1] * ext[2] > MD__PME_WINDOW_POINTS) {
                            s_mode = 2;
                        } else {
                            if (b0 + 32 < a1) /* room around the batch for the block's next ones */
                                while ((long long)(ext[0] + g + 1) * (ext[1] + g + 1) * (ext[2] + g + 1) <= MD__PME_WINDOW_POINTS)
                                    g++;
                            for (int c = 0; c < 3; c++) {
                                e[c] = ext[c] + g;
                                s_ne[c] = e[c];
                                s_no[c] = ((lo3[c] - g / 2) % K[c] + K[c]) % K[c];
                            }
                            s_mode = 1;
                        }
                    }
                }
                __syncwarp();
                /* each atom's stencil origin as an index of the window it adds to (-1: no atom, or
                 * the batch goes to the global grid), and its charge times the grid's scale */
                {
                    const int m = s_mode, *org = m == 1 ? s_no : s_o, *e = m == 1 ? s_ne : s_e;
                    int base = -1;
                    if (s_b[lane][0] >= 0 && (m == 1 || (m == 0 && open))) {
                        int l[3];
                        for (int c = 0; c < 3; c++) l[c] = md__pme_wrap1(b[c] - org[c], K[c]);
                        base = (l[0] * e[1] + l[1]) * e[2] + l[2];
                    }
                    s_base[lane] = base;
                    s_qs[lane] = md__fmul(s_q[lane], (float)MD_CUDA_PME_GRID_SCALE);
                }
            }
        }
        __syncthreads();
        const int mode = s_mode;
        if (mode == 1) {
            if (open) md__pme_window_flush(s_lo, s_hi, s_o, s_e, K0, K1, K2, grid);
            __syncthreads(); /* the flush read s_o / s_e and left its points zero */
            if (threadIdx.x < 3) {
                s_o[threadIdx.x] = s_no[threadIdx.x];
                s_e[threadIdx.x] = s_ne[threadIdx.x];
            }
            for (int k = threadIdx.x; k < s_ne[0] * s_ne[1] * s_ne[2]; k += blockDim.x) { /* the new window, zero */
                s_lo[k] = 0u;
                s_hi[k] = 0;
            }
            open = 1;
            __syncthreads();
        }
        if (mode == 2) { /* the global grid, term by term (md__pme_term's range test included) */
            for (int k = threadIdx.x; k < 32 * PP; k += blockDim.x) {
                const int i = k / PP, kr = k % PP, ky = kr / P, kz = kr % P;
                if (s_b[i][0] < 0) continue;
                const float q = s_q[i], wy = s_w[i][P + ky], wz = s_w[i][2 * P + kz];
                const int gy = s_b[i][1] + ky < K1 ? s_b[i][1] + ky : s_b[i][1] + ky - K1;
                const int gz = s_b[i][2] + kz < K2 ? s_b[i][2] + kz : s_b[i][2] + kz - K2;
#pragma unroll
                for (int ix = 0; ix < P; ix++) {
                    const int gx = s_b[i][0] + ix < K0 ? s_b[i][0] + ix : s_b[i][0] + ix - K0;
                    atomicAdd(grid + ((size_t)gx * K1 + gy) * K2 + gz, md__pme_term(q, s_w[i][ix], wy, wz));
                }
            }
        } else if ((int)threadIdx.x < G * PP) {
            /* Row (iy, iz) of each atom: q wy wz once, then its P terms along x, P window points
             * e1 e2 apart. The term is md__pme_term's: with the charge scaled by the grid's
             * scale first (a power of two, and |q| < 2^14: every product stays exact to the same
             * rounding, or is below 2^-94 and converts to 0 either way), so no product can leave
             * the 64-bit range and the range test is left out. Each term t goes in as
             * t & 0xffffff and t >> 24. */
            const int e2 = s_e[2], exy = s_e[1] * e2, roff = iy * e2 + iz;
            for (int i = (int)threadIdx.x / PP; i < 32; i += G) {
                const int base = s_base[i];
                if (base < 0) continue;
                const float v = md__fmul(md__fmul(s_qs[i], s_w[i][P + iy]), s_w[i][2 * P + iz]);
#pragma unroll
                for (int ix = 0; ix < P; ix++) {
                    const md_fixed t = (md_fixed)__float2ll_rn(md__fmul(v, s_w[i][ix]));
                    const int w = base + roff + ix * exy;
                    atomicAdd(&s_lo[w], (unsigned)(t & 0xffffffull));
                    atomicAdd(&s_hi[w], (int)((long long)t >> 24));
                }
            }
        }
        __syncthreads(); /* the batch is in; warp 0 may overwrite s_b, s_w */
    }
    if (open) md__pme_window_flush(s_lo, s_hi, s_o, s_e, K0, K1, K2, grid);
}

/* Solve: one thread per complex value. eterm = k exp(-pi^2 m^2 / alpha^2) / (pi V m^2 B(m)); the
 * energy 1/2 sum (weight) eterm |F(Q)|^2 and its virial, in fixed point; block 0 adds the
 * neutralising background -k pi Q^2 / (2 V alpha^2) of the spread's charge sum. */
__global__ void md__pme_solve_kernel(float2 *__restrict__ cgrid, int K0, int K1, int K2, int nh,
                                     const float *__restrict__ mod, const double *__restrict__ box, float alpha,
                                     const md_fixed *__restrict__ charge, md_fixed *energy, md_fixed *virial) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x, total = (long long)K0 * K1 * nh;
    const float pi = 3.14159265358979f, fac = md__fdiv(md__fmul(pi, pi), md__fmul(alpha, alpha));
    const double L0 = box[0], L1 = box[1], L2 = box[2];
    md_fixed acc[10] = {0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull};
    md_fixed *dst[10];
    int k;
    dst[0] = energy;
    for (k = 0; k < 9; k++) dst[1 + k] = virial ? virial + k : NULL;
    if (idx < total) {
        int kx, ky, kz;
        if (total <= 0xffffffffll) { /* uniform: 32-bit divisions (a 64-bit one is a long subroutine) */
            const unsigned u = (unsigned)idx, r = u / (unsigned)nh;
            kz = (int)(u - r * (unsigned)nh);
            ky = (int)(r % (unsigned)K1);
            kx = (int)(r / (unsigned)K1);
        } else {
            kz = (int)(idx % nh);
            ky = (int)((idx / nh) % K1);
            kx = (int)(idx / ((long long)nh * K1));
        }
        const float mx = md__fmul((float)(kx < (K0 + 1) / 2 ? kx : kx - K0), (float)(1.0 / L0));
        const float my = md__fmul((float)(ky < (K1 + 1) / 2 ? ky : ky - K1), (float)(1.0 / L1));
        const float mz = md__fmul((float)kz, (float)(1.0 / L2));
        const float m2 = md__fmul(mx, mx) + md__fmul(my, my) + md__fmul(mz, mz);
        float2 z = cgrid[idx];
        if (m2 > 0.0f) {
            const float V = (float)(L0 * L1 * L2);
            const float denom = md__fmul(md__fmul(md__fmul(pi, V), m2), md__fmul(md__fmul(mod[kx], mod[K0 + ky]), mod[K0 + K1 + kz]));
            const float eterm = md__fdiv(md__fmul((float)MD_COULOMB, expf(-md__fmul(fac, m2))), denom);
            const float half = (kz == 0 || (K2 % 2 == 0 && kz == K2 / 2)) ? 0.5f : 1.0f; /* 1/2 x the mirror weight */
            if (energy) { /* uniform: forces-only steps skip the energy, the virial and their sums */
                const float ek = md__fmul(md__fmul(half, eterm), md__fmul(z.x, z.x) + md__fmul(z.y, z.y));
                const float g = md__fdiv(md__fmul(2.0f, 1.0f + md__fmul(fac, m2)), m2);
                const float m[3] = {mx, my, mz};
                int a, b;
                acc[0] = md_fixed_from_float(ek, (float)MD_ENERGY_FIXED_SCALE);
                for (a = 0; a < 3; a++)
                    for (b = 0; b < 3; b++)
                        acc[1 + 3 * a + b] = md_fixed_from_float(md__fmul(ek, (a == b ? 1.0f : 0.0f) -
                                                                                  md__fmul(md__fmul(g, m[a]), m[b])),
                                                                 (float)MD_ENERGY_FIXED_SCALE);
            }
            z.x = md__fmul(z.x, eterm);
            z.y = md__fmul(z.y, eterm);
        } else {
            z.x = z.y = 0.0f;
        }
        cgrid[idx] = z;
    }
    if (!energy) return;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const double q = md_fixed_to_double(charge[0], MD_FORCE_FIXED_SCALE);
        const double ebg = -MD_COULOMB * 3.14159265358979323846 * q * q / (2.0 * L0 * L1 * L2 * (double)alpha * alpha);
        const md_fixed f = md_fixed_from_float((float)ebg, (float)MD_ENERGY_FIXED_SCALE);
        acc[0] += f;
        acc[1] += f;
        acc[5] += f;
        acc[9] += f;
    }
    md__pme_block_add<10>(acc, dst);
}

#ifndef MD__PME_GATHER_BLOCK /* threads per gather block: 128 as the one-thread gather had (not swept for the lane layout) */
#define MD__PME_GATHER_BLOCK 128
#endif
static_assert(MD__PME_GATHER_BLOCK % 32 == 0 && MD__PME_GATHER_BLOCK <= 1024, "MD__PME_GATHER_BLOCK: whole warps, at most 1024");
/* Gather: P lanes per atom, 32 / P atoms per warp. Lane iz of an atom's group reads stencil
 * column iz of each of the P x P rows, so at each load the group's lanes read P consecutive
 * floats of one row (one or two cache lines per atom) where one thread per atom touched a line
 * per point; the partial forces are summed over the group in lane order (shuffles, the same bits
 * on every run) and the group's first lane adds the force -q grad(weights) . phi in fixed point
 * (SoA). The group's lanes 0, 1 and 2 each locate the atom along one axis and make its weights
 * and derivatives, which the group's lanes take by shuffles (lane iz keeps only column iz of
 * the z axis); each row's potentials are summed against the y weights and derivatives first
 * (two products a point), and the x weights and derivatives multiply the row sums (three a
 * row), instead of three products a point. Before, every lane located the atom and made all
 * three axes' weights itself. Nsight Compute had the kernel issuing in 68% of the schedulers'
 * cycles at 95,766 atoms (L1 hit rate 70%: bound by its instructions, not its loads); side by
 * side on an H200 (2026-12-02, bench/ab.sh --chapters 07, two rounds): gather 5.9 / 5.9 -> 5.4 /
 * 5.3 us at 23,568 atoms and 17.7 / 17.8 -> 15.3 / 15.4 us at 95,766; pme_graph_forces 42.5 /
 * 42.8 -> 41.7 / 41.5 and 94.8 / 94.6 -> 92.0 / 92.0 us; chapter 08's race 104.1 / 104.0 ->
 * 103.6 / 103.4 and 314.5 / 314.3 -> 313.2 / 313.4 us. */
template <int P>
__global__ void __launch_bounds__(MD__PME_GATHER_BLOCK) md__pme_gather_kernel(const float4 *__restrict__ xyzq, int n,
                                                                           const double *__restrict__ box, int K0, int K1,
                                                                           int K2, const float *__restrict__ phi,
                                                                           md_fixed *force, int stride) {
    md__pdl_wait(); /* launched with MD__LAUNCH_PDL */
    constexpr int A = 32 / P; /* atoms per warp; lanes A * P .. 31 idle */
    const unsigned all = 0xffffffffu;
    const int lane = threadIdx.x & 31, grp = lane / P, iz = lane - grp * P, g0 = grp < A ? grp * P : 0;
    const long long i = (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * A + grp;
    const float il[3] = {(float)(1.0 / box[0]), (float)(1.0 / box[1]), (float)(1.0 / box[2])};
    float fx = 0.0f, fy = 0.0f, fz = 0.0f, q = 0.0f;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (grp < A && i < n) a = xyzq[i];
    /* a non-finite atom (the spread raised the flag) adds nothing; the same for its whole group */
    const int live = grp < A && i < n && md__pme_finite(a);
    {
        /* this lane's axis (lanes 3 .. P-1 of a group repeat axis 2, unused) */
        const int c = iz < 3 ? iz : 2;
        float w[P], dw[P], d = 0.0f, w0[P], dw0[P], w1[P], dw1[P], wz = 0.0f, dwz = 0.0f;
        int b = 0;
        if (live) /* selects, not a register array indexed at run time */
            md_cuda_pme_locate(c == 0 ? a.x : (c == 1 ? a.y : a.z), c == 0 ? il[0] : (c == 1 ? il[1] : il[2]),
                               c == 0 ? K0 : (c == 1 ? K1 : K2), &b, &d);
        md_cuda_pme_bspline<P>(d, w, dw);
#pragma unroll
        for (int k = 0; k < P; k++) { /* every lane shuffles: the group's lane 0 has x, lane 1 y, lane 2 z */
            const float z = __shfl_sync(all, w[k], g0 + 2), dz = __shfl_sync(all, dw[k], g0 + 2);
            w0[k] = __shfl_sync(all, w[k], g0);
            dw0[k] = __shfl_sync(all, dw[k], g0);
            w1[k] = __shfl_sync(all, w[k], g0 + 1);
            dw1[k] = __shfl_sync(all, dw[k], g0 + 1);
            if (k == iz) { /* this lane's column, without indexing a register array */
                wz = z;
                dwz = dz;
            }
        }
        const int b0 = __shfl_sync(all, b, g0), b1 = __shfl_sync(all, b, g0 + 1), b2 = __shfl_sync(all, b, g0 + 2);
        if (live) {
            const int gz = b2 + iz < K2 ? b2 + iz : b2 + iz - K2;
            q = a.w;
#pragma unroll
            for (int ix = 0; ix < P; ix++) {
                const int gx = b0 + ix < K0 ? b0 + ix : b0 + ix - K0;
                float s = 0.0f, sd = 0.0f; /* the row sums: sum_y w1 phi, sum_y dw1 phi */
#pragma unroll
                for (int iy = 0; iy < P; iy++) {
                    const int gy = b1 + iy < K1 ? b1 + iy : b1 + iy - K1;
                    const float p = phi[((size_t)gx * K1 + gy) * K2 + gz];
                    s = fmaf(w1[iy], p, s);
                    sd = fmaf(dw1[iy], p, sd);
                }
                fx = fmaf(dw0[ix], s, fx);
                fy = fmaf(w0[ix], sd, fy);
                fz = fmaf(w0[ix], s, fz);
            }
            fx *= wz;
            fy *= wz;
            fz *= dwz;
        }
    }
    {
        float sx = fx, sy = fy, sz = fz;
#pragma unroll
        for (int k = 1; k < P; k++) { /* every lane shuffles; the group's first lane keeps the sum */
            sx += __shfl_down_sync(all, fx, k);
            sy += __shfl_down_sync(all, fy, k);
            sz += __shfl_down_sync(all, fz, k);
        }
        if (iz == 0 && q != 0.0f) {
            md__red_add(force + i, md_fixed_from_float(-q * sx * (float)K0 * il[0], (float)MD_FORCE_FIXED_SCALE));
            md__red_add(force + stride + i, md_fixed_from_float(-q * sy * (float)K1 * il[1], (float)MD_FORCE_FIXED_SCALE));
            md__red_add(force + 2 * (size_t)stride + i,
                        md_fixed_from_float(-q * sz * (float)K2 * il[2], (float)MD_FORCE_FIXED_SCALE));
        }
    }
}

void md_cuda_pme_plan_destroy(md_cuda_pme_plan *p) {
    if (!p) return;
    if (p->queue.stream) (void)cudaStreamSynchronize(p->queue.stream);
    if (p->fft_exec[0]) (void)cudaGraphExecDestroy(p->fft_exec[0]);
    if (p->fft_exec[1]) (void)cudaGraphExecDestroy(p->fft_exec[1]);
    if (p->graph[0]) (void)cudaGraphExecDestroy(p->graph[0]);
    if (p->graph[1]) (void)cudaGraphExecDestroy(p->graph[1]);
    if (p->have_forward) (void)cufftDestroy(p->fft_forward);
    if (p->have_backward) (void)cufftDestroy(p->fft_backward);
    md_cuda_free(p->d_moduli);
    md_cuda_free(p->d_grid_fixed);
    md_cuda_free(p->d_real);
    md_cuda_free(p->d_complex);
    md_cuda_free(p->d_charge);
    md_cuda_free(p->d_brick_count);
    md_cuda_free(p->d_brick_start);
    md_cuda_free(p->d_sorted);
    md_cuda_free(p->d_rank);
    md_cuda_free(p->d_base);
    md_cuda_free(p->d_theta);
    md_cuda_free(p->d_xyzq);
    md_cuda_free(p->d_box);
    md_cuda_free(p->d_out);
    md_cuda_free_pinned(p->h_xyzq);
    md_cuda_free_pinned(p->h_box);
    md_cuda_free_pinned(p->h_out);
    if (p->staged) (void)cudaEventDestroy(p->staged);
    md_cuda_queue_destroy(&p->queue);
    memset(p, 0, sizeof *p);
}

/* The one cuFFT call of a transform (backward: 1) on the plan's buffers and stream. */
static cufftResult md__pme_fft_exec(md_cuda_pme_plan *p, int backward) {
    return backward ? cufftExecC2R(p->fft_backward, (cufftComplex *)p->d_complex, (cufftReal *)p->d_real)
                    : cufftExecR2C(p->fft_forward, (cufftReal *)p->d_real, (cufftComplex *)p->d_complex);
}

/* Capture a transform into p->fft_exec[backward] (MD_CUDA_PME_FFT_GRAPH). It is run once first,
 * on zeroed grids, so that whatever cuFFT does at a plan's first call is not captured. */
static md_status md__pme_fft_graph(md_cuda_pme_plan *p, int backward) {
    const char *what = backward ? "cufftExecC2R" : "cufftExecR2C";
    cudaStream_t s = p->queue.stream;
    cudaGraph_t g = NULL;
    cudaError_t e;
    cufftResult r;
    MD_CUDA_TRY(cudaMemsetAsync(p->d_real, 0, (size_t)p->params.grid[0] * p->params.grid[1] * p->params.grid[2] *
                                                  sizeof(float), s));
    MD_CUDA_TRY(cudaMemsetAsync(p->d_complex, 0, (size_t)p->params.grid[0] * p->params.grid[1] * p->nh * sizeof(float2), s));
    if ((r = md__pme_fft_exec(p, backward)) != CUFFT_SUCCESS) return md__cufft_error(r, what, __LINE__);
    MD_CUDA_TRY(cudaStreamSynchronize(s));
    MD_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    r = md__pme_fft_exec(p, backward);
    e = cudaStreamEndCapture(s, &g); /* ended whatever cuFFT answered */
    if (r != CUFFT_SUCCESS) {
        if (g) (void)cudaGraphDestroy(g);
        return md__cufft_error(r, what, __LINE__);
    }
    if (e != cudaSuccess) return md_cuda_error(e, "cudaStreamEndCapture (cuFFT)", __FILE__, __LINE__);
    e = cudaGraphInstantiate(&p->fft_exec[backward], g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        p->fft_exec[backward] = NULL;
        return md_cuda_error(e, "cudaGraphInstantiate (cuFFT)", __FILE__, __LINE__);
    }
    return MD_OK;
}

/* Enqueue a transform: its captured graph, or the cuFFT call when there is none or the plan's
 * stream is being captured (then the caller's graph gets cuFFT's kernels). */
static md_status md__pme_fft(md_cuda_pme_plan *p, int backward) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cufftResult r;
    if (p->fft_exec[backward]) {
        MD_CUDA_TRY(cudaStreamIsCapturing(p->queue.stream, &cs));
        if (cs == cudaStreamCaptureStatusNone) {
            MD_CUDA_TRY(cudaGraphLaunch(p->fft_exec[backward], p->queue.stream));
            return MD_OK;
        }
    }
    if ((r = md__pme_fft_exec(p, backward)) != CUFFT_SUCCESS)
        return md__cufft_error(r, backward ? "cufftExecC2R" : "cufftExecR2C", __LINE__);
    return MD_OK;
}

md_status md_cuda_pme_plan_create(md_cuda_pme_plan *p, const md_pme_params *params, const double box[3],
                                  int capacity) {
    const char *fn = "md_cuda_pme_plan_create";
    md_cuda_pme_plan t;
    md_status st;
    cudaError_t e;
    cufftResult r;
    size_t npts, ncplx, nbricks;
    double *mod = NULL;
    float *modf = NULL;
    int d, k, o;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    memset(p, 0, sizeof *p);
    memset(&t, 0, sizeof t);
    if (capacity < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "capacity", "must be >= 1 (got %d)", capacity);
    if ((st = md_pme_params_resolve(params, box, &t.params)) != MD_OK) return st;
    t.capacity = capacity;
    t.nh = t.params.grid[2] / 2 + 1;
    t.spread = MD_CUDA_PME_SPREAD_ATOMIC;
    t.window_atoms = MD__PME_WINDOW_ATOMS;
    for (d = 0; d < 3; d++) t.nbrick[d] = (t.params.grid[d] + MD_CUDA_PME_BRICK - 1) / MD_CUDA_PME_BRICK;
    npts = (size_t)t.params.grid[0] * t.params.grid[1] * t.params.grid[2];
    ncplx = (size_t)t.params.grid[0] * t.params.grid[1] * t.nh;
    nbricks = (size_t)t.nbrick[0] * t.nbrick[1] * t.nbrick[2];
    o = t.params.order;
    if ((st = md_cuda_queue_create(&t.queue)) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_moduli, (size_t)(t.params.grid[0] + t.params.grid[1] + t.params.grid[2]),
                            sizeof(float), "moduli")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_grid_fixed, npts, sizeof(md_fixed), "fixed-point grid")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_real, npts, sizeof(float), "real grid")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_complex, ncplx, sizeof(float2), "complex grid")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_charge, 2, sizeof(md_fixed), "charge sums")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_brick_count, nbricks, sizeof(int), "brick counts")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_brick_start, nbricks + 1, sizeof(int), "brick starts")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_sorted, (size_t)capacity, sizeof(int), "sorted atoms")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_rank, (size_t)capacity, sizeof(int), "brick ranks")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_base, (size_t)capacity, sizeof(int4), "stencil origins")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_theta, (size_t)capacity * 3, (size_t)o * sizeof(float), "weights")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_xyzq, (size_t)capacity, sizeof(float4), "atoms")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_box, 3, sizeof(double), "box")) != MD_OK ||
        (st = md_cuda_alloc((void **)&t.d_out, 3 * (size_t)capacity + 10, sizeof(md_fixed), "outputs")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_xyzq, (size_t)capacity, sizeof(md_float4), "atom staging")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_box, 3, sizeof(double), "box staging")) != MD_OK ||
        (st = md_cuda_alloc_pinned((void **)&t.h_out, 3 * (size_t)capacity + 12, sizeof(md_fixed), "outputs")) != MD_OK)
        goto fail;
    if ((e = cudaEventCreateWithFlags(&t.staged, cudaEventDisableTiming)) != cudaSuccess) {
        t.staged = NULL;
        st = md_cuda_error(e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
        goto fail;
    }
    k = t.params.grid[0] + t.params.grid[1] + t.params.grid[2];
    mod = (double *)md_alloc_array((size_t)k, sizeof(double));
    modf = (float *)md_alloc_array((size_t)k, sizeof(float));
    if (!mod || !modf) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "grid", "out of memory");
        goto fail;
    }
    for (d = 0, k = 0; d < 3; k += t.params.grid[d], d++)
        if ((st = md_pme_bspline_moduli(t.params.grid[d], o, mod + k)) != MD_OK) goto fail;
    for (d = 0; d < k; d++) modf[d] = (float)mod[d];
    if ((e = cudaMemcpy(t.d_moduli, modf, (size_t)k * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemset(t.d_out, 0, (3 * (size_t)capacity + 10) * sizeof(md_fixed))) != cudaSuccess ||
        (e = cudaMemset(t.d_charge, 0, 2 * sizeof(md_fixed))) != cudaSuccess ||
        (e = cudaMemset(t.d_grid_fixed, 0, npts * sizeof(md_fixed))) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess) {
        st = md_cuda_error(e, "cudaMemcpy(moduli)", __FILE__, __LINE__);
        goto fail;
    }
    if ((r = cufftPlan3d(&t.fft_forward, t.params.grid[0], t.params.grid[1], t.params.grid[2], CUFFT_R2C)) != CUFFT_SUCCESS) {
        st = md__cufft_error(r, "cufftPlan3d(R2C)", __LINE__);
        goto fail;
    }
    t.have_forward = 1;
    if ((r = cufftPlan3d(&t.fft_backward, t.params.grid[0], t.params.grid[1], t.params.grid[2], CUFFT_C2R)) != CUFFT_SUCCESS) {
        st = md__cufft_error(r, "cufftPlan3d(C2R)", __LINE__);
        goto fail;
    }
    t.have_backward = 1;
    if ((r = cufftSetStream(t.fft_forward, t.queue.stream)) != CUFFT_SUCCESS ||
        (r = cufftSetStream(t.fft_backward, t.queue.stream)) != CUFFT_SUCCESS) {
        st = md__cufft_error(r, "cufftSetStream", __LINE__);
        goto fail;
    }
#if MD_CUDA_PME_FFT_GRAPH
    if ((st = md__pme_fft_graph(&t, 0)) != MD_OK || (st = md__pme_fft_graph(&t, 1)) != MD_OK) goto fail;
#endif
    md_free(mod);
    md_free(modf);
    *p = t;
    return MD_OK;
fail:
    md_free(mod);
    md_free(modf);
    md_cuda_pme_plan_destroy(&t);
    return st;
}

md_status md_cuda_pme_plan_set_spread(md_cuda_pme_plan *p, md_cuda_pme_spread spread) {
    if (!p || !p->d_real)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_pme_plan_set_spread", 0, "p", "is not a plan");
    if ((int)spread < 0 || spread >= MD_CUDA_PME_SPREAD_COUNT)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_pme_plan_set_spread", 0, "spread", "unknown rung %d",
                            (int)spread);
    p->spread = spread;
    return MD_OK;
}

md_status md_cuda_pme_plan_set_window_atoms(md_cuda_pme_plan *p, int atoms) {
    const char *fn = "md_cuda_pme_plan_set_window_atoms";
    if (!p || !p->d_real) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan");
    if (atoms == 0) atoms = MD__PME_WINDOW_ATOMS;
    if (atoms < 32 || atoms > 256 || atoms % 32 != 0)
        return md_set_error(MD_ERR_RANGE, fn, 0, "atoms", "%d: must be 32, 64, ..., 256 (or 0, the default %d)", atoms,
                            MD__PME_WINDOW_ATOMS);
    p->window_atoms = atoms;
    return MD_OK;
}

static md_status md__pme_check(const char *fn, const md_cuda_pme_plan *p, const void *d_xyzq, int n,
                               const double *d_box) {
    if (!p || !p->d_real) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_pme_plan_create)");
    if (!d_xyzq || !d_box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_xyzq/d_box", "is NULL");
    if (n < 1 || n > p->capacity)
        return md_set_error(MD_ERR_RANGE, fn, 0, "n", "%d atoms: must be in 1..capacity (%d)", n, p->capacity);
    return MD_OK;
}

/* Launch KERNEL<order> with the plan's order (4, 5 or 6). */
/** @cond INTERNAL */
#define MD__PME_LAUNCH_ORDER(order, kernel, grid, block, smem, stream, ...)                                            \
    do {                                                                                                               \
        if ((order) == 4) MD__LAUNCH_PDL((kernel<4>), grid, block, smem, stream, __VA_ARGS__);                         \
        else if ((order) == 5) MD__LAUNCH_PDL((kernel<5>), grid, block, smem, stream, __VA_ARGS__);                    \
        else MD__LAUNCH_PDL((kernel<6>), grid, block, smem, stream, __VA_ARGS__);                                      \
    } while (0)
/** @endcond */

/* The spread of md_cuda_pme_enqueue_spread; @p charges 0: the atomic and windowed rungs skip the
 * charge sums (only the solve's energy reads them: md_cuda_pme_plan_enqueue without energies). */
static md_status md__pme_spread(md_cuda_pme_plan *p, md_cuda_pme_spread spread, const float4 *d_xyzq, int n,
                                const double *d_box, int charges) {
    const char *fn = "md_cuda_pme_enqueue_spread";
    const int *K;
    md_status st;
    cudaStream_t s;
    long long npts;
    int o;
    if ((st = md__pme_check(fn, p, d_xyzq, n, d_box)) != MD_OK) return st;
    if ((int)spread < 0 || spread >= MD_CUDA_PME_SPREAD_COUNT)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "spread", "unknown rung %d", (int)spread);
    K = p->params.grid;
    o = p->params.order;
    s = p->queue.stream;
    npts = (long long)K[0] * K[1] * K[2];
    if (spread == MD_CUDA_PME_SPREAD_ATOMIC || spread == MD_CUDA_PME_SPREAD_WINDOW) {
        /* d_grid_fixed is zero: made so, reset by each conversion */
        if (spread == MD_CUDA_PME_SPREAD_ATOMIC) {
            const long long threads = (long long)n * o * o;
            MD__PME_LAUNCH_ORDER(o, md__pme_spread_atomic_kernel, (unsigned)((threads + 255) / 256), 256, 0, s, d_xyzq,
                                 n, d_box, K[0], K[1], K[2], p->d_grid_fixed, p->d_charge, p->queue.d_flags);
        } else {
            MD__PME_LAUNCH_ORDER(o, md__pme_spread_window_kernel,
                                 (unsigned)((n + p->window_atoms - 1) / p->window_atoms), MD__PME_WINDOW_BLOCK, 0, s,
                                 d_xyzq, n, p->window_atoms, d_box, K[0], K[1], K[2], p->d_grid_fixed, p->d_charge,
                                 p->queue.d_flags);
        }
        MD__LAUNCH_PDL(md__pme_fixed_to_real_kernel, (unsigned)((npts + 255) / 256), 256, 0, s, p->d_grid_fixed,
                       p->d_real, npts, d_xyzq, n, charges ? p->d_charge : (md_fixed *)NULL);
    } else {
        const int nbricks = p->nbrick[0] * p->nbrick[1] * p->nbrick[2];
        MD_CUDA_TRY(cudaMemsetAsync(p->d_charge, 0, 2 * sizeof(md_fixed), s)); /* the weights' kernel adds them */
        /* both binned rungs: stencil weights, origins and bricks, then the atoms in brick order */
        MD_CUDA_TRY(cudaMemsetAsync(p->d_brick_count, 0, (size_t)nbricks * sizeof(int), s));
        MD__PME_LAUNCH_ORDER(o, md__pme_theta_kernel, (unsigned)((n + 255) / 256), 256, 0, s, d_xyzq, n, d_box, K[0],
                             K[1], K[2], p->nbrick[1], p->nbrick[2], p->d_theta, p->d_base, p->d_brick_count, p->d_rank,
                             p->d_charge, p->queue.d_flags);
        MD_CUDA_LAUNCH(md__pme_brick_scan_kernel, 1, 1024, 0, s, p->d_brick_count, nbricks, p->d_brick_start);
        MD_CUDA_LAUNCH(md__pme_bin_kernel, (unsigned)((n + 255) / 256), 256, 0, s, p->d_base, p->d_rank, n,
                       p->d_brick_start, p->d_sorted);
        if (spread == MD_CUDA_PME_SPREAD_TILED) {
            MD__PME_LAUNCH_ORDER(o, md__pme_spread_tiled_kernel, (unsigned)nbricks, 256, 0, s, d_xyzq, p->d_theta,
                                 p->d_base, p->d_brick_start, p->d_sorted, K[0], K[1], K[2], p->nbrick[1], p->nbrick[2],
                                 p->d_grid_fixed);
            MD__LAUNCH_PDL(md__pme_fixed_to_real_kernel, (unsigned)((npts + 255) / 256), 256, 0, s, p->d_grid_fixed,
                           p->d_real, npts, (const float4 *)NULL, 0, (md_fixed *)NULL);
        } else {
            MD__PME_LAUNCH_ORDER(o, md__pme_spread_gather_kernel, (unsigned)nbricks, 512, 0, s, d_xyzq, p->d_theta,
                                 p->d_base, p->d_brick_start, p->d_sorted, K[0], K[1], K[2], p->nbrick[0],
                                 p->nbrick[1], p->nbrick[2], p->d_real);
        }
    }
    return MD_OK;
}

md_status md_cuda_pme_enqueue_spread(md_cuda_pme_plan *p, md_cuda_pme_spread spread, const float4 *d_xyzq, int n,
                                     const double *d_box) {
    return md__pme_spread(p, spread, d_xyzq, n, d_box, 1);
}

md_status md_cuda_pme_enqueue_forward(md_cuda_pme_plan *p) {
    if (!p || !p->have_forward)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_pme_enqueue_forward", 0, "p", "is not a plan");
    return md__pme_fft(p, 0);
}

md_status md_cuda_pme_enqueue_backward(md_cuda_pme_plan *p) {
    if (!p || !p->have_backward)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_pme_enqueue_backward", 0, "p", "is not a plan");
    return md__pme_fft(p, 1);
}

md_status md_cuda_pme_enqueue_solve(md_cuda_pme_plan *p, const double *d_box, md_fixed *d_energy, md_fixed *d_virial) {
    const char *fn = "md_cuda_pme_enqueue_solve";
    const int *K;
    long long total;
    if (!p || !p->d_real) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan");
    if (!d_box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_box", "is NULL");
    if (!d_energy && d_virial)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_virial", "needs d_energy (the virial is summed with it)");
    K = p->params.grid;
    total = (long long)K[0] * K[1] * p->nh;
    MD__LAUNCH_PDL(md__pme_solve_kernel, (unsigned)((total + 255) / 256), 256, 0, p->queue.stream, p->d_complex, K[0],
                   K[1], K[2], p->nh, p->d_moduli, d_box, (float)p->params.alpha, p->d_charge, d_energy, d_virial);
    return MD_OK;
}

md_status md_cuda_pme_enqueue_gather(md_cuda_pme_plan *p, const float4 *d_xyzq, int n, const double *d_box,
                                     md_fixed *d_force, int stride) {
    const char *fn = "md_cuda_pme_enqueue_gather";
    md_status st;
    const int *K;
    if ((st = md__pme_check(fn, p, d_xyzq, n, d_box)) != MD_OK) return st;
    if (!d_force) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_force", "is NULL");
    if (stride < n) return md_set_error(MD_ERR_RANGE, fn, 0, "stride", "%d is below n = %d", stride, n);
    K = p->params.grid;
    { /* 32 / order atoms per warp */
        const long long per_block = (long long)(MD__PME_GATHER_BLOCK / 32) * (32 / p->params.order);
        MD__PME_LAUNCH_ORDER(p->params.order, md__pme_gather_kernel, (unsigned)((n + per_block - 1) / per_block),
                             MD__PME_GATHER_BLOCK, 0, p->queue.stream, d_xyzq, n, d_box, K[0], K[1], K[2], p->d_real,
                             d_force, stride);
    }
    return MD_OK;
}

/* One call of md_cuda_pme_plan_enqueue (arguments checked by it). */
typedef struct md__pme_call {
    md_cuda_pme_plan *p;
    const float4 *xyzq;
    int n, stride;
    const double *box;
    md_fixed *force, *energy, *virial;
} md__pme_call;

/* The stages of a call on the plan's stream (an md_cuda_bench_fn, for md_cuda_graph_capture). */
static md_status md__pme_stages(void *ctx, cudaStream_t) {
    const md__pme_call *c = (const md__pme_call *)ctx;
    md_cuda_pme_plan *p = c->p;
    md_status st;
    if ((st = md__pme_spread(p, p->spread, c->xyzq, c->n, c->box, c->energy != NULL)) != MD_OK ||
        (st = md_cuda_pme_enqueue_forward(p)) != MD_OK ||
        (st = md_cuda_pme_enqueue_solve(p, c->box, c->energy, c->virial)) != MD_OK ||
        (st = md_cuda_pme_enqueue_backward(p)) != MD_OK)
        return st;
    return md_cuda_pme_enqueue_gather(p, c->xyzq, c->n, c->box, c->force, c->stride);
}

md_status md_cuda_pme_plan_enqueue(md_cuda_pme_plan *p, const float4 *d_xyzq, int n, const double *d_box,
                                   md_fixed *d_force, int stride, md_fixed *d_energy_recip, md_fixed *d_virial) {
    const char *fn = "md_cuda_pme_plan_enqueue";
    md__pme_call c;
    md_status st;
    if ((st = md__pme_check(fn, p, d_xyzq, n, d_box)) != MD_OK) return st;
    if (!d_force) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_force", "is NULL");
    if (stride < n) return md_set_error(MD_ERR_RANGE, fn, 0, "stride", "%d is below n = %d", stride, n);
    c.p = p;
    c.xyzq = d_xyzq;
    c.n = n;
    c.stride = stride;
    c.box = d_box;
    c.force = d_force;
    c.energy = d_energy_recip;
    c.virial = d_virial;
#if MD_CUDA_PME_GRAPH
    if (p->fft_exec[0] && p->fft_exec[1]) { /* MD_CUDA_PME_GRAPH: one launch, the stages captured once */
        const cudaStream_t s = p->queue.stream;
        const int slot = d_energy_recip != NULL;
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        MD_CUDA_TRY(cudaStreamIsCapturing(s, &cs));
        if (cs == cudaStreamCaptureStatusNone) {
            md_cuda_pme_graph_key key;
            memset(&key, 0, sizeof key); /* compared bytewise */
            key.xyzq = d_xyzq;
            key.box = d_box;
            key.force = d_force;
            key.energy = d_energy_recip;
            key.virial = d_virial;
            key.n = n;
            key.stride = stride;
            key.spread = (long long)p->spread;
            key.window_atoms = p->window_atoms;
            if (!p->graph[slot] || memcmp(&key, &p->graph_key[slot], sizeof key) != 0) {
                cudaGraph_t g = NULL;
                if (p->graph[slot]) (void)cudaGraphExecDestroy(p->graph[slot]);
                p->graph[slot] = NULL;
                if ((st = md_cuda_graph_capture(s, md__pme_stages, &c, &g)) != MD_OK) return st;
                st = md_cuda_graph_instantiate(g, s, &p->graph[slot]);
                (void)cudaGraphDestroy(g);
                if (st != MD_OK) return st;
                p->graph_key[slot] = key;
            }
            MD_CUDA_TRY(cudaGraphLaunch(p->graph[slot], s));
            return MD_OK;
        }
    }
#endif
    return md__pme_stages(&c, p->queue.stream);
}

md_status md_cuda_pme_plan_upload(md_cuda_pme_plan *p, const md_float4 *xyzq, int n, const double box[3]) {
    const char *fn = "md_cuda_pme_plan_upload";
    if (!p || !p->d_xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_pme_plan_create)");
    if (!xyzq || !box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyzq/box", "is NULL");
    if (n < 1 || n > p->capacity)
        return md_set_error(MD_ERR_RANGE, fn, 0, "n", "%d atoms: must be in 1..capacity (%d)", n, p->capacity);
    if (!(box[0] > 0.0 && box[1] > 0.0 && box[2] > 0.0 && isfinite(box[0]) && isfinite(box[1]) && isfinite(box[2])))
        return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edges must be finite and > 0 (got %g %g %g)", box[0], box[1], box[2]);
    MD_CUDA_TRY(cudaEventSynchronize(p->staged)); /* the previous upload's copies have left the staging */
    memcpy(p->h_xyzq, xyzq, (size_t)n * sizeof *xyzq);
    memcpy(p->h_box, box, 3 * sizeof(double));
    MD_CUDA_TRY(cudaMemcpyAsync(p->d_xyzq, p->h_xyzq, (size_t)n * sizeof *xyzq, cudaMemcpyHostToDevice, p->queue.stream));
    MD_CUDA_TRY(cudaMemcpyAsync(p->d_box, p->h_box, 3 * sizeof(double), cudaMemcpyHostToDevice, p->queue.stream));
    MD_CUDA_TRY(cudaEventRecord(p->staged, p->queue.stream));
    p->n = n;
    return MD_OK;
}

md_status md_cuda_pme_plan_enqueue_own(md_cuda_pme_plan *p) {
    const char *fn = "md_cuda_pme_plan_enqueue_own";
    md_fixed *out;
    if (!p || !p->d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_pme_plan_create)");
    if (p->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "no atoms uploaded (md_cuda_pme_plan_upload)");
    out = p->d_out;
    MD_CUDA_TRY(cudaMemsetAsync(out, 0, (3 * (size_t)p->capacity + 10) * sizeof(md_fixed), p->queue.stream));
    return md_cuda_pme_plan_enqueue(p, p->d_xyzq, p->n, p->d_box, out, p->capacity, out + 3 * (size_t)p->capacity,
                                    out + 3 * (size_t)p->capacity + 1);
}

md_status md_cuda_pme_plan_sync(md_cuda_pme_plan *p, double *force, md_energy *energy) {
    const char *fn = "md_cuda_pme_plan_sync";
    static const md_cuda_flag_text text[MD_CUDA_FLAG_COUNT] = {
        {"xyzq", "atom %llu has a non-finite coordinate or charge"}, {NULL, NULL}, {NULL, NULL}};
    const size_t cap = p ? (size_t)p->capacity : 0;
    md_status st;
    double f3[3];
    int i, d;
    if (!p || !p->d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan (md_cuda_pme_plan_create)");
    if (p->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "no atoms uploaded (md_cuda_pme_plan_upload)");
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_out, p->d_out, (3 * cap + 10) * sizeof(md_fixed), cudaMemcpyDeviceToHost,
                                p->queue.stream));
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_out + 3 * cap + 10, p->d_charge, 2 * sizeof(md_fixed), cudaMemcpyDeviceToHost,
                                p->queue.stream));
    if ((st = md_cuda_queue_sync(&p->queue, fn, text)) != MD_OK) return st;
    for (i = 0; i < 3 * p->n + 10; i++) {
        const md_fixed v = i < 3 * p->n ? p->h_out[(size_t)(i % 3) * cap + i / 3] : p->h_out[3 * cap + (i - 3 * p->n)];
        if (v == MD_FIXED_INVALID)
            return md_set_error(MD_ERR_RANGE, fn, 0, i < 3 * p->n ? "force" : "energy",
                                "a term overflows the fixed-point range (element %d)", i);
    }
    if (force)
        for (i = 0; i < p->n; i++) {
            for (d = 0; d < 3; d++) f3[d] = md_fixed_to_double(p->h_out[(size_t)d * cap + i], MD_FORCE_FIXED_SCALE);
            for (d = 0; d < 3; d++) force[3 * i + d] += f3[d];
        }
    if (energy) {
        energy->coul_recip = md_fixed_to_double(p->h_out[3 * cap], MD_ENERGY_FIXED_SCALE);
        energy->coul_self = -MD_COULOMB * p->params.alpha / sqrt(3.14159265358979323846) *
                            md_fixed_to_double(p->h_out[3 * cap + 11], MD_FORCE_FIXED_SCALE);
        for (d = 0; d < 9; d++) energy->virial[d] += md_fixed_to_double(p->h_out[3 * cap + 1 + d], MD_ENERGY_FIXED_SCALE);
    }
    return MD_OK;
}

md_status md_cuda_pme_plan_read(md_cuda_pme_plan *p, md_cuda_pme_buffer which, float *host) {
    const char *fn = "md_cuda_pme_plan_read";
    size_t count;
    if (!p || !p->d_real) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is not a plan");
    if (!host) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "host", "is NULL");
    if (which != MD_CUDA_PME_REAL && which != MD_CUDA_PME_COMPLEX)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "which", "unknown buffer %d", (int)which);
    count = which == MD_CUDA_PME_REAL ? (size_t)p->params.grid[0] * p->params.grid[1] * p->params.grid[2]
                                      : 2 * (size_t)p->params.grid[0] * p->params.grid[1] * p->nh;
    MD_CUDA_TRY(cudaStreamSynchronize(p->queue.stream));
    MD_CUDA_TRY(cudaMemcpy(host, which == MD_CUDA_PME_REAL ? (const void *)p->d_real : (const void *)p->d_complex,
                           count * sizeof(float), cudaMemcpyDeviceToHost));
    return MD_OK;
}

md_status md_cuda_pme(const md_pme_params *params, const md_float4 *xyzq, int n, const double box[3], double *force,
                      md_energy *energy) {
    md_cuda_pme_plan p;
    md_status st;
    if (!xyzq || !box) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_pme", 0, "xyzq/box", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_pme", 0, "n", "must be >= 1 (got %d)", n);
    if ((st = md_cuda_pme_plan_create(&p, params, box, n)) != MD_OK) return st;
    if ((st = md_cuda_pme_plan_upload(&p, xyzq, n, box)) == MD_OK && (st = md_cuda_pme_plan_enqueue_own(&p)) == MD_OK)
        st = md_cuda_pme_plan_sync(&p, force, energy);
    md_cuda_pme_plan_destroy(&p);
    return st;
}


/* ---- step ---- */
/* ---- step: bonded ---- */

/* The minimum-image float difference x_i - x_j in the box of edges L, inverses iL. */
static __device__ __forceinline__ void md__step_delta_f32(const float4 a, const float4 b, const float L[3],
                                                          const float iL[3], float d[3]) {
    d[0] = a.x - b.x;
    d[1] = a.y - b.y;
    d[2] = a.z - b.z;
#pragma unroll
    for (int k = 0; k < 3; k++) d[k] = fmaf(-L[k], rintf(d[k] * iL[k]), d[k]);
}

/* Sum N 64-bit fixed-point values v[k] over the block (wrap-around integer addition is exact and
 * associative, so the totals do not depend on the order) and add total k to *dst[k] from thread
 * k (a zero total or a NULL dst[k] adds nothing): one pair of barriers for all N, the N atomics
 * in parallel. All threads of the block must call it, once per kernel; N <= blockDim.x. */
template <int N>
static __device__ __forceinline__ void md__step_block_add_fixed(md_fixed (&v)[N], md_fixed *const (&dst)[N]) {
    __shared__ md_fixed part[N][MD_CUDA_STEP_BLOCK / 32];
    __shared__ md_fixed *s_dst[N];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < N; k++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
        if (lane == 0) part[k][warp] = v[k];
    }
    if (threadIdx.x == 0)
#pragma unroll
        for (int k = 0; k < N; k++) s_dst[k] = dst[k];
    __syncthreads();
    if (threadIdx.x < N) {
        md_fixed sum = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) sum += part[threadIdx.x][w];
        if (sum && s_dst[threadIdx.x]) atomicAdd(s_dst[threadIdx.x], sum);
    }
}

/* One thread per term: bonds [0, nbond), then angles. */
__global__ void __launch_bounds__(MD_CUDA_STEP_BLOCK)
    md__bonded_kernel(int nbond, const int2 *__restrict__ bond, const float2 *__restrict__ bondp, int nangle,
                      const int4 *__restrict__ angle, const float2 *__restrict__ anglep,
                      const float4 *__restrict__ xyzq, const int *__restrict__ rank, const double *__restrict__ box,
                      md_fixed *__restrict__ force, int stride, md_fixed *energy, md_fixed *virial) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const float FS = (float)MD_FORCE_FIXED_SCALE, ES = (float)MD_ENERGY_FIXED_SCALE;
    float L[3], iL[3], e = 0.0f, w[9];
    int k;
    for (k = 0; k < 3; k++) {
        L[k] = (float)box[k];
        iL[k] = (float)(1.0 / box[k]);
    }
    for (k = 0; k < 9; k++) w[k] = 0.0f;
    if (t < nbond) {
        const int2 b = bond[t];
        const int i = rank ? rank[b.x] : b.x, j = rank ? rank[b.y] : b.y;
        float d[3], f[3], fs;
        md__step_delta_f32(xyzq[i], xyzq[j], L, iL, d);
        fs = md_bond_f32(d, bondp[t].x, bondp[t].y, &e);
        for (k = 0; k < 3; k++) {
            md_fixed q;
            f[k] = fs * d[k];
            q = md_fixed_from_float(f[k], FS);
            md__red_add(&force[(size_t)k * stride + i], q);
            md__red_add(&force[(size_t)k * stride + j], (md_fixed)0 - q);
        }
        for (k = 0; k < 9; k++) w[k] = d[k / 3] * f[k % 3];
    } else if (t < nbond + nangle) {
        const int4 a4 = angle[t - nbond];
        const int i = rank ? rank[a4.x] : a4.x, j = rank ? rank[a4.y] : a4.y, l = rank ? rank[a4.z] : a4.z;
        const float4 xj = xyzq[j];
        float a[3], c[3], fi[3], fk[3];
        md__step_delta_f32(xyzq[i], xj, L, iL, a);
        md__step_delta_f32(xyzq[l], xj, L, iL, c);
        md_angle_f32(a, c, anglep[t - nbond].x, anglep[t - nbond].y, fi, fk, &e);
        for (k = 0; k < 3; k++) {
            const md_fixed qi = md_fixed_from_float(fi[k], FS), qk = md_fixed_from_float(fk[k], FS);
            md__red_add(&force[(size_t)k * stride + i], qi);
            md__red_add(&force[(size_t)k * stride + l], qk);
            md__red_add(&force[(size_t)k * stride + j], (md_fixed)0 - qi - qk);
        }
        for (k = 0; k < 9; k++) w[k] = a[k / 3] * fi[k % 3] + c[k / 3] * fk[k % 3];
    }
    if (energy || virial) { /* the energy and the virial's nine terms in one block sum */
        md_fixed v[10];
        md_fixed *const dst[10] = {energy,           virial,           virial ? virial + 1 : NULL,
                                   virial ? virial + 2 : NULL, virial ? virial + 3 : NULL, virial ? virial + 4 : NULL,
                                   virial ? virial + 5 : NULL, virial ? virial + 6 : NULL, virial ? virial + 7 : NULL,
                                   virial ? virial + 8 : NULL};
        v[0] = md_fixed_from_float(e, ES);
        for (k = 0; k < 9; k++) v[k + 1] = md_fixed_from_float(w[k], ES);
        md__step_block_add_fixed<10>(v, dst);
    }
}

void md_cuda_bonded_plan_destroy(md_cuda_bonded_plan *p) {
    if (!p) return;
    if (p->d_bond || p->d_angle) (void)cudaDeviceSynchronize();
    md_cuda_free(p->d_bond);
    md_cuda_free(p->d_bondp);
    md_cuda_free(p->d_angle);
    md_cuda_free(p->d_anglep);
    memset(p, 0, sizeof *p);
}

md_status md_cuda_bonded_plan_create(md_cuda_bonded_plan *p, const md_bonded *b) {
    const char *fn = "md_cuda_bonded_plan_create";
    md_cuda_bonded_plan q;
    md_status st = MD_OK;
    int2 *hb = NULL;
    float2 *hbp = NULL, *hap = NULL;
    int4 *ha = NULL;
    int k;
    if (!p || !b) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p/b", "is NULL");
    memset(&q, 0, sizeof q);
    memset(p, 0, sizeof *p);
    q.nbond = b->nbond;
    q.nangle = b->nangle;
    hb = (int2 *)md_alloc_array((size_t)b->nbond + 1, sizeof(int2));
    hbp = (float2 *)md_alloc_array((size_t)b->nbond + 1, sizeof(float2));
    ha = (int4 *)md_alloc_array((size_t)b->nangle + 1, sizeof(int4));
    hap = (float2 *)md_alloc_array((size_t)b->nangle + 1, sizeof(float2));
    if (!hb || !hbp || !ha || !hap) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "b", "cannot stage %d bonds and %d angles", b->nbond, b->nangle);
        goto done;
    }
    for (k = 0; k < b->nbond; k++) {
        hb[k] = make_int2(b->bond[2 * k], b->bond[2 * k + 1]);
        hbp[k] = make_float2((float)b->bond_r0[k], (float)b->bond_k[k]);
    }
    for (k = 0; k < b->nangle; k++) {
        ha[k] = make_int4(b->angle[3 * k], b->angle[3 * k + 1], b->angle[3 * k + 2], 0);
        hap[k] = make_float2((float)b->angle_theta0[k], (float)b->angle_k[k]);
    }
    if ((st = md_cuda_alloc((void **)&q.d_bond, (size_t)b->nbond + 1, sizeof(int2), "bonds")) != MD_OK ||
        (st = md_cuda_alloc((void **)&q.d_bondp, (size_t)b->nbond + 1, sizeof(float2), "bond parameters")) != MD_OK ||
        (st = md_cuda_alloc((void **)&q.d_angle, (size_t)b->nangle + 1, sizeof(int4), "angles")) != MD_OK ||
        (st = md_cuda_alloc((void **)&q.d_anglep, (size_t)b->nangle + 1, sizeof(float2), "angle parameters")) != MD_OK)
        goto done;
    {
        cudaError_t e;
        if ((e = cudaMemcpy(q.d_bond, hb, ((size_t)b->nbond + 1) * sizeof(int2), cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = cudaMemcpy(q.d_bondp, hbp, ((size_t)b->nbond + 1) * sizeof(float2), cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = cudaMemcpy(q.d_angle, ha, ((size_t)b->nangle + 1) * sizeof(int4), cudaMemcpyHostToDevice)) != cudaSuccess ||
            (e = cudaMemcpy(q.d_anglep, hap, ((size_t)b->nangle + 1) * sizeof(float2), cudaMemcpyHostToDevice)) != cudaSuccess)
            st = md_cuda_error(e, "cudaMemcpy(bonded terms)", __FILE__, __LINE__);
    }
done:
    md_free(hb);
    md_free(hbp);
    md_free(ha);
    md_free(hap);
    if (st != MD_OK) {
        md_cuda_bonded_plan_destroy(&q);
        return st;
    }
    *p = q;
    return MD_OK;
}

md_status md_cuda_bonded_enqueue(const md_cuda_bonded_plan *p, cudaStream_t stream, const float4 *d_xyzq,
                                 const int *d_rank, const double *d_box, md_fixed *d_force, int stride,
                                 md_fixed *d_energy, md_fixed *d_virial) {
    const int total = p ? p->nbond + p->nangle : 0;
    if (!p || !d_xyzq || !d_box || !d_force)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_bonded_enqueue", 0, "p/d_xyzq/d_box/d_force", "is NULL");
    if (total == 0) return MD_OK;
    MD_CUDA_LAUNCH(md__bonded_kernel, (total + MD_CUDA_STEP_BLOCK - 1) / MD_CUDA_STEP_BLOCK, MD_CUDA_STEP_BLOCK, 0, stream,
                   p->nbond, (const int2 *)p->d_bond, (const float2 *)p->d_bondp, p->nangle, (const int4 *)p->d_angle,
                   (const float2 *)p->d_anglep, d_xyzq, d_rank, d_box, d_force, stride, d_energy, d_virial);
    return MD_OK;
}

/* ---- step: the integrate kernel ---- */

/* What one launch of the integrate kernel does. */
typedef struct md__step_args {
    const int4 *water;
    const int *cstart, *catom, *kstart;
    const int2 *kpair;
    const double *klen;
    const int *single;
    int nwater, ncluster, nsingle;
    int water3; /* 1: a water on three lanes (md__step_water3), 0: on one thread */
    double mo, mh, doh, dhh;
    double wo, wh; /* 1 / mo, 1 / mh: md_settle_velocities_inv */
    double *x, *v;
    const double *inv_mass;
    const float *charge;
    double *vcom;
    md_fixed *pacc;
    unsigned int *done;
    unsigned long long *flags;
    float4 *xyzq;
    float4 *vel;
    md_fixed *force;
    int stride;
    const int *rank;
    const double *box;
    long long *step;
    md_fixed *ekin;        /* MD_CUDA_E_KINETIC word, or NULL: no kinetic energy */
    int kinetic_only;      /* 1: only the kinetic energy of v + dt/2 F/m (no integration) */
    int langevin;
    int com;               /* 1: subtract vcom at the start, accumulate momentum at the end */
    double dt, vscale, kT, maxd2, tol;
    int max_iter;
    uint64_t seed;
    double total_mass;
    /* the nonbonded plan's displacement check, done here (MD_CUDA_NB_CHECKED); nb_ref NULL: not */
    const float4 *nb_ref;
    long long *nb_ctl;
    md_cuda_cell_grid *nb_grid;
    float nb_half2;
} md__step_args;

static __device__ __forceinline__ void md__step_image(double d[3], const double box[3]) {
#pragma unroll
    for (int k = 0; k < 3; k++) d[k] -= box[k] * rint(d[k] / box[k]);
}

/* SHAKE on one cluster's relative positions xn (K slots) against the reference r. Returns 1 when
 * it does not converge or a constraint turned by more than 90 degrees. */
template <int K>
static __device__ int md__step_shake(const md__step_args &A, int c, const double *r, double *xn, const double *w) {
    const int k0 = A.kstart[c], k1 = A.kstart[c + 1];
    for (int it = 0; it < A.max_iter; it++) {
        int done = 1;
        for (int q = k0; q < k1; q++) {
            const int2 p = A.kpair[q];
            const double L2 = A.klen[q] * A.klen[q];
            double d[3], rr[3], d2 = 0.0, rd = 0.0, diff, g;
            for (int a = 0; a < 3; a++) {
                d[a] = xn[3 * p.x + a] - xn[3 * p.y + a];
                rr[a] = r[3 * p.x + a] - r[3 * p.y + a];
                d2 += d[a] * d[a];
                rd += rr[a] * d[a];
            }
            diff = L2 - d2;
            if (fabs(diff) <= 2.0 * A.tol * L2) continue;
            if (!(rd > 1e-6 * L2)) return 1;
            g = diff / (2.0 * (w[p.x] + w[p.y]) * rd);
            for (int a = 0; a < 3; a++) {
                xn[3 * p.x + a] += g * w[p.x] * rr[a];
                xn[3 * p.y + a] -= g * w[p.y] * rr[a];
            }
            done = 0;
        }
        if (done) return 0;
    }
    return 1;
}

/* RATTLE's velocity sweeps on one cluster at relative positions r. */
template <int K>
static __device__ int md__step_rattle(const md__step_args &A, int c, const double *r, double *v, const double *w) {
    const int k0 = A.kstart[c], k1 = A.kstart[c + 1];
    for (int it = 0; it < A.max_iter; it++) {
        int done = 1;
        for (int q = k0; q < k1; q++) {
            const int2 p = A.kpair[q];
            double d[3], dot = 0.0, r2 = 0.0, g;
            for (int a = 0; a < 3; a++) {
                d[a] = r[3 * p.x + a] - r[3 * p.y + a];
                dot += d[a] * (v[3 * p.x + a] - v[3 * p.y + a]);
                r2 += d[a] * d[a];
            }
            if (fabs(dot) <= A.tol * A.klen[q] * A.klen[q]) continue;
            g = dot / ((w[p.x] + w[p.y]) * r2);
            for (int a = 0; a < 3; a++) {
                v[3 * p.x + a] -= g * w[p.x] * d[a];
                v[3 * p.y + a] += g * w[p.y] * d[a];
            }
            done = 0;
        }
        if (done) return 0;
    }
    return 1;
}

/* Velocity constraints of a unit: KIND 0 a water (SETTLE), 1 a cluster (RATTLE), 2 none. */
template <int K, int KIND>
static __device__ __forceinline__ int md__step_vconstrain(const md__step_args &A, int c, const double *x, double *v,
                                                          const double *w) {
    if (KIND == 0) {
        const double w3[3] = {A.wo, A.wh, A.wh};
        return md_settle_velocities_inv(x, v, w3);
    }
    if (KIND == 1) return md__step_rattle<K>(A, c, x, v, w);
    return 0;
}

/* The box as the integrate kernel uses it, made once per thread at its start: the edges, their
 * reciprocals (one double division per axis, where each minimum image and mirror update
 * divided again) and the float box of the displacement check. */
typedef struct md__step_box {
    double l[3], inv[3];
    md_nb_box_f32 f;
} md__step_box;

static __device__ __forceinline__ md__step_box md__step_box_make(const double *box) {
    md__step_box B;
#pragma unroll
    for (int a = 0; a < 3; a++) {
        B.l[a] = box[a];
        B.inv[a] = 1.0 / B.l[a];
    }
    B.f = md_nb_box_f32_make(B.l);
    return B;
}

/* What md__step_store reads of an atom besides its new state: its mirror as it was, its list
 * reference position and its charge. The water paths load them with the atom's other inputs, so
 * their latency overlaps the step's arithmetic instead of stalling its end (Nsight Compute,
 * 23,568 atoms, H200: the mirror's load waited at 5% of the kernel's stall samples). */
typedef struct md__step_pre {
    float4 prev, ref;
    float charge;
} md__step_pre;

static __device__ __forceinline__ md__step_pre md__step_preload(const md__step_args &A, int at, int slot) {
    md__step_pre p;
    p.prev = A.xyzq[slot];
    p.ref = A.nb_ref ? A.nb_ref[slot] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    p.charge = A.charge[at];
    return p;
}

/* The end of one atom's step, in both water layouts and md__step_unit: store the new position
 * @p wr and velocity @p v (caller order), move the float4 mirror continuously, ask the
 * nonbonded plan for a list build when the mirror is more than half the buffer from its
 * reference (the check md__nb_disp_kernel would make, on the same floats, one launch fewer),
 * zero the atom's forces for the next evaluation; returns the error bits of its displacement m2
 * (1 runaway) and velocity (2 non-finite). */
static __device__ __forceinline__ int md__step_store(const md__step_args &A, int at, int slot, const double wr[3],
                                                     const double v[3], double w, double m2, const md__step_box &B,
                                                     const md__step_pre &pre) {
    int bad = 0;
    float4 q;
#pragma unroll
    for (int a = 0; a < 3; a++) {
        A.x[3 * (size_t)at + a] = wr[a];
        A.v[3 * (size_t)at + a] = v[a];
    }
    if (!(m2 <= A.maxd2)) bad |= 1;
    if (!isfinite(m2) || !isfinite(v[0] + v[1] + v[2])) bad |= 2;
    /* the previous mirror: move it continuously (md_cuda_mirror_coord) */
    q.x = md__mirror_coord(wr[0], pre.prev.x, B.l[0], B.inv[0]);
    q.y = md__mirror_coord(wr[1], pre.prev.y, B.l[1], B.inv[1]);
    q.z = md__mirror_coord(wr[2], pre.prev.z, B.l[2], B.inv[2]);
    q.w = pre.charge;
    A.xyzq[slot] = q;
    if (A.nb_ref && md__nb_moved(q, pre.ref, B.f, A.nb_half2)) A.nb_ctl[MD__NB_CTL_REBUILD] = 1;
    A.vel[slot] = make_float4((float)v[0], (float)v[1], (float)v[2], (float)w);
#pragma unroll
    for (int a = 0; a < 3; a++) A.force[(size_t)a * A.stride + slot] = 0;
    return bad;
}

/* One unit of K slots (k atoms used; k == K for waters and free atoms): a water on one thread
 * (KIND 0, SETTLE), a SHAKE cluster (KIND 1) or a free atom (KIND 2); the whole step, or only its
 * kinetic energy (A.kinetic_only). Accumulates the momentum into P and the kinetic energy into ke;
 * returns the error bits (1 runaway, 2 non-finite, 4 constraints failed). */
template <int K, int KIND>
static __device__ __forceinline__ int md__step_unit(const md__step_args &A, const int *atoms, int k, int c, long long step,
                                                    const md__step_box &B, const double vc[3], double P[3], double *ke) {
    double x[3 * K], v[3 * K], f[3 * K], w[K], org[3];
    int slot[K], bad = 0;
#pragma unroll
    for (int i = 0; i < K; i++) {
        if (i >= k) break;
        const int at = atoms[i];
        slot[i] = A.rank ? A.rank[at] : at;
        w[i] = A.inv_mass[at];
#pragma unroll
        for (int a = 0; a < 3; a++) {
            v[3 * i + a] = A.v[3 * (size_t)at + a] - vc[a];
            f[3 * i + a] = md_fixed_to_double(A.force[(size_t)a * A.stride + slot[i]], MD_FORCE_FIXED_SCALE);
            x[3 * i + a] = A.x[3 * (size_t)at + a];
        }
    }
#pragma unroll
    for (int a = 0; a < 3; a++) org[a] = x[a];
#pragma unroll
    for (int i = 0; i < K; i++) { /* positions relative to the first atom, minimum images */
        if (i >= k) break;
#pragma unroll
        for (int a = 0; a < 3; a++) {
            double d = x[3 * i + a] - org[a];
            x[3 * i + a] = d - B.l[a] * rint(d * B.inv[a]);
        }
    }
    if (A.ekin) { /* kinetic energy at time t: v + dt/2 F/m, constrained */
        double u[3 * K];
#pragma unroll
        for (int j = 0; j < 3 * K; j++)
            if (j < 3 * k) u[j] = v[j] + 0.5 * A.dt * f[j] * w[j / 3];
        bad |= md__step_vconstrain<K, KIND>(A, c, x, u, w) ? 4 : 0;
#pragma unroll
        for (int j = 0; j < 3 * K; j++)
            if (j < 3 * k) *ke += 0.5 * u[j] * u[j] / w[j / 3];
    }
    if (A.kinetic_only) return bad;
    {
        double D[3 * K], xn[3 * K];
#pragma unroll
        for (int j = 0; j < 3 * K; j++)
            if (j < 3 * k) v[j] += A.dt * f[j] * w[j / 3];
        if (A.langevin) {
            /* The normals first, in a loop kept rolled: one copy of Philox and Box-Muller in the
             * instruction stream instead of K. The kernel waits on instruction fetch (Nsight
             * Compute: 8 of 14.7 cycles per instruction); measured on an H100, 41.8 -> 38.0 us
             * under Nsight Compute's locked clocks, and no change of the step beyond its noise at
             * full clock (chapter 08's --race, same session). */
            double R[3 * K];
#pragma unroll 1
            for (int i = 0; i < k; i++) md_langevin_normals(A.seed, step, atoms[i], R + 3 * i);
            bad |= md__step_vconstrain<K, KIND>(A, c, x, v, w) ? 4 : 0;
#pragma unroll
            for (int i = 0; i < K; i++) {
                if (i >= k) break;
                const double sd = sqrt((1.0 - A.vscale * A.vscale) * A.kT * w[i]);
#pragma unroll
                for (int a = 0; a < 3; a++) {
                    const int j = 3 * i + a;
                    D[j] = 0.5 * A.dt * v[j];
                    v[j] = A.vscale * v[j] + sd * R[j];
                    D[j] += 0.5 * A.dt * v[j];
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < 3 * K; j++)
                if (j < 3 * k) D[j] = A.dt * v[j];
        }
#pragma unroll
        for (int j = 0; j < 3 * K; j++)
            if (j < 3 * k) xn[j] = x[j] + D[j];
        if (KIND == 0) bad |= md_settle_water(x, xn, A.mo, A.mh, A.doh, A.dhh) ? 4 : 0;
        if (KIND == 1) bad |= md__step_shake<K>(A, c, x, xn, w) ? 4 : 0;
#pragma unroll
        for (int i = 0; i < K; i++) {
            if (i >= k) break;
            double m2 = 0.0, wr[3];
#pragma unroll
            for (int a = 0; a < 3; a++) {
                const int j = 3 * i + a;
                const double dc = xn[j] - x[j];
                v[j] += (dc - D[j]) / A.dt;
                m2 += dc * dc;
                wr[a] = org[a] + xn[j];
                P[a] += v[j] / w[i];
            }
            bad |= md__step_store(A, atoms[i], slot[i], wr, v + 3 * i, w[i], m2, B, md__step_preload(A, atoms[i], slot[i]));
        }
    }
    return bad;
}

/** @cond INTERNAL */
#define MD__STEP_WPW 10 /* waters per warp in the integrate kernel: three lanes each, lanes 30, 31 idle */
/** @endcond */

/* The nine doubles a[3] of the three lanes base, base + 1, base + 2 (every lane of the warp calls;
 * a lane index past 31 wraps, as a shuffle's would: only the idle lanes 30 and 31 ask for one).
 * Through the warp's slice of a shared-memory buffer: each lane stores its three doubles and
 * loads the nine of its water. A double shuffle is two SHFL plus the divergence check the
 * compiler puts around them; Nsight Compute on the integrate kernel (23,568 atoms, H100) counted
 * the shuffles at 21% of its executed instructions, in a kernel that waits on instruction fetch
 * 39% of its stall samples. The same doubles arrive, so every result keeps its bits. */
static __device__ __forceinline__ void md__step_gather9(const double a[3], int base, double out[9]) {
    __shared__ double s_g[MD_CUDA_STEP_BLOCK][3];
    const int w0 = threadIdx.x & ~31;
    __syncwarp(); /* every lane has read the previous gather */
#pragma unroll
    for (int c = 0; c < 3; c++) s_g[threadIdx.x][c] = a[c];
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 3; i++)
#pragma unroll
        for (int c = 0; c < 3; c++) out[3 * i + c] = s_g[w0 + ((base + i) & 31)][c];
}

/* One water on three lanes: lane base + r holds atom r (O, H1, H2). The per-atom work (loads,
 * kick, Langevin normals, the new positions' bookkeeping, stores) is each lane's own; SETTLE
 * (positions and velocities) needs the three atoms, so each lane gathers them with shuffles
 * and solves the same water (the same instructions on the same inputs: the same bits in the
 * three lanes, and those of md__step_unit<3, 0>, one thread per water). The water's momentum
 * and kinetic energy are summed on its first lane in md__step_unit's order, so the two layouts
 * give the same bits (gpu_step's reproducible test). Three lanes instead of one cut the chain a
 * warp runs (the kernel is latency bound: a few warps per SM). act 0: a lane with no water,
 * which still takes part in the shuffles. Every lane of the warp calls it. Returns the error
 * bits of md__step_unit, for this lane's atom and the water. */
static __device__ int md__step_water3(const md__step_args &A, int act, int at, int r, int base, long long step,
                                      const md__step_box &B, const double vc[3], double P[3], double *ke) {
    const double wm[3] = {A.wo, A.wh, A.wh};
    double xo[3], vo[3], fo[3], org[3], x[9], y[9], D[3], R[3], w = 1.0;
    md__step_pre pre;
    int slot = 0, bad = 0, a;
#pragma unroll
    for (a = 0; a < 3; a++) xo[a] = vo[a] = fo[a] = 0.0;
    pre.prev = pre.ref = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    pre.charge = 0.0f;
    if (act) {
        slot = A.rank ? A.rank[at] : at;
        w = A.inv_mass[at];
#pragma unroll
        for (a = 0; a < 3; a++) {
            vo[a] = A.v[3 * (size_t)at + a] - vc[a];
            fo[a] = md_fixed_to_double(A.force[(size_t)a * A.stride + slot], MD_FORCE_FIXED_SCALE);
            xo[a] = A.x[3 * (size_t)at + a];
        }
        if (!A.kinetic_only) pre = md__step_preload(A, at, slot);
    }
    /* The normals while the loads above are in flight: they need only (seed, step, atom). */
    if (A.langevin && !A.kinetic_only) md_langevin_normals(A.seed, step, act ? at : 0, R);
#pragma unroll
    for (a = 0; a < 3; a++) { /* relative to the oxygen, minimum image */
        double d;
        org[a] = __shfl_sync(0xffffffffu, xo[a], base);
        d = xo[a] - org[a];
        xo[a] = d - B.l[a] * rint(d * B.inv[a]);
    }
    md__step_gather9(xo, base, x);
    if (A.ekin) { /* kinetic energy at time t: v + dt/2 F/m, constrained */
        double u[3];
#pragma unroll
        for (a = 0; a < 3; a++) u[a] = vo[a] + 0.5 * A.dt * fo[a] * w;
        md__step_gather9(u, base, y);
        bad |= md_settle_velocities_inv(x, y, wm) ? 4 : 0;
        { /* the water's nine terms on its first lane, in md__step_unit's order: the same bits */
            double wv[3];
#pragma unroll
            for (a = 0; a < 3; a++) wv[a] = __shfl_sync(0xffffffffu, w, base + a);
            if (act && r == 0)
#pragma unroll
                for (a = 0; a < 9; a++) *ke += 0.5 * y[a] * y[a] / wv[a / 3];
        }
    }
    if (A.kinetic_only) return act ? bad : 0;
#pragma unroll
    for (a = 0; a < 3; a++) vo[a] += A.dt * fo[a] * w;
    if (A.langevin) {
        const double sd = sqrt((1.0 - A.vscale * A.vscale) * A.kT * w);
        md__step_gather9(vo, base, y);
        bad |= md_settle_velocities_inv(x, y, wm) ? 4 : 0;
#pragma unroll
        for (a = 0; a < 3; a++) {
            vo[a] = y[3 * r + a];
            D[a] = 0.5 * A.dt * vo[a];
            vo[a] = A.vscale * vo[a] + sd * R[a];
            D[a] += 0.5 * A.dt * vo[a];
        }
    } else {
#pragma unroll
        for (a = 0; a < 3; a++) D[a] = A.dt * vo[a];
    }
    {
        double xn[3];
#pragma unroll
        for (a = 0; a < 3; a++) xn[a] = xo[a] + D[a];
        md__step_gather9(xn, base, y);
    }
    bad |= md_settle_water(x, y, A.mo, A.mh, A.doh, A.dhh) ? 4 : 0;
    {
        double m2 = 0.0, wr[3], p[3];
#pragma unroll
        for (a = 0; a < 3; a++) {
            const double dc = y[3 * r + a] - xo[a];
            vo[a] += (dc - D[a]) / A.dt;
            m2 += dc * dc;
            wr[a] = org[a] + y[3 * r + a];
            p[a] = vo[a] / w;
        }
#pragma unroll
        for (a = 0; a < 3; a++) { /* the momentum of the water on its first lane, atoms in order */
            const double p1 = __shfl_sync(0xffffffffu, p[a], base + 1), p2 = __shfl_sync(0xffffffffu, p[a], base + 2);
            if (act && r == 0) {
                P[a] += p[a];
                P[a] += p1;
                P[a] += p2;
            }
        }
        if (!act) return 0;
        bad |= md__step_store(A, at, slot, wr, vo, w, m2, B, pre);
    }
    return bad;
}

/* Waters first, then one thread per other unit (clusters, then free atoms); see the section's
 * manual. A.water3: warps [0, ceil(nwater / MD__STEP_WPW)) take the waters, three lanes each
 * (md__step_water3); else one thread per water (md__step_unit). WATERS 1 and 2: only waters
 * (no clusters, no free atoms; md__step_kernel picks them), on three lanes (1, A.water3 set) or
 * one thread (2) each, every other path's code compiled out. The general kernel holds SHAKE
 * clusters of up to MD_CUDA_STEP_MAX_CLUSTER atoms in registers, and a kernel's registers are
 * those of its largest path (ptxas: 234 registers and 720 bytes of stack, 187 and 200 without);
 * and the kernel is a latency-bound chain that waits on instruction fetch (Nsight Compute,
 * 23,568 atoms, H200: 45% of its stall samples), so the code of a path it does not run is not
 * carried either. */
template <int WATERS>
__global__ void __launch_bounds__(MD_CUDA_STEP_BLOCK) md__step_integrate_kernel(md__step_args A) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x, warp = g >> 5, lane = g & 31;
    const int w3 = WATERS == 1 || (WATERS == 0 && A.water3);
    const int wwarps = w3 ? (A.nwater + MD__STEP_WPW - 1) / MD__STEP_WPW : 0;
    const int u = w3 ? A.nwater + (g - 32 * wwarps) : g; /* a unit on one thread */
    const long long step = *A.step;
    const md__step_box B = md__step_box_make(A.box);
    double vc[3] = {0.0, 0.0, 0.0}, P[3] = {0.0, 0.0, 0.0}, ke = 0.0;
    int bad = 0, first = 0;
    if (A.com)
        for (int a = 0; a < 3; a++) vc[a] = A.vcom[a];
    if (WATERS != 2 && warp < wwarps) { /* uniform over the warp: the shuffles need every lane */
        const int q = lane / 3, r = lane - 3 * q, wi = warp * MD__STEP_WPW + q;
        const int act = q < MD__STEP_WPW && wi < A.nwater;
        const int4 w4 = act ? A.water[wi] : make_int4(0, 0, 0, 0);
        bad = md__step_water3(A, act, r == 0 ? w4.x : (r == 1 ? w4.y : w4.z), r, 3 * q, step, B, vc, P, &ke);
        /* the water's error bits to its first lane, which reports them as one thread per water did */
        bad |= __shfl_down_sync(0xffffffffu, bad, 1) | __shfl_down_sync(0xffffffffu, bad, 2);
        if (r != 0) bad = 0;
        first = w4.x;
    } else if (WATERS != 1 && !w3 && u < A.nwater) {
        const int4 w4 = A.water[u];
        const int atoms[3] = {w4.x, w4.y, w4.z};
        first = w4.x;
        bad = md__step_unit<3, 0>(A, atoms, 3, 0, step, B, vc, P, &ke);
    } else if (WATERS) {
        /* no other units: the last block's spare threads */
    } else if (u < A.nwater + A.ncluster) {
        const int c = u - A.nwater, k = A.cstart[c + 1] - A.cstart[c];
        int atoms[MD_CUDA_STEP_MAX_CLUSTER];
        for (int i = 0; i < k; i++) atoms[i] = A.catom[A.cstart[c] + i];
        first = atoms[0];
        bad = md__step_unit<MD_CUDA_STEP_MAX_CLUSTER, 1>(A, atoms, k, c, step, B, vc, P, &ke);
    } else if (u < A.nwater + A.ncluster + A.nsingle) {
        const int atoms[1] = {A.single[u - A.nwater - A.ncluster]};
        first = atoms[0];
        bad = md__step_unit<1, 2>(A, atoms, 1, 0, step, B, vc, P, &ke);
    }
    if (bad & 1) md_cuda_flag_raise(A.flags, MD_CUDA_FLAG_RANGE, (unsigned long long)first);
    if (bad & 2) md_cuda_flag_raise(A.flags, MD_CUDA_FLAG_NONFINITE, (unsigned long long)first);
    if (bad & 4) md_cuda_flag_raise(A.flags, MD_CUDA_FLAG_OVERFLOW, (unsigned long long)first + 1);
    /* The block's kinetic energy and momentum in one block sum (every thread takes part), then the
     * last block finishes the step. The end of this kernel is its critical path (every block
     * resident at once, a few warps per SM): Nsight Compute on the 23,568-atom step (H100) found
     * the tail - three block sums of two barriers each, thread 0's __threadfence() (MEMBAR.SC,
     * the strongest fence), the ticket, then the last block's three atomicExch one after another
     * - at about a sixth of the kernel's time (28.6-29.6 -> 23.8-24.4 us without it, a
     * timing-only variant). Now: one block sum whose atomics run in parallel (threads 0-3), the ticket as an
     * acquire-release atomic (one fence.acq_rel by thread 0: the release covers the block's
     * atomics through the barrier before it, the acquire the last block's reads through the
     * barrier after it), and the last block's three exchanges on three threads. */
    {
        md_fixed v[4] = {A.ekin ? (md_fixed)(long long)llrint(ke * MD_ENERGY_FIXED_SCALE) : 0,
                         (md_fixed)(long long)llrint(P[0] * MD_FORCE_FIXED_SCALE),
                         (md_fixed)(long long)llrint(P[1] * MD_FORCE_FIXED_SCALE),
                         (md_fixed)(long long)llrint(P[2] * MD_FORCE_FIXED_SCALE)};
        const int mom = A.com && !A.kinetic_only;
        md_fixed *const dst[4] = {A.ekin, mom ? &A.pacc[0] : NULL, mom ? &A.pacc[1] : NULL, mom ? &A.pacc[2] : NULL};
        md__step_block_add_fixed<4>(v, dst);
    }
    if (A.kinetic_only) return;
    __shared__ int s_last;
    __syncthreads(); /* the block's atomics are issued: thread 0's release covers them */
    if (threadIdx.x == 0) {
        unsigned int ticket;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(ticket) : "l"(A.done) : "memory");
        s_last = ticket == gridDim.x - 1; /* every other block has added its sums */
    }
    __syncthreads();
    if (!s_last) return;
    if (A.com && threadIdx.x < 3) {
        const md_fixed p = atomicExch(&A.pacc[threadIdx.x], (md_fixed)0);
        A.vcom[threadIdx.x] = md_fixed_to_double(p, MD_FORCE_FIXED_SCALE) / A.total_mass;
    }
    if (threadIdx.x == 0) {
        *A.done = 0u;
        *A.step = step + 1;
        if (A.nb_ref) md__nb_box_check(A.box, A.nb_ctl, A.nb_grid);
    }
}

/* Positions (wrapped floats) and velocities of the state from the double arrays; zero forces. */
__global__ void md__step_mirror_kernel(int n, const double *__restrict__ x, const double *__restrict__ v,
                                       const double *__restrict__ inv_mass, const float *__restrict__ charge,
                                       const int *__restrict__ rank, const double *__restrict__ box, float4 *xyzq,
                                       float4 *vel) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 q;
    double wr[3];
    if (i >= n) return;
    for (int a = 0; a < 3; a++) {
        wr[a] = x[3 * (size_t)i + a];
        wr[a] -= box[a] * floor(wr[a] / box[a]);
    }
    q = make_float4((float)wr[0], (float)wr[1], (float)wr[2], charge[i]);
    if (q.x >= (float)box[0]) q.x = 0.0f;
    if (q.y >= (float)box[1]) q.y = 0.0f;
    if (q.z >= (float)box[2]) q.z = 0.0f;
    xyzq[rank[i]] = q;
    vel[rank[i]] = make_float4((float)v[3 * (size_t)i], (float)v[3 * (size_t)i + 1], (float)v[3 * (size_t)i + 2],
                               (float)inv_mass[i]);
}

/* The barostat's move: scale every molecule's centre (mean of its atoms, minimum images from
 * its first atom) by vcom[3] about the origin; the box by the same factor (thread 0 of block 0
 * writes it after... the caller writes the new box separately). */
__global__ void md__step_scale_kernel(int nmol, const int *__restrict__ mstart, const int *__restrict__ matom,
                                      double *x, const double *__restrict__ box, const double *__restrict__ scale) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    double c[3] = {0.0, 0.0, 0.0}, o[3];
    int first, a, j;
    if (m >= nmol) return;
    first = matom[mstart[m]];
    for (a = 0; a < 3; a++) o[a] = x[3 * (size_t)first + a];
    for (j = mstart[m]; j < mstart[m + 1]; j++) {
        double d[3];
        for (a = 0; a < 3; a++) d[a] = x[3 * (size_t)matom[j] + a] - o[a];
        md__step_image(d, box);
        for (a = 0; a < 3; a++) c[a] += d[a];
    }
    for (a = 0; a < 3; a++) c[a] = o[a] + c[a] / (mstart[m + 1] - mstart[m]);
    for (j = mstart[m]; j < mstart[m + 1]; j++)
        for (a = 0; a < 3; a++) x[3 * (size_t)matom[j] + a] += (*scale - 1.0) * c[a];
}

/* ---- step: the run ---- */

static void md__step_plan_free(md_cuda_step_plan *p) {
    md_cuda_free(p->d_water);
    md_cuda_free(p->d_cstart);
    md_cuda_free(p->d_catom);
    md_cuda_free(p->d_kstart);
    md_cuda_free(p->d_kpair);
    md_cuda_free(p->d_klen);
    md_cuda_free(p->d_single);
    md_cuda_free(p->d_mstart);
    md_cuda_free(p->d_matom);
    md_cuda_free(p->d_x);
    md_cuda_free(p->d_v);
    md_cuda_free(p->d_inv_mass);
    md_cuda_free(p->d_charge);
    md_cuda_free(p->d_x_save);
    md_cuda_free(p->d_vcom);
    md_cuda_free(p->d_pacc);
    md_cuda_free(p->d_done);
    md_cuda_free(p->d_flags);
    md_cuda_free_pinned(p->h_flags);
    md_cuda_free_pinned(p->h_stage);
    memset(p, 0, sizeof *p);
}

void md_cuda_sim_destroy(md_cuda_sim *s) {
    if (!s) return;
    if (s->state.q.stream) (void)cudaStreamSynchronize(s->state.q.stream);
    if (s->use_pme && s->pme.queue.stream) (void)cudaStreamSynchronize(s->pme.queue.stream);
    if (s->ev_fork) (void)cudaEventDestroy(s->ev_fork);
    if (s->ev_join) (void)cudaEventDestroy(s->ev_join);
    md__step_plan_free(&s->step);
    md_cuda_bonded_plan_destroy(&s->bonded);
    if (s->use_pme) md_cuda_pme_plan_destroy(&s->pme);
    md_cuda_nb_plan_destroy(&s->nb);
    md_cuda_state_destroy(&s->state);
    md_cuda_free_pinned(s->h_box);
    memset(s, 0, sizeof *s);
}

/* Upload a host array (synchronous; create and restore only). */
static md_status md__step_put(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return MD_OK;
    MD_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return MD_OK;
}

/* The units of the integrate kernel from md.h's constraints: waters, clusters of SHAKE
 * constraints (connected components, atoms in ascending order), the remaining atoms. */
static md_status md__step_units(md_cuda_step_plan *p, const md_constraints *c, int n) {
    const char *fn = "md_cuda_sim_create";
    int *comp = NULL, *head = NULL, *cnt = NULL, *catom = NULL, *cstart = NULL, *kstart = NULL, *single = NULL;
    int *local = NULL, *order = NULL;
    int2 *kpair = NULL;
    double *klen = NULL;
    int4 *wat = NULL;
    int i, k, nc = 0, ns = 0;
    md_status st = MD_OK;
    comp = (int *)md_alloc_array((size_t)n, sizeof(int));
    head = (int *)md_alloc_array((size_t)n, sizeof(int));
    cnt = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    local = (int *)md_alloc_array((size_t)n, sizeof(int));
    order = (int *)md_alloc_array((size_t)n, sizeof(int));
    wat = (int4 *)md_alloc_array((size_t)c->nwater + 1, sizeof(int4));
    if (!comp || !head || !cnt || !local || !order || !wat) goto oom;
    for (i = 0; i < n; i++) comp[i] = i;
    for (k = 0; k < c->npair; k++) { /* union-find, roots the lowest atom */
        int a = c->pair[2 * k], b = c->pair[2 * k + 1];
        while (comp[a] != a) a = comp[a] = comp[comp[a]];
        while (comp[b] != b) b = comp[b] = comp[comp[b]];
        if (a < b) comp[b] = a;
        else if (b < a) comp[a] = b;
    }
    for (i = 0; i < n; i++) {
        int r = i;
        while (comp[r] != r) r = comp[r];
        comp[i] = r;
        head[i] = -1; /* -1: no cluster; -2: a root of one not numbered yet; >= 0 its number */
    }
    memset(cnt, 0, ((size_t)n + 1) * sizeof(int));
    for (k = 0; k < 2 * c->npair; k++) head[comp[c->pair[k]]] = -2;
    for (i = 0; i < n; i++)
        if (head[i] == -2) head[i] = nc++; /* roots in ascending order */
    cstart = (int *)md_alloc_array((size_t)nc + 1, sizeof(int));
    kstart = (int *)md_alloc_array((size_t)nc + 1, sizeof(int));
    catom = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    kpair = (int2 *)md_alloc_array((size_t)c->npair + 1, sizeof(int2));
    klen = (double *)md_alloc_array((size_t)c->npair + 1, sizeof(double));
    single = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    if (!cstart || !kstart || !catom || !kpair || !klen || !single) goto oom;
    {
        int *inw = order; /* 1 for atoms of a water */
        memset(inw, 0, (size_t)n * sizeof(int));
        for (k = 0; k < 3 * c->nwater; k++) inw[c->water[k]] = 1;
        for (i = 0; i < n; i++) {
            if (head[comp[i]] >= 0) cnt[head[comp[i]] + 1]++;
            else if (!inw[i]) single[ns++] = i;
        }
    }
    for (k = 0; k < nc; k++) {
        if (cnt[k + 1] > MD_CUDA_STEP_MAX_CLUSTER) {
            st = md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "constraint",
                              "a cluster of %d atoms joined by constraints; the GPU step handles up to %d", cnt[k + 1],
                              MD_CUDA_STEP_MAX_CLUSTER);
            goto done;
        }
        cnt[k + 1] += cnt[k];
    }
    memcpy(cstart, cnt, ((size_t)nc + 1) * sizeof(int));
    for (i = 0; i < n; i++) /* atoms ascending within each cluster */
        if (head[comp[i]] >= 0) {
            int cl = head[comp[i]];
            local[i] = cnt[cl] - cstart[cl];
            catom[cnt[cl]++] = i;
        }
    memset(kstart, 0, ((size_t)nc + 1) * sizeof(int));
    for (k = 0; k < c->npair; k++) kstart[head[comp[c->pair[2 * k]]] + 1]++;
    for (k = 0; k < nc; k++) kstart[k + 1] += kstart[k];
    memcpy(cnt, kstart, ((size_t)nc + 1) * sizeof(int));
    for (k = 0; k < c->npair; k++) {
        int a = c->pair[2 * k], b = c->pair[2 * k + 1], cl = head[comp[a]];
        kpair[cnt[cl]] = make_int2(local[a], local[b]);
        klen[cnt[cl]++] = c->length[k];
    }
    for (k = 0; k < c->nwater; k++) wat[k] = make_int4(c->water[3 * k], c->water[3 * k + 1], c->water[3 * k + 2], 0);
    p->nwater = c->nwater;
    p->ncluster = nc;
    p->nsingle = ns;
    p->nunit = c->nwater + nc + ns;
    if ((st = md_cuda_alloc((void **)&p->d_water, (size_t)c->nwater + 1, sizeof(int4), "waters")) != MD_OK ||
        (st = md_cuda_alloc((void **)&p->d_cstart, (size_t)nc + 1, sizeof(int), "clusters")) != MD_OK ||
        (st = md_cuda_alloc((void **)&p->d_catom, (size_t)n + 1, sizeof(int), "cluster atoms")) != MD_OK ||
        (st = md_cuda_alloc((void **)&p->d_kstart, (size_t)nc + 1, sizeof(int), "cluster constraints")) != MD_OK ||
        (st = md_cuda_alloc((void **)&p->d_kpair, (size_t)c->npair + 1, sizeof(int2), "constraint pairs")) != MD_OK ||
        (st = md_cuda_alloc((void **)&p->d_klen, (size_t)c->npair + 1, sizeof(double), "constraint lengths")) != MD_OK ||
        (st = md_cuda_alloc((void **)&p->d_single, (size_t)ns + 1, sizeof(int), "free atoms")) != MD_OK ||
        (st = md__step_put(p->d_water, wat, (size_t)c->nwater * sizeof(int4))) != MD_OK ||
        (st = md__step_put(p->d_cstart, cstart, ((size_t)nc + 1) * sizeof(int))) != MD_OK ||
        (st = md__step_put(p->d_catom, catom, (size_t)cstart[nc] * sizeof(int))) != MD_OK ||
        (st = md__step_put(p->d_kstart, kstart, ((size_t)nc + 1) * sizeof(int))) != MD_OK ||
        (st = md__step_put(p->d_kpair, kpair, (size_t)c->npair * sizeof(int2))) != MD_OK ||
        (st = md__step_put(p->d_klen, klen, (size_t)c->npair * sizeof(double))) != MD_OK ||
        (st = md__step_put(p->d_single, single, (size_t)ns * sizeof(int))) != MD_OK)
        goto done;
    goto done;
oom:
    st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot stage the units of %d atoms", n);
done:
    md_free(comp);
    md_free(head);
    md_free(cnt);
    md_free(local);
    md_free(order);
    md_free(wat);
    md_free(cstart);
    md_free(kstart);
    md_free(catom);
    md_free(kpair);
    md_free(klen);
    md_free(single);
    return st;
}

/* 1 when the integrate kernel makes the nonbonded plan's displacement check (a plan that keeps
 * reference positions: every rung but MD_NB_GPU_TILES), so the plan skips its own kernel. */
static int md__sim_checks_moves(const md_cuda_sim *s) { return s->nb.d_ref != NULL && s->nb.variant != MD_NB_GPU_TILES; }

/* The integrate kernel's arguments for this run. */
static md__step_args md__step_args_make(md_cuda_sim *s) {
    md__step_args A;
    md_cuda_step_plan *p = &s->step;
    memset(&A, 0, sizeof A);
    A.water = p->d_water;
    A.cstart = p->d_cstart;
    A.catom = p->d_catom;
    A.kstart = p->d_kstart;
    A.kpair = p->d_kpair;
    A.klen = p->d_klen;
    A.single = p->d_single;
    A.nwater = p->nwater;
    A.ncluster = p->ncluster;
    A.nsingle = p->nsingle;
    A.water3 = p->water_lanes == 3;
    A.mo = p->mass_o;
    A.mh = p->mass_h;
    A.wo = 1.0 / p->mass_o;
    A.wh = 1.0 / p->mass_h;
    A.doh = p->doh;
    A.dhh = p->dhh;
    A.x = p->d_x;
    A.v = p->d_v;
    A.inv_mass = p->d_inv_mass;
    A.charge = p->d_charge;
    A.vcom = p->d_vcom;
    A.pacc = p->d_pacc;
    A.done = p->d_done;
    A.flags = p->d_flags;
    A.xyzq = s->state.d_xyzq;
    A.vel = s->state.d_vel_invmass;
    A.force = s->state.d_force;
    A.stride = s->state.stride;
    A.rank = s->state.d_rank;
    A.box = s->state.d_box;
    A.step = s->state.d_step;
    A.langevin = s->desc.thermostat == MD_THERMOSTAT_LANGEVIN;
    A.com = s->desc.com_removal == 0;
    A.dt = s->desc.dt;
    A.vscale = exp(-s->desc.friction * s->desc.dt);
    A.kT = MD_KB * s->desc.temperature;
    A.maxd2 = s->desc.max_displacement * s->desc.max_displacement;
    A.tol = s->desc.constraints.tolerance;
    A.max_iter = s->desc.constraints.max_iterations;
    A.seed = s->desc.seed;
    A.total_mass = p->total_mass;
    if (md__sim_checks_moves(s)) {
        const float half = (float)(0.5 * s->nb.params.buffer); /* as md_cuda_nb_enqueue makes it */
        A.nb_ref = s->nb.d_ref;
        A.nb_ctl = s->nb.d_ctl;
        A.nb_grid = s->nb.cells.d_grid;
        A.nb_half2 = half * half;
    }
    return A;
}

/* The forces of the current positions: nonbonded and bonded on the state's stream, PME forked
 * onto its own (or after them with serial_pme or on a sort step). Energies added when `energy`. */
static md_status md__sim_forces(md_cuda_sim *s, int energy, int checked);
static md_status md__sim_kinetic(md_cuda_sim *s);
static md_status md__sim_enqueue_forces(md_cuda_sim *s, unsigned what);

md_status md_cuda_sim_enqueue_forces(md_cuda_sim *s, unsigned what) {
    if (!s || !s->step.d_x)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_sim_enqueue_forces", 0, "s", "is not made (md_cuda_sim_create)");
    s->since_sort++; /* a step of the caller's own integrator: it counts towards the next sort */
    return md__sim_enqueue_forces(s, what);
}

/* md__sim_enqueue_forces' `what` bit: the integrate kernel just made the displacement check. */
#define MD__SIM_CHECKED (1u << 30)

static md_status md__sim_enqueue_forces(md_cuda_sim *s, unsigned what) {
    const int energy = (what & MD_CUDA_SIM_ENERGY) != 0;
    md_status r;
    if (energy) MD_CUDA_TRY(cudaMemsetAsync(s->state.d_energy, 0, MD_CUDA_E_COUNT * sizeof(md_fixed), s->state.q.stream));
    if ((r = md__sim_forces(s, energy, (what & MD__SIM_CHECKED) != 0)) != MD_OK) return r;
    if (energy && (r = md__sim_kinetic(s)) != MD_OK) return r;
    s->energy_valid = energy;
    return MD_OK;
}

static md_status md__sim_forces(md_cuda_sim *s, int energy, int checked) {
    md_cuda_state *st = &s->state;
    unsigned what = (energy ? MD_CUDA_NB_ENERGY : 0u) | (checked ? MD_CUDA_NB_CHECKED : 0u);
    int serial = s->opts.serial_pme;
    md_status r;
    if (s->nb.opts.sort_interval > 0 && s->since_sort >= s->nb.opts.sort_interval) {
        what |= MD_CUDA_NB_SORT;
        s->since_sort = 0;
        serial = 1; /* the sort permutes d_xyzq: PME reads it afterwards */
    }
    if (s->nb.sorted_epoch != st->epoch) serial = 1; /* the plan sorts at its first evaluation */
    if (s->use_pme && !serial) {
        MD_CUDA_TRY(cudaEventRecord(s->ev_fork, st->q.stream));
        MD_CUDA_TRY(cudaStreamWaitEvent(s->pme.queue.stream, s->ev_fork, 0));
        if ((r = md_cuda_pme_plan_enqueue(&s->pme, st->d_xyzq, st->n, st->d_box, st->d_force, st->stride,
                                          energy ? &st->d_energy[MD_CUDA_E_COUL_RECIP] : NULL, NULL)) != MD_OK)
            return r;
        MD_CUDA_TRY(cudaEventRecord(s->ev_join, s->pme.queue.stream));
    }
    if ((r = md_cuda_nb_enqueue(&s->nb, st, what)) != MD_OK) return r;
    if ((r = md_cuda_bonded_enqueue(&s->bonded, st->q.stream, st->d_xyzq, st->d_rank, st->d_box, st->d_force, st->stride,
                                    energy ? &st->d_energy[MD_CUDA_E_BONDED] : NULL, NULL)) != MD_OK)
        return r;
    if (s->use_pme && serial) {
        MD_CUDA_TRY(cudaEventRecord(s->ev_fork, st->q.stream));
        MD_CUDA_TRY(cudaStreamWaitEvent(s->pme.queue.stream, s->ev_fork, 0));
        if ((r = md_cuda_pme_plan_enqueue(&s->pme, st->d_xyzq, st->n, st->d_box, st->d_force, st->stride,
                                          energy ? &st->d_energy[MD_CUDA_E_COUL_RECIP] : NULL, NULL)) != MD_OK)
            return r;
        MD_CUDA_TRY(cudaEventRecord(s->ev_join, s->pme.queue.stream));
    }
    if (s->use_pme) MD_CUDA_TRY(cudaStreamWaitEvent(st->q.stream, s->ev_join, 0));
    return MD_OK;
}

/* Lanes per water: the caller's 1 or 3, else 3 when every water warp of the three-lane layout is
 * resident at once (one wave), else 1. Three lanes shorten the chain a warp runs (the kernel is
 * latency bound, a few warps per SM) but triple the warps: measured on an H100 (chapter 08's
 * --race, 1000 steps, with the one-reciprocal SETTLE), 23,568 atoms 178.0 -> 174.0 us per step
 * (786 warps, one wave), 95,766 atoms 522.0 -> 539.1 us (3,193 warps, three waves). Again with
 * one kernel per layout (md__step_integrate_kernel<1>, <2>; H200, 2026-11-28, --water-lanes 1 /
 * 3, two rounds): 23,568 atoms 114.5 / 114.5 -> 113.5 / 113.5 us, 95,766 atoms 356.2 / 357.1 ->
 * 365.1 / 364.6 us: the rule still picks the faster layout at both sizes. */
static md_status md__step_water_lanes(md_cuda_step_plan *p, int want, int sm_count) {
    int per_sm = 0;
    if (want) {
        p->water_lanes = want;
        return MD_OK;
    }
    MD_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, p->ncluster == 0 && p->nsingle == 0 ? md__step_integrate_kernel<1> : md__step_integrate_kernel<0>,
        MD_CUDA_STEP_BLOCK, 0));
    p->water_lanes = (long long)(p->nwater + MD__STEP_WPW - 1) / MD__STEP_WPW <=
                             (long long)per_sm * sm_count * (MD_CUDA_STEP_BLOCK / 32)
                         ? 3
                         : 1;
    return MD_OK;
}

/* Atoms per block of the windowed spread in a simulation: the caller's, else the whole number of
 * batches of 32 per block that brings the spread's blocks nearest to one wave (as many as are
 * resident at once, cudaOccupancyMaxActiveBlocksPerMultiprocessor), at least 1 and at most 8.
 * In the step the spread runs beside the pair kernel (md__sim_enqueue_forces), which at its
 * launch bound can hold every register of an SM (not profiled); there fewer, longer blocks cost
 * less, where alone one batch per block is fastest (chapter 07). Measured side by side on an
 * H200 (2026-11-29, chapter 08's --race, 1,000 steps, --pme-window-atoms 32 / 64 / 96 / 128,
 * two rounds): 104.84 / 106.31 / 107.30 / 110.27 and 104.91 / 106.60 / 107.19 / 110.19 us per
 * step at 23,568 atoms (737 batches: the rule gives 32),
 * 329.42 / 318.87 / 320.08 / 321.29 and 329.23 / 318.92 / 320.02 / 320.81 us at 95,766 (2,993
 * batches: 64). On sm_90 the kernel has 48 registers and 19,264 bytes of shared memory per block
 * of 128 threads (ptxas), so 10 blocks per SM and 1,320 in a wave on 132 SMs. A rule of "the
 * fewest batches that fit one wave" gave 96 there (320.3 us). */
static md_status md__sim_window_atoms(md_cuda_pme_plan *p, int want, int n, int sm_count) {
    int per_sm = 0;
    long long wave, batches = ((long long)n + 31) / 32, k;
    if (want) return md_cuda_pme_plan_set_window_atoms(p, want);
    {
        const auto kern = p->params.order == 4   ? md__pme_spread_window_kernel<4>
                          : p->params.order == 5 ? md__pme_spread_window_kernel<5>
                                                 : md__pme_spread_window_kernel<6>;
        MD_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, MD__PME_WINDOW_BLOCK, 0));
    }
    wave = (long long)(per_sm > 0 ? per_sm : 1) * (sm_count > 0 ? sm_count : 1);
    k = (batches + wave / 2) / wave;
    return md_cuda_pme_plan_set_window_atoms(p, 32 * (int)(k < 1 ? 1 : (k > 8 ? 8 : k)));
}

/* Blocks of the integrate kernel: the water warps (MD__STEP_WPW waters each) or a thread per
 * water, then a thread per other unit. */
static int md__step_blocks(const md_cuda_step_plan *p) {
    const long long wt = p->water_lanes == 3 ? 32ll * ((p->nwater + MD__STEP_WPW - 1) / MD__STEP_WPW) : p->nwater;
    const long long threads = wt + p->ncluster + p->nsingle;
    const int blocks = (int)((threads + MD_CUDA_STEP_BLOCK - 1) / MD_CUDA_STEP_BLOCK);
    return blocks > 0 ? blocks : 1;
}

/* The integrate kernel for the plan's units, and its name in the kernel registry. */
typedef void (*md__step_kernel_fn)(md__step_args);
static md__step_kernel_fn md__step_kernel(const md_cuda_step_plan *p, const char **name) {
    const int waters = p->ncluster == 0 && p->nsingle == 0, lanes3 = p->water_lanes == 3;
    *name = !waters ? "md__step_integrate_kernel<0>"
                    : (lanes3 ? "md__step_integrate_kernel<1>" : "md__step_integrate_kernel<2>");
    return !waters ? md__step_integrate_kernel<0> : (lanes3 ? md__step_integrate_kernel<1> : md__step_integrate_kernel<2>);
}

/* The kinetic energy of the current state (the integrate kernel in kinetic mode). */
static md_status md__sim_kinetic(md_cuda_sim *s) {
    md__step_args A = md__step_args_make(s);
    const int blocks = md__step_blocks(&s->step);
    A.ekin = &s->state.d_energy[MD_CUDA_E_KINETIC];
    A.kinetic_only = 1;
    const char *kn;
    const md__step_kernel_fn k = md__step_kernel(&s->step, &kn);
    MD_CUDA_LAUNCH_NAMED(k, kn, blocks > 0 ? blocks : 1, MD_CUDA_STEP_BLOCK, 0, s->state.q.stream, A);
    return MD_OK;
}

/* Zero the forces, then the forces (not a step: the sort schedule does not move). */
static md_status md__sim_evaluate(md_cuda_sim *s, int energy) {
    MD_CUDA_TRY(cudaMemsetAsync(s->state.d_force, 0, 3 * (size_t)s->state.stride * sizeof(md_fixed), s->state.q.stream));
    return md__sim_enqueue_forces(s, energy ? MD_CUDA_SIM_ENERGY : 0u);
}

static md_status md__sim_mirror(md_cuda_sim *s) {
    const int n = s->step.n;
    /* the mirror is written wrapped into the box: the list's periodic shifts must be made again */
    if (s->nb.d_ctl) MD_CUDA_TRY(cudaMemsetAsync(s->nb.d_ctl + MD__NB_CTL_REBUILD, 1, 1, s->state.q.stream));
    MD_CUDA_LAUNCH(md__step_mirror_kernel, (n + 255) / 256, 256, 0, s->state.q.stream, n, (const double *)s->step.d_x,
                   (const double *)s->step.d_v, (const double *)s->step.d_inv_mass, (const float *)s->step.d_charge,
                   (const int *)s->state.d_rank, (const double *)s->state.d_box, s->state.d_xyzq, s->state.d_vel_invmass);
    return MD_OK;
}

md_status md_cuda_sim_create(md_cuda_sim *s, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                             const md_sim_desc *desc, const md_cuda_sim_opts *opts) {
    const char *fn = "md_cuda_sim_create";
    md_cuda_sim g;
    md_sim ref; /* md_sim_prepare: md_sim's checks, defaults and constrained initial state, on the host */
    md_status st;
    md_nb_variant v;
    int i, a, n;
    if (!s || !sys || !t || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s/sys/t/lj", "is NULL");
    memset(s, 0, sizeof *s);
    memset(&g, 0, sizeof g);
    if ((st = md_sim_prepare(&ref, sys, t, lj, desc)) != MD_OK) return st;
    n = ref.n;
    g.desc = ref.desc;
    if (opts) g.opts = *opts;
    v = g.opts.nb_variant;
    if (v == MD_NB_CPU_ALL_PAIRS) v = lj->ntypes <= MD_CUDA_NB_SMEM_TYPES ? MD_NB_GPU_CLUSTER_SMEM : MD_NB_GPU_CLUSTER;
    if (!md_nb_variant_is_gpu(v)) {
        md_sim_free(&ref);
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nb_variant", "%s is not a GPU rung", md_nb_variant_name(v));
    }
    g.opts.nb_variant = v;
    if (g.opts.plain_priority != 0 && g.opts.plain_priority != 1) {
        md_sim_free(&ref);
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "plain_priority", "must be 0 or 1 (got %d)",
                            g.opts.plain_priority);
    }
    if (g.opts.water_lanes != 0 && g.opts.water_lanes != 1 && g.opts.water_lanes != 3) {
        md_sim_free(&ref);
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "water_lanes", "must be 0, 1 or 3 (got %d)",
                            g.opts.water_lanes);
    }
    g.ndof = ref.ndof;
    for (a = 0; a < 3; a++) g.box[a] = ref.box[a];
    g.baro = ref.baro;
    g.use_pme = ref.use_pme;
    g.step.desc = ref.desc;
    g.step.n = n;
    g.step.mass_o = ref.cons.mass_o;
    g.step.mass_h = ref.cons.mass_h;
    g.step.doh = ref.cons.doh;
    g.step.dhh = ref.cons.dhh;
    /* SHAKE's settings as md_constraints_create resolved them (a zero desc field means its default) */
    g.desc.constraints.tolerance = g.step.desc.constraints.tolerance = ref.cons.tolerance;
    g.desc.constraints.max_iterations = g.step.desc.constraints.max_iterations = ref.cons.max_iterations;
    for (i = 0; i < n; i++) g.step.total_mass += 1.0 / ref.inv_mass[i];
#define MD__SIM_TRY(x)                                                                                                 \
    do {                                                                                                               \
        if ((st = (x)) != MD_OK) goto fail;                                                                            \
    } while (0)
    MD__SIM_TRY(md_cuda_state_create(&g.state, n));
    if (!g.opts.plain_priority) MD__SIM_TRY(md_cuda_queue_prioritize(&g.state.q, 1));
    MD__SIM_TRY(md_cuda_state_upload(&g.state, sys, t, lj));
    g.step.stride = g.state.stride;
    MD__SIM_TRY(md_cuda_nb_plan_create(&g.nb, &g.state, v, &g.desc.nb, &g.opts.nb));
    if (g.use_pme) {
        MD__SIM_TRY(md_cuda_pme_plan_create(&g.pme, &ref.pme.params, g.box, n));
        if (g.opts.spread == MD_CUDA_PME_SPREAD_ATOMIC) g.opts.spread = MD_CUDA_PME_SPREAD_WINDOW; /* 0: the default */
        MD__SIM_TRY(md_cuda_pme_plan_set_spread(&g.pme, g.opts.spread));
        MD__SIM_TRY(md__sim_window_atoms(&g.pme, g.opts.pme_window_atoms, n, g.nb.sm_count));
        g.opts.pme_window_atoms = g.pme.window_atoms;
    }
    MD__SIM_TRY(md_cuda_bonded_plan_create(&g.bonded, &ref.bonded));
    MD__SIM_TRY(md__step_units(&g.step, &ref.cons, n));
    MD__SIM_TRY(md__step_water_lanes(&g.step, g.opts.water_lanes, g.nb.sm_count));
    g.opts.water_lanes = g.step.water_lanes;
    if (cudaEventCreateWithFlags(&g.ev_fork, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&g.ev_join, cudaEventDisableTiming) != cudaSuccess) {
        st = md_cuda_error(cudaGetLastError(), "cudaEventCreateWithFlags", __FILE__, __LINE__);
        goto fail;
    }
    {
        md_cuda_step_plan *p = &g.step;
        double *hinv = (double *)md_alloc_array((size_t)n, sizeof(double));
        float *hq = (float *)md_alloc_array((size_t)n, sizeof(float));
        int *ms = ref.mol_start, *ma = ref.mol_atom;
        if (!hinv || !hq) {
            md_free(hinv);
            md_free(hq);
            st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot stage %d atoms", n);
            goto fail;
        }
        for (i = 0; i < n; i++) {
            hinv[i] = ref.inv_mass[i];
            hq[i] = t->charge[i];
        }
        p->nmol = ref.nmol;
        if ((st = md_cuda_alloc((void **)&p->d_x, 3 * (size_t)n, sizeof(double), "positions")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_v, 3 * (size_t)n, sizeof(double), "velocities")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_x_save, 3 * (size_t)n, sizeof(double), "saved positions")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_inv_mass, (size_t)n, sizeof(double), "inverse masses")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_charge, (size_t)n, sizeof(float), "charges")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_mstart, (size_t)p->nmol + 1, sizeof(int), "molecules")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_matom, (size_t)n, sizeof(int), "molecule atoms")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_vcom, 4, sizeof(double), "centre-of-mass velocity")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_pacc, 3, sizeof(md_fixed), "momentum sums")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_done, 1, sizeof(unsigned int), "block counter")) != MD_OK ||
            (st = md_cuda_alloc((void **)&p->d_flags, MD_CUDA_FLAG_WORDS, sizeof(unsigned long long), "step flags")) != MD_OK ||
            (st = md_cuda_alloc_pinned((void **)&p->h_flags, MD_CUDA_FLAG_WORDS, sizeof(unsigned long long), "step flags")) != MD_OK ||
            (st = md_cuda_alloc_pinned((void **)&p->h_stage, 6 * (size_t)n + 8, sizeof(double), "step staging")) != MD_OK ||
            (st = md_cuda_alloc_pinned((void **)&g.h_box, 3, sizeof(double), "box staging")) != MD_OK ||
            (st = md__step_put(p->d_x, ref.x, 3 * (size_t)n * sizeof(double))) != MD_OK ||
            (st = md__step_put(p->d_v, ref.v, 3 * (size_t)n * sizeof(double))) != MD_OK ||
            (st = md__step_put(p->d_inv_mass, hinv, (size_t)n * sizeof(double))) != MD_OK ||
            (st = md__step_put(p->d_charge, hq, (size_t)n * sizeof(float))) != MD_OK ||
            (st = md__step_put(p->d_mstart, ms, ((size_t)p->nmol + 1) * sizeof(int))) != MD_OK ||
            (st = md__step_put(p->d_matom, ma, (size_t)n * sizeof(int))) != MD_OK) {
            md_free(hinv);
            md_free(hq);
            goto fail;
        }
        md_free(hinv);
        md_free(hq);
        if (cudaMemset(p->d_vcom, 0, 4 * sizeof(double)) != cudaSuccess ||
            cudaMemset(p->d_pacc, 0, 3 * sizeof(md_fixed)) != cudaSuccess ||
            cudaMemset(p->d_done, 0, sizeof(unsigned int)) != cudaSuccess ||
            cudaMemset(p->d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof(unsigned long long)) != cudaSuccess) {
            st = md_cuda_error(cudaGetLastError(), "cudaMemset(step plan)", __FILE__, __LINE__);
            goto fail;
        }
        if (cudaDeviceSynchronize() != cudaSuccess) { /* the copies and memsets above precede the state's stream */
            st = md_cuda_error(cudaGetLastError(), "cudaDeviceSynchronize", __FILE__, __LINE__);
            goto fail;
        }
    }
    /* the constrained initial state in the state's float mirror, then the first forces */
    MD__SIM_TRY(md__sim_mirror(&g));
    MD__SIM_TRY(md__sim_evaluate(&g, 1));
    if (cudaStreamSynchronize(g.state.q.stream) != cudaSuccess) {
        st = md_cuda_error(cudaGetLastError(), "cudaStreamSynchronize", __FILE__, __LINE__);
        goto fail;
    }
#undef MD__SIM_TRY
    md_sim_free(&ref);
    *s = g;
    return MD_OK;
fail:
    md_sim_free(&ref);
    md_cuda_sim_destroy(&g);
    return st;
}

md_status md_cuda_sim_enqueue(md_cuda_sim *s, int nsteps, unsigned what) {
    const char *fn = "md_cuda_sim_enqueue";
    md__step_args A;
    md_status r;
    int k, blocks;
    if (!s || !s->step.d_x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is not made (md_cuda_sim_create)");
    if (nsteps < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nsteps", "must be >= 0 (got %d)", nsteps);
    A = md__step_args_make(s);
    blocks = md__step_blocks(&s->step);
    if (blocks < 1) blocks = 1;
    const char *kn;
    const md__step_kernel_fn kfn = md__step_kernel(&s->step, &kn);
    for (k = 0; k < nsteps; k++) {
        const int energy = (what & MD_CUDA_SIM_ENERGY) && k == nsteps - 1;
        MD_CUDA_LAUNCH_NAMED(kfn, kn, blocks, MD_CUDA_STEP_BLOCK, 0, s->state.q.stream, A);
        s->steps++;
        s->since_sort++;
        s->time_ps += s->desc.dt;
        if ((r = md__sim_enqueue_forces(s, (energy ? MD_CUDA_SIM_ENERGY : 0u) |
                                                  (A.nb_ref ? MD__SIM_CHECKED : 0u))) != MD_OK)
            return r;
    }
    return MD_OK;
}

md_status md_cuda_sim_poll(md_cuda_sim *s, md_energy *e, long long *step) {
    const char *fn = "md_cuda_sim_poll";
    static const md_cuda_flag_text text[MD_CUDA_FLAG_COUNT] = {
        {"x", "atom %llu: a position or velocity is not finite (the run has exploded)"},
        {"constraint", "SETTLE or SHAKE / RATTLE failed at the unit of atom %llu (counted from 1): the run has exploded"},
        {"x", "atom %llu moved more than max_displacement in one step: the neighbour search cannot follow it, the "
              "run has exploded"}};
    md_energy en;
    md_status r;
    const char *bad;
    if (!s || !s->step.d_x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is not made (md_cuda_sim_create)");
    /* the step's own flags first: a runaway atom is the cause of whatever else went wrong */
    MD_CUDA_TRY(cudaMemcpyAsync(s->step.h_flags, s->step.d_flags, MD_CUDA_FLAG_WORDS * sizeof(unsigned long long),
                                cudaMemcpyDeviceToHost, s->state.q.stream));
    MD_CUDA_TRY(cudaStreamSynchronize(s->state.q.stream));
    if (s->step.h_flags[0]) {
        /* a neighbour list that overflowed its capacity lost pairs: that is the cause of what
         * the step found (grow it and report the capacity) */
        const long long *h = s->nb.h_ctl;
        if (md_cuda_nb_plan_poll(&s->nb, &s->state, &en) != MD_OK && h &&
            (h[MD__NB_CTL_NEED_ENTRIES] > s->nb.cap_entries || h[MD__NB_CTL_NEED_ITEMS] > s->nb.cap_items ||
             h[MD__NB_CTL_NEED_EXCL] > s->nb.cap_excl || h[MD__NB_CTL_NEED_NB] > s->nb.max_nb)) {
            char msg[512];
            int grown = 0;
            snprintf(msg, sizeof msg, "%s", md_last_error());
            MD_CUDA_TRY(cudaMemsetAsync(s->step.d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof(unsigned long long),
                                        s->state.q.stream));
            (void)md_cuda_nb_plan_grow(&s->nb, &s->state, &grown);
            return md_set_error(MD_ERR_RANGE, fn, 0, "list_capacity", "the run exploded after the neighbour list "
                                "overflowed (grown now: restore a checkpoint and go on): %s", msg);
        }
        /* the order of the report: a runaway atom first (what else failed followed from it),
         * then a failed constraint, then a non-finite value */
        static const int order[MD_CUDA_FLAG_COUNT] = {MD_CUDA_FLAG_RANGE, MD_CUDA_FLAG_OVERFLOW, MD_CUDA_FLAG_NONFINITE};
        int k;
        for (k = 0; k < MD_CUDA_FLAG_COUNT; k++) {
            const int f = order[k];
            if (s->step.h_flags[0] & (1ull << f)) {
                unsigned long long d = s->step.h_flags[1 + f];
                if (f != MD_CUDA_FLAG_OVERFLOW) d = ~d;
                MD_CUDA_TRY(cudaMemsetAsync(s->step.d_flags, 0, MD_CUDA_FLAG_WORDS * sizeof(unsigned long long),
                                            s->state.q.stream));
                return md_set_error(MD_ERR_RANGE, fn, 0, text[f].field, text[f].format, d);
            }
        }
    }
    if (s->use_pme && (r = md_cuda_queue_sync(&s->pme.queue, "md_cuda_sim_poll (PME)", NULL)) != MD_OK) return r;
    if ((r = md_cuda_nb_plan_poll(&s->nb, &s->state, &en)) != MD_OK) {
        int grown = 0;
        (void)md_cuda_nb_plan_grow(&s->nb, &s->state, &grown);
        return r;
    }
    if (e) {
        if (!s->energy_valid)
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "e",
                                "the last enqueue computed no energies (pass MD_CUDA_SIM_ENERGY)");
        if ((bad = md_energy_nonfinite_term(&en)) != NULL)
            return md_set_error(MD_ERR_RANGE, fn, 0, "energy", "term %s is not finite at step %lld", bad, s->steps);
        *e = en;
    }
    if (step) *step = (long long)s->state.h_energy[MD_CUDA_E_COUNT];
    return MD_OK;
}

md_status md_cuda_sim_download(md_cuda_sim *s, double *x, double *v, double box[3]) {
    md_cuda_step_plan *p;
    size_t n3;
    int i;
    if (!s || !s->step.d_x) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_sim_download", 0, "s", "is not made");
    p = &s->step;
    n3 = 3 * (size_t)p->n;
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_stage, p->d_x, n3 * sizeof(double), cudaMemcpyDeviceToHost, s->state.q.stream));
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_stage + n3, p->d_v, n3 * sizeof(double), cudaMemcpyDeviceToHost, s->state.q.stream));
    MD_CUDA_TRY(cudaMemcpyAsync(p->h_stage + 2 * n3, p->d_vcom, 4 * sizeof(double), cudaMemcpyDeviceToHost,
                                s->state.q.stream));
    MD_CUDA_TRY(cudaStreamSynchronize(s->state.q.stream));
    if (x) memcpy(x, p->h_stage, n3 * sizeof(double));
    if (v) /* the correction the next step's kernel would subtract, the same double operation */
        for (i = 0; i < (int)n3; i++) v[i] = p->h_stage[n3 + i] - (s->desc.com_removal == 0 ? p->h_stage[2 * n3 + i % 3] : 0.0);
    if (box) memcpy(box, s->box, 3 * sizeof(double));
    return MD_OK;
}

md_status md_cuda_sim_get_system(md_cuda_sim *s, md_system *sys) {
    double *x, *v;
    md_status st;
    int i, a;
    if (!s || !sys || !sys->xyzq || !sys->vel || sys->n != s->step.n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_sim_get_system", 0, "sys", "is NULL or of another size");
    x = (double *)md_alloc_array(6 * (size_t)sys->n, sizeof(double));
    if (!x) return md_set_error(MD_ERR_OUT_OF_MEMORY, "md_cuda_sim_get_system", 0, "n", "cannot allocate");
    v = x + 3 * (size_t)sys->n;
    if ((st = md_cuda_sim_download(s, x, v, NULL)) != MD_OK) {
        md_free(x);
        return st;
    }
    for (i = 0; i < sys->n; i++) {
        float w[3];
        for (a = 0; a < 3; a++) {
            double y = x[3 * (size_t)i + a], L = s->box[a];
            w[a] = (float)(y - L * floor(y / L));
        }
        sys->xyzq[i].x = w[0];
        sys->xyzq[i].y = w[1];
        sys->xyzq[i].z = w[2];
        sys->vel[i].x = (float)v[3 * (size_t)i];
        sys->vel[i].y = (float)v[3 * (size_t)i + 1];
        sys->vel[i].z = (float)v[3 * (size_t)i + 2];
    }
    for (a = 0; a < 3; a++) sys->box[a] = s->box[a];
    md_free(x);
    return MD_OK;
}

/* Write the host box to the device (pinned staging, on the state's stream). */
static md_status md__sim_put_box(md_cuda_sim *s) {
    MD_CUDA_TRY(cudaStreamSynchronize(s->state.q.stream)); /* the staging may still be in use */
    memcpy(s->h_box, s->box, 3 * sizeof(double));
    memcpy(s->state.box, s->box, 3 * sizeof(double));
    MD_CUDA_TRY(cudaMemcpyAsync(s->state.d_box, s->h_box, 3 * sizeof(double), cudaMemcpyHostToDevice, s->state.q.stream));
    return MD_OK;
}

md_status md_cuda_sim_barostat(md_cuda_sim *s) {
    const char *fn = "md_cuda_sim_barostat";
    md_energy e0, e1;
    double V, dV, Vn, sc, box0[3];
    md_status r;
    int a, accept;
    if (!s || !s->step.d_x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is not made");
    V = s->box[0] * s->box[1] * s->box[2];
    dV = md_barostat_propose(&s->baro);
    Vn = V + dV;
    if (!(Vn > 0.0)) return MD_OK;
    sc = cbrt(Vn / V);
    if (!s->energy_valid) {
        if ((r = md__sim_evaluate(s, 1)) != MD_OK) return r;
    }
    if ((r = md_cuda_sim_poll(s, &e0, NULL)) != MD_OK) return r;
    for (a = 0; a < 3; a++) box0[a] = s->box[a];
    MD_CUDA_TRY(cudaMemcpyAsync(s->step.d_x_save, s->step.d_x, 3 * (size_t)s->step.n * sizeof(double),
                                cudaMemcpyDeviceToDevice, s->state.q.stream));
    s->step.h_stage[0] = sc;
    MD_CUDA_TRY(cudaMemcpyAsync(s->step.d_vcom + 3, s->step.h_stage, sizeof(double), cudaMemcpyHostToDevice,
                                s->state.q.stream));
    MD_CUDA_LAUNCH(md__step_scale_kernel, (s->step.nmol + 255) / 256, 256, 0, s->state.q.stream, s->step.nmol,
                   (const int *)s->step.d_mstart, (const int *)s->step.d_matom, s->step.d_x, (const double *)s->state.d_box,
                   (const double *)(s->step.d_vcom + 3));
    for (a = 0; a < 3; a++) s->box[a] *= sc;
    if ((r = md__sim_put_box(s)) != MD_OK || (r = md__sim_mirror(s)) != MD_OK || (r = md__sim_evaluate(s, 1)) != MD_OK)
        return r;
    r = md_cuda_sim_poll(s, &e1, NULL);
    if (r != MD_OK && r != MD_ERR_RANGE) return r;
    /* a trial whose energy is not finite (an overlap) counts as rejected, as in md_sim */
    accept = md_barostat_decide(&s->baro, r == MD_OK ? md_energy_potential(&e1) - md_energy_potential(&e0) : INFINITY, dV,
                                V, s->step.nmol, MD_KB * s->desc.temperature, s->desc.pressure);
    if (!accept) {
        MD_CUDA_TRY(cudaMemcpyAsync(s->step.d_x, s->step.d_x_save, 3 * (size_t)s->step.n * sizeof(double),
                                    cudaMemcpyDeviceToDevice, s->state.q.stream));
        for (a = 0; a < 3; a++) s->box[a] = box0[a];
        if ((r = md__sim_put_box(s)) != MD_OK || (r = md__sim_mirror(s)) != MD_OK || (r = md__sim_evaluate(s, 1)) != MD_OK)
            return r;
    }
    return MD_OK;
}

md_status md_cuda_sim_run(md_cuda_sim *s, int nsteps, unsigned what) {
    const int iv = s ? s->desc.barostat_interval : 0;
    md_status r;
    if (!s || !s->step.d_x) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_sim_run", 0, "s", "is not made");
    if (iv <= 0) return md_cuda_sim_enqueue(s, nsteps, what);
    while (nsteps > 0) { /* chunks that end on the barostat's steps, which need the energy */
        int chunk = (int)(iv - s->steps % iv), move;
        if (chunk > nsteps) chunk = nsteps;
        move = (s->steps + chunk) % iv == 0;
        if ((r = md_cuda_sim_enqueue(s, chunk, move || (chunk == nsteps && (what & MD_CUDA_SIM_ENERGY)) ? MD_CUDA_SIM_ENERGY
                                                                                                       : 0u)) != MD_OK)
            return r;
        nsteps -= chunk;
        if (move && (r = md_cuda_sim_barostat(s)) != MD_OK) return r;
    }
    return MD_OK;
}

md_status md_cuda_sim_checkpoint(md_cuda_sim *s, md_checkpoint *ck) {
    md_checkpoint c;
    md_status st;
    long long step = 0;
    if (!s || !s->step.d_x || !ck) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_sim_checkpoint", 0, "s/ck", "is NULL");
    memset(&c, 0, sizeof c);
    c.n = s->step.n;
    c.x = (double *)md_alloc_array(3 * (size_t)c.n, sizeof(double));
    c.v = (double *)md_alloc_array(3 * (size_t)c.n, sizeof(double));
    if (!c.x || !c.v) {
        md_checkpoint_free(&c);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, "md_cuda_sim_checkpoint", 0, "n", "cannot allocate");
    }
    if ((st = md_cuda_sim_download(s, c.x, c.v, c.box)) != MD_OK ||
        (st = md_cuda_sim_poll(s, NULL, &step)) != MD_OK) {
        md_checkpoint_free(&c);
        return st;
    }
    c.step = step;
    c.time_ps = s->time_ps;
    c.seed = s->desc.seed;
    c.baro = s->baro;
    *ck = c;
    return MD_OK;
}

md_status md_cuda_sim_restore(md_cuda_sim *s, const md_checkpoint *ck) {
    const char *fn = "md_cuda_sim_restore";
    md_status r;
    size_t n3;
    int i;
    if (!s || !s->step.d_x || !ck || !ck->x || !ck->v) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s/ck", "is NULL");
    if (ck->n != s->step.n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "checkpoint of %d atoms for a run of %d", ck->n, s->step.n);
    n3 = 3 * (size_t)ck->n;
    for (i = 0; i < (int)n3; i++)
        if (!isfinite(ck->x[i]) || !isfinite(ck->v[i]))
            return md_set_error(MD_ERR_RANGE, fn, 0, "x/v", "atom %d: not finite", i / 3);
    if ((r = md_nb_check_box(fn, &s->nb.params, ck->box)) != MD_OK) return r;
    MD_CUDA_TRY(cudaStreamSynchronize(s->state.q.stream));
    memcpy(s->step.h_stage, ck->x, n3 * sizeof(double));
    memcpy(s->step.h_stage + n3, ck->v, n3 * sizeof(double));
    MD_CUDA_TRY(cudaMemcpyAsync(s->step.d_x, s->step.h_stage, n3 * sizeof(double), cudaMemcpyHostToDevice, s->state.q.stream));
    MD_CUDA_TRY(cudaMemcpyAsync(s->step.d_v, s->step.h_stage + n3, n3 * sizeof(double), cudaMemcpyHostToDevice,
                                s->state.q.stream));
    MD_CUDA_TRY(cudaMemsetAsync(s->step.d_vcom, 0, 3 * sizeof(double), s->state.q.stream));
    MD_CUDA_TRY(cudaMemsetAsync(s->step.d_pacc, 0, 3 * sizeof(md_fixed), s->state.q.stream));
    {
        long long st = ck->step;
        memcpy(s->step.h_stage + 2 * n3, &st, sizeof st);
        MD_CUDA_TRY(cudaMemcpyAsync(s->state.d_step, s->step.h_stage + 2 * n3, sizeof(long long), cudaMemcpyHostToDevice,
                                    s->state.q.stream));
    }
    memcpy(s->box, ck->box, sizeof s->box);
    if ((r = md__sim_put_box(s)) != MD_OK || (r = md__sim_mirror(s)) != MD_OK) return r;
    s->steps = ck->step;
    s->time_ps = ck->time_ps;
    s->desc.seed = s->step.desc.seed = ck->seed;
    s->baro = ck->baro;
    if ((r = md__sim_evaluate(s, 1)) != MD_OK) return r;
    return md_cuda_sim_poll(s, NULL, NULL);
}

double md_cuda_sim_temperature(const md_cuda_sim *s, double kinetic) {
    if (!s || s->ndof < 1) return 0.0;
    return 2.0 * kinetic / (s->ndof * MD_KB);
}

double md_cuda_sim_density(const md_cuda_sim *s) {
    if (!s) return 0.0;
    return s->step.total_mass / (602.214076 * s->box[0] * s->box[1] * s->box[2]);
}

md_status md_cuda_sim_profile(md_cuda_sim *s, int nsteps, md_cuda_step_profile *out) {
    const char *fn = "md_cuda_sim_profile";
    enum { E_START, E_INT, E_NB, E_BOND, E_SPREAD, E_FWD, E_SOLVE, E_BWD, E_GATHER, E_END, E_COUNT };
    cudaEvent_t ev[E_COUNT], t0, t1;
    md_cuda_step_profile pr;
    md_cuda_state *st = &s->state;
    md__step_args A;
    md_status r = MD_OK;
    int k, i, blocks;
    float ms;
    double w0;
    if (!s || !s->step.d_x || !out || nsteps < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s/out/nsteps", "is NULL or < 1");
    memset(&pr, 0, sizeof pr);
    for (i = 0; i < E_COUNT; i++) MD_CUDA_TRY(cudaEventCreate(&ev[i]));
    MD_CUDA_TRY(cudaEventCreate(&t0));
    MD_CUDA_TRY(cudaEventCreate(&t1));
    A = md__step_args_make(s);
    blocks = md__step_blocks(&s->step);
    if (blocks < 1) blocks = 1;
    const char *kn;
    const md__step_kernel_fn kfn = md__step_kernel(&s->step, &kn);
    /* part by part: every part on the state's stream, PME stage by stage on its stream after the rest */
    MD_CUDA_TRY(cudaEventRecord(t0, st->q.stream));
    for (k = 0; k < nsteps && r == MD_OK; k++) {
        double part[E_COUNT];
        MD_CUDA_TRY(cudaEventRecord(ev[E_START], st->q.stream));
        MD_CUDA_LAUNCH_NAMED(kfn, kn, blocks, MD_CUDA_STEP_BLOCK, 0, st->q.stream, A);
        s->steps++;
        s->since_sort++;
        s->time_ps += s->desc.dt;
        MD_CUDA_TRY(cudaEventRecord(ev[E_INT], st->q.stream));
        if ((r = md_cuda_nb_enqueue(&s->nb, st,
                                    (s->nb.opts.sort_interval > 0 && s->since_sort >= s->nb.opts.sort_interval
                                         ? MD_CUDA_NB_SORT : 0u) |
                                        (A.nb_ref ? MD_CUDA_NB_CHECKED : 0u))) != MD_OK)
            break;
        if (s->nb.opts.sort_interval > 0 && s->since_sort >= s->nb.opts.sort_interval) s->since_sort = 0;
        MD_CUDA_TRY(cudaEventRecord(ev[E_NB], st->q.stream));
        if ((r = md_cuda_bonded_enqueue(&s->bonded, st->q.stream, st->d_xyzq, st->d_rank, st->d_box, st->d_force, st->stride,
                                        NULL, NULL)) != MD_OK)
            break;
        MD_CUDA_TRY(cudaEventRecord(ev[E_BOND], st->q.stream));
        if (s->use_pme) {
            cudaStream_t ps = s->pme.queue.stream;
            MD_CUDA_TRY(cudaStreamWaitEvent(ps, ev[E_BOND], 0));
            if ((r = md_cuda_pme_enqueue_spread(&s->pme, s->pme.spread, st->d_xyzq, st->n, st->d_box)) != MD_OK) break;
            MD_CUDA_TRY(cudaEventRecord(ev[E_SPREAD], ps));
            if ((r = md_cuda_pme_enqueue_forward(&s->pme)) != MD_OK) break;
            MD_CUDA_TRY(cudaEventRecord(ev[E_FWD], ps));
            if ((r = md_cuda_pme_enqueue_solve(&s->pme, st->d_box, NULL, NULL)) != MD_OK) break;
            MD_CUDA_TRY(cudaEventRecord(ev[E_SOLVE], ps));
            if ((r = md_cuda_pme_enqueue_backward(&s->pme)) != MD_OK) break;
            MD_CUDA_TRY(cudaEventRecord(ev[E_BWD], ps));
            if ((r = md_cuda_pme_enqueue_gather(&s->pme, st->d_xyzq, st->n, st->d_box, st->d_force, st->stride)) != MD_OK)
                break;
            MD_CUDA_TRY(cudaEventRecord(ev[E_GATHER], ps));
            MD_CUDA_TRY(cudaStreamWaitEvent(st->q.stream, ev[E_GATHER], 0));
        }
        MD_CUDA_TRY(cudaEventRecord(ev[E_END], st->q.stream));
        MD_CUDA_TRY(cudaEventSynchronize(ev[E_END]));
        for (i = 1; i < E_COUNT; i++) {
            int prev = i == E_SPREAD ? E_BOND : i == E_END ? (s->use_pme ? E_GATHER : E_BOND) : i - 1;
            part[i] = 0.0;
            if (!s->use_pme && i >= E_SPREAD && i <= E_GATHER) continue;
            MD_CUDA_TRY(cudaEventElapsedTime(&ms, ev[prev], ev[i]));
            part[i] = 1e-3 * ms;
        }
        pr.integrate += part[E_INT];
        pr.nonbonded += part[E_NB];
        pr.bonded += part[E_BOND];
        pr.pme_spread += part[E_SPREAD];
        pr.pme_forward += part[E_FWD];
        pr.pme_solve += part[E_SOLVE];
        pr.pme_backward += part[E_BWD];
        pr.pme_gather += part[E_GATHER];
    }
    if (r == MD_OK) {
        MD_CUDA_TRY(cudaEventRecord(t1, st->q.stream));
        MD_CUDA_TRY(cudaEventSynchronize(t1));
        MD_CUDA_TRY(cudaEventElapsedTime(&ms, t0, t1));
        pr.step_serial = 1e-3 * ms / nsteps;
        /* the ordinary step, timed over all steps */
        MD_CUDA_TRY(cudaEventRecord(t0, st->q.stream));
        w0 = md_wall_seconds();
        r = md_cuda_sim_enqueue(s, nsteps, 0u);
        pr.host_enqueue = (md_wall_seconds() - w0) / nsteps;
    }
    if (r == MD_OK) {
        MD_CUDA_TRY(cudaEventRecord(t1, st->q.stream));
        MD_CUDA_TRY(cudaEventSynchronize(t1));
        MD_CUDA_TRY(cudaEventElapsedTime(&ms, t0, t1));
        pr.step = 1e-3 * ms / nsteps;
        pr.steps = nsteps;
        pr.integrate /= nsteps;
        pr.nonbonded /= nsteps;
        pr.bonded /= nsteps;
        pr.pme_spread /= nsteps;
        pr.pme_forward /= nsteps;
        pr.pme_solve /= nsteps;
        pr.pme_backward /= nsteps;
        pr.pme_gather /= nsteps;
        pr.parts_sum = pr.integrate + pr.nonbonded + pr.bonded + pr.pme_spread + pr.pme_forward + pr.pme_solve +
                       pr.pme_backward + pr.pme_gather;
        s->energy_valid = 0;
        *out = pr;
    }
    for (i = 0; i < E_COUNT; i++) (void)cudaEventDestroy(ev[i]);
    (void)cudaEventDestroy(t0);
    (void)cudaEventDestroy(t1);
    return r;
}

/* ---- graph ---- */

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>

const char *md_cuda_graph_match_name(md_cuda_graph_match match) {
    switch (match) {
    case MD_CUDA_GRAPH_IDENTICAL: return "identical";
    case MD_CUDA_GRAPH_UPDATABLE: return "updatable";
    case MD_CUDA_GRAPH_REINSTANTIATE: return "re-instantiate";
    }
    return "unknown";
}

/* The comparator registry: a fixed table, read and written under a mutex (a lookup copies its
 * entry out). An entry is made by md_cuda_graph_register (registered = 1) or by the first lookup
 * of an unregistered kernel (the bytewise default); its layout is asked for once. */
typedef struct md__graph_rule_entry {
    const void *func;
    int registered; /* rules from md_cuda_graph_register */
    int nrules;     /* letters registered */
    md_cuda_param_rule rule[MD_CUDA_GRAPH_MAX_PARAMS];
    md_cuda_param_rule launch;
    int resolved;   /* nparams, offset and size are known */
    int nparams;    /* -1: the runtime has no parameter information */
    size_t offset[MD_CUDA_GRAPH_MAX_PARAMS];
    size_t size[MD_CUDA_GRAPH_MAX_PARAMS];
    char family[MD_CUDA_GRAPH_FAMILY_MAX]; /* md_cuda_graph_family ("" if none) */
} md__graph_rule_entry;

static md__graph_rule_entry md__graph_rule_tab[MD_CUDA_GRAPH_REGISTRY_MAX];
static int md__graph_rule_n;
static std::mutex md__graph_rule_mutex;

static md__graph_rule_entry *md__graph_rule_find(const void *func) {
    for (int i = 0; i < md__graph_rule_n; i++)
        if (md__graph_rule_tab[i].func == func) return &md__graph_rule_tab[i];
    return NULL;
}

/* A new entry (the caller holds the mutex), or NULL when the table is full. */
static md__graph_rule_entry *md__graph_rule_add(const void *func) {
    md__graph_rule_entry *e;
    if (md__graph_rule_n >= MD_CUDA_GRAPH_REGISTRY_MAX) return NULL;
    e = &md__graph_rule_tab[md__graph_rule_n++];
    memset(e, 0, sizeof *e);
    e->func = func;
    return e;
}

md_status md_cuda_graph_register(const void *func, const char *rules, md_cuda_param_rule launch) {
    const char *fn = "md_cuda_graph_register";
    md_cuda_param_rule r[MD_CUDA_GRAPH_MAX_PARAMS];
    md__graph_rule_entry *e;
    int n = 0;
    if (!func) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "func", "is NULL");
    if (!rules) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rules", "is NULL");
    if ((int)launch < 0 || launch > MD_CUDA_PARAM_IGNORE)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "launch", "%d is not an md_cuda_param_rule", (int)launch);
    for (; rules[n]; n++) {
        if (n >= MD_CUDA_GRAPH_MAX_PARAMS)
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rules", "has more than %d letters",
                                MD_CUDA_GRAPH_MAX_PARAMS);
        switch (rules[n]) {
        case 'M': r[n] = MD_CUDA_PARAM_MUST_MATCH; break;
        case 'D': r[n] = MD_CUDA_PARAM_MAY_DIFFER; break;
        case 'I': r[n] = MD_CUDA_PARAM_IGNORE; break;
        default:
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rules",
                                "letter %d of \"%.64s\" is '%c': use M (must match), D (may differ) or I (ignore)",
                                n + 1, rules, rules[n]);
        }
    }
    std::lock_guard<std::mutex> lock(md__graph_rule_mutex);
    e = md__graph_rule_find(func);
    if (e && e->registered) {
        const char *name = md_cuda_kernel_name(func);
        if (e->nrules == n && e->launch == launch && memcmp(e->rule, r, (size_t)n * sizeof r[0]) == 0) return MD_OK;
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rules", "kernel %s is already registered with other rules",
                            name ? name : "(not in the launch registry)");
    }
    if (!e && !(e = md__graph_rule_add(func)))
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "registry", "is full (%d kernels, MD_CUDA_GRAPH_REGISTRY_MAX)",
                            MD_CUDA_GRAPH_REGISTRY_MAX);
    e->registered = 1;
    e->nrules = n;
    memcpy(e->rule, r, (size_t)n * sizeof r[0]);
    e->launch = launch;
    return MD_OK;
}

md_status md_cuda_graph_family(const void *func, const char *family) {
    const char *fn = "md_cuda_graph_family";
    md__graph_rule_entry *e;
    char f[MD_CUDA_GRAPH_FAMILY_MAX];
    if (!func) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "func", "is NULL");
    if (!family || !family[0]) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "family", "is NULL or empty");
    snprintf(f, sizeof f, "%s", family);
    std::lock_guard<std::mutex> lock(md__graph_rule_mutex);
    if (!(e = md__graph_rule_find(func)) && !(e = md__graph_rule_add(func)))
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "registry", "is full (%d kernels, MD_CUDA_GRAPH_REGISTRY_MAX)",
                            MD_CUDA_GRAPH_REGISTRY_MAX);
    if (e->family[0] && strcmp(e->family, f) != 0)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "family", "the kernel is already in family %s", e->family);
    memcpy(e->family, f, sizeof f);
    return MD_OK;
}

/* The parameter layout of func from cudaFuncGetParamInfo. The count is found by asking for
 * indices until the runtime says there is no such parameter; that error is cleared, so a later
 * launch check does not see it. nparams = -1 when the runtime does not know func (no attributes
 * either) or func has more than MD_CUDA_GRAPH_MAX_PARAMS parameters. */
static void md__graph_layout(const void *func, int *nparams, size_t *offset, size_t *size) {
    int i;
    for (i = 0; i <= MD_CUDA_GRAPH_MAX_PARAMS; i++) {
        size_t off = 0, sz = 0;
        cudaError_t e = cudaFuncGetParamInfo(func, (size_t)i, &off, &sz);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (i == 0) { /* no parameters, or a function the runtime does not know */
                cudaFuncAttributes a;
                if (cudaFuncGetAttributes(&a, func) != cudaSuccess) {
                    (void)cudaGetLastError();
                    i = -1;
                }
            }
            *nparams = i;
            return;
        }
        if (i < MD_CUDA_GRAPH_MAX_PARAMS) {
            offset[i] = off;
            size[i] = sz;
        }
    }
    *nparams = -1; /* more parameters than the comparator handles */
}

md_status md_cuda_graph_rules(const void *func, md_cuda_kernel_rules *out) {
    const char *fn = "md_cuda_graph_rules";
    md__graph_rule_entry copy;
    int i, known = 0;
    if (!func) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "func", "is NULL");
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "out", "is NULL");
    {
        std::lock_guard<std::mutex> lock(md__graph_rule_mutex);
        md__graph_rule_entry *e = md__graph_rule_find(func);
        if (e && e->resolved) {
            copy = *e;
            known = 1;
        }
    }
    if (!known) { /* ask the runtime without holding the lock, then keep the answer */
        int nparams = -1;
        size_t offset[MD_CUDA_GRAPH_MAX_PARAMS], size[MD_CUDA_GRAPH_MAX_PARAMS];
        md__graph_rule_entry *e;
        md__graph_layout(func, &nparams, offset, size);
        std::lock_guard<std::mutex> lock(md__graph_rule_mutex);
        if (!(e = md__graph_rule_find(func))) e = md__graph_rule_add(func);
        if (!e) { /* the table is full: this answer is not kept */
            memset(&copy, 0, sizeof copy);
            e = &copy;
            e->func = func;
        }
        e->resolved = 1;
        e->nparams = nparams;
        if (nparams > 0) {
            memcpy(e->offset, offset, (size_t)nparams * sizeof offset[0]);
            memcpy(e->size, size, (size_t)nparams * sizeof size[0]);
        }
        if (e != &copy) copy = *e;
    }
    if (copy.registered && copy.nparams >= 0 && copy.nrules != copy.nparams) {
        const char *name = md_cuda_kernel_name(func);
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rules",
                            "kernel %s has %d parameters (cudaFuncGetParamInfo) but its registered rules name %d",
                            name ? name : "(not in the launch registry)", copy.nparams, copy.nrules);
    }
    memset(out, 0, sizeof *out);
    out->func = func;
    out->registered = copy.registered;
    out->nparams = copy.nparams;
    out->launch = copy.registered ? copy.launch : MD_CUDA_PARAM_MUST_MATCH;
    memcpy(out->family, copy.family, sizeof out->family);
    for (i = 0; i < copy.nparams; i++) {
        out->offset[i] = copy.offset[i];
        out->size[i] = copy.size[i];
        out->rule[i] = copy.registered ? copy.rule[i] : MD_CUDA_PARAM_MUST_MATCH;
    }
    return MD_OK;
}

md_status md_cuda_graph_capture(cudaStream_t stream, md_cuda_bench_fn enqueue, void *ctx, cudaGraph_t *graph) {
    const char *fn = "md_cuda_graph_capture";
    cudaGraph_t g = NULL;
    md_status st;
    cudaError_t e;
    if (!graph) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "graph", "is NULL");
    *graph = NULL;
    if (!enqueue) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "enqueue", "is NULL");
    if (!stream)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "stream", "is the legacy default stream, which cannot be captured");
    MD_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    st = enqueue(ctx, stream);
    e = cudaStreamEndCapture(stream, &g); /* always end the capture */
    if (st != MD_OK || e != cudaSuccess) {
        if (g) (void)cudaGraphDestroy(g);
        if (st != MD_OK) {
            (void)cudaGetLastError();
            return st;
        }
        return md_cuda_error(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    *graph = g;
    return MD_OK;
}

/* ---- what the walk and the comparison read of a graph ---- */

typedef struct md__gsnap md__gsnap;

typedef struct md__gsnap_node {
    cudaGraphNode_t node;
    cudaGraphNodeType type;
    int ok;                      /* the node's parameters were read */
    int ndeps;                   /* edges into it */
    cudaKernelNodeParams kp;     /* kernel */
    md_cuda_kernel_rules *rules; /* kernel: the comparator's layout and rules (owned) */
    cudaMemsetParams ms;         /* memset */
    cudaMemcpy3DParms mc;        /* memcpy */
    cudaEvent_t ev;              /* event record or wait */
    cudaHostNodeParams hp;       /* host */
    md__gsnap *child;            /* child graph (owned) */
} md__gsnap_node;

typedef struct md__gsnap_edge {
    int from, to; /* walk indices */
    cudaGraphEdgeData data;
} md__gsnap_edge;

struct md__gsnap {
    int n;
    md__gsnap_node *nodes; /* walk order */
    int nedges;
    md__gsnap_edge *edges; /* sorted by (to, from, data) */
};

typedef struct md__gsnap_key {
    cudaGraphNode_t node;
    int index;
} md__gsnap_key;

static int md__gsnap_key_cmp(const void *a, const void *b) {
    const cudaGraphNode_t x = ((const md__gsnap_key *)a)->node, y = ((const md__gsnap_key *)b)->node;
    return x < y ? -1 : x > y;
}

static int md__gsnap_edge_cmp(const void *a, const void *b) {
    const md__gsnap_edge *x = (const md__gsnap_edge *)a, *y = (const md__gsnap_edge *)b;
    if (x->to != y->to) return x->to < y->to ? -1 : 1;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return memcmp(&x->data, &y->data, sizeof x->data);
}

static void md__gsnap_free(md__gsnap *s) {
    int i;
    if (!s) return;
    for (i = 0; i < s->n; i++) {
        md__gsnap_free(s->nodes[i].child);
        md_free(s->nodes[i].rules);
    }
    md_free(s->nodes);
    md_free(s->edges);
    md_free(s);
}

static int md__gsnap_index(const md__gsnap_key *keys, int n, cudaGraphNode_t node) {
    md__gsnap_key k;
    const md__gsnap_key *f;
    k.node = node;
    k.index = -1;
    f = (const md__gsnap_key *)bsearch(&k, keys, (size_t)n, sizeof k, md__gsnap_key_cmp);
    return f ? f->index : -1;
}

/* Read a graph: its nodes in cudaGraphGetNodes order with their parameters, its edges as walk
 * indices, child graphs recursively. A node whose parameters cannot be read is kept with ok = 0
 * (it compares as opaque). */
static md_status md__gsnap_make(cudaGraph_t g, int depth, md__gsnap **out) {
    const char *fn = "md_cuda_graph";
    md__gsnap *s = NULL;
    cudaGraphNode_t *nodes = NULL, *from = NULL, *to = NULL;
    cudaGraphEdgeData *data = NULL;
    md__gsnap_key *keys = NULL;
    size_t n = 0, ne = 0, i;
    md_status st = MD_OK;
    cudaError_t e;
    *out = NULL;
    if (depth > 16) return md_set_error(MD_ERR_RANGE, fn, 0, "graph", "has child graphs nested deeper than 16");
    if ((e = cudaGraphGetNodes(g, NULL, &n)) != cudaSuccess) return md_cuda_error(e, "cudaGraphGetNodes", __FILE__, __LINE__);
    if ((e = cudaGraphGetEdges(g, NULL, NULL, NULL, &ne)) != cudaSuccess)
        return md_cuda_error(e, "cudaGraphGetEdges", __FILE__, __LINE__);
    if (n > (size_t)INT_MAX / 2 || ne > (size_t)INT_MAX / 2)
        return md_set_error(MD_ERR_RANGE, fn, 0, "graph", "has %zu nodes and %zu edges", n, ne);
    if (!(s = (md__gsnap *)md_alloc_array(1, sizeof *s))) return MD_ERR_OUT_OF_MEMORY;
    memset(s, 0, sizeof *s);
    if (!(s->nodes = (md__gsnap_node *)md_alloc_array(n + 1, sizeof *s->nodes)) ||
        !(s->edges = (md__gsnap_edge *)md_alloc_array(ne + 1, sizeof *s->edges)) ||
        !(nodes = (cudaGraphNode_t *)md_alloc_array(n + 1, sizeof *nodes)) ||
        !(keys = (md__gsnap_key *)md_alloc_array(n + 1, sizeof *keys)) ||
        !(from = (cudaGraphNode_t *)md_alloc_array(ne + 1, sizeof *from)) ||
        !(to = (cudaGraphNode_t *)md_alloc_array(ne + 1, sizeof *to)) ||
        !(data = (cudaGraphEdgeData *)md_alloc_array(ne + 1, sizeof *data))) {
        st = MD_ERR_OUT_OF_MEMORY;
        goto done;
    }
    memset((void *)s->nodes, 0, (n + 1) * sizeof *s->nodes);
    if (n > 0 && (e = cudaGraphGetNodes(g, nodes, &n)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaGraphGetNodes", __FILE__, __LINE__);
        goto done;
    }
    if (ne > 0 && (e = cudaGraphGetEdges(g, from, to, data, &ne)) != cudaSuccess) {
        st = md_cuda_error(e, "cudaGraphGetEdges", __FILE__, __LINE__);
        goto done;
    }
    s->n = (int)n; /* set only now: md__gsnap_free walks s->n nodes */
    s->nedges = (int)ne;
    for (i = 0; i < n; i++) {
        keys[i].node = nodes[i];
        keys[i].index = (int)i;
    }
    qsort(keys, n, sizeof *keys, md__gsnap_key_cmp);
    for (i = 0; i < ne; i++) {
        s->edges[i].from = md__gsnap_index(keys, (int)n, from[i]);
        s->edges[i].to = md__gsnap_index(keys, (int)n, to[i]);
        s->edges[i].data = data[i];
        if (s->edges[i].to >= 0) s->nodes[s->edges[i].to].ndeps++;
    }
    qsort(s->edges, ne, sizeof *s->edges, md__gsnap_edge_cmp);
    for (i = 0; i < n && st == MD_OK; i++) {
        md__gsnap_node *d = &s->nodes[i];
        cudaGraph_t child = NULL;
        d->node = nodes[i];
        if ((e = cudaGraphNodeGetType(nodes[i], &d->type)) != cudaSuccess) {
            st = md_cuda_error(e, "cudaGraphNodeGetType", __FILE__, __LINE__);
            break;
        }
        switch (d->type) {
        case cudaGraphNodeTypeKernel:
            e = cudaGraphKernelNodeGetParams(nodes[i], &d->kp);
            if (e == cudaSuccess && d->kp.func) {
                if (!(d->rules = (md_cuda_kernel_rules *)md_alloc_array(1, sizeof *d->rules))) st = MD_ERR_OUT_OF_MEMORY;
                else if ((st = md_cuda_graph_rules(d->kp.func, d->rules)) == MD_OK) d->ok = 1;
            }
            break;
        case cudaGraphNodeTypeMemset: d->ok = (e = cudaGraphMemsetNodeGetParams(nodes[i], &d->ms)) == cudaSuccess; break;
        case cudaGraphNodeTypeMemcpy: d->ok = (e = cudaGraphMemcpyNodeGetParams(nodes[i], &d->mc)) == cudaSuccess; break;
        case cudaGraphNodeTypeHost: d->ok = (e = cudaGraphHostNodeGetParams(nodes[i], &d->hp)) == cudaSuccess; break;
        case cudaGraphNodeTypeEventRecord:
            d->ok = (e = cudaGraphEventRecordNodeGetEvent(nodes[i], &d->ev)) == cudaSuccess;
            break;
        case cudaGraphNodeTypeWaitEvent: d->ok = (e = cudaGraphEventWaitNodeGetEvent(nodes[i], &d->ev)) == cudaSuccess; break;
        case cudaGraphNodeTypeEmpty:
            e = cudaSuccess;
            d->ok = 1;
            break;
        case cudaGraphNodeTypeGraph:
            if ((e = cudaGraphChildGraphNodeGetGraph(nodes[i], &child)) == cudaSuccess &&
                (st = md__gsnap_make(child, depth + 1, &d->child)) == MD_OK)
                d->ok = 1;
            break;
        default: e = cudaSuccess; break; /* conditionals and the rest: not read */
        }
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
done:
    md_free(nodes);
    md_free(keys);
    md_free(from);
    md_free(to);
    md_free(data);
    if (st != MD_OK) {
        md__gsnap_free(s);
        return st;
    }
    *out = s;
    return MD_OK;
}

/* ---- the walk ---- */

static md_status md__graph_walk(const md__gsnap *s, int depth, md_cuda_graph_visit_fn visit, void *ctx) {
    md_status st;
    int i;
    for (i = 0; i < s->n; i++) {
        const md__gsnap_node *d = &s->nodes[i];
        md_cuda_graph_node v;
        memset((void *)&v, 0, sizeof v);
        v.index = i;
        v.depth = depth;
        v.node = d->node;
        v.type = d->type;
        v.ndeps = d->ndeps;
        v.nparams = -1;
        if (d->type == cudaGraphNodeTypeKernel && d->ok) {
            v.func = d->kp.func;
            v.name = md_cuda_kernel_name(d->kp.func);
            v.grid = d->kp.gridDim;
            v.block = d->kp.blockDim;
            v.smem = d->kp.sharedMemBytes;
            v.nparams = d->kp.kernelParams ? d->rules->nparams : -1;
            v.args = v.nparams >= 0 ? d->kp.kernelParams : NULL;
        }
        if ((st = visit(ctx, &v)) != MD_OK) return st;
        if (d->child && (st = md__graph_walk(d->child, depth + 1, visit, ctx)) != MD_OK) return st;
    }
    return MD_OK;
}

md_status md_cuda_graph_walk(cudaGraph_t graph, md_cuda_graph_visit_fn visit, void *ctx) {
    md__gsnap *s = NULL;
    md_status st;
    if (!graph) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_graph_walk", 0, "graph", "is NULL");
    if (!visit) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_graph_walk", 0, "visit", "is NULL");
    if ((st = md__gsnap_make(graph, 0, &s)) != MD_OK) return st;
    st = md__graph_walk(s, 0, visit, ctx);
    md__gsnap_free(s);
    return st;
}

/* ---- the comparison ---- */

static const char *md__graph_type_name(cudaGraphNodeType t) {
    switch (t) {
    case cudaGraphNodeTypeKernel: return "kernel";
    case cudaGraphNodeTypeMemcpy: return "memcpy";
    case cudaGraphNodeTypeMemset: return "memset";
    case cudaGraphNodeTypeHost: return "host";
    case cudaGraphNodeTypeGraph: return "child graph";
    case cudaGraphNodeTypeEmpty: return "empty";
    case cudaGraphNodeTypeWaitEvent: return "event wait";
    case cudaGraphNodeTypeEventRecord: return "event record";
    case cudaGraphNodeTypeConditional: return "conditional";
    default: return "other";
    }
}

/* The comparison under way: the verdict so far and where it is. */
typedef struct md__gcmp {
    md_cuda_graph_verdict *v;
    char path[64]; /* "node 3", or "node 3.1" inside a child graph */
    int top;       /* walk index in the top-level graph */
} md__gcmp;

/* Keep the strongest difference, with the reason of the first node that has it. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 5, 6)))
#endif
static void md__gcmp_raise(md__gcmp *c, md_cuda_graph_match m, int param, const void *func, const char *fmt, ...) {
    char detail[240];
    va_list ap;
    if (m <= c->v->match) return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    c->v->match = m;
    c->v->node = c->top;
    c->v->param = param;
    c->v->func = func;
    if (func) {
        const char *name = md_cuda_kernel_name(func);
        snprintf(c->v->reason, sizeof c->v->reason, "%.63s (kernel %.60s): %.180s", c->path[0] ? c->path : "graph",
                 name ? name : "(not in the launch registry)", detail);
    } else {
        snprintf(c->v->reason, sizeof c->v->reason, "%s: %s", c->path[0] ? c->path : "graph", detail);
    }
}

static md_cuda_graph_match md__gcmp_kernel(md__gcmp *c, const md__gsnap_node *x, const md__gsnap_node *y) {
    const cudaKernelNodeParams *a = &x->kp, *b = &y->kp;
    md_cuda_graph_match worst = MD_CUDA_GRAPH_IDENTICAL;
    const md_cuda_kernel_rules *r;
    int i;
    if (!x->ok || !y->ok) {
        md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "kernel node parameters could not be read: left to cudaGraphExecUpdate");
        return MD_CUDA_GRAPH_UPDATABLE;
    }
    r = y->rules;
    if (a->func != b->func) {
        const md_cuda_kernel_rules *q = x->rules;
        const char *na = md_cuda_kernel_name(a->func);
        int same = q->family[0] && strcmp(q->family, r->family) == 0 && q->nparams == r->nparams && r->nparams >= 0, i2;
        for (i2 = 0; same && i2 < r->nparams; i2++) same = q->offset[i2] == r->offset[i2] && q->size[i2] == r->size[i2];
        if (!same) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_REINSTANTIATE, -1, b->func, "replaces kernel %.60s%s", na ? na : "(not in the launch registry)",
                           q->family[0] && strcmp(q->family, r->family) == 0 ? " of its family, with another parameter layout" : "");
            return MD_CUDA_GRAPH_REINSTANTIATE;
        }
        md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, b->func, "replaces kernel %.60s of its family %.40s, may differ",
                       na ? na : "(not in the launch registry)", r->family);
        worst = MD_CUDA_GRAPH_UPDATABLE;
    }
    if (a->gridDim.x != b->gridDim.x || a->gridDim.y != b->gridDim.y || a->gridDim.z != b->gridDim.z ||
        a->blockDim.x != b->blockDim.x || a->blockDim.y != b->blockDim.y || a->blockDim.z != b->blockDim.z ||
        a->sharedMemBytes != b->sharedMemBytes) {
        if (r->launch != MD_CUDA_PARAM_IGNORE) {
            const md_cuda_graph_match m =
                r->launch == MD_CUDA_PARAM_MUST_MATCH ? MD_CUDA_GRAPH_REINSTANTIATE : MD_CUDA_GRAPH_UPDATABLE;
            md__gcmp_raise(c, m, -1, b->func, "launch shape %ux%ux%u x %ux%ux%u, %u B shared (was %ux%ux%u x %ux%ux%u, %u B) %s",
                           b->gridDim.x, b->gridDim.y, b->gridDim.z, b->blockDim.x, b->blockDim.y, b->blockDim.z,
                           b->sharedMemBytes, a->gridDim.x, a->gridDim.y, a->gridDim.z, a->blockDim.x, a->blockDim.y,
                           a->blockDim.z, a->sharedMemBytes, m == MD_CUDA_GRAPH_REINSTANTIATE ? "must match" : "may differ");
            if (m > worst) worst = m;
        }
    }
    if (r->nparams < 0 || !a->kernelParams || !b->kernelParams) {
        md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, b->func,
                       "arguments not comparable (no parameter information): left to cudaGraphExecUpdate");
        return worst > MD_CUDA_GRAPH_UPDATABLE ? worst : MD_CUDA_GRAPH_UPDATABLE;
    }
    for (i = 0; i < r->nparams; i++) {
        md_cuda_graph_match m;
        if (r->rule[i] == MD_CUDA_PARAM_IGNORE || memcmp(a->kernelParams[i], b->kernelParams[i], r->size[i]) == 0) continue;
        m = r->rule[i] == MD_CUDA_PARAM_MUST_MATCH ? MD_CUDA_GRAPH_REINSTANTIATE : MD_CUDA_GRAPH_UPDATABLE;
        md__gcmp_raise(c, m, i, b->func, "argument %d (%zu bytes at offset %zu) differs, %s%s", i, r->size[i], r->offset[i],
                       m == MD_CUDA_GRAPH_REINSTANTIATE ? "must match" : "may differ",
                       r->registered ? "" : " (unregistered kernel: bytewise, every argument must match)");
        if (m > worst) worst = m;
    }
    return worst;
}

static md_cuda_graph_match md__gcmp_snap(md__gcmp *c, const md__gsnap *a, const md__gsnap *b, int depth);

static md_cuda_graph_match md__gcmp_node(md__gcmp *c, const md__gsnap_node *x, const md__gsnap_node *y, int depth) {
    const char *t = md__graph_type_name(x->type);
    md_cuda_graph_match m = MD_CUDA_GRAPH_IDENTICAL;
    if (x->type == cudaGraphNodeTypeKernel) return md__gcmp_kernel(c, x, y);
    if (!x->ok || !y->ok) {
        md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "%s node not compared: left to cudaGraphExecUpdate", t);
        return MD_CUDA_GRAPH_UPDATABLE;
    }
    switch (x->type) {
    case cudaGraphNodeTypeMemset: {
        const cudaMemsetParams *a = &x->ms, *b = &y->ms;
        if (a->pitch != b->pitch || a->elementSize != b->elementSize || a->width != b->width || a->height != b->height) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_REINSTANTIATE, -1, NULL,
                           "memset of %zu x %zu elements of %u bytes (was %zu x %zu of %u): sizes must match", b->width,
                           b->height, b->elementSize, a->width, a->height, a->elementSize);
            m = MD_CUDA_GRAPH_REINSTANTIATE;
        } else if (a->dst != b->dst || a->value != b->value) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "memset destination or value differs, may differ");
            m = MD_CUDA_GRAPH_UPDATABLE;
        }
        break;
    }
    case cudaGraphNodeTypeMemcpy: {
        const cudaMemcpy3DParms *a = &x->mc, *b = &y->mc;
        if (a->kind != b->kind || a->extent.width != b->extent.width || a->extent.height != b->extent.height ||
            a->extent.depth != b->extent.depth || a->srcArray != b->srcArray || a->dstArray != b->dstArray ||
            memcmp(&a->srcPos, &b->srcPos, sizeof a->srcPos) != 0 || memcmp(&a->dstPos, &b->dstPos, sizeof a->dstPos) != 0 ||
            a->srcPtr.pitch != b->srcPtr.pitch || a->dstPtr.pitch != b->dstPtr.pitch ||
            a->srcPtr.xsize != b->srcPtr.xsize || a->dstPtr.xsize != b->dstPtr.xsize ||
            a->srcPtr.ysize != b->srcPtr.ysize || a->dstPtr.ysize != b->dstPtr.ysize) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_REINSTANTIATE, -1, NULL,
                           "memcpy of %zu bytes, kind %d (was %zu, kind %d): extent, pitches and kind must match",
                           b->extent.width, (int)b->kind, a->extent.width, (int)a->kind);
            m = MD_CUDA_GRAPH_REINSTANTIATE;
        } else if (a->srcPtr.ptr != b->srcPtr.ptr || a->dstPtr.ptr != b->dstPtr.ptr) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "memcpy source or destination differs, may differ");
            m = MD_CUDA_GRAPH_UPDATABLE;
        }
        break;
    }
    case cudaGraphNodeTypeHost:
        if (x->hp.fn != y->hp.fn || x->hp.userData != y->hp.userData) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "host function or data differs, may differ");
            m = MD_CUDA_GRAPH_UPDATABLE;
        }
        break;
    case cudaGraphNodeTypeEventRecord:
    case cudaGraphNodeTypeWaitEvent:
        if (x->ev != y->ev) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "%s event differs, may differ", t);
            m = MD_CUDA_GRAPH_UPDATABLE;
        }
        break;
    case cudaGraphNodeTypeEmpty: break;
    case cudaGraphNodeTypeGraph: m = md__gcmp_snap(c, x->child, y->child, depth + 1); break;
    default:
        md__gcmp_raise(c, MD_CUDA_GRAPH_UPDATABLE, -1, NULL, "%s node not compared: left to cudaGraphExecUpdate", t);
        m = MD_CUDA_GRAPH_UPDATABLE;
    }
    return m;
}

static md_cuda_graph_match md__gcmp_snap(md__gcmp *c, const md__gsnap *a, const md__gsnap *b, int depth) {
    md_cuda_graph_match worst = MD_CUDA_GRAPH_IDENTICAL;
    char base[sizeof c->path];
    int i;
    memcpy(base, c->path, sizeof base);
    if (a->n != b->n || a->nedges != b->nedges) {
        md__gcmp_raise(c, MD_CUDA_GRAPH_REINSTANTIATE, -1, NULL, "topology: %d nodes and %d edges (was %d and %d)", b->n,
                       b->nedges, a->n, a->nedges);
        return MD_CUDA_GRAPH_REINSTANTIATE;
    }
    for (i = 0; i < a->n; i++) {
        const md__gsnap_node *x = &a->nodes[i], *y = &b->nodes[i];
        md_cuda_graph_match m;
        if (depth == 0) c->top = i;
        if (base[0]) snprintf(c->path, sizeof c->path, "%.48s.%d", base, i);
        else snprintf(c->path, sizeof c->path, "node %d", i);
        c->v->nodes++;
        if (x->type != y->type) {
            md__gcmp_raise(c, MD_CUDA_GRAPH_REINSTANTIATE, -1, NULL, "topology: a %s node (was a %s node)",
                           md__graph_type_name(y->type), md__graph_type_name(x->type));
            c->v->differing++;
            worst = MD_CUDA_GRAPH_REINSTANTIATE;
            continue;
        }
        m = md__gcmp_node(c, x, y, depth);
        if (m != MD_CUDA_GRAPH_IDENTICAL) c->v->differing++;
        if (m > worst) worst = m;
    }
    for (i = 0; i < a->nedges; i++) {
        const md__gsnap_edge *x = &a->edges[i], *y = &b->edges[i];
        if (md__gsnap_edge_cmp(x, y) == 0) continue;
        if (depth == 0) c->top = y->to;
        if (base[0]) snprintf(c->path, sizeof c->path, "%.48s.%d", base, y->to);
        else snprintf(c->path, sizeof c->path, "node %d", y->to);
        md__gcmp_raise(c, MD_CUDA_GRAPH_REINSTANTIATE, -1, NULL,
                       "topology: its dependencies differ (an edge from node %d; was node %d to node %d)", y->from,
                       x->from, x->to);
        worst = MD_CUDA_GRAPH_REINSTANTIATE;
        break;
    }
    memcpy(c->path, base, sizeof base);
    return worst;
}

static void md__graph_verdict_init(md_cuda_graph_verdict *v) {
    memset(v, 0, sizeof *v);
    v->match = MD_CUDA_GRAPH_IDENTICAL;
    v->node = -1;
    v->param = -1;
}

static void md__graph_compare_snaps(const md__gsnap *a, const md__gsnap *b, md_cuda_graph_verdict *v) {
    md__gcmp c;
    md__graph_verdict_init(v);
    memset(&c, 0, sizeof c);
    c.v = v;
    c.top = -1;
    (void)md__gcmp_snap(&c, a, b, 0);
    if (v->match == MD_CUDA_GRAPH_IDENTICAL) {
        snprintf(v->reason, sizeof v->reason, "identical: %d nodes, every compared value equal", v->nodes);
    } else {
        char r[sizeof v->reason];
        snprintf(r, sizeof r, "%s", v->reason);
        snprintf(v->reason, sizeof v->reason, "%.260s (%d of %d nodes differ)", r, v->differing, v->nodes);
    }
}

md_status md_cuda_graph_compare(cudaGraph_t a, cudaGraph_t b, md_cuda_graph_verdict *verdict) {
    const char *fn = "md_cuda_graph_compare";
    md__gsnap *sa = NULL, *sb = NULL;
    md_status st;
    if (!a || !b) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, a ? "b" : "a", "is NULL");
    if (!verdict) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "verdict", "is NULL");
    if ((st = md__gsnap_make(a, 0, &sa)) != MD_OK) return st;
    if ((st = md__gsnap_make(b, 0, &sb)) != MD_OK) {
        md__gsnap_free(sa);
        return st;
    }
    md__graph_compare_snaps(sa, sb, verdict);
    md__gsnap_free(sa);
    md__gsnap_free(sb);
    return MD_OK;
}

static int md__gsnap_kernel_differs(const md__gsnap_node *x, const md__gsnap_node *y) {
    const cudaKernelNodeParams *a = &x->kp, *b = &y->kp;
    int i;
    if (!x->ok || !y->ok || a->func != b->func || !a->kernelParams || !b->kernelParams || x->rules->nparams < 0) return 1;
    if (a->gridDim.x != b->gridDim.x || a->gridDim.y != b->gridDim.y || a->gridDim.z != b->gridDim.z ||
        a->blockDim.x != b->blockDim.x || a->blockDim.y != b->blockDim.y || a->blockDim.z != b->blockDim.z ||
        a->sharedMemBytes != b->sharedMemBytes)
        return 1;
    for (i = 0; i < x->rules->nparams; i++)
        if (memcmp(a->kernelParams[i], b->kernelParams[i], x->rules->size[i]) != 0) return 1;
    return 0;
}

md_status md_cuda_graph_kernel_diff(cudaGraph_t a, cudaGraph_t b, cudaGraphNode_t *in_a, cudaGraphNode_t *in_b, int cap,
                                    int *count) {
    const char *fn = "md_cuda_graph_kernel_diff";
    md__gsnap *sa = NULL, *sb = NULL;
    md_status st = MD_OK;
    int i, k = 0;
    if (!a || !b) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, a ? "b" : "a", "is NULL");
    if (!count || cap < 0 || (cap > 0 && (!in_a || !in_b)))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "in_a/in_b/count", "are NULL or cap < 0");
    if ((st = md__gsnap_make(a, 0, &sa)) != MD_OK) return st;
    if ((st = md__gsnap_make(b, 0, &sb)) != MD_OK) goto done;
    if (sa->n != sb->n || sa->nedges != sb->nedges) {
        st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "b", "has %d nodes and %d edges, a has %d and %d: another topology",
                          sb->n, sb->nedges, sa->n, sa->nedges);
        goto done;
    }
    for (i = 0; i < sa->nedges; i++)
        if (md__gsnap_edge_cmp(&sa->edges[i], &sb->edges[i]) != 0) {
            st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "b", "node %d has other dependencies: another topology",
                              sb->edges[i].to);
            goto done;
        }
    for (i = 0; i < sa->n; i++) {
        const md__gsnap_node *x = &sa->nodes[i], *y = &sb->nodes[i];
        if (x->type != y->type) {
            st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "b", "node %d is a %s node, in a a %s node", i,
                              md__graph_type_name(y->type), md__graph_type_name(x->type));
            goto done;
        }
        if (x->type == cudaGraphNodeTypeKernel) {
            if (!md__gsnap_kernel_differs(x, y)) continue;
            if (k >= cap) {
                st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "cap", "%d: more kernel nodes differ", cap);
                goto done;
            }
            in_a[k] = x->node;
            in_b[k] = y->node;
            k++;
        } else {
            md_cuda_graph_verdict v;
            md__gcmp c;
            md__graph_verdict_init(&v);
            memset(&c, 0, sizeof c);
            c.v = &v;
            c.top = i;
            snprintf(c.path, sizeof c.path, "node %d", i);
            if (md__gcmp_node(&c, x, y, 0) != MD_CUDA_GRAPH_IDENTICAL) {
                st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "b", "%s: not a kernel node", v.reason);
                goto done;
            }
        }
    }
    *count = k;
done:
    md__gsnap_free(sa);
    md__gsnap_free(sb);
    return st;
}

md_status md_cuda_graph_exec_set_kernels(cudaGraphExec_t exec, const cudaGraphNode_t *in_exec, const cudaGraphNode_t *src,
                                         int count) {
    const char *fn = "md_cuda_graph_exec_set_kernels";
    int k;
    if (!exec) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "exec", "is NULL");
    if (count < 0 || (count > 0 && (!in_exec || !src)))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "in_exec/src", "are NULL or count < 0");
    for (k = 0; k < count; k++) {
        cudaKernelNodeParams p;
        MD_CUDA_TRY(cudaGraphKernelNodeGetParams(src[k], &p));
        MD_CUDA_TRY(cudaGraphExecKernelNodeSetParams(exec, in_exec[k], &p));
    }
    return MD_OK;
}

/* ---- the cache ---- */

md_status md_cuda_graph_instantiate(cudaGraph_t g, cudaStream_t stream, cudaGraphExec_t *exec) {
    cudaError_t e;
    if (!g || !exec)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_graph_instantiate", 0, "g/exec", "is NULL");
    *exec = NULL;
    if ((e = cudaGraphInstantiate(exec, g, cudaGraphInstantiateFlagUseNodePriority)) != cudaSuccess) {
        *exec = NULL;
        return md_cuda_error(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    if ((e = cudaGraphUpload(*exec, stream)) != cudaSuccess) {
        (void)cudaGraphExecDestroy(*exec);
        *exec = NULL;
        return md_cuda_error(e, "cudaGraphUpload", __FILE__, __LINE__);
    }
    return MD_OK;
}

/* Make g (with its snapshot, may be NULL) the cache's graph and exec (NULL: the executable was
 * updated from g and stays) its executable graph. */
static void md__graph_cache_keep(md_cuda_graph_cache *c, cudaGraph_t g, md__gsnap *snap, cudaGraphExec_t exec) {
    md__gsnap_free((md__gsnap *)c->snap);
    if (c->graph) (void)cudaGraphDestroy(c->graph);
    if (exec) {
        if (c->exec) (void)cudaGraphExecDestroy(c->exec);
        c->exec = exec;
    }
    c->graph = g;
    c->snap = snap;
}

md_status md_cuda_graph_cache_capture(md_cuda_graph_cache *c, cudaStream_t stream, md_cuda_bench_fn enqueue,
                                      void *ctx) {
    const char *fn = "md_cuda_graph_cache_capture";
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    md__gsnap *sb = NULL;
    md_status st;
    if (!c) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "c", "is NULL");
    if ((int)c->policy < 0 || c->policy > MD_CUDA_GRAPH_POLICY_REINSTANTIATE)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "policy", "%d is not an md_cuda_graph_policy", (int)c->policy);
    if ((st = md_cuda_graph_capture(stream, enqueue, ctx, &g)) != MD_OK) return st;
    c->captures++;
    if (c->exec && c->policy == MD_CUDA_GRAPH_POLICY_COMPARE) {
        md__gsnap *sa = (md__gsnap *)c->snap;
        if (!sa) {
            if ((st = md__gsnap_make(c->graph, 0, &sa)) != MD_OK) goto fail;
            c->snap = sa;
        }
        if ((st = md__gsnap_make(g, 0, &sb)) != MD_OK) goto fail;
        md__graph_compare_snaps(sa, sb, &c->last);
        if (c->last.match == MD_CUDA_GRAPH_IDENTICAL) {
            c->identical++;
            md__gsnap_free(sb);
            (void)cudaGraphDestroy(g);
            return MD_OK;
        }
        if (c->last.match == MD_CUDA_GRAPH_UPDATABLE) {
            cudaGraphExecUpdateResultInfo info;
            char r[sizeof c->last.reason];
            memset(&info, 0, sizeof info);
            if (cudaGraphExecUpdate(c->exec, g, &info) == cudaSuccess) {
                c->updates++;
                md__graph_cache_keep(c, g, sb, NULL);
                return MD_OK;
            }
            (void)cudaGetLastError();
            c->refused++;
            snprintf(r, sizeof r, "%s", c->last.reason);
            snprintf(c->last.reason, sizeof c->last.reason, "%.250s; cudaGraphExecUpdate refused (result %d)", r,
                     (int)info.result);
            c->last.match = MD_CUDA_GRAPH_REINSTANTIATE;
        }
    } else {
        md__graph_verdict_init(&c->last);
        c->last.match = MD_CUDA_GRAPH_REINSTANTIATE;
        snprintf(c->last.reason, sizeof c->last.reason, "%s",
                 c->exec ? "policy: every capture is instantiated anew" : "first capture");
    }
    if ((st = md_cuda_graph_instantiate(g, stream, &exec)) != MD_OK) goto fail;
    c->instantiations++;
    md__graph_cache_keep(c, g, sb, exec);
    return MD_OK;
fail:
    md__gsnap_free(sb);
    if (g) (void)cudaGraphDestroy(g);
    return st;
}

md_status md_cuda_graph_cache_launch(md_cuda_graph_cache *c, cudaStream_t stream) {
    if (!c || !c->exec)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_graph_cache_launch", 0, "c",
                            "holds no executable graph (md_cuda_graph_cache_capture first)");
    MD_CUDA_TRY(cudaGraphLaunch(c->exec, stream));
    c->launches++;
    return MD_OK;
}

void md_cuda_graph_cache_destroy(md_cuda_graph_cache *c) {
    if (!c) return;
    md__gsnap_free((md__gsnap *)c->snap);
    if (c->exec) (void)cudaGraphExecDestroy(c->exec);
    if (c->graph) (void)cudaGraphDestroy(c->graph);
    memset(c, 0, sizeof *c);
}

/* ---- explicit kernel nodes in a capture ---- */

/* The stream's capture: its status, graph and current dependencies with their edge data (driver
 * arrays, valid until the next call on the stream). */
static md_status md__graph_capture_info(const char *fn, cudaStream_t stream, cudaStreamCaptureStatus *cs, cudaGraph_t *g,
                                        const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges, size_t *ndeps) {
    *g = NULL;
    *deps = NULL;
    *edges = NULL;
    *ndeps = 0;
    MD_CUDA_TRY(cudaStreamGetCaptureInfo(stream, cs, NULL, g, deps, edges, ndeps));
    if (*cs == cudaStreamCaptureStatusInvalidated)
        return md_set_error(MD_ERR_CUDA, fn, 0, "stream", "its capture was invalidated by an earlier error");
    return MD_OK;
}

/* Add a node after the capture's current dependencies and make it their only successor. */
static md_status md__graph_capture_add(cudaStream_t stream, cudaGraph_t g, const cudaGraphNode_t *deps,
                                       const cudaGraphEdgeData *edges, size_t ndeps, cudaGraphNodeParams *p,
                                       cudaGraphNode_t *node) {
    MD_CUDA_TRY(cudaGraphAddNode(node, g, deps, edges, ndeps, p));
    MD_CUDA_TRY(cudaStreamUpdateCaptureDependencies(stream, node, NULL, 1, cudaStreamSetCaptureDependencies));
    return MD_OK;
}

static md_status md__graph_check_args(const char *fn, const void *func, void **args, int nargs) {
    md_cuda_kernel_rules r;
    md_status st;
    if (!func) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "func", "is NULL");
    if (nargs < 0 || (nargs > 0 && !args))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "args", "%d arguments at %p", nargs, (void *)args);
    if ((st = md_cuda_graph_rules(func, &r)) != MD_OK) return st;
    if (r.nparams >= 0 && r.nparams != nargs) {
        const char *name = md_cuda_kernel_name(func);
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nargs", "is %d; kernel %s takes %d", nargs,
                            name ? name : "(not in the launch registry)", r.nparams);
    }
    return MD_OK;
}

md_status md_cuda_graph_kernel_node(cudaStream_t stream, const void *func, const char *name, dim3 grid, dim3 block,
                                    unsigned int smem, void **args, int nargs, cudaGraphNode_t *node) {
    const char *fn = "md_cuda_graph_kernel_node";
    cudaStreamCaptureStatus cs;
    cudaGraph_t g;
    const cudaGraphNode_t *deps;
    const cudaGraphEdgeData *edges;
    size_t ndeps;
    md_status st;
    if (!node) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "node", "is NULL");
    *node = NULL;
    if (name && func) (void)md_cuda_kernel_register(func, name);
    if ((st = md__graph_check_args(fn, func, args, nargs)) != MD_OK) return st;
    if ((st = md__graph_capture_info(fn, stream, &cs, &g, &deps, &edges, &ndeps)) != MD_OK) return st;
    if (cs == cudaStreamCaptureStatusNone) {
        const cudaError_t e = cudaLaunchKernel(func, grid, block, args, (size_t)smem, stream);
        if (e != cudaSuccess) return md_cuda_launch_error(e, func, __FILE__, __LINE__);
        return MD_OK;
    }
    {
        cudaGraphNodeParams p = {};
        p.type = cudaGraphNodeTypeKernel;
        p.kernel.func = (void *)func;
        p.kernel.gridDim = grid;
        p.kernel.blockDim = block;
        p.kernel.sharedMemBytes = smem;
        p.kernel.kernelParams = args;
        return md__graph_capture_add(stream, g, deps, edges, ndeps, &p, node);
    }
}

md_status md_cuda_graph_kernel_node_set(cudaGraphExec_t exec, cudaGraphNode_t node, const void *func, dim3 grid,
                                        dim3 block, unsigned int smem, void **args, int nargs) {
    const char *fn = "md_cuda_graph_kernel_node_set";
    cudaKernelNodeParams p;
    if (!exec) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "exec", "is NULL");
    if (!node) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "node", "is NULL (a launch outside a capture makes no node)");
    if (!func) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "func", "is NULL");
    if (nargs < 0 || (nargs > 0 && !args))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "args", "%d arguments at %p", nargs, (void *)args);
    memset((void *)&p, 0, sizeof p);
    p.func = (void *)func;
    p.gridDim = grid;
    p.blockDim = block;
    p.sharedMemBytes = smem;
    p.kernelParams = args;
    MD_CUDA_TRY(cudaGraphExecKernelNodeSetParams(exec, node, &p));
    return MD_OK;
}

/* ---- conditional nodes ---- */

__global__ void md__graph_cond_word_kernel(cudaGraphConditionalHandle h, const long long *__restrict__ word) {
    cudaGraphSetConditional(h, *word != 0 ? 1u : 0u);
}

__global__ void md__graph_loop_init_kernel(cudaGraphConditionalHandle h, long long *count, long long n,
                                           const unsigned long long *__restrict__ flags) {
    *count = 0;
    cudaGraphSetConditional(h, (n > 0 && !(flags && flags[0])) ? 1u : 0u);
}

__global__ void md__graph_loop_next_kernel(cudaGraphConditionalHandle h, long long *count, long long n,
                                           const unsigned long long *__restrict__ flags) {
    const long long c = *count + 1;
    *count = c;
    cudaGraphSetConditional(h, (c < n && !(flags && flags[0])) ? 1u : 0u);
}

/* The capture on stream, which must be active. */
static md_status md__graph_need_capture(const char *fn, cudaStream_t stream, cudaGraph_t *g, const cudaGraphNode_t **deps,
                                        const cudaGraphEdgeData **edges, size_t *ndeps) {
    cudaStreamCaptureStatus cs;
    md_status st;
    if (!stream) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "stream", "is the legacy default stream");
    if ((st = md__graph_capture_info(fn, stream, &cs, g, deps, edges, ndeps)) != MD_OK) return st;
    if (cs != cudaStreamCaptureStatusActive)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "stream",
                            "is not capturing: conditional nodes exist only in graphs (md_cuda_graph_capture)");
    return MD_OK;
}

md_status md_cuda_graph_add_child(cudaStream_t stream, cudaGraph_t child, cudaGraphNode_t *node) {
    const char *fn = "md_cuda_graph_add_child";
    cudaGraph_t g;
    const cudaGraphNode_t *deps;
    const cudaGraphEdgeData *edges;
    size_t ndeps;
    cudaGraphNode_t n = NULL;
    md_status st;
    if (node) *node = NULL;
    if (!child) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "child", "is NULL");
    if ((st = md__graph_need_capture(fn, stream, &g, &deps, &edges, &ndeps)) != MD_OK) return st;
    {
        cudaGraphNodeParams p = {};
        p.type = cudaGraphNodeTypeGraph;
        p.graph.graph = child;
        p.graph.ownership = cudaGraphChildGraphOwnershipClone;
        if ((st = md__graph_capture_add(stream, g, deps, edges, ndeps, &p, &n)) != MD_OK) return st;
    }
    if (node) *node = n;
    return MD_OK;
}

md_status md_cuda_graph_cond_handle(cudaStream_t stream, unsigned int default_value, int assign_default,
                                    cudaGraphConditionalHandle *handle) {
    const char *fn = "md_cuda_graph_cond_handle";
    cudaGraph_t g;
    const cudaGraphNode_t *deps;
    const cudaGraphEdgeData *edges;
    size_t ndeps;
    md_status st;
    if (!handle) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "handle", "is NULL");
    if ((st = md__graph_need_capture(fn, stream, &g, &deps, &edges, &ndeps)) != MD_OK) return st;
    MD_CUDA_TRY(cudaGraphConditionalHandleCreate(handle, g, default_value, assign_default ? cudaGraphCondAssignDefault : 0));
    return MD_OK;
}

md_status md_cuda_graph_cond_node(cudaStream_t stream, cudaStream_t body_stream, cudaGraphConditionalNodeType type,
                                  cudaGraphConditionalHandle handle, md_cuda_bench_fn body, void *ctx,
                                  cudaGraphNode_t *node) {
    const char *fn = "md_cuda_graph_cond_node";
    cudaGraph_t g, bg, ended = NULL;
    const cudaGraphNode_t *deps;
    const cudaGraphEdgeData *edges;
    size_t ndeps;
    cudaGraphNode_t n = NULL;
    md_status st;
    cudaError_t e;
    if (node) *node = NULL;
    if (!body) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "body", "is NULL");
    if (!body_stream || body_stream == stream)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "body_stream", "must be a stream of its own (it is %s)",
                            body_stream ? "the capturing stream" : "the legacy default stream");
    if (type != cudaGraphCondTypeIf && type != cudaGraphCondTypeWhile)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "type", "%d is neither cudaGraphCondTypeIf nor cudaGraphCondTypeWhile",
                            (int)type);
    if ((st = md__graph_need_capture(fn, stream, &g, &deps, &edges, &ndeps)) != MD_OK) return st;
    {
        cudaGraphNodeParams p = {};
        p.type = cudaGraphNodeTypeConditional;
        p.conditional.handle = handle;
        p.conditional.type = type;
        p.conditional.size = 1;
        if ((st = md__graph_capture_add(stream, g, deps, edges, ndeps, &p, &n)) != MD_OK) return st;
        bg = p.conditional.phGraph_out[0];
    }
    MD_CUDA_TRY(cudaStreamBeginCaptureToGraph(body_stream, bg, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
    st = body(ctx, body_stream);
    e = cudaStreamEndCapture(body_stream, &ended); /* always end it; the body graph belongs to the node */
    if (st != MD_OK) return st;
    if (e != cudaSuccess) return md_cuda_error(e, "cudaStreamEndCapture(body)", __FILE__, __LINE__);
    if (node) *node = n;
    return MD_OK;
}

md_status md_cuda_graph_cond_from_word(cudaStream_t stream, cudaGraphConditionalHandle handle, const long long *d_word) {
    if (!d_word) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_graph_cond_from_word", 0, "d_word", "is NULL");
    MD_CUDA_GRAPH_RULES(md__graph_cond_word_kernel, "DD", MD_CUDA_PARAM_MUST_MATCH);
    MD_CUDA_LAUNCH(md__graph_cond_word_kernel, 1, 1, 0, stream, handle, d_word);
    return MD_OK;
}

typedef struct md__graph_loop_ctx {
    md_cuda_bench_fn body;
    void *ctx;
    cudaGraphConditionalHandle h;
    long long *count;
    long long n;
    const unsigned long long *flags;
} md__graph_loop_ctx;

static md_status md__graph_loop_body(void *ctx, cudaStream_t s) {
    md__graph_loop_ctx *l = (md__graph_loop_ctx *)ctx;
    md_status st = l->body(l->ctx, s);
    if (st != MD_OK) return st;
    MD_CUDA_LAUNCH(md__graph_loop_next_kernel, 1, 1, 0, s, l->h, l->count, l->n, l->flags);
    return MD_OK;
}

md_status md_cuda_graph_loop(cudaStream_t stream, cudaStream_t body_stream, long long *d_count, long long n,
                             const unsigned long long *d_flags, md_cuda_bench_fn body, void *ctx) {
    const char *fn = "md_cuda_graph_loop";
    md__graph_loop_ctx l;
    md_status st;
    if (!d_count) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_count", "is NULL");
    if (!body) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "body", "is NULL");
    if (n < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 0 (got %lld)", n);
    MD_CUDA_GRAPH_RULES(md__graph_loop_init_kernel, "DDDD", MD_CUDA_PARAM_MUST_MATCH);
    MD_CUDA_GRAPH_RULES(md__graph_loop_next_kernel, "DDDD", MD_CUDA_PARAM_MUST_MATCH);
    memset((void *)&l, 0, sizeof l);
    if ((st = md_cuda_graph_cond_handle(stream, 0, 0, &l.h)) != MD_OK) return st;
    l.body = body;
    l.ctx = ctx;
    l.count = d_count;
    l.n = n;
    l.flags = d_flags;
    MD_CUDA_LAUNCH(md__graph_loop_init_kernel, 1, 1, 0, stream, l.h, d_count, n, d_flags);
    return md_cuda_graph_cond_node(stream, body_stream, cudaGraphCondTypeWhile, l.h, md__graph_loop_body, &l, NULL);
}

md_status md_cuda_graph_run_if(cudaStream_t stream, cudaStream_t body_stream, const long long *d_word,
                               md_cuda_bench_fn body, void *ctx) {
    const char *fn = "md_cuda_graph_run_if";
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaGraphConditionalHandle h;
    md_status st;
    if (!d_word) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_word", "is NULL");
    if (!body) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "body", "is NULL");
    if (stream) MD_CUDA_TRY(cudaStreamIsCapturing(stream, &cs));
    if (cs != cudaStreamCaptureStatusActive) return body(ctx, stream);
    if ((st = md_cuda_graph_cond_handle(stream, 0, 0, &h)) != MD_OK || (st = md_cuda_graph_cond_from_word(stream, h, d_word)) != MD_OK)
        return st;
    return md_cuda_graph_cond_node(stream, body_stream, cudaGraphCondTypeIf, h, body, ctx, NULL);
}

__global__ void md__timestamp_kernel(unsigned long long *times, long long *next, long long cap) {
    const long long i = *next;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (i < cap) {
        times[i] = t;
        *next = i + 1;
    }
}

md_status md_cuda_timestamp_enqueue(cudaStream_t stream, unsigned long long *d_times, long long *d_next, long long cap) {
    const char *fn = "md_cuda_timestamp_enqueue";
    if (!d_times || !d_next) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d_times/d_next", "is NULL");
    if (cap < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "cap", "must be >= 0 (got %lld)", cap);
    MD_CUDA_GRAPH_RULES(md__timestamp_kernel, "DDM", MD_CUDA_PARAM_MUST_MATCH);
    MD_CUDA_LAUNCH(md__timestamp_kernel, 1, 1, 0, stream, d_times, d_next, cap);
    return MD_OK;
}

/* ---- sched ---- */

#include <algorithm>
#include <condition_variable>
#include <new>
#include <thread>
#include <vector>

namespace {
enum md__sched_tstate { MD__SCHED_T_READY = 0, MD__SCHED_T_WAITING, MD__SCHED_T_BARRIER, MD__SCHED_T_DONE };

struct md__sched_trun {
    md_cuda_task task;      /* what the task function gets */
    md_co co;               /* sequential and coroutines: the task runs as a coroutine */
    cudaEvent_t begin, end; /* the open batch's events */
    int begun;              /* a begin was recorded since the last wait */
    int state;              /* md__sched_tstate (sequential and coroutines) */
    cudaError_t wait_err;   /* what the scheduler's poll found */
    long long polls_now;    /* polls of the current wait */
    double wait_t0;         /* host time of the wait's record */
    long long done;         /* completed waits */
    md_status result;       /* the task function's status */
    md_cuda_task_fn fn;
    void *arg;
    std::vector<float> iv;  /* batch intervals (ms from the origin event): begin, end pairs */
};

struct md__sched_run {
    md_cuda_sched_mode mode;
    int ntask;
    int device;
    md__sched_trun *t;
    cudaEvent_t origin;
    std::mutex mu;               /* threads: barrier, failure, lag */
    std::condition_variable cv;
    int live;                    /* tasks not yet returned */
    int arrived;                 /* at the current barrier */
    long long generation;        /* barriers completed */
    md_status barrier_status;
    md_cuda_barrier_fn barrier_fn;
    void *barrier_arg;
    std::atomic<int> aborted;    /* a task (or a barrier's work) failed */
    md_status first_status;
    int first_task;              /* -1: the barrier's work */
    char first_message[512];
    long long max_done;
};
} // namespace

const char *md_cuda_sched_mode_name(md_cuda_sched_mode mode) {
    switch (mode) {
    case MD_CUDA_SCHED_SEQUENTIAL: return "sequential";
    case MD_CUDA_SCHED_THREADS: return "threads";
    case MD_CUDA_SCHED_COROUTINES: return "coroutines";
    default: return "?";
    }
}

/* Record the first failure (a task's, or the barrier work's: task -1) and make every later wait
 * and barrier fail. The caller holds r->mu in threads mode. */
static void md__sched_run_fail_locked(md__sched_run *r, int task, md_status st) {
    if (r->aborted.load()) return;
    r->first_status = st;
    r->first_task = task;
    snprintf(r->first_message, sizeof r->first_message, "%s", md_last_error());
    r->aborted.store(1);
}

static md_status md__sched_aborted_error(md__sched_run *r, const char *fn) {
    if (r->first_task < 0) return md_set_error(r->first_status, fn, 0, "fn", "the barrier's work failed: %s", r->first_message);
    return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "another task failed (task %d): %s", r->first_task,
                        r->first_message);
}

static md__sched_run *md__sched_run_of(md_cuda_task *t, const char *fn, md_status *st) {
    md__sched_run *r = t ? (md__sched_run *)t->run : NULL;
    *st = MD_OK;
    if (!r || t->index < 0 || t->index >= r->ntask) {
        *st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is not a task of a running md_cuda_sched_run");
        return NULL;
    }
    if (r->aborted.load()) {
        *st = md__sched_aborted_error(r, fn);
        return NULL;
    }
    return r;
}

/* A batch's wait completed: its interval and the lag counters. */
static void md__sched_batch_done(md__sched_run *r, md__sched_trun *tr) {
    md_cuda_task_stats *s = &tr->task.stats;
    long long lag;
    float b = 0.0f, e = 0.0f;
    if (tr->begun && cudaEventElapsedTime(&b, r->origin, tr->begin) == cudaSuccess &&
        cudaEventElapsedTime(&e, r->origin, tr->end) == cudaSuccess) {
        tr->iv.push_back(b);
        tr->iv.push_back(e);
        s->gpu_s += 1e-3 * (double)(e - b);
    } else {
        s->unmeasured++;
    }
    tr->begun = 0;
    {
        std::lock_guard<std::mutex> lock(r->mu);
        tr->done++;
        if (tr->done > r->max_done) r->max_done = tr->done;
        lag = r->max_done - tr->done;
    }
    if (lag > s->max_lag) s->max_lag = lag;
    s->host_wait_s += md_wall_seconds() - tr->wait_t0;
}

md_status md_cuda_task_begin(md_cuda_task *t, cudaStream_t stream) {
    md_status st;
    md__sched_run *r = md__sched_run_of(t, "md_cuda_task_begin", &st);
    md__sched_trun *tr;
    if (!r) return st;
    tr = &r->t[t->index];
    MD_CUDA_TRY(cudaEventRecord(tr->begin, stream));
    tr->begun = 1;
    return MD_OK;
}

md_status md_cuda_task_wait(md_cuda_task *t, cudaStream_t stream) {
    md_status st;
    md__sched_run *r = md__sched_run_of(t, "md_cuda_task_wait", &st);
    md__sched_trun *tr;
    if (!r) return st;
    tr = &r->t[t->index];
    t->stats.waits++;
    MD_CUDA_TRY(cudaEventRecord(tr->end, stream));
    tr->wait_t0 = md_wall_seconds();
    if (r->mode == MD_CUDA_SCHED_COROUTINES) {
        tr->state = MD__SCHED_T_WAITING;
        tr->polls_now = 0;
        tr->wait_err = cudaSuccess;
        if ((st = md_co_yield(&tr->co)) != MD_OK) return st;
        /* resumed by the scheduler once the event completed or failed (counters done there) */
        if (r->aborted.load()) return md__sched_aborted_error(r, "md_cuda_task_wait");
        if (tr->wait_err != cudaSuccess)
            return md_cuda_error(tr->wait_err, "cudaEventQuery (md_cuda_task_wait)", __FILE__, __LINE__);
        return MD_OK;
    }
    MD_CUDA_TRY(cudaEventSynchronize(tr->end));
    md__sched_batch_done(r, tr);
    return MD_OK;
}

/* Run the barrier's work once and release every task at it; r->mu held (threads) or the only
 * thread (the other modes). */
static void md__sched_barrier_release(md__sched_run *r) {
    int i;
    if (r->aborted.load()) { /* a task failed: the barrier's work is not done, everyone unwinds */
        r->barrier_status = MD_ERR_INVALID_ARGUMENT;
    } else {
        r->barrier_status = r->barrier_fn ? r->barrier_fn(r->barrier_arg) : MD_OK;
        if (r->barrier_status != MD_OK) md__sched_run_fail_locked(r, -1, r->barrier_status);
    }
    r->arrived = 0;
    r->generation++;
    for (i = 0; i < r->ntask; i++)
        if (r->t[i].state == MD__SCHED_T_BARRIER) r->t[i].state = MD__SCHED_T_READY;
}

md_status md_cuda_task_barrier(md_cuda_task *t, md_cuda_barrier_fn fn, void *arg) {
    md_status st;
    md__sched_run *r = md__sched_run_of(t, "md_cuda_task_barrier", &st);
    md__sched_trun *tr;
    long long gen;
    if (!r) return st;
    tr = &r->t[t->index];
    t->stats.barriers++;
    if (r->mode == MD_CUDA_SCHED_THREADS) {
        std::unique_lock<std::mutex> lock(r->mu);
        gen = r->generation;
        r->barrier_fn = fn;
        r->barrier_arg = arg;
        if (++r->arrived == r->live) {
            md__sched_barrier_release(r);
            r->cv.notify_all();
        } else {
            r->cv.wait(lock, [&] { return r->generation != gen || r->aborted.load(); });
        }
    } else {
        gen = r->generation;
        r->barrier_fn = fn;
        r->barrier_arg = arg;
        r->arrived++;
        tr->state = MD__SCHED_T_BARRIER;
        if ((st = md_co_yield(&tr->co)) != MD_OK) return st;
    }
    if (r->aborted.load()) return md__sched_aborted_error(r, "md_cuda_task_barrier");
    return r->generation != gen ? MD_OK : md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_task_barrier", 0, "t", "released without the barrier completing");
}

/* A task leaves the run: the barrier no longer waits for it (r->mu held in threads mode). */
static void md__sched_task_leaves(md__sched_run *r, md__sched_trun *tr) {
    if (tr->result != MD_OK) md__sched_run_fail_locked(r, tr->task.index, tr->result);
    r->live--;
    if (r->arrived > 0 && r->arrived == r->live) md__sched_barrier_release(r);
}

/* The body of a task's coroutine (sequential and coroutines modes). */
static void md__sched_task_co(md_co *co, void *arg) {
    md__sched_trun *tr = (md__sched_trun *)arg;
    (void)co;
    tr->result = tr->fn(&tr->task, tr->arg);
}

/* Sequential and coroutines: this thread resumes the tasks, round robin. A waiting task's
 * event is polled; a completed one is resumed in the same pass. */
static md_status md__sched_drive(md__sched_run *r, md_cuda_sched_stats *stats) {
    int i, remaining = r->ntask;
    md_status st;
    while (remaining > 0) {
        int progressed = 0;
        stats->passes++;
        for (i = 0; i < r->ntask; i++) {
            md__sched_trun *tr = &r->t[i];
            if (tr->state == MD__SCHED_T_WAITING) {
                cudaError_t q = r->aborted.load() ? cudaSuccess : cudaEventQuery(tr->end);
                if (!r->aborted.load()) {
                    tr->task.stats.polls++;
                    tr->polls_now++;
                }
                if (q == cudaErrorNotReady) continue;
                if (q == cudaSuccess && !r->aborted.load()) {
                    if (tr->polls_now == 1) tr->task.stats.ready_first++;
                    md__sched_batch_done(r, tr);
                } else if (q != cudaSuccess) {
                    (void)cudaGetLastError(); /* the task's wait reports it */
                }
                tr->wait_err = q;
                tr->state = MD__SCHED_T_READY;
            }
            if (tr->state == MD__SCHED_T_READY) {
                tr->task.stats.resumes++;
                if ((st = md_co_resume(&tr->co)) != MD_OK) {
                    md__sched_run_fail_locked(r, i, st);
                    tr->state = MD__SCHED_T_DONE;
                    remaining--;
                    r->live--;
                    continue;
                }
                progressed = 1;
                if (md_co_status(&tr->co) == MD_CO_DEAD) {
                    tr->state = MD__SCHED_T_DONE;
                    remaining--;
                    md__sched_task_leaves(r, tr);
                } else if (r->arrived > 0 && r->arrived == r->live) {
                    md__sched_barrier_release(r);
                }
            }
        }
        if (r->aborted.load()) /* every stopped task goes on, to see the failure and return */
            for (i = 0; i < r->ntask; i++)
                if (r->t[i].state == MD__SCHED_T_WAITING || r->t[i].state == MD__SCHED_T_BARRIER) r->t[i].state = MD__SCHED_T_READY;
        if (!progressed) stats->idle_passes++;
    }
    return MD_OK;
}

/* Length of the union of intervals (begin, end pairs, ms) and their span. */
static void md__sched_union(std::vector<std::pair<float, float>> &iv, double *busy_ms, double *span_ms) {
    double busy = 0.0, lo = 0.0, hi = 0.0, cur_lo = 0.0, cur_hi = 0.0;
    size_t i;
    *busy_ms = *span_ms = 0.0;
    if (iv.empty()) return;
    std::sort(iv.begin(), iv.end());
    lo = iv[0].first;
    cur_lo = iv[0].first;
    cur_hi = iv[0].second;
    hi = cur_hi;
    for (i = 1; i < iv.size(); i++) {
        if (iv[i].first > cur_hi) {
            busy += cur_hi - cur_lo;
            cur_lo = iv[i].first;
            cur_hi = iv[i].second;
        } else if (iv[i].second > cur_hi) {
            cur_hi = iv[i].second;
        }
        if (iv[i].second > hi) hi = iv[i].second;
    }
    busy += cur_hi - cur_lo;
    *busy_ms = busy;
    *span_ms = hi - lo;
}

static void md__sched_run_destroy(md__sched_run *r) {
    int i;
    if (!r) return;
    for (i = 0; r->t && i < r->ntask; i++) {
        if (r->t[i].begin) (void)cudaEventDestroy(r->t[i].begin);
        if (r->t[i].end) (void)cudaEventDestroy(r->t[i].end);
        md_co_free(&r->t[i].co);
    }
    delete[] r->t;
    if (r->origin) (void)cudaEventDestroy(r->origin);
    delete r;
}

md_status md_cuda_sched_run(const md_cuda_sched_desc *desc, int ntask, md_cuda_task_fn fn, void *const *args,
                            md_cuda_sched_stats *stats, md_cuda_task_stats *per_task) {
    const char *where = "md_cuda_sched_run";
    md_cuda_sched_desc d;
    md_cuda_sched_stats s;
    md__sched_run *r;
    md_status st = MD_OK;
    double t0;
    int i;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (!fn) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "fn", "is NULL");
    if (ntask < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "ntask", "must be >= 1 (got %d)", ntask);
    if ((int)d.mode < 0 || d.mode >= MD_CUDA_SCHED_MODE_COUNT)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "desc->mode", "unknown mode %d", (int)d.mode);
    if (d.stack_size == 0) d.stack_size = 1u << 20;
    memset(&s, 0, sizeof s);
    s.mode = d.mode;
    s.ntask = ntask;
    r = new (std::nothrow) md__sched_run();
    if (!r) return md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, NULL, "cannot allocate the run");
    r->t = new (std::nothrow) md__sched_trun[ntask]();
    if (!r->t) {
        delete r;
        return md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, NULL, "cannot allocate %d tasks", ntask);
    }
    r->mode = d.mode;
    r->ntask = ntask;
    r->live = ntask;
    r->aborted.store(0);
#define MD__SCHED_TRY(call)                                                                     \
    do {                                                                                           \
        cudaError_t md__e = (call);                                                                \
        if (md__e != cudaSuccess) {                                                                \
            st = md_cuda_error(md__e, #call, __FILE__, __LINE__);                                  \
            md__sched_run_destroy(r);                                                               \
            return st;                                                                             \
        }                                                                                          \
    } while (0)
    MD__SCHED_TRY(cudaGetDevice(&r->device));
    MD__SCHED_TRY(cudaEventCreate(&r->origin));
    for (i = 0; i < ntask; i++) {
        md__sched_trun *tr = &r->t[i];
        tr->task.index = i;
        tr->task.ntask = ntask;
        tr->task.mode = d.mode;
        tr->task.run = r;
        tr->fn = fn;
        tr->arg = args ? args[i] : NULL;
        tr->state = MD__SCHED_T_READY;
        MD__SCHED_TRY(cudaEventCreate(&tr->begin));
        MD__SCHED_TRY(cudaEventCreate(&tr->end));
        if (d.mode != MD_CUDA_SCHED_THREADS && (st = md_co_create(&tr->co, md__sched_task_co, tr, d.stack_size)) != MD_OK) {
            md__sched_run_destroy(r);
            return st;
        }
    }
    /* the origin of the GPU clock: recorded and completed before any task enqueues anything */
    MD__SCHED_TRY(cudaEventRecord(r->origin, 0));
    MD__SCHED_TRY(cudaEventSynchronize(r->origin));
#undef MD__SCHED_TRY
    t0 = md_wall_seconds();
    if (d.mode == MD_CUDA_SCHED_THREADS) {
        std::vector<std::thread> threads;
        for (i = 0; i < ntask; i++) {
            md__sched_trun *tr = &r->t[i];
            try {
                threads.emplace_back([r, tr] {
                    cudaError_t e = cudaSetDevice(r->device);
                    tr->result = e == cudaSuccess ? tr->fn(&tr->task, tr->arg)
                                                  : md_cuda_error(e, "cudaSetDevice (task thread)", __FILE__, __LINE__);
                    std::lock_guard<std::mutex> lock(r->mu);
                    md__sched_task_leaves(r, tr);
                    r->cv.notify_all();
                });
            } catch (...) {
                std::lock_guard<std::mutex> lock(r->mu);
                md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, NULL, "cannot start the thread of task %d", i);
                md__sched_run_fail_locked(r, i, MD_ERR_OUT_OF_MEMORY);
                r->live -= ntask - i;
                if (r->arrived > 0 && r->arrived >= r->live) md__sched_barrier_release(r);
                r->cv.notify_all();
                break;
            }
        }
        for (auto &th : threads) th.join();
    } else {
        st = md__sched_drive(r, &s);
    }
    s.wall_s = md_wall_seconds() - t0;
    {
        std::vector<std::pair<float, float>> iv;
        double busy_ms, span_ms;
        for (i = 0; i < ntask; i++) {
            size_t k;
            for (k = 0; k + 1 < r->t[i].iv.size(); k += 2) {
                iv.push_back(std::make_pair(r->t[i].iv[k], r->t[i].iv[k + 1]));
                if (d.timeline && s.timeline_n < d.timeline_cap) {
                    d.timeline[3 * s.timeline_n] = i;
                    d.timeline[3 * s.timeline_n + 1] = 1e-3 * r->t[i].iv[k];
                    d.timeline[3 * s.timeline_n + 2] = 1e-3 * r->t[i].iv[k + 1];
                    s.timeline_n++;
                }
            }
            r->t[i].task.stats.stack_used = d.mode == MD_CUDA_SCHED_THREADS ? 0 : md_co_stack_used(&r->t[i].co);
            if (r->t[i].task.stats.max_lag > s.max_lag) s.max_lag = r->t[i].task.stats.max_lag;
            if (per_task) per_task[i] = r->t[i].task.stats;
        }
        s.batches = (long long)iv.size();
        md__sched_union(iv, &busy_ms, &span_ms);
        s.busy_s = 1e-3 * busy_ms;
        s.span_s = 1e-3 * span_ms;
        s.busy_fraction = span_ms > 0.0 ? busy_ms / span_ms : NAN;
    }
    if (stats) *stats = s;
    if (st == MD_OK && r->aborted.load()) {
        st = r->first_task < 0 ? md_set_error(r->first_status, where, 0, "barrier", "%s", r->first_message)
                               : md_set_error(r->first_status, where, 0, "task", "task %d failed: %s", r->first_task,
                                              r->first_message);
    }
    md__sched_run_destroy(r);
    return st;
}

/* ---- mapped ---- */

md_status md_cuda_mapped_alloc(md_cuda_mapped *m, size_t bytes) {
    const char *where = "md_cuda_mapped_alloc";
    void *h = NULL, *d = NULL;
    int dev = 0, can = 0;
    cudaError_t e;
    if (!m) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "m", "is NULL");
    if (bytes == 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "bytes", "is 0");
    MD_CUDA_TRY(cudaGetDevice(&dev));
    MD_CUDA_TRY(cudaDeviceGetAttribute(&can, cudaDevAttrCanMapHostMemory, dev));
    if (!can) return md_set_error(MD_ERR_UNSUPPORTED, where, 0, NULL, "device %d cannot map host memory", dev);
    e = cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
        md_status st = md_cuda_error(e, "cudaHostAlloc (mapped)", __FILE__, __LINE__);
        return md_set_error(st, where, 0, "bytes", "cannot allocate %zu bytes of mapped pinned memory: %s", bytes,
                            cudaGetErrorString(e));
    }
    memset(h, 0, bytes);
    e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        (void)cudaFreeHost(h);
        return md_cuda_error(e, "cudaHostGetDevicePointer", __FILE__, __LINE__);
    }
    m->host = h;
    m->device = d;
    m->bytes = bytes;
    return MD_OK;
}

void md_cuda_mapped_free(md_cuda_mapped *m) {
    if (!m) return;
    if (m->host) (void)cudaFreeHost(m->host);
    memset(m, 0, sizeof *m);
}

static __global__ void md__mapped_copy_kernel(float4 *dst, const float4 *src, size_t n) {
    size_t i;
    for (i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}

md_status md_cuda_mapped_copy_enqueue(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    const char *where = "md_cuda_mapped_copy_enqueue";
    size_t n = bytes / 16, blocks;
    if (!dst || !src) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, !dst ? "dst" : "src", "is NULL");
    if (bytes % 16 || ((uintptr_t)dst | (uintptr_t)src) % 16)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "bytes", "size and addresses must be multiples of 16 (%zu bytes)", bytes);
    if (n == 0) return MD_OK;
    blocks = (n + 255) / 256;
    if (blocks > 1024) blocks = 1024;
    MD_CUDA_LAUNCH(md__mapped_copy_kernel, (unsigned)blocks, 256, 0, stream, (float4 *)dst, (const float4 *)src, n);
    return MD_OK;
}

int md_cuda_report_words(const md_cuda_report_desc *d) {
    int k, n = 0;
    if (!d || d->nseg < 1 || d->nseg > MD_CUDA_REPORT_MAX_SEGMENTS) return -1;
    for (k = 0; k < d->nseg; k++) {
        if (d->count[k] < 0 || (d->count[k] > 0 && !d->src[k])) return -1;
        n += d->count[k];
    }
    return n + 1;
}

/* One block: every thread copies words with 64-bit volatile stores; after the block's barrier,
 * thread 0 bumps the sequence counter and publishes it behind a system-scope fence. */
static __global__ void md__report_kernel(md_cuda_report_desc d, unsigned long long *dst, unsigned long long *d_seq) {
    int k, base = 0;
    for (k = 0; k < d.nseg; k++) {
        int i;
        for (i = threadIdx.x; i < d.count[k]; i += blockDim.x) md_cuda_mapped_store(dst + base + i, d.src[k][i]);
        base += d.count[k];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long seq = *d_seq + 1;
        *d_seq = seq;
        md_cuda_mapped_publish(dst + base, seq);
    }
}

md_status md_cuda_report_enqueue(const md_cuda_report_desc *d, unsigned long long *dst, unsigned long long *d_seq,
                                 cudaStream_t stream) {
    const char *where = "md_cuda_report_enqueue";
    int words = md_cuda_report_words(d);
    if (!d) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "d", "is NULL");
    if (words < 0)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "d", "nseg must be 1..%d and every count >= 0 with a source",
                            MD_CUDA_REPORT_MAX_SEGMENTS);
    if (!dst || !d_seq) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, !dst ? "dst" : "d_seq", "is NULL");
    MD_CUDA_LAUNCH(md__report_kernel, 1, 128, 0, stream, *d, dst, d_seq);
    return MD_OK;
}

#endif /* MD_CUDA_IMPLEMENTATION_INCLUDED */
#endif /* MD_CUDA_IMPLEMENTATION */

/* ======================================================================== */
/* sched (continued): replica exchange on one GPU (chapters 10 and 11)      */
/* ======================================================================== */

/* TEMPERATURE REPLICA EXCHANGE ON ONE GPU. md_cuda_remd runs N copies of one system, each an
 * md_cuda_sim (chapter 08's GPU step, Langevin thermostat) on its own stream at a temperature of
 * md.h's md_remd ladder, as N tasks of md_cuda_sched_run. Each task's life:
 *
 *     for every exchange round:
 *         for every read segment (steps_per_read steps, energies on the last one):
 *             begin; enqueue the segment (or launch its CUDA graph) and the report; wait
 *             read the report: energy terms, step, the step's and the state's flags and the
 *             neighbour list's rebuild counter (a raised flag ends the run, naming the replica)
 *         barrier: the last replica to arrive runs md_remd_exchange on everyone's potential
 *                  energy (the host logic that makes every replica stop and wait)
 *         rescale its velocities by sqrt(T_new / T_old) (a kernel reading the factor from
 *         mapped memory or from a device copy) and take the new temperature
 *
 * md_cuda_remd_desc chooses the rungs: the scheduling mode (sequential, a thread per replica,
 * coroutines), CUDA graphs or not (the segment and its report captured once per replica through
 * an md_cuda_graph_cache, captured again after the replica's temperature changed: the integrate
 * kernel takes kT by value, so the cache re-instantiates or updates), and how the report and the
 * velocity factor travel (MD_CUDA_REMD_MEMCPY: the report kernel writes device memory and a
 * cudaMemcpyAsync brings it to pinned memory, the factor goes by cudaMemcpyAsync; or
 * MD_CUDA_REMD_MAPPED: both through mapped memory, no copy). Every rung does the same arithmetic
 * in the same order on each replica (the neighbour-list sort happens once, at create: sorts are
 * host decisions a replayed graph could not repeat), so every rung gives the same trajectories
 * and exchange decisions, bit for bit (tests/gpu_replicas.cu). The logs of a run
 * (md_cuda_remd::log_energy, log_accepted) and md_cuda_sim_download per replica are what the
 * comparison reads. */

#if !defined(MD_CUDA_REMD_DECLARED)
/** @brief Defined once the replica-exchange declarations are in (their include guard). */
#define MD_CUDA_REMD_DECLARED

/** @brief How a replica's report and velocity factor travel between device and host. */
typedef enum md_cuda_remd_transfer {
    MD_CUDA_REMD_MEMCPY = 0, /**< report into device memory + cudaMemcpyAsync to pinned; factor by cudaMemcpyAsync */
    MD_CUDA_REMD_MAPPED,     /**< report and factor in mapped pinned memory: no copy enqueued */
    MD_CUDA_REMD_TRANSFER_COUNT /**< number of transfers */
} md_cuda_remd_transfer;

/** @brief Words of a replica's report: MD_CUDA_E_COUNT energy terms (fixed point), then these. */
enum {
    MD_CUDA_REMD_R_STEP = MD_CUDA_E_COUNT,                      /**< the device step counter */
    MD_CUDA_REMD_R_STEP_FLAGS,                                  /**< MD_CUDA_FLAG_WORDS: the step's flags */
    MD_CUDA_REMD_R_STATE_FLAGS = MD_CUDA_REMD_R_STEP_FLAGS + MD_CUDA_FLAG_WORDS, /**< MD_CUDA_FLAG_WORDS: the state's (nonbonded) flags */
    MD_CUDA_REMD_R_REBUILDS = MD_CUDA_REMD_R_STATE_FLAGS + MD_CUDA_FLAG_WORDS,   /**< neighbour-list builds so far */
    MD_CUDA_REMD_R_ITEMS,                                       /**< the last list build's work items (the
                                                                     nonbonded plan's control word; every read
                                                                     refits the pair kernel's grid from it) */
    MD_CUDA_REMD_R_SEQ,                                         /**< the report's sequence number (md_cuda_report_enqueue) */
    MD_CUDA_REMD_R_WORDS                                        /**< words of a report */
};

/** @brief One replica: its run, its report and factor buffers, its graph. */
typedef struct md_cuda_replica {
    md_cuda_sim sim;               /**< the replica's GPU run (its stream: sim.state.q.stream) */
    md_cuda_report_desc report;    /**< what its report gathers */
    md_cuda_mapped mapped;         /**< MD_CUDA_REMD_R_WORDS report words, then the velocity factor (a double) */
    unsigned long long *d_report;  /**< device report (memcpy rung) */
    unsigned long long *h_report;  /**< pinned copy of it (memcpy rung) */
    unsigned long long *d_seq;     /**< the report's sequence counter */
    double *d_factor;              /**< device copy of the velocity factor (memcpy rung) */
    double *h_factor;              /**< pinned staging of it */
    md_cuda_graph_cache graph;     /**< the segment's graph (graph rungs) */
    double graph_temperature;      /**< the temperature the graph was captured at (0: none) */
    int slot;                      /**< its temperature slot now */
    long long rebuilds;            /**< neighbour-list builds, as of its last report */
    md_energy energy;              /**< energies of its last report */
} md_cuda_replica;

/** @brief A replica-exchange run on the current device (see the section's manual). */
typedef struct md_cuda_remd {
    int n;                      /**< replicas */
    md_cuda_replica *rep;       /**< n replicas */
    md_remd ladder;             /**< temperatures, slots, decisions, statistics (md.h) */
    double *potential;          /**< n potential energies (kJ/mol) the next exchange uses */
    double *factor;             /**< n velocity factors of the last exchange */
    int rounds;                 /**< exchange rounds logged so far */
    int cap_rounds;             /**< rounds the logs hold */
    double *log_energy;         /**< cap_rounds x n potential energies at each exchange (by replica) */
    int *log_accepted;          /**< cap_rounds x (n - 1) decisions (md_remd_exchange's accepted) */
} md_cuda_remd;

/** @brief Options of md_cuda_remd_run; a zero field takes its default. */
typedef struct md_cuda_remd_desc {
    md_cuda_sched_mode mode;         /**< scheduling (default MD_CUDA_SCHED_SEQUENTIAL) */
    int graphs;                      /**< 1: launch each read segment as a CUDA graph */
    md_cuda_remd_transfer transfer;  /**< report and factor transfer (default MD_CUDA_REMD_MEMCPY) */
    int steps_per_exchange;          /**< steps between exchange attempts (default 100) */
    int steps_per_read;              /**< steps between the host's reads of the report (default steps_per_exchange;
                                          must divide it; 1: every step, chapter 11's case) */
    int exchanges;                   /**< exchange rounds (default 10) */
    size_t stack_size;               /**< coroutine stacks (md_cuda_sched_desc) */
    double *timeline;                /**< optional batch timeline (md_cuda_sched_desc::timeline) */
    long long timeline_cap;          /**< its room in batches */
} md_cuda_remd_desc;

/** @brief What md_cuda_remd_run measured. */
typedef struct md_cuda_remd_stats {
    md_cuda_sched_stats sched;  /**< the scheduler's numbers (wall time, GPU busy fraction, passes) */
    long long steps;            /**< MD steps, all replicas */
    double steps_per_s;         /**< steps / sched.wall_s */
    long long reads;            /**< reports read, all replicas */
    double segment_s;           /**< mean host seconds from a segment's first enqueue to its report read: the round
                                     trip of a segment (one replica, steps_per_read 1: the latency of a step) */
    long long instantiations;   /**< graph rungs: cudaGraphInstantiate calls, all replicas */
    long long updates;          /**< graph rungs: captures applied by cudaGraphExecUpdate */
} md_cuda_remd_stats;

/** @brief Make @p n replicas of @p sys (force field @p t, @p lj) with the settings @p base (NULL:
 *  defaults; its thermostat is forced to Langevin, its temperature and seed are set per
 *  replica: seed + 1000 r) at the @p n ascending temperatures @p temperature (K), the exchange
 *  decisions seeded by @p seed, each replica's md_cuda_sim made with @p opts (NULL: defaults;
 *  e.g. md_cuda_sim_opts::water_lanes, whose rule counts the whole GPU as one replica's). Every
 *  replica starts from @p sys. The nonbonded plans sort once, at create, and never again (the
 *  opts' nb.sort_interval is set to -1), so graph replays repeat the stream path exactly.
 *  Synchronous. Errors: those of md_remd_create and md_cuda_sim_create, mapped memory, CUDA. On
 *  failure @p x is zeroed. */
md_status md_cuda_remd_create(md_cuda_remd *x, int n, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                              const md_sim_desc *base, const double *temperature, uint64_t seed,
                              const md_cuda_sim_opts *opts);

/** @brief Run @p d->exchanges rounds of @p d->steps_per_exchange steps and an exchange on every
 *  replica, as @p d says (NULL: defaults); append the rounds to the logs; write @p stats (may be
 *  NULL). Errors: a bad descriptor (MD_ERR_INVALID_ARGUMENT), a replica's raised flag or
 *  non-finite energy (MD_ERR_RANGE, naming the replica), md_cuda_sched_run's. */
md_status md_cuda_remd_run(md_cuda_remd *x, const md_cuda_remd_desc *d, md_cuda_remd_stats *stats);

/** @brief Free everything and zero @p x; safe on a zeroed run. */
void md_cuda_remd_destroy(md_cuda_remd *x);

#endif /* MD_CUDA_REMD_DECLARED */

#if defined(MD_CUDA_IMPLEMENTATION) && defined(MD_CUDA_REMD_DECLARED) && !defined(MD_CUDA_REMD_IMPLEMENTED)
#define MD_CUDA_REMD_IMPLEMENTED

/* v *= *factor for the 3 n velocities (double) and the centre-of-mass velocity the next step
 * subtracts; the factor is read from device or mapped memory. */
static __global__ void md__remd_scale_kernel(double *v, int n3, double *vcom, const double *factor) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double f = *(const volatile double *)factor;
    if (i < n3) v[i] *= f;
    if (i < 3) vcom[i] *= f;
}

void md_cuda_remd_destroy(md_cuda_remd *x) {
    int r;
    if (!x) return;
    for (r = 0; x->rep && r < x->n; r++) {
        md_cuda_replica *p = &x->rep[r];
        if (p->sim.state.q.stream) (void)cudaStreamSynchronize(p->sim.state.q.stream);
        md_cuda_graph_cache_destroy(&p->graph);
        md_cuda_mapped_free(&p->mapped);
        md_cuda_free(p->d_report);
        md_cuda_free(p->d_seq);
        md_cuda_free(p->d_factor);
        md_cuda_free_pinned(p->h_report);
        md_cuda_free_pinned(p->h_factor);
        md_cuda_sim_destroy(&p->sim);
    }
    md_free(x->rep);
    md_remd_free(&x->ladder);
    md_free(x->potential);
    md_free(x->factor);
    md_free(x->log_energy);
    md_free(x->log_accepted);
    memset(x, 0, sizeof *x);
}

md_status md_cuda_remd_create(md_cuda_remd *x, int n, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                              const md_sim_desc *base, const double *temperature, uint64_t seed,
                              const md_cuda_sim_opts *opts) {
    const char *where = "md_cuda_remd_create";
    md_cuda_remd R;
    md_sim_desc d;
    md_cuda_sim_opts o;
    md_status st;
    int r;
    if (!x) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "x", "is NULL");
    memset(&R, 0, sizeof R);
    if ((st = md_remd_create(&R.ladder, n, temperature, seed)) != MD_OK) return st;
    R.n = n;
    R.rep = (md_cuda_replica *)md_alloc_array((size_t)n, sizeof(md_cuda_replica));
    R.potential = (double *)md_alloc_array((size_t)n, sizeof(double));
    R.factor = (double *)md_alloc_array((size_t)n, sizeof(double));
    if (!R.rep || !R.potential || !R.factor) {
        md_cuda_remd_destroy(&R);
        return MD_ERR_OUT_OF_MEMORY;
    }
    memset(R.rep, 0, (size_t)n * sizeof(md_cuda_replica));
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    o.nb.sort_interval = -1;
    for (r = 0; r < n; r++) {
        md_cuda_replica *p = &R.rep[r];
        memset(&d, 0, sizeof d);
        if (base) d = *base;
        d.thermostat = MD_THERMOSTAT_LANGEVIN;
        d.temperature = temperature[r];
        d.seed = (base ? base->seed : 0) + 1000ull * (uint64_t)r;
        d.barostat_interval = 0;
        R.factor[r] = 1.0;
        p->slot = r;
#define MD__REMD_TRY(expr)                                                                    \
    do {                                                                                           \
        if ((st = (expr)) != MD_OK) {                                                              \
            md_cuda_remd_destroy(&R);                                                              \
            return st;                                                                             \
        }                                                                                          \
    } while (0)
        MD__REMD_TRY(md_cuda_sim_create(&p->sim, sys, t, lj, &d, &o));
        MD__REMD_TRY(md_cuda_mapped_alloc(&p->mapped, MD_CUDA_REMD_R_WORDS * sizeof(unsigned long long) + sizeof(double)));
        MD__REMD_TRY(md_cuda_alloc((void **)&p->d_report, MD_CUDA_REMD_R_WORDS, sizeof(unsigned long long), "report"));
        MD__REMD_TRY(md_cuda_alloc((void **)&p->d_seq, 1, sizeof(unsigned long long), "report sequence"));
        MD__REMD_TRY(md_cuda_alloc((void **)&p->d_factor, 1, sizeof(double), "velocity factor"));
        MD__REMD_TRY(md_cuda_alloc_pinned((void **)&p->h_report, MD_CUDA_REMD_R_WORDS, sizeof(unsigned long long), "report"));
        MD__REMD_TRY(md_cuda_alloc_pinned((void **)&p->h_factor, 1, sizeof(double), "velocity factor"));
#undef MD__REMD_TRY
        if (cudaMemsetAsync(p->d_seq, 0, sizeof(unsigned long long), p->sim.state.q.stream) != cudaSuccess ||
            cudaStreamSynchronize(p->sim.state.q.stream) != cudaSuccess) {
            st = md_cuda_error(cudaGetLastError(), "cudaMemsetAsync (report sequence)", __FILE__, __LINE__);
            md_cuda_remd_destroy(&R);
            return st;
        }
        p->report.nseg = 6;
        p->report.src[0] = (const unsigned long long *)p->sim.state.d_energy;
        p->report.count[0] = MD_CUDA_E_COUNT;
        p->report.src[1] = (const unsigned long long *)p->sim.state.d_step;
        p->report.count[1] = 1;
        p->report.src[2] = p->sim.step.d_flags;
        p->report.count[2] = MD_CUDA_FLAG_WORDS;
        p->report.src[3] = p->sim.state.q.d_flags;
        p->report.count[3] = MD_CUDA_FLAG_WORDS;
        p->report.src[4] = (const unsigned long long *)(p->sim.nb.d_ctl + MD__NB_CTL_REBUILDS);
        p->report.count[4] = 1;
        p->report.src[5] = (const unsigned long long *)(p->sim.nb.d_ctl + MD__NB_CTL_NITEMS);
        p->report.count[5] = 1;
    }
    *x = R;
    return MD_OK;
}

namespace {
struct md__remd_task {
    md_cuda_remd *x;
    const md_cuda_remd_desc *d;
    int r;
    long long reads;
    double latency_s;
};
} // namespace

/* One read segment: steps and the report, on the replica's stream (what a graph captures). */
static md_status md__remd_segment(void *ctx, cudaStream_t stream) {
    md__remd_task *k = (md__remd_task *)ctx;
    md_cuda_replica *p = &k->x->rep[k->r];
    md_status st;
    (void)stream;
    if ((st = md_cuda_sim_enqueue(&p->sim, k->d->steps_per_read, MD_CUDA_SIM_ENERGY)) != MD_OK) return st;
    if (k->d->transfer == MD_CUDA_REMD_MAPPED)
        return md_cuda_report_enqueue(&p->report, (unsigned long long *)p->mapped.device, p->d_seq, p->sim.state.q.stream);
    return md_cuda_report_enqueue(&p->report, p->d_report, p->d_seq, p->sim.state.q.stream);
}

/* The barrier's work: one exchange round on everyone's energy, logged. */
static md_status md__remd_exchange(void *arg) {
    md_cuda_remd *x = (md_cuda_remd *)arg;
    int r, k;
    md_status st;
    if (x->rounds >= x->cap_rounds)
        return md_set_error(MD_ERR_RANGE, "md_cuda_remd_run", 0, "rounds", "the log holds %d rounds", x->cap_rounds);
    for (r = 0; r < x->n; r++) x->log_energy[(size_t)x->rounds * x->n + r] = x->potential[r];
    if ((st = md_remd_exchange(&x->ladder, x->potential, x->log_accepted + (size_t)x->rounds * (x->n > 1 ? x->n - 1 : 1),
                               x->factor)) != MD_OK)
        return st;
    for (k = 0; k < x->n; k++) x->rep[k].slot = x->ladder.slot_of[k];
    x->rounds++;
    return MD_OK;
}

static md_status md__remd_task_fn(md_cuda_task *t, void *arg) {
    md__remd_task *k = (md__remd_task *)arg;
    md_cuda_remd *x = k->x;
    const md_cuda_remd_desc *d = k->d;
    md_cuda_replica *p = &x->rep[k->r];
    cudaStream_t s = p->sim.state.q.stream;
    const int segments = d->steps_per_exchange / d->steps_per_read;
    md_status st;
    int e, g;
    for (e = 0; e < d->exchanges; e++) {
        for (g = 0; g < segments; g++) {
            const unsigned long long *w;
            const double t0 = md_wall_seconds();
            if ((st = md_cuda_task_begin(t, s)) != MD_OK) return st;
            if (d->graphs && k->reads > 0) { /* the first segment on the stream: its report sizes the
                                               * pair kernel's grid (md__nb_fit_grid) before the first
                                               * capture, which keeps the grid it sees */
                if (p->graph_temperature != p->sim.desc.temperature) {
                    if ((st = md_cuda_graph_cache_capture(&p->graph, s, md__remd_segment, k)) != MD_OK) return st;
                    p->graph_temperature = p->sim.desc.temperature;
                }
                if ((st = md_cuda_graph_cache_launch(&p->graph, s)) != MD_OK) return st;
            } else if ((st = md__remd_segment(k, s)) != MD_OK) {
                return st;
            }
            if (d->transfer == MD_CUDA_REMD_MEMCPY)
                MD_CUDA_TRY(cudaMemcpyAsync(p->h_report, p->d_report, MD_CUDA_REMD_R_WORDS * sizeof(unsigned long long),
                                            cudaMemcpyDeviceToHost, s));
            if ((st = md_cuda_task_wait(t, s)) != MD_OK) return st;
            w = d->transfer == MD_CUDA_REMD_MAPPED ? (const unsigned long long *)p->mapped.host : p->h_report;
            /* rule 1 of section mapped: after the event, acquire loads of the words */
            {
                md_fixed terms[MD_CUDA_E_COUNT];
                int i;
                for (i = 0; i < MD_CUDA_E_COUNT; i++) terms[i] = (md_fixed)md_cuda_mapped_load(w + i);
                if (md_cuda_mapped_load(w + MD_CUDA_REMD_R_STEP_FLAGS) || md_cuda_mapped_load(w + MD_CUDA_REMD_R_STATE_FLAGS)) {
                    md_energy dummy;
                    st = md_cuda_sim_poll(&p->sim, &dummy, NULL); /* names the atom and the flag */
                    return md_set_error(st != MD_OK ? st : MD_ERR_RANGE, "md_cuda_remd_run", 0, "replica",
                                        "replica %d at step %llu: %s", k->r, md_cuda_mapped_load(w + MD_CUDA_REMD_R_STEP),
                                        st != MD_OK ? md_last_error() : "a device flag was raised");
                }
                md_cuda_energy_from_fixed(terms, &p->energy);
                p->rebuilds = (long long)md_cuda_mapped_load(w + MD_CUDA_REMD_R_REBUILDS);
                md__nb_fit_grid(&p->sim.nb, (long long)md_cuda_mapped_load(w + MD_CUDA_REMD_R_ITEMS));
            }
            x->potential[k->r] = md_energy_potential(&p->energy);
            if (!isfinite(x->potential[k->r]))
                return md_set_error(MD_ERR_RANGE, "md_cuda_remd_run", 0, "replica", "replica %d: potential energy not finite",
                                    k->r);
            k->reads++;
            k->latency_s += md_wall_seconds() - t0;
        }
        if ((st = md_cuda_task_barrier(t, md__remd_exchange, x)) != MD_OK) return st;
        /* the exchange's decision for this replica: its factor, through mapped or device memory */
        {
            const double f = x->factor[k->r];
            const double *src;
            p->sim.desc.temperature = x->ladder.temperature[p->slot];
            if (d->transfer == MD_CUDA_REMD_MAPPED) {
                unsigned long long bits;
                memcpy(&bits, &f, sizeof bits);
                /* the kernel that reads it is enqueued after this store (the launch orders it) */
                md_cuda_mapped_store_host((unsigned long long *)p->mapped.host + MD_CUDA_REMD_R_WORDS, bits);
                src = (const double *)((unsigned long long *)p->mapped.device + MD_CUDA_REMD_R_WORDS);
            } else {
                *p->h_factor = f;
                MD_CUDA_TRY(cudaMemcpyAsync(p->d_factor, p->h_factor, sizeof(double), cudaMemcpyHostToDevice, s));
                src = p->d_factor;
            }
            MD_CUDA_LAUNCH(md__remd_scale_kernel, (3 * p->sim.step.n + 255) / 256, 256, 0, s, p->sim.step.d_v,
                           3 * p->sim.step.n, p->sim.step.d_vcom, src);
        }
    }
    return MD_OK;
}

md_status md_cuda_remd_run(md_cuda_remd *x, const md_cuda_remd_desc *desc, md_cuda_remd_stats *stats) {
    const char *where = "md_cuda_remd_run";
    md_cuda_remd_desc d;
    md_cuda_sched_desc sd;
    md_cuda_remd_stats S;
    md__remd_task *k;
    void **args;
    md_status st;
    int r, need;
    if (!x || !x->rep) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "x", "is not made (md_cuda_remd_create)");
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (d.steps_per_exchange == 0) d.steps_per_exchange = 100;
    if (d.steps_per_read == 0) d.steps_per_read = d.steps_per_exchange;
    if (d.exchanges == 0) d.exchanges = 10;
    if (d.steps_per_exchange < 1 || d.steps_per_read < 1 || d.steps_per_exchange % d.steps_per_read)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "steps_per_read",
                            "must be >= 1 and divide steps_per_exchange (%d, %d)", d.steps_per_read, d.steps_per_exchange);
    if (d.exchanges < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "exchanges", "must be >= 1 (got %d)", d.exchanges);
    if ((int)d.transfer < 0 || d.transfer >= MD_CUDA_REMD_TRANSFER_COUNT)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "transfer", "unknown transfer %d", (int)d.transfer);
    need = x->rounds + d.exchanges;
    if (need > x->cap_rounds) {
        double *le = (double *)md_alloc_array((size_t)need * x->n, sizeof(double));
        int *la = (int *)md_alloc_array((size_t)need * (x->n > 1 ? x->n - 1 : 1), sizeof(int));
        if (!le || !la) {
            md_free(le);
            md_free(la);
            return MD_ERR_OUT_OF_MEMORY;
        }
        if (x->rounds) {
            memcpy(le, x->log_energy, (size_t)x->rounds * x->n * sizeof(double));
            memcpy(la, x->log_accepted, (size_t)x->rounds * (x->n > 1 ? x->n - 1 : 1) * sizeof(int));
        }
        md_free(x->log_energy);
        md_free(x->log_accepted);
        x->log_energy = le;
        x->log_accepted = la;
        x->cap_rounds = need;
    }
    k = (md__remd_task *)md_alloc_array((size_t)x->n, sizeof *k);
    args = (void **)md_alloc_array((size_t)x->n, sizeof *args);
    if (!k || !args) {
        md_free(k);
        md_free(args);
        return MD_ERR_OUT_OF_MEMORY;
    }
    for (r = 0; r < x->n; r++) {
        k[r].x = x;
        k[r].d = &d;
        k[r].r = r;
        k[r].reads = 0;
        k[r].latency_s = 0.0;
        args[r] = &k[r];
    }
    memset(&sd, 0, sizeof sd);
    sd.mode = d.mode;
    sd.stack_size = d.stack_size;
    sd.timeline = d.timeline;
    sd.timeline_cap = d.timeline_cap;
    memset(&S, 0, sizeof S);
    st = md_cuda_sched_run(&sd, x->n, md__remd_task_fn, args, &S.sched, NULL);
    for (r = 0; r < x->n; r++) {
        S.reads += k[r].reads;
        S.segment_s += k[r].latency_s;
        S.instantiations += x->rep[r].graph.instantiations;
        S.updates += x->rep[r].graph.updates;
        if (st == MD_OK && x->rep[r].sim.state.q.stream) {
            cudaError_t e = cudaStreamSynchronize(x->rep[r].sim.state.q.stream);
            if (e != cudaSuccess) st = md_cuda_error(e, "cudaStreamSynchronize (replica)", __FILE__, __LINE__);
        }
    }
    S.segment_s = S.reads ? S.segment_s / (double)S.reads : 0.0;
    S.steps = (long long)x->n * d.exchanges * d.steps_per_exchange;
    S.steps_per_s = S.sched.wall_s > 0 ? (double)S.steps / S.sched.wall_s : 0.0;
    if (stats) *stats = S;
    md_free(k);
    md_free(args);
    return st;
}

#endif /* MD_CUDA_REMD_IMPLEMENTED */

/* ======================================================================== */
/* tiles: work split into tiles over many GPUs, with retry (chapter 12)    */
/* ======================================================================== */

/* DYNAMIC TILES. A potential map or a long trajectory's RDF is many independent pieces of work.
 * md_cuda_tiles_run splits the work into ntiles tiles and runs them on nworkers host threads
 * (std::thread), worker w bound to device devices[w] (cudaSetDevice on its thread when
 * md_cuda_tiles_desc::bind_device is set; several workers may share one device, which is how the
 * scheduler is exercised on one GPU). A worker pulls the next tile index from a shared atomic
 * counter and calls the caller's function run(worker, device, tile, arg), which computes the tile
 * and writes its result into the tile's own slice of the output. Fast devices take more tiles:
 * the balance is dynamic, no tile is assigned ahead of time.
 *
 * FAULTS. A call that returns an error is a failed attempt:
 *   1. the tile is put back (a retry queue, served before the counter's fresh tiles) and is
 *      retried only by a worker that has not failed on it;
 *   2. a worker whose calls failed max_failures times (default 2) is retired: it takes no more
 *      tiles (a worker whose device cannot be bound is retired at once);
 *   3. the run fails cleanly when no live worker remains with tiles left, or when a tile has
 *      failed on every worker (or on every live one, which could otherwise never end): the
 *      md_status names the tile and its last error, the other workers finish the tile they hold
 *      and stop.
 * Every tile is in exactly one place at any time (not started, queued for retry, held by one
 * worker, or done), so a tile completes successfully exactly once: the caller's slice of a tile is
 * written by one successful call (a caller's function writes its slice only when it succeeds).
 * md_cuda_tiles_stats and the per-tile records (which worker completed a tile, after how many
 * attempts) show the balance and the faults; tests/gpu_tiles.cu checks the rules with failures
 * injected from a seeded generator, on the CPU (no device) and on real tiles.
 *
 * TWO USERS. md_cuda_dcs_tiles: the potential map of section dcs split into z-slabs of the output
 * grid, one DCS plan per worker made once (on its device, the atoms uploaded once) and moved from
 * slab to slab (md_cuda_dcs_plan_set_origin). md_cuda_rdf_tiles: a multi-frame RDF split into
 * frame ranges, one RDF plan per worker; each tile's 64-bit counts land in its own slice and
 * md_cuda_rdf_tiles_finish sums them (integers: the order does not matter) and adds the frames'
 * normalisation in frame order, so the result is bitwise the one-worker result, and the CPU's.
 *
 * ENERGY. md_cuda_energy_begin/end read the board's energy counter (NVML's
 * nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded), power and SM clock around a
 * piece of work: joules, seconds and average watts. NVML is the driver's library
 * libnvidia-ml.so.1, loaded with dlopen at the first call (no link dependency: a machine without
 * it gets MD_ERR_UNSUPPORTED naming the library, and everything else works). The counter is
 * updated every few tens of milliseconds, so measure work of a second or more.
 *
 * NOT HERE. One process, one host: the PME-on-its-own-GPU split over NCCL and domain
 * decomposition are chapter 12's design notes (chapters/12_many_gpus/README.md), not code. */

#if !defined(MD_CUDA_TILES_DECLARED)
/** @brief Defined once the tile-scheduler declarations are in (their include guard). */
#define MD_CUDA_TILES_DECLARED

/** @brief Most workers of one md_cuda_tiles_run (each worker is a bit of a 64-bit mask). */
#define MD_CUDA_TILES_MAX_WORKERS 64

/** @brief A tile's work: compute tile @p tile (0 .. ntiles - 1) on worker @p worker, whose device
 *  is @p device, and write its result into the tile's own slice of the output, only on success.
 *  Return MD_OK, or an error (with md_set_error): the attempt failed and the tile is retried on
 *  another worker (see the section's manual). Called on the worker's thread. */
typedef md_status (*md_cuda_tile_fn)(int worker, int device, int tile, void *arg);

/** @brief Progress of a run: called after each completed tile with the number of tiles done so
 *  far, on the completing worker's thread, with the scheduler's lock held (keep it short). */
typedef void (*md_cuda_tile_progress_fn)(int done, int ntiles, void *arg);

/** @brief What md_cuda_tiles_run runs; a zero field takes its default. */
typedef struct md_cuda_tiles_desc {
    int ntiles;                        /**< tiles (>= 1) */
    int nworkers;                      /**< workers (1 .. MD_CUDA_TILES_MAX_WORKERS) */
    const int *devices;                /**< nworkers device ids (NULL: every worker on device 0) */
    int bind_device;                   /**< 1: each worker calls cudaSetDevice(devices[w]) on its thread first */
    int max_failures;                  /**< failed calls that retire a worker (default 2) */
    md_cuda_tile_progress_fn progress; /**< optional progress callback */
    void *progress_arg;                /**< its argument */
    int *tile_worker;                  /**< optional, ntiles: the worker that completed each tile (-1: none) */
    int *tile_attempts;                /**< optional, ntiles: calls made for each tile, the successful one included */
} md_cuda_tiles_desc;

/** @brief What a run did (written by md_cuda_tiles_run on success and on a failed run). */
typedef struct md_cuda_tiles_stats {
    int ntiles;                                   /**< tiles */
    int nworkers;                                 /**< workers */
    int ndevices;                                 /**< distinct device ids among the workers */
    int completed;                                /**< tiles completed (ntiles on success) */
    long long attempts;                           /**< calls made, all tiles */
    long long retries;                            /**< failed calls whose tile was put back */
    int retired;                                  /**< workers retired */
    int tiles_of[MD_CUDA_TILES_MAX_WORKERS];      /**< tiles each worker completed */
    int failures_of[MD_CUDA_TILES_MAX_WORKERS];   /**< failed calls of each worker */
    int retired_of[MD_CUDA_TILES_MAX_WORKERS];    /**< 1 if the worker was retired */
    double wall_s;                                /**< host seconds of the run */
} md_cuda_tiles_stats;

/** @brief Run @p d->ntiles tiles of @p fn(worker, device, tile, @p arg) on @p d->nworkers worker
 *  threads with retry (see the section's manual); @p stats may be NULL. Returns MD_OK when every
 *  tile completed exactly once. Errors: NULL @p d or @p fn, counts out of range, a negative device
 *  id (MD_ERR_INVALID_ARGUMENT; nothing runs, nothing is written); a thread that cannot be started
 *  (MD_ERR_UNSUPPORTED); a run that could not finish (the status of the tile's last failure, with a
 *  message naming the tile and that failure). The run's record (@p stats, tile_worker,
 *  tile_attempts) is written whenever the run started, failed or not: it is what one inspects
 *  after a failure. Pure host logic: no CUDA call unless @p d->bind_device is set. */
md_status md_cuda_tiles_run(const md_cuda_tiles_desc *d, md_cuda_tile_fn fn, void *arg, md_cuda_tiles_stats *stats);

/** @brief Fill @p devices (@p nworkers entries) with worker w on device w mod (the number of
 *  devices): the workers spread round robin over every GPU. Writes the device count to
 *  @p ndevices (may be NULL). Errors: NULL, nworkers < 1 (MD_ERR_INVALID_ARGUMENT), no device. */
md_status md_cuda_tiles_spread(int *devices, int nworkers, int *ndevices);

/** @brief Move a DCS plan's grid to @p origin (nm): the next enqueue computes the map of the same
 *  dimensions and spacing at that origin (a slab of a larger grid). Host only, no CUDA call.
 *  Errors: not a plan, a non-finite origin (MD_ERR_INVALID_ARGUMENT). */
md_status md_cuda_dcs_plan_set_origin(md_cuda_dcs_plan *p, const double origin[3]);

/** @brief A potential map split into z-slabs (md_cuda_dcs_tiles_create): tile t is planes
 *  [t planes, min(nz, (t + 1) planes)) of the grid, computed by the plan of the worker that takes it. */
typedef struct md_cuda_dcs_tiles {
    md_dcs_variant variant;   /**< the GPU rung */
    md_grid *grid;            /**< the output: the caller's grid, tile t writes its planes */
    int n;                    /**< atoms */
    int planes;               /**< z-planes per tile */
    int ntiles;               /**< tiles: ceil(nz / planes) */
    int nworkers;             /**< workers (one plan each) */
    int *devices;             /**< nworkers device ids */
    md_cuda_dcs_plan *plans;  /**< one plan per worker, on its device, atoms uploaded */
    md_grid *slabs;           /**< one host slab (nx x ny x planes) per worker: a tile's sync lands here */
} md_cuda_dcs_tiles;

/** @brief Make the slab job for the map of @p n atoms @p xyzq (host) on @p grid (its data is the
 *  output, written by the runs) with rung @p variant, @p planes z-planes a tile (clamped to nz) and
 *  @p nworkers workers on @p devices (NULL: all on the current device): one plan per worker,
 *  created on its device with the atoms uploaded. A constant-memory rung holds the process's
 *  __constant__ buffer, so only one worker may use it (MD_ERR_UNSUPPORTED otherwise: take
 *  MD_DCS_GPU_SHARED or MD_DCS_GPU_L1). Errors: those of md_cuda_dcs_plan_create and _upload, bad
 *  arguments (MD_ERR_INVALID_ARGUMENT). On failure @p j is zeroed. The current device is kept. */
md_status md_cuda_dcs_tiles_create(md_cuda_dcs_tiles *j, md_dcs_variant variant, const md_float4 *xyzq, int n,
                                   md_grid *grid, int planes, int nworkers, const int *devices);

/** @brief The md_cuda_tile_fn of a slab job (@p arg: the md_cuda_dcs_tiles): move the worker's plan
 *  to the slab, enqueue, sync into the worker's host slab, copy the tile's planes into the grid.
 *  The worker's thread must have its device current (md_cuda_tiles_desc::bind_device). */
md_status md_cuda_dcs_tiles_tile(int worker, int device, int tile, void *arg);

/** @brief Run every slab of @p j: md_cuda_tiles_run with the job's workers and devices (bound),
 *  optional @p progress, @p stats (may be NULL). */
md_status md_cuda_dcs_tiles_run(md_cuda_dcs_tiles *j, md_cuda_tile_progress_fn progress, void *progress_arg,
                                md_cuda_tiles_stats *stats);

/** @brief Free the plans (each on its device) and slabs, zero @p j; safe on a zeroed job. */
void md_cuda_dcs_tiles_destroy(md_cuda_dcs_tiles *j);

/** @brief A multi-frame RDF split into frame ranges (md_cuda_rdf_tiles_create). */
typedef struct md_cuda_rdf_tiles {
    md_rdf_variant variant;       /**< the GPU rung */
    int natoms;                   /**< atoms per frame */
    int nframes;                  /**< frames */
    const md_float4 *frames;      /**< nframes * natoms positions (host, the caller's) */
    const double *boxes;          /**< nframes * 3 box edges (host, the caller's) */
    int frames_per_tile;          /**< frames a tile */
    int ntiles;                   /**< tiles: ceil(nframes / frames_per_tile) */
    int nbins;                    /**< bins */
    double rmax;                  /**< outer edge of the last bin (nm) */
    double pairs;                 /**< pairs per frame (md_rdf_selection_pairs) */
    double centers;               /**< centres per frame */
    int nworkers;                 /**< workers (one plan each) */
    int *devices;                 /**< nworkers device ids */
    md_cuda_rdf_plan *plans;      /**< one RDF plan per worker, on its device */
    md_float4 **d_frame;          /**< one device frame buffer per worker */
    md_rdf *scratch;              /**< one accumulator per worker: a tile's sync lands here */
    unsigned long long *tile_counts; /**< ntiles * nbins: tile t's counts (its slice) */
    unsigned char *tile_done;     /**< ntiles: 1 once tile t's slice is written */
} md_cuda_rdf_tiles;

/** @brief Make the frame-range job: @p nframes frames of @p natoms positions @p frames (host,
 *  frame after frame) in boxes @p boxes (3 edges a frame), selections as md_cuda_rdf_plan_create,
 *  accumulated into an accumulator shaped like @p shape (its rmax and nbins), @p frames_per_tile
 *  frames a tile, @p nworkers workers on @p devices (NULL: all on the current device). The frames
 *  and boxes are read by the runs, not copied. Errors: a CPU rung (MD_ERR_UNSUPPORTED), a box
 *  below 2 rmax (MD_ERR_RANGE naming the frame), those of md_cuda_rdf_plan_create, bad arguments.
 *  On failure @p j is zeroed. The current device is kept. */
md_status md_cuda_rdf_tiles_create(md_cuda_rdf_tiles *j, md_rdf_variant variant, int natoms, const md_float4 *frames,
                                   const double *boxes, int nframes, const int *sel_a, int na, const int *sel_b, int nb,
                                   const md_rdf *shape, int frames_per_tile, int nworkers, const int *devices);

/** @brief The md_cuda_tile_fn of a frame-range job (@p arg: the md_cuda_rdf_tiles): each frame of the
 *  tile copied to the worker's device and enqueued on its plan, one sync into the worker's
 *  accumulator, the counts copied into the tile's slice. */
md_status md_cuda_rdf_tiles_tile(int worker, int device, int tile, void *arg);

/** @brief Run every frame range of @p j (md_cuda_tiles_run, workers bound to their devices). */
md_status md_cuda_rdf_tiles_run(md_cuda_rdf_tiles *j, md_cuda_tile_progress_fn progress, void *progress_arg,
                                md_cuda_tiles_stats *stats);

/** @brief Add the job's result to @p r (shaped like the job's accumulator): every tile's counts
 *  summed in 64-bit integers, then each frame's normalisation (md_rdf_add_frame) in frame order,
 *  so @p r ends bitwise as if one plan had taken every frame in order. Errors: a tile not computed
 *  (MD_ERR_INVALID_ARGUMENT, naming it), @p r of another shape. On failure @p r is untouched. */
md_status md_cuda_rdf_tiles_finish(const md_cuda_rdf_tiles *j, md_rdf *r);

/** @brief Free the plans (each on its device), buffers and accumulators, zero @p j; safe on a zeroed job. */
void md_cuda_rdf_tiles_destroy(md_cuda_rdf_tiles *j);

/** @brief An energy measurement of one device (md_cuda_energy_begin / md_cuda_energy_end). */
typedef struct md_cuda_energy {
    int device;                    /**< the CUDA device measured */
    void *nvml_device;             /**< NVML's handle of it (found by PCI bus id) */
    unsigned long long energy0_mj; /**< the energy counter at begin (mJ since the driver loaded) */
    unsigned long long energy1_mj; /**< at end */
    double t0;                     /**< md_wall_seconds() at begin */
    double seconds;                /**< wall seconds from begin to end */
    double joules;                 /**< energy used from begin to end (J) */
    double watts;                  /**< average power: joules / seconds (W) */
    double power0_w;               /**< power reading at begin (W) */
    double power1_w;               /**< power reading at end (W) */
    unsigned int sm_clock0_mhz;    /**< SM clock at begin (MHz) */
    unsigned int sm_clock1_mhz;    /**< SM clock at end (MHz) */
} md_cuda_energy;

/** @brief Whether NVML can be used: loads libnvidia-ml.so.1 (dlopen) and initialises it, once per
 *  process. MD_OK, or MD_ERR_UNSUPPORTED naming the library and why (not installed, a missing
 *  symbol, nvmlInit_v2's error). */
md_status md_cuda_energy_available(void);

/** @brief Start measuring CUDA device @p device: wait for the device (cudaDeviceSynchronize, so
 *  earlier work is not counted), read its energy counter, power and SM clock into @p e. Errors:
 *  NVML unavailable (MD_ERR_UNSUPPORTED), the device not found by NVML or a read that fails
 *  (MD_ERR_UNSUPPORTED, naming the NVML call and its error string), CUDA errors. The current
 *  device is kept. */
md_status md_cuda_energy_begin(md_cuda_energy *e, int device);

/** @brief Stop measuring: wait for the device, read the counter, power and clock again and fill
 *  joules, seconds and watts. Errors: as md_cuda_energy_begin, and a counter that went backwards
 *  (MD_ERR_RANGE). */
md_status md_cuda_energy_end(md_cuda_energy *e);

/** @brief md_cuda_energy_begin, @p fn(@p arg), md_cuda_energy_end: the energy of one callable on
 *  @p device. Returns @p fn's error if it fails (nothing measured). */
md_status md_cuda_energy_measure(int device, md_status (*fn)(void *arg), void *arg, md_cuda_energy *e);

#endif /* MD_CUDA_TILES_DECLARED */

#if defined(MD_CUDA_IMPLEMENTATION) && defined(MD_CUDA_TILES_DECLARED) && !defined(MD_CUDA_TILES_IMPLEMENTED)
#define MD_CUDA_TILES_IMPLEMENTED

#include <dlfcn.h>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

/* ---- the scheduler ---- */

/* The state the workers share; every field but next is guarded by mu. */
typedef struct md__tiles_run {
    const md_cuda_tiles_desc *d;
    md_cuda_tile_fn fn;
    void *arg;
    int max_failures;
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<int> next;                  /* the next fresh tile */
    std::vector<int> queue;                 /* tiles put back, served first */
    std::vector<unsigned long long> failed; /* per tile: bit w set once worker w failed on it */
    std::vector<int> attempts, worker_of;   /* per tile */
    std::vector<std::string> tile_msg;      /* per tile: its last failure */
    unsigned long long all, live;           /* masks of the workers, of the live ones */
    int in_flight, completed, abort;
    long long retries, nattempts;
    int tiles_of[MD_CUDA_TILES_MAX_WORKERS], failures_of[MD_CUDA_TILES_MAX_WORKERS];
    int abort_tile;
    md_status abort_status;
    char abort_msg[1024];
    char last_msg[MD_CUDA_TILES_MAX_WORKERS][640]; /* each worker's last failure */
} md__tiles_run;

/* With mu held: end the run (the first reason wins). */
static void md__tiles_abort(md__tiles_run *R, int tile, md_status st, const char *why, const char *last) {
    if (R->abort) return;
    R->abort = 1;
    R->abort_tile = tile;
    R->abort_status = st;
    snprintf(R->abort_msg, sizeof R->abort_msg, "tile %d: %s; last error: %s", tile, why, last);
}

/* With mu held: is some tile dead (no live worker may take it), or are there no live workers? */
static void md__tiles_check_dead(md__tiles_run *R, int w, md_status st) {
    size_t i;
    if (R->completed == R->d->ntiles) return;
    if (R->live == 0) {
        const int fresh = R->next.load() < R->d->ntiles ? R->next.load() : R->d->ntiles - 1;
        if (R->queue.empty()) md__tiles_abort(R, fresh, st, "no live worker remains", R->last_msg[w]);
        else md__tiles_abort(R, R->queue[0], st, "no live worker remains", R->tile_msg[(size_t)R->queue[0]].c_str());
        return;
    }
    for (i = 0; i < R->queue.size(); i++) {
        const int t = R->queue[i];
        if ((R->failed[t] & R->all) == R->all) {
            md__tiles_abort(R, t, st, "failed on every worker", R->tile_msg[(size_t)t].c_str());
            return;
        }
        if ((R->failed[t] & R->live) == R->live) {
            md__tiles_abort(R, t, st, "failed on every live worker", R->tile_msg[(size_t)t].c_str());
            return;
        }
    }
}

/* With mu held: the next tile worker w may take, -1 when it should stop; waits while tiles it
 * may not take are held by others. */
static int md__tiles_take(md__tiles_run *R, int w, std::unique_lock<std::mutex> &lk) {
    const unsigned long long me = 1ull << w;
    for (;;) {
        size_t i;
        int t;
        if (R->abort || !(R->live & me) || R->completed == R->d->ntiles) return -1;
        for (i = 0; i < R->queue.size(); i++)
            if (!(R->failed[R->queue[i]] & me)) {
                t = R->queue[i];
                R->queue.erase(R->queue.begin() + (long)i);
                R->in_flight++;
                return t;
            }
        if (R->next.load() < R->d->ntiles) {
            t = R->next.fetch_add(1);
            if (t < R->d->ntiles) {
                R->in_flight++;
                return t;
            }
        }
        if (R->queue.empty() && R->in_flight == 0) return -1; /* nothing left for anyone */
        R->cv.wait(lk); /* tiles held by others may come back */
    }
}

static void md__tiles_worker(md__tiles_run *R, int w) {
    const int device = R->d->devices ? R->d->devices[w] : 0;
    const unsigned long long me = 1ull << w;
    std::unique_lock<std::mutex> lk(R->mu);
    if (R->d->bind_device) {
        cudaError_t e;
        lk.unlock();
        e = cudaSetDevice(device);
        lk.lock();
        if (e != cudaSuccess) { /* a worker without its device is retired at once */
            md_cuda_error(e, "cudaSetDevice(worker's device)", __FILE__, __LINE__);
            snprintf(R->last_msg[w], sizeof R->last_msg[w], "worker %d, device %d: %s", w, device, md_last_error());
            R->failures_of[w] = R->max_failures;
            R->live &= ~me;
            md__tiles_check_dead(R, w, e == cudaErrorNoDevice ? MD_ERR_NO_DEVICE : MD_ERR_CUDA);
            R->cv.notify_all();
            return;
        }
    }
    for (;;) {
        md_status st;
        const int t = md__tiles_take(R, w, lk);
        if (t < 0) break;
        lk.unlock();
        md_clear_error();
        st = R->fn(w, device, t, R->arg);
        lk.lock();
        R->attempts[t]++;
        R->nattempts++;
        R->in_flight--;
        if (st == MD_OK) {
            R->worker_of[t] = w;
            R->tiles_of[w]++;
            R->completed++;
            if (R->d->progress) R->d->progress(R->completed, R->d->ntiles, R->d->progress_arg);
        } else {
            snprintf(R->last_msg[w], sizeof R->last_msg[w], "worker %d (device %d), attempt %d: %s: %s", w, device,
                     R->attempts[t], md_status_string(st), md_last_error());
            R->tile_msg[(size_t)t] = R->last_msg[w];
            R->failed[t] |= me;
            if (++R->failures_of[w] >= R->max_failures) R->live &= ~me;
            R->queue.push_back(t);
            R->retries++;
            md__tiles_check_dead(R, w, st);
        }
        R->cv.notify_all();
    }
    R->cv.notify_all();
}

md_status md_cuda_tiles_run(const md_cuda_tiles_desc *d, md_cuda_tile_fn fn, void *arg, md_cuda_tiles_stats *stats) {
    const char *where = "md_cuda_tiles_run";
    md__tiles_run *R;
    std::vector<std::thread> threads;
    md_status st = MD_OK;
    double t0;
    int w, k;
    if (!d || !fn) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, d ? "fn" : "d", "is NULL");
    if (d->ntiles < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "ntiles", "is %d (needs >= 1)", d->ntiles);
    if (d->nworkers < 1 || d->nworkers > MD_CUDA_TILES_MAX_WORKERS)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "nworkers", "is %d (needs 1..%d)", d->nworkers,
                            MD_CUDA_TILES_MAX_WORKERS);
    if (d->max_failures < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "max_failures", "is negative");
    for (w = 0; d->devices && w < d->nworkers; w++)
        if (d->devices[w] < 0)
            return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "devices", "device of worker %d is %d", w, d->devices[w]);
    R = new (std::nothrow) md__tiles_run();
    if (!R) return md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, NULL, "the run's state");
    try {
        R->failed.assign((size_t)d->ntiles, 0ull);
        R->attempts.assign((size_t)d->ntiles, 0);
        R->worker_of.assign((size_t)d->ntiles, -1);
        R->tile_msg.resize((size_t)d->ntiles);
        R->queue.reserve((size_t)d->ntiles);
    } catch (...) {
        delete R;
        return md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, "ntiles", "%d tiles", d->ntiles);
    }
    R->d = d;
    R->fn = fn;
    R->arg = arg;
    R->max_failures = d->max_failures ? d->max_failures : 2;
    R->next.store(0);
    R->all = R->live = d->nworkers == 64 ? ~0ull : (1ull << d->nworkers) - 1;
    t0 = md_wall_seconds();
    for (w = 0; w < d->nworkers; w++) {
        try {
            threads.emplace_back(md__tiles_worker, R, w);
        } catch (...) { /* the threads started finish the run; this worker never joins it */
            std::lock_guard<std::mutex> g(R->mu);
            snprintf(R->last_msg[w], sizeof R->last_msg[w], "worker %d: its thread could not be started", w);
            R->live &= ~(1ull << w);
            R->failures_of[w] = R->max_failures;
            if (w == 0) md__tiles_abort(R, -1, MD_ERR_UNSUPPORTED, "no worker thread could be started", R->last_msg[w]);
            md__tiles_check_dead(R, w, MD_ERR_UNSUPPORTED);
            R->cv.notify_all();
        }
    }
    for (auto &th : threads) th.join();
    if (stats) {
        unsigned long long dev_seen[MD_CUDA_TILES_MAX_WORKERS];
        int nd = 0, i;
        memset(stats, 0, sizeof *stats);
        stats->ntiles = d->ntiles;
        stats->nworkers = d->nworkers;
        stats->completed = R->completed;
        stats->attempts = R->nattempts;
        stats->retries = R->retries;
        for (w = 0; w < d->nworkers; w++) {
            const unsigned long long dev = d->devices ? (unsigned long long)d->devices[w] : 0ull;
            stats->tiles_of[w] = R->tiles_of[w];
            stats->failures_of[w] = R->failures_of[w];
            stats->retired_of[w] = !(R->live & (1ull << w));
            stats->retired += stats->retired_of[w];
            for (i = 0; i < nd && dev_seen[i] != dev; i++) {
            }
            if (i == nd) dev_seen[nd++] = dev;
        }
        stats->ndevices = nd;
        stats->wall_s = md_wall_seconds() - t0;
    }
    for (k = 0; k < d->ntiles; k++) {
        if (d->tile_worker) d->tile_worker[k] = R->worker_of[k];
        if (d->tile_attempts) d->tile_attempts[k] = R->attempts[k];
    }
    if (R->completed != d->ntiles)
        st = md_set_error(R->abort ? R->abort_status : MD_ERR_INVALID_ARGUMENT, where, 0, "tile", "%s (%d of %d tiles done)",
                          R->abort ? R->abort_msg : "the run ended early", R->completed, d->ntiles);
    delete R;
    return st;
}

md_status md_cuda_tiles_spread(int *devices, int nworkers, int *ndevices) {
    int n = 0, w;
    if (!devices || nworkers < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_tiles_spread", 0, devices ? "nworkers" : "devices",
                            devices ? "is below 1" : "is NULL");
    MD_CUDA_TRY(cudaGetDeviceCount(&n));
    if (n < 1) return md_set_error(MD_ERR_NO_DEVICE, "md_cuda_tiles_spread", 0, NULL, "no CUDA device");
    for (w = 0; w < nworkers; w++) devices[w] = w % n;
    if (ndevices) *ndevices = n;
    return MD_OK;
}

/* A job's run: its tiles on its workers, each bound to its device. */
static md_status md__tiles_run_job(int ntiles, int nworkers, const int *devices, md_cuda_tile_fn fn, void *job,
                                   md_cuda_tile_progress_fn progress, void *progress_arg, md_cuda_tiles_stats *stats) {
    md_cuda_tiles_desc d;
    memset(&d, 0, sizeof d);
    d.ntiles = ntiles;
    d.nworkers = nworkers;
    d.devices = devices;
    d.bind_device = 1;
    d.progress = progress;
    d.progress_arg = progress_arg;
    return md_cuda_tiles_run(&d, fn, job, stats);
}

/* ---- user 1: the potential map in z-slabs ---- */

md_status md_cuda_dcs_plan_set_origin(md_cuda_dcs_plan *p, const double origin[3]) {
    const char *where = "md_cuda_dcs_plan_set_origin";
    if (!p || !p->d_out) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "p", "is not a plan (md_cuda_dcs_plan_create)");
    if (!origin || !isfinite(origin[0]) || !isfinite(origin[1]) || !isfinite(origin[2]))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "origin", "is NULL or not finite");
    p->geometry.origin[0] = origin[0];
    p->geometry.origin[1] = origin[1];
    p->geometry.origin[2] = origin[2];
    return MD_OK;
}

/* A job's set-up failed for worker w: the error again, naming the worker. */
static md_status md__tiles_worker_failed(md_status st, const char *where, int w) {
    char msg[600]; /* md_last_error() is the buffer md_set_error writes: copy it first */
    snprintf(msg, sizeof msg, "%s", md_last_error());
    return md_set_error(st, where, 0, "plans", "worker %d: %s", w, msg);
}

/* Copy the worker list (NULL: every worker on the current device). */
static md_status md__tiles_devices(int **out, int nworkers, const int *devices, const char *where) {
    int cur = 0, w;
    if (!devices) MD_CUDA_TRY(cudaGetDevice(&cur));
    if (!(*out = (int *)md_alloc_array((size_t)nworkers, sizeof(int)))) return MD_ERR_OUT_OF_MEMORY;
    for (w = 0; w < nworkers; w++) {
        (*out)[w] = devices ? devices[w] : cur;
        if ((*out)[w] < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "devices", "device of worker %d is %d", w, (*out)[w]);
    }
    return MD_OK;
}

void md_cuda_dcs_tiles_destroy(md_cuda_dcs_tiles *j) {
    int cur = -1, w;
    if (!j) return;
    if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
    for (w = 0; w < j->nworkers; w++) {
        if (j->plans && j->plans[w].d_out && j->devices && cudaSetDevice(j->devices[w]) == cudaSuccess)
            md_cuda_dcs_plan_destroy(&j->plans[w]);
        if (j->slabs) md_grid_free(&j->slabs[w]);
    }
    if (cur >= 0) (void)cudaSetDevice(cur);
    md_free(j->plans);
    md_free(j->slabs);
    md_free(j->devices);
    memset(j, 0, sizeof *j);
}

md_status md_cuda_dcs_tiles_create(md_cuda_dcs_tiles *j, md_dcs_variant variant, const md_float4 *xyzq, int n,
                                   md_grid *grid, int planes, int nworkers, const int *devices) {
    const char *where = "md_cuda_dcs_tiles_create";
    md_status st;
    int cur = 0, w;
    if (!j) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "j", "is NULL");
    memset(j, 0, sizeof *j);
    if (!xyzq || n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "xyzq", "needs atoms (n = %d)", n);
    if (!grid || !grid->data || grid->n[0] < 1 || grid->n[1] < 1 || grid->n[2] < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "grid", "needs dimensions and data");
    if (planes < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "planes", "is %d (needs >= 1)", planes);
    if (nworkers < 1 || nworkers > MD_CUDA_TILES_MAX_WORKERS)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "nworkers", "is %d (needs 1..%d)", nworkers,
                            MD_CUDA_TILES_MAX_WORKERS);
    MD_CUDA_TRY(cudaGetDevice(&cur));
    j->variant = variant;
    j->grid = grid;
    j->n = n;
    j->planes = planes < grid->n[2] ? planes : grid->n[2];
    j->ntiles = (grid->n[2] + j->planes - 1) / j->planes;
    j->nworkers = nworkers;
    if ((st = md__tiles_devices(&j->devices, nworkers, devices, where)) != MD_OK ||
        !(j->plans = (md_cuda_dcs_plan *)md_alloc_array((size_t)nworkers, sizeof(md_cuda_dcs_plan))) ||
        !(j->slabs = (md_grid *)md_alloc_array((size_t)nworkers, sizeof(md_grid)))) {
        if (st == MD_OK) st = MD_ERR_OUT_OF_MEMORY;
        md_cuda_dcs_tiles_destroy(j);
        return st;
    }
    memset(j->plans, 0, (size_t)nworkers * sizeof(md_cuda_dcs_plan));
    memset(j->slabs, 0, (size_t)nworkers * sizeof(md_grid));
    for (w = 0; w < nworkers && st == MD_OK; w++) {
        md_grid geom = *grid;
        geom.n[2] = j->planes;
        geom.data = NULL;
        if ((st = md_grid_alloc(&j->slabs[w], grid->n[0], grid->n[1], j->planes, grid->origin, grid->spacing)) != MD_OK) break;
        const cudaError_t e = cudaSetDevice(j->devices[w]);
        if (e != cudaSuccess) {
            st = md_cuda_error(e, "cudaSetDevice(worker's device)", __FILE__, __LINE__);
            break;
        }
        if ((st = md_cuda_dcs_plan_create(&j->plans[w], variant, n, &geom)) != MD_OK) break;
        if ((st = md_cuda_dcs_plan_upload(&j->plans[w], xyzq, n)) != MD_OK) break;
        st = md_cuda_dcs_plan_sync(&j->plans[w], NULL); /* the upload is done before xyzq may change */
    }
    (void)cudaSetDevice(cur);
    if (st != MD_OK) {
        st = md__tiles_worker_failed(st, where, w);
        md_cuda_dcs_tiles_destroy(j); /* sets no error */
    }
    return st;
}

md_status md_cuda_dcs_tiles_tile(int worker, int device, int tile, void *arg) {
    const char *where = "md_cuda_dcs_tiles_tile";
    md_cuda_dcs_tiles *j = (md_cuda_dcs_tiles *)arg;
    md_cuda_dcs_plan *p;
    md_grid *g, *slab;
    double origin[3];
    size_t plane;
    int k0, k1, base;
    md_status st;
    (void)device;
    if (!j || !j->plans || worker < 0 || worker >= j->nworkers || tile < 0 || tile >= j->ntiles)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "tile", "worker %d, tile %d outside the job", worker, tile);
    p = &j->plans[worker];
    g = j->grid;
    slab = &j->slabs[worker];
    plane = (size_t)g->n[0] * g->n[1];
    k0 = tile * j->planes;
    k1 = k0 + j->planes < g->n[2] ? k0 + j->planes : g->n[2];
    base = g->n[2] - j->planes < k0 ? g->n[2] - j->planes : k0; /* the last slab ends at the grid's last plane */
    origin[0] = g->origin[0];
    origin[1] = g->origin[1];
    origin[2] = g->origin[2] + base * g->spacing[2];
    if ((st = md_cuda_dcs_plan_set_origin(p, origin)) != MD_OK) return st;
    if ((st = md_cuda_dcs_plan_enqueue(p)) != MD_OK) return st;
    if ((st = md_cuda_dcs_plan_sync(p, slab)) != MD_OK) return st;
    memcpy(g->data + (size_t)k0 * plane, slab->data + (size_t)(k0 - base) * plane, (size_t)(k1 - k0) * plane * sizeof(float));
    return MD_OK;
}

md_status md_cuda_dcs_tiles_run(md_cuda_dcs_tiles *j, md_cuda_tile_progress_fn progress, void *progress_arg,
                                md_cuda_tiles_stats *stats) {
    if (!j || !j->plans) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_dcs_tiles_run", 0, "j", "is not a job (md_cuda_dcs_tiles_create)");
    return md__tiles_run_job(j->ntiles, j->nworkers, j->devices, md_cuda_dcs_tiles_tile, j, progress, progress_arg, stats);
}

/* ---- user 2: a multi-frame RDF in frame ranges ---- */

void md_cuda_rdf_tiles_destroy(md_cuda_rdf_tiles *j) {
    int cur = -1, w;
    if (!j) return;
    if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
    for (w = 0; w < j->nworkers; w++) {
        if (j->devices && cudaSetDevice(j->devices[w]) == cudaSuccess) {
            if (j->plans) md_cuda_rdf_plan_destroy(&j->plans[w]);
            if (j->d_frame) md_cuda_free(j->d_frame[w]);
        }
        if (j->scratch) md_rdf_free(&j->scratch[w]);
    }
    if (cur >= 0) (void)cudaSetDevice(cur);
    md_free(j->plans);
    md_free(j->d_frame);
    md_free(j->scratch);
    md_free(j->devices);
    md_free(j->tile_counts);
    md_free(j->tile_done);
    memset(j, 0, sizeof *j);
}

md_status md_cuda_rdf_tiles_create(md_cuda_rdf_tiles *j, md_rdf_variant variant, int natoms, const md_float4 *frames,
                                   const double *boxes, int nframes, const int *sel_a, int na, const int *sel_b, int nb,
                                   const md_rdf *shape, int frames_per_tile, int nworkers, const int *devices) {
    const char *where = "md_cuda_rdf_tiles_create";
    md_status st;
    int cur = 0, w, f;
    if (!j) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "j", "is NULL");
    memset(j, 0, sizeof *j);
    if (!md_rdf_variant_is_gpu(variant))
        return md_set_error(MD_ERR_UNSUPPORTED, where, 0, "variant", "%s is not a GPU rung", md_rdf_variant_name(variant));
    if (!frames || !boxes || nframes < 1 || natoms < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "frames", "needs frames, boxes, nframes >= 1 and natoms >= 1");
    if (!shape || shape->nbins < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "shape", "needs an accumulator (md_rdf_init)");
    if (frames_per_tile < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "frames_per_tile", "is %d (needs >= 1)", frames_per_tile);
    if (nworkers < 1 || nworkers > MD_CUDA_TILES_MAX_WORKERS)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "nworkers", "is %d (needs 1..%d)", nworkers,
                            MD_CUDA_TILES_MAX_WORKERS);
    for (f = 0; f < nframes; f++)
        if (md_rdf_check_box(where, boxes + 3 * (size_t)f, shape->rmax) != MD_OK)
            return md_set_error(MD_ERR_RANGE, where, 0, "boxes", "frame %d: box below 2 rmax or not finite", f);
    if ((st = md_rdf_selection_pairs(natoms, sel_a, na, sel_b, nb, &j->pairs, &j->centers)) != MD_OK) return st;
    MD_CUDA_TRY(cudaGetDevice(&cur));
    j->variant = variant;
    j->natoms = natoms;
    j->nframes = nframes;
    j->frames = frames;
    j->boxes = boxes;
    j->frames_per_tile = frames_per_tile < nframes ? frames_per_tile : nframes;
    j->ntiles = (nframes + j->frames_per_tile - 1) / j->frames_per_tile;
    j->nbins = shape->nbins;
    j->rmax = shape->rmax;
    j->nworkers = nworkers;
    if ((st = md__tiles_devices(&j->devices, nworkers, devices, where)) != MD_OK ||
        !(j->plans = (md_cuda_rdf_plan *)md_alloc_array((size_t)nworkers, sizeof(md_cuda_rdf_plan))) ||
        !(j->d_frame = (md_float4 **)md_alloc_array((size_t)nworkers, sizeof(md_float4 *))) ||
        !(j->scratch = (md_rdf *)md_alloc_array((size_t)nworkers, sizeof(md_rdf))) ||
        !(j->tile_counts = (unsigned long long *)md_alloc_array((size_t)j->ntiles * j->nbins, sizeof(unsigned long long))) ||
        !(j->tile_done = (unsigned char *)md_alloc_array((size_t)j->ntiles, 1))) {
        if (st == MD_OK) st = MD_ERR_OUT_OF_MEMORY;
        md_cuda_rdf_tiles_destroy(j);
        return st;
    }
    memset(j->plans, 0, (size_t)nworkers * sizeof(md_cuda_rdf_plan));
    memset(j->d_frame, 0, (size_t)nworkers * sizeof(md_float4 *));
    memset(j->scratch, 0, (size_t)nworkers * sizeof(md_rdf));
    memset(j->tile_done, 0, (size_t)j->ntiles);
    for (w = 0; w < nworkers && st == MD_OK; w++) {
        cudaError_t e;
        if ((st = md_rdf_init(&j->scratch[w], shape->rmax, shape->nbins)) != MD_OK) break;
        if ((e = cudaSetDevice(j->devices[w])) != cudaSuccess) {
            st = md_cuda_error(e, "cudaSetDevice(worker's device)", __FILE__, __LINE__);
            break;
        }
        if ((st = md_cuda_rdf_plan_create(&j->plans[w], natoms, sel_a, na, sel_b, nb, shape->nbins, NULL)) != MD_OK) break;
        st = md_cuda_alloc((void **)&j->d_frame[w], (size_t)natoms, sizeof(md_float4), "rdf tiles: frame");
    }
    (void)cudaSetDevice(cur);
    if (st != MD_OK) {
        st = md__tiles_worker_failed(st, where, w);
        md_cuda_rdf_tiles_destroy(j); /* sets no error */
    }
    return st;
}

md_status md_cuda_rdf_tiles_tile(int worker, int device, int tile, void *arg) {
    const char *where = "md_cuda_rdf_tiles_tile";
    md_cuda_rdf_tiles *j = (md_cuda_rdf_tiles *)arg;
    md_cuda_rdf_plan *p;
    md_rdf *acc;
    md_status st = MD_OK;
    int f0, f1, f;
    (void)device;
    if (!j || !j->plans || worker < 0 || worker >= j->nworkers || tile < 0 || tile >= j->ntiles)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "tile", "worker %d, tile %d outside the job", worker, tile);
    p = &j->plans[worker];
    acc = &j->scratch[worker];
    f0 = tile * j->frames_per_tile;
    f1 = f0 + j->frames_per_tile < j->nframes ? f0 + j->frames_per_tile : j->nframes;
    md_rdf_reset(acc);
    for (f = f0; f < f1 && st == MD_OK; f++) {
        /* one frame buffer: the copy of frame f + 1 waits, in stream order, for frame f's kernels */
        const cudaError_t e = cudaMemcpyAsync(j->d_frame[worker], j->frames + (size_t)f * j->natoms,
                                              (size_t)j->natoms * sizeof(md_float4), cudaMemcpyHostToDevice, p->queue.stream);
        if (e != cudaSuccess) st = md_cuda_error(e, "cudaMemcpyAsync(frame)", __FILE__, __LINE__);
        else st = md_cuda_rdf_plan_enqueue(j->variant, p, acc, j->d_frame[worker], j->boxes + 3 * (size_t)f);
    }
    if (st != MD_OK) { /* drop what was enqueued, so the worker's next tile starts clean */
        char msg[600];
        snprintf(msg, sizeof msg, "%s", md_last_error());
        (void)md_cuda_rdf_plan_sync(p, acc);
        md_rdf_reset(acc);
        return md_set_error(st, where, 0, "frame", "tile %d, frame %d: %s", tile, f - 1, msg);
    }
    if ((st = md_cuda_rdf_plan_sync(p, acc)) != MD_OK) return st;
    memcpy(j->tile_counts + (size_t)tile * j->nbins, acc->counts, (size_t)j->nbins * sizeof(unsigned long long));
    j->tile_done[tile] = 1;
    return MD_OK;
}

md_status md_cuda_rdf_tiles_run(md_cuda_rdf_tiles *j, md_cuda_tile_progress_fn progress, void *progress_arg,
                                md_cuda_tiles_stats *stats) {
    if (!j || !j->plans) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_rdf_tiles_run", 0, "j", "is not a job (md_cuda_rdf_tiles_create)");
    return md__tiles_run_job(j->ntiles, j->nworkers, j->devices, md_cuda_rdf_tiles_tile, j, progress, progress_arg, stats);
}

md_status md_cuda_rdf_tiles_finish(const md_cuda_rdf_tiles *j, md_rdf *r) {
    const char *where = "md_cuda_rdf_tiles_finish";
    md_rdf sum;
    md_status st;
    int t, b, f;
    if (!j || !j->tile_done) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "j", "is not a job (md_cuda_rdf_tiles_create)");
    if (!r || !r->counts || r->nbins != j->nbins || r->rmax != j->rmax)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "r", "needs an accumulator of %d bins to %g nm", j->nbins, j->rmax);
    for (t = 0; t < j->ntiles; t++)
        if (!j->tile_done[t]) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "tile", "tile %d was not computed", t);
    /* into a copy, so r is untouched on failure */
    if ((st = md_rdf_init(&sum, r->rmax, r->nbins)) != MD_OK) return st;
    memcpy(sum.counts, r->counts, (size_t)r->nbins * sizeof(uint64_t));
    sum.frames = r->frames;
    sum.sum_pair_density = r->sum_pair_density;
    sum.sum_centers = r->sum_centers;
    for (t = 0; t < j->ntiles; t++)
        for (b = 0; b < j->nbins; b++) sum.counts[b] += j->tile_counts[(size_t)t * j->nbins + b];
    for (f = 0; f < j->nframes; f++)
        if ((st = md_rdf_add_frame(&sum, j->boxes + 3 * (size_t)f, j->pairs, j->centers)) != MD_OK) {
            md_rdf_free(&sum);
            return st;
        }
    memcpy(r->counts, sum.counts, (size_t)r->nbins * sizeof(uint64_t));
    r->frames = sum.frames;
    r->sum_pair_density = sum.sum_pair_density;
    r->sum_centers = sum.sum_centers;
    md_rdf_free(&sum);
    return MD_OK;
}

/* ---- energy from NVML, loaded at run time ---- */

/* The NVML functions used (nvml.h: nvmlReturn_t is an enum, 0 = NVML_SUCCESS; nvmlDevice_t an
 * opaque pointer; NVML_CLOCK_SM = 1). */
typedef int (*md__nvml_init_fn)(void);
typedef const char *(*md__nvml_error_string_fn)(int);
typedef int (*md__nvml_by_pci_fn)(const char *, void **);
typedef int (*md__nvml_energy_fn)(void *, unsigned long long *);
typedef int (*md__nvml_uint_fn)(void *, unsigned int *);
typedef int (*md__nvml_clock_fn)(void *, int, unsigned int *);
#define MD__NVML_CLOCK_SM 1

typedef struct md__nvml {
    void *lib;
    md__nvml_error_string_fn error_string;
    md__nvml_by_pci_fn by_pci;
    md__nvml_energy_fn energy;
    md__nvml_uint_fn power;
    md__nvml_clock_fn clock;
    md_status status; /* of the one load */
    char why[384];
} md__nvml;

static md__nvml md__nvml_lib;
static std::once_flag md__nvml_once;

static void md__nvml_load(void) {
    md__nvml *L = &md__nvml_lib;
    md__nvml_init_fn init;
    int rc;
    L->status = MD_ERR_UNSUPPORTED;
    if (!(L->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
        const char *e = dlerror();
        snprintf(L->why, sizeof L->why, "libnvidia-ml.so.1 (NVML, part of the NVIDIA driver) could not be loaded: %s",
                 e ? e : "?");
        return;
    }
    init = (md__nvml_init_fn)dlsym(L->lib, "nvmlInit_v2");
    L->error_string = (md__nvml_error_string_fn)dlsym(L->lib, "nvmlErrorString");
    L->by_pci = (md__nvml_by_pci_fn)dlsym(L->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    L->energy = (md__nvml_energy_fn)dlsym(L->lib, "nvmlDeviceGetTotalEnergyConsumption");
    L->power = (md__nvml_uint_fn)dlsym(L->lib, "nvmlDeviceGetPowerUsage");
    L->clock = (md__nvml_clock_fn)dlsym(L->lib, "nvmlDeviceGetClockInfo");
    if (!init || !L->error_string || !L->by_pci || !L->energy || !L->power || !L->clock) {
        snprintf(L->why, sizeof L->why, "libnvidia-ml.so.1 lacks a function md_cuda_energy needs (nvmlInit_v2, "
                                        "nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetTotalEnergyConsumption, ...)");
        return;
    }
    if ((rc = init()) != 0) {
        snprintf(L->why, sizeof L->why, "nvmlInit_v2 failed: %s (%d)", L->error_string(rc), rc);
        return;
    }
    L->status = MD_OK;
}

md_status md_cuda_energy_available(void) {
    std::call_once(md__nvml_once, md__nvml_load);
    if (md__nvml_lib.status != MD_OK)
        return md_set_error(md__nvml_lib.status, "md_cuda_energy", 0, NULL, "%s", md__nvml_lib.why);
    return MD_OK;
}

/* Wait for device e->device (kept current device), then read its counter, power and SM clock. */
static md_status md__energy_read(md_cuda_energy *e, unsigned long long *mj, double *watts, unsigned int *mhz,
                                 const char *where) {
    md__nvml *L = &md__nvml_lib;
    unsigned int mw = 0;
    int cur = 0, rc;
    cudaError_t ce;
    MD_CUDA_TRY(cudaGetDevice(&cur));
    MD_CUDA_TRY(cudaSetDevice(e->device));
    ce = cudaDeviceSynchronize();
    (void)cudaSetDevice(cur);
    if (ce != cudaSuccess) return md_cuda_error(ce, "cudaDeviceSynchronize (energy)", __FILE__, __LINE__);
    if ((rc = L->energy(e->nvml_device, mj)) != 0)
        return md_set_error(MD_ERR_UNSUPPORTED, where, 0, "device", "nvmlDeviceGetTotalEnergyConsumption: %s (%d)",
                            L->error_string(rc), rc);
    *watts = NAN;
    if (L->power(e->nvml_device, &mw) == 0) *watts = 1e-3 * mw; /* optional: some boards do not report it */
    *mhz = 0;
    (void)L->clock(e->nvml_device, MD__NVML_CLOCK_SM, mhz);
    return MD_OK;
}

md_status md_cuda_energy_begin(md_cuda_energy *e, int device) {
    const char *where = "md_cuda_energy_begin";
    md_cuda_energy m;
    char bus[64];
    md_status st;
    int rc;
    if (!e) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "e", "is NULL");
    if ((st = md_cuda_energy_available()) != MD_OK) return st;
    memset(&m, 0, sizeof m);
    m.device = device;
    MD_CUDA_TRY(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device));
    if ((rc = md__nvml_lib.by_pci(bus, &m.nvml_device)) != 0)
        return md_set_error(MD_ERR_UNSUPPORTED, where, 0, "device", "nvmlDeviceGetHandleByPciBusId_v2(%s): %s (%d)", bus,
                            md__nvml_lib.error_string(rc), rc);
    if ((st = md__energy_read(&m, &m.energy0_mj, &m.power0_w, &m.sm_clock0_mhz, where)) != MD_OK) return st;
    m.t0 = md_wall_seconds();
    *e = m;
    return MD_OK;
}

md_status md_cuda_energy_end(md_cuda_energy *e) {
    const char *where = "md_cuda_energy_end";
    md_cuda_energy m;
    md_status st;
    if (!e || !e->nvml_device) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "e", "was not begun (md_cuda_energy_begin)");
    if ((st = md_cuda_energy_available()) != MD_OK) return st;
    m = *e;
    if ((st = md__energy_read(&m, &m.energy1_mj, &m.power1_w, &m.sm_clock1_mhz, where)) != MD_OK) return st;
    m.seconds = md_wall_seconds() - m.t0;
    if (m.energy1_mj < m.energy0_mj)
        return md_set_error(MD_ERR_RANGE, where, 0, "energy", "the counter went backwards (%llu mJ, then %llu mJ)",
                            m.energy0_mj, m.energy1_mj);
    m.joules = 1e-3 * (double)(m.energy1_mj - m.energy0_mj);
    m.watts = m.seconds > 0.0 ? m.joules / m.seconds : NAN;
    *e = m;
    return MD_OK;
}

md_status md_cuda_energy_measure(int device, md_status (*fn)(void *arg), void *arg, md_cuda_energy *e) {
    md_cuda_energy m;
    md_status st;
    if (!fn || !e) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_cuda_energy_measure", 0, fn ? "e" : "fn", "is NULL");
    if ((st = md_cuda_energy_begin(&m, device)) != MD_OK) return st;
    if ((st = fn(arg)) != MD_OK) return st;
    if ((st = md_cuda_energy_end(&m)) != MD_OK) return st;
    *e = m;
    return MD_OK;
}

#endif /* MD_CUDA_TILES_IMPLEMENTED */
