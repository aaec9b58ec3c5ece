/* Tests of md_cuda.cu.h's section tiles: the dynamic tile scheduler (md_cuda_tiles_run), its two
 * users (the potential map in z-slabs, md_cuda_dcs_tiles; the multi-frame RDF in frame ranges,
 * md_cuda_rdf_tiles) and the NVML energy reading (md_cuda_energy_*). Seed: 2026.
 *
 * The scheduler is host logic: its tests run without a GPU (no CUDA call, bind_device 0), with
 * failures injected from a seeded generator. What every run must show, checked from a log of
 * every call (not from the scheduler's own counters, which are checked against the log):
 *   - exactly once: every tile has one successful call; its recorded worker is that call's;
 *   - retry elsewhere: a tile is never called again on a worker that failed on it;
 *   - retire: a worker makes no call after its second failure, and is retired iff it failed twice;
 *   - clean failure: a run fails only when no live worker remains or a tile failed on every
 *     worker, with a message naming the tile and the injected error.
 *
 * GPU tests (SKIP without a device; MD_REQUIRE_GPU=1 makes a skip a failure): the slab map with
 * 1 and 3 workers sharing the GPU, failures injected into real tiles, must be bitwise equal
 * across worker counts (same slabs, same plan arithmetic) and within the DCS tolerance 1e-4 of
 * md_dcs_simple in double (tests/gpu_dcs.cu states why 1e-4); the RDF in frame ranges must equal
 * md_rdf_accumulate's counts and normalisation bitwise (integer counts, frames added in order).
 * Energy: NVML's readings around about a second of DCS work must be positive, the counter
 * monotonic across two measurements, the average power within 1..2000 W (an H100 SXM is rated at
 * 700 W). Without libnvidia-ml.so.1 the energy test prints SKIP with the reason.
 *
 * MD_SANITIZE=1 (compute-sanitizer) shrinks the systems and keeps the energy test to its
 * monotonicity checks (no minimum duration, no power range). */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "tests/md_test.h"
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* ---- fault injection and the call log ---- */

/* splitmix64: a per-call decision that does not depend on thread timing */
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

typedef struct call_rec {
    int worker, tile, ok;
} call_rec;

/* What a test's tile function does: which workers always fail, which tiles fail on their first
 * attempt, which tile fails everywhere; the inner function (a real tile) or a fake result. */
typedef struct fault_plan {
    unsigned long long bad_workers; /* bit w: worker w fails every call */
    std::vector<int> flaky;         /* per tile: 1 = its first call fails */
    int doomed;                     /* a tile that fails on every call (-1: none) */
    uint64_t seed;                  /* for the sleeps that shuffle the interleaving */
    md_cuda_tile_fn inner;          /* a real tile function, or NULL */
    void *inner_arg;
    std::mutex mu;
    std::vector<call_rec> log;
    std::vector<int> calls, ok_calls; /* per tile */
    std::vector<int> result;          /* fake output: the worker that wrote each tile (+1) */
    std::vector<int> writes;          /* per tile: how many times its slice was written */
} fault_plan;

static void fault_init(fault_plan *f, int ntiles, uint64_t seed) {
    f->bad_workers = 0;
    f->flaky.assign((size_t)ntiles, 0);
    f->doomed = -1;
    f->seed = seed;
    f->inner = NULL;
    f->inner_arg = NULL;
    f->log.clear();
    f->calls.assign((size_t)ntiles, 0);
    f->ok_calls.assign((size_t)ntiles, 0);
    f->result.assign((size_t)ntiles, 0);
    f->writes.assign((size_t)ntiles, 0);
}

