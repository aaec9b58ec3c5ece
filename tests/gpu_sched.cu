/* Tests of md_cuda.cu.h's sched section (chapter 10): the same task function under the three
 * modes gives the same results and the same barrier decisions; counters (waits, barriers,
 * resumes, polls, lag) are what the task did; the busy fraction measures what a known
 * GPU / host duty cycle predicts; round robin keeps equal tasks within one batch of each other
 * (no starvation); a failing task or barrier ends the run with its message and the others
 * unwind; argument errors.
 * Seeds used: 31, 32.
 *
 * Without a GPU every test prints SKIP. MD_SANITIZE=1 (compute-sanitizer) shortens the runs
 * and skips the timing checks. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"
#include <time.h>

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* Keep the GPU busy for about ns nanoseconds (one thread on the global timer), then step the
 * task's value: x = x * 6364136223846793005 + add (a 64-bit LCG the host recomputes). */
static __global__ void spin_and_step(unsigned long long *x, unsigned long long add, long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
    *x = *x * 6364136223846793005ull + add;
}

static md_status enqueue_spin(cudaStream_t s, unsigned long long *x, unsigned long long add, long long ns) {
    MD_CUDA_LAUNCH(spin_and_step, 1, 1, 0, s, x, add, ns);
    return MD_OK;
}

static void sleep_us(double us) {
    struct timespec ts;
    ts.tv_sec = (time_t)(us / 1e6);
    ts.tv_nsec = (long)((us - 1e6 * (double)ts.tv_sec) * 1e3);
    nanosleep(&ts, NULL);
}

/* ---- one task function under every mode ---- */

enum { NT = 6, MAXR = 40 };

typedef struct shared {
    unsigned long long value[NT]; /* each task's value after its last read */
    unsigned long long log[MAXR]; /* the barrier's decision of each round */
    int rounds_logged;
} shared;

typedef struct task_arg {
    shared *sh;
    cudaStream_t stream;
    unsigned long long *d_x, *h_x; /* device value, pinned read-back */
    int rounds, batches;           /* rounds of (batches of work, read, barrier) */
    long long spin_ns;
    double host_us;                /* host "decision" time after each read */
    md_status st;                  /* what the task function returned */
    int fail_at;                   /* return an error in this round (-1: never) */
} task_arg;

/* The barrier's decision: a hash of every task's value, in task order (the exchange of a
 * replica run reads every energy the same way). */
static md_status decide(void *p) {
    shared *sh = (shared *)p;
    unsigned long long h = 1469598103934665603ull;
    int i;
    for (i = 0; i < NT; i++) h = (h ^ sh->value[i]) * 1099511628211ull;
    if (sh->rounds_logged < MAXR) sh->log[sh->rounds_logged++] = h;
    return MD_OK;
}

static md_status task_body(md_cuda_task *t, void *p) {
    task_arg *a = (task_arg *)p;
    md_status st;
    int r, b;
    for (r = 0; r < a->rounds; r++) {
        if (r == a->fail_at) return md_set_error(MD_ERR_RANGE, "task_body", 0, "round", "task %d fails in round %d", t->index, r);
        for (b = 0; b < a->batches; b++) {
            if ((st = md_cuda_task_begin(t, a->stream)) != MD_OK) return st;
            if ((st = enqueue_spin(a->stream, a->d_x, (unsigned long long)(t->index * 1000 + r * 10 + b), a->spin_ns)) != MD_OK)
                return st;
            if (cudaMemcpyAsync(a->h_x, a->d_x, sizeof *a->h_x, cudaMemcpyDeviceToHost, a->stream) != cudaSuccess)
                return md_set_error(MD_ERR_CUDA, "task_body", 0, NULL, "copy failed");
            if ((st = md_cuda_task_wait(t, a->stream)) != MD_OK) return st;
            a->sh->value[t->index] = *a->h_x;
            if (a->host_us > 0) sleep_us(a->host_us);
        }
        if ((st = md_cuda_task_barrier(t, decide, a->sh)) != MD_OK) return st;
    }
    return MD_OK;
}

