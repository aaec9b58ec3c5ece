/* gpu_dcs.cu - every GPU rung of the direct Coulomb sum against md_dcs_simple.
 *
 * CPU part (runs without a GPU): md_soft_rsqrtf, the software inverse square root of the
 * hybrid rung, on every float in [MD_DCS_MIN_R2, 1e6] nm^2 against 1/sqrt in double; the
 * argument checks and padded output sizes of the GPU API.
 * GPU part (SKIP without a device): each rung on random systems (fixed seeds below) with
 * atom counts and grid sizes that are not multiples of the block, the unroll factor or the
 * constant-memory chunk, with atoms placed exactly on grid points, outputs poisoned with
 * NaN before every run. The plan (md_cuda_dcs_plan): every rung through one, bit for bit
 * equal to md_cuda_dcs_device; enqueues without a sync; concurrent plans; the __constant__
 * buffer's one-holder rule; capacity and argument errors; destroy on a zeroed plan; an
 * enqueue captured into a CUDA graph and replayed, its kernel nodes named by the launch
 * registry. MD_SANITIZE=1 shrinks the sizes for compute-sanitizer.
 *
 * Tolerance: md_max_rel_error (largest |gpu - ref| over the largest |ref|) <= 1e-4. The
 * GPU sums up to 9,000 float terms per point (float rsqrt, ~1-2 ulp, and float
 * accumulation, error growing like n * 2^-24 in the worst case = 5e-4 of the largest term,
 * typically sqrt(n) * 2^-24); the reference accumulates in double. The float CPU rung
 * md_dcs_rows on the same systems is checked with the same tolerance as a control, and the
 * hybrid rung (19 of every 64 rsqrts from md_soft_rsqrtf, max relative error 9.1e-8, no
 * worse than MUFU) is held to the same tolerance. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "tests/md_test.h"

#define DCS_TOL 1e-4

static int sanitize(void) {
    const char *s = getenv("MD_SANITIZE");
    return s && s[0] == '1';
}

/* ---- CPU: the software rsqrt over the whole float range the kernels see ---- */

static void soft_rsqrt_every_float(void) {
    float lo = MD_DCS_MIN_R2, hi = 1e6f;
    unsigned int blo, bhi;
    double worst = 0.0;
    long long count, bad = 0;
    memcpy(&blo, &lo, sizeof blo);
    memcpy(&bhi, &hi, sizeof bhi);
    count = (long long)bhi - blo + 1;
    /* Every float bit pattern from MIN_R2 to 1e6: all exponents (2^-34 .. 2^19) and all
     * 2^23 mantissas of each, 453 million values. 1/sqrt in double is exact to well below
     * float resolution, so the difference is the error of md_soft_rsqrtf. */
#pragma omp parallel for reduction(max : worst) reduction(+ : bad) schedule(static)
    for (long long b = 0; b < count; b++) {
        unsigned int bits = blo + (unsigned int)b;
        float x, y;
        double ref, e;
        memcpy(&x, &bits, sizeof x);
        y = md_soft_rsqrtf(x);
        ref = 1.0 / sqrt((double)x);
        e = fabs((double)y - ref) / ref;
        bad += !(y > 0.0f && y < INFINITY); /* NaN, zero, negative or infinite */
        worst = e > worst ? e : worst;
    }
    printf("  md_soft_rsqrtf: max relative error %.3e (%.2f x 2^-24) over %lld floats in [%g, %g]\n",
           worst, worst * 16777216.0, count, (double)lo, (double)hi);
    MD_CHECKF(bad == 0, "%lld results are not finite positive floats", bad);
    /* 2 x 2^-24 = 1.19e-7 (one ulp at the bottom of a binade; MUFU.RSQ is specified to 2 ulp);
     * measured 9.10e-8 when written. */
    MD_CHECKF(worst <= 2.0 / 16777216.0, "max relative error %.3e > 2^-23", worst);
}

/* ---- CPU: argument checks and output sizes (no CUDA call is made) ---- */

static void dcs_gpu_bad_arguments(void) {
    md_float4 a[2] = {{0.1f, 0.2f, 0.3f, 1.0f}, {0.4f, 0.5f, 0.6f, -1.0f}};
    md_grid g;
    double origin[3] = {0, 0, 0}, h[3] = {0.1, 0.1, 0.1};
    float dummy = 0.0f;
    MD_CHECK_OK(md_grid_alloc(&g, 3, 3, 3, origin, h));
    MD_CHECK_ERROR(md_cuda_dcs(MD_DCS_CPU_SIMPLE, a, 2, &g), MD_ERR_INVALID_ARGUMENT, "variant");
    MD_CHECK_ERROR(md_cuda_dcs(MD_DCS_GPU_GATHER, NULL, 2, &g), MD_ERR_INVALID_ARGUMENT, "xyzq");
    MD_CHECK_ERROR(md_cuda_dcs(MD_DCS_GPU_GATHER, a, 0, &g), MD_ERR_INVALID_ARGUMENT, "n");
    MD_CHECK_ERROR(md_cuda_dcs(MD_DCS_GPU_GATHER, a, 2, NULL), MD_ERR_INVALID_ARGUMENT, "grid");
    MD_CHECK_ERROR(md_cuda_dcs_device(MD_DCS_GPU_UNROLL8, (const md_float4 *)&dummy, 2, &g, NULL, 0),
                   MD_ERR_INVALID_ARGUMENT, "out");
    MD_CHECK_ERROR(md_cuda_dcs_hybrid_device(7, (const md_float4 *)&dummy, 2, &g, &dummy, 0),
                   MD_ERR_INVALID_ARGUMENT, "soft");
    md_grid_free(&g);
}

static void dcs_gpu_out_count(void) {
    md_grid g;
    int v, splits[16], np, found = 0;
    memset(&g, 0, sizeof g);
    g.n[0] = 37;
    g.n[1] = 29;
    g.n[2] = 11;
    for (v = MD_DCS_GPU_SCATTER; v < MD_DCS_VARIANT_COUNT; v++) {
        md_dcs_variant var = (md_dcs_variant)v;
        size_t want = 37 * 29 * 11;
        /* Padded rungs: x to whole tiles of 8 points x MD_DCS_BLOCK_X threads (128 >= 37),
         * y to whole tiles of R rows x MD_DCS_BLOCK_Y threads (R = 1, 2 or 4); z never. */
        int rows = 0;
        if (var == MD_DCS_GPU_UNROLL8) rows = 1;
        if (var == MD_DCS_GPU_UNROLL8X2 || var == MD_DCS_GPU_L1 || var == MD_DCS_GPU_SHARED) rows = 2;
        if (var == MD_DCS_GPU_HYBRID) rows = 4;
        if (rows)
            want = (size_t)(8 * MD_DCS_BLOCK_X) *
                   (size_t)((29 + rows * MD_DCS_BLOCK_Y - 1) / (rows * MD_DCS_BLOCK_Y) * rows * MD_DCS_BLOCK_Y) * 11;
        MD_CHECKF(md_cuda_dcs_out_count(var, &g) == want, "%s: out count %zu, want %zu", md_dcs_variant_name(var),
                  md_cuda_dcs_out_count(var, &g), want);
    }
    MD_CHECK(md_cuda_dcs_out_count(MD_DCS_CPU_ROWS, &g) == 0);
    np = md_cuda_dcs_hybrid_splits(splits, 16);
    MD_CHECK(np >= 1 && np <= 16);
    for (v = 0; v < np; v++) found |= splits[v] == MD_DCS_HYBRID_SOFT;
    MD_CHECKF(found, "MD_DCS_HYBRID_SOFT %d is not compiled in", MD_DCS_HYBRID_SOFT);
}

