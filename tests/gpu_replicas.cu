/* Tests of md_cuda.cu.h's replica exchange (md_cuda_remd, chapters 10 and 11): every rung --
 * sequential, a thread per replica, coroutines, coroutines + CUDA graphs, each with the report
 * through a memcpy and through mapped memory -- gives the same energies at every exchange, the
 * same exchange decisions and the same final positions and velocities, bit for bit, for the same
 * seed; no replica starves (every replica made every read, none fell behind by more than the
 * reads between two barriers); the exchange statistics agree with md.h's md_remd fed the logged
 * energies (the host logic recomputed); a replica's temperature follows its slot; the caller's
 * md_cuda_sim_opts reach every replica (water_lanes 1 and 3; the sort interval stays the run's
 * -1); every replica's pair grid fitted to its last list build from the reports (never the
 * capacity's grid where the fit is smaller); argument errors.
 * System: 6 replicas of 300 TIP3P waters (900 atoms), 290-340 K, exchanges every 20 steps
 * (MD_SANITIZE=1: 3 replicas, 3 exchanges of 6 steps). Seeds used: 51
 * (the exchanges), 61 (the waters), 71 (the Langevin noise, + 1000 r per replica).
 *
 * Without a GPU every test prints SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"

static int sanitize;
/* The replicas' graphs make their list build an IF node (md_cuda_nb_opts::if_node_build, not
 * the library's default), so the graph rungs test that path too, except under
 * MD_SANITIZE_TOOL=racecheck (tests/gpu_check.sh): racecheck's process dies (SIGSEGV, 0 hazards;
 * CUDA 13.0, H100, 2026-11-24) on graphs whose list build is an IF node, so there the build stays
 * the default device-gated kernels; memcheck and the plain run test the IF node
 * (tests/gpu_step.cu's captured_steps_match_stream too).
 * Racecheck's host memory grows while the steps run: on an H200 machine with 128 GB
 * (2026-11-28, this program under racecheck alone, the first 20 s) it grew 2.5-3.4 GB/s on the
 * code of 2026-11-27/28 up to the PME transforms as graphs, 4.6 GB/s after the pair kernel's i
 * forces moved to shared memory and 5.9-6.1 GB/s after its grid of the last build's items (why
 * was not profiled), and the process was killed (exit 9, SIGKILL from the host's out-of-memory
 * killer) at 122 GB, within the first rung. Under a sanitizer each rung runs 6 steps per
 * exchange instead of 20 (3 exchanges, two reads each): the same kernels, under a third of the
 * launches (racecheck: peak 62.7 GB on the same machine). */
static int racecheck;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

#ifdef MD_CUDA_REMD_DECLARED

typedef struct fixture {
    md_system sys;
    md_topology top;
    md_lj_table lj;
    md_sim_desc base;
    double temps[8];
    int n;
} fixture;

static md_status fixture_make(fixture *f) {
    md_water_desc wd;
    md_status st;
    memset(f, 0, sizeof *f);
    memset(&wd, 0, sizeof wd);
    wd.molecules = sanitize ? 120 : 300;
    wd.temperature = 300.0;
    wd.seed = 61;
    if ((st = md_build_water_box(&f->sys, &f->top, &f->lj, &wd)) != MD_OK) return st;
    f->n = sanitize ? 3 : 6;
    if ((st = md_remd_ladder(f->temps, f->n, 290.0, 340.0)) != MD_OK) return st;
    f->base.dt = 0.002;
    f->base.seed = 71;
    f->base.nb.cutoff = sanitize ? 0.6 : 0.7;
    f->base.nb.lj = MD_LJ_TRUNCATE;
    return MD_OK;
}

static void fixture_free(fixture *f) {
    md_system_free(&f->sys);
    md_topology_free(&f->top);
    md_lj_table_free(&f->lj);
}

/* What one run leaves to compare: the logs and every replica's final positions and velocities. */
typedef struct outcome {
    int n, rounds;
    double *energy;
    int *accepted;
    double *x, *v;
    int slot[8];
    long long trips[8];
    md_cuda_remd_stats stats;
} outcome;