/* The values and barrier log every mode must give: the LCG run on the host. */
static void expected(int rounds, int batches, shared *want) {
    unsigned long long x[NT];
    int i, r, b;
    memset(want, 0, sizeof *want);
    for (i = 0; i < NT; i++) x[i] = 0x1234567ull + (unsigned long long)i * 77ull;
    for (r = 0; r < rounds; r++) {
        for (i = 0; i < NT; i++)
            for (b = 0; b < batches; b++) x[i] = x[i] * 6364136223846793005ull + (unsigned long long)(i * 1000 + r * 10 + b);
        for (i = 0; i < NT; i++) want->value[i] = x[i];
        decide(want);
    }
}

typedef struct fixture {
    cudaStream_t stream[NT];
    unsigned long long *d_x, *h_x;
    task_arg arg[NT];
    void *args[NT];
} fixture;

static md_status fixture_make(fixture *f, shared *sh, int rounds, int batches, long long spin_ns, double host_us) {
    int i;
    memset(f, 0, sizeof *f);
    MD_CUDA_TRY(cudaMalloc((void **)&f->d_x, NT * sizeof(unsigned long long)));
    MD_CUDA_TRY(cudaHostAlloc((void **)&f->h_x, NT * sizeof(unsigned long long), cudaHostAllocDefault));
    for (i = 0; i < NT; i++) f->h_x[i] = 0x1234567ull + (unsigned long long)i * 77ull;
    MD_CUDA_TRY(cudaMemcpy(f->d_x, f->h_x, NT * sizeof(unsigned long long), cudaMemcpyHostToDevice));
    for (i = 0; i < NT; i++) {
        MD_CUDA_TRY(cudaStreamCreateWithFlags(&f->stream[i], cudaStreamNonBlocking));
        f->arg[i].sh = sh;
        f->arg[i].stream = f->stream[i];
        f->arg[i].d_x = f->d_x + i;
        f->arg[i].h_x = f->h_x + i;
        f->arg[i].rounds = rounds;
        f->arg[i].batches = batches;
        f->arg[i].spin_ns = spin_ns;
        f->arg[i].host_us = host_us;
        f->arg[i].fail_at = -1;
        f->args[i] = &f->arg[i];
    }
    return MD_OK;
}

static void fixture_free(fixture *f) {
    int i;
    (void)cudaDeviceSynchronize();
    for (i = 0; i < NT; i++)
        if (f->stream[i]) (void)cudaStreamDestroy(f->stream[i]);
    (void)cudaFree(f->d_x);
    (void)cudaFreeHost(f->h_x);
}

/* Wraps task_body to keep its status for the checks. */
static md_status task_keep(md_cuda_task *t, void *p) {
    task_arg *a = (task_arg *)p;
    a->st = task_body(t, p);
    return a->st;
}

static void every_mode_same_results_and_counts(void) {
    int rounds = sanitize ? 3 : 8, batches = 3, m, i;
    shared want;
    NEED_GPU();
    expected(rounds, batches, &want);
    for (m = 0; m < MD_CUDA_SCHED_MODE_COUNT; m++) {
        shared sh;
        fixture f;
        md_cuda_sched_desc d;
        md_cuda_sched_stats s;
        md_cuda_task_stats ts[NT];
        memset(&sh, 0, sizeof sh);
        memset(&d, 0, sizeof d);
        d.mode = (md_cuda_sched_mode)m;
        MD_CHECK_OK(fixture_make(&f, &sh, rounds, batches, 20000, 0.0));
        MD_CHECK_OK(md_cuda_sched_run(&d, NT, task_keep, f.args, &s, ts));
        fixture_free(&f);
        MD_CHECKF(sh.rounds_logged == rounds, "%s: %d barrier decisions", md_cuda_sched_mode_name(d.mode), sh.rounds_logged);
        MD_CHECKF(memcmp(sh.log, want.log, sizeof(unsigned long long) * rounds) == 0, "%s: barrier decisions differ",
                  md_cuda_sched_mode_name(d.mode));
        MD_CHECK(memcmp(sh.value, want.value, sizeof want.value) == 0);
        MD_CHECK(s.mode == d.mode && s.ntask == NT && s.batches == (long long)NT * rounds * batches);
        MD_CHECK(s.busy_fraction > 0.0 && s.busy_fraction <= 1.0 + 1e-6 && s.busy_s <= s.span_s * (1.0 + 1e-6));
        for (i = 0; i < NT; i++) {
            MD_CHECK(ts[i].waits == rounds * batches && ts[i].barriers == rounds && ts[i].unmeasured == 0);
            MD_CHECK(ts[i].gpu_s > 0.0);
            if (d.mode == MD_CUDA_SCHED_COROUTINES) {
                MD_CHECK(ts[i].resumes == ts[i].waits + ts[i].barriers + 1);
                MD_CHECK(ts[i].polls >= ts[i].waits);
                MD_CHECK(ts[i].stack_used > 0 && ts[i].stack_used < (1u << 20));
            } else if (d.mode == MD_CUDA_SCHED_SEQUENTIAL) {
                MD_CHECK(ts[i].resumes == ts[i].barriers + 1 && ts[i].polls == 0);
            } else {
                MD_CHECK(ts[i].resumes == 0 && ts[i].stack_used == 0);
            }
        }
        if (d.mode == MD_CUDA_SCHED_COROUTINES) MD_CHECK(s.passes > 0);
    }
}