/* ---- GPU ---- */

/* A random neutral system (seed) of n atoms spread over the grid's box and 1 nm beyond, with
 * every 97th atom moved exactly onto a grid point (the MIN_R2 rule must drop it there). */
static md_status make_case(md_system *sys, md_grid *grid, int n, int nx, int ny, int nz, uint64_t seed) {
    const double origin[3] = {-1.3, 0.45, 2.2}, h[3] = {0.137, 0.121, 0.149};
    double box[3];
    md_status st;
    md_rng rng;
    int a;
    box[0] = (nx - 1) * h[0] + 2.0;
    box[1] = (ny - 1) * h[1] + 2.0;
    box[2] = (nz - 1) * h[2] + 2.0;
    if ((st = md_build_random_charges(sys, n, box, 1.0, seed)) != MD_OK) return st;
    if ((st = md_grid_alloc(grid, nx, ny, nz, origin, h)) != MD_OK) {
        md_system_free(sys);
        return st;
    }
    md_rng_seed(&rng, seed ^ 0x5eed);
    for (a = 0; a < n; a++) {
        sys->xyzq[a].x += (float)(origin[0] - 1.0);
        sys->xyzq[a].y += (float)(origin[1] - 1.0);
        sys->xyzq[a].z += (float)(origin[2] - 1.0);
        if (a % 97 == 0) {
            int i = (int)(md_rng_uniform(&rng) * nx), j = (int)(md_rng_uniform(&rng) * ny);
            int k = (int)(md_rng_uniform(&rng) * nz);
            sys->xyzq[a].x = (float)(origin[0] + i * h[0]);
            sys->xyzq[a].y = (float)(origin[1] + j * h[1]);
            sys->xyzq[a].z = (float)(origin[2] + k * h[2]);
        }
    }
    return MD_OK;
}

typedef struct dcs_case {
    int n, nx, ny, nz;
    uint64_t seed;
} dcs_case;

static dcs_case mk(int n, int nx, int ny, int nz, uint64_t seed) {
    dcs_case c;
    c.n = n;
    c.nx = nx;
    c.ny = ny;
    c.nz = nz;
    c.seed = seed;
    return c;
}

static int cases(dcs_case *c) {
    int k = 0;
    if (sanitize()) {
        c[k++] = mk(4001, 19, 13, 5, 11);
        c[k++] = mk(7, 3, 2, 1, 12);
        return k;
    }
    c[k++] = mk(MD_DCS_CONST_CHUNK + 1, 37, 29, 11, 100); /* a full constant chunk + 1 atom */
    c[k++] = mk(4001, 37, 29, 11, 101);  /* chunks of 3072 + 929 */
    c[k++] = mk(9000, 37, 29, 11, 102);  /* chunks of 3072, 3072, 2856 */
    c[k++] = mk(1234, 130, 9, 3, 103);   /* a row longer than one 8-point tile */
    c[k++] = mk(7, 3, 2, 1, 104);        /* fewer atoms than a hybrid group */
    return k;
}

/* Run one rung on every case through the host API: grid->data is poisoned here, and
 * md_cuda_dcs poisons its device output before the run, so an unwritten element is NaN
 * and md_max_rel_error returns +inf for it. */
static void check_rung(md_dcs_variant v) {
    dcs_case c[8];
    int nc = cases(c), t;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    for (t = 0; t < nc; t++) {
        md_system sys;
        md_grid ref, out;
        size_t count, p;
        double err, ctl;
        MD_CHECK_OK(make_case(&sys, &ref, c[t].n, c[t].nx, c[t].ny, c[t].nz, c[t].seed));
        MD_CHECK_OK(md_grid_alloc(&out, c[t].nx, c[t].ny, c[t].nz, ref.origin, ref.spacing));
        count = md_grid_count(&ref);
        MD_CHECK_OK(md_dcs_simple(sys.xyzq, sys.n, &ref));
        MD_CHECK_OK(md_dcs_rows(sys.xyzq, sys.n, &out));
        ctl = md_max_rel_error(out.data, ref.data, count);
        for (p = 0; p < count; p++) out.data[p] = NAN;
        MD_CHECK_OK(md_cuda_dcs(v, sys.xyzq, sys.n, &out));
        err = md_max_rel_error(out.data, ref.data, count);
        printf("  %-12s n %5d grid %3dx%2dx%2d: max rel err %.2e (float CPU rows %.2e)\n", md_dcs_variant_name(v),
               c[t].n, c[t].nx, c[t].ny, c[t].nz, err, ctl);
        MD_CHECKF(ctl <= DCS_TOL, "control md_dcs_rows error %.3e > %.0e", ctl, DCS_TOL);
        MD_CHECKF(err <= DCS_TOL, "%s, n %d: error %.3e > %.0e", md_dcs_variant_name(v), c[t].n, err, DCS_TOL);
        md_grid_free(&out);
        md_grid_free(&ref);
        md_system_free(&sys);
    }
}

static void dcs_gpu_scatter(void) { check_rung(MD_DCS_GPU_SCATTER); }
static void dcs_gpu_gather(void) { check_rung(MD_DCS_GPU_GATHER); }
static void dcs_gpu_const(void) { check_rung(MD_DCS_GPU_CONST); }
static void dcs_gpu_unroll4(void) { check_rung(MD_DCS_GPU_UNROLL4); }
static void dcs_gpu_unroll8(void) { check_rung(MD_DCS_GPU_UNROLL8); }
static void dcs_gpu_unroll8x2(void) { check_rung(MD_DCS_GPU_UNROLL8X2); }
static void dcs_gpu_l1(void) { check_rung(MD_DCS_GPU_L1); }
static void dcs_gpu_shared(void) { check_rung(MD_DCS_GPU_SHARED); }
static void dcs_gpu_hybrid(void) { check_rung(MD_DCS_GPU_HYBRID); }