static void outcome_free(outcome *o) {
    free(o->energy);
    free(o->accepted);
    free(o->x);
    free(o->v);
    memset(o, 0, sizeof *o);
}

static md_status run_rung(const fixture *f, const md_cuda_remd_desc *d, outcome *o) {
    md_cuda_remd x;
    md_cuda_sim_opts so;
    md_status st;
    int r, natom = f->sys.n;
    memset(o, 0, sizeof *o);
    memset(&so, 0, sizeof so);
    so.nb.if_node_build = !racecheck;
    if ((st = md_cuda_remd_create(&x, f->n, &f->sys, &f->top, &f->lj, &f->base, f->temps, 51, &so)) != MD_OK) return st;
    /* poison the logs the run must write */
    for (r = 0; r < x.n; r++) x.potential[r] = NAN;
    if ((st = md_cuda_remd_run(&x, d, &o->stats)) != MD_OK) {
        md_cuda_remd_destroy(&x);
        return st;
    }
    o->n = x.n;
    o->rounds = x.rounds;
    o->energy = (double *)malloc(sizeof(double) * x.rounds * x.n);
    o->accepted = (int *)malloc(sizeof(int) * x.rounds * (x.n - 1));
    o->x = (double *)malloc(sizeof(double) * 3 * natom * x.n);
    o->v = (double *)malloc(sizeof(double) * 3 * natom * x.n);
    if (!o->energy || !o->accepted || !o->x || !o->v) {
        md_cuda_remd_destroy(&x);
        return MD_ERR_OUT_OF_MEMORY;
    }
    memcpy(o->energy, x.log_energy, sizeof(double) * x.rounds * x.n);
    memcpy(o->accepted, x.log_accepted, sizeof(int) * x.rounds * (x.n - 1));
    for (r = 0; r < x.n; r++) {
        /* the pair kernel's grid fitted to the last build from the reports (md__nb_fit_grid), for
         * every rung: at least its items, and no more than the rule keeps (the capacity's grid,
         * which an unpolled plan had before, when that is larger) */
        const md_cuda_nb_plan *nb = &x.rep[r].sim.nb;
        long long word = 0, w, most;
        if (cudaMemcpy(&word, nb->d_ctl + MD__NB_CTL_NITEMS, sizeof word, cudaMemcpyDeviceToHost) != cudaSuccess) {
            md_cuda_remd_destroy(&x);
            return md_set_error(MD_ERR_CUDA, "run_rung", 0, "d_ctl", "copy failed");
        }
        w = md__nb_nitems(word);
        most = 2 * w > w + w / 4 + 64 ? 2 * w : w + w / 4 + 64;
        if (w <= 0 || nb->grid_items < w || nb->grid_items > (most < nb->cap_items ? most : nb->cap_items)) {
            md_cuda_remd_destroy(&x);
            return md_set_error(MD_ERR_RANGE, "run_rung", 0, "grid_items",
                                "replica %d: pair grid %lld items for a list of %lld (capacity %lld)", r, nb->grid_items, w,
                                nb->cap_items);
        }
        o->slot[r] = x.ladder.slot_of[r];
        o->trips[r] = x.ladder.round_trips[r];
        if (fabs(x.rep[r].sim.desc.temperature - x.ladder.temperature[x.ladder.slot_of[r]]) > 0.0) {
            md_cuda_remd_destroy(&x);
            return md_set_error(MD_ERR_RANGE, "run_rung", 0, "temperature", "replica %d runs at the wrong temperature", r);
        }
        if ((st = md_cuda_sim_download(&x.rep[r].sim, o->x + (size_t)3 * natom * r, o->v + (size_t)3 * natom * r, NULL)) !=
            MD_OK) {
            md_cuda_remd_destroy(&x);
            return st;
        }
    }
    md_cuda_remd_destroy(&x);
    return MD_OK;
}

