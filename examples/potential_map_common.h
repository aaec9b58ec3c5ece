/* examples/potential_map_common.h - what the GPU potential-map examples (potential_map_gpu,
 * potential_map_multi) share: option parsing of a whole number, the grid around the atoms, and
 * the closing check of 64 random points against md_dcs_simple. Program code: it prints.
 * Include it after md_cuda.cu.h (with its implementation defines). */
#ifndef POTENTIAL_MAP_COMMON_H
#define POTENTIAL_MAP_COMMON_H

#include "md_cuda.cu.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options both examples take. */
typedef struct map_opts {
    const char *pqr;  /* --pqr FILE */
    const char *out;  /* --out FILE.dx */
    long nrandom;     /* --random N */
    int n;            /* --grid N */
    double margin;    /* --margin NM */
} map_opts;

/* A program's own option: store @p val of @p opt in ctx; 1, or 0 after saying what was wrong. */
typedef int (*map_extra_fn)(const char *prog, const char *opt, const char *val, void *ctx);

/* A whole number in [lo, hi] for option opt: 1, or 0 after saying what was wrong. */
static int map_whole(const char *prog, const char *opt, const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    if (!*s || *end || errno || *v < lo || *v > hi) {
        fprintf(stderr, "%s: %s: expected a whole number from %ld to %ld, got '%s'\n", prog, opt, lo, hi, s);
        return 0;
    }
    return 1;
}

/* Parse argv: the shared options into o (defaults: grid 128, margin 1.0), the program's own
 * (names in extra, NULL-terminated, each with a value) through fn. Returns -1 to go on, else the
 * exit status: 0 after --help (usage printed with argv[0]), 2 after a bad argument (said). */
static int map_parse(int argc, char **argv, const char *usage, const char *const *extra, map_extra_fn fn, void *ctx,
                     map_opts *o) {
    static const char *const shared[] = {"--pqr", "--random", "--out", "--grid", "--margin", NULL};
    long lv;
    int i, k, mine;
    memset(o, 0, sizeof *o);
    o->n = 128;
    o->margin = 1.0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf(usage, argv[0]);
            return 0;
        }
        for (k = 0, mine = 0; shared[k]; k++) mine |= strcmp(a, shared[k]) == 0;
        for (k = 0; !mine && extra[k]; k++)
            if (strcmp(a, extra[k]) == 0) mine = 2;
        if (!mine) {
            fprintf(stderr, "%s: %s '%s' (try --help)\n", argv[0], a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "%s: missing value after '%s' (try --help)\n", argv[0], a);
            return 2;
        }
        i++;
        if (mine == 2) {
            if (!fn(argv[0], a, val, ctx)) return 2;
        } else if (strcmp(a, "--pqr") == 0) o->pqr = val;
        else if (strcmp(a, "--out") == 0) o->out = val;
        else if (strcmp(a, "--random") == 0) {
            if (!map_whole(argv[0], a, val, 1, 100000000, &o->nrandom)) return 2;
        } else if (strcmp(a, "--grid") == 0) {
            if (!map_whole(argv[0], a, val, 2, 1024, &lv)) return 2;
            o->n = (int)lv;
        } else { /* --margin */
            char *end;
            o->margin = strtod(val, &end);
            if (!*val || *end || !(o->margin >= 0.0) || !isfinite(o->margin)) {
                fprintf(stderr, "%s: --margin: expected a non-negative number of nm, got '%s'\n", argv[0], val);
                return 2;
            }
        }
    }
    if ((!o->pqr) == (o->nrandom <= 0)) {
        fprintf(stderr, "%s: give one of --pqr FILE or --random N (try --help)\n", argv[0]);
        return 2;
    }
    if (o->out && o->pqr && strcmp(o->out, o->pqr) == 0) {
        fprintf(stderr, "%s: --out '%s' would overwrite the input\n", argv[0], o->out);
        return 2;
    }
    return -1;
}

