/* Tests of md_cuda.cu.h's core: availability, device info, poison fill, event timer,
 * md_cuda_bench, error conversion, the kernel launch registry, and the ceiling
 * micro-benchmarks. Seed used: 2026 (poison test input).
 *
 * Without a GPU every device test prints SKIP with md_last_error() as the reason; the tests
 * of host-side behaviour run anyway: the no-device path of md_cuda_available(), the JSON
 * format of md_cuda_ceilings_json(), the registry's table (from many threads at once), and
 * that md_cuda.cu.h launches every kernel through MD_CUDA_LAUNCH.
 *
 * MD_SANITIZE=1 (set by tests/gpu_check.sh under compute-sanitizer) shrinks the buffers and
 * the ceiling benchmarks (md_cuda_ceilings_set_effort(0.01)) and drops the timing-range
 * checks, which mean nothing under instrumentation. Device work without it: about 1 s. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"
#include <dirent.h>
#include <thread>

static int sanitize;

/* Spin for at least ns nanoseconds of the GPU's global timer (wall-clock ns). */
__global__ void spin_kernel(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* md_cuda_available() agrees with what the runtime says directly: a device exists and is
 * sm_70 or newer. With no device it must say 0 and give a reason. */
static void available_matches_runtime(void) {
    int n = 0, avail = md_cuda_available();
    char why[512];
    cudaDeviceProp p;
    cudaError_t e;
    snprintf(why, sizeof why, "%s", md_last_error());
    e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        MD_CHECKF(avail == 0, "md_cuda_available() = %d but cudaGetDeviceCount: %s, n = %d", avail,
                  cudaGetErrorName(e), n);
        MD_CHECKF(why[0] != '\0', "no device, yet md_last_error() is empty");
        return;
    }
    MD_CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
    MD_CHECKF(avail == (p.major >= 7), "md_cuda_available() = %d, device 0 is sm_%d%d", avail, p.major,
              p.minor);
}

/* The info struct is filled and agrees with cudaGetDeviceProperties. */
static void device_info_is_sane(void) {
    md_cuda_device_info info;
    cudaDeviceProp p;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_get_device_info(0, &info));
    MD_CHECK(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
    MD_CHECK(info.name[0] != '\0');
    MD_CHECK(strcmp(info.name, p.name) == 0);
    MD_CHECK(info.sm_count > 0 && info.sm_count == p.multiProcessorCount);
    MD_CHECK(info.l2_bytes > 0);
    MD_CHECK(info.major >= 7);
    MD_CHECK(info.clock_khz > 0);
    MD_CHECK(info.global_mem > 0);
    MD_CHECK(info.smem_per_sm > 0 && info.max_threads_per_sm > 0);
    MD_CHECK(info.runtime_version > 0 && info.driver_version >= info.runtime_version / 1000 * 1000);
    MD_CHECK_ERROR(md_cuda_get_device_info(0, NULL), MD_ERR_INVALID_ARGUMENT, "info");
}

/* Every one of n floats becomes NaN; the float after them is untouched. n is odd so a
 * vectorised fill that rounds the count would show. */
static void poison_makes_every_float_nan(void) {
    size_t n = sanitize ? 4099 : ((size_t)1 << 22) + 3, i, bad = 0;
    float *h = NULL, *d = NULL;
    md_rng rng;
    NEED_GPU();
    h = (float *)md_alloc_array(n + 1, sizeof(float));
    MD_CHECK(h != NULL);
    md_rng_seed(&rng, 2026);
    for (i = 0; i < n; i++) h[i] = (float)(1.0 + md_rng_uniform(&rng));
    h[n] = 7.0f;
    if (cudaMalloc((void **)&d, (n + 1) * sizeof(float)) != cudaSuccess) {
        md_free(h);
        MD_CHECKF(0, "cudaMalloc of %zu floats failed", n + 1);
    }
    if (cudaMemcpy(d, h, (n + 1) * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
        md_cuda_poison(d, n, 0) != MD_OK || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h, d, (n + 1) * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        (void)cudaFree(d);
        md_free(h);
        MD_CHECKF(0, "copy/poison failed: %s", md_last_error());
    }
    (void)cudaFree(d);
    for (i = 0; i < n; i++)
        if (h[i] == h[i]) bad++;
    {
        float guard = h[n];
        md_free(h);
        MD_CHECKF(bad == 0, "%zu of %zu floats are not NaN after md_cuda_poison", bad, n);
        MD_CHECKF(guard == 7.0f, "the float after the poisoned range changed to %g", (double)guard);
    }
}

/* A kernel that spins 2 ms of GPU wall-clock time is timed at 1-20 ms: at least the spin
 * (less 1 ms for a coarse global timer), at most the spin plus launch overhead on a slow or
 * shared device. Under a sanitizer only the lower bound holds. */
static void timer_measures_a_known_kernel(void) {
    md_cuda_timer t;
    double s = 0.0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_timer_create(&t, 0));
    MD_CHECK_OK(md_cuda_timer_start(&t));
    spin_kernel<<<1, 32>>>(2000000LL);
    MD_CHECK(cudaGetLastError() == cudaSuccess);
    MD_CHECK_OK(md_cuda_timer_stop(&t, &s));
    md_cuda_timer_destroy(&t);
    MD_CHECK(t.start == NULL && t.stop == NULL);
    MD_CHECKF(s >= 1e-3 && s <= (sanitize ? 10.0 : 20e-3), "timer measured %g s for a 2 ms spin", s);
}