static md_status faulty_tile(int worker, int device, int tile, void *arg) {
    fault_plan *f = (fault_plan *)arg;
    int attempt, fail;
    md_status st = MD_OK;
    (void)device;
    {
        std::lock_guard<std::mutex> g(f->mu);
        attempt = f->calls[tile]++;
    }
    fail = ((f->bad_workers >> worker) & 1ull) || tile == f->doomed || (attempt == 0 && f->flaky[tile]);
    if (!f->inner) /* a few microseconds of "work", so the workers interleave */
        std::this_thread::sleep_for(std::chrono::microseconds(mix(f->seed ^ ((uint64_t)tile << 20) ^ (uint64_t)attempt) % 200));
    if (fail) st = md_set_error(MD_ERR_CUDA, "faulty_tile", 0, "tile", "injected fault (worker %d, tile %d)", worker, tile);
    else if (f->inner) st = f->inner(worker, device, tile, f->inner_arg);
    std::lock_guard<std::mutex> g(f->mu);
    f->log.push_back(call_rec{worker, tile, st == MD_OK});
    if (st == MD_OK) {
        f->ok_calls[tile]++;
        f->writes[tile]++;
        f->result[tile] = worker + 1;
    }
    return st;
}

/* The rules of the section's manual, checked from the log against the run's record. want_ok: the
 * run succeeded. */
static int check_rules(fault_plan *f, const md_cuda_tiles_desc *d, const md_cuda_tiles_stats *s, int want_ok,
                       int max_failures, char *why, size_t cap) {
    std::vector<unsigned long long> failed_on((size_t)d->ntiles, 0ull);
    int failures[MD_CUDA_TILES_MAX_WORKERS] = {0}, done[MD_CUDA_TILES_MAX_WORKERS] = {0};
    int t, w, completed = 0;
    long long retries = 0;
    size_t i;
    for (i = 0; i < f->log.size(); i++) {
        const call_rec &c = f->log[i];
        if (failures[c.worker] >= max_failures) {
            snprintf(why, cap, "worker %d called (tile %d) after its failure number %d", c.worker, c.tile, max_failures);
            return 0;
        }
        if (failed_on[c.tile] & (1ull << c.worker)) {
            snprintf(why, cap, "tile %d retried on worker %d, which had failed on it", c.tile, c.worker);
            return 0;
        }
        if (c.ok) done[c.worker]++;
        else {
            failures[c.worker]++;
            failed_on[c.tile] |= 1ull << c.worker;
            retries++;
        }
    }
    for (t = 0; t < d->ntiles; t++) {
        if (f->ok_calls[t] > 1 || f->writes[t] > 1) {
            snprintf(why, cap, "tile %d completed %d times", t, f->ok_calls[t]);
            return 0;
        }
        if (want_ok && f->ok_calls[t] != 1) {
            snprintf(why, cap, "tile %d never completed", t);
            return 0;
        }
        completed += f->ok_calls[t];
        if (d->tile_worker && d->tile_worker[t] != (f->ok_calls[t] ? f->result[t] - 1 : -1)) {
            snprintf(why, cap, "tile %d: recorded worker %d, the log says %d", t, d->tile_worker[t], f->result[t] - 1);
            return 0;
        }
        if (d->tile_attempts && d->tile_attempts[t] != f->calls[t]) {
            snprintf(why, cap, "tile %d: recorded %d attempts, the log has %d", t, d->tile_attempts[t], f->calls[t]);
            return 0;
        }
    }
    if (s->completed != completed || s->retries != retries || s->attempts != (long long)f->log.size()) {
        snprintf(why, cap, "stats: completed %d (log %d), retries %lld (log %lld), attempts %lld (log %zu)", s->completed,
                 completed, s->retries, retries, s->attempts, f->log.size());
        return 0;
    }
    for (w = 0; w < d->nworkers; w++)
        if (s->tiles_of[w] != done[w] || s->failures_of[w] != failures[w] ||
            s->retired_of[w] != (failures[w] >= max_failures)) {
            snprintf(why, cap, "worker %d: stats say %d tiles, %d failures, retired %d; the log %d, %d", w, s->tiles_of[w],
                     s->failures_of[w], s->retired_of[w], done[w], failures[w]);
            return 0;
        }
    return 1;
}

/* ---- the scheduler on the CPU ---- */

/* Six seeded scenarios: 2 always-failing workers of 8 and 3 tiles failing once; every run must
 * complete with every rule held. The bad workers are retired (after 3 failures, or the default 2). */
