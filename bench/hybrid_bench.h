/* bench/hybrid_bench.h - the harness shared by bench/hybrid_shapes.cu and bench/hybrid_rule.cu:
 * 3072 random atoms (seed 5) in md.h's constant buffer, 256 x 256 x 132 points 0.1 nm apart,
 * each kernel timed with md_cuda_bench (median of 7, L2 flushed), its rate printed against the
 * measured MUFU rsqrt ceiling, and its map compared with the first kernel's (max rel error
 * <= 1e-5, else FAIL). Include after md_cuda.cu.h with the implementation. */
#ifndef HYBRID_BENCH_H
#define HYBRID_BENCH_H
#include <stdio.h>
#include <stdlib.h>

/** Enqueue one kernel over the whole grid. */
typedef void (*hb_launch)(int n, float *d, int nx, int ny, int nz, cudaStream_t s);
typedef struct hb_entry {
    const char *name;
    hb_launch launch;
} hb_entry;

typedef struct hb_ctx {
    const hb_entry *e;
    float *d;
    int n, nx, ny, nz;
} hb_ctx;

static md_status hb_run_once(void *ctx, cudaStream_t s) {
    const hb_ctx *c = (const hb_ctx *)ctx;
    c->e->launch(c->n, c->d, c->nx, c->ny, c->nz, s);
    MD_CUDA_TRY_LAUNCH("benchmark kernel");
    return MD_OK;
}

/* Time every entry; returns the process exit status. `what` ends the header line; `width`
 * is the name column's width. */
static int hb_run_table(const hb_entry *entries, int count, const char *what, int width) {
    const int n = MD_DCS_CONST_CHUNK, nx = 256, ny = 256, nz = 132;
    const size_t points = (size_t)nx * ny * nz;
    md_float4 *atoms = NULL;
    float *d = NULL, *h = NULL, *ref = NULL;
    double ceiling, t, err;
    md_rng rng;
    cudaError_t e;
    int i, rc = 1;
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    atoms = (md_float4 *)malloc((size_t)n * sizeof *atoms);
    h = (float *)malloc(points * sizeof(float));
    ref = (float *)malloc(points * sizeof(float));
    if (!atoms || !h || !ref) {
        printf("FAIL: out of memory\n");
        goto done;
    }
    md_rng_seed(&rng, 5);
    for (i = 0; i < n; i++) {
        atoms[i].x = (float)(25.5 * md_rng_uniform(&rng));
        atoms[i].y = (float)(25.5 * md_rng_uniform(&rng));
        atoms[i].z = (float)(13.1 * md_rng_uniform(&rng));
        atoms[i].w = (float)(2.0 * md_rng_uniform(&rng) - 1.0);
    }
    if ((e = cudaMemcpyToSymbol(md__dcs_catoms, atoms, (size_t)n * sizeof *atoms)) != cudaSuccess ||
        (e = cudaMalloc((void **)&d, points * sizeof(float))) != cudaSuccess) {
        md_cuda_error(e, "cudaMemcpyToSymbol/cudaMalloc", __FILE__, __LINE__);
        printf("FAIL: %s\n", md_last_error());
        goto done;
    }
    if (md_cuda_ceiling_rsqrt(&ceiling) != MD_OK) {
        printf("FAIL: %s\n", md_last_error());
        goto done;
    }
    printf("MUFU rsqrt ceiling %.4g /s; %d atoms on %d x %d x %d points%s\n", ceiling, n, nx, ny, nz, what);
    for (i = 0; i < count; i++) {
        hb_ctx c = {&entries[i], d, n, nx, ny, nz};
        md_cuda_bench_desc bd = {0, 7, 0, 0};
        if (md_cuda_bench(hb_run_once, &c, &bd, &t) != MD_OK) {
            printf("FAIL: %s\n", md_last_error());
            goto done;
        }
        if ((e = cudaMemcpy(i == 0 ? ref : h, d, points * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess) {
            md_cuda_error(e, "cudaMemcpy", __FILE__, __LINE__);
            printf("FAIL: %s\n", md_last_error());
            goto done;
        }
        err = i == 0 ? 0.0 : md_max_rel_error(h, ref, points);
        printf("%-*s %8.3f ms %10.4g atom-evals/s %6.3f x ceiling  max rel err vs first %.2e\n", width,
               entries[i].name, 1e3 * t, (double)n * points / t, (double)n * points / t / ceiling, err);
        if (!(err <= 1e-5)) {
            printf("FAIL: %s disagrees with the first\n", entries[i].name);
            goto done;
        }
    }
    rc = 0;
done:
    if (d && cudaFree(d) != cudaSuccess) rc = 1;
    free(atoms);
    free(h);
    free(ref);
    return rc;
}
#endif
