/* ladder.h - the harness every chapter program uses (C11 and C++17; the GPU parts are compiled
 * when nvcc compiles the chapter, __CUDACC__).
 *
 * A chapter runs a ladder of rungs (variants) of one kernel on a default system and prints one
 * table:
 *
 *   variant          time (ms)      rate (unit)  speedup  ceiling  max rel err  check
 *
 * A rung is one row of a table of rows, {variant, name, launcher}: the library's rung
 * `variant`, the table's `name` for it, and `launcher` NULL for the library's code or the
 * chapter's own function (the student's exercise) run on that rung's buffers. One function,
 * ladder_rung(), takes every row through the same steps, for CPU and GPU rungs alike:
 *
 *   1. setup    make what the rung needs (a plan, its buffers, the input uploaded)
 *   2. poison   fill every output the rung writes with NaN, so an element it never writes fails
 *   3. run      one complete run, the results ready to read
 *   4. check    the error against the reference (md_max_rel_error, or exact counts)
 *   5. time     only a rung that passed: the median of reps runs (CPU: wall clock; GPU: CUDA
 *               events around the enqueue on the rung's own stream, L2 flushed, md_cuda_bench)
 *   6. print    one row; a failed rung prints FAIL and no time, rate or ceiling, is counted, and
 *               writes no JSON (a fast rate for a wrong result is never reported)
 *
 * What the steps do for a kind of rung is a ladder_ops table; the Coulomb chapters (01-04)
 * share the one below (ladder_dcs_*), chapter 05 has its own. With --json FILE every passed
 * row is appended as one md_bench JSON line (md.h's md_bench_json). Options every chapter
 * program accepts:
 *   --quick           small sizes, every rung checked, exit status 1 if any fails
 *   --json FILE       append one JSON line per passed rung to FILE
 *   --reps N          timed repetitions per rung (median reported)
 *   --only A,B,...    run only the rows with these names (the reference still runs)
 *   --atoms N         the Coulomb chapters: N atoms instead of the default
 *   --grid X,Y,Z      the Coulomb chapters: X x Y x Z points instead of the default
 *   --help
 * The harness is program code, not library code: it prints. The library (md.h, md_cuda.cu.h)
 * never does. It uses only the libraries' public API. */
#ifndef LADDER_H
#define LADDER_H

#include "md.h"
#ifdef __CUDACC__
#include "md_cuda.cu.h"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** Seed of every chapter's default system. */
#define LADDER_SEED 2026

typedef struct ladder_opts {
    int quick;        /* --quick */
    int reps;         /* --reps N (0: the chapter's default) */
    const char *json; /* --json FILE, or NULL */
    const char *only; /* --only A,B,... (comma-separated row names), or NULL: every row */
    int atoms;        /* --atoms N (0: the chapter's default) */
    int grid[3];      /* --grid X,Y,Z (zeros: the chapter's default) */
    const char *prog; /* argv[0] */
} ladder_opts;

typedef struct ladder {
    ladder_opts opts;
    const char *chapter;   /* e.g. "01_sequential_coulomb" */
    const char *unit;      /* rate unit, e.g. "atom-evals/s" */
    const char *size_unit; /* e.g. "atoms*points" */
    const char *device;    /* e.g. "cpu: 2 threads" */
    char note[160];        /* printed under the next row, then cleared (e.g. blocks and waves) */
    double base_time;      /* time of the first timed rung, for the speedup column */
    double last_time;      /* time of the last row printed (NaN if it failed or was not timed) */
    int failed, rows;
} ladder;

/* Parse an integer in [lo, hi]; 0 on success. */
static int ladder__int(const char *s, long lo, long hi, long *v) {
    char *end;
    *v = strtol(s, &end, 10);
    return !(*s && end != s && *v >= lo && *v <= hi) || (*end && *end != ',');
}

/* Parse the common options; anything else is refused. Returns 0 on success, 1 after --help,
 * -1 on a bad argument (message printed). */
