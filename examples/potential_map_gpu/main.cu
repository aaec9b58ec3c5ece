/* examples/potential_map_gpu - the electrostatic potential map of a PQR file, on the GPU,
 * written as OpenDX (VMD, PyMOL and Chimera read it).
 *
 *   potential_map_gpu --pqr protein.pqr --out potential.dx
 *   potential_map_gpu --random 100000 --out random.dx        100,000 random charges
 *   options: --grid N (points per edge, default 128)  --margin NM (default 1.0)
 *            --variant gpu_hybrid (default)|gpu_l1|...  --chunks K (progress steps, default 10)
 *            --help
 *
 * The grid covers the atoms' bounding box plus the margin. The atoms go to the GPU once;
 * the map is computed chunk of atoms by chunk of atoms (each chunk one md_cuda_dcs_device
 * call over the whole grid, so every call still fills the GPU), with a progress line per
 * chunk, and the chunk maps are added on the host in double. At the end 64 random grid
 * points are checked against md_dcs_simple (double) and the map is written with md_write_dx.
 * No GPU: prints "SKIP: <reason>" and exits 0, after reading the input (a missing or bad
 * file is reported, exit status 1, on any machine). A bad option: exit status 2, naming it. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "../potential_map_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE                                                                                      \
    "usage: %s (--pqr FILE | --random N) [--out FILE.dx] [--grid N] [--margin NM] [--variant NAME]"   \
    " [--chunks K]\n"                                                                               \
    "  --pqr FILE     atoms with charges (PQR, as PDB2PQR writes it)\n"                              \
    "  --random N     N random charges instead (1 .. 100,000,000), seed 2026\n"                      \
    "  --out FILE.dx  write the map as OpenDX (default: compute and check only)\n"                   \
    "  --grid N       points per edge, 2 .. 1024 (default 128)\n"                                    \
    "  --margin NM    space around the atoms' bounding box in nm (default 1.0)\n"                    \
    "  --variant NAME a GPU rung: gpu_gather ... gpu_hybrid (default gpu_hybrid)\n"                  \
    "  --chunks K     progress steps: the atoms in K chunks (default 10)\n"                          \
    "No GPU: prints \"SKIP: <reason>\" and exits 0 (after reading and checking the input).\n"

#define CUDA_OR_FAIL(call)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            md_cuda_error(e_, #call, __FILE__, __LINE__);                                          \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* The options of this program beyond the shared ones. */
typedef struct gpu_opts {
    int chunks;
    md_dcs_variant variant;
} gpu_opts;

static int gpu_option(const char *prog, const char *opt, const char *val, void *ctx) {
    gpu_opts *g = (gpu_opts *)ctx;
    long lv;
    int v;
    if (strcmp(opt, "--chunks") == 0) {
        if (!map_whole(prog, opt, val, 1, 1000000, &lv)) return 0;
        g->chunks = (int)lv;
        return 1;
    }
    for (v = 0; v < MD_DCS_VARIANT_COUNT; v++) /* --variant */
        if (strcmp(val, md_dcs_variant_name((md_dcs_variant)v)) == 0) break;
    if (v == MD_DCS_VARIANT_COUNT || !md_dcs_variant_is_gpu((md_dcs_variant)v)) {
        fprintf(stderr, "%s: --variant: '%s' is not a GPU rung (gpu_gather ... gpu_hybrid)\n", prog, val);
        return 0;
    }
    g->variant = (md_dcs_variant)v;
    return 1;
}