/* The whole (padded) map of a plan of `variant` with hybrid split `soft` (0: the default) on
 * `geometry`, into h (md_cuda_dcs_out_count floats): poisoned, enqueued, synced, copied back. */
static md_status plan_padded(md_dcs_variant variant, int soft, const md_float4 *xyzq, int n, const md_grid *geometry,
                             float *h) {
    md_cuda_dcs_plan p;
    md_status st;
    if ((st = md_cuda_dcs_plan_create(&p, variant, n, geometry)) != MD_OK) return st;
    if ((soft == 0 || (st = md_cuda_dcs_plan_set_split(&p, soft)) == MD_OK) &&
        (st = md_cuda_dcs_plan_upload(&p, xyzq, n)) == MD_OK &&
        (st = md_cuda_poison(p.d_out, p.out_count, p.queue.stream)) == MD_OK &&
        (st = md_cuda_dcs_plan_enqueue(&p)) == MD_OK && (st = md_cuda_dcs_plan_sync(&p, NULL)) == MD_OK &&
        cudaMemcpy(h, p.d_out, p.out_count * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
        st = md_set_error(MD_ERR_CUDA, "plan_padded", 0, "d_out", "copy back failed");
    md_cuda_dcs_plan_destroy(&p);
    return st;
}

/* The device API (md_cuda_dcs_device, md_cuda_dcs_hybrid_device for every compiled split; no
 * plan): poisoned (padded) output, every element written, the grid part equal to the
 * reference; and a repeated run gives the same bits (for a split, the repeat is a plan with
 * md_cuda_dcs_plan_set_split). */
static void dcs_gpu_device_api(void) {
    md_system sys;
    md_grid ref;
    md_float4 *d_xyzq = NULL;
    float *d_out = NULL, *h = NULL, *crop = NULL;
    int v, d[3], splits[16], np, pi;
    const int n = sanitize() ? 4001 : 9000;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    if (sanitize()) MD_CHECK_OK(make_case(&sys, &ref, n, 19, 13, 5, 201));
    else MD_CHECK_OK(make_case(&sys, &ref, n, 37, 29, 11, 201));
    MD_CHECK_OK(md_dcs_simple(sys.xyzq, sys.n, &ref));
    MD_CHECK(cudaMalloc((void **)&d_xyzq, (size_t)n * sizeof *d_xyzq) == cudaSuccess);
    MD_CHECK(cudaMemcpy(d_xyzq, sys.xyzq, (size_t)n * sizeof *d_xyzq, cudaMemcpyHostToDevice) == cudaSuccess);
    np = md_cuda_dcs_hybrid_splits(splits, 16);
    crop = (float *)malloc(md_grid_count(&ref) * sizeof(float));
    MD_CHECK(crop != NULL);
    for (v = MD_DCS_GPU_SCATTER; v < MD_DCS_VARIANT_COUNT + np; v++) {
        /* v past the enum: a hybrid plan with split splits[v - MD_DCS_VARIANT_COUNT] */
        md_dcs_variant var = v < MD_DCS_VARIANT_COUNT ? (md_dcs_variant)v : MD_DCS_GPU_HYBRID;
        size_t oc = md_cuda_dcs_out_count(var, &ref), p;
        int rep, i, j, k;
        double err;
        pi = v - MD_DCS_VARIANT_COUNT;
        MD_CHECK_OK(md_cuda_dcs_out_dims(var, &ref, d));
        MD_CHECK(oc == (size_t)d[0] * d[1] * d[2]);
        MD_CHECK(cudaMalloc((void **)&d_out, oc * sizeof(float)) == cudaSuccess);
        h = (float *)malloc(2 * oc * sizeof(float));
        MD_CHECK(h != NULL);
        for (rep = 0; rep < 2; rep++) {
            if (pi >= 0 && rep == 1) { /* the split through a plan: the same bits as without */
                MD_CHECK_OK(plan_padded(var, splits[pi], sys.xyzq, n, &ref, h + rep * oc));
                continue;
            }
            MD_CHECK_OK(md_cuda_poison(d_out, oc, 0));
            if (pi < 0) MD_CHECK_OK(md_cuda_dcs_device(var, d_xyzq, n, &ref, d_out, 0));
            else MD_CHECK_OK(md_cuda_dcs_hybrid_device(splits[pi], d_xyzq, n, &ref, d_out, 0));
            MD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
            MD_CHECK(cudaMemcpy(h + rep * oc, d_out, oc * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
        }
        for (p = 0; p < oc; p++) MD_CHECKF(!isnan(h[p]), "%s: padded output element %zu not written",
                                           md_dcs_variant_name(var), p);
        for (k = 0; k < ref.n[2]; k++)
            for (j = 0; j < ref.n[1]; j++)
                for (i = 0; i < ref.n[0]; i++)
                    crop[((size_t)k * ref.n[1] + j) * ref.n[0] + i] = h[((size_t)k * d[1] + j) * d[0] + i];
        err = md_max_rel_error(crop, ref.data, md_grid_count(&ref));
        printf("  device %-12s%s%d: max rel err %.2e\n", md_dcs_variant_name(var), pi < 0 ? "" : " soft ",
               pi < 0 ? 0 : splits[pi], err);
        MD_CHECKF(err <= DCS_TOL, "%s: error %.3e > %.0e", md_dcs_variant_name(var), err, DCS_TOL);
        /* Same bits on a repeated run, except scatter whose atomics add in any order. */
        if (var != MD_DCS_GPU_SCATTER)
            MD_CHECKF(memcmp(h, h + oc, oc * sizeof(float)) == 0, "%s: a repeated run differs", md_dcs_variant_name(var));
        free(h);
        h = NULL;
        MD_CHECK(cudaFree(d_out) == cudaSuccess);
        d_out = NULL;
    }
    free(crop);
    md_grid_free(&ref);
    md_system_free(&sys);
    MD_CHECK(cudaFree(d_xyzq) == cudaSuccess);
}

/* The device build of md_soft_rsqrtf (IMAD.HI initial guess) gives the same bits as the host
 * build the CPU test checks, on every 61st float from MD_DCS_MIN_R2 to 1e6. */
__global__ void soft_rsqrt_kernel(unsigned int b0, unsigned int stride, long long count, float *y) {
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t < count) y[t] = md_soft_rsqrtf(__uint_as_float(b0 + (unsigned int)(t * stride)));
}

static void soft_rsqrt_device_bits(void) {
    const float lo = MD_DCS_MIN_R2, hi = 1e6f;
    const unsigned int stride = 61;
    unsigned int blo, bhi;
    long long count, t, differ = 0;
    float *d_y = NULL, *y = NULL;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    memcpy(&blo, &lo, sizeof blo);
    memcpy(&bhi, &hi, sizeof bhi);
    count = ((long long)bhi - blo) / stride + 1;
    y = (float *)malloc((size_t)count * sizeof *y);
    MD_CHECK(y != NULL);
    MD_CHECK(cudaMalloc((void **)&d_y, (size_t)count * sizeof *d_y) == cudaSuccess);
    MD_CHECK_OK(md_cuda_poison(d_y, (size_t)count, 0));
    soft_rsqrt_kernel<<<(unsigned int)((count + 255) / 256), 256>>>(blo, stride, count, d_y);
    MD_CHECK(cudaGetLastError() == cudaSuccess);
    MD_CHECK(cudaMemcpy(y, d_y, (size_t)count * sizeof *y, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (t = 0; t < count; t++) {
        unsigned int b = blo + (unsigned int)(t * stride);
        float x, h;
        memcpy(&x, &b, sizeof x);
        h = md_soft_rsqrtf(x);
        differ += memcmp(&h, &y[t], sizeof h) != 0;
    }
    printf("  md_soft_rsqrtf: device and host differ on %lld of %lld floats\n", differ, count);
    MD_CHECKF(differ == 0, "%lld device results differ from the host build", differ);
    MD_CHECK(cudaFree(d_y) == cudaSuccess);
    free(y);
}

/* The hybrid rung moves the MD_DCS_MIN_R2 rule out of its loop (md__dcs_fixup_kernel). Its
 * hard cases: two atoms on one point, an uncharged atom on a point (0 x inf in the loop), an
 * atom on a point of the padding, and a grid finer than the fix-up allows (the fallback).
 * The whole padded output of every split is compared with md_dcs_simple on the padded grid. */
static void dcs_gpu_hybrid_rule(void) {
    const double fine[3] = {5e-4, 7e-4, 6e-4};
    int pass, np, splits[16];
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    np = md_cuda_dcs_hybrid_splits(splits, 16);
    for (pass = 0; pass < 2; pass++) {
        md_system sys;
        md_grid ref, padded;
        float *h = NULL;
        int d[3], n = 500, pi, ii;
        size_t oc, p;
        MD_CHECK_OK(make_case(&sys, &ref, n, 37, 29, 11, 301 + pass));
        if (pass == 1) { /* a grid finer than MD__DCS_FIXUP_MIN_H near 0, the atoms shrunk around it */
            const double o[3] = {1.3e-3, -2.1e-3, 0.7e-3};
            for (ii = 0; ii < n; ii++) {
                sys.xyzq[ii].x = (float)(o[0] + (sys.xyzq[ii].x - ref.origin[0]) * 0.01);
                sys.xyzq[ii].y = (float)(o[1] + (sys.xyzq[ii].y - ref.origin[1]) * 0.01);
                sys.xyzq[ii].z = (float)(o[2] + (sys.xyzq[ii].z - ref.origin[2]) * 0.01);
            }
            for (ii = 0; ii < 3; ii++) {
                ref.origin[ii] = o[ii];
                ref.spacing[ii] = fine[ii];
            }
        }
        MD_CHECK_OK(md_cuda_dcs_out_dims(MD_DCS_GPU_HYBRID, &ref, d));
        MD_CHECK_OK(md_grid_alloc(&padded, d[0], d[1], d[2], ref.origin, ref.spacing));
        /* atoms 0 and 1 on one point, atom 2 uncharged on a point, atom 3 on the last point
         * of the padding */
        for (ii = 0; ii < 4; ii++) {
            const int i = ii == 3 ? d[0] - 1 : 4 + (ii == 2), j = ii == 3 ? d[1] - 1 : 5, k = ii == 3 ? d[2] - 1 : 6;
            sys.xyzq[ii].x = (float)(ref.origin[0] + i * ref.spacing[0]);
            sys.xyzq[ii].y = (float)(ref.origin[1] + j * ref.spacing[1]);
            sys.xyzq[ii].z = (float)(ref.origin[2] + k * ref.spacing[2]);
        }
        sys.xyzq[2].w = 0.0f;
        MD_CHECK_OK(md_dcs_simple(sys.xyzq, n, &padded));
        oc = md_grid_count(&padded);
        MD_CHECK(oc == md_cuda_dcs_out_count(MD_DCS_GPU_HYBRID, &ref));
        h = (float *)malloc(oc * sizeof(float));
        MD_CHECK(h != NULL);
        for (pi = 0; pi < np; pi++) {
            double err;
            long long bad = 0;
            MD_CHECK_OK(plan_padded(MD_DCS_GPU_HYBRID, splits[pi], sys.xyzq, n, &ref, h));
            for (p = 0; p < oc; p++) bad += !isfinite(h[p]);
            err = md_max_rel_error(h, padded.data, oc);
            printf("  hybrid soft %d, %s grid, padded %dx%dx%d: %lld not finite, max rel err %.2e\n", splits[pi],
                   pass ? "fine (fallback)" : "normal", d[0], d[1], d[2], bad, err);
            MD_CHECKF(bad == 0, "soft %d: %lld output elements are not finite", splits[pi], bad);
            MD_CHECKF(err <= DCS_TOL, "soft %d: error %.3e > %.0e", splits[pi], err, DCS_TOL);
        }
        free(h);
        md_grid_free(&padded);
        md_grid_free(&ref);
        md_system_free(&sys);
    }
}

/* One atom exactly on the only grid point: every rung must give exactly 0 there. */
static void dcs_gpu_atom_on_point(void) {
    md_float4 a[1];
    md_grid g;
    double origin[3] = {0.3, -0.2, 0.7}, h[3] = {0.1, 0.1, 0.1};
    int v;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    a[0].x = 0.3f;
    a[0].y = -0.2f;
    a[0].z = 0.7f;
    a[0].w = 0.8f;
    MD_CHECK_OK(md_grid_alloc(&g, 1, 1, 1, origin, h));
    for (v = MD_DCS_GPU_SCATTER; v < MD_DCS_VARIANT_COUNT; v++) {
        g.data[0] = NAN;
        MD_CHECK_OK(md_cuda_dcs((md_dcs_variant)v, a, 1, &g));
        MD_CHECKF(g.data[0] == 0.0f, "%s: %g at the atom's own point, want 0", md_dcs_variant_name((md_dcs_variant)v),
                  (double)g.data[0]);
    }
    md_grid_free(&g);
}

/* ---- GPU: the plan ---- */

/* Poison a plan's map (device) and a host grid, enqueue, sync into the grid. */
static md_status plan_run(md_cuda_dcs_plan *p, md_grid *out) {
    md_status st;
    size_t k;
    for (k = 0; k < md_grid_count(out); k++) out->data[k] = NAN;
    if ((st = md_cuda_poison(p->d_out, p->out_count, p->queue.stream)) != MD_OK) return st;
    if ((st = md_cuda_dcs_plan_enqueue(p)) != MD_OK) return st;
    return md_cuda_dcs_plan_sync(p, out);
}

/* Every rung through a plan: one plan (capacity 9000) computes two systems in turn, 4001
 * atoms (two constant chunks: the enqueue copies them in) and then 2500 atoms (one chunk: the
 * upload puts them in constant memory); each map equals md_dcs_simple within DCS_TOL and, bit
 * for bit, what md_cuda_dcs_device (the path without a plan) gives for the same atoms (not
 * scatter: its atomics add in any order). Seeds 401, 402. */
static void dcs_plan_every_rung(void) {
    md_system sys[2];
    md_grid ref[2], out, dev;
    md_float4 *d_xyzq = NULL;
    float *d_dev = NULL;
    int v, c, nx = sanitize() ? 19 : 37, ny = sanitize() ? 13 : 29, nz = sanitize() ? 5 : 11;
    const int n[2] = {4001, 2500};
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    for (c = 0; c < 2; c++) {
        MD_CHECK_OK(make_case(&sys[c], &ref[c], n[c], nx, ny, nz, 401 + c));
        MD_CHECK_OK(md_dcs_simple(sys[c].xyzq, n[c], &ref[c]));
    }
    MD_CHECK_OK(md_grid_alloc(&out, nx, ny, nz, ref[0].origin, ref[0].spacing));
    MD_CHECK_OK(md_grid_alloc(&dev, nx, ny, nz, ref[0].origin, ref[0].spacing));
    MD_CHECK(cudaMalloc((void **)&d_xyzq, 9000 * sizeof *d_xyzq) == cudaSuccess);
    for (v = MD_DCS_GPU_SCATTER; v < MD_DCS_VARIANT_COUNT; v++) {
        md_cuda_dcs_plan p;
        const md_dcs_variant var = (md_dcs_variant)v;
        MD_CHECK_OK(md_cuda_dcs_plan_create(&p, var, 9000, &ref[0]));
        MD_CHECK(p.out_count == md_cuda_dcs_out_count(var, &ref[0]) && p.capacity == 9000 && p.n == 0);
        MD_CHECK(cudaMalloc((void **)&d_dev, p.out_count * sizeof(float)) == cudaSuccess);
        for (c = 0; c < 2; c++) {
            double err;
            MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, sys[c].xyzq, n[c]));
            MD_CHECK(p.n == n[c] && p.const_resident == (p.const_claim != 0 && n[c] <= MD_DCS_CONST_CHUNK));
            MD_CHECK_OK(plan_run(&p, &out));
            err = md_max_rel_error(out.data, ref[c].data, md_grid_count(&out));
            printf("  plan %-12s n %5d: max rel err %.2e%s\n", md_dcs_variant_name(var), n[c], err,
                   p.const_resident ? " (atoms resident in constant memory)" : "");
            MD_CHECKF(err <= DCS_TOL, "%s, n %d: error %.3e > %.0e", md_dcs_variant_name(var), n[c], err, DCS_TOL);
        }
        md_cuda_dcs_plan_destroy(&p);
        MD_CHECK(p.d_out == NULL && p.const_claim == 0);
        /* the path without a plan on the second system (out holds the plan's map of it); after
         * the destroy, because md_cuda_dcs_device needs the constant buffer the plan held */
        if (var != MD_DCS_GPU_SCATTER) {
            int d[3], i, j, k;
            MD_CHECK_OK(md_cuda_dcs_out_dims(var, &ref[1], d));
            MD_CHECK(cudaMemcpy(d_xyzq, sys[1].xyzq, (size_t)n[1] * sizeof *d_xyzq, cudaMemcpyHostToDevice) == cudaSuccess);
            MD_CHECK_OK(md_cuda_poison(d_dev, (size_t)d[0] * d[1] * d[2], 0));
            MD_CHECK_OK(md_cuda_dcs_device(var, d_xyzq, n[1], &ref[1], d_dev, 0));
            MD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
            for (k = 0; k < nz; k++)
                for (j = 0; j < ny; j++)
                    MD_CHECK(cudaMemcpy(dev.data + ((size_t)k * ny + j) * nx, d_dev + ((size_t)k * d[1] + j) * d[0],
                                        (size_t)nx * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
            for (i = 0; i < (int)md_grid_count(&out); i++)
                MD_CHECKF(memcmp(&out.data[i], &dev.data[i], sizeof(float)) == 0,
                          "%s: point %d: plan %.9g, md_cuda_dcs_device %.9g", md_dcs_variant_name(var), i,
                          (double)out.data[i], (double)dev.data[i]);
        }
        MD_CHECK(cudaFree(d_dev) == cudaSuccess);
    }
    MD_CHECK(cudaFree(d_xyzq) == cudaSuccess);
    md_grid_free(&out);
    md_grid_free(&dev);
    for (c = 0; c < 2; c++) {
        md_grid_free(&ref[c]);
        md_system_free(&sys[c]);
    }
}

/* Enqueue without sync: one upload, three enqueues, one sync gives the map; then two uploads
 * back to back (the second waits for the first's copy to leave the pinned staging buffer), an
 * enqueue after each, one sync: the map of the second system. Every rung with a constant buffer
 * and without (unroll8x2, shared). Seeds 411, 412. */
static void dcs_plan_repeated_enqueue_one_sync(void) {
    static const md_dcs_variant vars[2] = {MD_DCS_GPU_UNROLL8X2, MD_DCS_GPU_SHARED};
    md_system a, b;
    md_grid ra, rb, out;
    int v, k;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    MD_CHECK_OK(make_case(&a, &ra, 3001, 37, 29, 11, 411));
    MD_CHECK_OK(make_case(&b, &rb, 1999, 37, 29, 11, 412));
    MD_CHECK_OK(md_dcs_simple(a.xyzq, a.n, &ra));
    MD_CHECK_OK(md_dcs_simple(b.xyzq, b.n, &rb));
    MD_CHECK_OK(md_grid_alloc(&out, 37, 29, 11, ra.origin, ra.spacing));
    for (v = 0; v < 2; v++) {
        md_cuda_dcs_plan p;
        MD_CHECK_OK(md_cuda_dcs_plan_create(&p, vars[v], 4000, &ra));
        MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, a.xyzq, a.n));
        MD_CHECK_OK(md_cuda_poison(p.d_out, p.out_count, p.queue.stream));
        for (k = 0; k < 3; k++) MD_CHECK_OK(md_cuda_dcs_plan_enqueue(&p));
        for (k = 0; k < (int)md_grid_count(&out); k++) out.data[k] = NAN;
        MD_CHECK_OK(md_cuda_dcs_plan_sync(&p, &out));
        MD_CHECKF(md_max_rel_error(out.data, ra.data, md_grid_count(&out)) <= DCS_TOL, "%s: three enqueues, one sync",
                  md_dcs_variant_name(vars[v]));
        MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, a.xyzq, a.n));
        MD_CHECK_OK(md_cuda_dcs_plan_enqueue(&p));
        MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, b.xyzq, b.n));
        MD_CHECK_OK(md_cuda_poison(p.d_out, p.out_count, p.queue.stream));
        MD_CHECK_OK(md_cuda_dcs_plan_enqueue(&p));
        for (k = 0; k < (int)md_grid_count(&out); k++) out.data[k] = NAN;
        MD_CHECK_OK(md_cuda_dcs_plan_sync(&p, &out));
        MD_CHECKF(md_max_rel_error(out.data, rb.data, md_grid_count(&out)) <= DCS_TOL, "%s: two uploads, one sync",
                  md_dcs_variant_name(vars[v]));
        md_cuda_dcs_plan_destroy(&p);
    }
    md_grid_free(&out);
    md_grid_free(&ra);
    md_grid_free(&rb);
    md_system_free(&a);
    md_system_free(&b);
}