static int ladder_parse(ladder_opts *o, int argc, char **argv, const char *usage) {
    int i, d;
    long v;
    memset(o, 0, sizeof *o);
    o->prog = argv[0];
    for (i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (strcmp(argv[i], "--quick") == 0) o->quick = 1;
        else if (strcmp(argv[i], "--json") == 0 && more) o->json = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && more) o->only = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && more) {
            if (ladder__int(argv[++i], 1, 1000, &v) || strchr(argv[i], ',')) {
                fprintf(stderr, "%s: --reps wants an integer in 1..1000, got '%s'\n", argv[0], argv[i]);
                return -1;
            }
            o->reps = (int)v;
        } else if (strcmp(argv[i], "--atoms") == 0 && more) {
            if (ladder__int(argv[++i], 1, 100000000, &v) || strchr(argv[i], ',')) {
                fprintf(stderr, "%s: --atoms wants an integer in 1..1e8, got '%s'\n", argv[0], argv[i]);
                return -1;
            }
            o->atoms = (int)v;
        } else if (strcmp(argv[i], "--grid") == 0 && more) {
            const char *p = argv[++i];
            for (d = 0; d < 3; d++) {
                if (ladder__int(p, 1, 65535, &v) || (d < 2) != (strchr(p, ',') != NULL)) {
                    fprintf(stderr, "%s: --grid wants X,Y,Z (each 1..65535), got '%s'\n", argv[0], argv[i]);
                    return -1;
                }
                o->grid[d] = (int)v;
                p = strchr(p, ',') ? strchr(p, ',') + 1 : p;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--quick] [--json FILE] [--reps N] [--only A,B] [--atoms N] [--grid X,Y,Z]\n%s\n",
                   argv[0], usage ? usage : "");
            return 1;
        } else {
            fprintf(stderr, "%s: unknown argument '%s' (try --help)\n", argv[0], argv[i]);
            return -1;
        }
    }
    return 0;
}

