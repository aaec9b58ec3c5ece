/* Tests of md.h's coroutines (section co): the order of resumes and yields, many coroutines,
 * finishing, nesting, deep recursion within a stack, the stack canary, registers and floating
 * point kept across switches, coroutines on two threads, and the errors. tests/run.sh also
 * builds this file under AddressSanitizer + UndefinedBehaviorSanitizer (the switches are
 * announced to ASan), tests/test_co_ucontext.c runs it with the ucontext switch, and, where an
 * AArch64 cross compiler and qemu are installed, run.sh runs it on AArch64 too.
 * Seeds used: 11, 12 (the floating-point and many-coroutine workloads). */
#ifndef MD_IMPLEMENTATION
#define MD_IMPLEMENTATION
#endif
#include "md.h"
#include "md_test.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

/* ---- ping-pong: two coroutines and the caller write into one log in a known order ---- */

typedef struct co_log {
    char text[128];
    int len;
} co_log;

static void log_add(co_log *l, char c) {
    if (l->len + 1 < (int)sizeof l->text) l->text[l->len++] = c;
    l->text[l->len] = '\0';
}

static void ping(md_co *co, void *arg) {
    co_log *l = (co_log *)arg;
    int i;
    for (i = 0; i < 3; i++) {
        log_add(l, 'a');
        md_co_yield(co);
    }
    log_add(l, 'A'); /* the last resume: then it returns */
}

static void pong(md_co *co, void *arg) {
    co_log *l = (co_log *)arg;
    int i;
    for (i = 0; i < 2; i++) {
        log_add(l, 'b');
        md_co_yield(co);
    }
    log_add(l, 'B');
}

static void ping_pong_order(void) {
    md_co a, b;
    co_log l;
    int turn;
    memset(&l, 0, sizeof l);
    MD_CHECK_OK(md_co_create(&a, ping, &l, 0));
    MD_CHECK_OK(md_co_create(&b, pong, &l, 0));
    MD_CHECK(md_co_status(&a) == MD_CO_SUSPENDED && md_co_status(&b) == MD_CO_SUSPENDED);
    MD_CHECK(l.len == 0); /* nothing runs before the first resume */
    for (turn = 0; turn < 5; turn++) {
        if (md_co_status(&a) == MD_CO_SUSPENDED) MD_CHECK_OK(md_co_resume(&a));
        log_add(&l, '.');
        if (md_co_status(&b) == MD_CO_SUSPENDED) MD_CHECK_OK(md_co_resume(&b));
        log_add(&l, '|');
    }
    /* a yields 3 times then finishes on its 4th resume; b yields twice, finishes on its 3rd */
    MD_CHECKF(strcmp(l.text, "a.b|a.b|a.B|A.|.|") == 0, "log '%s'", l.text);
    MD_CHECK(md_co_status(&a) == MD_CO_DEAD && md_co_status(&b) == MD_CO_DEAD);
    MD_CHECK(a.resumes == 4 && b.resumes == 3);
    md_co_free(&a);
    md_co_free(&b);
    MD_CHECK(a.impl == NULL && md_co_status(&a) == MD_CO_DEAD);
}

/* ---- many coroutines, round robin ---- */

typedef struct worker {
    int id, yields, done;
    long long *order; /* shared: who ran, in order */
    int *norder;
} worker;

static void work(md_co *co, void *arg) {
    worker *w = (worker *)arg;
    int i;
    for (i = 0; i < w->yields; i++) {
        w->order[(*w->norder)++] = w->id;
        md_co_yield(co);
    }
    w->done = 1;
}

