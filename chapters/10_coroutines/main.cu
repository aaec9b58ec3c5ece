/* Chapter 10 - coroutines: many replicas on one GPU.
 *
 * The ladder: the same replica-exchange run (md_cuda_remd: N water replicas on a temperature
 * ladder, chapter 08's GPU step with a Langevin thermostat, an exchange attempt every K steps)
 * scheduled four ways, every rung checked bitwise against the first:
 *   sequential         one replica at a time; each wait blocks (md_cuda_sched_run, SEQUENTIAL)
 *   threads            one host thread per replica (THREADS)
 *   coroutines         one thread, a coroutine per replica, events polled round robin (COROUTINES)
 *   coroutines+graphs  the same, each read segment launched as a CUDA graph (chapter 09)
 * and prints steps/s, the speed-up over the sequential rung, the GPU busy fraction (from
 * events), the scheduler's passes and the largest lag of a replica (starvation, counted).
 *
 *   10_coroutines [--quick] [--replicas N] [--molecules M] [--exchanges E] [--steps K]
 *                 [--read R] [--only a,b] [--json FILE] [--timeline PREFIX] [--exercise]
 *                 [--water-lanes L]
 *     --replicas N   replicas (default 12)          --molecules M  waters each (default 1700: 5,100 atoms)
 *     --exchanges E  exchange rounds timed (default 20)   --steps K  steps per exchange (default 100)
 *     --read R       steps between the host's reads of a replica's energy (default 10: the
 *                    replica's host code waits K/R times per exchange)
 *     --only LIST    rungs to run (sequential,threads,coroutines,graphs)
 *     --json FILE    one md_bench/1 line per rung     --timeline PREFIX  PREFIX_<rung>.csv: the
 *                    GPU batch intervals of each replica (tutorials/scripts/plot_replica_timeline.py)
 *     --exercise     also run the student's scheduler (exercise.cu) and check it the same way
 *     --water-lanes L  lanes per water in every replica's integrate kernel (1 or 3; default: the
 *                    rule of md_cuda_sim_opts::water_lanes, which counts the whole GPU as one
 *                    replica's), to time the two layouts on replicas that share the GPU
 * --quick: 4 replicas of 300 waters, 3 exchanges of 20 steps. Without a GPU: SKIP lines. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MD_CUDA_REMD_DECLARED
#include "exercise.cu"

typedef struct rung {
    const char *name;
    md_cuda_sched_mode mode;
    int graphs;
} rung;

static const rung rungs[] = {
    {"sequential", MD_CUDA_SCHED_SEQUENTIAL, 0},
    {"threads", MD_CUDA_SCHED_THREADS, 0},
    {"coroutines", MD_CUDA_SCHED_COROUTINES, 0},
    {"graphs", MD_CUDA_SCHED_COROUTINES, 1},
};

typedef struct result {
    int ok;
    md_cuda_remd_stats st;
    double *energy; /* rounds x n */
    int *accepted;  /* rounds x (n - 1) */
    double *x;      /* final positions, all replicas */
} result;

static int water_lanes; /* --water-lanes: md_cuda_sim_opts::water_lanes of every replica (0: the rule) */

/* Make the replicas, warm up (one exchange, not timed: graph captures, first launches), run the
 * timed exchanges, keep the logs and the final positions. */