/* 1 if the row `name` is to run (--only lists it, or there is no --only). */
static int ladder_selected(const ladder *l, const char *name) {
    const char *p = l->opts.only;
    const size_t n = strlen(name);
    if (!p) return 1;
    while (*p) {
        const char *e = strchr(p, ',');
        const size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static void ladder_begin(ladder *l, const ladder_opts *o, const char *chapter, const char *title,
                         const char *unit, const char *size_unit, const char *device) {
    memset(l, 0, sizeof *l);
    l->opts = *o;
    l->chapter = chapter;
    l->unit = unit;
    l->size_unit = size_unit;
    l->device = device;
    printf("%s\n", title);
    printf("device: %s\n\n", device);
    printf("%-16s %11s %14s %8s %8s %12s  %s\n", "variant", "time (ms)", unit, "speedup", "ceiling",
           "max rel err", "check");
    fflush(stdout);
}

/* With --json FILE, append one md_bench line for a passed measurement (the table's chapter,
 * units and device); a file that cannot be appended to counts as a failure. Returns 1 if all
 * went well (or there is no --json). */
static int ladder_json(ladder *l, const char *variant, long long size, double time_s, double rate, double ceiling,
                       double error) {
    FILE *f;
    md_bench_result r;
    char line[1024];
    if (!l->opts.json) return 1;
    memset(&r, 0, sizeof r);
    r.chapter = l->chapter;
    r.variant = variant;
    r.size = size;
    r.size_unit = l->size_unit;
    r.time_s = time_s;
    r.rate = rate;
    r.unit = l->unit;
    r.ceiling = ceiling;
    r.error = error;
    r.device = l->device;
    if (!(f = fopen(l->opts.json, "a"))) {
        fprintf(stderr, "cannot append to %s\n", l->opts.json);
        l->failed++;
        return 0;
    }
    if (md_bench_json(line, sizeof line, &r) < (int)sizeof line) fprintf(f, "%s\n", line);
    fclose(f);
    return 1;
}

/* One row. error: max relative error vs the reference (NaN: this rung is the reference); the
 * rung passes if error <= tol. A passed row shows its time (time_s <= 0 or NaN: not timed),
 * rate (work / time), speedup over the first timed row and fraction of ceiling (the bounding
 * unit's measured rate in the same unit; NaN: none), and goes to JSON. A failed row shows only
 * its error and FAIL: no time, no rate. Returns 1 if the row passed (and its JSON line, if any,
 * was written). */
static int ladder_row(ladder *l, const char *variant, long long size, double time_s, double work,
                      double ceiling, double error, double tol) {
    const int ok = isnan(error) || error <= tol;
    const double rate = (ok && time_s > 0.0) ? work / time_s : NAN;
    char frac[16], err[16];
    if (isnan(error)) snprintf(err, sizeof err, "%12s", "(reference)");
    else snprintf(err, sizeof err, "%12.2e", error);
    l->rows++;
    l->last_time = ok && time_s > 0.0 ? time_s : NAN;
    if (!ok) {
        printf("%-16s %11s %14s %8s %8s %s  FAIL\n", variant, "-", "-", "-", "-", err);
        printf("    FAIL %s: error %.3e exceeds tolerance %.1e (no rate reported)\n", variant, error, tol);
        l->failed++;
    } else {
        if (l->base_time <= 0.0 && time_s > 0.0) l->base_time = time_s;
        if (isfinite(ceiling) && ceiling > 0.0 && isfinite(rate))
            snprintf(frac, sizeof frac, rate < 0.01 * ceiling ? "%6.2f%%" : "%6.1f%%", 100.0 * rate / ceiling);
        else snprintf(frac, sizeof frac, "%7s", "-");
        printf("%-16s %11.3f %14.4g %7.2fx %8s %s  %s\n", variant, 1e3 * time_s, rate,
               (l->base_time > 0.0 && time_s > 0.0) ? l->base_time / time_s : NAN, frac, err,
               isnan(error) ? "ref" : "ok");
    }
    if (l->note[0]) printf("    %s\n", l->note);
    l->note[0] = '\0';
    fflush(stdout);
    return ok ? ladder_json(l, variant, size, time_s, rate, ceiling, error) : 0;
}

/* A rung that could not run (an error status): printed with the reason and counted as failed. */
static void ladder_row_error(ladder *l, const char *variant, const char *why) {
    printf("%-16s FAIL: %s\n", variant, why);
    l->last_time = NAN;
    l->note[0] = '\0';
    l->failed++;
    l->rows++;
}

/* A rung skipped for a stated reason (e.g. too slow for this size). */
static void ladder_row_skip(ladder *l, const char *variant, const char *why) {
    printf("%-16s skipped: %s\n", variant, why);
    (void)l;
}

/* Close the table; returns the process exit status (1 if any rung failed). */
static int ladder_end(ladder *l) {
    if (l->failed) printf("\n%d rung(s) FAILED\n", l->failed);
    else printf("\nall %d rungs agree with the reference\n", l->rows);
    return l->failed ? 1 : 0;
}

/* ---- the rung runner: poison, run, check, time, in one place ---- */

/** A chapter's own function for a rung (an exercise), cast to this type in its row
 *  (LADDER_FN) and back to its real type by the chapter's ladder_ops. */
typedef void (*ladder_fn)(void);
#define LADDER_FN(f) ((ladder_fn)(f))

/** One row of a ladder: the library's rung, the table's name for it, and NULL or the chapter's
 *  own launcher run on that rung's buffers; `split` is the hybrid DCS rung's software rsqrts
 *  of 64 (0: the library's default; other rungs ignore it). */
typedef struct ladder_rung_row {
    int variant;
    const char *name;
    ladder_fn launcher;
    int split;
} ladder_rung_row;

/** What the steps of ladder_rung() do for one kind of rung; ctx is the chapter's, row the
 *  index into its table of rows. setup and teardown may be NULL. check writes the error
 *  (NaN: this row is the reference). time writes the median seconds of reps runs. */
typedef struct ladder_ops {
    md_status (*setup)(void *ctx, int row);
    md_status (*poison)(void *ctx, int row);
    md_status (*run)(void *ctx, int row);
    md_status (*check)(void *ctx, int row, double *error);
    md_status (*time)(void *ctx, int row, int reps, double *seconds);
    void (*teardown)(void *ctx, int row);
} ladder_ops;

/* What a row's numbers are: work per run (for the rate), the size in the table's size unit,
 * the ceiling (NaN: none), the tolerance, the timed repetitions. */
typedef struct ladder_measure {
    double work;
    long long size;
    double ceiling;
    double tol;
    int reps;
} ladder_measure;

/* Take row `row` (named `name`) through setup, poison, run, check, time (only if it passed) and
 * print it. Returns 1 if it passed. */
static int ladder_rung(ladder *l, const ladder_ops *ops, void *ctx, int row, const char *name,
                       const ladder_measure *m) {
    char why[640];
    double err = INFINITY, t = NAN;
    md_status st = MD_OK;
    int ok = 0;
    const char *step = "setup";
    if (ops->setup) st = ops->setup(ctx, row);
    if (st == MD_OK) {
        step = "poison";
        st = ops->poison(ctx, row);
    }
    if (st == MD_OK) {
        step = "run";
        st = ops->run(ctx, row);
    }
    if (st == MD_OK) {
        step = "check";
        st = ops->check(ctx, row, &err);
    }
    if (st == MD_OK && (isnan(err) || err <= m->tol)) {
        step = "timing";
        st = ops->time(ctx, row, m->reps, &t);
    }
    if (st != MD_OK) {
        snprintf(why, sizeof why, "%s: %s", step, md_last_error());
        ladder_row_error(l, name, why);
    } else {
        ok = ladder_row(l, name, m->size, t, m->work, m->ceiling, err, m->tol);
    }
    if (ops->teardown) ops->teardown(ctx, row);
    return ok;
}

/* Time a CPU function: the median of reps runs, wall clock, no warm-up (the check run before
 * the timing is the warm-up). The function returns md_status; a failure stops timing and
 * returns it. */
typedef md_status (*ladder_cpu_fn)(void *ctx);
static md_status ladder_time_cpu(ladder_cpu_fn fn, void *ctx, int reps, double *seconds) {
    double t[64];
    md_status st;
    int i;
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    for (i = 0; i < reps; i++) {
        double t0 = md_wall_seconds();
        if ((st = fn(ctx)) != MD_OK) return st;
        t[i] = md_wall_seconds() - t0;
    }
    *seconds = md_median(t, reps);
    return MD_OK;
}

/* ---- the Coulomb chapters (01-04): the DCS rungs, CPU and GPU ---- */

/* Tolerances: max relative error (md_max_rel_error) against md_dcs_simple in double. Chapter
 * 01's float CPU rungs: 5e-5 (chapter 01's main.c says why); the GPU rungs: 1e-4 (float
 * kernels summing thousands of terms; tests/gpu_dcs.cu states the bound). */
#define LADDER_DCS_GPU_TOL 1e-4

/** An exercise of chapter 01: the same contract as md_dcs (host arrays). */
typedef md_status (*ladder_dcs_cpu_fn)(const md_float4 *xyzq, int n, md_grid *grid);

/* The default system of the Coulomb chapters (01-04): natoms random charges, |q| <= 1 e,
 * neutral, seed LADDER_SEED, in a cube whose edge is (n - 1) * spacing, and a grid of n^3 points
 * covering it from the origin. */
static md_status ladder_dcs_system(md_system *sys, md_grid *grid, int natoms, int nx, int ny, int nz,
                                   double spacing) {
    double box[3], origin[3] = {0.0, 0.0, 0.0}, h[3];
    md_status st;
    box[0] = (nx - 1) * spacing;
    box[1] = (ny - 1) * spacing;
    box[2] = (nz - 1) * spacing;
    h[0] = h[1] = h[2] = spacing;
    if ((st = md_build_random_charges(sys, natoms, box, 1.0, LADDER_SEED)) != MD_OK) return st;
    if ((st = md_grid_alloc(grid, nx, ny, nz, origin, h)) != MD_OK) {
        md_system_free(sys);
        return st;
    }
    return MD_OK;
}

/* A Coulomb case: the system, the grid, the z-planes every rung is checked on and the reference
 * there, and the rows of the table. CPU rungs write grid.data; a GPU rung runs on a plan. */
typedef struct ladder_dcs_case {
    md_system sys;
    md_grid grid;                /* the map of the CPU rungs (and the geometry of the GPU ones) */
    int *planes, nplanes;        /* the z-planes checked */
    float *ref;                  /* nplanes * nx * ny values of md_dcs_simple, or NULL until a reference row ran */
    float *sample;               /* scratch: a rung's values on those planes */
    const ladder_rung_row *rows; /* the table */
    int row;                     /* the row being run */
    double tol;                  /* tolerance of every row */
#ifdef __CUDACC__
    md_cuda_dcs_plan plan; /* the plan of the GPU row being run */
    float *h_out;          /* scratch: the (padded) map of a GPU row */
    size_t h_cap;          /* floats h_out holds */
#endif
} ladder_dcs_case;

static void ladder_dcs_case_free(ladder_dcs_case *c) {
#ifdef __CUDACC__
    md_cuda_dcs_plan_destroy(&c->plan);
    free(c->h_out);
#endif
    free(c->planes);
    free(c->ref);
    free(c->sample);
    md_grid_free(&c->grid);
    md_system_free(&c->sys);
    memset(c, 0, sizeof *c);
}

/* md_dcs_simple on the case's planes into c->ref. */
static md_status ladder_dcs_reference(ladder_dcs_case *c) {
    const size_t np = (size_t)c->grid.n[0] * c->grid.n[1];
    md_grid plane;
    md_status st;
    int p;
    if (!c->ref && !(c->ref = (float *)md_alloc_array((size_t)c->nplanes * np, sizeof(float)))) return MD_ERR_OUT_OF_MEMORY;
    for (p = 0; p < c->nplanes; p++) {
        double origin[3];
        origin[0] = c->grid.origin[0];
        origin[1] = c->grid.origin[1];
        origin[2] = c->grid.origin[2] + c->planes[p] * c->grid.spacing[2];
        if ((st = md_grid_alloc(&plane, c->grid.n[0], c->grid.n[1], 1, origin, c->grid.spacing)) != MD_OK) return st;
        st = md_dcs_simple(c->sys.xyzq, c->sys.n, &plane);
        if (st == MD_OK) memcpy(c->ref + p * np, plane.data, np * sizeof(float));
        md_grid_free(&plane);
        if (st != MD_OK) return st;
    }
    return MD_OK;
}

/* Make the case: ladder_dcs_system (--atoms / --grid override natoms and nx, ny, nz), checked on
 * every plane (all_planes = 1: chapter 01) or on planes 0, nz/2, nz-1. reference = 1: compute
 * md_dcs_simple on them now (the GPU chapters); 0: a row of the table (cpu_simple) will be the
 * reference. Prints FAIL and returns 1 on failure, else 0. */
static int ladder_dcs_case_make(ladder_dcs_case *c, const ladder_opts *o, int natoms, int nx, int ny, int nz,
                                double spacing, int all_planes, int reference, const ladder_rung_row *rows,
                                double tol) {
    md_status st;
    int p;
    memset(c, 0, sizeof *c);
    if (o->atoms) natoms = o->atoms;
    if (o->grid[0]) {
        nx = o->grid[0];
        ny = o->grid[1];
        nz = o->grid[2];
    }
    c->rows = rows;
    c->tol = tol;
    if ((st = ladder_dcs_system(&c->sys, &c->grid, natoms, nx, ny, nz, spacing)) != MD_OK) goto fail;
    c->nplanes = all_planes ? nz : (nz >= 3 ? 3 : nz);
    if (!(c->planes = (int *)md_alloc_array((size_t)c->nplanes, sizeof(int))) ||
        !(c->sample = (float *)md_alloc_array((size_t)c->nplanes * nx * ny, sizeof(float)))) {
        st = MD_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    for (p = 0; p < c->nplanes; p++) c->planes[p] = all_planes ? p : (p == 0 ? 0 : p == 1 && nz >= 3 ? nz / 2 : nz - 1);
    if (reference && (st = ladder_dcs_reference(c)) != MD_OK) goto fail;
    return 0;
fail:
    printf("FAIL: %s (%s)\n", md_last_error(), md_status_string(st));
    ladder_dcs_case_free(c);
    return 1;
}

/* The error of the map `out` (dims[0] points a row, dims[1] rows a plane: padding allowed) on
 * the case's planes: +inf if any element of the whole output is NaN (never written), else
 * md_max_rel_error on the planes. With no reference yet, out becomes it (NaN: "reference"). */
static double ladder_dcs_error(ladder_dcs_case *c, const float *out, const int dims[3]) {
    const size_t np = (size_t)c->grid.n[0] * c->grid.n[1], total = (size_t)dims[0] * dims[1] * dims[2];
    size_t k;
    int p, j;
    for (k = 0; k < total; k++)
        if (isnan(out[k])) return INFINITY;
    for (p = 0; p < c->nplanes; p++)
        for (j = 0; j < c->grid.n[1]; j++)
            memcpy(c->sample + p * np + (size_t)j * c->grid.n[0], out + ((size_t)c->planes[p] * dims[1] + j) * dims[0],
                   (size_t)c->grid.n[0] * sizeof(float));
    if (!c->ref) {
        if (!(c->ref = (float *)md_alloc_array((size_t)c->nplanes * np, sizeof(float)))) return INFINITY;
        memcpy(c->ref, c->sample, (size_t)c->nplanes * np * sizeof(float));
        return NAN;
    }
    return md_max_rel_error(c->sample, c->ref, (size_t)c->nplanes * np);
}

/* CPU rows: md_dcs, or the chapter's ladder_dcs_cpu_fn, on the case's grid (row c->row). */
static md_status ladder_dcs_cpu_run(void *ctx) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    const ladder_rung_row *r = &c->rows[c->row];
    if (r->launcher) return ((ladder_dcs_cpu_fn)r->launcher)(c->sys.xyzq, c->sys.n, &c->grid);
    return md_dcs((md_dcs_variant)r->variant, c->sys.xyzq, c->sys.n, &c->grid);
}

static md_status ladder_dcs_cpu_poison(void *ctx, int row) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    size_t k;
    c->row = row;
    for (k = 0; k < md_grid_count(&c->grid); k++) c->grid.data[k] = NAN;
    return MD_OK;
}

static md_status ladder_dcs_cpu_once(void *ctx, int row) {
    ((ladder_dcs_case *)ctx)->row = row;
    return ladder_dcs_cpu_run(ctx);
}

static md_status ladder_dcs_cpu_check(void *ctx, int row, double *error) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    (void)row;
    *error = ladder_dcs_error(c, c->grid.data, c->grid.n);
    return MD_OK;
}

