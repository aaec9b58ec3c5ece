/* examples/potential_map_multi - the electrostatic potential map of a PQR file over every GPU of
 * the machine, written as OpenDX (VMD, PyMOL and Chimera read it).
 *
 *   potential_map_multi --pqr protein.pqr --out potential.dx
 *   potential_map_multi --random 100000 --workers 4 --out random.dx
 *   options: --grid N (points per edge, default 128)  --margin NM (default 1.0)
 *            --workers W (default: one per GPU)  --planes P (z-planes a tile, default 8)
 *            --variant gpu_shared (default)|gpu_l1|gpu_gather  --help
 *
 * The grid covers the atoms' bounding box plus the margin. It is split into z-slabs of P planes
 * (md_cuda_dcs_tiles); W workers, spread round robin over the GPUs (md_cuda_tiles_spread), take
 * the slabs from the dynamic tile scheduler (md_cuda_tiles_run: a failed slab is retried on
 * another worker), each with its own plan, made once. A progress line every tenth of the
 * slabs; at the end the tiles each worker took, 64 random grid points checked against
 * md_dcs_simple (double), and the map written with md_write_dx. No GPU: prints "SKIP: <reason>"
 * and exits 0, after reading the input (a missing or bad file: exit status 1). A bad option:
 * exit status 2, naming it. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE                                                                                      \
    "usage: %s (--pqr FILE | --random N) [--out FILE.dx] [--grid N] [--margin NM] [--workers W]"     \
    " [--planes P] [--variant NAME]\n"                                                              \
    "  --pqr FILE     atoms with charges (PQR, as PDB2PQR writes it)\n"                              \
    "  --random N     N random charges instead (1 .. 100,000,000), seed 2026\n"                      \
    "  --out FILE.dx  write the map as OpenDX (default: compute and check only)\n"                   \
    "  --grid N       points per edge, 2 .. 1024 (default 128)\n"                                    \
    "  --margin NM    space around the atoms' bounding box in nm (default 1.0)\n"                    \
    "  --workers W    host workers, 1 .. 64, spread over the GPUs (default: one per GPU)\n"          \
    "  --planes P     z-planes a tile, 1 .. 1024 (default 8)\n"                                      \
    "  --variant NAME gpu_shared (default), gpu_l1, gpu_gather or gpu_scatter (rungs without\n"      \
    "                 __constant__ memory, which one process can give to one plan only)\n"         \
    "No GPU: prints \"SKIP: <reason>\" and exits 0 (after reading and checking the input).\n"

/* A whole number in [lo, hi] for option @p opt: 1, or 0 after saying what was wrong. */
static int whole(const char *prog, const char *opt, const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    if (!*s || *end || errno || *v < lo || *v > hi) {
        fprintf(stderr, "%s: %s: expected a whole number from %ld to %ld, got '%s'\n", prog, opt, lo, hi, s);
        return 0;
    }
    return 1;
}