/* The atoms: the PQR file, or nrandom random charges (seed 2026) at about 100 atoms per nm^3,
 * like a protein in water. */
static md_status map_read_atoms(const map_opts *o, md_system *sys) {
    const double edge = cbrt((double)o->nrandom / 100.0), box[3] = {edge, edge, edge};
    if (o->pqr) return md_read_pqr(o->pqr, sys);
    return md_build_random_charges(sys, (int)o->nrandom, box, 1.0, 2026);
}

/* An n^3 grid covering the atoms' bounding box plus margin (nm) on every side. */
static md_status map_grid_around(const md_system *sys, int n, double margin, md_grid *grid) {
    double lo[3], hi[3], origin[3], h[3];
    int i, c;
    for (c = 0; c < 3; c++) lo[c] = INFINITY, hi[c] = -INFINITY;
    for (i = 0; i < sys->n; i++) {
        const float x[3] = {sys->xyzq[i].x, sys->xyzq[i].y, sys->xyzq[i].z};
        for (c = 0; c < 3; c++) {
            if (x[c] < lo[c]) lo[c] = x[c];
            if (x[c] > hi[c]) hi[c] = x[c];
        }
    }
    for (c = 0; c < 3; c++) {
        origin[c] = lo[c] - margin;
        h[c] = (hi[c] - lo[c] + 2.0 * margin) / (n - 1);
        if (!(h[c] > 0.0)) h[c] = 0.1;
    }
    return md_grid_alloc(grid, n, n, n, origin, h);
}

/* Max relative error of 64 random points of grid against md_dcs_simple (double) into err. */
static md_status map_check_points(const md_system *sys, const md_grid *grid, double *err) {
    float got[64], want[64];
    md_grid probe;
    md_rng rng;
    md_status st;
    int i;
    md_rng_seed(&rng, 7);
    for (i = 0; i < 64; i++) {
        const int x = (int)(md_rng_uniform(&rng) * grid->n[0]), y = (int)(md_rng_uniform(&rng) * grid->n[1]),
                  z = (int)(md_rng_uniform(&rng) * grid->n[2]);
        double o[3];
        o[0] = grid->origin[0] + x * grid->spacing[0];
        o[1] = grid->origin[1] + y * grid->spacing[1];
        o[2] = grid->origin[2] + z * grid->spacing[2];
        if ((st = md_grid_alloc(&probe, 1, 1, 1, o, grid->spacing)) != MD_OK) return st;
        st = md_dcs_simple(sys->xyzq, sys->n, &probe);
        want[i] = probe.data[0];
        got[i] = grid->data[((size_t)z * grid->n[1] + y) * grid->n[0] + x];
        md_grid_free(&probe);
        if (st != MD_OK) return st;
    }
    *err = md_max_rel_error(got, want, 64);
    return MD_OK;
}

/* The start of both programs: parse (map_parse), read the atoms (and so check the input) before
 * looking for a GPU, print "SKIP: <reason>" without one, make the grid around the atoms. Returns
 * -1 to go on (sys and grid made), else the exit status (a failure printed as "name: why"). */
static int map_begin(int argc, char **argv, const char *name, const char *usage, const char *const *extra,
                     map_extra_fn fn, void *ctx, map_opts *o, md_system *sys, md_grid *grid) {
    int rc = map_parse(argc, argv, usage, extra, fn, ctx, o);
    if (rc >= 0) return rc;
    if (map_read_atoms(o, sys) != MD_OK) {
        fprintf(stderr, "%s: %s\n", name, md_last_error());
        return 1;
    }
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        md_system_free(sys);
        return 0;
    }
    if (map_grid_around(sys, o->n, o->margin, grid) != MD_OK) {
        fprintf(stderr, "%s: %s\n", name, md_last_error());
        md_system_free(sys);
        return 1;
    }
    return -1;
}

#endif /* POTENTIAL_MAP_COMMON_H */