static md_status ladder_dcs_cpu_time(void *ctx, int row, int reps, double *seconds) {
    ((ladder_dcs_case *)ctx)->row = row;
    return ladder_time_cpu(ladder_dcs_cpu_run, ctx, reps, seconds);
}

static const ladder_ops ladder_dcs_cpu_ops = {NULL, ladder_dcs_cpu_poison, ladder_dcs_cpu_once, ladder_dcs_cpu_check,
                                              ladder_dcs_cpu_time, NULL};

#ifdef __CUDACC__
/** An exercise of chapters 02-04, run on the buffers of its row's plan: d_xyzq holds n atoms
 *  on the device, d_out md_cuda_dcs_out_count(row variant, geometry) floats (for an unpadded
 *  rung such as MD_DCS_GPU_GATHER: the grid, x fastest); enqueue on stream, do not wait. */
typedef md_status (*ladder_dcs_gpu_fn)(const md_float4 *d_xyzq, int n, const md_grid *geometry, float *d_out,
                                       cudaStream_t stream);

/* Setup of a GPU row: its plan (capacity the case's atoms), the split, the atoms uploaded. */
static md_status ladder_dcs_gpu_setup(void *ctx, int row) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    const ladder_rung_row *r = &c->rows[row];
    md_status st;
    if ((st = md_cuda_dcs_plan_create(&c->plan, (md_dcs_variant)r->variant, c->sys.n, &c->grid)) != MD_OK) return st;
    if (r->split && (st = md_cuda_dcs_plan_set_split(&c->plan, r->split)) != MD_OK) return st;
    if (c->h_cap < c->plan.out_count) {
        free(c->h_out);
        c->h_cap = 0;
        if (!(c->h_out = (float *)md_alloc_array(c->plan.out_count, sizeof(float)))) return MD_ERR_OUT_OF_MEMORY;
        c->h_cap = c->plan.out_count;
    }
    return md_cuda_dcs_plan_upload(&c->plan, c->sys.xyzq, c->sys.n);
}

