/* Tests of md_cuda.cu.h's mapped section (chapter 11): the host sees exactly the values a kernel
 * wrote to mapped memory once an event after it has completed (every word, many rounds, the
 * block poisoned before each); 64-bit words are never torn while a kernel rewrites them and the
 * host reads concurrently; a payload published behind __threadfence_system is never older than
 * the sequence number the host read first; host-written words reach a kernel; the report kernel
 * gathers device arrays into mapped or device memory, also replayed from a CUDA graph with new
 * contents; argument errors.
 * Seeds used: 41, 42 (the value streams; splitmix64 of seed + index on both sides).
 *
 * Without a GPU every test prints SKIP. MD_SANITIZE=1 shortens the concurrent tests. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

static __host__ __device__ unsigned long long mix(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static __global__ void write_values(unsigned long long *dst, int n, unsigned long long seed) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) md_cuda_mapped_store(dst + i, mix(seed + (unsigned long long)i));
}

static void alloc_and_free(void) {
    md_cuda_mapped m, keep;
    size_t i;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_mapped_alloc(&m, 4096));
    MD_CHECK(m.host && m.device && m.bytes == 4096);
    for (i = 0; i < 4096; i++) MD_CHECK(((unsigned char *)m.host)[i] == 0);
    md_cuda_mapped_free(&m);
    MD_CHECK(!m.host && !m.device && m.bytes == 0);
    md_cuda_mapped_free(&m); /* twice: safe */
    memset(&keep, 0x5A, sizeof keep);
    m = keep;
    MD_CHECK_ERROR(md_cuda_mapped_alloc(&m, 0), MD_ERR_INVALID_ARGUMENT, "bytes");
    MD_CHECK_ERROR(md_cuda_mapped_alloc(NULL, 8), MD_ERR_INVALID_ARGUMENT, "m");
    MD_CHECK(memcmp(&m, &keep, sizeof m) == 0);
}

/* Rule 1: after the event, every word is the value written, in 50 rounds without a device-wide
 * synchronisation; the block is poisoned (all ones) by the host before each round. */
static void host_sees_values_after_event(void) {
    enum { N = 4099 }; /* not a multiple of the block */
    md_cuda_mapped m;
    cudaStream_t s;
    cudaEvent_t ev;
    int round, i, rounds = sanitize ? 5 : 50;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_mapped_alloc(&m, N * sizeof(unsigned long long)));
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    MD_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);
    for (round = 0; round < rounds; round++) {
        unsigned long long seed = 41ull + 1000003ull * (unsigned long long)round;
        cudaError_t q;
        memset(m.host, 0xFF, m.bytes);
        write_values<<<(N + 127) / 128, 128, 0, s>>>((unsigned long long *)m.device, N, seed);
        MD_CHECK(cudaGetLastError() == cudaSuccess);
        MD_CHECK(cudaEventRecord(ev, s) == cudaSuccess);
        while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) {
        }
        MD_CHECK(q == cudaSuccess);
        for (i = 0; i < N; i++) {
            unsigned long long v = md_cuda_mapped_load((unsigned long long *)m.host + i);
            MD_CHECKF(v == mix(seed + (unsigned long long)i), "round %d word %d: %llx", round, i, v);
        }
    }
    (void)cudaEventDestroy(ev);
    (void)cudaStreamDestroy(s);
    md_cuda_mapped_free(&m);
}

/* A kernel rewrites 8 words with (k << 32 | k), k = 1, 2, ..., until the host sets the stop word
 * (host -> device through mapped memory) or k reaches kmax. */
static __global__ void rewrite_words(unsigned long long *w, const unsigned long long *stop, unsigned long long kmax) {
    unsigned long long k;
    for (k = 1; k <= kmax; k++) {
        int j;
        for (j = 0; j < 8; j++) md_cuda_mapped_store(w + j, (k << 32) | k);
        __threadfence_system();
        if ((k & 63) == 0 && *(const volatile unsigned long long *)stop) break;
    }
}

