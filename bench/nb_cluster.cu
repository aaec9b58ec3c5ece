/* bench/nb_cluster - the cluster-pair kernel alone on the benchmark water box, for timing and
 * for Nsight Compute.
 *
 *   build/bench/nb_cluster [--molecules N] [--edge NM] [--reps N] [--forces-only]
 *     default: 7,856 TIP3P molecules in a 6.2 nm box (23,568 atoms), 50 timed evaluations, forces
 *     and energies (chapter 06's measure); --forces-only times the kernel an MD step launches
 *     between energy outputs (md__nb_cluster_kernel<32, 0, *>)
 *
 * For MD_NB_GPU_CLUSTER and MD_NB_GPU_CLUSTER_SMEM (LJ + Ewald real space, cutoff 0.9 nm, buffer
 * 0.1 nm, forces and energies) it builds and prunes the list, then times the pair kernel alone
 * with CUDA events around its launch (md_cuda_nb_opts::time_kernel; md_cuda_hold_stream keeps the
 * GPU busy while the evaluation is queued, so no launch gap is timed), median of --reps
 * evaluations, and prints one md_bench/1 JSON line per rung (rate: pairs within the cutoff per
 * second; ceiling: the MUFU rsqrt rate times the cluster efficiency) and a readable line with
 * the cluster efficiency. Issue utilisation (the pair kernel is issue-bound, not memory-bound):
 *   ncu --set full -k regex:md__nb_cluster_kernel -s 4 -c 1 build/bench/nb_cluster --reps 3
 * (-s 4 skips the build, prune and count evaluations; read "Issue Slots Busy" and
 * "Executed Ipc Active" in the Compute Workload Analysis section, and "Warp Cycles Per Issued
 * Instruction" with its stall reasons in Warp State Statistics).
 * MD_SANITIZE=1 or no GPU: a small box (or "SKIP: <reason>"), numbers not meaningful. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int molecules = 7856, reps = 50, i, v;
    unsigned timed = MD_CUDA_NB_ENERGY; /* what the timed evaluations ask for */
    long long pairs_cut = 0;
    double edge = 6.2, rsqrt = NAN;
    const char *san = getenv("MD_SANITIZE");
    md_water_desc wd;
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_cuda_device_info info;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--molecules") == 0 && i + 1 < argc) molecules = atoi(argv[++i]);
        else if (strcmp(argv[i], "--edge") == 0 && i + 1 < argc) edge = atof(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--forces-only") == 0) timed = 0;
        else {
            fprintf(stderr, "usage: %s [--molecules N] [--edge NM] [--reps N] [--forces-only]\n", argv[0]);
            return 2;
        }
    }
    if (san && san[0] == '1') {
        molecules = 400;
        edge = 0.0;
        reps = 2;
    }
    if (!md_cuda_available()) {
        fprintf(stderr, "SKIP: %s\n", md_last_error());
        return 0;
    }
    if (reps < 1 || reps > 10000) reps = 50;
    memset(&wd, 0, sizeof wd);
    wd.molecules = molecules;
    wd.edge = edge;
    wd.seed = 2026;
    if (md_build_water_box(&s, &t, &lj, &wd) != MD_OK || md_cuda_get_device_info(0, &info) != MD_OK ||
        md_cuda_state_create(&st, s.n) != MD_OK || md_cuda_state_upload(&st, &s, &t, &lj) != MD_OK) {
        fprintf(stderr, "FAIL setup: %s\n", md_last_error());
        return 1;
    }
    if (md_cuda_ceiling_rsqrt(&rsqrt) != MD_OK) rsqrt = NAN;
    for (v = 0; v < 2; v++) {
        const md_nb_variant var = v ? MD_NB_GPU_CLUSTER_SMEM : MD_NB_GPU_CLUSTER;
        md_cuda_nb_plan p;
        md_cuda_nb_opts o;
        md_energy e;
        md_bench_result r;
        double *times = (double *)malloc(sizeof(double) * (size_t)reps), tk;
        long long pairs = 0;
        char line[1024];
        memset(&o, 0, sizeof o);
        o.time_kernel = 1;
        if (!times || md_cuda_nb_plan_create(&p, &st, var, NULL, &o) != MD_OK) {
            fprintf(stderr, "FAIL %s: %s\n", md_nb_variant_name(var), md_last_error());
            return 1;
        }
        /* build + prune, then a count of the pairs within the cutoff (MD_NB_GPU_CLUSTER has the
         * counting kernel; the shared-table rung reuses its count) */
        for (i = 0; i < 3; i++) {
            const unsigned what = i == 1 ? MD_CUDA_NB_ENERGY | MD_CUDA_NB_COUNT : MD_CUDA_NB_ENERGY;
            if (md_cuda_state_zero(&st) != MD_OK || md_cuda_nb_enqueue(&p, &st, what) != MD_OK ||
                md_cuda_nb_plan_poll(&p, &st, &e) != MD_OK) {
                fprintf(stderr, "FAIL %s: %s\n", md_nb_variant_name(var), md_last_error());
                return 1;
            }
            if (i == 1) pairs = p.stats.pairs_in_cutoff;
        }
        if (v == 0) pairs_cut = pairs; /* the pairs within the cutoff do not depend on the rung */
        else pairs = pairs_cut;
        for (i = 0; i < reps; i++) { /* the GPU held for 200 us while the evaluation is queued: no launch gaps */
            if (md_cuda_hold_stream(st.q.stream, 200.0) != MD_OK || md_cuda_state_zero(&st) != MD_OK ||
                md_cuda_nb_enqueue(&p, &st, timed) != MD_OK ||
                md_cuda_nb_plan_poll(&p, &st, &e) != MD_OK) {
                fprintf(stderr, "FAIL %s: %s\n", md_nb_variant_name(var), md_last_error());
                return 1;
            }
            times[i] = p.stats.kernel_s;
        }
        tk = md_median(times, reps);
        memset(&r, 0, sizeof r);
        r.chapter = timed ? "bench_nb_cluster" : "bench_nb_cluster_forces";
        r.variant = md_nb_variant_name(var);
        r.size = pairs;
        r.size_unit = "pairs";
        r.time_s = tk;
        r.rate = (double)pairs / tk;
        r.unit = "pairs/s";
        r.ceiling = rsqrt * (double)pairs / (double)p.stats.computed_pairs;
        r.error = NAN;
        r.device = info.name;
        if (md_bench_json(line, sizeof line, &r) < (int)sizeof line) printf("%s\n", line);
        fprintf(stderr,
                "%-18s %d atoms: pair kernel %s %.2f us (median of %d), %.3g pairs/s within %.2f nm; cluster "
                "efficiency %.3f (%.3f before the prune), %lld entries, %lld work items, %lld list builds\n",
                md_nb_variant_name(var), s.n, timed ? "with energies" : "forces only", 1e6 * tk, reps, r.rate, p.params.cutoff,
                (double)pairs / (double)p.stats.computed_pairs, (double)pairs / (double)p.stats.computed_unpruned,
                p.stats.entries, p.stats.work_items, p.stats.rebuilds);
        md_cuda_nb_plan_destroy(&p);
        free(times);
    }
    md_cuda_state_destroy(&st);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return 0;
}