static md_status ladder_dcs_gpu_poison(void *ctx, int row) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    (void)row;
    return md_cuda_poison(c->plan.d_out, c->plan.out_count, c->plan.queue.stream);
}

/* One enqueue of row `row` on its plan's stream: the library's rung or the launcher. */
static md_status ladder_dcs_gpu_enqueue(ladder_dcs_case *c, int row) {
    const ladder_rung_row *r = &c->rows[row];
    if (r->launcher)
        return ((ladder_dcs_gpu_fn)r->launcher)(c->plan.d_xyzq, c->plan.n, &c->plan.geometry, c->plan.d_out,
                                                c->plan.queue.stream);
    return md_cuda_dcs_plan_enqueue(&c->plan);
}

static md_status ladder_dcs_gpu_run(void *ctx, int row) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    md_status st = ladder_dcs_gpu_enqueue(c, row);
    cudaError_t e;
    if (st == MD_OK) st = md_cuda_dcs_plan_sync(&c->plan, NULL);
    if (st == MD_OK && (e = cudaMemcpy(c->h_out, c->plan.d_out, c->plan.out_count * sizeof(float),
                                       cudaMemcpyDeviceToHost)) != cudaSuccess)
        st = md_cuda_error(e, "cudaMemcpy(map)", __FILE__, __LINE__);
    return st;
}