typedef struct counted {
    int calls;
} counted;

static md_status counted_spin(void *ctx, cudaStream_t stream) {
    ((counted *)ctx)->calls++;
    spin_kernel<<<1, 32, 0, stream>>>(50000LL); /* 50 us */
    MD_CUDA_TRY_LAUNCH("spin_kernel");
    return MD_OK;
}

/* md_cuda_bench calls fn warmup + reps times (given, and the defaults 2 + 11) and returns
 * a median no shorter than half the 50 us spin and no longer than 20 ms. */
static void bench_calls_fn_warmup_plus_reps_times(void) {
    counted c;
    md_cuda_bench_desc d;
    double med = 0.0;
    NEED_GPU();
    memset(&d, 0, sizeof d);
    d.warmup = 3;
    d.reps = 5;
    c.calls = 0;
    MD_CHECK_OK(md_cuda_bench(counted_spin, &c, &d, &med));
    MD_CHECKF(c.calls == 8, "fn called %d times, expected 3 + 5", c.calls);
    MD_CHECKF(med >= 25e-6 && med <= (sanitize ? 10.0 : 20e-3), "median %g s for a 50 us spin", med);
    c.calls = 0;
    MD_CHECK_OK(md_cuda_bench(counted_spin, &c, NULL, &med));
    MD_CHECKF(c.calls == 13, "fn called %d times with the defaults, expected 2 + 11", c.calls);
    MD_CHECK(med > 0.0);
    MD_CHECK_ERROR(md_cuda_bench(NULL, &c, NULL, &med), MD_ERR_INVALID_ARGUMENT, "fn");
}

static md_status alloc_absurd(void) {
    void *p = NULL;
    MD_CUDA_TRY(cudaMalloc(&p, (size_t)1 << 62)); /* 4 EiB: no device has it */
    (void)cudaFree(p);
    return MD_OK;
}

static md_status launch_too_many_threads(void) {
    spin_kernel<<<1, 4096>>>(0LL); /* > 1024 threads per block: cudaErrorInvalidConfiguration */
    MD_CUDA_TRY_LAUNCH("spin_kernel");
    return MD_OK;
}

/* A failed call and a failed launch become MD_ERR_CUDA with a message naming the call and the
 * file; neither error is sticky, so the next call and launch work. */
