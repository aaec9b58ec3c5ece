/* Chapter 09: CUDA graphs of the MD step. The same molecular-dynamics step, launched five ways:
 *
 *   stream    every kernel launched on the run's streams, as chapter 08's md_cuda_sim_enqueue
 *             leaves them
 *   capture   the step captured into a graph (cudaStreamBeginCapture / EndCapture) and
 *             instantiated; captured and instantiated anew whenever the kind of step changes
 *   dynamic   captured once per kind before the run, one executable graph per topology; kinds
 *             that share a topology share the executable, and at a change between them the
 *             kernel nodes that differ get their parameters (cudaGraphExecKernelNodeSetParams);
 *             no capture and no instantiation during the run
 *   compare   captured anew whenever the kind of step changes, like capture, but compared with
 *             the last graph of that kind through the comparator registry: identical (launch as
 *             it is), updatable (cudaGraphExecUpdate) or instantiated anew; re-instantiations
 *             avoided are counted
 *   loop      one graph per energy-output interval: the sort step, a WHILE node that runs the
 *             plain steps on the device (its body: a plain step captured before, as a child
 *             graph, --unroll times in a row), the energy step: one host launch per interval
 *
 * In every step the list build is two kernels gated on the device (they return at once unless
 * the rebuild word is set). With --if-node the captured steps make it an IF node decided on the
 * device instead (md_cuda_nb_opts::if_node_build, md_cuda_graph_run_if), which skips the two
 * kernels on the steps that build nothing and measured slower (tutorial 09, section 6); the loop
 * rung's child-graph step keeps the kernels either way, since a child graph may hold no
 * conditional node.
 *
 * The step: chapter 08's GPU-resident step (md_cuda_sim: one integrate kernel with SETTLE and
 * the Langevin thermostat, the cluster-pair nonbonded plan with its device-gated list rebuild,
 * PME on a second stream) on TIP3P water boxes of 1,350, 7,856 and 31,922 molecules (4,050,
 * 23,568 and 95,766 atoms; the latter two chapter 06's 6.2 and 9.9 nm boxes), 2 fs, Langevin
 * 300 K at 1/ps, PME tolerance 5e-4, cutoff 0.9 nm. Only the section "the step" below knows it.
 *
 * An interval is K steps (--interval K, default 100): step 0 sorts the atoms (kind sort), steps
 * 1 .. K-2 compute forces only (plain), step K-1 also energies (energy); after it the host
 * polls the energies, the one synchronisation per interval in every rung.
 *
 * Every rung's run begins with --settle S intervals (default 10: 2 ps) on the stream, the same in
 * every rung (settle_run: the built box settles, and the nonbonded plan's poll sizes its pair
 * kernel's grid before anything is captured), then one warm-up interval of the rung.
 * Measured per rung, over --intervals N intervals after the warm-up interval:
 *   steps/s         steps / wall time of the run (host launches, GPU work and the polls)
 *   host us/step    CPU time of the launching thread (clock_gettime(CLOCK_THREAD_CPUTIME_ID))
 *                   around the host's launch work, the polls excluded; the device is set to
 *                   cudaDeviceScheduleBlockingSync, so a wait sleeps instead of spinning
 *   GPU us/step, idle us/step
 *                   from a second run of two intervals with a GPU timestamp
 *                   (md_cuda_timestamp_enqueue: %globaltimer) at the start and the end of every
 *                   step, in stream order and inside the graphs alike: the span of a step
 *                   (its kernels and the gaps between them) and the GPU's idle gap between one
 *                   step's end and the next one's start. The stamps cost two launches per step
 *                   on a stream, so that run is not the timed one.
 * Checked: every rung's trajectory (positions, velocities) and every interval's energies are
 * bitwise those of the stream rung (64-bit fixed-point forces make the sums order-free), and it
 * built the neighbour list as many times (the list builds printed are the timed intervals').
 *
 *   build/chapters/09_cuda_graphs [--quick] [--json FILE] [--intervals N] [--interval K] [--settle S]
 *                                 [--sizes A,B,C] [--results FILE.csv] [--timeline FILE.csv] [--unroll U]
 *                                 [--if-node]
 *   --sizes      water molecules of the systems (default 1350,7856,31922)
 *   --results    one CSV line per rung and system with every number of the tables
 *   --timeline   the host's launch calls and the GPU's step spans of the stamped run (rungs
 *                stream and loop) for tutorials/scripts/plot_graph_timeline.py
 *   --unroll     plain steps per pass of the loop rung's WHILE node (default 4)
 *   --if-node    the list build of the captured steps as an IF node
 *   --settle     intervals on the stream before every rung's run (default 10; 0: none, the rungs
 *                that capture before the run then capture the pair kernel's grid for the list's
 *                capacity)
 * --quick: the 4,050-atom system, K = 20, 2 intervals after 1 settling one, every rung checked. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "exercise.cu"
#include "ladder.h"

static int if_node; /* --if-node: md_cuda_nb_opts::if_node_build in every captured step but the loop rung's body */
#include <time.h>

#define NRUNG 5
static const char *const rung_name[NRUNG] = {"stream", "capture", "dynamic", "compare", "loop"};
enum { R_STREAM, R_CAPTURE, R_DYNAMIC, R_COMPARE, R_LOOP };

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ======================================================================== */
/* the step: chapter 08's GPU-resident step                                 */
/* ======================================================================== */

