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
#include "../potential_map_common.h"

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

/* A progress line every tenth of the tiles (called by the scheduler under its lock). */
static void progress(int done, int ntiles, void *arg) {
    const double t0 = *(const double *)arg;
    if (done == ntiles || (done * 10) / ntiles != ((done - 1) * 10) / ntiles) {
        printf("  %4d/%d slabs  %3.0f%%  %7.2f s\n", done, ntiles, 100.0 * done / ntiles, md_wall_seconds() - t0);
        fflush(stdout);
    }
}

/* The options of this program beyond the shared ones. */
typedef struct multi_opts {
    int workers, planes;
    md_dcs_variant variant;
} multi_opts;

static int multi_option(const char *prog, const char *opt, const char *val, void *ctx) {
    multi_opts *m = (multi_opts *)ctx;
    long lv;
    int v;
    if (strcmp(opt, "--workers") == 0 || strcmp(opt, "--planes") == 0) {
        const int w = strcmp(opt, "--workers") == 0;
        if (!map_whole(prog, opt, val, 1, w ? MD_CUDA_TILES_MAX_WORKERS : 1024, &lv)) return 0;
        *(w ? &m->workers : &m->planes) = (int)lv;
        return 1;
    }
    for (v = 0; v < MD_DCS_VARIANT_COUNT; v++) /* --variant */
        if (strcmp(val, md_dcs_variant_name((md_dcs_variant)v)) == 0) break;
    if (v != MD_DCS_GPU_SHARED && v != MD_DCS_GPU_L1 && v != MD_DCS_GPU_GATHER && v != MD_DCS_GPU_SCATTER) {
        fprintf(stderr, "%s: --variant: '%s' is not one of gpu_shared, gpu_l1, gpu_gather, gpu_scatter\n", prog, val);
        return 0;
    }
    m->variant = (md_dcs_variant)v;
    return 1;
}

int main(int argc, char **argv) {
    static const char *const extra[] = {"--workers", "--planes", "--variant", NULL};
    map_opts o;
    multi_opts m = {0, 8, MD_DCS_GPU_SHARED};
    const char *out;
    int n, workers, planes, i, c, ngpu = 0, devices[MD_CUDA_TILES_MAX_WORKERS];
    double h[3], t0, err;
    md_dcs_variant variant;
    md_system sys;
    md_grid grid;
    md_cuda_dcs_tiles job;
    md_cuda_tiles_stats stats;
    size_t count;
    memset(&sys, 0, sizeof sys);
    memset(&grid, 0, sizeof grid);
    memset(&job, 0, sizeof job);
    if ((i = map_begin(argc, argv, "potential_map_multi", USAGE, extra, multi_option, &m, &o, &sys, &grid)) >= 0) return i;
    out = o.out;
    n = o.n;
    workers = m.workers;
    planes = m.planes;
    variant = m.variant;
    for (c = 0; c < 3; c++) h[c] = grid.spacing[c];
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
    if (map_check_points(&sys, &grid, &err) != MD_OK) goto fail;
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