static void cuda_errors_name_call_and_file(void) {
    void *p = NULL;
    NEED_GPU();
    MD_CHECK_ERROR(alloc_absurd(), MD_ERR_CUDA, "cudaMalloc");
    MD_CHECKF(strstr(md_last_error(), "gpu_core.cu") != NULL, "message '%s' does not name the file",
              md_last_error());
    MD_CHECK(strstr(md_last_error(), "cudaErrorMemoryAllocation") != NULL);
    MD_CHECK_ERROR(launch_too_many_threads(), MD_ERR_CUDA, "launch of spin_kernel");
    MD_CHECK(strstr(md_last_error(), "gpu_core.cu") != NULL);
    MD_CHECK(cudaMalloc(&p, 1024) == cudaSuccess);
    MD_CHECK(cudaFree(p) == cudaSuccess);
    spin_kernel<<<1, 32>>>(0LL);
    MD_CHECK(cudaGetLastError() == cudaSuccess);
    MD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

/* ---- the kernel launch registry ---- */

/* md_cuda.cu.h has exactly one triple-chevron launch: the one inside MD_CUDA_LAUNCH_NAMED, and
 * one call of cudaLaunchKernelEx, the programmatic route (md__launch_pdl) that the same launch
 * site takes for MD__LAUNCH_PDL. Every kernel of the header therefore goes through the registry.
 * Reads the header from the repository root (where make test and tests/gpu_check.sh run). */
static void every_launch_goes_through_the_registry(void) {
    FILE *f = fopen("md_cuda.cu.h", "r");
    char line[4096];
    int n = 0, lineno = 0, site = 0, ex = 0, exsite = 0;
    if (!f) MD_SKIP("md_cuda.cu.h not found: run from the repository root");
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (strstr(line, "cudaLaunchKernelEx(")) { /* the programmatic route (md__launch_pdl), called by the same site */
            const char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            if (*p == '*' || strncmp(p, "/*", 2) == 0) continue; /* a comment naming it */
            ex++;
            if (strstr(line, "the one programmatic launch")) exsite = lineno;
            else printf("  md_cuda.cu.h:%d: a launch outside MD_CUDA_LAUNCH: %s", lineno, line);
        }
        if (!strstr(line, "<<<")) continue;
        n++;
        if (strstr(line, "the one launch site")) site = lineno;
        else printf("  md_cuda.cu.h:%d: a launch outside MD_CUDA_LAUNCH: %s", lineno, line);
    }
    fclose(f);
    MD_CHECKF(site > 0, "the launch line of MD_CUDA_LAUNCH_NAMED was not found");
    MD_CHECKF(n == 1, "%d lines of md_cuda.cu.h launch a kernel; only MD_CUDA_LAUNCH_NAMED (line %d) may", n, site);
    MD_CHECKF(exsite > 0 && ex == 1, "%d lines call cudaLaunchKernelEx; only md__launch_pdl (line %d) may", ex, exsite);
}

/* The identifier at @p q (letters, digits, '_') into @p out. */
static void ident_at(const char *q, char *out, int cap) {
    int k = 0;
    while (k < cap - 1 && (q[k] == '_' || (q[k] >= 'a' && q[k] <= 'z') || (q[k] >= 'A' && q[k] <= 'Z') ||
                           (q[k] >= '0' && q[k] <= '9'))) {
        out[k] = q[k];
        k++;
    }
    out[k] = 0;
}

/* 1 if the __global__ definition of kernel @p kn in @p text begins with md__pdl_wait(), else 0
 * (printed, with the reason). */
static int kernel_waits_first(const char *text, const char *kn) {
    char def[160];
    const char *d = text;
    snprintf(def, sizeof def, " %s(", kn);
    while ((d = strstr(d, def))) {
        const char *ls = d, *g, *body;
        while (ls > text && ls[-1] != '\n') ls--;
        if ((g = strstr(ls, "__global__")) && g < d && (body = strchr(d, '{'))) {
            body++;
            while (*body == ' ' || *body == '\n') body++;
            if (strncmp(body, "md__pdl_wait();", 15) == 0) return 1;
            printf("  %s is launched with MD__LAUNCH_PDL but does not begin with md__pdl_wait()\n", kn);
            return 0;
        }
        d++;
    }
    printf("  no __global__ definition of %s found\n", kn);
    return 0;
}

/* Every kernel launched with programmatic dependent launch (MD__LAUNCH_PDL, directly or through
 * MD__PME_LAUNCH_ORDER, whose kernel is its second argument) begins with md__pdl_wait(): without
 * it the kernel could read what the kernel before it on the stream has not yet written. Reads
 * the header from the repository root. */
static void pdl_kernels_wait_first(void) {
    static const char *const macro[2] = {"MD__LAUNCH_PDL(", "MD__PME_LAUNCH_ORDER("};
    static char text[1 << 23];
    FILE *f = fopen("md_cuda.cu.h", "r");
    size_t len;
    int sites = 0, bad = 0, m;
    if (!f) MD_SKIP("md_cuda.cu.h not found: run from the repository root");
    len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    for (m = 0; m < 2; m++) {
        const char *p = text;
        while ((p = strstr(p, macro[m]))) {
            const char *line = p, *q = p + strlen(macro[m]);
            char kn[128];
            p = q;
            while (line > text && line[-1] != '\n') line--;
            if (strncmp(line, "#define", 7) == 0 || strstr(line, "(kernel<")) continue; /* the macros themselves */
            if (m == 1 && (q = strchr(q, ',')) != NULL) q++;
            if (!q) break;
            while (*q == '(' || *q == ' ' || *q == '\n') q++;
            ident_at(q, kn, (int)sizeof kn);
            sites++;
            bad += !kernel_waits_first(text, kn);
        }
    }
    MD_CHECKF(sites >= 8, "%d programmatic launch sites found (the PME stages have at least 8)", sites);
    MD_CHECKF(bad == 0, "%d programmatic launches of kernels that do not wait first", bad);
}