static md_status ladder_dcs_gpu_check(void *ctx, int row, double *error) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    (void)row;
    *error = ladder_dcs_error(c, c->h_out, c->plan.out_dims);
    return MD_OK;
}

static md_status ladder__dcs_gpu_once(void *ctx, cudaStream_t stream) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    (void)stream; /* md_cuda_bench runs on the plan's own stream (desc.stream) */
    return ladder_dcs_gpu_enqueue(c, c->row);
}

/* Enqueues only, timed with events on the plan's stream (md_cuda_bench: warm-up, L2 flushed,
 * median); a slow rung (reps <= 3) gets one warm-up run instead of the default two. */
static md_status ladder_dcs_gpu_time(void *ctx, int row, int reps, double *seconds) {
    ladder_dcs_case *c = (ladder_dcs_case *)ctx;
    md_cuda_bench_desc d;
    md_status st;
    c->row = row;
    memset(&d, 0, sizeof d);
    d.reps = reps;
    d.warmup = reps <= 3 ? 1 : 0;
    d.stream = c->plan.queue.stream;
    if ((st = md_cuda_bench(ladder__dcs_gpu_once, c, &d, seconds)) != MD_OK) return st;
    return md_cuda_dcs_plan_sync(&c->plan, NULL);
}

static void ladder_dcs_gpu_teardown(void *ctx, int row) {
    (void)row;
    md_cuda_dcs_plan_destroy(&((ladder_dcs_case *)ctx)->plan);
}