static void many_coroutines_round_robin(void) {
    enum { N = 500 };
    static md_co co[N];
    static worker w[N];
    static long long order[N * 40];
    int norder = 0, i, live, pass, k, maxy = 0;
    md_rng r;
    md_rng_seed(&r, 12);
    for (i = 0; i < N; i++) {
        w[i].id = i;
        w[i].yields = 1 + (int)(md_rng_uniform(&r) * 30); /* 1..30 yields */
        w[i].done = 0;
        w[i].order = order;
        w[i].norder = &norder;
        if (w[i].yields > maxy) maxy = w[i].yields;
        MD_CHECK_OK(md_co_create(&co[i], work, &w[i], MD_CO_STACK_MIN));
    }
    for (pass = 0, live = N; live > 0; pass++) {
        for (i = 0, live = 0; i < N; i++)
            if (md_co_status(&co[i]) == MD_CO_SUSPENDED) {
                MD_CHECK_OK(md_co_resume(&co[i]));
                live += md_co_status(&co[i]) == MD_CO_SUSPENDED;
            }
        MD_CHECK(pass <= maxy);
    }
    /* the log is pass by pass: in pass p, in index order, every coroutine with more than p yields */
    k = 0;
    for (pass = 0; pass < maxy; pass++)
        for (i = 0; i < N; i++)
            if (w[i].yields > pass) {
                MD_CHECKF(k < norder && order[k] == i, "entry %d: %lld, expected %d", k, k < norder ? order[k] : -1, i);
                k++;
            }
    MD_CHECK(k == norder);
    for (i = 0; i < N; i++) {
        MD_CHECK(w[i].done && md_co_status(&co[i]) == MD_CO_DEAD);
        MD_CHECK(co[i].resumes == w[i].yields + 1);
        md_co_free(&co[i]);
    }
}

/* ---- states, finishing, current, errors ---- */

typedef struct seen {
    md_co_state inside;
    md_co *current;
    md_status yield_other;
    md_status resume_self;
} seen;

static void observe(md_co *co, void *arg) {
    seen *s = (seen *)arg;
    s->inside = md_co_status(co);
    s->current = md_co_current();
    s->resume_self = md_co_resume(co); /* refused: it is running */
    md_co_yield(co);
}

static void finishing_and_states(void) {
    md_co co;
    seen s;
    memset(&s, 0, sizeof s);
    MD_CHECK(md_co_current() == NULL);
    MD_CHECK_OK(md_co_create(&co, observe, &s, 0));
    MD_CHECK(co.stack_size == MD_CO_STACK_DEFAULT && co.resumes == 0);
    MD_CHECK_OK(md_co_resume(&co));
    MD_CHECK(s.inside == MD_CO_RUNNING);
    MD_CHECK(s.current == &co);
    MD_CHECK(s.resume_self == MD_ERR_INVALID_ARGUMENT);
    MD_CHECK(md_co_current() == NULL);
    MD_CHECK(md_co_status(&co) == MD_CO_SUSPENDED);
    MD_CHECK_OK(md_co_resume(&co)); /* returns from observe: finished */
    MD_CHECK(md_co_status(&co) == MD_CO_DEAD);
    MD_CHECK_ERROR(md_co_resume(&co), MD_ERR_INVALID_ARGUMENT, "has finished");
    MD_CHECK_ERROR(md_co_yield(&co), MD_ERR_INVALID_ARGUMENT, "not the coroutine running");
    md_co_free(&co);
    MD_CHECK_ERROR(md_co_resume(&co), MD_ERR_INVALID_ARGUMENT, "never created, or freed");
    md_co_free(&co); /* twice: safe */
}

static void nothing(md_co *co, void *arg) {
    (void)co;
    (void)arg;
}