static int same_outcome(const outcome *a, const outcome *b, int natom, const char *what) {
    size_t k;
    if (a->rounds != b->rounds || a->n != b->n) {
        printf("  %s: %d rounds of %d replicas vs %d of %d\n", what, b->rounds, b->n, a->rounds, a->n);
        return 0;
    }
    for (k = 0; k < (size_t)a->rounds * a->n; k++)
        if (memcmp(&a->energy[k], &b->energy[k], sizeof(double))) {
            printf("  %s: round %zu replica %zu: energy %.17g vs %.17g\n", what, k / a->n, k % a->n, b->energy[k], a->energy[k]);
            return 0;
        }
    if (memcmp(a->accepted, b->accepted, sizeof(int) * a->rounds * (a->n - 1))) {
        printf("  %s: exchange decisions differ\n", what);
        return 0;
    }
    if (memcmp(a->x, b->x, sizeof(double) * 3 * natom * a->n) || memcmp(a->v, b->v, sizeof(double) * 3 * natom * a->n)) {
        printf("  %s: final positions or velocities differ\n", what);
        return 0;
    }
    return memcmp(a->slot, b->slot, sizeof a->slot) == 0;
}

/* Every rung against the first (sequential, memcpy): bitwise. */
static void every_rung_same_trajectories_and_decisions(void) {
    static const struct {
        md_cuda_sched_mode mode;
        int graphs;
        md_cuda_remd_transfer transfer;
        const char *name;
    } rungs[] = {
        {MD_CUDA_SCHED_SEQUENTIAL, 0, MD_CUDA_REMD_MEMCPY, "sequential"},
        {MD_CUDA_SCHED_THREADS, 0, MD_CUDA_REMD_MEMCPY, "threads"},
        {MD_CUDA_SCHED_COROUTINES, 0, MD_CUDA_REMD_MEMCPY, "coroutines"},
        {MD_CUDA_SCHED_COROUTINES, 1, MD_CUDA_REMD_MEMCPY, "coroutines+graphs"},
        {MD_CUDA_SCHED_SEQUENTIAL, 0, MD_CUDA_REMD_MAPPED, "sequential+mapped"},
        {MD_CUDA_SCHED_COROUTINES, 0, MD_CUDA_REMD_MAPPED, "coroutines+mapped"},
        {MD_CUDA_SCHED_COROUTINES, 1, MD_CUDA_REMD_MAPPED, "coroutines+graphs+mapped"},
    };
    fixture f;
    outcome ref, o;
    md_cuda_remd_desc d;
    int k, r, accepted = 0, refused = 0;
    NEED_GPU();
    MD_CHECK_OK(fixture_make(&f));
    memset(&d, 0, sizeof d);
    /* reads within an exchange: the waits the scheduler overlaps (four of 5 steps; under a
       sanitizer two of 3, for racecheck's host memory: see the comment at the top) */
    d.steps_per_exchange = sanitize ? 6 : 20;
    d.steps_per_read = sanitize ? 3 : 5;
    d.exchanges = sanitize ? 3 : 12;
    for (k = 0; k < (int)(sizeof rungs / sizeof rungs[0]); k++) {
        d.mode = rungs[k].mode;
        d.graphs = rungs[k].graphs;
        d.transfer = rungs[k].transfer;
        if (sanitize) { /* which rung a sanitizer's dying process was in (stdout is a pipe there) */
            printf("  %s: starts\n", rungs[k].name);
            fflush(stdout);
        }
        MD_CHECK_OK(run_rung(&f, &d, k == 0 ? &ref : &o));
        if (k == 0) {
            for (r = 0; r < ref.rounds * (ref.n - 1); r++) {
                accepted += ref.accepted[r] == 1;
                refused += ref.accepted[r] == 0;
            }
            printf("  %s: %d swaps accepted, %d refused; %.0f steps/s, GPU busy %.2f\n", rungs[k].name, accepted, refused,
                   ref.stats.steps_per_s, ref.stats.sched.busy_fraction);
            MD_CHECK(ref.rounds == d.exchanges);
            MD_CHECK(ref.stats.reads == (long long)f.n * d.exchanges * (d.steps_per_exchange / d.steps_per_read));
            MD_CHECKF(accepted > 0, "no swap accepted in %d rounds: the test would not see a decision differ", ref.rounds);
            continue;
        }
        printf("  %s: %.0f steps/s, GPU busy %.2f, %lld graph instantiations\n", rungs[k].name, o.stats.steps_per_s,
               o.stats.sched.busy_fraction, o.stats.instantiations);
        MD_CHECKF(same_outcome(&ref, &o, f.sys.n, rungs[k].name), "%s differs from sequential", rungs[k].name);
        /* starvation, counted: every replica made every read; none fell behind by more than the
           reads of one exchange interval (the barrier bounds it; round robin keeps it small) */
        MD_CHECK(o.stats.reads == ref.stats.reads);
        MD_CHECKF(o.stats.sched.max_lag <= d.steps_per_exchange / d.steps_per_read, "%s: a replica fell %lld reads behind",
                  rungs[k].name, o.stats.sched.max_lag);
        if (rungs[k].graphs) MD_CHECK(o.stats.instantiations >= f.n);
        outcome_free(&o);
    }
    /* the host logic recomputed: md.h's md_remd fed the logged energies decides the same */
    {
        md_remd check;
        int acc[8];
        MD_CHECK_OK(md_remd_create(&check, f.n, f.temps, 51));
        for (r = 0; r < ref.rounds; r++) {
            MD_CHECK_OK(md_remd_exchange(&check, ref.energy + (size_t)r * f.n, acc, NULL));
            MD_CHECK(memcmp(acc, ref.accepted + (size_t)r * (f.n - 1), sizeof(int) * (f.n - 1)) == 0);
        }
        MD_CHECK(memcmp(check.slot_of, ref.slot, sizeof(int) * f.n) == 0);
        md_remd_free(&check);
    }
    outcome_free(&ref);
    fixture_free(&f);
}