/* A progress line every tenth of the tiles (called by the scheduler under its lock). */
static void progress(int done, int ntiles, void *arg) {
    const double t0 = *(const double *)arg;
    if (done == ntiles || (done * 10) / ntiles != ((done - 1) * 10) / ntiles) {
        printf("  %4d/%d slabs  %3.0f%%  %7.2f s\n", done, ntiles, 100.0 * done / ntiles, md_wall_seconds() - t0);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    const char *pqr = NULL, *out = NULL;
    long nrandom = 0, lv;
    int n = 128, workers = 0, planes = 8, i, v, c, ngpu = 0, devices[MD_CUDA_TILES_MAX_WORKERS];
    double margin = 1.0, lo[3], hi[3], origin[3], h[3], t0, err;
    md_dcs_variant variant = MD_DCS_GPU_SHARED;
    md_system sys;
    md_grid grid, probe;
    md_rng rng;
    md_cuda_dcs_tiles job;
    md_cuda_tiles_stats stats;
    float got[64], want[64];
    size_t count;
    memset(&sys, 0, sizeof sys);
    memset(&grid, 0, sizeof grid);
    memset(&job, 0, sizeof job);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf(USAGE, argv[0]);
            return 0;
        }
        if (strcmp(a, "--pqr") && strcmp(a, "--random") && strcmp(a, "--out") && strcmp(a, "--grid") &&
            strcmp(a, "--margin") && strcmp(a, "--workers") && strcmp(a, "--planes") && strcmp(a, "--variant")) {
            fprintf(stderr, "%s: %s '%s' (try --help)\n", argv[0], a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "%s: missing value after '%s' (try --help)\n", argv[0], a);
            return 2;
        }
        i++;
        if (strcmp(a, "--pqr") == 0) pqr = val;
        else if (strcmp(a, "--out") == 0) out = val;
        else if (strcmp(a, "--random") == 0) {
            if (!whole(argv[0], a, val, 1, 100000000, &nrandom)) return 2;
        } else if (strcmp(a, "--grid") == 0) {
            if (!whole(argv[0], a, val, 2, 1024, &lv)) return 2;
            n = (int)lv;
        } else if (strcmp(a, "--workers") == 0) {
            if (!whole(argv[0], a, val, 1, MD_CUDA_TILES_MAX_WORKERS, &lv)) return 2;
            workers = (int)lv;
        } else if (strcmp(a, "--planes") == 0) {
            if (!whole(argv[0], a, val, 1, 1024, &lv)) return 2;
            planes = (int)lv;
        } else if (strcmp(a, "--margin") == 0) {
            char *end;
            margin = strtod(val, &end);
            if (!*val || *end || !(margin >= 0.0) || !isfinite(margin)) {
                fprintf(stderr, "%s: --margin: expected a non-negative number of nm, got '%s'\n", argv[0], val);
                return 2;
            }
        } else { /* --variant */
            for (v = 0; v < MD_DCS_VARIANT_COUNT; v++)
                if (strcmp(val, md_dcs_variant_name((md_dcs_variant)v)) == 0) break;
            if (v != MD_DCS_GPU_SHARED && v != MD_DCS_GPU_L1 && v != MD_DCS_GPU_GATHER && v != MD_DCS_GPU_SCATTER) {
                fprintf(stderr, "%s: --variant: '%s' is not one of gpu_shared, gpu_l1, gpu_gather, gpu_scatter\n", argv[0],
                        val);
                return 2;
            }
            variant = (md_dcs_variant)v;
        }
    }
    if ((!pqr) == (nrandom <= 0)) {
        fprintf(stderr, "%s: give one of --pqr FILE or --random N (try --help)\n", argv[0]);
        return 2;
    }
    if (out && pqr && strcmp(out, pqr) == 0) {
        fprintf(stderr, "%s: --out '%s' would overwrite the input\n", argv[0], out);
        return 2;
    }

    /* atoms: read (and so check) the input before looking for a GPU */
    if (pqr) {
        if (md_read_pqr(pqr, &sys) != MD_OK) goto fail;
    } else {
        const double edge = cbrt((double)nrandom / 100.0), box[3] = {edge, edge, edge}; /* ~100 atoms per nm^3 */
        if (md_build_random_charges(&sys, (int)nrandom, box, 1.0, 2026) != MD_OK) goto fail;
    }
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        md_system_free(&sys);
        return 0;
    }
    for (c = 0; c < 3; c++) lo[c] = INFINITY, hi[c] = -INFINITY;
    for (i = 0; i < sys.n; i++) {
        const float x[3] = {sys.xyzq[i].x, sys.xyzq[i].y, sys.xyzq[i].z};
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
    if (md_grid_alloc(&grid, n, n, n, origin, h) != MD_OK) goto fail;
    count = md_grid_count(&grid);
    for (size_t k = 0; k < count; k++) grid.data[k] = NAN; /* a slab never written would show */
    if (md_cuda_tiles_spread(devices, 1, &ngpu) != MD_OK) goto fail;
    if (!workers) workers = ngpu < MD_CUDA_TILES_MAX_WORKERS ? ngpu : MD_CUDA_TILES_MAX_WORKERS;
    if (md_cuda_tiles_spread(devices, workers, NULL) != MD_OK) goto fail;
    printf("%d atoms (total charge %.3f e); grid %d^3, spacing %.4f x %.4f x %.4f nm; %s; %.3g atom-evals\n", sys.n,
           md_system_charge(&sys), n, h[0], h[1], h[2], md_dcs_variant_name(variant), (double)sys.n * count);
    if (md_cuda_dcs_tiles_create(&job, variant, sys.xyzq, sys.n, &grid, planes, workers, devices) != MD_OK) goto fail;
    printf("%d worker(s) on %d GPU(s); %d slabs of %d z-planes\n", workers, workers < ngpu ? workers : ngpu, job.ntiles,
           job.planes);
    t0 = md_wall_seconds();
    if (md_cuda_dcs_tiles_run(&job, progress, &t0, &stats) != MD_OK) goto fail;
    printf("done in %.3f s: %.3g atom-evals/s; slabs per worker:", stats.wall_s, (double)sys.n * count / stats.wall_s);
    for (i = 0; i < workers; i++) printf(" %d", stats.tiles_of[i]);
    printf("; retries %lld, retired workers %d\n", stats.retries, stats.retired);
    md_cuda_dcs_tiles_destroy(&job);

    /* check 64 random points against the double reference */
    md_rng_seed(&rng, 7);
    for (i = 0; i < 64; i++) {
        const int x = (int)(md_rng_uniform(&rng) * n), y = (int)(md_rng_uniform(&rng) * n),
                  z = (int)(md_rng_uniform(&rng) * n);
        double o[3];
        o[0] = origin[0] + x * h[0];
        o[1] = origin[1] + y * h[1];
        o[2] = origin[2] + z * h[2];
        if (md_grid_alloc(&probe, 1, 1, 1, o, h) != MD_OK) goto fail;
        if (md_dcs_simple(sys.xyzq, sys.n, &probe) != MD_OK) {
            md_grid_free(&probe);
            goto fail;
        }
        want[i] = probe.data[0];
        got[i] = grid.data[((size_t)z * n + y) * n + x];
        md_grid_free(&probe);
    }
    err = md_max_rel_error(got, want, 64);
    for (size_t k = 0; k < count; k++)
        if (isnan(grid.data[k])) err = INFINITY;
    printf("check: 64 random points vs md_dcs_simple (double): max rel err %.2e (%s, tolerance 1e-4; no point left "
           "unwritten)\n", err, err <= 1e-4 ? "ok" : "FAIL");
    if (!(err <= 1e-4)) goto fail_quiet;
    if (out) {
        char comment[256];
        snprintf(comment, sizeof comment, "potential (kJ/mol/e) of %d charges, md.h %s on %d worker(s)", sys.n,
                 md_dcs_variant_name(variant), workers);
        if (md_write_dx(out, &grid, comment) != MD_OK) goto fail;
        printf("wrote %s\n", out);
    }
    md_grid_free(&grid);
    md_system_free(&sys);
    return 0;
fail:
    fprintf(stderr, "potential_map_multi: %s\n", md_last_error());
fail_quiet:
    md_cuda_dcs_tiles_destroy(&job);
    md_grid_free(&grid);
    md_system_free(&sys);
    return 1;
}
