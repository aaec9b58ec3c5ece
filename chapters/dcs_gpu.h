/* dcs_gpu.h - the GPU direct-Coulomb-sum harness of chapters 02-04 (CUDA C++).
 *
 * Include it after md_cuda.cu.h (with MD_IMPLEMENTATION and MD_CUDA_IMPLEMENTATION defined
 * in the chapter's main.cu) and ladder.h. For every rung it:
 *   1. poisons the rung's (possibly padded) device output with NaN,
 *   2. runs the rung once and checks it: every output element written, and the grid's
 *      sampled planes (first, middle, last z-plane) against md_dcs_simple in double,
 *   3. only then times it with md_cuda_bench (warm-up, L2 flushed, median of reps),
 *   4. prints one ladder row: time, atom-evals/s, fraction of the measured MUFU rsqrt
 *      ceiling (md_cuda_ceiling_rsqrt), error.
 * Work is counted as atom-evals: atoms x grid points (padding not counted).
 * Tolerance: max relative error (md_max_rel_error) <= DCS_GPU_TOL = 1e-4, float kernels
 * against the double reference; tests/gpu_dcs.cu explains the bound. */
#ifndef DCS_GPU_H
#define DCS_GPU_H

#include "ladder.h"

#define DCS_GPU_TOL 1e-4

/* A rung the header does not have: the chapter's exercise. Same contract as
 * md_cuda_dcs_device, writing the grid unpadded (md_grid_count(geometry) floats). */
typedef md_status (*dcs_gpu_fn)(const md_float4 *d_xyzq, int n, const md_grid *geometry, float *d_out,
                                cudaStream_t stream);

/* One system on the device plus the reference on its sampled planes. */
typedef struct dcs_gpu_case {
    md_system sys;
    md_grid grid;       /* geometry (data is used as host scratch for one plane) */
    md_float4 *d_xyzq;  /* the atoms on the device */
    int planes[3], nplanes;
    float *ref;         /* nplanes * nx * ny reference values, md_dcs_simple */
} dcs_gpu_case;

static void dcs_gpu_case_free(dcs_gpu_case *c) {
    if (c->d_xyzq) (void)cudaFree(c->d_xyzq); /* teardown: nothing left to report to */
    free(c->ref);
    md_grid_free(&c->grid);
    md_system_free(&c->sys);
    memset(c, 0, sizeof *c);
}

/* The default system (ladder_dcs_system: seed LADDER_SEED, spacing 0.1 nm) on the device,
 * and md_dcs_simple on planes 0, nz/2, nz-1. */
static md_status dcs_gpu_case_make(dcs_gpu_case *c, int natoms, int nx, int ny, int nz) {
    md_status st;
    md_grid plane;
    size_t np = (size_t)nx * ny;
    int p;
    memset(c, 0, sizeof *c);
    if ((st = ladder_dcs_system(&c->sys, &c->grid, natoms, nx, ny, nz, 0.1)) != MD_OK) return st;
    c->planes[0] = 0;
    c->planes[1] = nz / 2;
    c->planes[2] = nz - 1;
    c->nplanes = nz >= 3 ? 3 : nz;
    if (nz == 2) c->planes[1] = 1;
    c->ref = (float *)md_alloc_array((size_t)c->nplanes * np, sizeof(float));
    if (!c->ref) { dcs_gpu_case_free(c); return MD_ERR_OUT_OF_MEMORY; }
    for (p = 0; p < c->nplanes; p++) {
        double origin[3];
        origin[0] = c->grid.origin[0];
        origin[1] = c->grid.origin[1];
        origin[2] = c->grid.origin[2] + c->planes[p] * c->grid.spacing[2];
        if ((st = md_grid_alloc(&plane, nx, ny, 1, origin, c->grid.spacing)) != MD_OK) { dcs_gpu_case_free(c); return st; }
        st = md_dcs_simple(c->sys.xyzq, c->sys.n, &plane);
        if (st == MD_OK) memcpy(c->ref + p * np, plane.data, np * sizeof(float));
        md_grid_free(&plane);
        if (st != MD_OK) { dcs_gpu_case_free(c); return st; }
    }
    if (cudaMalloc((void **)&c->d_xyzq, (size_t)natoms * sizeof(md_float4)) != cudaSuccess ||
        cudaMemcpy(c->d_xyzq, c->sys.xyzq, (size_t)natoms * sizeof(md_float4), cudaMemcpyHostToDevice) != cudaSuccess) {
        dcs_gpu_case_free(c);
        return md_set_error(MD_ERR_CUDA, "dcs_gpu_case_make", 0, "d_xyzq", "cannot copy %d atoms to the device", natoms);
    }
    return MD_OK;
}