/* Equal tasks without barriers under the coroutine scheduler: round robin resumes every ready
 * task once per pass, so none falls more than a few batches behind, however long the run; a
 * starved task's lag would grow with the run, to its length (60 batches here). The bound is
 * 2 + batches / 12 (7 of 60): the GPU does not finish eight streams' equal kernels in the order
 * they were launched, so a task's lag is not 1 or 2 every time (3 on an H200, 2026-11-28). */
static void round_robin_does_not_starve(void) {
    int batches = sanitize ? 5 : 60, i;
    shared sh;
    fixture f;
    md_cuda_sched_desc d;
    md_cuda_sched_stats s;
    md_cuda_task_stats ts[NT];
    NEED_GPU();
    memset(&sh, 0, sizeof sh);
    memset(&d, 0, sizeof d);
    d.mode = MD_CUDA_SCHED_COROUTINES;
    MD_CHECK_OK(fixture_make(&f, &sh, 1, batches, 30000, 0.0));
    MD_CHECK_OK(md_cuda_sched_run(&d, NT, task_keep, f.args, &s, ts));
    fixture_free(&f);
    for (i = 0; i < NT; i++) {
        MD_CHECK(ts[i].waits == batches);
        MD_CHECKF(ts[i].max_lag <= 2 + batches / 12, "task %d fell %lld of %d batches behind", i, ts[i].max_lag,
                  batches);
    }
    MD_CHECK(s.max_lag <= 2 + batches / 12);
}

/* The busy measure against a duty cycle known in advance: one task, each batch G us of GPU work
 * then H us of host sleep: busy fraction G / (G + H) (+ the launch and wake-up latencies, which
 * count as idle: the tolerance is 0.12). Eight tasks under coroutines overlap one another's host
 * time: busy >= 0.9. */
static void busy_fraction_measures_the_duty_cycle(void) {
    md_cuda_sched_desc d;
    md_cuda_sched_stats s;
    shared sh;
    fixture f;
    double g = 400.0, h = 400.0;
    NEED_GPU();
    /* under the sanitizer the runs and the accounting are checked, not the timing: the fraction
     * must still be a fraction */
    memset(&sh, 0, sizeof sh);
    memset(&d, 0, sizeof d);
    d.mode = MD_CUDA_SCHED_SEQUENTIAL;
    MD_CHECK_OK(fixture_make(&f, &sh, 1, sanitize ? 4 : 40, (long long)(g * 1000), h));
    MD_CHECK_OK(md_cuda_sched_run(&d, 1, task_keep, f.args, &s, NULL));
    fixture_free(&f);
    MD_CHECKF(s.busy_fraction > 0.0 && s.busy_fraction <= 1.0, "one task: busy %.3f", s.busy_fraction);
    if (!sanitize)
        MD_CHECKF(fabs(s.busy_fraction - g / (g + h)) < 0.12, "one task: busy %.3f, duty cycle %.3f", s.busy_fraction,
                  g / (g + h));
    /* host time much shorter than the GPU work of the other tasks: the GPU never waits */
    memset(&sh, 0, sizeof sh);
    d.mode = MD_CUDA_SCHED_COROUTINES;
    MD_CHECK_OK(fixture_make(&f, &sh, 1, sanitize ? 4 : 40, (long long)(g * 1000), 20.0));
    MD_CHECK_OK(md_cuda_sched_run(&d, NT, task_keep, f.args, &s, NULL));
    fixture_free(&f);
    MD_CHECKF(s.busy_fraction > 0.0 && s.busy_fraction <= 1.0, "%d tasks as coroutines: busy %.3f", NT, s.busy_fraction);
    if (!sanitize) MD_CHECKF(s.busy_fraction > 0.9, "%d tasks as coroutines: busy %.3f", NT, s.busy_fraction);
}

