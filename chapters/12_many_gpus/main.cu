/* Chapter 12 - many GPUs: a potential map in tiles over every GPU, with retry; energy per result.
 *
 * Part 1, the ladder: chapter 04's map (4000 random charges, 256 x 256 x 132 points) split into
 * z-slabs (md_cuda_dcs_tiles, rung gpu_shared, one plan per worker made once) and run by the
 * dynamic tile scheduler (md_cuda_tiles_run) with
 *   1_worker    one worker: the baseline (the tiles one after another on one plan)
 *   2_workers   two workers, spread round robin over the GPUs (md_cuda_tiles_spread)
 *   4_workers   four workers; on a one-GPU machine they share it (the run prints how many
 *               distinct devices the workers had)
 *   exercise    your scheduler in exercise.cu on two workers
 * Every row's map is NaN-poisoned before its checked run; the first row is checked against
 * md_dcs_simple in double on planes 0, 66, 131 (tolerance 1e-4, tests/gpu_dcs.cu says why), every
 * other row must equal it bit for bit (same slabs, same plan arithmetic). Time: wall clock of the
 * whole run (threads, enqueues, copies of every slab back to the host), median of --reps runs.
 * Ceiling: the measured MUFU rsqrt rate times the number of distinct devices.
 *
 * Part 2, the tile-size sweep: 4 workers, z-planes per tile 1, 2, 4, 8, 16, 33, 132: small tiles
 * balance better and pay more per-tile overhead (one enqueue, one sync, one copy each).
 *
 * Part 3, energy per result: chapter 04's rungs (gpu_unroll8x2, gpu_l1, gpu_shared, gpu_hybrid)
 * on one plan each, repeated for at least 2 s (--quick: 0.2 s) inside md_cuda_energy_begin/end
 * (NVML): joules per 10^12 atom-evals, average watts, SM clock. Without NVML: a note, not a
 * failure.
 *
 *   12_many_gpus [--quick] [--json FILE] [--reps N] [--only A,B] [--atoms N] [--grid X,Y,Z]
 * --quick: 1001 atoms on 37 x 29 x 23 points, every row checked. Without a GPU: SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "ladder.h"
#include "exercise.cu"

/* One row's run: the case, the output map, the job. */
typedef struct tiles_ctx {
    ladder_dcs_case *c;
    md_grid map;                 /* this row's output */
    md_cuda_dcs_tiles job;       /* its job (workers, plans) */
    int use_exercise;            /* 1: exercise_run instead of md_cuda_dcs_tiles_run */
    md_cuda_tiles_stats stats;   /* of the last run */
} tiles_ctx;

static md_status tiles_once(void *arg) {
    tiles_ctx *t = (tiles_ctx *)arg;
    if (t->use_exercise) return exercise_run(&t->job, &t->stats);
    return md_cuda_dcs_tiles_run(&t->job, NULL, NULL, &t->stats);
}

/* One row: workers on devices spread over the GPUs, `planes` z-planes a tile. ref: the 1-worker
 * map (NULL: this is the first row, checked against md_dcs_simple; it becomes ref). */