static md_status run_one(const md_system *sys, const md_topology *top, const md_lj_table *lj, const md_sim_desc *base,
                         const double *temps, int n, md_cuda_remd_desc *d, result *out, const char *timeline) {
    md_cuda_remd x;
    md_cuda_remd_desc warm = *d;
    md_status st;
    int r, rounds = d->exchanges;
    long long cap = 0;
    md_cuda_sim_opts o;
    memset(&o, 0, sizeof o);
    o.water_lanes = water_lanes;
    if ((st = md_cuda_remd_create(&x, n, sys, top, lj, base, temps, 2024, &o)) != MD_OK) return st;
    warm.exchanges = 1;
    warm.timeline = NULL;
    if ((st = md_cuda_remd_run(&x, &warm, NULL)) != MD_OK) goto fail;
    if (timeline) {
        cap = (long long)n * rounds * (d->steps_per_exchange / d->steps_per_read);
        d->timeline = (double *)malloc(sizeof(double) * 3 * (size_t)cap);
        d->timeline_cap = d->timeline ? cap : 0;
    }
    if ((st = md_cuda_remd_run(&x, d, &out->st)) != MD_OK) goto fail;
    if (timeline && d->timeline) {
        FILE *f = fopen(timeline, "w");
        long long k;
        if (f) {
            fprintf(f, "replica,begin_s,end_s\n");
            for (k = 0; k < out->st.sched.timeline_n; k++)
                fprintf(f, "%d,%.9f,%.9f\n", (int)d->timeline[3 * k], d->timeline[3 * k + 1], d->timeline[3 * k + 2]);
            fclose(f);
        }
    }
    out->energy = (double *)malloc(sizeof(double) * (x.rounds) * n);
    out->accepted = (int *)malloc(sizeof(int) * (x.rounds) * (n - 1 > 0 ? n - 1 : 1));
    out->x = (double *)malloc(sizeof(double) * 3 * sys->n * n);
    if (!out->energy || !out->accepted || !out->x) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, "10_coroutines", 0, NULL, "out of memory");
        goto fail;
    }
    memcpy(out->energy, x.log_energy, sizeof(double) * x.rounds * n);
    memcpy(out->accepted, x.log_accepted, sizeof(int) * x.rounds * (n - 1 > 0 ? n - 1 : 1));
    for (r = 0; r < n; r++)
        if ((st = md_cuda_sim_download(&x.rep[r].sim, out->x + (size_t)3 * sys->n * r, NULL, NULL)) != MD_OK) goto fail;
    if (n > 1) {
        printf("    exchange statistics (acceptance per neighbour pair, %lld rounds):", x.ladder.rounds);
        for (r = 0; r + 1 < n; r++) printf(" %.2f", md_remd_acceptance(&x.ladder, r));
        printf("\n");
    }
    out->ok = 1;
fail:
    free(d->timeline);
    d->timeline = NULL;
    d->timeline_cap = 0;
    md_cuda_remd_destroy(&x);
    return st;
}

static int same(const result *a, const result *b, int rounds, int n, int natom) {
    return !memcmp(a->energy, b->energy, sizeof(double) * rounds * n) &&
           !memcmp(a->accepted, b->accepted, sizeof(int) * rounds * (n - 1 > 0 ? n - 1 : 1)) &&
           !memcmp(a->x, b->x, sizeof(double) * 3 * natom * n);
}