/* Rule 3: no torn 64-bit word: every value read has equal halves, and a word never goes back. */
static void words_are_never_torn(void) {
    md_cuda_mapped m;
    cudaStream_t s;
    unsigned long long last[8] = {0}, reads = 0, changes = 0;
    double t0;
    int j;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_mapped_alloc(&m, 16 * sizeof(unsigned long long)));
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    rewrite_words<<<1, 1, 0, s>>>((unsigned long long *)m.device, (unsigned long long *)m.device + 8,
                                  sanitize ? 20000ull : 5000000ull);
    MD_CHECK(cudaGetLastError() == cudaSuccess);
    t0 = md_wall_seconds();
    while (md_wall_seconds() - t0 < (sanitize ? 0.5 : 0.2) && cudaStreamQuery(s) == cudaErrorNotReady) {
        for (j = 0; j < 8; j++) {
            unsigned long long v = md_cuda_mapped_load((unsigned long long *)m.host + j);
            reads++;
            MD_CHECKF((v >> 32) == (v & 0xFFFFFFFFull), "torn word %d: %016llx", j, v);
            MD_CHECKF(v >= last[j], "word %d went back from %llx to %llx", j, last[j], v);
            changes += v != last[j];
            last[j] = v;
        }
    }
    md_cuda_mapped_store_host((unsigned long long *)m.host + 8, 1ull); /* stop */
    MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    printf("  %llu reads, %llu changes seen while the kernel wrote\n", reads, changes);
    if (!sanitize) MD_CHECKF(changes > 100, "only %llu changes seen: the reads did not overlap the writes", changes);
    (void)cudaStreamDestroy(s);
    md_cuda_mapped_free(&m);
}

/* Publishes sequence numbers 1..smax: payload word i = s * 4096 + i, then the sequence word. */
static __global__ void publish_loop(unsigned long long *payload, unsigned long long *seq, unsigned long long smax) {
    unsigned long long sq;
    for (sq = 1; sq <= smax; sq++) {
        int i;
        for (i = 0; i < 16; i++) md_cuda_mapped_store(payload + i, sq * 4096ull + (unsigned long long)i);
        md_cuda_mapped_publish(seq, sq);
    }
}

/* Rule 2: having read sequence s, the host reads a payload of publish s or later. */
static void publish_orders_payload_before_sequence(void) {
    md_cuda_mapped m;
    cudaStream_t s;
    unsigned long long *h, smax = sanitize ? 2000ull : 2000000ull, seen = 0, checks = 0;
    double t0;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_mapped_alloc(&m, 32 * sizeof(unsigned long long)));
    h = (unsigned long long *)m.host;
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    publish_loop<<<1, 1, 0, s>>>((unsigned long long *)m.device, (unsigned long long *)m.device + 16, smax);
    MD_CHECK(cudaGetLastError() == cudaSuccess);
    t0 = md_wall_seconds();
    while (seen < smax && md_wall_seconds() - t0 < 60.0) {
        unsigned long long sq = md_cuda_mapped_load(h + 16);
        int i;
        if (sq == 0) continue;
        MD_CHECK(sq >= seen);
        seen = sq;
        for (i = 0; i < 16; i++) {
            unsigned long long v = md_cuda_mapped_load(h + i);
            MD_CHECKF(v % 4096ull == (unsigned long long)i && v / 4096ull >= sq,
                      "sequence %llu, payload word %d from publish %llu", sq, i, v / 4096ull);
        }
        checks++;
    }
    MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    MD_CHECK(md_cuda_mapped_load(h + 16) == smax);
    printf("  %llu consistent snapshots\n", checks);
    (void)cudaStreamDestroy(s);
    md_cuda_mapped_free(&m);
}

static __global__ void read_word(const unsigned long long *src, unsigned long long *dst) { *dst = *src * 3ull; }