static int tiles_row(ladder *l, ladder_dcs_case *c, const char *name, int nworkers, int planes, int use_exercise,
                     double ceiling, int reps, float **ref) {
    tiles_ctx t;
    int devices[MD_CUDA_TILES_MAX_WORKERS], ndev = 0, ok = 0;
    double err = NAN, secs = NAN;
    const size_t cnt = md_grid_count(&c->grid);
    size_t k;
    memset(&t, 0, sizeof t);
    t.c = c;
    t.use_exercise = use_exercise;
    if (md_cuda_tiles_spread(devices, nworkers, &ndev) != MD_OK ||
        md_grid_alloc(&t.map, c->grid.n[0], c->grid.n[1], c->grid.n[2], c->grid.origin, c->grid.spacing) != MD_OK) {
        ladder_row_error(l, name, md_last_error());
        return 0;
    }
    for (k = 0; k < cnt; k++) t.map.data[k] = NAN;
    if (md_cuda_dcs_tiles_create(&t.job, MD_DCS_GPU_SHARED, c->sys.xyzq, c->sys.n, &t.map, planes, nworkers, devices) !=
            MD_OK ||
        tiles_once(&t) != MD_OK) {
        ladder_row_error(l, name, md_last_error());
        goto done;
    }
    if (!*ref) {
        err = ladder_dcs_error(c, t.map.data, t.map.n); /* against md_dcs_simple on the case's planes */
        if (isnan(err)) err = INFINITY;                  /* the case always has its reference */
    } else {
        for (k = 0; k < cnt && !isnan(t.map.data[k]); k++) {
        }
        if (k < cnt) err = INFINITY;
        else if (memcmp(t.map.data, *ref, cnt * sizeof(float)) != 0) {
            ladder_row_error(l, name, "the map differs from the 1-worker map (it must be bitwise equal)");
            goto done;
        } else err = ladder_dcs_error(c, t.map.data, t.map.n);
    }
    if (err <= c->tol && ladder_time_cpu(tiles_once, &t, reps, &secs) != MD_OK) {
        ladder_row_error(l, name, md_last_error());
        goto done;
    }
    snprintf(l->note, sizeof l->note, "%d worker(s) on %d distinct device(s), %d tiles of %d planes; tiles per worker:",
             nworkers, t.stats.ndevices, t.job.ntiles, t.job.planes);
    for (k = 0; k < (size_t)nworkers && strlen(l->note) + 8 < sizeof l->note; k++)
        snprintf(l->note + strlen(l->note), sizeof l->note - strlen(l->note), " %d", t.stats.tiles_of[k]);
    ok = ladder_row(l, name, (long long)((double)c->sys.n * cnt), secs, (double)c->sys.n * (double)cnt,
                    isfinite(ceiling) ? ceiling * t.stats.ndevices : NAN, err, c->tol);
    if (ok && !*ref && (*ref = (float *)md_alloc_array(cnt, sizeof(float))) != NULL)
        memcpy(*ref, t.map.data, cnt * sizeof(float));
done:
    md_cuda_dcs_tiles_destroy(&t.job);
    md_grid_free(&t.map);
    return ok;
}

/* Part 3: one chapter-04 rung repeated for min_s seconds inside an NVML measurement. */
typedef struct energy_ctx {
    md_cuda_dcs_plan *p;
    double min_s;
    long long runs;
} energy_ctx;

static md_status energy_busy(void *arg) {
    energy_ctx *e = (energy_ctx *)arg;
    const double t0 = md_wall_seconds();
    md_status st;
    e->runs = 0;
    do { /* enqueue a batch of 4, then wait: the GPU stays busy, the host checks the time */
        int i;
        for (i = 0; i < 4; i++, e->runs++)
            if ((st = md_cuda_dcs_plan_enqueue(e->p)) != MD_OK) return st;
        if ((st = md_cuda_dcs_plan_sync(e->p, NULL)) != MD_OK) return st;
    } while (md_wall_seconds() - t0 < e->min_s);
    return MD_OK;
}

static int energy_part(ladder_dcs_case *c, double min_s) {
    static const md_dcs_variant rungs[4] = {MD_DCS_GPU_UNROLL8X2, MD_DCS_GPU_L1, MD_DCS_GPU_SHARED, MD_DCS_GPU_HYBRID};
    const double work = (double)c->sys.n * (double)md_grid_count(&c->grid);
    int i, failed = 0;
    printf("\nPart 3 - energy per result (NVML, device 0; each rung repeated for at least %.1f s)\n", min_s);
    if (md_cuda_energy_available() != MD_OK) {
        printf("note: no energy readings: %s\n", md_last_error());
        return 0;
    }
    printf("%-16s %10s %14s %10s %12s %9s %9s\n", "rung", "runs", "atom-evals/s", "avg W", "J/1e12 evals", "SM MHz",
           "check");
    for (i = 0; i < 4; i++) {
        md_cuda_dcs_plan p;
        md_cuda_energy e;
        energy_ctx x;
        md_status st;
        double err = INFINITY;
        if ((st = md_cuda_dcs_plan_create(&p, rungs[i], c->sys.n, &c->grid)) == MD_OK &&
            (st = md_cuda_dcs_plan_upload(&p, c->sys.xyzq, c->sys.n)) == MD_OK &&
            (st = md_cuda_poison(p.d_out, p.out_count, p.queue.stream)) == MD_OK &&
            (st = md_cuda_dcs_plan_enqueue(&p)) == MD_OK && (st = md_cuda_dcs_plan_sync(&p, &c->grid)) == MD_OK) {
            err = ladder_dcs_error(c, c->grid.data, c->grid.n);
            x.p = &p;
            x.min_s = min_s;
            if (err <= c->tol) st = md_cuda_energy_measure(0, energy_busy, &x, &e);
        }
        if (st != MD_OK || !(err <= c->tol)) {
            printf("%-16s FAIL: %s\n", md_dcs_variant_name(rungs[i]), st != MD_OK ? md_last_error() : "map outside tolerance");
            failed++;
        } else {
            printf("%-16s %10lld %14.4g %10.1f %12.2f %4u-%-4u %9s\n", md_dcs_variant_name(rungs[i]), x.runs,
                   work * x.runs / e.seconds, e.watts, e.joules / (work * x.runs) * 1e12, e.sm_clock0_mhz,
                   e.sm_clock1_mhz, "ok");
        }
        md_cuda_dcs_plan_destroy(&p);
    }
    return failed;
}