/* Lines of `path` that use a private name (md__ or MD__) outside a comment (a line whose code
 * starts with "/\*", "*" or "//"), printed; returns their number, or -1 if the file is missing. */
static int private_uses(const char *path) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0, lineno = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        lineno++;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "/*", 2) == 0 || *p == '*' || strncmp(p, "//", 2) == 0) continue;
        if (strstr(p, "md__") || strstr(p, "MD__")) {
            printf("  %s:%d: a private name: %s", path, lineno, line);
            n++;
        }
    }
    fclose(f);
    return n;
}

/* The benchmarks and the chapters (programs, exercises, ladder.h) use md.h's and md_cuda.cu.h's
 * public API only: no md__ or MD__ name outside comments. Host only; reads the files from the
 * repository root. */
static void benches_and_chapters_use_public_api(void) {
    char dirs[64][256], path[512];
    int d, ndirs = 2, files = 0, bad = 0;
    DIR *top = opendir("chapters");
    struct dirent *e;
    if (!top) MD_SKIP("chapters not found: run from the repository root");
    snprintf(dirs[0], sizeof dirs[0], "bench");
    snprintf(dirs[1], sizeof dirs[1], "chapters");
    while ((e = readdir(top)) && ndirs < 64) { /* every chapter folder, present and future */
        DIR *sub;
        if (e->d_name[0] == '.') continue;
        snprintf(dirs[ndirs], sizeof dirs[ndirs], "chapters/%.200s", e->d_name);
        if ((sub = opendir(dirs[ndirs]))) {
            closedir(sub);
            ndirs++;
        }
    }
    closedir(top);
    for (d = 0; d < ndirs; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) MD_SKIP("%.255s not found: run from the repository root", dirs[d]);
        while ((e = readdir(dir))) {
            const char *dot = strrchr(e->d_name, '.');
            int k;
            if (!dot || (strcmp(dot, ".cu") && strcmp(dot, ".c") && strcmp(dot, ".h"))) continue;
            snprintf(path, sizeof path, "%.255s/%.255s", dirs[d], e->d_name);
            if ((k = private_uses(path)) > 0) bad += k;
            if (k >= 0) files++;
        }
        closedir(dir);
    }
    MD_CHECKF(ndirs >= 8, "only %d folders found under bench/ and chapters/", ndirs);
    MD_CHECKF(files >= 14, "only %d source files found", files);
    MD_CHECKF(bad == 0, "%d lines of benchmarks or chapters use a private name", bad);
}

/* Registry table, host only: indices in order of first registration, a second registration
 * keeps the first name, NULLs refused, names copied and cut to MD_CUDA_KERNEL_NAME_MAX - 1
 * characters, md_cuda_kernel_at range checked. Then 8 threads register the same 64 new
 * "functions" (addresses in a static array) at once, each in its own order: exactly 64 new
 * entries, each under the one name every thread gave it. */
static char fake_kernels[64 + 3];

static void register_all(int t) {
    char name[32];
    for (int k = 0; k < 64; k++) {
        const int i = (k * 13 + t * 7) % 64; /* a different order per thread */
        snprintf(name, sizeof name, "fake_%d", i);
        (void)md_cuda_kernel_register(&fake_kernels[3 + i], name);
    }
}

static void kernel_registry_table(void) {
    char longname[MD_CUDA_KERNEL_NAME_MAX + 40], copy[16];
    const void *fn = NULL;
    const char *nm = NULL;
    int base = md_cuda_kernel_count(), i0, i1, k;
    std::thread threads[8];
    snprintf(copy, sizeof copy, "fake_a");
    i0 = md_cuda_kernel_register(&fake_kernels[0], copy);
    MD_CHECKF(i0 == base, "first registration got index %d, want %d", i0, base);
    copy[5] = 'z'; /* the registry keeps its own copy */
    MD_CHECK(md_cuda_kernel_register(&fake_kernels[0], "another name") == i0);
    MD_CHECK(md_cuda_kernel_name(&fake_kernels[0]) != NULL && strcmp(md_cuda_kernel_name(&fake_kernels[0]), "fake_a") == 0);
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    i1 = md_cuda_kernel_register(&fake_kernels[1], longname);
    MD_CHECK(i1 == i0 + 1 && md_cuda_kernel_count() == base + 2);
    MD_CHECK(strlen(md_cuda_kernel_name(&fake_kernels[1])) == MD_CUDA_KERNEL_NAME_MAX - 1);
    MD_CHECK(md_cuda_kernel_register(NULL, "x") == -1 && md_cuda_kernel_register(&fake_kernels[2], NULL) == -1);
    MD_CHECK(md_cuda_kernel_name(&fake_kernels[2]) == NULL && md_cuda_kernel_count() == base + 2);
    MD_CHECK_OK(md_cuda_kernel_at(i0, &fn, &nm));
    MD_CHECK(fn == (const void *)&fake_kernels[0] && strcmp(nm, "fake_a") == 0);
    MD_CHECK_ERROR(md_cuda_kernel_at(base + 2, &fn, &nm), MD_ERR_RANGE, "field i");
    MD_CHECK_ERROR(md_cuda_kernel_at(-1, NULL, NULL), MD_ERR_RANGE, "field i");
    for (k = 0; k < 8; k++) threads[k] = std::thread(register_all, k);
    for (k = 0; k < 8; k++) threads[k].join();
    MD_CHECKF(md_cuda_kernel_count() == base + 2 + 64, "%d entries after 8 threads registered the same 64, want %d",
              md_cuda_kernel_count() - base - 2, 64);
    for (k = 0; k < 64; k++) {
        char want[32];
        snprintf(want, sizeof want, "fake_%d", k);
        nm = md_cuda_kernel_name(&fake_kernels[3 + k]);
        MD_CHECKF(nm && strcmp(nm, want) == 0, "entry %d is named '%s'", k, nm ? nm : "(null)");
    }
}