static void sched_exactly_once_with_injected_failures(void) {
    const int ntiles = sanitize ? 97 : 397, nworkers = 8;
    md_rng rng;
    int trial;
    md_rng_seed(&rng, 2026);
    for (trial = 0; trial < 6; trial++) {
        fault_plan f;
        md_cuda_tiles_desc d;
        md_cuda_tiles_stats s;
        std::vector<int> tw((size_t)ntiles, -7), ta((size_t)ntiles, -7);
        char why[256];
        int t, b1, b2, k;
        fault_init(&f, ntiles, md_rng_next(&rng));
        b1 = (int)(md_rng_next(&rng) % nworkers);
        b2 = (b1 + 1 + (int)(md_rng_next(&rng) % (nworkers - 1))) % nworkers;
        f.bad_workers = (1ull << b1) | (1ull << b2);
        /* 3 tiles fail once: a healthy worker that takes two of them is retired too, and 6
         * healthy workers can lose 3 and still finish */
        for (k = 0; k < 3; k++) f.flaky[md_rng_next(&rng) % ntiles] = 1;
        memset(&d, 0, sizeof d);
        d.ntiles = ntiles;
        d.nworkers = nworkers;
        d.tile_worker = tw.data();
        d.tile_attempts = ta.data();
        d.max_failures = trial % 2 ? 0 : 3; /* 0: the default, 2 */
        MD_CHECK_OK(md_cuda_tiles_run(&d, faulty_tile, &f, &s));
        MD_CHECKF(check_rules(&f, &d, &s, 1, d.max_failures ? d.max_failures : 2, why, sizeof why), "trial %d: %s", trial,
                  why);
        MD_CHECKF(s.retired_of[b1] && s.retired_of[b2], "trial %d: bad workers %d, %d not retired", trial, b1, b2);
        MD_CHECKF(s.completed == ntiles && s.ntiles == ntiles && s.nworkers == nworkers && s.ndevices == 1,
                  "trial %d: completed %d, ndevices %d", trial, s.completed, s.ndevices);
        MD_CHECKF(s.retries >= 2LL * (d.max_failures ? d.max_failures : 2), "trial %d: only %lld retries", trial, s.retries);
        MD_CHECK(s.wall_s > 0.0);
        (void)t;
    }
}

/* Every worker fails every call: the run fails cleanly, naming a tile and the injected error,
 * nothing completed. Which rule ends it depends on the interleaving: every worker retired (no live
 * worker remains), one tile failed on all four first, or on every worker not yet retired. */
static void sched_fails_when_no_worker_remains(void) {
    fault_plan f;
    md_cuda_tiles_desc d;
    md_cuda_tiles_stats s;
    char why[256];
    fault_init(&f, 50, 7);
    f.bad_workers = 0xF;
    memset(&d, 0, sizeof d);
    d.ntiles = 50;
    d.nworkers = 4;
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, faulty_tile, &f, &s), MD_ERR_CUDA, "injected fault");
    MD_CHECKF(strstr(md_last_error(), "tile ") != NULL, "message does not name a tile: %s", md_last_error());
    MD_CHECK(s.completed == 0 && f.log.size() <= 8);
    MD_CHECKF(strstr(md_last_error(), "no live worker remains") || strstr(md_last_error(), "failed on every"),
              "%d retired, message: %s", s.retired, md_last_error());
    MD_CHECKF(check_rules(&f, &d, &s, 0, 2, why, sizeof why), "%s", why);
}

/* One tile fails on every worker (workers not retired: max_failures 100): the run fails naming
 * that tile after each worker tried it once; no tile completed twice. */
static void sched_fails_when_a_tile_fails_everywhere(void) {
    fault_plan f;
    md_cuda_tiles_desc d;
    md_cuda_tiles_stats s;
    std::vector<int> ta(60, 0);
    char why[256];
    fault_init(&f, 60, 11);
    f.doomed = 17;
    memset(&d, 0, sizeof d);
    d.ntiles = 60;
    d.nworkers = 3;
    d.max_failures = 100;
    d.tile_attempts = ta.data();
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, faulty_tile, &f, &s), MD_ERR_CUDA, "tile 17: failed on every worker");
    MD_CHECKF(strstr(md_last_error(), "injected fault") != NULL, "no last error in: %s", md_last_error());
    MD_CHECKF(ta[17] == 3, "tile 17 tried %d times, want once per worker (3)", ta[17]);
    MD_CHECK(s.retired == 0 && s.completed < 60);
    MD_CHECKF(check_rules(&f, &d, &s, 0, 100, why, sizeof why), "%s", why);
}