enum { KIND_SORT, KIND_PLAIN, KIND_ENERGY, NKIND };

typedef struct sim {
    md_cuda_sim g;
    int kind;              /* the kind of step sim_step enqueues */
    cudaStream_t body;     /* the loop rung's WHILE body is captured on it */
    /* the stamped run */
    int stamp;             /* 1: a timestamp before and after every step */
    unsigned long long *d_times;
    long long *d_next;
    long long cap;
} sim;

/* The kind of step j of an interval of K steps. */
static int kind_of(int j, int K) { return j == 0 ? KIND_SORT : j == K - 1 ? KIND_ENERGY : KIND_PLAIN; }

/* One step of kind m->kind on the run's stream (s must be it: md_cuda_sim_enqueue launches on
 * the state's stream and forks PME onto its own). The run sorts when its count of steps since
 * the last sort reaches the sort interval: the count is set so that exactly the sort steps sort. */
static md_status sim_step(void *ctx, cudaStream_t s) {
    sim *m = (sim *)ctx;
    md_status st;
    if (s != m->g.state.q.stream)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "sim_step", 0, "s", "is not the run's stream");
    m->g.since_sort = m->kind == KIND_SORT ? m->g.nb.opts.sort_interval - 1 : -(1LL << 40);
    if (m->stamp && (st = md_cuda_timestamp_enqueue(s, m->d_times, m->d_next, m->cap)) != MD_OK) return st;
    if ((st = md_cuda_sim_enqueue(&m->g, 1, m->kind == KIND_ENERGY ? MD_CUDA_SIM_ENERGY : 0u)) != MD_OK) return st;
    if (m->stamp && (st = md_cuda_timestamp_enqueue(s, m->d_times, m->d_next, m->cap)) != MD_OK) return st;
    return MD_OK;
}

/* The poll at the end of an interval: the energies of its last step (an energy step, also when
 * a graph enqueued it), the device's flags; the list builds so far in *rebuilds. */
static md_status sim_poll(sim *m, md_energy *e, long long *rebuilds) {
    md_status st;
    m->g.energy_valid = 1;
    if ((st = md_cuda_sim_poll(&m->g, e, NULL)) != MD_OK) return st;
    if (rebuilds) *rebuilds = m->g.nb.stats.rebuilds;
    return MD_OK;
}

static void sim_free(sim *m) {
    md_cuda_sim_destroy(&m->g);
    if (m->body) (void)cudaStreamDestroy(m->body);
    md_cuda_free(m->d_times);
    md_cuda_free(m->d_next);
    memset(m, 0, sizeof *m);
}

/* A run of the system (Langevin 300 K at 1/ps, 2 fs, PME; the nonbonded plan sorts every K
 * steps) and the stamp buffer (cap stamps). */
static md_status sim_make(sim *m, const md_system *sys, const md_topology *top, const md_lj_table *lj, int K, long long cap) {
    md_sim_desc d;
    md_cuda_sim_opts o;
    md_status st;
    memset(m, 0, sizeof *m);
    memset(&d, 0, sizeof d);
    memset(&o, 0, sizeof o);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.seed = LADDER_SEED;
    o.nb.sort_interval = K;
    o.nb.if_node_build = if_node;
    m->kind = KIND_PLAIN;
    m->cap = cap;
    MD_CUDA_TRY(cudaStreamCreateWithFlags(&m->body, cudaStreamNonBlocking));
    if ((st = md_cuda_sim_create(&m->g, sys, top, lj, &d, &o)) != MD_OK ||
        (st = md_cuda_alloc((void **)&m->d_times, (size_t)(cap > 0 ? cap : 1), sizeof(unsigned long long), "stamps")) != MD_OK ||
        (st = md_cuda_alloc((void **)&m->d_next, 1, sizeof(long long), "stamp count")) != MD_OK)
        return st;
    return MD_OK;
}

/* The positions and velocities of the run (3 n doubles each), for the bitwise comparison. */
static md_status sim_download(sim *m, double *x, double *v) { return md_cuda_sim_download(&m->g, x, v, NULL); }

/* The system: a TIP3P box of `molecules` (the benchmark boxes at their edges, others at the
 * density), velocities from the builder. */
static md_status sim_system(int molecules, md_system *sys, md_topology *top, md_lj_table *lj) {
    md_water_desc w;
    memset(&w, 0, sizeof w);
    w.molecules = molecules;
    w.edge = molecules == 7856 ? 6.2 : molecules == 31922 ? 9.9 : 0.0;
    w.seed = LADDER_SEED;
    return md_build_water_box(sys, top, lj, &w);
}

/* ======================================================================== */
/* the rungs                                                                */
/* ======================================================================== */

typedef struct host_span {
    double t0, t1; /* monotonic seconds */
    int step;      /* first step of the call */
} host_span;