template <int A, int B> __global__ void pair_kernel(int *out, int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = A * 100 + B + n;
}

static md_status launch_pair(int *d, cudaStream_t s) {
    MD_CUDA_LAUNCH((pair_kernel<3, 4>), 1, 32, 0, s, d, 5); /* commas in the template: parentheses */
    return MD_OK;
}

static md_status launch_pair_too_wide(int *d) {
    MD_CUDA_LAUNCH((pair_kernel<3, 4>), 1, 4096, 0, 0, d, 5); /* > 1024 threads: the launch fails */
    return MD_OK;
}

/* A launch through MD_CUDA_LAUNCH registers the kernel under its spelling, runs it (a
 * template with two arguments, so the parenthesised form is exercised) and, when the launch
 * fails, returns MD_ERR_CUDA naming the kernel and this file. */
static void launch_registers_runs_and_checks(void) {
    int *d = NULL, h = -1;
    const char *nm;
    NEED_GPU();
    MD_CHECK(cudaMalloc((void **)&d, sizeof(int)) == cudaSuccess);
    MD_CHECK_OK(launch_pair(d, 0));
    MD_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    MD_CHECKF(h == 309, "the kernel wrote %d, want 3 * 100 + 4 + 5", h);
    nm = md_cuda_kernel_name((const void *)pair_kernel<3, 4>);
    MD_CHECKF(nm && strcmp(nm, "(pair_kernel<3, 4>)") == 0, "registered as '%s'", nm ? nm : "(null)");
    MD_CHECK(md_cuda_kernel_name((const void *)pair_kernel<4, 3>) == NULL); /* never launched */
    MD_CHECK_ERROR(launch_pair_too_wide(d), MD_ERR_CUDA, "launch of (pair_kernel<3, 4>)");
    MD_CHECK(strstr(md_last_error(), "gpu_core.cu") != NULL);
    MD_CHECK(cudaFree(d) == cudaSuccess);
}

/* ---- plans: the queue (own stream, device flags) ---- */

/* Thread t raises NONFINITE with index idx[t % 4] and OVERFLOW with need[t % 4] when raise_bits
 * says so; every thread also writes its index to out so the kernel's work is visible. */
__global__ void raise_kernel(unsigned long long *flags, int raise_bits, int *out, int n) {
    const unsigned long long idx[4] = {57, 12, 99, 12}, need[4] = {5, 900, 7, 899};
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    out[t] = t;
    if (raise_bits & 1) md_cuda_flag_raise(flags, MD_CUDA_FLAG_NONFINITE, idx[t % 4]);
    if (raise_bits & 2) md_cuda_flag_raise(flags, MD_CUDA_FLAG_OVERFLOW, need[t % 4]);
}

static md_status enqueue_raise(md_cuda_queue *q, int raise_bits, int *d_out, int n) {
    MD_CUDA_LAUNCH(raise_kernel, (n + 127) / 128, 128, 0, q->stream, q->d_flags, raise_bits, d_out, n);
    return MD_OK;
}

/* A queue: its stream is non-blocking, its mirror pinned. A batch that raises nothing syncs to
 * MD_OK; one whose 1000 threads raise NONFINITE (indices 57, 12, 99) and OVERFLOW (needs 5, 900,
 * 7, 899) syncs to MD_ERR_RANGE naming the smallest index, 12, with the default or the caller's
 * text, and md_cuda_queue_flag gives 12 and the largest need, 900; the flags are cleared by
 * that sync, so the next batch is clean again. Destroy twice and on a zeroed queue is safe. */