/* What one timed run does: a header rung, a hybrid split, or the exercise. */
typedef struct dcs_gpu_run {
    const dcs_gpu_case *c;
    md_dcs_variant variant; /* used when soft == 0 and fn == NULL */
    int soft;               /* > 0: md_cuda_dcs_hybrid_device with this many software rsqrts of 8 */
    dcs_gpu_fn fn;          /* non-NULL: the exercise */
    float *d_out;
} dcs_gpu_run;

static md_status dcs_gpu_run_once(void *ctx, cudaStream_t s) {
    dcs_gpu_run *r = (dcs_gpu_run *)ctx;
    if (r->fn) return r->fn(r->c->d_xyzq, r->c->sys.n, &r->c->grid, r->d_out, s);
    if (r->soft > 0) return md_cuda_dcs_hybrid_device(r->soft, r->c->d_xyzq, r->c->sys.n, &r->c->grid, r->d_out, s);
    return md_cuda_dcs_device(r->variant, r->c->d_xyzq, r->c->sys.n, &r->c->grid, r->d_out, s);
}

/* Output dimensions of a run (the exercise writes the grid unpadded). */
static md_status dcs_gpu_dims(const dcs_gpu_run *r, int d[3]) {
    if (r->fn) {
        d[0] = r->c->grid.n[0];
        d[1] = r->c->grid.n[1];
        d[2] = r->c->grid.n[2];
        return MD_OK;
    }
    return md_cuda_dcs_out_dims(r->soft > 0 ? MD_DCS_GPU_HYBRID : r->variant, &r->c->grid, d);
}

