/* Chapter 11 - mapped memory: what the host reads every step, without a copy.
 *
 * Part 1, the ladder: the replica-exchange run of chapter 10 with the host reading every
 * replica's report (energies, step, flags, rebuild count) after EVERY step (steps_per_read 1),
 * for 1 replica and for N replicas (coroutines), four rungs, each checked bitwise against the
 * first:
 *   memcpy          the report kernel writes device memory, a cudaMemcpyAsync per step brings it
 *                   to pinned memory (and the exchange's velocity factor goes by cudaMemcpyAsync)
 *   mapped          the report kernel writes mapped pinned memory; the factor is read from it
 *   graphs+memcpy   the step and its report launched as a CUDA graph, the copy after it
 *   graphs+mapped   the same with mapped memory
 * It prints the round trip of one step (host enqueue to report in hand, 1 replica), steps/s,
 * and the time mapped memory saves per step against the memcpy rung, then the yardstick: one
 * memcpy latency (a 64-byte copy to pinned memory, as the host and as the GPU see it). Each rung
 * runs --repeats times (default 5), the four interleaved with the order rotated; the table gives
 * the median and the fastest and slowest run, and every run is checked bitwise.
 *
 * Part 2, where mapped memory loses: a kernel writing B bytes into mapped memory (every byte
 * crosses the bus from the SMs) against a kernel writing device memory plus one cudaMemcpyAsync
 * (the copy engine's DMA), and a kernel reading B bytes from mapped memory against reading
 * device memory, for B from 4 KiB to 64 MiB (md_cuda_mapped_copy_enqueue; events, median of 5).
 *
 *   11_mapped_memory [--quick] [--replicas N] [--molecules M] [--steps S] [--repeats R]
 *                    [--json FILE] [--results FILE.csv]
 * --quick: 1 and 3 replicas of 300 waters, 20 steps, 2 repeats; sizes to 1 MiB. Without a GPU:
 * SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MD_CUDA_REMD_DECLARED

typedef struct rung {
    const char *name;
    int graphs;
    md_cuda_remd_transfer transfer;
} rung;

#define MAX_REPEATS 16 /* --repeats at most */

static const rung rungs[4] = {{"memcpy", 0, MD_CUDA_REMD_MEMCPY},
                              {"mapped", 0, MD_CUDA_REMD_MAPPED},
                              {"graphs+memcpy", 1, MD_CUDA_REMD_MEMCPY},
                              {"graphs+mapped", 1, MD_CUDA_REMD_MAPPED}};

/* One rung: create, warm up (one exchange), run, keep the energy log for the comparison. */
static md_status run_rung(const md_system *sys, const md_topology *top, const md_lj_table *lj, const md_sim_desc *base,
                          const double *temps, int n, const md_cuda_remd_desc *d, md_cuda_remd_stats *st, double **log) {
    md_cuda_remd x;
    md_cuda_remd_desc warm = *d;
    md_status s;
    if ((s = md_cuda_remd_create(&x, n, sys, top, lj, base, temps, 11, NULL)) != MD_OK) return s;
    warm.exchanges = 1;
    if ((s = md_cuda_remd_run(&x, &warm, NULL)) == MD_OK && (s = md_cuda_remd_run(&x, d, st)) == MD_OK) {
        *log = (double *)malloc(sizeof(double) * x.rounds * n);
        if (*log) memcpy(*log, x.log_energy, sizeof(double) * x.rounds * n);
    }
    md_cuda_remd_destroy(&x);
    return s;
}

/* One memcpy latency, the yardstick of part 1's savings: a report-sized (64-byte) cudaMemcpyAsync
 * from device to pinned memory on an idle stream, as the host sees it (enqueue to
 * cudaStreamSynchronize returning, median of 201) and as the GPU runs it (events around 200
 * back-to-back copies, per copy). */