static void errors_leave_outputs_alone(void) {
    md_co co, zero;
    memset(&co, 0x5A, sizeof co);
    memset(&zero, 0x5A, sizeof zero);
    MD_CHECK_ERROR(md_co_create(NULL, nothing, NULL, 0), MD_ERR_INVALID_ARGUMENT, "co");
    MD_CHECK_ERROR(md_co_create(&co, NULL, NULL, 0), MD_ERR_INVALID_ARGUMENT, "fn");
    MD_CHECK_ERROR(md_co_create(&co, nothing, NULL, MD_CO_STACK_MIN - 1), MD_ERR_INVALID_ARGUMENT, "stack_size");
    MD_CHECK_ERROR(md_co_create(&co, nothing, NULL, (size_t)-1), MD_ERR_OUT_OF_MEMORY, "stack_size");
    MD_CHECK(memcmp(&co, &zero, sizeof co) == 0); /* untouched on failure */
    MD_CHECK_ERROR(md_co_resume(NULL), MD_ERR_INVALID_ARGUMENT, "co");
    MD_CHECK_ERROR(md_co_yield(NULL), MD_ERR_INVALID_ARGUMENT, "co");
    memset(&co, 0, sizeof co);
    MD_CHECK(md_co_status(&co) == MD_CO_DEAD && md_co_status(NULL) == MD_CO_DEAD);
    MD_CHECK(md_co_stack_used(&co) == 0);
    MD_CHECK(strcmp(md_co_backend(), "none") != 0);
}

/* ---- nesting: a coroutine resumes another ---- */

typedef struct nest {
    md_co inner;
    co_log log;
    md_co *current_inner;
} nest;

static void inner_fn(md_co *co, void *arg) {
    nest *n = (nest *)arg;
    n->current_inner = md_co_current();
    log_add(&n->log, 'i');
    md_co_yield(co);
    log_add(&n->log, 'I');
}

static void outer_fn(md_co *co, void *arg) {
    nest *n = (nest *)arg;
    log_add(&n->log, 'o');
    if (md_co_resume(&n->inner) != MD_OK) return;
    log_add(&n->log, 'o');
    md_co_yield(co); /* back to the thread */
    log_add(&n->log, 'O');
    if (md_co_resume(&n->inner) != MD_OK) return;
    log_add(&n->log, 'O');
}

static void nested_coroutines(void) {
    static nest n;
    md_co outer;
    memset(&n, 0, sizeof n);
    MD_CHECK_OK(md_co_create(&n.inner, inner_fn, &n, 0));
    MD_CHECK_OK(md_co_create(&outer, outer_fn, &n, 0));
    MD_CHECK_OK(md_co_resume(&outer));
    MD_CHECK(strcmp(n.log.text, "oio") == 0);
    MD_CHECK(n.current_inner == &n.inner);
    MD_CHECK(md_co_status(&outer) == MD_CO_SUSPENDED && md_co_status(&n.inner) == MD_CO_SUSPENDED);
    MD_CHECK(md_co_current() == NULL);
    MD_CHECK_OK(md_co_resume(&outer));
    MD_CHECKF(strcmp(n.log.text, "oioOIO") == 0, "log '%s'", n.log.text);
    MD_CHECK(md_co_status(&outer) == MD_CO_DEAD && md_co_status(&n.inner) == MD_CO_DEAD);
    md_co_free(&outer);
    md_co_free(&n.inner);
}

/* The state of a coroutine that resumed another is MD_CO_NORMAL while that one runs, and a
 * coroutine that resumed another cannot be resumed by it. */
typedef struct pair_state {
    md_co a, b;
    md_co_state a_seen_by_b;
    md_status b_resumes_a;
} pair_state;

static void b_fn(md_co *co, void *arg) {
    pair_state *p = (pair_state *)arg;
    (void)co;
    p->a_seen_by_b = md_co_status(&p->a);
    p->b_resumes_a = md_co_resume(&p->a);
}

static void a_fn(md_co *co, void *arg) {
    pair_state *p = (pair_state *)arg;
    (void)co;
    md_co_resume(&p->b);
}

static void normal_state_and_no_cycles(void) {
    static pair_state p;
    memset(&p, 0, sizeof p);
    MD_CHECK_OK(md_co_create(&p.a, a_fn, &p, 0));
    MD_CHECK_OK(md_co_create(&p.b, b_fn, &p, 0));
    MD_CHECK_OK(md_co_resume(&p.a));
    MD_CHECK(p.a_seen_by_b == MD_CO_NORMAL);
    MD_CHECK(p.b_resumes_a == MD_ERR_INVALID_ARGUMENT);
    MD_CHECK(strstr(md_last_error(), "cannot resume itself or one that resumed it") != NULL);
    MD_CHECK(md_co_status(&p.a) == MD_CO_DEAD && md_co_status(&p.b) == MD_CO_DEAD);
    md_co_free(&p.a);
    md_co_free(&p.b);
}