/* Check, then time one rung and print its row. Returns 1 if it passed. */
static int dcs_gpu_rung(ladder *l, const dcs_gpu_case *c, const char *name, md_dcs_variant variant, int soft,
                        dcs_gpu_fn fn, double ceiling, int reps) {
    dcs_gpu_run r;
    md_cuda_bench_desc desc;
    md_status st;
    int d[3] = {0, 0, 0}, p, j;
    size_t count, k, np = (size_t)c->grid.n[0] * c->grid.n[1];
    float *h = NULL, *sample = NULL;
    double err = INFINITY, t = NAN, work = (double)c->sys.n * (double)md_grid_count(&c->grid);
    char why[600];
    memset(&r, 0, sizeof r);
    r.c = c;
    r.variant = variant;
    r.soft = soft;
    r.fn = fn;
    if ((st = dcs_gpu_dims(&r, d)) != MD_OK) {
        snprintf(why, sizeof why, "%s", md_last_error());
        ladder_row_error(l, name, why);
        return 0;
    }
    count = (size_t)d[0] * d[1] * d[2];
    h = (float *)malloc(count * sizeof(float));
    sample = (float *)malloc((size_t)c->nplanes * np * sizeof(float));
    if (!h || !sample || cudaMalloc((void **)&r.d_out, count * sizeof(float)) != cudaSuccess) {
        ladder_row_error(l, name, "out of memory");
        free(h);
        free(sample);
        return 0;
    }
    /* 1-2: poison, run once, check */
    st = md_cuda_poison(r.d_out, count, 0);
    if (st == MD_OK) st = dcs_gpu_run_once(&r, 0);
    if (st == MD_OK) {
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) st = md_cuda_error(e, "cudaDeviceSynchronize", __FILE__, __LINE__);
    }
    if (st == MD_OK && cudaMemcpy(h, r.d_out, count * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
        st = md_set_error(MD_ERR_CUDA, "dcs_gpu_rung", 0, "d_out", "copy back failed");
    if (st != MD_OK) {
        snprintf(why, sizeof why, "%s", md_last_error());
        ladder_row_error(l, name, why);
        goto done;
    }
    err = 0.0;
    for (k = 0; k < count; k++)
        if (isnan(h[k])) { err = INFINITY; break; } /* an element the rung never wrote */
    for (p = 0; p < c->nplanes; p++)
        for (j = 0; j < c->grid.n[1]; j++)
            memcpy(sample + p * np + (size_t)j * c->grid.n[0], h + ((size_t)c->planes[p] * d[1] + j) * d[0],
                   (size_t)c->grid.n[0] * sizeof(float));
    if (err == 0.0) err = md_max_rel_error(sample, c->ref, (size_t)c->nplanes * np);
    /* 3: time only what passed */
    if (err <= DCS_GPU_TOL) {
        memset(&desc, 0, sizeof desc);
        desc.reps = reps;
        desc.warmup = reps <= 3 ? 1 : 0; /* slow rungs (scatter): one warm-up run; else the default */
        st = md_cuda_bench(dcs_gpu_run_once, &r, &desc, &t);
        if (st != MD_OK) {
            snprintf(why, sizeof why, "timing: %s", md_last_error());
            ladder_row_error(l, name, why);
            goto done;
        }
    }
    ladder_row(l, name, (long long)work, t, work, ceiling, err, DCS_GPU_TOL);
done:
    {
        cudaError_t fe = cudaFree(r.d_out);
        if (fe != cudaSuccess && st == MD_OK) {
            st = md_cuda_error(fe, "cudaFree(d_out)", __FILE__, __LINE__);
            ladder_row_error(l, name, md_last_error());
        }
    }
    free(h);
    free(sample);
    return st == MD_OK && err <= DCS_GPU_TOL;
}

/* The chapter's case: with --quick 4001 atoms on 37 x 29 x 11 points (not a multiple of a
 * block, a tile, a constant chunk or the unroll factor), else natoms on nx x ny x nz.
 * Returns 0, or 1 after printing FAIL. */
static int dcs_gpu_case_setup(dcs_gpu_case *c, const ladder_opts *o, int natoms, int nx, int ny, int nz) {
    md_status st = o->quick ? dcs_gpu_case_make(c, 4001, 37, 29, 11) : dcs_gpu_case_make(c, natoms, nx, ny, nz);
    if (st != MD_OK) {
        printf("FAIL: %s\n", md_last_error());
        return 1;
    }
    return 0;
}

/* Common start of the GPU chapters: parse options, check the device, measure the ceiling.
 * Returns -1 to go on, else the exit status (SKIP and --help exit 0). */
static int dcs_gpu_begin(ladder *l, ladder_opts *o, int argc, char **argv, const char *usage, const char *chapter,
                         const char *title, char *device, size_t device_cap, double *ceiling) {
    md_cuda_device_info info;
    int rc = ladder_parse(o, argc, argv, usage);
    if (rc != 0) return rc > 0 ? 0 : 2;
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    if (md_cuda_get_device_info(0, &info) != MD_OK) {
        printf("FAIL: %s\n", md_last_error());
        return 1;
    }
    snprintf(device, device_cap, "%s (%d SMs)", info.name, info.sm_count);
    if (o->quick) md_cuda_ceilings_set_effort(0.05);
    if (md_cuda_ceiling_rsqrt(ceiling) != MD_OK) {
        printf("note: the rsqrt ceiling could not be measured (%s); ceiling column left empty\n", md_last_error());
        *ceiling = NAN;
    }
    ladder_begin(l, o, chapter, title, "atom-evals/s", "atoms*points", device);
    if (isfinite(*ceiling)) printf("(ceiling: measured MUFU rsqrt rate %.4g rsqrt/s = 1 atom-eval each)\n", *ceiling);
    return -1;
}

/* The previous chapter's best rung on the CPU, timed once (it is slow), checked like the rest. */
typedef struct dcs_cpu_ctx {
    const dcs_gpu_case *c;
    md_grid *out;
} dcs_cpu_ctx;

static md_status dcs_cpu_rows_omp(void *ctx) {
    dcs_cpu_ctx *x = (dcs_cpu_ctx *)ctx;
    return md_dcs_rows_omp(x->c->sys.xyzq, x->c->sys.n, x->out);
}

static int dcs_cpu_baseline(ladder *l, const dcs_gpu_case *c) {
    md_grid out;
    dcs_cpu_ctx x;
    double t, err, work = (double)c->sys.n * (double)md_grid_count(&c->grid);
    size_t np = (size_t)c->grid.n[0] * c->grid.n[1];
    float *sample;
    int p;
    if (md_grid_alloc(&out, c->grid.n[0], c->grid.n[1], c->grid.n[2], c->grid.origin, c->grid.spacing) != MD_OK) {
        ladder_row_error(l, "cpu_rows_omp", md_last_error());
        return 0;
    }
    x.c = c;
    x.out = &out;
    t = ladder_time_cpu(dcs_cpu_rows_omp, &x, 1);
    sample = (float *)malloc((size_t)c->nplanes * np * sizeof(float));
    if (!sample || t < 0.0) {
        ladder_row_error(l, "cpu_rows_omp", t < 0.0 ? md_last_error() : "out of memory");
        free(sample);
        md_grid_free(&out);
        return 0;
    }
    for (p = 0; p < c->nplanes; p++) memcpy(sample + p * np, out.data + (size_t)c->planes[p] * np, np * sizeof(float));
    err = md_max_rel_error(sample, c->ref, (size_t)c->nplanes * np);
    ladder_row(l, "cpu_rows_omp", (long long)work, t, work, NAN, err, DCS_GPU_TOL);
    free(sample);
    md_grid_free(&out);
    return err <= DCS_GPU_TOL;
}

#if defined(__GNUC__) || defined(__clang__)
static void dcs_gpu__unused(void) __attribute__((unused));
static void dcs_gpu__unused(void) {
    (void)dcs_gpu_rung;
    (void)dcs_gpu_begin;
    (void)dcs_cpu_baseline;
    (void)dcs_gpu_case_make;
    (void)dcs_gpu_case_free;
}
#endif

#endif /* DCS_GPU_H */