static md_status memcpy_latency(double *host_s, double *gpu_s) {
    cudaStream_t s = NULL;
    cudaEvent_t a = NULL, b = NULL;
    void *d = NULL, *h = NULL;
    double t[201];
    float ms = 0.0f;
    md_status st = MD_OK;
    int k;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&d, 64) != cudaSuccess ||
        cudaHostAlloc(&h, 64, cudaHostAllocDefault) != cudaSuccess || cudaEventCreate(&a) != cudaSuccess ||
        cudaEventCreate(&b) != cudaSuccess || cudaMemset(d, 1, 64) != cudaSuccess) {
        st = md_cuda_error(cudaGetLastError(), "memcpy_latency set-up", __FILE__, __LINE__);
        goto done;
    }
    for (k = 0; k < 201 && st == MD_OK; k++) {
        const double t0 = md_wall_seconds();
        if (cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
            st = md_cuda_error(cudaGetLastError(), "cudaMemcpyAsync", __FILE__, __LINE__);
        t[k] = md_wall_seconds() - t0;
    }
    if (st == MD_OK) {
        cudaError_t e = cudaEventRecord(a, s);
        for (k = 0; k < 200 && e == cudaSuccess; k++) e = cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess) e = cudaEventRecord(b, s);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        if (e != cudaSuccess) st = md_cuda_error(e, "memcpy_latency events", __FILE__, __LINE__);
    }
    if (st == MD_OK) {
        *host_s = md_median(t, 201);
        *gpu_s = 1e-3 * ms / 200.0;
    }
done:
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (h) cudaFreeHost(h);
    if (d) cudaFree(d);
    if (s) cudaStreamDestroy(s);
    return st;
}

/* Part 2: median seconds of `reps` runs of an enqueue, with events on stream s. */
typedef md_status (*work_fn)(void *ctx, cudaStream_t s);

typedef struct bulk {
    void *d_a, *d_b, *h_pinned;
    md_cuda_mapped m;
    size_t bytes;
} bulk;

static md_status w_device_then_copy(void *p, cudaStream_t s) {
    bulk *b = (bulk *)p;
    md_status st = md_cuda_mapped_copy_enqueue(b->d_b, b->d_a, b->bytes, s);
    if (st != MD_OK) return st;
    MD_CUDA_TRY(cudaMemcpyAsync(b->h_pinned, b->d_b, b->bytes, cudaMemcpyDeviceToHost, s));
    return MD_OK;
}
static md_status w_write_mapped(void *p, cudaStream_t s) {
    bulk *b = (bulk *)p;
    return md_cuda_mapped_copy_enqueue(b->m.device, b->d_a, b->bytes, s);
}
static md_status w_read_device(void *p, cudaStream_t s) {
    bulk *b = (bulk *)p;
    return md_cuda_mapped_copy_enqueue(b->d_b, b->d_a, b->bytes, s);
}
static md_status w_read_mapped(void *p, cudaStream_t s) {
    bulk *b = (bulk *)p;
    return md_cuda_mapped_copy_enqueue(b->d_b, b->m.device, b->bytes, s);
}

static md_status time_it(work_fn f, void *ctx, double *sec) {
    md_cuda_bench_desc bd;
    cudaStream_t s;
    md_status st;
    MD_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    memset(&bd, 0, sizeof bd);
    bd.reps = 5;
    bd.keep_l2 = 1;
    bd.stream = s;
    st = md_cuda_bench(f, ctx, &bd, sec);
    (void)cudaStreamDestroy(s);
    return st;
}

