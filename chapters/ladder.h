/* ladder.h - the harness every chapter program uses (C11 and C++17).
 *
 * A chapter runs a ladder of rungs (variants) of one kernel on a default
 * system, checks each against the reference, times it and prints one table:
 *
 *   variant          time (ms)      rate (unit)  speedup  ceiling  max rel err  check
 *
 * and, with --json FILE, appends one md_bench JSON line per rung (md.h's
 * md_bench_json). Options every chapter program accepts:
 *   --quick        small sizes, every rung checked, exit status 1 if any fails
 *   --json FILE    append one JSON line per rung to FILE
 *   --reps N       timed repetitions per rung (median reported)
 *   --help
 * The harness is program code, not library code: it prints. The library
 * (md.h, md_cuda.cu.h) never does. */
#ifndef LADDER_H
#define LADDER_H

#include "md.h"
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
    const char *prog; /* argv[0] */
} ladder_opts;

typedef struct ladder {
    ladder_opts opts;
    const char *chapter;   /* e.g. "01_sequential_coulomb" */
    const char *unit;      /* rate unit, e.g. "atom-evals/s" */
    const char *size_unit; /* e.g. "atoms*points" */
    const char *device;    /* e.g. "cpu: 2 threads" */
    double base_time;      /* time of the first timed rung, for the speedup column */
    int failed, rows;
} ladder;

/* Parse the common options; extra chapter options are not accepted. Returns 0
 * on success, 1 after --help, -1 on a bad argument (message printed). */
static int ladder_parse(ladder_opts *o, int argc, char **argv, const char *usage) {
    int i;
    memset(o, 0, sizeof *o);
    o->prog = argv[0];
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) o->quick = 1;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) o->json = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            char *end;
            long r = strtol(argv[++i], &end, 10);
            if (*end || r < 1 || r > 1000) {
                fprintf(stderr, "%s: --reps wants an integer in 1..1000, got '%s'\n", argv[0], argv[i]);
                return -1;
            }
            o->reps = (int)r;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--quick] [--json FILE] [--reps N]\n%s\n", argv[0], usage ? usage : "");
            return 1;
        } else {
            fprintf(stderr, "%s: unknown argument '%s' (try --help)\n", argv[0], argv[i]);
            return -1;
        }
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

/* One row. time_s <= 0 or NaN: not timed. ceiling: the bounding unit's
 * measured rate in the same unit (NaN: none). error: max relative error vs
 * the reference, md_max_rel_error (NaN: this rung is the reference). tol: the rung passes if
 * error <= tol. A failed rung is printed with FAIL and counted, and its rate
 * is not written to JSON (a fast rate for a wrong result is never reported). */
static int ladder_json(ladder *l, const char *variant, long long size, double time_s, double rate, double ceiling,
                       double error);

static int ladder_row(ladder *l, const char *variant, long long size, double time_s, double work,
                      double ceiling, double error, double tol) {
    int ok = isnan(error) || error <= tol;
    double rate = (time_s > 0.0) ? work / time_s : NAN;
    char frac[16], err[16];
    if (l->rows == 0 && time_s > 0.0) l->base_time = time_s;
    if (isfinite(ceiling) && ceiling > 0.0 && isfinite(rate))
        snprintf(frac, sizeof frac, rate < 0.01 * ceiling ? "%6.2f%%" : "%6.1f%%", 100.0 * rate / ceiling);
    else snprintf(frac, sizeof frac, "%7s", "-");
    if (isnan(error)) snprintf(err, sizeof err, "%12s", "(reference)");
    else snprintf(err, sizeof err, "%12.2e", error);
    printf("%-16s %11.3f %14.4g %7.2fx %8s %s  %s\n", variant, 1e3 * time_s, rate,
           (l->base_time > 0.0 && time_s > 0.0) ? l->base_time / time_s : NAN, frac, err,
           ok ? (isnan(error) ? "ref" : "ok") : "FAIL");
    fflush(stdout);
    l->rows++;
    if (!ok) {
        l->failed++;
        printf("    FAIL %s: error %.3e exceeds tolerance %.1e\n", variant, error, tol);
        return 0;
    }
    return ladder_json(l, variant, size, time_s, rate, ceiling, error);
}

/* With --json FILE, append one md_bench line for a passed measurement (the table's
 * chapter, units and device); a file that cannot be appended to counts as a failure.
 * Returns 1 if all went well (or there is no --json). */
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

/* A rung that could not run (error status): printed and counted as failed. */
static void ladder_row_error(ladder *l, const char *variant, const char *why) {
    printf("%-16s FAIL: %s\n", variant, why);
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

/* Time a CPU function: one warm-up run, then the median of reps runs. The
 * function returns md_status; a failure stops timing and returns -1. */
typedef md_status (*ladder_cpu_fn)(void *ctx);
static double ladder_time_cpu(ladder_cpu_fn fn, void *ctx, int reps) {
    double t[64];
    int i;
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    if (fn(ctx) != MD_OK) return -1.0;
    for (i = 0; i < reps; i++) {
        double t0 = md_wall_seconds();
        if (fn(ctx) != MD_OK) return -1.0;
        t[i] = md_wall_seconds() - t0;
    }
    return md_median(t, reps);
}

/* The default system of the Coulomb chapters (01-04): natoms random charges,
 * |q| <= 1 e, neutral, seed LADDER_SEED, in a cube whose edge is
 * (n - 1) * spacing, and a grid of n^3 points covering it from the origin. */
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
    (void)ladder_dcs_system;
}
#endif

#endif /* LADDER_H */