/* Two plans at once on their own streams: shared (system 1), unroll8x2 (system 2, holding the
 * constant buffer) and gather (system 3), enqueues interleaved, syncs in another order; each map
 * equals its own reference. Seeds 421-423. */
static void dcs_plan_concurrent_plans(void) {
    static const md_dcs_variant vars[3] = {MD_DCS_GPU_SHARED, MD_DCS_GPU_UNROLL8X2, MD_DCS_GPU_GATHER};
    static const int order[3] = {1, 2, 0};
    md_system sys[3];
    md_grid ref[3], out;
    md_cuda_dcs_plan p[3];
    int c, k;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    for (c = 0; c < 3; c++) {
        MD_CHECK_OK(make_case(&sys[c], &ref[c], 2000 + 500 * c, 37, 29, 11, 421 + c));
        MD_CHECK_OK(md_dcs_simple(sys[c].xyzq, sys[c].n, &ref[c]));
        MD_CHECK_OK(md_cuda_dcs_plan_create(&p[c], vars[c], sys[c].n, &ref[c]));
        MD_CHECK_OK(md_cuda_dcs_plan_upload(&p[c], sys[c].xyzq, sys[c].n));
        MD_CHECK_OK(md_cuda_poison(p[c].d_out, p[c].out_count, p[c].queue.stream));
    }
    MD_CHECK(p[0].queue.stream != p[1].queue.stream && p[1].queue.stream != p[2].queue.stream);
    for (k = 0; k < 2; k++)
        for (c = 0; c < 3; c++) MD_CHECK_OK(md_cuda_dcs_plan_enqueue(&p[c]));
    MD_CHECK_OK(md_grid_alloc(&out, 37, 29, 11, ref[0].origin, ref[0].spacing));
    for (k = 0; k < 3; k++) {
        double err;
        c = order[k];
        for (size_t i = 0; i < md_grid_count(&out); i++) out.data[i] = NAN;
        MD_CHECK_OK(md_cuda_dcs_plan_sync(&p[c], &out));
        err = md_max_rel_error(out.data, ref[c].data, md_grid_count(&out));
        MD_CHECKF(err <= DCS_TOL, "concurrent %s: error %.3e", md_dcs_variant_name(vars[c]), err);
    }
    for (c = 0; c < 3; c++) {
        md_cuda_dcs_plan_destroy(&p[c]);
        md_grid_free(&ref[c]);
        md_system_free(&sys[c]);
    }
    md_grid_free(&out);
}