typedef struct runner {
    int rung, K;
    sim *m;
    md_cuda_graph_cache cache[NKIND]; /* capture: [0], one graph; compare: one per kind */
    int cur;                          /* capture: the kind cache[0] holds; compare: the kind of the last step (-1: none) */
    cudaGraph_t g[NKIND];             /* dynamic: one capture of each kind; loop: [KIND_PLAIN], the WHILE body */
    int owner[NKIND];                 /* dynamic: the kind whose executable a kind runs on */
    int holds[NKIND];                 /* dynamic: the kind an owner's executable holds the parameters of */
    cudaGraphExec_t exec[NKIND];      /* dynamic: the executables, by owner */
    cudaGraphNode_t in_a[NKIND][16];  /* dynamic: kind k's differing nodes in its owner's graph ... */
    cudaGraphNode_t in_b[NKIND][16];  /* ... and in its own graph */
    int ndiff[NKIND];                 /* dynamic: their number */
    int nexec;                        /* dynamic: executables made */
    long long set_calls;              /* dynamic: md_cuda_graph_exec_set_kernels calls */
    long long *d_count;               /* loop: passes of the WHILE node */
    md_cuda_graph_cache loop;         /* loop: the interval graph */
    host_span *spans;                 /* stamped run: the host's launch calls */
    int nspans, cap_spans;
} runner;

static void runner_free(runner *r) {
    int k;
    for (k = 0; k < NKIND; k++) {
        md_cuda_graph_cache_destroy(&r->cache[k]);
        if (r->g[k]) (void)cudaGraphDestroy(r->g[k]);
        if (r->exec[k]) (void)cudaGraphExecDestroy(r->exec[k]);
    }
    md_cuda_graph_cache_destroy(&r->loop);
    md_cuda_free(r->d_count);
    md_free(r->spans);
    memset(r, 0, sizeof *r);
}

/* --unroll U: plain steps per pass of the loop rung's WHILE node. A pass costs the GPU a small
 * kernel (the count and the flags) and the node's relaunch of its body: measured side by side
 * (H200, 2026-11-28, two rounds, idle GPU time between steps at 4,050 / 23,568 / 95,766 atoms)
 * 6.0 / 6.0 / 6.4 us with one step a pass, 3.6 / 3.6 / 4.2 with two, 2.4 / 2.4 / 2.9 with four;
 * loop over stream 0.97x -> 1.03x at 4,050 atoms (tutorial 09, section 6). */
static int loop_unroll = 4;

/* The loop rung's WHILE body: the plain step captured before (with the streams it forks to), as
 * a child graph, loop_unroll times in a row. */
static md_status loop_body(void *ctx, cudaStream_t s) {
    md_status st = MD_OK;
    int u;
    for (u = 0; u < loop_unroll && st == MD_OK; u++) st = md_cuda_graph_add_child(s, ((runner *)ctx)->g[KIND_PLAIN], NULL);
    return st;
}

/* The loop rung's interval: the sort step, the K - 2 plain steps as (K - 2) / U passes of a WHILE
 * node of U steps each (a raised flag of a step ends it after that pass; the poll then reports
 * the flag) and the remaining (K - 2) mod U as child graphs after it, the energy step. */
static md_status loop_interval(void *ctx, cudaStream_t s) {
    runner *r = (runner *)ctx;
    sim *m = r->m;
    md_status st;
    int u;
    m->kind = KIND_SORT;
    if ((st = sim_step(m, s)) != MD_OK ||
        (st = md_cuda_graph_loop(s, m->body, r->d_count, (r->K - 2) / loop_unroll, m->g.step.d_flags, loop_body, r)) !=
            MD_OK)
        return st;
    for (u = 0; u < (r->K - 2) % loop_unroll; u++)
        if ((st = md_cuda_graph_add_child(s, r->g[KIND_PLAIN], NULL)) != MD_OK) return st;
    m->kind = KIND_ENERGY;
    return sim_step(m, s);
}

/* What a rung prepares before its run. dynamic: one capture per kind; a kind whose graph has the
 * topology of an earlier kind's runs on that kind's executable, with the kernel nodes that differ
 * (md_cuda_graph_kernel_diff); the others get executables of their own. loop: the plain step's
 * graph, then the interval graph around it. */
static md_status runner_setup(runner *r, sim *m, int rung, int K) {
    const cudaStream_t s = m->g.state.q.stream;
    md_status st;
    int k, j;
    memset(r, 0, sizeof *r);
    r->rung = rung;
    r->K = K;
    r->m = m;
    r->cur = -1;
    for (k = 0; k < NKIND; k++)
        r->cache[k].policy = rung == R_CAPTURE ? MD_CUDA_GRAPH_POLICY_REINSTANTIATE : MD_CUDA_GRAPH_POLICY_COMPARE;
    r->cap_spans = 4 * K + 8;
    if (!(r->spans = (host_span *)md_alloc_array((size_t)r->cap_spans, sizeof *r->spans))) return MD_ERR_OUT_OF_MEMORY;
    if (rung == R_DYNAMIC) {
        for (k = 0; k < NKIND; k++) {
            m->kind = k;
            if ((st = md_cuda_graph_capture(s, sim_step, m, &r->g[k])) != MD_OK) return st;
            r->owner[k] = k;
            for (j = 0; j < k; j++)
                if (r->owner[j] == j && md_cuda_graph_kernel_diff(r->g[j], r->g[k], r->in_a[k], r->in_b[k], 16, &r->ndiff[k]) == MD_OK) {
                    r->owner[k] = j; /* the same topology: kind k runs on kind j's executable */
                    break;
                }
            md_clear_error();
            if (r->owner[k] == k) {
                if ((st = md_cuda_graph_instantiate(r->g[k], s, &r->exec[k])) != MD_OK) return st;
                r->holds[k] = k;
                r->nexec++;
            }
        }
    }
    if (rung == R_LOOP) {
        m->kind = KIND_PLAIN;
        m->g.nb.opts.if_node_build = 0; /* the WHILE body's child graph may hold no IF node */
        st = md_cuda_alloc((void **)&r->d_count, 1, sizeof(long long), "loop count");
        if (st == MD_OK) st = md_cuda_graph_capture(s, sim_step, m, &r->g[KIND_PLAIN]);
        m->g.nb.opts.if_node_build = if_node;
        if (st != MD_OK || (st = md_cuda_graph_cache_capture(&r->loop, s, loop_interval, r)) != MD_OK) return st;
    }
    return MD_OK;
}

