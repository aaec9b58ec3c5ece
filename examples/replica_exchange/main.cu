/* examples/replica_exchange - temperature replica exchange of 12 water boxes on one GPU.
 *
 *   replica_exchange [--replicas N] [--molecules M] [--tmin K] [--tmax K] [--equil PS] [--exchanges E]
 *                    [--steps K] [--seed S] [--mode sequential|threads|coroutines] [--graphs] [--mapped]
 *     defaults: 12 replicas of 1700 TIP3P waters, 300-360 K (geometric ladder), 5 ps of
 *     equilibration, 50 exchanges every 100 steps (0.2 ps), seed 1, coroutines, memcpy reports.
 * --equil PS: every replica first runs PS ps at its own temperature, no exchanges, outside the
 * statistics (0: none). The built box starts far from equilibrium: it heats up as its
 * molecules settle, and its potential energy per molecule takes a few ps to reach TIP3P's
 * (about -41 kJ/mol near 300 K; examples/water_md prints the approach).
 * Every replica runs chapter 08's GPU step (PME, SETTLE, Langevin) on its own stream; the
 * replicas are coroutines (md_cuda_sched_run) that stop when they wait for the GPU; every K steps
 * neighbouring temperatures try to swap (md_remd_exchange, Metropolis). Prints the exchange
 * statistics: acceptance per neighbour pair, each replica's walk through the ladder (its slot
 * after every tenth round), round trips, and the mean potential energy per temperature.
 * No GPU: prints "SKIP: <reason>" and exits 0. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MD_CUDA_REMD_DECLARED
int main(int argc, char **argv) {
    int n = 12, molecules = 1700, exchanges = 50, steps = 100, equil_steps, i, r, k;
    double tmin = 300.0, tmax = 360.0, equil = 5.0, temps[64], *sum;
    long long *count;
    unsigned long long seed = 1;
    md_cuda_remd_desc d;
    md_cuda_remd_stats st;
    md_water_desc wd;
    md_system sys;
    md_topology top;
    md_lj_table lj;
    md_sim_desc base;
    md_cuda_remd x;
    memset(&d, 0, sizeof d);
    d.mode = MD_CUDA_SCHED_COROUTINES;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--graphs")) d.graphs = 1;
        else if (!strcmp(a, "--mapped")) d.transfer = MD_CUDA_REMD_MAPPED;
        else if (i + 1 < argc && !strcmp(a, "--replicas")) n = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--molecules")) molecules = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--tmin")) tmin = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--tmax")) tmax = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--equil")) equil = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--exchanges")) exchanges = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--seed")) seed = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--mode")) {
            const char *m = argv[++i];
            d.mode = !strcmp(m, "sequential") ? MD_CUDA_SCHED_SEQUENTIAL
                     : !strcmp(m, "threads")  ? MD_CUDA_SCHED_THREADS
                                              : MD_CUDA_SCHED_COROUTINES;
        } else {
            fprintf(stderr, "usage: %s [--replicas N] [--molecules M] [--tmin K] [--tmax K] [--equil PS] [--exchanges E] [--steps K]\n"
                            "       [--seed S] [--mode sequential|threads|coroutines] [--graphs] [--mapped]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n < 2 || n > 64 || molecules < 100 || exchanges < 1 || steps < 1 || !(equil >= 0.0 && equil <= 1e4)) {
        fprintf(stderr, "replica_exchange: need 2..64 replicas, >= 100 molecules, >= 1 exchange and step, --equil in 0..1e4 ps\n");
        return 2;
    }
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    memset(&wd, 0, sizeof wd);
    wd.molecules = molecules;
    wd.temperature = tmin;
    wd.seed = seed;
    memset(&base, 0, sizeof base);
    base.dt = 0.002;
    base.seed = seed;
    base.nb.lj = MD_LJ_TRUNCATE;
    base.nb.dispersion_correction = 1;
    if (md_build_water_box(&sys, &top, &lj, &wd) != MD_OK || md_remd_ladder(temps, n, tmin, tmax) != MD_OK) {
        fprintf(stderr, "replica_exchange: %s\n", md_last_error());
        return 1;
    }
    if (sys.box[0] < 2.2) base.nb.cutoff = 0.7;
    if (md_cuda_remd_create(&x, n, &sys, &top, &lj, &base, temps, seed, NULL) != MD_OK) {
        fprintf(stderr, "replica_exchange: %s\n", md_last_error());
        return 1;
    }
    printf("replica_exchange: %d replicas x %d atoms, %.1f-%.1f K, %d exchanges every %d steps, %s%s%s\n", n, sys.n, tmin,
           tmax, exchanges, steps, md_cuda_sched_mode_name(d.mode), d.graphs ? " + graphs" : "",
           d.transfer == MD_CUDA_REMD_MAPPED ? " + mapped" : "");
    /* equilibration: every replica at its own temperature, all streams at once, then one wait each */
    equil_steps = (int)(equil / base.dt + 0.5);
    if (equil_steps > 0) {
        md_status es = MD_OK;
        for (r = 0; r < n && es == MD_OK; r++) es = md_cuda_sim_run(&x.rep[r].sim, equil_steps, 0);
        for (r = 0; r < n && es == MD_OK; r++) es = md_cuda_sim_poll(&x.rep[r].sim, NULL, NULL);
        if (es != MD_OK) {
            fprintf(stderr, "replica_exchange: equilibration: %s\n", md_last_error());
            md_cuda_remd_destroy(&x);
            return 1;
        }
        printf("equilibration: %d steps (%g ps) at each replica's temperature, no exchanges\n", equil_steps,
               equil_steps * base.dt);
    }
    d.steps_per_exchange = steps;
    d.exchanges = exchanges;
    if (md_cuda_remd_run(&x, &d, &st) != MD_OK) {
        fprintf(stderr, "replica_exchange: %s\n", md_last_error());
        md_cuda_remd_destroy(&x);
        return 1;
    }
    printf("%.0f replica-steps/s (%.2f ns/day summed over replicas), GPU busy %.2f\n", st.steps_per_s,
           st.steps_per_s * base.dt * 1e-3 * 86400.0, st.sched.busy_fraction);
    printf("acceptance per neighbour pair:\n");
    for (k = 0; k + 1 < n; k++)
        printf("  %6.1f K <-> %6.1f K: %5.2f (%lld of %lld)\n", temps[k], temps[k + 1], md_remd_acceptance(&x.ladder, k),
               x.ladder.accepts[k], x.ladder.attempts[k]);
    /* one pass over the log: each round's energies by slot, then its decisions move the replicas;
       each replica's slot printed after every tenth round */
    sum = (double *)calloc((size_t)n, sizeof(double));
    count = (long long *)calloc((size_t)n, sizeof(long long));
    if (sum && count) {
        int slot_of[64], replica_at[64], every = exchanges >= 10 ? exchanges / 10 : 1;
        for (r = 0; r < n; r++) slot_of[r] = replica_at[r] = r;
        printf("walks through the ladder (slot of each replica every %d rounds):\n", every);
        for (i = 0; i < x.rounds; i++) {
            for (r = 0; r < n; r++) {
                sum[slot_of[r]] += x.log_energy[(size_t)i * n + r];
                count[slot_of[r]]++;
            }
            for (k = 0; k + 1 < n; k++)
                if (x.log_accepted[(size_t)i * (n - 1) + k] == 1) {
                    int a = replica_at[k], b = replica_at[k + 1];
                    replica_at[k] = b;
                    replica_at[k + 1] = a;
                    slot_of[a] = k + 1;
                    slot_of[b] = k;
                }
            if ((i + 1) % every == 0) {
                printf("  round %4d:", i + 1);
                for (r = 0; r < n; r++) printf(" %2d", slot_of[r]);
                printf("\n");
            }
        }
        printf("round trips (slot 0 -> %d -> 0) per replica:", n - 1);
        for (r = 0; r < n; r++) printf(" %lld", x.ladder.round_trips[r]);
        printf("\n");
        printf("mean potential energy per temperature (kJ/mol per molecule):\n");
        for (k = 0; k < n; k++) printf("  %6.1f K: %9.3f\n", temps[k], sum[k] / (double)count[k] / molecules);
    }
    free(sum);
    free(count);
    md_cuda_remd_destroy(&x);
    md_system_free(&sys);
    md_topology_free(&top);
    md_lj_table_free(&lj);
    return 0;
}
#else
int main(void) {
    printf("SKIP: md_cuda.cu.h has no step section in this build\n");
    return 0;
}
#endif