/* One worker: its first failure is a tile that failed on every worker, which ends the run. A
 * worker that cannot bind its device is retired at once (device 9999 does not exist; without a
 * GPU cudaSetDevice fails as well). */
static void sched_single_worker(void) {
    const int nodev[2] = {9999, 0};
    fault_plan f;
    md_cuda_tiles_desc d;
    md_cuda_tiles_stats s;
    fault_init(&f, 10, 3);
    f.flaky[2] = f.flaky[3] = 1;
    memset(&d, 0, sizeof d);
    d.ntiles = 10;
    d.nworkers = 1;
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, faulty_tile, &f, &s), MD_ERR_CUDA, "tile 2: failed on every worker");
    MD_CHECK(s.retired == 0 && s.completed == 2 && s.failures_of[0] == 1);
    fault_init(&f, 10, 3);
    d.nworkers = 2;
    d.devices = nodev;
    d.bind_device = 1;
    if (md_cuda_available()) {
        MD_CHECK_OK(md_cuda_tiles_run(&d, faulty_tile, &f, &s));
        MD_CHECK(s.retired_of[0] == 1 && s.tiles_of[0] == 0 && s.tiles_of[1] == 10);
    } else {
        md_status st = md_cuda_tiles_run(&d, faulty_tile, &f, &s);
        MD_CHECKF(st != MD_OK && strstr(md_last_error(), "no live worker remains"), "%s: %s", md_status_string(st),
                  md_last_error());
        MD_CHECK(s.retired == 2 && f.log.empty());
    }
}

static int progress_calls, progress_last, progress_bad;
static void count_progress(int done, int ntiles, void *arg) {
    (void)arg;
    progress_calls++;
    if (done != progress_last + 1 || done > ntiles) progress_bad = 1;
    progress_last = done;
}

/* Progress: once per completed tile, counting up to ntiles; the devices list gives ndevices. */
static void sched_progress_and_devices(void) {
    fault_plan f;
    md_cuda_tiles_desc d;
    md_cuda_tiles_stats s;
    const int devices[5] = {0, 3, 0, 3, 1};
    fault_init(&f, 40, 5);
    f.flaky[0] = f.flaky[39] = 1;
    memset(&d, 0, sizeof d);
    d.ntiles = 40;
    d.nworkers = 5;
    d.devices = devices;
    d.progress = count_progress;
    progress_calls = progress_last = progress_bad = 0;
    MD_CHECK_OK(md_cuda_tiles_run(&d, faulty_tile, &f, &s));
    MD_CHECKF(progress_calls == 40 && progress_last == 40 && !progress_bad, "progress %d calls, last %d", progress_calls,
              progress_last);
    MD_CHECKF(s.ndevices == 3, "ndevices %d, want 3", s.ndevices);
}

/* Bad arguments: refused before any call. */
static void sched_arguments(void) {
    fault_plan f;
    md_cuda_tiles_desc d;
    const int bad[2] = {0, -1};
    fault_init(&f, 4, 1);
    memset(&d, 0, sizeof d);
    d.ntiles = 4;
    d.nworkers = 2;
    MD_CHECK_ERROR(md_cuda_tiles_run(NULL, faulty_tile, &f, NULL), MD_ERR_INVALID_ARGUMENT, "d");
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, NULL, &f, NULL), MD_ERR_INVALID_ARGUMENT, "fn");
    d.ntiles = 0;
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, faulty_tile, &f, NULL), MD_ERR_INVALID_ARGUMENT, "ntiles");
    d.ntiles = 4;
    d.nworkers = MD_CUDA_TILES_MAX_WORKERS + 1;
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, faulty_tile, &f, NULL), MD_ERR_INVALID_ARGUMENT, "nworkers");
    d.nworkers = 2;
    d.devices = bad;
    MD_CHECK_ERROR(md_cuda_tiles_run(&d, faulty_tile, &f, NULL), MD_ERR_INVALID_ARGUMENT, "devices");
    MD_CHECK(f.log.empty());
    MD_CHECK_ERROR(md_cuda_energy_end(NULL), MD_ERR_INVALID_ARGUMENT, "e");
}