static md_status failing_barrier(void *p) {
    (void)p;
    return md_set_error(MD_ERR_RANGE, "failing_barrier", 0, "energy", "not finite");
}

static md_status task_barrier_fails(md_cuda_task *t, void *p) {
    task_arg *a = (task_arg *)p;
    a->st = md_cuda_task_barrier(t, failing_barrier, NULL);
    return a->st;
}

static void failures_end_the_run(void) {
    int m, i;
    NEED_GPU();
    for (m = 0; m < MD_CUDA_SCHED_MODE_COUNT; m++) {
        shared sh;
        fixture f;
        md_cuda_sched_desc d;
        memset(&sh, 0, sizeof sh);
        memset(&d, 0, sizeof d);
        d.mode = (md_cuda_sched_mode)m;
        MD_CHECK_OK(fixture_make(&f, &sh, 4, 2, 5000, 0.0));
        f.arg[2].fail_at = 1;
        MD_CHECK_ERROR(md_cuda_sched_run(&d, NT, task_keep, f.args, NULL, NULL), MD_ERR_RANGE, "task 2 failed");
        MD_CHECK(strstr(md_last_error(), "fails in round 1") != NULL);
        for (i = 0; i < NT; i++)
            if (i != 2) MD_CHECKF(f.arg[i].st != MD_OK, "%s: task %d finished as if nothing failed", md_cuda_sched_mode_name(d.mode), i);
        MD_CHECK(sh.rounds_logged <= 1);
        /* a barrier's work that fails: every task gets its status */
        MD_CHECK_ERROR(md_cuda_sched_run(&d, NT, task_barrier_fails, f.args, NULL, NULL), MD_ERR_RANGE, "not finite");
        for (i = 0; i < NT; i++) MD_CHECK(f.arg[i].st == MD_ERR_RANGE);
        fixture_free(&f);
    }
}

static md_status nothing(md_cuda_task *t, void *p) {
    (void)t;
    (void)p;
    return MD_OK;
}

static void argument_errors(void) {
    md_cuda_sched_desc d;
    md_cuda_task fake;
    NEED_GPU();
    memset(&d, 0, sizeof d);
    MD_CHECK_ERROR(md_cuda_sched_run(&d, NT, NULL, NULL, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "fn");
    MD_CHECK_ERROR(md_cuda_sched_run(&d, 0, nothing, NULL, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "ntask");
    d.mode = MD_CUDA_SCHED_MODE_COUNT;
    MD_CHECK_ERROR(md_cuda_sched_run(&d, 1, nothing, NULL, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "mode");
    memset(&fake, 0, sizeof fake);
    MD_CHECK_ERROR(md_cuda_task_wait(&fake, 0), MD_ERR_INVALID_ARGUMENT, "not a task");
    MD_CHECK_ERROR(md_cuda_task_barrier(NULL, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "not a task");
    MD_CHECK(strcmp(md_cuda_sched_mode_name(MD_CUDA_SCHED_COROUTINES), "coroutines") == 0);
    d.mode = MD_CUDA_SCHED_COROUTINES; /* tasks that do nothing: a run with no batches */
    {
        md_cuda_sched_stats s;
        MD_CHECK_OK(md_cuda_sched_run(&d, 3, nothing, NULL, &s, NULL));
        MD_CHECK(s.batches == 0 && isnan(s.busy_fraction));
    }
}

int main(void) {
    const char *e = getenv("MD_SANITIZE");
    sanitize = e && e[0] == '1';
    MD_RUN(every_mode_same_results_and_counts);
    MD_RUN(round_robin_does_not_starve);
    MD_RUN(busy_fraction_measures_the_duty_cycle);
    MD_RUN(failures_end_the_run);
    MD_RUN(argument_errors);
    return md_test_summary();
}