/* The constant buffer: one holder at a time. While an unroll8 plan holds it, a const plan, the
 * one-call md_cuda_dcs and md_cuda_dcs_device of a constant-memory rung are refused with
 * MD_ERR_UNSUPPORTED and a message that says why and what to use; a gather plan and
 * md_cuda_dcs with gather still work; the refused create leaves its plan zeroed. Once the holder
 * is destroyed, the const plan is made. Seed 431. */
static void dcs_plan_const_buffer_claim(void) {
    md_system sys;
    md_grid ref, out;
    md_cuda_dcs_plan a, b, c;
    md_float4 *d_xyzq = NULL;
    float *d_out = NULL;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    MD_CHECK_OK(make_case(&sys, &ref, 700, 19, 13, 5, 431));
    MD_CHECK_OK(md_dcs_simple(sys.xyzq, sys.n, &ref));
    MD_CHECK_OK(md_grid_alloc(&out, 19, 13, 5, ref.origin, ref.spacing));
    MD_CHECK_OK(md_cuda_dcs_plan_create(&a, MD_DCS_GPU_UNROLL8, sys.n, &ref));
    MD_CHECK(a.const_claim != 0);
    MD_CHECK_ERROR(md_cuda_dcs_plan_create(&b, MD_DCS_GPU_CONST, sys.n, &ref), MD_ERR_UNSUPPORTED,
                   "which another DCS plan holds");
    MD_CHECK(strstr(md_last_error(), "gpu_gather") != NULL && b.d_out == NULL && b.const_claim == 0);
    MD_CHECK_ERROR(md_cuda_dcs(MD_DCS_GPU_HYBRID, sys.xyzq, sys.n, &out), MD_ERR_UNSUPPORTED, "__constant__");
    MD_CHECK(cudaMalloc((void **)&d_xyzq, (size_t)sys.n * sizeof *d_xyzq) == cudaSuccess);
    MD_CHECK(cudaMemcpy(d_xyzq, sys.xyzq, (size_t)sys.n * sizeof *d_xyzq, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK(cudaMalloc((void **)&d_out, md_cuda_dcs_out_count(MD_DCS_GPU_UNROLL4, &ref) * sizeof(float)) == cudaSuccess);
    MD_CHECK_ERROR(md_cuda_dcs_device(MD_DCS_GPU_UNROLL4, d_xyzq, sys.n, &ref, d_out, 0), MD_ERR_UNSUPPORTED,
                   "__constant__");
    MD_CHECK_OK(md_cuda_dcs_plan_create(&c, MD_DCS_GPU_GATHER, sys.n, &ref));
    MD_CHECK(c.const_claim == 0);
    MD_CHECK_OK(md_cuda_dcs_plan_upload(&c, sys.xyzq, sys.n));
    MD_CHECK_OK(plan_run(&c, &out));
    MD_CHECK(md_max_rel_error(out.data, ref.data, md_grid_count(&out)) <= DCS_TOL);
    MD_CHECK_OK(md_cuda_dcs(MD_DCS_GPU_GATHER, sys.xyzq, sys.n, &out));
    MD_CHECK_OK(md_cuda_dcs_plan_upload(&a, sys.xyzq, sys.n));
    MD_CHECK_OK(plan_run(&a, &out));
    MD_CHECK(md_max_rel_error(out.data, ref.data, md_grid_count(&out)) <= DCS_TOL);
    md_cuda_dcs_plan_destroy(&a);
    MD_CHECK_OK(md_cuda_dcs_plan_create(&b, MD_DCS_GPU_CONST, sys.n, &ref));
    MD_CHECK_OK(md_cuda_dcs_plan_upload(&b, sys.xyzq, sys.n));
    MD_CHECK_OK(plan_run(&b, &out));
    MD_CHECK(md_max_rel_error(out.data, ref.data, md_grid_count(&out)) <= DCS_TOL);
    md_cuda_dcs_plan_destroy(&b);
    md_cuda_dcs_plan_destroy(&c);
    MD_CHECK_OK(md_cuda_dcs_device(MD_DCS_GPU_UNROLL4, d_xyzq, sys.n, &ref, d_out, 0)); /* free again */
    MD_CHECK(cudaFree(d_xyzq) == cudaSuccess && cudaFree(d_out) == cudaSuccess);
    md_grid_free(&out);
    md_grid_free(&ref);
    md_system_free(&sys);
}

/* Capacity and argument errors of a made plan: an upload above the capacity (MD_ERR_RANGE,
 * field n), an enqueue before any upload, a sync into a grid of another shape, a split on a
 * rung without one or a split not compiled in; none of them changes the plan. */
static void dcs_plan_capacity_errors(void) {
    md_float4 a[3] = {{0.1f, 0.2f, 0.3f, 1.0f}, {0.4f, 0.5f, 0.6f, -1.0f}, {0.7f, 0.1f, 0.2f, 0.5f}};
    md_grid g, wrong;
    md_cuda_dcs_plan p, h;
    double origin[3] = {0, 0, 0}, sp[3] = {0.1, 0.1, 0.1};
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    MD_CHECK_OK(md_grid_alloc(&g, 5, 4, 3, origin, sp));
    MD_CHECK_OK(md_grid_alloc(&wrong, 5, 4, 4, origin, sp));
    MD_CHECK_OK(md_cuda_dcs_plan_create(&p, MD_DCS_GPU_GATHER, 2, &g));
    MD_CHECK_ERROR(md_cuda_dcs_plan_enqueue(&p), MD_ERR_INVALID_ARGUMENT, "no atoms uploaded");
    MD_CHECK_ERROR(md_cuda_dcs_plan_upload(&p, a, 3), MD_ERR_RANGE, "field n: 3 atoms exceed the plan's capacity of 2");
    MD_CHECK(p.n == 0);
    MD_CHECK_ERROR(md_cuda_dcs_plan_upload(&p, NULL, 2), MD_ERR_INVALID_ARGUMENT, "xyzq");
    MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, a, 2));
    MD_CHECK_OK(md_cuda_dcs_plan_enqueue(&p));
    MD_CHECK_ERROR(md_cuda_dcs_plan_sync(&p, &wrong), MD_ERR_INVALID_ARGUMENT, "field grid");
    MD_CHECK_OK(md_cuda_dcs_plan_sync(&p, &g));
    MD_CHECK_ERROR(md_cuda_dcs_plan_set_split(&p, 8), MD_ERR_INVALID_ARGUMENT, "only gpu_hybrid");
    MD_CHECK_OK(md_cuda_dcs_plan_create(&h, MD_DCS_GPU_HYBRID, 2, &g));
    MD_CHECK_ERROR(md_cuda_dcs_plan_set_split(&h, 7), MD_ERR_INVALID_ARGUMENT, "not compiled in");
    MD_CHECK(h.soft == MD_DCS_HYBRID_SOFT);
    MD_CHECK_OK(md_cuda_dcs_plan_set_split(&h, 8));
    MD_CHECK(h.soft == 8);
    md_cuda_dcs_plan_destroy(&h);
    md_cuda_dcs_plan_destroy(&p);
    md_grid_free(&g);
    md_grid_free(&wrong);
}