int main(int argc, char **argv) {
    int quick = 0, nrep = 12, molecules = 1700, steps = 200, repeats = 5, i, k, bad = 0;
    const char *json = NULL, *results = NULL;
    md_water_desc wd;
    md_system sys;
    md_topology top;
    md_lj_table lj;
    md_sim_desc base;
    double temps[64];
    FILE *jf = NULL, *rf = NULL;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--replicas")) nrep = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--molecules")) molecules = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats")) repeats = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--json")) json = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--results")) results = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--replicas N] [--molecules M] [--steps S] [--repeats R] [--json FILE] "
                            "[--results FILE.csv]\n",
                    argv[0]);
            return 2;
        }
    }
    if (quick) nrep = 3, molecules = 300, steps = 20, repeats = 2;
    if (nrep < 2 || nrep > 64 || molecules < 100 || steps < 2 || steps % 2 || repeats < 1 || repeats > MAX_REPEATS) {
        fprintf(stderr, "11_mapped_memory: need 2..64 replicas, >= 100 molecules, an even --steps, 1..%d repeats\n",
                MAX_REPEATS);
        return 2;
    }
    if (!md_cuda_available()) {
        printf("SKIP chapter 11: %s\n", md_last_error());
        return 0;
    }
    memset(&wd, 0, sizeof wd);
    wd.molecules = molecules;
    wd.temperature = 300.0;
    wd.seed = 11;
    memset(&base, 0, sizeof base);
    base.dt = 0.002;
    base.seed = 5;
    base.nb.lj = MD_LJ_TRUNCATE;
    base.nb.dispersion_correction = 1;
    if (md_build_water_box(&sys, &top, &lj, &wd) != MD_OK || md_remd_ladder(temps, nrep, 300.0, 360.0) != MD_OK) {
        fprintf(stderr, "11_mapped_memory: %s\n", md_last_error());
        return 1;
    }
    if (sys.box[0] < 2.2) base.nb.cutoff = 0.7;
    if (json && !(jf = fopen(json, "a"))) { /* appended, as every chapter does: one file for a whole bench run */
        fprintf(stderr, "11_mapped_memory: cannot append to %s\n", json);
        return 1;
    }
    if (results && (rf = fopen(results, "w"))) fprintf(rf, "part,replicas,rung,bytes,seconds,steps_per_s\n");
    printf("chapter 11, part 1: the host reads every replica's report after every step (%d atoms each, %d steps)\n", sys.n,
           steps);
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass == 0 ? 1 : nrep;
        double *ref = NULL, per[4][MAX_REPEATS], med[4], sps[4][MAX_REPEATS];
        int eqk[4] = {1, 1, 1, 1}, ok[4] = {0, 0, 0, 0};
        printf("%d replica%s (%s), %d repeat%s of the four rungs, interleaved (repeat r starts at rung r mod 4):\n"
               "%-16s %14s %22s %12s %14s %s\n",
               n, n > 1 ? "s" : "", n > 1 ? "coroutines" : "sequential", repeats, repeats > 1 ? "s" : "", "rung",
               "us per step", "(fastest .. slowest)", "steps/s", "saved us/step", "bitwise = memcpy");
        /* The host enqueues every step of every replica (chapter 10): the stream rungs are bound by
         * one host thread, whose speed drifts between runs by more than one copy's cost. So each
         * rung runs `repeats` times, the rungs interleaved and the order rotated, and the medians
         * are compared (single runs of each, over several commits whose copy path did not change, had read from
         * 355 us lost to 42 us saved per round of 12 replicas). */
        for (int r = 0; r < repeats; r++)
            for (int j = 0; j < 4; j++) {
                const int k = (j + r) % 4;
                md_cuda_remd_desc d;
                md_cuda_remd_stats st;
                double *log = NULL;
                memset(&d, 0, sizeof d);
                d.mode = n > 1 ? MD_CUDA_SCHED_COROUTINES : MD_CUDA_SCHED_SEQUENTIAL;
                d.graphs = rungs[k].graphs;
                d.transfer = rungs[k].transfer;
                d.steps_per_exchange = steps / 2;
                d.steps_per_read = 1;
                d.exchanges = 2;
                if (run_rung(&sys, &top, &lj, &base, temps, n, &d, &st, &log) != MD_OK || !log) {
                    printf("%-16s FAILED: %s\n", rungs[k].name, md_last_error());
                    bad++;
                    free(log);
                    continue;
                }
                per[k][ok[k]] = n == 1 ? st.segment_s : st.sched.wall_s / ((double)steps);
                sps[k][ok[k]++] = st.steps_per_s;
                if (!ref) ref = log; /* every run against the first: the same trajectories and exchanges */
                else {
                    if (memcmp(ref, log, sizeof(double) * 2 * n)) eqk[k] = 0;
                    free(log);
                }
                if (rf) fprintf(rf, "steps,%d,%s,0,%.9g,%.6g\n", n, rungs[k].name, per[k][ok[k] - 1], st.steps_per_s);
            }
        for (k = 0; k < 4; k++) {
            double lo = INFINITY, hi = 0.0, rate;
            if (!ok[k]) {
                med[k] = NAN;
                continue;
            }
            for (i = 0; i < ok[k]; i++) {
                lo = per[k][i] < lo ? per[k][i] : lo;
                hi = per[k][i] > hi ? per[k][i] : hi;
            }
            med[k] = md_median(per[k], ok[k]);
            rate = md_median(sps[k], ok[k]);
            printf("%-16s %14.2f %9.2f .. %9.2f %12.0f %14s %s\n", rungs[k].name, 1e6 * med[k], 1e6 * lo, 1e6 * hi, rate, "",
                   k == 0 ? "(reference)" : eqk[k] ? "yes" : "NO");
            if (k % 2) printf("%-16s %14s %22s %12s %14.2f\n", "", "", "", "", 1e6 * (med[k - 1] - med[k]));
            if (!eqk[k]) bad++;
            if (jf) {
                md_bench_result b;
                char line[1024];
                char variant[64];
                memset(&b, 0, sizeof b);
                snprintf(variant, sizeof variant, "%s_x%d", rungs[k].name, n);
                b.chapter = "11_mapped_memory";
                b.variant = variant;
                b.size = (long long)n * sys.n;
                b.size_unit = "replicas*atoms";
                b.time_s = med[k];
                b.rate = rate;
                b.unit = "replica-steps/s";
                b.ceiling = NAN;
                b.error = eqk[k] ? 0.0 : NAN;
                b.device = "gpu";
                if (md_bench_json(line, sizeof line, &b) < (int)sizeof line) fprintf(jf, "%s\n", line);
            }
        }
        free(ref);
    }
    {
        double lh = NAN, lg = NAN;
        if (memcpy_latency(&lh, &lg) == MD_OK)
            printf("one memcpy latency (64 bytes, device to pinned host, idle stream): %.2f us as the host sees it "
                   "(enqueue to synchronize), %.2f us on the GPU (back to back); the goal: saved us/step >= it\n",
                   1e6 * lh, 1e6 * lg);
        else {
            printf("one memcpy latency: FAILED: %s\n", md_last_error());
            bad++;
        }
    }
    printf("\nchapter 11, part 2: bulk data (GB/s; a kernel into mapped memory vs device memory + cudaMemcpyAsync,\n"
           "and a kernel reading mapped vs device memory)\n%12s %16s %14s %14s %14s %s\n",
           "bytes", "device+memcpy", "write mapped", "read device", "read mapped", "writes: winner");
    for (size_t bytes = 4096; bytes <= (quick ? ((size_t)1 << 20) : ((size_t)64 << 20)); bytes *= 4) {
        bulk b;
        double t[4] = {NAN, NAN, NAN, NAN};
        memset(&b, 0, sizeof b);
        b.bytes = bytes;
        if (cudaMalloc(&b.d_a, bytes) != cudaSuccess || cudaMalloc(&b.d_b, bytes) != cudaSuccess ||
            cudaHostAlloc(&b.h_pinned, bytes, cudaHostAllocDefault) != cudaSuccess || md_cuda_mapped_alloc(&b.m, bytes) != MD_OK ||
            cudaMemset(b.d_a, 1, bytes) != cudaSuccess) {
            printf("%12zu FAILED to allocate: %s\n", bytes, md_last_error());
            bad++;
        } else if (time_it(w_device_then_copy, &b, &t[0]) != MD_OK || time_it(w_write_mapped, &b, &t[1]) != MD_OK ||
                   time_it(w_read_device, &b, &t[2]) != MD_OK || time_it(w_read_mapped, &b, &t[3]) != MD_OK) {
            printf("%12zu FAILED: %s\n", bytes, md_last_error());
            bad++;
        } else {
            printf("%12zu %16.2f %14.2f %14.2f %14.2f %s\n", bytes, 1e-9 * bytes / t[0], 1e-9 * bytes / t[1],
                   1e-9 * bytes / t[2], 1e-9 * bytes / t[3], t[1] < t[0] ? "mapped" : "memcpy");
            if (rf)
                for (k = 0; k < 4; k++)
                    fprintf(rf, "bulk,0,%s,%zu,%.9g,0\n",
                            k == 0 ? "device+memcpy" : k == 1 ? "write_mapped" : k == 2 ? "read_device" : "read_mapped", bytes, t[k]);
        }
        (void)cudaFree(b.d_a);
        (void)cudaFree(b.d_b);
        (void)cudaFreeHost(b.h_pinned);
        md_cuda_mapped_free(&b.m);
    }
    if (jf) fclose(jf);
    if (rf) fclose(rf);
    md_system_free(&sys);
    md_topology_free(&top);
    md_lj_table_free(&lj);
    if (bad) {
        printf("FAIL: %d rung(s) failed or differ from the memcpy rung\n", bad);
        return 1;
    }
    printf("every rung agrees with the memcpy rung bitwise\n");
    return 0;
}
#else
int main(void) {
    printf("SKIP chapter 11: md_cuda.cu.h has no step section in this build\n");
    return 0;
}
#endif