/* The decisions respond to the ladder: two replicas 0.5 K apart swap at almost every attempt,
 * two at 300 and 900 K never (the acceptance probability is ~exp(-thousands)). */
static void decisions_follow_the_ladder(void) {
    fixture f;
    md_cuda_remd_desc d;
    outcome near_o, far_o;
    int r, near_acc = 0, far_acc = 0;
    NEED_GPU();
    MD_CHECK_OK(fixture_make(&f));
    memset(&d, 0, sizeof d);
    d.mode = MD_CUDA_SCHED_COROUTINES;
    d.steps_per_exchange = 10;
    d.exchanges = sanitize ? 2 : 8;
    f.n = 2;
    f.temps[0] = 300.0;
    f.temps[1] = 300.5;
    MD_CHECK_OK(run_rung(&f, &d, &near_o));
    f.temps[1] = 900.0;
    MD_CHECK_OK(run_rung(&f, &d, &far_o));
    for (r = 0; r < near_o.rounds; r++) {
        /* the Metropolis probability of this round's swap from the logged energies, for either
         * placement of the two replicas on the two temperatures (an earlier swap exchanges them) */
        const double *e = far_o.energy + (size_t)r * 2;
        double p = md_remd_probability(300.0, 900.0, e[0], e[1]), q = md_remd_probability(300.0, 900.0, e[1], e[0]);
        near_acc += near_o.accepted[r] == 1;
        far_acc += far_o.accepted[r] == 1;
        MD_CHECKF(far_o.accepted[r] != 1 || (p > 1e-6 || q > 1e-6),
                  "300 / 900 K round %d: a swap accepted with probability %.3g / %.3g (energies %.6g, %.6g)", r, p, q,
                  e[0], e[1]);
    }
    /* every other round attempts the one pair (rounds alternate even and odd pairs); 0.5 K apart
     * the probability is near 1. 300 / 900 K: a swap is likely only while the two replicas still
     * have nearly the same energy (they start from one configuration), so the first attempts may
     * be accepted and the check above holds each decision to its probability; over the full run
     * fewer swaps are accepted than at 0.5 K. */
    MD_CHECKF(near_acc >= near_o.rounds / 2 - 1, "300 / 300.5 K: %d of %d attempts accepted", near_acc, near_o.rounds / 2);
    MD_CHECKF(sanitize || far_acc < near_acc, "300 / 900 K: %d accepted, 300 / 300.5 K: %d", far_acc, near_acc);
    outcome_free(&near_o);
    outcome_free(&far_o);
    fixture_free(&f);
}