/* An enqueue is capturable: captured into a CUDA graph on the plan's stream (any illegal step
 * in it - a synchronisation, a pageable copy, a legacy-stream call - fails the capture), the
 * graph replayed gives the reference map; after an upload of other atoms (same count) the same
 * graph gives their map, because its arguments are the plan's buffers. Every kernel node of the
 * graph carries a function the launch registry names (chapter 09's comparator relies on it).
 * Rungs: scatter (memset + kernel), shared, unroll8 and hybrid (kernel + fix-up) with their
 * atoms resident in constant memory (2500 atoms, one chunk). Seeds 441, 442. */
static void dcs_plan_enqueue_captures(void) {
    static const md_dcs_variant vars[4] = {MD_DCS_GPU_SCATTER, MD_DCS_GPU_SHARED, MD_DCS_GPU_UNROLL8, MD_DCS_GPU_HYBRID};
    md_system a, b;
    md_grid ra, rb, out;
    int v;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    MD_CHECK_OK(make_case(&a, &ra, 2500, 37, 29, 11, 441));
    MD_CHECK_OK(make_case(&b, &rb, 2500, 37, 29, 11, 442));
    MD_CHECK_OK(md_dcs_simple(a.xyzq, a.n, &ra));
    MD_CHECK_OK(md_dcs_simple(b.xyzq, b.n, &rb));
    MD_CHECK_OK(md_grid_alloc(&out, 37, 29, 11, ra.origin, ra.spacing));
    for (v = 0; v < 4; v++) {
        md_cuda_dcs_plan p;
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        cudaGraphNode_t nodes[64];
        size_t nn = 64, i, kernels = 0;
        int pass;
        const char *name = md_dcs_variant_name(vars[v]);
        MD_CHECK_OK(md_cuda_dcs_plan_create(&p, vars[v], 2500, &ra));
        MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, a.xyzq, a.n));
        MD_CHECK_OK(md_cuda_dcs_plan_sync(&p, NULL)); /* the upload has landed */
        MD_CHECK(cudaStreamBeginCapture(p.queue.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        {
            md_status st = md_cuda_dcs_plan_enqueue(&p);
            cudaError_t e = cudaStreamEndCapture(p.queue.stream, &graph); /* always end it */
            MD_CHECK_OK(st);
            MD_CHECKF(e == cudaSuccess, "%s: capture failed: %s", name, cudaGetErrorString(e));
        }
        MD_CHECK(cudaGraphGetNodes(graph, nodes, &nn) == cudaSuccess && nn >= 1);
        for (i = 0; i < nn; i++) {
            cudaGraphNodeType type;
            cudaKernelNodeParams kp;
            MD_CHECK(cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess);
            if (type != cudaGraphNodeTypeKernel) continue;
            MD_CHECK(cudaGraphKernelNodeGetParams(nodes[i], &kp) == cudaSuccess);
            MD_CHECKF(md_cuda_kernel_name(kp.func) != NULL, "%s: kernel node %zu runs a function the registry lacks", name, i);
            kernels++;
        }
        MD_CHECKF(kernels >= (vars[v] == MD_DCS_GPU_HYBRID ? 2u : 1u), "%s: %zu kernel nodes", name, kernels);
        MD_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        for (pass = 0; pass < 2; pass++) {
            const md_grid *ref = pass ? &rb : &ra;
            size_t k;
            if (pass) MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, b.xyzq, b.n));
            MD_CHECK_OK(md_cuda_poison(p.d_out, p.out_count, p.queue.stream));
            MD_CHECK(cudaGraphLaunch(exec, p.queue.stream) == cudaSuccess);
            for (k = 0; k < md_grid_count(&out); k++) out.data[k] = NAN;
            MD_CHECK_OK(md_cuda_dcs_plan_sync(&p, &out));
            MD_CHECKF(md_max_rel_error(out.data, ref->data, md_grid_count(&out)) <= DCS_TOL,
                      "%s: graph replay %d differs from the reference", name, pass);
        }
        MD_CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess);
        md_cuda_dcs_plan_destroy(&p);
    }
    md_grid_free(&out);
    md_grid_free(&ra);
    md_grid_free(&rb);
    md_system_free(&a);
    md_system_free(&b);
}

