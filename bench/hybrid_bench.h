/* bench/hybrid_bench.h - the harness shared by bench/hybrid_shapes.cu, bench/hybrid_rule.cu and
 * bench/hybrid_masks.cu: 3072 random atoms (seed 5) in an MD_DCS_GPU_HYBRID plan (one constant
 * chunk, so the upload puts them in the __constant__ buffer, where md_cuda_dcs_const_atom()
 * reads them), 256 x 256 x 132 points 0.1 nm apart, each entry enqueued on the plan's stream
 * into the plan's map and timed with md_cuda_bench (median of 7, L2 flushed), its rate printed
 * against the measured MUFU rsqrt ceiling, and its map compared with the first entry's (max rel
 * error <= 1e-5, else FAIL). Public API only. Include after md_cuda.cu.h with the
 * implementation. */
#ifndef HYBRID_BENCH_H
#define HYBRID_BENCH_H
#include <stdio.h>
#include <stdlib.h>

/** Enqueue one kernel over the whole grid: plan p holds the atoms (p->n, also in constant
 *  memory) and its map p->d_out (nx x ny x nz, no padding at this size), on p->queue.stream. */
typedef md_status (*hb_launch)(md_cuda_dcs_plan *p);
typedef struct hb_entry {
    const char *name;
    hb_launch launch;
} hb_entry;

typedef struct hb_ctx {
    const hb_entry *e;
    md_cuda_dcs_plan *p;
} hb_ctx;

static md_status hb_run_once(void *ctx, cudaStream_t s) {
    const hb_ctx *c = (const hb_ctx *)ctx;
    (void)s; /* md_cuda_bench runs on the plan's stream */
    return c->e->launch(c->p);
}

/* Time every entry; returns the process exit status. `what` ends the header line; `width`
 * is the name column's width. */
static int hb_run_table(const hb_entry *entries, int count, const char *what, int width) {
    const int n = MD_DCS_CONST_CHUNK, nx = 256, ny = 256, nz = 132;
    const double origin[3] = {0.0, 0.0, 0.0}, h[3] = {0.1, 0.1, 0.1};
    const size_t points = (size_t)nx * ny * nz;
    md_float4 *atoms = NULL;
    md_cuda_dcs_plan p;
    md_grid geom;
    float *out = NULL, *ref = NULL;
    double ceiling, t, err;
    md_rng rng;
    md_status st;
    int i, rc = 1;
    memset(&p, 0, sizeof p);
    memset(&geom, 0, sizeof geom);
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    atoms = (md_float4 *)malloc((size_t)n * sizeof *atoms);
    out = (float *)malloc(points * sizeof(float));
    ref = (float *)malloc(points * sizeof(float));
    if (!atoms || !out || !ref) {
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
    geom.n[0] = nx;
    geom.n[1] = ny;
    geom.n[2] = nz;
    memcpy(geom.origin, origin, sizeof origin);
    memcpy(geom.spacing, h, sizeof h);
    if ((st = md_cuda_dcs_plan_create(&p, MD_DCS_GPU_HYBRID, n, &geom)) != MD_OK ||
        (st = md_cuda_dcs_plan_upload(&p, atoms, n)) != MD_OK || (st = md_cuda_ceiling_rsqrt(&ceiling)) != MD_OK) {
        printf("FAIL: %s (%s)\n", md_last_error(), md_status_string(st));
        goto done;
    }
    if (p.out_count != points || !p.const_resident) {
        printf("FAIL: the plan's map has %zu points (want %zu) or its atoms are not in constant memory\n", p.out_count,
               points);
        goto done;
    }
    printf("MUFU rsqrt ceiling %.4g /s; %d atoms on %d x %d x %d points%s\n", ceiling, n, nx, ny, nz, what);
    for (i = 0; i < count; i++) {
        hb_ctx c;
        md_cuda_bench_desc bd;
        cudaError_t e;
        c.e = &entries[i];
        c.p = &p;
        memset(&bd, 0, sizeof bd);
        bd.reps = 7;
        bd.stream = p.queue.stream;
        if ((st = md_cuda_poison(p.d_out, p.out_count, p.queue.stream)) != MD_OK ||
            (st = md_cuda_bench(hb_run_once, &c, &bd, &t)) != MD_OK || (st = md_cuda_dcs_plan_sync(&p, NULL)) != MD_OK) {
            printf("FAIL: %s: %s (%s)\n", entries[i].name, md_last_error(), md_status_string(st));
            goto done;
        }
        if ((e = cudaMemcpy(i == 0 ? ref : out, p.d_out, points * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess) {
            md_cuda_error(e, "cudaMemcpy", __FILE__, __LINE__);
            printf("FAIL: %s\n", md_last_error());
            goto done;
        }
        err = i == 0 ? 0.0 : md_max_rel_error(out, ref, points);
        if (!(err <= 1e-5)) {
            printf("%-*s FAIL: max rel err vs first %.2e (no rate reported)\n", width, entries[i].name, err);
            goto done;
        }
        printf("%-*s %8.3f ms %10.4g atom-evals/s %6.3f x ceiling  max rel err vs first %.2e\n", width,
               entries[i].name, 1e3 * t, (double)n * points / t, (double)n * points / t / ceiling, err);
    }
    rc = 0;
done:
    md_cuda_dcs_plan_destroy(&p);
    free(atoms);
    free(out);
    free(ref);
    return rc;
}
#endif