int main(int argc, char **argv) {
    static const char *const extra[] = {"--chunks", "--variant", NULL};
    map_opts o;
    gpu_opts g = {10, MD_DCS_GPU_HYBRID}; /* the fastest rung (tutorial 04) */
    const char *out;
    int n, chunks, i, c, d[3];
    double h[3], t0, t_gpu = 0.0, *sum = NULL, err;
    md_dcs_variant variant;
    md_system sys;
    md_grid grid;
    md_float4 *d_xyzq = NULL;
    float *d_out = NULL, *h_out = NULL;
    size_t count, oc, p;
    memset(&sys, 0, sizeof sys);
    memset(&grid, 0, sizeof grid);
    if ((i = map_begin(argc, argv, "potential_map_gpu", USAGE, extra, gpu_option, &g, &o, &sys, &grid)) >= 0) return i;
    out = o.out;
    n = o.n;
    chunks = g.chunks;
    variant = g.variant;
    for (c = 0; c < 3; c++) h[c] = grid.spacing[c];
    count = md_grid_count(&grid);
    printf("%d atoms (total charge %.3f e); grid %d^3, spacing %.4f x %.4f x %.4f nm; %s; %.3g atom-evals\n", sys.n,
           md_system_charge(&sys), n, h[0], h[1], h[2], md_dcs_variant_name(variant), (double)sys.n * count);

    /* device buffers: the atoms once, one (padded) map */
    if (md_cuda_dcs_out_dims(variant, &grid, d) != MD_OK) goto fail;
    oc = md_cuda_dcs_out_count(variant, &grid);
    sum = (double *)md_alloc_array(count, sizeof(double));
    h_out = (float *)md_alloc_array(oc, sizeof(float));
    if (!sum || !h_out) goto fail;
    memset(sum, 0, count * sizeof(double));
    CUDA_OR_FAIL(cudaMalloc((void **)&d_xyzq, (size_t)sys.n * sizeof(md_float4)));
    CUDA_OR_FAIL(cudaMalloc((void **)&d_out, oc * sizeof(float)));
    CUDA_OR_FAIL(cudaMemcpy(d_xyzq, sys.xyzq, (size_t)sys.n * sizeof(md_float4), cudaMemcpyHostToDevice));

    /* chunk by chunk of atoms, a progress line each */
    if (chunks > sys.n) chunks = sys.n;
    for (c = 0; c < chunks; c++) {
        const int a0 = (int)((long long)sys.n * c / chunks), a1 = (int)((long long)sys.n * (c + 1) / chunks);
        size_t k, j, ii;
        double dt;
        t0 = md_wall_seconds();
        if (md_cuda_dcs_device(variant, d_xyzq + a0, a1 - a0, &grid, d_out, 0) != MD_OK) goto fail;
        CUDA_OR_FAIL(cudaDeviceSynchronize());
        dt = md_wall_seconds() - t0;
        t_gpu += dt;
        CUDA_OR_FAIL(cudaMemcpy(h_out, d_out, oc * sizeof(float), cudaMemcpyDeviceToHost));
        for (k = 0; k < (size_t)n; k++) /* crop the padding while adding */
            for (j = 0; j < (size_t)n; j++)
                for (ii = 0; ii < (size_t)n; ii++)
                    sum[(k * n + j) * n + ii] += h_out[(k * d[1] + j) * d[0] + ii];
        printf("  chunk %2d/%d: atoms %7d..%7d  %8.2f ms  %8.3g atom-evals/s  %3.0f%% done\n", c + 1, chunks, a0,
               a1 - 1, 1e3 * dt, (double)(a1 - a0) * count / dt, 100.0 * (c + 1) / chunks);
        fflush(stdout);
    }
    for (p = 0; p < count; p++) grid.data[p] = (float)sum[p];
    printf("GPU time %.3f s: %.3g atom-evals/s (including synchronisation per chunk)\n", t_gpu,
           (double)sys.n * count / t_gpu);

    /* check 64 random points against the double reference */
    if (map_check_points(&sys, &grid, &err) != MD_OK) goto fail;
    printf("check: 64 random points vs md_dcs_simple (double): max rel err %.2e (%s, tolerance 1e-4)\n", err,
           err <= 1e-4 ? "ok" : "FAIL");
    if (!(err <= 1e-4)) goto fail_quiet;

    if (out) {
        char comment[256];
        snprintf(comment, sizeof comment, "potential (kJ/mol/e) of %d charges, md.h %s", sys.n,
                 md_dcs_variant_name(variant));
        if (md_write_dx(out, &grid, comment) != MD_OK) goto fail;
        printf("wrote %s\n", out);
    }
    {
        cudaError_t e1 = cudaFree(d_xyzq), e2 = cudaFree(d_out);
        d_xyzq = NULL;
        d_out = NULL;
        if (e1 != cudaSuccess || e2 != cudaSuccess) {
            md_cuda_error(e1 != cudaSuccess ? e1 : e2, "cudaFree", __FILE__, __LINE__);
            goto fail;
        }
    }
    md_free(sum);
    md_free(h_out);
    md_grid_free(&grid);
    md_system_free(&sys);
    return 0;
fail:
    fprintf(stderr, "potential_map_gpu: %s\n", md_last_error());
fail_quiet:
    if (d_xyzq) (void)cudaFree(d_xyzq); /* already failing: the first error is the one reported */
    if (d_out) (void)cudaFree(d_out);
    md_free(sum);
    md_free(h_out);
    md_grid_free(&grid);
    md_system_free(&sys);
    return 1;
}
