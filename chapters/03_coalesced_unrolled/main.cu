/* chapters/03_coalesced_unrolled - constant memory, thread coarsening, padding, waves.
 *
 *   build/chapters/03_coalesced_unrolled            the ladder, then the wave sweep
 *   build/chapters/03_coalesced_unrolled --quick    small sizes, every rung checked (make test)
 *   build/chapters/03_coalesced_unrolled --json F   one md_bench JSON line per rung and per
 *                                                   sweep size (variant "sweep_<nz>")
 *
 * Rungs (md_cuda.cu.h, section dcs):
 *   gpu_gather    chapter 02's best: the baseline
 *   gpu_const     md__dcs_const_kernel: atoms in __constant__ memory, MD_DCS_CONST_CHUNK a launch
 *   gpu_unroll4   md__dcs_unroll_kernel<4,...>: 4 points per thread, BLOCK_X apart, dy^2+dz^2 reused
 *   gpu_unroll8   md__dcs_unroll_kernel<8,...>: 8 points per thread, output padded to whole tiles
 *   gpu_unroll8x2 the same with 8 points in each of 2 rows per thread: an atom's dz^2 serves
 *                 both rows, and twice the independent rsqrts per thread keep MUFU busier
 *   exercise      your kernel in exercise.cu (it starts as the gather rung)
 * Default system: 4000 random charges (seed LADDER_SEED) on 256 x 256 x 132 points, 0.1 nm
 * apart: 3.5e10 atom-evals, whole waves for every unrolled rung on a 132-SM GPU. Each rung
 * is checked (NaN-poisoned output, planes 0, 66, 131 against
 * md_dcs_simple in double, tolerance 1e-4) before it is timed.
 *
 * Wave sweep: gpu_unroll8 on 256 x 256 x nz grids, nz around multiples of the planes one
 * wave of blocks covers (blocks_per_wave / blocks per plane, md_cuda_dcs_launch_shape).
 * Plane 0 of every size is checked against the reference. The rate drops just past each
 * multiple: the last wave runs few blocks on a mostly idle GPU. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "dcs_gpu.h"
#include "exercise.cu"

/* One sweep size: check plane 0, time, print, append JSON. Returns 1 if it passed. */
static int sweep_point(ladder *l, const dcs_gpu_case *c, int nz, int bpw, double ceiling, int reps) {
    dcs_gpu_run r;
    md_grid geom = c->grid;
    md_cuda_bench_desc desc;
    long long blocks = 0;
    int d[3], waves, ok = 0, bpw_now = 0;
    size_t count, k, np = (size_t)c->grid.n[0] * c->grid.n[1];
    float *h;
    double t = -1.0, err = INFINITY, work, rate;
    geom.n[2] = nz;
    geom.data = NULL;
    work = (double)c->sys.n * (double)c->grid.n[0] * c->grid.n[1] * nz;
    if (md_cuda_dcs_out_dims(MD_DCS_GPU_UNROLL8, &geom, d) != MD_OK ||
        md_cuda_dcs_launch_shape(MD_DCS_GPU_UNROLL8, &geom, &blocks, &bpw_now) != MD_OK) {
        printf("  sweep nz %d: FAIL %s\n", nz, md_last_error());
        return 0;
    }
    (void)bpw;
    count = (size_t)d[0] * d[1] * d[2];
    memset(&r, 0, sizeof r);
    r.c = c;
    r.variant = MD_DCS_GPU_UNROLL8;
    h = (float *)malloc(count * sizeof(float));
    if (!h || cudaMalloc((void **)&r.d_out, count * sizeof(float)) != cudaSuccess) {
        printf("  sweep nz %d: FAIL out of memory\n", nz);
        free(h);
        return 0;
    }
    /* run on geom, not c->grid: a private copy of the case with this geometry */
    {
        dcs_gpu_case cs = *c;
        cs.grid = geom;
        r.c = &cs;
        if (md_cuda_poison(r.d_out, count, 0) == MD_OK && dcs_gpu_run_once(&r, 0) == MD_OK &&
            cudaDeviceSynchronize() == cudaSuccess &&
            cudaMemcpy(h, r.d_out, count * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess) {
            float *p0 = (float *)malloc(np * sizeof(float));
            int j;
            err = 0.0;
            for (k = 0; k < count; k++)
                if (isnan(h[k])) { err = INFINITY; break; }
            if (p0 && err == 0.0) {
                for (j = 0; j < c->grid.n[1]; j++)
                    memcpy(p0 + (size_t)j * c->grid.n[0], h + (size_t)j * d[0], (size_t)c->grid.n[0] * sizeof(float));
                err = md_max_rel_error(p0, c->ref, np); /* plane 0 is the same for every nz */
            }
            free(p0);
        }
        if (err <= DCS_GPU_TOL) {
            memset(&desc, 0, sizeof desc);
            desc.reps = reps;
            if (md_cuda_bench(dcs_gpu_run_once, &r, &desc, &t) == MD_OK) ok = 1;
        }
    }
    waves = bpw_now > 0 ? (int)((blocks + bpw_now - 1) / bpw_now) : 0;
    rate = ok ? work / t : NAN;
    printf("  %5d %8lld %6.3f %5d %11.3f %14.4g %7.1f%% %10.2e  %s\n", nz, blocks,
           bpw_now > 0 ? (double)blocks / bpw_now : NAN, waves, ok ? 1e3 * t : NAN, rate,
           isfinite(ceiling) && ok ? 100.0 * rate / ceiling : NAN, err, ok ? "ok" : "FAIL");
    if (ok) {
        char name[64];
        snprintf(name, sizeof name, "sweep_%d", nz);
        ok = ladder_json(l, name, (long long)work, t, rate, ceiling, err);
    }
    {
        cudaError_t fe = cudaFree(r.d_out);
        if (fe != cudaSuccess) {
            printf("  sweep nz %d: FAIL cudaFree: %s\n", nz, cudaGetErrorString(fe));
            ok = 0;
        }
    }
    free(h);
    return ok;
}

/* gpu_unroll8 on the case's nx x ny x nz (256 x 256; quick: nz 1..3) around multiples of a wave. */
static int wave_sweep(ladder *l, const dcs_gpu_case *c, double ceiling, int reps) {
    long long blocks = 0;
    int bpw = 0, per_plane, ppw, failed = 0, m, i, nzs[64], count = 0;
    md_grid one = c->grid;
    one.n[2] = 1;
    if (md_cuda_dcs_launch_shape(MD_DCS_GPU_UNROLL8, &one, &blocks, &bpw) != MD_OK || blocks < 1 || bpw < 1) {
        printf("wave sweep: FAIL %s\n", md_last_error());
        return 1;
    }
    per_plane = (int)blocks;
    ppw = bpw / per_plane; /* planes per wave (blocks of one plane never straddle a wave here
                              when bpw is a multiple of per_plane; else a guide only) */
    if (ppw < 1) ppw = 1;
    if (l->opts.quick) {
        nzs[count++] = 1;
        nzs[count++] = 2;
        nzs[count++] = 3;
    } else {
        for (m = 1; m <= 2; m++) {
            const int base = m * ppw, offs[6] = {-ppw / 4, -2, 0, 1, 3, ppw / 4};
            for (i = 0; i < 6; i++)
                if (base + offs[i] >= 1 && count < 64) nzs[count++] = base + offs[i];
        }
        nzs[count++] = ppw / 2;
        for (i = 1; i < count; i++) /* ascending */
            for (m = i; m > 0 && nzs[m - 1] > nzs[m]; m--) {
                const int t = nzs[m];
                nzs[m] = nzs[m - 1];
                nzs[m - 1] = t;
            }
    }
    printf("\nwave quantization: gpu_unroll8, %d x %d x nz points, %d atoms; %d blocks per plane, "
           "%d blocks per wave (%d planes per wave)\n",
           c->grid.n[0], c->grid.n[1], c->sys.n, per_plane, bpw, bpw / per_plane);
    printf("  %5s %8s %6s %5s %11s %14s %8s %10s  %s\n", "nz", "blocks", "waves", "ceil", "time (ms)", "atom-evals/s",
           "ceiling", "err (z=0)", "check");
    for (i = 0; i < count; i++) failed += !sweep_point(l, c, nzs[i], bpw, ceiling, reps);
    if (failed) printf("  %d sweep size(s) FAILED\n", failed);
    return failed;
}

int main(int argc, char **argv) {
    ladder l;
    ladder_opts o;
    dcs_gpu_case c;
    char device[320];
    double ceiling = NAN;
    int reps, rc = dcs_gpu_begin(&l, &o, argc, argv, "Chapter 03: constant memory, coalesced unrolled kernels, waves.",
                                 "03_coalesced_unrolled", "Chapter 03 - direct Coulomb sum: constant memory, unrolling",
                                 device, sizeof device, &ceiling);
    if (rc >= 0) return rc;
    reps = o.reps ? o.reps : (o.quick ? 3 : 11);
    /* --quick: 4001 atoms (two constant chunks) on 37 x 29 x 11 points */
    if (dcs_gpu_case_setup(&c, &o, 4000, 256, 256, 132)) return 1;
    printf("system: %d atoms, %d x %d x %d grid\n", c.sys.n, c.grid.n[0], c.grid.n[1], c.grid.n[2]);
    dcs_gpu_rung(&l, &c, "gpu_gather", MD_DCS_GPU_GATHER, 0, NULL, ceiling, reps);
    dcs_gpu_rung(&l, &c, "gpu_const", MD_DCS_GPU_CONST, 0, NULL, ceiling, reps);
    dcs_gpu_rung(&l, &c, "gpu_unroll4", MD_DCS_GPU_UNROLL4, 0, NULL, ceiling, reps);
    dcs_gpu_rung(&l, &c, "gpu_unroll8", MD_DCS_GPU_UNROLL8, 0, NULL, ceiling, reps);
    dcs_gpu_rung(&l, &c, "gpu_unroll8x2", MD_DCS_GPU_UNROLL8X2, 0, NULL, ceiling, reps);
    dcs_gpu_rung(&l, &c, "exercise", MD_DCS_GPU_GATHER, 0, exercise_dcs, ceiling, reps);
    rc = ladder_end(&l);
    if (wave_sweep(&l, &c, ceiling, o.quick ? 2 : 5)) rc = 1;
    dcs_gpu_case_free(&c);
    return rc;
}