static void argument_errors(void) {
    md_cuda_remd x;
    md_cuda_remd_desc d;
    fixture f;
    NEED_GPU();
    memset(&x, 0, sizeof x);
    memset(&d, 0, sizeof d);
    MD_CHECK_ERROR(md_cuda_remd_run(&x, &d, NULL), MD_ERR_INVALID_ARGUMENT, "md_cuda_remd_create");
    MD_CHECK_OK(fixture_make(&f));
    f.n = 2;
    MD_CHECK_OK(md_cuda_remd_create(&x, 2, &f.sys, &f.top, &f.lj, &f.base, f.temps, 1, NULL));
    d.steps_per_exchange = 10;
    d.steps_per_read = 3;
    MD_CHECK_ERROR(md_cuda_remd_run(&x, &d, NULL), MD_ERR_INVALID_ARGUMENT, "steps_per_read");
    d.steps_per_read = 5;
    d.transfer = MD_CUDA_REMD_TRANSFER_COUNT;
    MD_CHECK_ERROR(md_cuda_remd_run(&x, &d, NULL), MD_ERR_INVALID_ARGUMENT, "transfer");
    MD_CHECK(x.rounds == 0);
    md_cuda_remd_destroy(&x);
    md_cuda_remd_destroy(&x); /* twice: safe */
    { /* the caller's sim options reach every replica; the sort interval is the run's own (-1) */
        md_cuda_sim_opts o;
        int r, lanes;
        memset(&o, 0, sizeof o);
        o.nb.sort_interval = 7;
        for (lanes = 1; lanes <= 3; lanes += 2) {
            o.water_lanes = lanes;
            MD_CHECK_OK(md_cuda_remd_create(&x, 2, &f.sys, &f.top, &f.lj, &f.base, f.temps, 1, &o));
            for (r = 0; r < 2; r++) {
                MD_CHECKF(x.rep[r].sim.step.water_lanes == lanes, "replica %d: %d lanes per water, asked %d", r,
                          x.rep[r].sim.step.water_lanes, lanes);
                MD_CHECK(x.rep[r].sim.nb.opts.sort_interval == -1);
            }
            md_cuda_remd_destroy(&x);
        }
        o.water_lanes = 2;
        MD_CHECK_ERROR(md_cuda_remd_create(&x, 2, &f.sys, &f.top, &f.lj, &f.base, f.temps, 1, &o),
                       MD_ERR_INVALID_ARGUMENT, "water_lanes");
    }
    f.temps[1] = f.temps[0];
    MD_CHECK_ERROR(md_cuda_remd_create(&x, 2, &f.sys, &f.top, &f.lj, &f.base, f.temps, 1, NULL), MD_ERR_INVALID_ARGUMENT,
                   "temperature[1]");
    fixture_free(&f);
}

int main(void) {
    const char *e = getenv("MD_SANITIZE");
    const char *tool = getenv("MD_SANITIZE_TOOL");
    sanitize = e && e[0] == '1';
    racecheck = sanitize && tool && strcmp(tool, "racecheck") == 0;
    MD_RUN(every_rung_same_trajectories_and_decisions);
    MD_RUN(decisions_follow_the_ladder);
    MD_RUN(argument_errors);
    return md_test_summary();
}

#else
int main(void) {
    printf("SKIP replicas: md_cuda.cu.h has no step section in this build\n");
    printf("0 passed, 0 failed, 1 skipped\n");
    return 0;
}
#endif