int main(int argc, char **argv) {
    static const int sweep[7] = {1, 2, 4, 8, 16, 33, 132};
    ladder l;
    ladder_opts o;
    ladder_dcs_case c;
    ladder_rung_row rows[1] = {{MD_DCS_GPU_SHARED, "gpu_shared", NULL, 0}};
    char device[320], name[32];
    double ceiling = NAN;
    float *ref = NULL;
    int reps, ndev = 0, i, failed = 0, planes;
    int rc = ladder_dcs_gpu_begin(&l, &o, argc, argv, "Chapter 12: a potential map in tiles over every GPU; energy.",
                                  "12_many_gpus", "Chapter 12 - many GPUs: dynamic tiles with retry, energy per result",
                                  device, sizeof device, &ceiling);
    if (rc >= 0) return rc;
    reps = o.reps ? o.reps : (o.quick ? 3 : 5);
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
    if (o.quick ? ladder_dcs_case_make(&c, &o, 1001, 37, 29, 23, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL)
                : ladder_dcs_case_make(&c, &o, 4000, 256, 256, 132, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL))
        return 1;
    planes = o.quick ? 4 : 8;
    printf("system: %d atoms, %d x %d x %d grid; %d GPU(s) on this machine; rung gpu_shared, %d planes a tile\n", c.sys.n,
           c.grid.n[0], c.grid.n[1], c.grid.n[2], ndev, planes);
    printf("\nPart 1 - workers\n");
    /* the 1-worker row always runs: it is every other row's reference */
    failed += !tiles_row(&l, &c, "1_worker", 1, planes, 0, ceiling, reps, &ref);
    if (ladder_selected(&l, "2_workers")) failed += !tiles_row(&l, &c, "2_workers", 2, planes, 0, ceiling, reps, &ref);
    if (ladder_selected(&l, "4_workers")) failed += !tiles_row(&l, &c, "4_workers", 4, planes, 0, ceiling, reps, &ref);
    if (ladder_selected(&l, "exercise")) failed += !tiles_row(&l, &c, "exercise", 2, planes, 1, ceiling, reps, &ref);
    printf("\nPart 2 - tile size (4 workers; planes per tile)\n");
    for (i = 0; i < 7; i++) {
        const int p = o.quick ? (sweep[i] < c.grid.n[2] ? sweep[i] : c.grid.n[2]) : sweep[i];
        if (i > 0 && p == (o.quick ? (sweep[i - 1] < c.grid.n[2] ? sweep[i - 1] : c.grid.n[2]) : sweep[i - 1])) continue;
        snprintf(name, sizeof name, "planes_%d", p);
        if (!ladder_selected(&l, name) || !ref) continue;
        /* tiles of another size are other slabs: bitwise equality with the 1-worker map holds only
         * for its tile size, so the other rows are checked against md_dcs_simple */
        if (p == planes) failed += !tiles_row(&l, &c, name, 4, p, 0, ceiling, o.quick ? 1 : 3, &ref);
        else {
            float *own = NULL;
            failed += !tiles_row(&l, &c, name, 4, p, 0, ceiling, o.quick ? 1 : 3, &own);
            md_free(own);
        }
    }
    if (!o.only) l.failed += energy_part(&c, o.quick ? 0.2 : 2.0);
    md_free(ref);
    ladder_dcs_case_free(&c);
    (void)failed;
    return ladder_end(&l);
}