/* ---- the users on the GPU ---- */

/* A real job's tiles (inner on job) through faulty_tile, workers bound to devs: the run's desc
 * and stats go to d and s for check_rules. */
static md_status run_faulty_job(fault_plan *f, md_cuda_tiles_desc *d, md_cuda_tiles_stats *s, int ntiles, int nworkers,
                                const int *devs, md_cuda_tile_fn inner, void *job) {
    f->inner = inner;
    f->inner_arg = job;
    memset(d, 0, sizeof *d);
    d->ntiles = ntiles;
    d->nworkers = nworkers;
    d->devices = devs;
    d->bind_device = 1;
    return md_cuda_tiles_run(d, faulty_tile, f, s);
}

/* The slab map: 1 worker, then 3 workers sharing the GPU with worker 1 always failing and two
 * tiles failing once: bitwise equal, no NaN left, within 1e-4 of md_dcs_simple; a
 * constant-memory rung refused for 2 workers. */
static void dcs_tiles_match_one_worker_and_reference(void) {
    const int nat = sanitize ? 300 : 2000, nx = sanitize ? 21 : 45, ny = sanitize ? 17 : 38, nz = sanitize ? 9 : 27;
    const double box[3] = {(nx - 1) * 0.1, (ny - 1) * 0.1, (nz - 1) * 0.1}, origin[3] = {0, 0, 0}, h[3] = {0.1, 0.1, 0.1};
    md_system sys;
    md_grid one, many, ref, other;
    md_cuda_dcs_tiles j;
    md_cuda_tiles_desc d;
    md_cuda_tiles_stats s;
    fault_plan f;
    md_rng rng;
    char why[256];
    const int devs[3] = {0, 0, 0};
    size_t k, cnt;
    int t;
    NEED_GPU();
    memset(&j, 0, sizeof j);
    MD_CHECK_OK(md_build_random_charges(&sys, nat, box, 1.0, 2026));
    MD_CHECK_OK(md_grid_alloc(&one, nx, ny, nz, origin, h));
    MD_CHECK_OK(md_grid_alloc(&many, nx, ny, nz, origin, h));
    MD_CHECK_OK(md_grid_alloc(&ref, nx, ny, nz, origin, h));
    MD_CHECK_OK(md_grid_alloc(&other, nx, ny, nz, origin, h));
    cnt = md_grid_count(&one);
    for (k = 0; k < cnt; k++) one.data[k] = many.data[k] = other.data[k] = NAN;
    /* one worker, 4 planes a slab (the last slab overlaps the one before it) */
    MD_CHECK_OK(md_cuda_dcs_tiles_create(&j, MD_DCS_GPU_SHARED, sys.xyzq, sys.n, &one, 4, 1, NULL));
    MD_CHECK(j.ntiles == (nz + 3) / 4);
    MD_CHECK_OK(md_cuda_dcs_tiles_run(&j, NULL, NULL, &s));
    md_cuda_dcs_tiles_destroy(&j);
    /* three workers on the one GPU, faults injected into the real tiles */
    MD_CHECK_OK(md_cuda_dcs_tiles_create(&j, MD_DCS_GPU_SHARED, sys.xyzq, sys.n, &many, 4, 3, devs));
    fault_init(&f, j.ntiles, 99);
    f.bad_workers = 1ull << 1;
    md_rng_seed(&rng, 2026);
    f.flaky[0] = 1; /* two tiles fail once: workers 0 and 2 may lose one each and go on */
    f.flaky[1 + md_rng_next(&rng) % (j.ntiles - 1)] = 1;
    (void)t;
    MD_CHECK_OK(run_faulty_job(&f, &d, &s, j.ntiles, 3, devs, md_cuda_dcs_tiles_tile, &j));
    md_cuda_dcs_tiles_destroy(&j);
    MD_CHECKF(check_rules(&f, &d, &s, 1, 2, why, sizeof why), "%s", why);
    /* worker 1 fails every call: retired exactly when it reached max_failures (2) before the
     * others took every tile (with the sanitizer's 3 slabs it may not get a second try) */
    MD_CHECKF(s.retired_of[1] == (s.failures_of[1] >= 2) && s.tiles_of[1] == 0 && s.ndevices == 1,
              "worker 1: retired %d after %d failures, %d tiles", s.retired_of[1], s.failures_of[1], s.tiles_of[1]);
    for (k = 0; k < cnt; k++) MD_CHECKF(!isnan(many.data[k]), "point %zu never written", k);
    MD_CHECKF(memcmp(one.data, many.data, cnt * sizeof(float)) == 0, "3 workers differ from 1 worker");
    MD_CHECK_OK(md_dcs_simple(sys.xyzq, sys.n, &ref));
    MD_CHECKF(md_max_rel_error(many.data, ref.data, cnt) <= 1e-4, "error %.3e vs md_dcs_simple",
              md_max_rel_error(many.data, ref.data, cnt));
    /* another slab size (one plane more than the grid: clamped to one slab) */
    MD_CHECK_OK(md_cuda_dcs_tiles_create(&j, MD_DCS_GPU_L1, sys.xyzq, sys.n, &other, nz + 1, 2, devs));
    MD_CHECK(j.ntiles == 1);
    MD_CHECK_OK(md_cuda_dcs_tiles_run(&j, NULL, NULL, NULL));
    md_cuda_dcs_tiles_destroy(&j);
    MD_CHECK(md_max_rel_error(other.data, ref.data, cnt) <= 1e-4);
    /* the __constant__ buffer has one holder: a second worker's plan is refused */
    MD_CHECK_ERROR(md_cuda_dcs_tiles_create(&j, MD_DCS_GPU_UNROLL8, sys.xyzq, sys.n, &other, 4, 2, devs),
                   MD_ERR_UNSUPPORTED, "worker 1");
    MD_CHECK(j.plans == NULL);
    md_grid_free(&one);
    md_grid_free(&many);
    md_grid_free(&ref);
    md_grid_free(&other);
    md_system_free(&sys);
}