/* Host only: create's argument checks leave the plan zeroed, and destroy is safe on a zeroed
 * plan, twice, and after a refused create. */
static void dcs_plan_args_and_zeroed_destroy(void) {
    md_cuda_dcs_plan p;
    md_grid g;
    double origin[3] = {0, 0, 0}, sp[3] = {0.1, 0.1, 0.1};
    memset(&p, 0, sizeof p);
    md_cuda_dcs_plan_destroy(&p);
    md_cuda_dcs_plan_destroy(&p);
    md_cuda_dcs_plan_destroy(NULL);
    MD_CHECK_OK(md_grid_alloc(&g, 3, 3, 3, origin, sp));
    memset(&p, 0x5A, sizeof p); /* garbage before create: create must zero it when it fails */
    MD_CHECK_ERROR(md_cuda_dcs_plan_create(&p, MD_DCS_CPU_ROWS, 10, &g), MD_ERR_INVALID_ARGUMENT, "not a GPU rung");
    MD_CHECK(p.d_out == NULL && p.queue.stream == NULL && p.const_claim == 0);
    md_cuda_dcs_plan_destroy(&p);
    MD_CHECK_ERROR(md_cuda_dcs_plan_create(&p, MD_DCS_GPU_GATHER, 0, &g), MD_ERR_INVALID_ARGUMENT, "capacity");
    MD_CHECK_ERROR(md_cuda_dcs_plan_create(&p, MD_DCS_GPU_GATHER, 10, NULL), MD_ERR_INVALID_ARGUMENT, "geometry");
    MD_CHECK_ERROR(md_cuda_dcs_plan_create(NULL, MD_DCS_GPU_GATHER, 10, &g), MD_ERR_INVALID_ARGUMENT, "field p");
    MD_CHECK_ERROR(md_cuda_dcs_plan_enqueue(&p), MD_ERR_INVALID_ARGUMENT, "is not a plan");
    MD_CHECK_ERROR(md_cuda_dcs_plan_sync(&p, NULL), MD_ERR_INVALID_ARGUMENT, "is not a plan");
    md_cuda_dcs_plan_destroy(&p);
    md_grid_free(&g);
}