static const ladder_ops ladder_dcs_gpu_ops = {ladder_dcs_gpu_setup, ladder_dcs_gpu_poison, ladder_dcs_gpu_run,
                                              ladder_dcs_gpu_check, ladder_dcs_gpu_time, ladder_dcs_gpu_teardown};

/* Start of a GPU chapter: check the device and print SKIP without one. Writes the device's
 * name to device. Returns -1 to go on, else the exit status (0 after SKIP). */
static int ladder_gpu_device(char *device, size_t cap) {
    md_cuda_device_info info;
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    if (md_cuda_get_device_info(0, &info) != MD_OK) {
        printf("FAIL: %s\n", md_last_error());
        return 1;
    }
    snprintf(device, cap, "%s (%d SMs)", info.name, info.sm_count);
    return -1;
}

/* Start of a Coulomb GPU chapter (02-04): parse the options, check the device, measure the MUFU
 * rsqrt ceiling (NaN if it cannot be), open the table. Returns -1 to go on, else the exit
 * status (SKIP and --help exit 0). */
static int ladder_dcs_gpu_begin(ladder *l, ladder_opts *o, int argc, char **argv, const char *usage,
                                const char *chapter, const char *title, char *device, size_t device_cap,
                                double *ceiling) {
    int rc = ladder_parse(o, argc, argv, usage);
    if (rc != 0) return rc > 0 ? 0 : 2;
    if ((rc = ladder_gpu_device(device, device_cap)) >= 0) return rc;
    if (o->quick) md_cuda_ceilings_set_effort(0.05);
    if (md_cuda_ceiling_rsqrt(ceiling) != MD_OK) {
        printf("note: the rsqrt ceiling could not be measured (%s); ceiling column left empty\n", md_last_error());
        *ceiling = NAN;
    }
    ladder_begin(l, o, chapter, title, "atom-evals/s", "atoms*points", device);
    if (isfinite(*ceiling)) printf("(ceiling: measured MUFU rsqrt rate %.4g rsqrt/s = 1 atom-eval each)\n", *ceiling);
    return -1;
}
#endif /* __CUDACC__ */