/* dynamic: make the executable of owner o hold kind k's parameters: undo the kind it holds (its
 * nodes back to the owner's own graph's), then set kind k's. */
static md_status dynamic_switch(runner *r, int o, int k) {
    const int h = r->holds[o];
    md_status st;
    if (h == k) return MD_OK;
    if (h != o) {
        if ((st = md_cuda_graph_exec_set_kernels(r->exec[o], r->in_a[h], r->in_a[h], r->ndiff[h])) != MD_OK) return st;
        r->set_calls++;
    }
    if (k != o) {
        if ((st = md_cuda_graph_exec_set_kernels(r->exec[o], r->in_a[k], r->in_b[k], r->ndiff[k])) != MD_OK) return st;
        r->set_calls++;
    }
    r->holds[o] = k;
    return MD_OK;
}

/* Step j of the interval as rung r launches it (the host's work only; nothing waits). */
static md_status runner_step(runner *r, int j) {
    sim *m = r->m;
    const cudaStream_t s = m->g.state.q.stream;
    const int kind = kind_of(j, r->K);
    md_status st;
    switch (r->rung) {
    case R_STREAM:
        m->kind = kind;
        return sim_step(m, s);
    case R_CAPTURE:
    case R_COMPARE: {
        const int c = r->rung == R_COMPARE ? kind : 0; /* compare: the last graph of the same kind */
        if (r->cur != kind) {
            m->kind = kind;
            if ((st = md_cuda_graph_cache_capture(&r->cache[c], s, sim_step, m)) != MD_OK) return st;
            r->cur = kind;
        }
        return md_cuda_graph_cache_launch(&r->cache[c], s);
    }
    case R_DYNAMIC: {
        const int o = r->owner[kind];
        if ((st = dynamic_switch(r, o, kind)) != MD_OK) return st;
        MD_CUDA_TRY(cudaGraphLaunch(r->exec[o], s));
        return MD_OK;
    }
    case R_LOOP:
        return j == 0 ? md_cuda_graph_cache_launch(&r->loop, s) : MD_OK; /* the whole interval at once */
    }
    return MD_OK;
}

/* One interval: its K steps' launches (their CPU time added to *cpu_s, each call logged when
 * log is set), then the poll. */
static md_status runner_interval(runner *r, md_energy *e, long long *rebuilds, double *cpu_s, int log) {
    const double c0 = thread_cpu_s();
    md_status st;
    int j;
    for (j = 0; j < r->K; j++) {
        const double t0 = log ? mono_s() : 0.0;
        if ((st = runner_step(r, j)) != MD_OK) return st;
        if (log && (r->rung != R_LOOP || j == 0) && r->nspans < r->cap_spans) {
            r->spans[r->nspans].t0 = t0;
            r->spans[r->nspans].t1 = mono_s();
            r->spans[r->nspans].step = j;
            r->nspans++;
        }
    }
    *cpu_s += thread_cpu_s() - c0;
    return sim_poll(r->m, e, rebuilds);
}

/* The counters of a runner's caches, summed. */
static void runner_counts(const runner *r, long long c[5]) {
    int k;
    memset(c, 0, 5 * sizeof c[0]);
    for (k = 0; k < NKIND; k++) {
        c[0] += r->cache[k].captures;
        c[1] += r->cache[k].instantiations;
        c[2] += r->cache[k].updates;
        c[3] += r->cache[k].identical;
        c[4] += r->cache[k].refused;
    }
}

/* ======================================================================== */
/* one system, every rung                                                   */
/* ======================================================================== */

typedef struct rung_result {
    int ran, bitwise;
    double wall_s, cpu_s, steps;
    double gpu_step_us, gpu_gap_us, busy;
    long long captures, instantiations, updates, identical, refused, set_calls, executables;
    long long rebuilds; /* neighbour-list builds on the device over the whole run (the poll's count) */
} rung_result;

typedef struct trajectory {
    double *x, *v;     /* positions and velocities after the run, 3 n each */
    md_energy *e;      /* the energies of every interval */
} trajectory;

typedef struct run_opts {
    int K, intervals;
    int settle; /* --settle N: intervals on the stream before every rung's run (settle_run) */
    FILE *timeline;
    int natoms;
} run_opts;

/* The first n intervals of every rung's run, on the stream path whatever the rung: they let the
 * built box settle (its lattice relaxes, and the thermostat takes away the heat, so the list is
 * rebuilt at the rate of a box in equilibrium, not of one just built), and their polls size the
 * pair kernel's grid by the last list build (md_cuda_nb_plan::grid_items) before a rung captures
 * anything: a graph keeps the launch shape it was captured with, and one captured before any poll
 * would launch a grid for the list's capacity. Every rung runs the same n intervals, so their
 * trajectories stay bitwise comparable. */