/* ---- deep recursion within the stack, and the canary ---- */

typedef struct deep {
    int depth;
    long long sum;
} deep;

/* Each level keeps 256 written bytes in its frame, so depth d needs at least 256 d bytes. */
static long long recurse(int d, volatile unsigned char *parent) {
    volatile unsigned char pad[256];
    int i;
    long long s = 0;
    for (i = 0; i < 256; i++) pad[i] = (unsigned char)(d + i + (parent ? parent[i] : 0));
    if (d > 0) s = recurse(d - 1, pad);
    for (i = 0; i < 256; i += 64) s += pad[i];
    return s;
}

static void deep_fn(md_co *co, void *arg) {
    deep *p = (deep *)arg;
    p->sum = recurse(p->depth, NULL);
    md_co_yield(co);
    p->sum += recurse(p->depth, NULL); /* the same again after a switch */
}

static void deep_recursion_within_stack(void) {
    deep p;
    md_co co;
    long long ref;
    size_t used;
    const size_t stack = 2u * 1024u * 1024u;
    p.depth = 2000; /* >= 512 KiB of frames (AddressSanitizer's frames are larger; 2 MiB holds them) */
    ref = recurse(p.depth, NULL); /* on the thread's own stack */
    MD_CHECK_OK(md_co_create(&co, deep_fn, &p, stack));
    MD_CHECK_OK(md_co_resume(&co));
    MD_CHECK(p.sum == ref);
    used = md_co_stack_used(&co);
    /* AddressSanitizer may keep frames on its own "fake stacks" (use-after-return detection):
       then the coroutine's stack holds less than the frames' size */
    MD_CHECKF((used >= (size_t)p.depth * 256 || TEST_ASAN) && used > 0 && used < co.stack_size - MD_CO_CANARY,
              "used %zu of %zu", used, co.stack_size);
    MD_CHECK_OK(md_co_resume(&co));
    MD_CHECK(p.sum == 2 * ref);
    MD_CHECK(md_co_status(&co) == MD_CO_DEAD);
    md_co_free(&co);
}

static void smash(md_co *co, void *arg) {
    (void)arg;
    /* what an overflow does: write below the stack's usable part, over the canary */
    ((volatile unsigned char *)co->stack)[MD_CO_CANARY / 2] ^= 0xFF;
    md_co_yield(co);
}

static void canary_catches_overflow(void) {
    md_co co;
    MD_CHECK_OK(md_co_create(&co, smash, NULL, 0));
    MD_CHECK_ERROR(md_co_resume(&co), MD_ERR_RANGE, "stack overflow");
    MD_CHECK(md_co_status(&co) == MD_CO_DEAD); /* never run again */
    MD_CHECK_ERROR(md_co_resume(&co), MD_ERR_INVALID_ARGUMENT, "has finished");
    md_co_free(&co);
}

/* ---- registers and floating point survive the switches ---- */

typedef struct fp_work {
    double x;
    long long k;
    unsigned long long h;
} fp_work;

/* A chain whose every step depends on the last: kept in registers by the compiler, so a
 * register the switch failed to keep would change the result. */
static void fp_fn(md_co *co, void *arg) {
    fp_work *w = (fp_work *)arg;
    double x = w->x, y = 0.5, z = 0.25;
    unsigned long long h = 1469598103934665603ull;
    long long k;
    for (k = 0; k < 2000; k++) {
        x = x * 1.0000001 + y;
        y = y * 0.999 + z * 1e-3;
        z = z + x * 1e-9;
        h = (h ^ (unsigned long long)k) * 1099511628211ull;
        if (k % 7 == 0) md_co_yield(co);
    }
    w->x = x + y + z;
    w->h = h;
    w->k = k;
}