static void queue_flags_and_sync(void) {
    md_cuda_queue q, z;
    md_cuda_flag_text text[MD_CUDA_FLAG_COUNT];
    unsigned int sflags = 0;
    unsigned long long detail = 0;
    cudaPointerAttributes attr;
    int *d_out = NULL, h[1000], k;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_queue_create(&q));
    MD_CHECK(cudaStreamGetFlags(q.stream, &sflags) == cudaSuccess && sflags == cudaStreamNonBlocking);
    MD_CHECK(cudaPointerGetAttributes(&attr, q.h_flags) == cudaSuccess && attr.type == cudaMemoryTypeHost);
    MD_CHECK(cudaMalloc((void **)&d_out, sizeof h) == cudaSuccess);
    MD_CHECK_OK(enqueue_raise(&q, 0, d_out, 1000));
    MD_CHECK_OK(enqueue_raise(&q, 0, d_out, 1000));
    MD_CHECK_OK(md_cuda_queue_sync(&q, "test", NULL));
    MD_CHECK(!md_cuda_queue_flag(&q, MD_CUDA_FLAG_NONFINITE, &detail));
    MD_CHECK(cudaMemcpy(h, d_out, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (k = 0; k < 1000; k++) MD_CHECKF(h[k] == k, "out[%d] = %d", k, h[k]);
    MD_CHECK_OK(enqueue_raise(&q, 3, d_out, 1000));
    MD_CHECK_ERROR(md_cuda_queue_sync(&q, "test_where", NULL), MD_ERR_RANGE, "field input: element 12 is not finite");
    MD_CHECK(strstr(md_last_error(), "test_where") != NULL);
    MD_CHECK(md_cuda_queue_flag(&q, MD_CUDA_FLAG_NONFINITE, &detail) && detail == 12);
    MD_CHECK(md_cuda_queue_flag(&q, MD_CUDA_FLAG_OVERFLOW, &detail) && detail == 900);
    MD_CHECK(!md_cuda_queue_flag(&q, MD_CUDA_FLAG_RANGE, &detail));
    MD_CHECK_OK(md_cuda_queue_sync(&q, "test", NULL)); /* cleared */
    MD_CHECK(!md_cuda_queue_flag(&q, MD_CUDA_FLAG_OVERFLOW, &detail));
    memset(text, 0, sizeof text);
    text[MD_CUDA_FLAG_OVERFLOW].field = "pairs";
    text[MD_CUDA_FLAG_OVERFLOW].format = "the pair list needs %llu entries";
    MD_CHECK_OK(enqueue_raise(&q, 2, d_out, 1000));
    MD_CHECK_ERROR(md_cuda_queue_sync(&q, "test", text), MD_ERR_RANGE, "field pairs: the pair list needs 900 entries");
    MD_CHECK(cudaFree(d_out) == cudaSuccess);
    md_cuda_queue_destroy(&q);
    MD_CHECK(q.stream == NULL && q.d_flags == NULL && q.h_flags == NULL);
    md_cuda_queue_destroy(&q);
    memset(&z, 0, sizeof z);
    md_cuda_queue_destroy(&z);
    MD_CHECK_ERROR(md_cuda_queue_sync(&z, "test", NULL), MD_ERR_INVALID_ARGUMENT, "md_cuda_queue_create");
}

/* md_cuda_queue_prioritize: high 1 gives the stream the device's greatest priority and high 0 the
 * least (the default), each time a new non-blocking stream that runs work (a raise batch syncs
 * clean with its output written); a queue not made is refused naming the call that makes it. */
static void queue_prioritize_sets_stream_priority(void) {
    md_cuda_queue q, z;
    int least = 0, greatest = 0, prio = 12345, k, h[256];
    unsigned int sflags = 0;
    int *d_out = NULL;
    NEED_GPU();
    MD_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
    MD_CHECK_OK(md_cuda_queue_create(&q));
    MD_CHECK(cudaMalloc((void **)&d_out, sizeof h) == cudaSuccess);
    for (k = 0; k < 2; k++) {
        const int high = k == 0;
        MD_CHECK_OK(md_cuda_queue_prioritize(&q, high));
        MD_CHECK(cudaStreamGetPriority(q.stream, &prio) == cudaSuccess);
        MD_CHECKF(prio == (high ? greatest : least), "priority %d, want %d", prio, high ? greatest : least);
        MD_CHECK(cudaStreamGetFlags(q.stream, &sflags) == cudaSuccess && sflags == cudaStreamNonBlocking);
        MD_CHECK(cudaMemset(d_out, 0xff, sizeof h) == cudaSuccess);
        MD_CHECK_OK(enqueue_raise(&q, 0, d_out, 256));
        MD_CHECK_OK(md_cuda_queue_sync(&q, "test", NULL));
        MD_CHECK(cudaMemcpy(h, d_out, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int i = 0; i < 256; i++) MD_CHECKF(h[i] == i, "out[%d] = %d", i, h[i]);
    }
    MD_CHECK(cudaFree(d_out) == cudaSuccess);
    md_cuda_queue_destroy(&q);
    memset(&z, 0, sizeof z);
    MD_CHECK_ERROR(md_cuda_queue_prioritize(&z, 1), MD_ERR_INVALID_ARGUMENT, "md_cuda_queue_create");
    MD_CHECK_ERROR(md_cuda_queue_prioritize(NULL, 0), MD_ERR_INVALID_ARGUMENT, "md_cuda_queue_create");
}

/* Check v is finite and > 0; at full effort also lo <= v <= hi. */
#define CHECK_RANGE(v, lo, hi)                                                                     \
    do {                                                                                           \
        MD_CHECKF(isfinite(v) && (v) > 0.0, "%s = %g is not finite and positive", #v, (double)(v)); \
        if (!sanitize)                                                                             \
            MD_CHECKF((v) >= (lo) && (v) <= (hi), "%s = %g outside [%g, %g]", #v, (double)(v),     \
                      (double)(lo), (double)(hi));                                                 \
    } while (0)

static double sm_clocks_per_s(void) {
    md_cuda_device_info info;
    memset(&info, 0, sizeof info);
    if (md_cuda_get_device_info(0, &info) != MD_OK || info.clock_khz <= 0) return NAN;
    return (double)info.sm_count * info.clock_khz * 1e3;
}

/* Ranges: the whole-GPU rate spans any sm_70+ part, from a small embedded one to well above
 * an H200; the per-SM-per-clock number is the sharp check. Every sm_70..sm_90 SM has 16 MUFU
 * lanes, so rsqrt/SM/clock is <= 16 at the peak clock: above 24 the benchmark counts work that
 * was not done; below 2 the loop is not MUFU-bound (a sustained clock at half the peak gives 8). */
static void ceiling_rsqrt_in_range(void) {
    double r = 0.0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_ceiling_rsqrt(&r));
    CHECK_RANGE(r, 1e10, 1e14);
    CHECK_RANGE(r / sm_clocks_per_s(), 2.0, 24.0);
}

/* An SM has 64 (sm_70, sm_80) or 128 (sm_86, sm_89, sm_90) FP32 lanes: FMA/SM/clock in [16, 192]. */
static void ceiling_fma_in_range(void) {
    double r = 0.0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_ceiling_fma(&r));
    CHECK_RANGE(r, 1e11, 1e15);
    CHECK_RANGE(r / sm_clocks_per_s(), 16.0, 192.0);
}

/* Copy bandwidth read + write: above 10 GB/s on any sm_70+ device, below 20 TB/s (HBM3e peaks
 * at 8 TB/s; 1 GiB cannot sit in any L2). */
static void ceiling_dram_in_range(void) {
    double r = 0.0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_ceiling_dram(&r));
    CHECK_RANGE(r, 1e10, 2e13);
}