static md_status settle_run(sim *m, int K, int n) {
    runner r;
    md_energy e;
    double cpu = 0.0;
    md_status st = MD_OK;
    int i;
    memset(&r, 0, sizeof r);
    r.rung = R_STREAM;
    r.K = K;
    r.m = m;
    r.cur = -1;
    for (i = 0; i < n && st == MD_OK; i++) st = runner_interval(&r, &e, NULL, &cpu, 0);
    return st;
}

/* The timed run of rung `rung`: a fresh run, o->settle intervals on the stream (settle_run), one
 * warm-up interval of the rung, `intervals` timed ones; res->rebuilds counts the timed ones' list
 * builds. */
static md_status timed_run(const md_system *sys, const md_topology *top, const md_lj_table *lj, int rung,
                           const run_opts *o, rung_result *res, trajectory *tr) {
    sim m;
    runner r;
    double cpu = 0.0, t0;
    long long c0[5], c1[5], d0, b0 = 0;
    md_status st;
    int i;
    memset(&r, 0, sizeof r);
    if ((st = sim_make(&m, sys, top, lj, o->K, 0)) != MD_OK || (st = settle_run(&m, o->K, o->settle)) != MD_OK ||
        (st = runner_setup(&r, &m, rung, o->K)) != MD_OK ||
        (st = runner_interval(&r, &tr->e[0], &b0, &cpu, 0)) != MD_OK) /* warm-up */
        goto done;
    cpu = 0.0;
    runner_counts(&r, c0);
    d0 = r.set_calls;
    t0 = mono_s();
    for (i = 1; i <= o->intervals; i++)
        if ((st = runner_interval(&r, &tr->e[i], &res->rebuilds, &cpu, 0)) != MD_OK) goto done;
    res->wall_s = mono_s() - t0;
    res->rebuilds -= b0;
    runner_counts(&r, c1);
    res->captures = c1[0] - c0[0];
    res->instantiations = c1[1] - c0[1];
    res->updates = c1[2] - c0[2];
    res->identical = c1[3] - c0[3];
    res->refused = c1[4] - c0[4];
    res->set_calls = r.set_calls - d0;
    res->executables = rung == R_DYNAMIC ? r.nexec : rung == R_STREAM ? 0 : rung == R_LOOP ? 1 : -1;
    res->cpu_s = cpu;
    res->steps = (double)o->intervals * o->K;
    if ((st = sim_download(&m, tr->x, tr->v)) != MD_OK) goto done;
    res->ran = 1;
done:
    runner_free(&r);
    sim_free(&m);
    return st;
}

/* The stamped run: after the same o->settle intervals as the timed run (without stamps), two
 * intervals with a timestamp before and after every step; the second is measured. GPU stamps
 * are put on the host's clock by a stamp enqueued on the idle GPU just after a host reading
 * (they lag it by that stamp's launch latency, a few microseconds). */