/* Run every selected row of a Coulomb table: CPU rows (md_dcs rungs, ladder_dcs_cpu_fn
 * launchers) and, in a CUDA build, GPU rows. Work: atoms x grid points (padding not counted).
 * A row whose rung is cpu_simple with no reference yet becomes the reference. GPU rows are
 * timed over reps runs (scatter: at most 3), CPU rows over cpu_reps; the ceiling column is for
 * GPU rows. Returns the number of rows that failed. */
static int ladder_dcs_run(ladder *l, ladder_dcs_case *c, int nrows, double ceiling, int reps, int cpu_reps) {
    int i, failed = 0;
    ladder_measure m;
    m.work = (double)c->sys.n * (double)md_grid_count(&c->grid);
    m.size = (long long)m.work;
    m.tol = c->tol;
    for (i = 0; i < nrows; i++) {
        const ladder_rung_row *r = &c->rows[i];
        const md_dcs_variant v = (md_dcs_variant)r->variant;
        const int is_ref = !c->ref && v == MD_DCS_CPU_SIMPLE && !r->launcher;
        const ladder_ops *ops = &ladder_dcs_cpu_ops;
        if (!is_ref && !ladder_selected(l, r->name)) continue;
        if (!c->ref && !is_ref) { /* --only left the reference row out: compute it here */
            md_status st = ladder_dcs_reference(c);
            if (st != MD_OK) {
                ladder_row_error(l, r->name, md_last_error());
                failed++;
                continue;
            }
        }
        m.ceiling = md_dcs_variant_is_gpu(v) ? ceiling : NAN;
        m.reps = md_dcs_variant_is_gpu(v) ? reps : cpu_reps;
        if (md_dcs_variant_is_gpu(v)) {
#ifdef __CUDACC__
            ops = &ladder_dcs_gpu_ops;
            if (v == MD_DCS_GPU_SCATTER && reps > 3) m.reps = 3; /* n atomics per point: slow */
#else
            ladder_row_error(l, r->name, "a GPU rung in a program built without CUDA");
            failed++;
            continue;
#endif
        }
        failed += !ladder_rung(l, ops, c, i, r->name, &m);
    }
    return failed;
}

#if defined(__GNUC__) || defined(__clang__)
/* Not every chapter uses every helper. */
static void ladder__unused(void) __attribute__((unused));
static void ladder__unused(void) {
    (void)ladder_parse;
    (void)ladder_begin;
    (void)ladder_row;
    (void)ladder_json;
    (void)ladder_row_error;
    (void)ladder_row_skip;
    (void)ladder_end;
    (void)ladder_time_cpu;
    (void)ladder_rung;
    (void)ladder_selected;
    (void)ladder_dcs_system;
    (void)ladder_dcs_case_make;
    (void)ladder_dcs_case_free;
    (void)ladder_dcs_run;
    (void)ladder_dcs_error;
    (void)&ladder_dcs_cpu_ops;
#ifdef __CUDACC__
    (void)ladder_dcs_gpu_begin;
    (void)ladder_gpu_device;
    (void)&ladder_dcs_gpu_ops;
#endif
}
#endif

#endif /* LADDER_H */