/* Frames of random positions in boxes that change from frame to frame. */
static void make_frames(std::vector<md_float4> &xyz, std::vector<double> &boxes, int natoms, int nframes) {
    md_rng rng;
    int f, i, d;
    md_rng_seed(&rng, 2026);
    xyz.resize((size_t)natoms * nframes);
    boxes.resize((size_t)nframes * 3);
    for (f = 0; f < nframes; f++) {
        for (d = 0; d < 3; d++) boxes[3 * f + d] = 3.0 + 0.4 * md_rng_uniform(&rng);
        for (i = 0; i < natoms; i++) {
            md_float4 &p = xyz[(size_t)f * natoms + i];
            p.x = (float)(boxes[3 * f] * (1.2 * md_rng_uniform(&rng) - 0.1)); /* some outside the box: wrapped */
            p.y = (float)(boxes[3 * f + 1] * md_rng_uniform(&rng));
            p.z = (float)(boxes[3 * f + 2] * md_rng_uniform(&rng));
            p.w = 0.0f;
        }
    }
}

/* The RDF in frame ranges with 1 worker and with 3 (faults injected): counts and normalisation
 * bitwise equal to md_rdf_accumulate (CPU) frame after frame. */
static void rdf_tiles_match_cpu_bitwise(void) {
    const int natoms = sanitize ? 400 : 3000, nframes = sanitize ? 5 : 13, na = natoms / 3;
    std::vector<md_float4> xyz;
    std::vector<double> boxes;
    std::vector<int> sel_a((size_t)na), sel_b((size_t)(natoms - na));
    md_rdf cpu, r1, r3;
    md_cuda_rdf_tiles j;
    md_cuda_tiles_desc d;
    md_cuda_tiles_stats s;
    fault_plan f;
    char why[256];
    const int devs[3] = {0, 0, 0};
    int i, fr;
    NEED_GPU();
    make_frames(xyz, boxes, natoms, nframes);
    for (i = 0; i < na; i++) sel_a[i] = 3 * i;
    { /* B: every atom not in A */
        std::vector<int> seen((size_t)natoms, 0);
        for (i = 0; i < na; i++) seen[3 * i] = 1;
        int m = 0;
        for (i = 0; i < natoms; i++)
            if (!seen[i]) sel_b[m++] = i;
        MD_CHECK(m == natoms - na);
    }
    MD_CHECK_OK(md_rdf_init(&cpu, 1.4, 280));
    MD_CHECK_OK(md_rdf_init(&r1, 1.4, 280));
    MD_CHECK_OK(md_rdf_init(&r3, 1.4, 280));
    for (fr = 0; fr < nframes; fr++)
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &cpu, &xyz[(size_t)fr * natoms], natoms, sel_a.data(), na,
                                      sel_b.data(), natoms - na, &boxes[3 * fr]));
    /* one worker, 2 frames a tile */
    MD_CHECK_OK(md_cuda_rdf_tiles_create(&j, MD_RDF_GPU_SHARED, natoms, xyz.data(), boxes.data(), nframes, sel_a.data(),
                                         na, sel_b.data(), natoms - na, &r1, 2, 1, NULL));
    MD_CHECK_OK(md_cuda_rdf_tiles_run(&j, NULL, NULL, &s));
    MD_CHECK_OK(md_cuda_rdf_tiles_finish(&j, &r1));
    md_cuda_rdf_tiles_destroy(&j);
    /* three workers, worker 2 always failing, tiles 0 and 3 failing once */
    MD_CHECK_OK(md_cuda_rdf_tiles_create(&j, MD_RDF_GPU_SHARED, natoms, xyz.data(), boxes.data(), nframes, sel_a.data(),
                                         na, sel_b.data(), natoms - na, &r3, 2, 3, devs));
    MD_CHECK_ERROR(md_cuda_rdf_tiles_finish(&j, &r3), MD_ERR_INVALID_ARGUMENT, "tile 0 was not computed");
    fault_init(&f, j.ntiles, 5);
    f.bad_workers = 1ull << 2;
    f.flaky[0] = 1;
    if (j.ntiles > 3) f.flaky[3] = 1;
    MD_CHECK_OK(run_faulty_job(&f, &d, &s, j.ntiles, 3, devs, md_cuda_rdf_tiles_tile, &j));
    MD_CHECKF(check_rules(&f, &d, &s, 1, 2, why, sizeof why), "%s", why);
    MD_CHECK_OK(md_cuda_rdf_tiles_finish(&j, &r3));
    md_cuda_rdf_tiles_destroy(&j);
    for (i = 0; i < 280; i++) {
        MD_CHECKF(r1.counts[i] == cpu.counts[i], "bin %d: 1 worker %llu, CPU %llu", i, (unsigned long long)r1.counts[i],
                  (unsigned long long)cpu.counts[i]);
        MD_CHECKF(r3.counts[i] == cpu.counts[i], "bin %d: 3 workers %llu, CPU %llu", i, (unsigned long long)r3.counts[i],
                  (unsigned long long)cpu.counts[i]);
    }
    MD_CHECK(r1.frames == nframes && r3.frames == nframes);
    MD_CHECKF(memcmp(&r3.sum_pair_density, &cpu.sum_pair_density, sizeof(double)) == 0 &&
                  memcmp(&r1.sum_pair_density, &cpu.sum_pair_density, sizeof(double)) == 0,
              "normalisation differs: %.17g %.17g %.17g", r1.sum_pair_density, r3.sum_pair_density, cpu.sum_pair_density);
    MD_CHECK(r3.sum_centers == cpu.sum_centers);
    {
        uint64_t total = 0;
        for (i = 0; i < 280; i++) total += cpu.counts[i];
        MD_CHECKF(total > 1000, "only %llu pairs counted: the check would be weak", (unsigned long long)total);
    }
    md_rdf_free(&cpu);
    md_rdf_free(&r1);
    md_rdf_free(&r3);
}