static md_status stamped_run(const md_system *sys, const md_topology *top, const md_lj_table *lj, int rung,
                             const run_opts *o, rung_result *res) {
    const long long cap = 2 * (long long)o->K + 2;
    sim m;
    runner r;
    md_energy e;
    unsigned long long *h = NULL;
    double cpu = 0.0, h0, span = 0.0, gap = 0.0;
    md_status st;
    int j;
    cudaError_t ce;
    memset(&r, 0, sizeof r);
    if ((st = sim_make(&m, sys, top, lj, o->K, cap)) != MD_OK || (st = settle_run(&m, o->K, o->settle)) != MD_OK) goto done;
    m.stamp = 1;
    if ((st = runner_setup(&r, &m, rung, o->K)) != MD_OK || (st = runner_interval(&r, &e, NULL, &cpu, 0)) != MD_OK) goto done;
    if (!(h = (unsigned long long *)md_alloc_array((size_t)cap, sizeof *h))) {
        st = MD_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* stamp 0: the alignment stamp, on the idle GPU */
    if ((ce = cudaMemsetAsync(m.d_next, 0, sizeof(long long), m.g.state.q.stream)) != cudaSuccess ||
        (ce = cudaStreamSynchronize(m.g.state.q.stream)) != cudaSuccess) {
        st = md_cuda_error(ce, "stamp reset", __FILE__, __LINE__);
        goto done;
    }
    h0 = mono_s();
    if ((st = md_cuda_timestamp_enqueue(m.g.state.q.stream, m.d_times, m.d_next, cap)) != MD_OK) goto done;
    r.nspans = 0;
    if ((st = runner_interval(&r, &e, NULL, &cpu, 1)) != MD_OK) goto done;
    if ((ce = cudaMemcpy(h, m.d_times, (size_t)cap * sizeof *h, cudaMemcpyDeviceToHost)) != cudaSuccess) {
        st = md_cuda_error(ce, "cudaMemcpy(stamps)", __FILE__, __LINE__);
        goto done;
    }
    for (j = 0; j < o->K; j++) {
        span += (double)(h[2 + 2 * j] - h[1 + 2 * j]);
        if (j + 1 < o->K) gap += (double)(h[1 + 2 * (j + 1)] - h[2 + 2 * j]);
    }
    res->gpu_step_us = 1e-3 * span / o->K;
    res->gpu_gap_us = 1e-3 * gap / (o->K - 1);
    res->busy = span / (double)(h[2 * o->K] - h[1]);
    if (o->timeline && (rung == R_STREAM || rung == R_LOOP)) { /* microseconds after the alignment stamp */
        for (j = 0; j < r.nspans; j++)
            fprintf(o->timeline, "%d,%s,host,%.3f,%.3f,%d\n", o->natoms, rung_name[rung], 1e6 * (r.spans[j].t0 - h0),
                    1e6 * (r.spans[j].t1 - h0), r.spans[j].step);
        for (j = 0; j < o->K; j++)
            fprintf(o->timeline, "%d,%s,gpu,%.3f,%.3f,%d\n", o->natoms, rung_name[rung], 1e-3 * (double)(h[1 + 2 * j] - h[0]),
                    1e-3 * (double)(h[2 + 2 * j] - h[0]), j);
    }
done:
    md_free(h);
    runner_free(&r);
    sim_free(&m);
    return st;
}

/* 1 if two runs left bitwise the same positions, velocities and energies. */
static int same_trajectory(const trajectory *a, const trajectory *b, int n, int nint) {
    return memcmp(a->x, b->x, 3 * (size_t)n * sizeof *a->x) == 0 && memcmp(a->v, b->v, 3 * (size_t)n * sizeof *a->v) == 0 &&
           memcmp(a->e, b->e, (size_t)nint * sizeof *a->e) == 0;
}

static int run_system(const ladder_opts *lo, int molecules, const run_opts *ro_in, const char *device, FILE *results) {
    md_system sys;
    md_topology top;
    md_lj_table lj;
    run_opts ro = *ro_in;
    trajectory tr[NRUNG];
    rung_result res[NRUNG];
    ladder l;
    char title[256];
    int k;
    const int nint = ro.intervals + 1;
    memset(tr, 0, sizeof tr);
    memset(res, 0, sizeof res);
    if (sim_system(molecules, &sys, &top, &lj) != MD_OK) {
        printf("FAIL system: %s\n", md_last_error());
        return 1;
    }
    ro.natoms = sys.n;
    snprintf(title, sizeof title,
             "\nChapter 09: chapter 08's step on %d TIP3P molecules (%d atoms, %.3f nm box), %d steps per interval "
             "(sort, %d plain, energy), %d timed intervals",
             molecules, sys.n, sys.box[0], ro.K, ro.K - 2, ro.intervals);
    ladder_begin(&l, lo, "09_cuda_graphs", title, "steps/s", "atoms", device);
    for (k = 0; k < NRUNG; k++) {
        double err;
        int ok;
        if (!ladder_selected(&l, rung_name[k]) && k != R_STREAM) continue;
        if (!(tr[k].x = (double *)md_alloc_array(3 * (size_t)sys.n, sizeof(double))) ||
            !(tr[k].v = (double *)md_alloc_array(3 * (size_t)sys.n, sizeof(double))) ||
            !(tr[k].e = (md_energy *)md_alloc_array((size_t)nint, sizeof *tr[k].e))) {
            ladder_row_error(&l, rung_name[k], md_last_error());
            continue;
        }
        memset(tr[k].e, 0xFF, (size_t)nint * sizeof *tr[k].e); /* poisoned: NaN energies fail the comparison */
        if (timed_run(&sys, &top, &lj, k, &ro, &res[k], &tr[k]) != MD_OK ||
            stamped_run(&sys, &top, &lj, k, &ro, &res[k]) != MD_OK) {
            ladder_row_error(&l, rung_name[k], md_last_error());
            res[k].ran = 0;
            continue;
        }
        res[k].bitwise = k == R_STREAM || (res[R_STREAM].ran && same_trajectory(&tr[k], &tr[R_STREAM], sys.n, nint) &&
                                           res[k].rebuilds == res[R_STREAM].rebuilds);
        err = k == R_STREAM ? NAN : (res[k].bitwise ? 0.0 : INFINITY);
        ok = ladder_row(&l, rung_name[k], sys.n, res[k].wall_s / res[k].steps, 1.0, NAN, err, 0.0);
        printf("    host %.2f us/step | GPU %.2f us/step, idle %.2f us between steps (%.0f%% busy) | %lld list builds\n",
               1e6 * res[k].cpu_s / res[k].steps, res[k].gpu_step_us, res[k].gpu_gap_us, 100.0 * res[k].busy,
               res[k].rebuilds);
        if (k == R_CAPTURE || k == R_COMPARE)
            printf("    %lld captures: %lld instantiated, %lld updated, %lld identical (re-instantiations avoided: %lld; "
                   "%lld refused by cudaGraphExecUpdate)\n",
                   res[k].captures, res[k].instantiations, res[k].updates, res[k].identical,
                   res[k].updates + res[k].identical, res[k].refused);
        if (k == R_DYNAMIC)
            printf("    %lld executables for the %d kinds of step, %lld parameter sets, no capture in the run\n",
                   res[k].executables, NKIND, res[k].set_calls);
        if (!ok && !res[k].bitwise)
            printf("    FAIL %s: trajectory, energies or list builds (%lld, stream %lld) differ from the stream rung's\n",
                   rung_name[k], res[k].rebuilds, res[R_STREAM].rebuilds);
        if (results)
            fprintf(results, "%d,%s,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.4f,%lld,%lld,%lld,%lld,%lld,%lld,%d\n", sys.n, rung_name[k],
                    ro.K, res[k].steps / res[k].wall_s, 1e6 * res[k].wall_s / res[k].steps,
                    1e6 * res[k].cpu_s / res[k].steps, res[k].gpu_step_us, res[k].gpu_gap_us, res[k].busy, res[k].captures,
                    res[k].instantiations, res[k].updates, res[k].identical, res[k].set_calls, res[k].rebuilds,
                    res[k].bitwise);
    }
    if (res[R_STREAM].ran && res[R_LOOP].ran)
        printf("    loop over stream: %.2fx the steps/s, %.1f -> %.2f host us/step\n",
               res[R_STREAM].wall_s / res[R_LOOP].wall_s, 1e6 * res[R_STREAM].cpu_s / res[R_STREAM].steps,
               1e6 * res[R_LOOP].cpu_s / res[R_LOOP].steps);
    for (k = 0; k < NRUNG; k++) {
        md_free(tr[k].x);
        md_free(tr[k].v);
        md_free(tr[k].e);
    }
    md_system_free(&sys);
    md_topology_free(&top);
    md_lj_table_free(&lj);
    return ladder_end(&l);
}

/* ======================================================================== */
/* the exercise: a kernel in the comparator registry                        */
/* ======================================================================== */

typedef struct ex_ctx {
    float4 *d_vel;
    int n;
    float lambda;
} ex_ctx;

static md_status ex_capture(void *ctx, cudaStream_t s) {
    const ex_ctx *c = (const ex_ctx *)ctx;
    return exercise_enqueue(c->d_vel, c->n, c->lambda, s);
}

/* lambda of step k: around 1, a new value every step (exact in float: k / 2^20). */
static float ex_lambda(int k) { return 1.0f + (float)((k * 37) % 64 - 32) * (1.0f / 1048576.0f); }

/* 200 steps of the thermostat, each captured and given to a cache (policy COMPARE), n one less
 * from step 100 on; checked bitwise against the host. */
static int run_exercise(const ladder_opts *lo, const char *device) {
    const int n = 4000, steps = 200;
    md_cuda_graph_cache c;
    ex_ctx x;
    cudaStream_t s = NULL;
    float4 *h = NULL, *ref = NULL;
    ladder l;
    double t0, wall;
    md_rng rng;
    md_status st = MD_OK;
    int k, i, bad = 0;
    memset(&c, 0, sizeof c);
    memset(&x, 0, sizeof x);
    ladder_begin(&l, lo, "09_cuda_graphs", "\nChapter 09, exercise: a thermostat kernel whose lambda changes every step, "
                 "captured every step (4,000 velocities, 200 steps)", "steps/s", "atoms", device);
    if (!(h = (float4 *)md_alloc_array((size_t)n, sizeof *h)) || !(ref = (float4 *)md_alloc_array((size_t)n, sizeof *ref))) {
        ladder_row_error(&l, "exercise", md_last_error());
        goto out;
    }
    md_rng_seed(&rng, LADDER_SEED);
    for (i = 0; i < n; i++) {
        ref[i].x = (float)(md_rng_uniform(&rng) - 0.5);
        ref[i].y = (float)(md_rng_uniform(&rng) - 0.5);
        ref[i].z = (float)(md_rng_uniform(&rng) - 0.5);
        ref[i].w = 0.025f;
    }
    x.n = n;
    if ((st = exercise_register()) != MD_OK || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        (st = md_cuda_alloc((void **)&x.d_vel, (size_t)n, sizeof(float4), "velocities")) != MD_OK ||
        cudaMemcpy(x.d_vel, ref, (size_t)n * sizeof(float4), cudaMemcpyHostToDevice) != cudaSuccess) {
        ladder_row_error(&l, "exercise", st != MD_OK ? md_last_error() : "CUDA set-up failed");
        goto out;
    }
    t0 = mono_s();
    for (k = 0; k < steps && st == MD_OK; k++) {
        x.lambda = ex_lambda(k);
        x.n = k < steps / 2 ? n : n - 1;
        if ((st = md_cuda_graph_cache_capture(&c, s, ex_capture, &x)) == MD_OK) st = md_cuda_graph_cache_launch(&c, s);
    }
    if (st == MD_OK && cudaStreamSynchronize(s) != cudaSuccess) st = MD_ERR_CUDA;
    wall = mono_s() - t0;
    if (st != MD_OK || cudaMemcpy(h, x.d_vel, (size_t)n * sizeof(float4), cudaMemcpyDeviceToHost) != cudaSuccess) {
        ladder_row_error(&l, "exercise", md_last_error());
        goto out;
    }
    for (k = 0; k < steps; k++) {
        const float lam = ex_lambda(k);
        const int m = k < steps / 2 ? n : n - 1;
        for (i = 0; i < m; i++) {
            ref[i].x = ref[i].x * lam;
            ref[i].y = ref[i].y * lam;
            ref[i].z = ref[i].z * lam;
        }
    }
    for (i = 0; i < n; i++) bad += memcmp(&h[i], &ref[i], sizeof h[i]) != 0;
    snprintf(l.note, sizeof l.note, "%lld captures: %lld instantiated anew, %lld updated, %lld identical; last verdict: %.60s",
             c.captures, c.instantiations, c.updates, c.identical, md_cuda_graph_match_name(c.last.match));
    if (!ladder_row(&l, "exercise", n, wall / steps, 1.0, NAN, bad ? INFINITY : 0.0, 0.0))
        printf("    FAIL exercise: %d of %d velocities differ from the host reference\n", bad, n);
    if (c.instantiations > 2)
        printf("    (%lld instantiations for 200 steps: register rules that let lambda change; see exercise.cu)\n",
               c.instantiations);
out:
    md_cuda_graph_cache_destroy(&c);
    md_cuda_free(x.d_vel);
    if (s) (void)cudaStreamDestroy(s);
    md_free(h);
    md_free(ref);
    return ladder_end(&l);
}

/* ======================================================================== */

static const char *usage =
    "Chapter 09 options: --intervals N (timed intervals, default 10) --interval K (steps per interval, default 100)\n"
    "  --settle S (intervals on the stream before every rung's run, default 10)\n"
    "  --sizes A,B,C (water molecules, default 1350,7856,31922) --results FILE.csv --timeline FILE.csv\n"
    "  --unroll U (loop rung: plain steps per pass of its WHILE node, default 4)\n"
    "  --if-node (captured steps: the list build as an IF node, md_cuda_nb_opts::if_node_build)";

int main(int argc, char **argv) {
    ladder_opts lo;
    run_opts ro;
    char device[300], *rest[64];
    const char *results_path = NULL, *timeline_path = NULL, *sizes = NULL;
    FILE *results = NULL;
    int cells[8], ncells = 0, i, nrest = 0, rc, failed = 0, unroll_set = 0, settle_set = 0; /* cells: the systems' water molecules */
    memset(&ro, 0, sizeof ro);
    ro.K = 0;
    ro.intervals = 0;
    /* the chapter's own options; the rest go to the ladder */
    for (i = 0; i < argc && nrest < 63; i++) {
        const int more = i + 1 < argc;
        if (i > 0 && more && strcmp(argv[i], "--intervals") == 0) ro.intervals = atoi(argv[++i]);
        else if (i > 0 && more && strcmp(argv[i], "--interval") == 0) ro.K = atoi(argv[++i]);
        else if (i > 0 && more && strcmp(argv[i], "--settle") == 0) ro.settle = atoi(argv[++i]), settle_set = 1;
        else if (i > 0 && more && strcmp(argv[i], "--sizes") == 0) sizes = argv[++i];
        else if (i > 0 && more && strcmp(argv[i], "--results") == 0) results_path = argv[++i];
        else if (i > 0 && more && strcmp(argv[i], "--timeline") == 0) timeline_path = argv[++i];
        else if (i > 0 && more && strcmp(argv[i], "--unroll") == 0) loop_unroll = atoi(argv[++i]), unroll_set = 1;
        else if (i > 0 && strcmp(argv[i], "--if-node") == 0) if_node = 1;
        else rest[nrest++] = argv[i];
    }
    rest[nrest] = NULL;
    if ((rc = ladder_parse(&lo, nrest, rest, usage)) != 0) return rc > 0 ? 0 : 2;
    if (ro.K == 0) ro.K = lo.quick ? 20 : 100;
    if (ro.intervals == 0) ro.intervals = lo.quick ? 2 : 10;
    if (!settle_set) ro.settle = lo.quick ? 1 : 10;
    if (!unroll_set && ro.K >= 4 && loop_unroll > ro.K - 2) loop_unroll = ro.K - 2; /* the default, for short intervals */
    if (ro.K < 4 || ro.intervals < 1 || ro.settle < 0 || ro.settle > 100000 || loop_unroll < 1 || loop_unroll > ro.K - 2) {
        fprintf(stderr, "%s: --interval must be >= 4, --intervals >= 1, --settle in 0..100000 and --unroll in 1..interval-2\n",
                argv[0]);
        return 2;
    }
    if (sizes) {
        const char *p = sizes;
        while (*p && ncells < 8) {
            cells[ncells] = atoi(p);
            if (cells[ncells] < 300 || cells[ncells] > 2000000) {
                fprintf(stderr, "%s: --sizes wants water molecules in 300..2000000, got '%s'\n", argv[0], sizes);
                return 2;
            }
            ncells++;
            p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        }
    } else if (lo.quick) {
        cells[ncells++] = 1350;
    } else {
        cells[ncells++] = 1350;
        cells[ncells++] = 7856;
        cells[ncells++] = 31922;
    }
    (void)cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync); /* before the context: waits sleep, host CPU time is launch work */
    (void)cudaGetLastError();
    if ((rc = ladder_gpu_device(device, sizeof device)) >= 0) {
        for (i = 0; i < NRUNG; i++) printf("SKIP %s: no usable CUDA device\n", rung_name[i]);
        return rc;
    }
    if (results_path) {
        if (!(results = fopen(results_path, "w"))) {
            fprintf(stderr, "%s: cannot write %s\n", argv[0], results_path);
            return 2;
        }
        fprintf(results, "atoms,rung,interval,steps_per_s,us_per_step,host_us_per_step,gpu_us_per_step,gpu_idle_us_per_step,"
                         "gpu_busy,captures,instantiations,updates,identical,set_calls,list_builds,bitwise\n");
    }
    if (timeline_path) {
        if (!(ro.timeline = fopen(timeline_path, "w"))) {
            fprintf(stderr, "%s: cannot write %s\n", argv[0], timeline_path);
            return 2;
        }
        fprintf(ro.timeline, "atoms,rung,lane,start_us,end_us,step\n");
    }
    for (i = 0; i < ncells; i++) failed += run_system(&lo, cells[i], &ro, device, results);
    failed += run_exercise(&lo, device);
    if (results) fclose(results);
    if (ro.timeline) fclose(ro.timeline);
    return failed ? 1 : 0;
}