/* Registry entries whose name starts with prefix. */
static int registered_with_prefix(const char *prefix) {
    int i, n = 0;
    for (i = 0; i < md_cuda_kernel_count(); i++) {
        const char *name = NULL;
        if (md_cuda_kernel_at(i, NULL, &name) == MD_OK && strncmp(name, prefix, strlen(prefix)) == 0) n++;
    }
    return n;
}

/* Run last: every kernel the rungs above launched is in the launch registry. Each rung's
 * kernel once (scatter, gather, const, the fix-up), and md__dcs_unroll_kernel in 10 shapes:
 * unroll4, unroll8, unroll8x2, l1, shared, the 4 compiled hybrid splits and the hybrid's
 * fine-grid fallback (dcs_gpu_hybrid_rule runs it). */
static void registry_holds_every_rung_kernel(void) {
    static const char *simple[] = {"md__dcs_scatter_kernel", "md__dcs_gather_kernel", "md__dcs_const_kernel",
                                   "md__dcs_fixup_kernel"};
    int i;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    for (i = 0; i < 4; i++) MD_CHECKF(registered_with_prefix(simple[i]) == 1, "%s is not registered once", simple[i]);
    MD_CHECKF(registered_with_prefix("md__dcs_unroll_kernel<") == 10, "%d shapes of md__dcs_unroll_kernel registered, want 10",
              registered_with_prefix("md__dcs_unroll_kernel<"));
    MD_CHECK(registered_with_prefix("md__dcs_unroll_kernel<8, 1, 0x0, 0, 1, 16>") == 1); /* unroll8 */
}

int main(void) {
    MD_RUN(soft_rsqrt_every_float);
    MD_RUN(dcs_gpu_bad_arguments);
    MD_RUN(dcs_gpu_out_count);
    MD_RUN(dcs_gpu_scatter);
    MD_RUN(dcs_gpu_gather);
    MD_RUN(dcs_gpu_const);
    MD_RUN(dcs_gpu_unroll4);
    MD_RUN(dcs_gpu_unroll8);
    MD_RUN(dcs_gpu_unroll8x2);
    MD_RUN(dcs_gpu_l1);
    MD_RUN(dcs_gpu_shared);
    MD_RUN(dcs_gpu_hybrid);
    MD_RUN(dcs_gpu_device_api);
    MD_RUN(soft_rsqrt_device_bits);
    MD_RUN(dcs_gpu_hybrid_rule);
    MD_RUN(dcs_gpu_atom_on_point);
    MD_RUN(dcs_plan_args_and_zeroed_destroy);
    MD_RUN(dcs_plan_every_rung);
    MD_RUN(dcs_plan_repeated_enqueue_one_sync);
    MD_RUN(dcs_plan_concurrent_plans);
    MD_RUN(dcs_plan_const_buffer_claim);
    MD_RUN(dcs_plan_capacity_errors);
    MD_RUN(dcs_plan_enqueue_captures);
    MD_RUN(registry_holds_every_rung_kernel);
    return md_test_summary();
}