/* Work for the energy test: DCS enqueues on one plan until min_s seconds have passed. */
typedef struct energy_work {
    md_cuda_dcs_plan *p;
    double min_s;
    int runs;
} energy_work;

static md_status energy_busy(void *arg) {
    energy_work *w = (energy_work *)arg;
    const double t0 = md_wall_seconds();
    md_status st;
    w->runs = 0;
    do {
        if ((st = md_cuda_dcs_plan_enqueue(w->p)) != MD_OK) return st;
        if ((st = md_cuda_dcs_plan_sync(w->p, NULL)) != MD_OK) return st;
        w->runs++;
    } while (md_wall_seconds() - t0 < w->min_s);
    return MD_OK;
}

/* NVML around about a second of DCS work, twice: joules and watts positive and plausible, the
 * counter monotonic. */
static void energy_readings_positive_and_monotonic(void) {
    const double box[3] = {4.0, 4.0, 4.0}, origin[3] = {0, 0, 0}, h[3] = {0.05, 0.05, 0.05};
    md_system sys;
    md_grid g;
    md_cuda_dcs_plan p;
    md_cuda_energy a, b;
    energy_work w;
    NEED_GPU();
    if (md_cuda_energy_available() != MD_OK) MD_SKIP("%s", md_last_error());
    MD_CHECK_OK(md_build_random_charges(&sys, sanitize ? 200 : 4000, box, 1.0, 2026));
    MD_CHECK_OK(md_grid_alloc(&g, sanitize ? 16 : 80, sanitize ? 16 : 80, sanitize ? 4 : 80, origin, h));
    MD_CHECK_OK(md_cuda_dcs_plan_create(&p, MD_DCS_GPU_SHARED, sys.n, &g));
    MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, sys.xyzq, sys.n));
    w.p = &p;
    w.min_s = sanitize ? 0.0 : 1.0;
    MD_CHECK_OK(md_cuda_energy_measure(0, energy_busy, &w, &a));
    MD_CHECK_OK(md_cuda_energy_measure(0, energy_busy, &w, &b));
    md_cuda_dcs_plan_destroy(&p);
    md_grid_free(&g);
    md_system_free(&sys);
    MD_CHECK(a.energy1_mj >= a.energy0_mj && b.energy0_mj >= a.energy1_mj && b.energy1_mj >= b.energy0_mj);
    MD_CHECK(a.joules >= 0.0 && a.seconds > 0.0);
    if (sanitize) return;
    MD_CHECKF(a.seconds >= 1.0 && w.runs >= 1, "%.3f s, %d runs", a.seconds, w.runs);
    MD_CHECKF(a.joules > 0.0 && b.joules > 0.0, "joules %.3f, %.3f (the counter did not move in a second)", a.joules,
              b.joules);
    MD_CHECKF(a.watts >= 1.0 && a.watts <= 2000.0 && b.watts >= 1.0 && b.watts <= 2000.0, "average %.1f W, %.1f W",
              a.watts, b.watts);
    MD_CHECKF(!(a.power1_w <= 0.0) && a.sm_clock1_mhz > 0, "power %.1f W, SM clock %u MHz", a.power1_w, a.sm_clock1_mhz);
    printf("  energy: %.2f J in %.2f s = %.1f W (power %.1f -> %.1f W, SM %u -> %u MHz)\n", a.joules, a.seconds, a.watts,
           a.power0_w, a.power1_w, a.sm_clock0_mhz, a.sm_clock1_mhz);
}

int main(void) {
    const char *s = getenv("MD_SANITIZE");
    sanitize = s && s[0] == '1';
    MD_RUN(sched_exactly_once_with_injected_failures);
    MD_RUN(sched_fails_when_no_worker_remains);
    MD_RUN(sched_fails_when_a_tile_fails_everywhere);
    MD_RUN(sched_single_worker);
    MD_RUN(sched_progress_and_devices);
    MD_RUN(sched_arguments);
    MD_RUN(dcs_tiles_match_one_worker_and_reference);
    MD_RUN(rdf_tiles_match_cpu_bitwise);
    MD_RUN(energy_readings_positive_and_monotonic);
    return md_test_summary();
}