static void registers_survive_switches(void) {
    fp_work a, b, ref;
    md_co ca, cb;
    md_rng r;
    double mine = 1.0;
    int i;
    md_rng_seed(&r, 11);
    a.x = md_rng_uniform(&r);
    b.x = md_rng_uniform(&r);
    /* the reference: run the body without switching partners (a coroutine alone) */
    ref = a;
    MD_CHECK_OK(md_co_create(&ca, fp_fn, &ref, 0));
    while (md_co_status(&ca) == MD_CO_SUSPENDED) MD_CHECK_OK(md_co_resume(&ca));
    md_co_free(&ca);
    MD_CHECK_OK(md_co_create(&ca, fp_fn, &a, 0));
    MD_CHECK_OK(md_co_create(&cb, fp_fn, &b, 0));
    for (i = 0; md_co_status(&ca) == MD_CO_SUSPENDED || md_co_status(&cb) == MD_CO_SUSPENDED; i++) {
        if (md_co_status(&ca) == MD_CO_SUSPENDED) MD_CHECK_OK(md_co_resume(&ca));
        mine = mine * 1.5 - 0.25; /* the caller's own floating point between switches */
        if (md_co_status(&cb) == MD_CO_SUSPENDED) MD_CHECK_OK(md_co_resume(&cb));
        if (mine > 1e6) mine = 1.0;
    }
    MD_CHECK(a.k == 2000 && b.k == 2000);
    MD_CHECK(a.x == ref.x && a.h == ref.h); /* bitwise: the same operations in the same order */
    MD_CHECK(b.x != a.x);
    MD_CHECK(isfinite(mine));
    md_co_free(&ca);
    md_co_free(&cb);
}

/* ---- coroutines on two threads at once ---- */

#ifdef _OPENMP
typedef struct thread_run {
    int yields;
    int ok;
} thread_run;

static void count_fn(md_co *co, void *arg) {
    thread_run *t = (thread_run *)arg;
    int i;
    for (i = 0; i < 1000; i++) {
        if (md_co_current() != co) return;
        t->yields++;
        md_co_yield(co);
    }
}
#endif

static void coroutines_on_two_threads(void) {
#ifdef _OPENMP
    thread_run t[2];
    memset(t, 0, sizeof t);
#pragma omp parallel num_threads(2)
    {
        int me = omp_get_thread_num();
        md_co co[3];
        int i, ok = 1;
        thread_run local[3];
        memset(local, 0, sizeof local);
        for (i = 0; i < 3; i++) ok &= md_co_create(&co[i], count_fn, &local[i], 0) == MD_OK;
        while (ok && md_co_status(&co[2]) == MD_CO_SUSPENDED)
            for (i = 0; i < 3; i++) {
                ok &= md_co_resume(&co[i]) == MD_OK;
                ok &= md_co_current() == NULL;
            }
        for (i = 0; i < 3; i++) {
            ok &= local[i].yields == 1000;
            md_co_free(&co[i]);
        }
        if (me < 2) {
            t[me].ok = ok;
            t[me].yields = local[0].yields + local[1].yields + local[2].yields;
        }
    }
    if (omp_get_max_threads() < 2) MD_SKIP("OpenMP gives one thread");
    MD_CHECK(t[0].ok && t[1].ok);
    MD_CHECK(t[0].yields == 3000 && t[1].yields == 3000);
#else
    MD_SKIP("built without OpenMP (-fopenmp)");
#endif
}

int main(void) {
    printf("context switch: %s\n", md_co_backend());
    MD_RUN(ping_pong_order);
    MD_RUN(many_coroutines_round_robin);
    MD_RUN(finishing_and_states);
    MD_RUN(errors_leave_outputs_alone);
    MD_RUN(nested_coroutines);
    MD_RUN(normal_state_and_no_cycles);
    MD_RUN(deep_recursion_within_stack);
    MD_RUN(canary_catches_overflow);
    MD_RUN(registers_survive_switches);
    MD_RUN(coroutines_on_two_threads);
    return md_test_summary();
}