/* Host -> device: a word the host stores before the launch is what the kernel reads. */
static void host_writes_reach_the_kernel(void) {
    md_cuda_mapped m;
    unsigned long long *d, out = 0;
    int k;
    NEED_GPU();
    MD_CHECK_OK(md_cuda_mapped_alloc(&m, 8));
    MD_CHECK(cudaMalloc((void **)&d, 8) == cudaSuccess);
    for (k = 0; k < 20; k++) {
        unsigned long long v = mix(42ull + (unsigned long long)k);
        md_cuda_mapped_store_host(m.host, v);
        read_word<<<1, 1>>>((const unsigned long long *)m.device, d);
        MD_CHECK(cudaMemcpy(&out, d, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
        MD_CHECK(out == v * 3ull);
    }
    (void)cudaFree(d);
    md_cuda_mapped_free(&m);
}

typedef struct report_ctx {
    md_cuda_report_desc desc;
    unsigned long long *dst, *d_seq;
} report_ctx;

static md_status enqueue_report(void *p, cudaStream_t s) {
    report_ctx *c = (report_ctx *)p;
    return md_cuda_report_enqueue(&c->desc, c->dst, c->d_seq, s);
}

/* The report: two device arrays (19 and 4 words, as a state's energies and flags) gathered into
 * mapped memory and into device memory, the sequence word after them; then from a graph. */
static void report_gathers_and_publishes(void) {
    enum { A = 19, B = 4 };
    unsigned long long ha[A], hb[B], *da, *db, *d_seq, *d_dst, copy[A + B + 1];
    md_cuda_mapped m;
    report_ctx c;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t x;
    int i, rep;
    NEED_GPU();
    for (i = 0; i < A; i++) ha[i] = mix(1000ull + (unsigned long long)i);
    for (i = 0; i < B; i++) hb[i] = mix(2000ull + (unsigned long long)i);
    MD_CHECK(cudaMalloc((void **)&da, sizeof ha) == cudaSuccess && cudaMalloc((void **)&db, sizeof hb) == cudaSuccess);
    MD_CHECK(cudaMalloc((void **)&d_seq, 8) == cudaSuccess && cudaMalloc((void **)&d_dst, sizeof copy) == cudaSuccess);
    MD_CHECK(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK(cudaMemset(d_seq, 0, 8) == cudaSuccess);
    MD_CHECK_OK(md_cuda_mapped_alloc(&m, sizeof copy));
    MD_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    memset(&c, 0, sizeof c);
    c.desc.nseg = 2;
    c.desc.src[0] = da;
    c.desc.count[0] = A;
    c.desc.src[1] = db;
    c.desc.count[1] = B;
    c.d_seq = d_seq;
    MD_CHECK(md_cuda_report_words(&c.desc) == A + B + 1);
    /* into mapped memory */
    memset(m.host, 0xFF, m.bytes);
    c.dst = (unsigned long long *)m.device;
    MD_CHECK_OK(enqueue_report(&c, s));
    MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    for (i = 0; i < A; i++) MD_CHECK(md_cuda_mapped_load((unsigned long long *)m.host + i) == ha[i]);
    for (i = 0; i < B; i++) MD_CHECK(md_cuda_mapped_load((unsigned long long *)m.host + A + i) == hb[i]);
    MD_CHECK(md_cuda_mapped_load((unsigned long long *)m.host + A + B) == 1ull);
    /* into device memory, then a copy (the memcpy rung) */
    c.dst = d_dst;
    MD_CHECK(cudaMemset(d_dst, 0xFF, sizeof copy) == cudaSuccess);
    MD_CHECK_OK(enqueue_report(&c, s));
    MD_CHECK(cudaMemcpyAsync(copy, d_dst, sizeof copy, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    MD_CHECK(memcmp(copy, ha, sizeof ha) == 0 && memcmp(copy + A, hb, sizeof hb) == 0 && copy[A + B] == 2ull);
    /* captured once, replayed: each replay gathers the arrays' current contents */
    c.dst = (unsigned long long *)m.device;
    MD_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    MD_CHECK_OK(enqueue_report(&c, s));
    MD_CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    MD_CHECK(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
    for (rep = 0; rep < 3; rep++) {
        ha[5] = mix(7000ull + (unsigned long long)rep);
        MD_CHECK(cudaMemcpyAsync(da, ha, sizeof ha, cudaMemcpyHostToDevice, s) == cudaSuccess);
        MD_CHECK(cudaGraphLaunch(x, s) == cudaSuccess);
        MD_CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        MD_CHECK(md_cuda_mapped_load((unsigned long long *)m.host + 5) == ha[5]);
        MD_CHECK(md_cuda_mapped_load((unsigned long long *)m.host + A + B) == 3ull + (unsigned long long)rep);
    }
    (void)cudaGraphExecDestroy(x);
    (void)cudaGraphDestroy(g);
    /* errors */
    c.desc.nseg = 0;
    MD_CHECK_ERROR(enqueue_report(&c, s), MD_ERR_INVALID_ARGUMENT, "nseg");
    c.desc.nseg = 2;
    c.desc.count[1] = -1;
    MD_CHECK_ERROR(enqueue_report(&c, s), MD_ERR_INVALID_ARGUMENT, "count");
    c.desc.count[1] = B;
    c.dst = NULL;
    MD_CHECK_ERROR(enqueue_report(&c, s), MD_ERR_INVALID_ARGUMENT, "dst");
    (void)cudaStreamDestroy(s);
    (void)cudaFree(da);
    (void)cudaFree(db);
    (void)cudaFree(d_seq);
    (void)cudaFree(d_dst);
    md_cuda_mapped_free(&m);
}

int main(void) {
    const char *e = getenv("MD_SANITIZE");
    sanitize = e && e[0] == '1';
    MD_RUN(alloc_and_free);
    MD_RUN(host_sees_values_after_event);
    MD_RUN(words_are_never_torn);
    MD_RUN(publish_orders_payload_before_sequence);
    MD_RUN(host_writes_reach_the_kernel);
    MD_RUN(report_gathers_and_publishes);
    return md_test_summary();
}