/* Shared atomics per SM per clock: an SM issues at most 4 warp instructions per clock, so at
 * most 128 lanes; below 0.5 something serialises that should not. */
static void ceiling_smem_atomic_in_range(void) {
    double r = 0.0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_ceiling_smem_atomic(&r));
    CHECK_RANGE(r, 1e10, 1e14);
    CHECK_RANGE(r / sm_clocks_per_s(), 0.5, 128.0);
}

/* A launch costs 0.1 us..1 ms on any driver; a graph node at least 10 ns (no GPU starts a
 * kernel faster) and at most 1 ms. */
static void ceiling_launch_in_range(void) {
    double l = 0.0, g = 0.0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_ceiling_launch(&l, &g));
    CHECK_RANGE(l, 1e-7, 1e-3);
    CHECK_RANGE(g, 1e-8, 1e-3);
    MD_CHECK_ERROR(md_cuda_ceiling_launch(NULL, &g), MD_ERR_INVALID_ARGUMENT, "launch_s");
}

/* md_cuda_measure_ceilings fills every field, and the JSON line carries them. */
static void measure_ceilings_fills_everything(void) {
    md_cuda_ceilings c;
    char json[2048];
    int len;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_measure_ceilings(&c));
    MD_CHECK(c.device[0] != '\0' && c.sm_count > 0 && c.clock_khz > 0);
    CHECK_RANGE(c.rsqrt_per_s, 1e10, 1e14);
    CHECK_RANGE(c.fma_per_s, 1e11, 1e15);
    CHECK_RANGE(c.dram_bytes_per_s, 1e10, 2e13);
    CHECK_RANGE(c.memcpy_bytes_per_s, 1e10, 2e13);
    CHECK_RANGE(c.smem_atomic_per_s, 1e10, 1e14);
    CHECK_RANGE(c.launch_s, 1e-7, 1e-3);
    CHECK_RANGE(c.graph_node_s, 1e-8, 1e-3);
    len = md_cuda_ceilings_json(json, sizeof json, &c);
    MD_CHECK(len > 0 && len < (int)sizeof json);
    MD_CHECK(strstr(json, "null") == NULL);
}