int main(int argc, char **argv) {
    int quick = 0, n = 12, molecules = 1700, exchanges = 20, steps = 100, read = 10, exercise = 0, i, k, bad = 0;
    const char *only = NULL, *json = NULL, *timeline = NULL;
    md_water_desc wd;
    md_system sys;
    md_topology top;
    md_lj_table lj;
    md_sim_desc base;
    double temps[64];
    result res[5];
    FILE *jf = NULL;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--exercise")) exercise = 1;
        else if (i + 1 < argc && !strcmp(a, "--replicas")) n = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--molecules")) molecules = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--exchanges")) exchanges = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--read")) read = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--only")) only = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--json")) json = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--timeline")) timeline = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--water-lanes")) water_lanes = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--quick] [--replicas N] [--molecules M] [--exchanges E] [--steps K] [--read R]\n"
                            "       [--only sequential,threads,coroutines,graphs] [--json FILE] [--timeline PREFIX] [--exercise]\n"
                            "       [--water-lanes 1|3]\n",
                    argv[0]);
            return 2;
        }
    }
    if (quick) n = 4, molecules = 300, exchanges = 3, steps = 20, read = 5;
    if (n < 2 || n > 64 || molecules < 100 || exchanges < 1 || steps < 1 || read < 1 || steps % read ||
        (water_lanes != 0 && water_lanes != 1 && water_lanes != 3)) {
        fprintf(stderr, "10_coroutines: need 2..64 replicas, >= 100 molecules, --read dividing --steps, --water-lanes 1 or 3\n");
        return 2;
    }
    if (!md_cuda_available()) {
        printf("SKIP chapter 10: %s\n", md_last_error());
        return 0;
    }
    memset(&wd, 0, sizeof wd);
    wd.molecules = molecules;
    wd.temperature = 300.0;
    wd.seed = 10;
    memset(&base, 0, sizeof base);
    base.dt = 0.002;
    base.seed = 7;
    base.nb.lj = MD_LJ_TRUNCATE;
    base.nb.dispersion_correction = 1;
    if (md_build_water_box(&sys, &top, &lj, &wd) != MD_OK || md_remd_ladder(temps, n, 300.0, 360.0) != MD_OK) {
        fprintf(stderr, "10_coroutines: %s\n", md_last_error());
        return 1;
    }
    if (base.nb.cutoff == 0.0 && sys.box[0] < 2.2) base.nb.cutoff = 0.7; /* small boxes: cutoff + buffer < half the box */
    if (json && !(jf = fopen(json, "a"))) { /* appended, as every chapter does: one file for a whole bench run */
        fprintf(stderr, "10_coroutines: cannot append to %s\n", json);
        return 1;
    }
    printf("chapter 10: %d replicas x %d atoms (TIP3P, PME, Langevin), %g-%g K, %d exchanges x %d steps, read every %d\n", n,
           sys.n, temps[0], temps[n - 1], exchanges, steps, read);
    printf("%-12s %12s %8s %9s %8s %10s %s\n", "rung", "steps/s", "speedup", "GPU busy", "max lag", "idle pass",
           "bitwise = sequential");
    memset(res, 0, sizeof res);
    for (k = 0; k < 5; k++) {
        md_cuda_remd_desc d;
        char tl[1024];
        const char *name = k < 4 ? rungs[k].name : "exercise";
        md_status st;
        if (k == 4 && !exercise) break;
        if (k < 4 && k > 0 && only && !strstr(only, name)) continue;
        memset(&d, 0, sizeof d);
        d.mode = k < 4 ? rungs[k].mode : MD_CUDA_SCHED_COROUTINES;
        d.graphs = k < 4 ? rungs[k].graphs : 0;
        d.transfer = MD_CUDA_REMD_MEMCPY;
        d.steps_per_exchange = steps;
        d.steps_per_read = read;
        d.exchanges = exchanges;
        snprintf(tl, sizeof tl, "%s_%s.csv", timeline ? timeline : "", name);
        if (k == 4) st = exercise_run(&sys, &top, &lj, &base, temps, n, &d, &res[k].st);
        else st = run_one(&sys, &top, &lj, &base, temps, n, &d, &res[k], timeline ? tl : NULL);
        if (st != MD_OK) {
            printf("%-12s FAILED: %s\n", name, md_last_error());
            bad++;
            continue;
        }
        {
            const md_cuda_remd_stats *s = &res[k].st;
            const int eq = k == 0 || k == 4 || (res[0].ok && same(&res[0], &res[k], exchanges, n, sys.n));
            printf("%-12s %12.0f %7.2fx %9.3f %8lld %10lld %s\n", name, s->steps_per_s,
                   res[0].ok ? s->steps_per_s / res[0].st.steps_per_s : 1.0, s->sched.busy_fraction, s->sched.max_lag,
                   s->sched.idle_passes, k == 0 ? "(reference)" : k == 4 ? "(exercise: see its check)" : eq ? "yes" : "NO");
            if (!eq) bad++;
            if (jf) {
                md_bench_result b;
                char line[1024];
                memset(&b, 0, sizeof b);
                b.chapter = "10_coroutines";
                b.variant = name;
                b.size = (long long)n * sys.n;
                b.size_unit = "replicas*atoms";
                b.time_s = s->sched.wall_s / ((double)exchanges * steps);
                b.rate = s->steps_per_s;
                b.unit = "replica-steps/s";
                b.ceiling = NAN;
                b.error = eq ? 0.0 : NAN;
                b.device = "gpu";
                if (md_bench_json(line, sizeof line, &b) < (int)sizeof line) fprintf(jf, "%s\n", line);
            }
        }
    }
    if (jf) fclose(jf);
    printf("goal (H100, 12 x ~5k atoms): coroutines >= 1.5x sequential, GPU busy >= 0.90\n");
    for (k = 0; k < 5; k++) {
        free(res[k].energy);
        free(res[k].accepted);
        free(res[k].x);
    }
    md_system_free(&sys);
    md_topology_free(&top);
    md_lj_table_free(&lj);
    if (bad) {
        printf("FAIL: %d rung(s) failed or differ from the sequential rung\n", bad);
        return 1;
    }
    printf("every rung agrees with the sequential rung bitwise\n");
    return 0;
}
#else
int main(void) {
    printf("SKIP chapter 10: md_cuda.cu.h has no step section in this build\n");
    return 0;
}
#endif