/* JSON format, host only: a hand-made struct with 100 SMs at 1 GHz and 1.6e12 rsqrt/s gives
 * rsqrt_per_sm_clk = 1.6e12 / (100 * 1e9) = 16 exactly; NaN is written as null; the name is
 * escaped; the returned length is what the whole line needs, as snprintf counts. */
static void ceilings_json_format(void) {
    md_cuda_ceilings c;
    char small[16], json[2048];
    int need, len;
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "GPU \"x\"");
    c.sm_count = 100;
    c.clock_khz = 1000000;
    c.rsqrt_per_s = 1.6e12;
    c.fma_per_s = 1.28e13;
    c.dram_bytes_per_s = 3e12;
    c.memcpy_bytes_per_s = NAN;
    c.smem_atomic_per_s = 3.2e12;
    c.launch_s = 2e-6;
    c.graph_node_s = 5e-7;
    need = md_cuda_ceilings_json(NULL, 0, &c);
    len = md_cuda_ceilings_json(json, sizeof json, &c);
    MD_CHECK(need == len && len == (int)strlen(json));
    MD_CHECK(md_cuda_ceilings_json(small, sizeof small, &c) == need);
    MD_CHECK(strncmp(json, "{\"schema\":\"md_ceilings/1\",\"device\":\"GPU \\\"x\\\"\"", 46) == 0);
    MD_CHECK(strstr(json, "\"sm_count\":100,") != NULL);
    MD_CHECK(strstr(json, "\"clock_mhz\":1000,") != NULL);
    MD_CHECK(strstr(json, "\"rsqrt_per_sm_clk\":16,") != NULL);
    MD_CHECK(strstr(json, "\"fma_per_sm_clk\":128,") != NULL);
    MD_CHECK(strstr(json, "\"flop_per_s\":2.56e+13,") != NULL);
    MD_CHECK(strstr(json, "\"smem_atomic_per_sm_clk\":32,") != NULL);
    MD_CHECK(strstr(json, "\"memcpy_bytes_per_s\":null,") != NULL);
    MD_CHECK(strstr(json, "\"launch_s\":2e-06,") != NULL);
    MD_CHECK(strstr(json, "\"graph_node_s\":5e-07}") != NULL);
    MD_CHECK(md_cuda_ceilings_json(json, sizeof json, NULL) == -1);
}

int main(void) {
    const char *s = getenv("MD_SANITIZE");
    sanitize = s && s[0] == '1';
    if (sanitize) md_cuda_ceilings_set_effort(0.01);
    MD_RUN(available_matches_runtime);
    MD_RUN(ceilings_json_format);
    MD_RUN(every_launch_goes_through_the_registry);
    MD_RUN(pdl_kernels_wait_first);
    MD_RUN(benches_and_chapters_use_public_api);
    MD_RUN(kernel_registry_table);
    MD_RUN(launch_registers_runs_and_checks);
    MD_RUN(queue_flags_and_sync);
    MD_RUN(queue_prioritize_sets_stream_priority);
    MD_RUN(device_info_is_sane);
    MD_RUN(poison_makes_every_float_nan);
    MD_RUN(timer_measures_a_known_kernel);
    MD_RUN(bench_calls_fn_warmup_plus_reps_times);
    MD_RUN(cuda_errors_name_call_and_file);
    MD_RUN(ceiling_rsqrt_in_range);
    MD_RUN(ceiling_fma_in_range);
    MD_RUN(ceiling_dram_in_range);
    MD_RUN(ceiling_smem_atomic_in_range);
    MD_RUN(ceiling_launch_in_range);
    MD_RUN(measure_ceilings_fills_everything);
    return md_test_summary();
}
