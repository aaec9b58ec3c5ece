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
 * runs on its own plan and is checked (NaN-poisoned output, planes 0, 66, 131 against
 * md_dcs_simple in double, tolerance 1e-4) before it is timed; a failed rung shows no rate.
 *
 * Wave sweep (a second table; --only sweep runs it alone): gpu_unroll8 on 256 x 256 x nz
 * grids, nz around multiples of the planes one wave of blocks covers (blocks_per_wave /
 * blocks per plane, md_cuda_dcs_launch_shape). Plane 0 of every size is checked against the
 * reference. The rate drops just past each multiple: the last wave runs few blocks on a
 * mostly idle GPU.
 *
 * Profiling (tests/gpu_profile.sh): --only gpu_gather,gpu_const --grid 256,256,8 runs just the
 * two rungs Nsight Compute compares, on a small grid. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "ladder.h"
#include "exercise.cu"

/* The ladder, one row per rung (the exercise runs on a gpu_gather plan's buffers: the grid
 * unpadded). */
static const ladder_rung_row rows[] = {
    {MD_DCS_GPU_GATHER, "gpu_gather", NULL, 0},       {MD_DCS_GPU_CONST, "gpu_const", NULL, 0},
    {MD_DCS_GPU_UNROLL4, "gpu_unroll4", NULL, 0},     {MD_DCS_GPU_UNROLL8, "gpu_unroll8", NULL, 0},
    {MD_DCS_GPU_UNROLL8X2, "gpu_unroll8x2", NULL, 0}, {MD_DCS_GPU_GATHER, "exercise", LADDER_FN(exercise_dcs), 0},
};

/* gpu_unroll8 on the case's nx x ny x nz' grids, nz' around multiples of the planes one wave
 * covers (quick: nz' 1..3): a second table, one row "sweep_<nz'>" per size, each through the
 * same steps as the ladder (ladder_rung), checked on plane 0 (the same for every nz'), with the
 * size's blocks and waves under it. Returns the number of sizes that failed. */
static int wave_sweep(const ladder_opts *o, const ladder_dcs_case *c, const char *device, double ceiling, int reps) {
    ladder l;
    ladder_dcs_case v;
    ladder_rung_row row;
    ladder_measure m;
    long long blocks = 0;
    int bpw = 0, per_plane, ppw, failed = 0, k, i, nzs[64], count = 0, bpw_now = 0;
    char name[32], title[256];
    md_grid one = c->grid;
    one.n[2] = 1;
    one.data = NULL;
    if (md_cuda_dcs_launch_shape(MD_DCS_GPU_UNROLL8, &one, &blocks, &bpw) != MD_OK || blocks < 1 || bpw < 1) {
        printf("wave sweep: FAIL %s\n", md_last_error());
        return 1;
    }
    per_plane = (int)blocks;
    ppw = bpw / per_plane; /* planes per wave (exact when bpw is a multiple of per_plane; else a guide) */
    if (ppw < 1) ppw = 1;
    if (o->quick) {
        nzs[count++] = 1;
        nzs[count++] = 2;
        nzs[count++] = 3;
    } else {
        for (k = 1; k <= 2; k++) {
            const int base = k * ppw, offs[6] = {-ppw / 4, -2, 0, 1, 3, ppw / 4};
            for (i = 0; i < 6; i++)
                if (base + offs[i] >= 1 && count < 64) nzs[count++] = base + offs[i];
        }
        nzs[count++] = ppw / 2 >= 1 ? ppw / 2 : 1;
        for (i = 1; i < count; i++) /* ascending */
            for (k = i; k > 0 && nzs[k - 1] > nzs[k]; k--) {
                const int t = nzs[k];
                nzs[k] = nzs[k - 1];
                nzs[k - 1] = t;
            }
    }
    snprintf(title, sizeof title,
             "\nwave quantization: gpu_unroll8, %d x %d x nz points, %d atoms; %d blocks per plane, %d blocks per "
             "wave (%d planes per wave)",
             c->grid.n[0], c->grid.n[1], c->sys.n, per_plane, bpw, bpw / per_plane);
    ladder_begin(&l, o, "03_coalesced_unrolled", title, "atom-evals/s", "atoms*points", device);
    /* a view of the case: the same atoms and reference, nz' planes, plane 0 checked; its own plan */
    v = *c;
    memset(&v.plan, 0, sizeof v.plan);
    v.h_out = NULL;
    v.h_cap = 0;
    v.nplanes = 1; /* planes[0] is 0: its reference is ref[0 .. nx ny) */
    v.rows = &row;
    row.variant = MD_DCS_GPU_UNROLL8;
    row.name = name;
    row.launcher = NULL;
    row.split = 0;
    for (i = 0; i < count; i++) {
        v.grid.n[2] = nzs[i];
        snprintf(name, sizeof name, "sweep_%d", nzs[i]);
        if (!ladder_selected(&l, name) && !ladder_selected(&l, "sweep")) continue;
        if (md_cuda_dcs_launch_shape(MD_DCS_GPU_UNROLL8, &v.grid, &blocks, &bpw_now) != MD_OK) {
            ladder_row_error(&l, name, md_last_error());
            failed++;
            continue;
        }
        snprintf(l.note, sizeof l.note, "nz %d: %lld blocks = %.3f waves (%lld launched)", nzs[i], blocks,
                 (double)blocks / bpw_now, (blocks + bpw_now - 1) / bpw_now);
        m.work = (double)c->sys.n * (double)c->grid.n[0] * c->grid.n[1] * nzs[i];
        m.size = (long long)m.work;
        m.ceiling = ceiling;
        m.tol = c->tol;
        m.reps = reps;
        failed += !ladder_rung(&l, &ladder_dcs_gpu_ops, &v, 0, name, &m);
    }
    free(v.h_out);
    if (failed) printf("  %d sweep size(s) FAILED\n", failed);
    return failed;
}

int main(int argc, char **argv) {
    ladder l;
    ladder_opts o;
    ladder_dcs_case c;
    char device[320];
    double ceiling = NAN;
    int reps, rc = ladder_dcs_gpu_begin(&l, &o, argc, argv, "Chapter 03: constant memory, coalesced unrolled kernels, waves.",
                                        "03_coalesced_unrolled", "Chapter 03 - direct Coulomb sum: constant memory, unrolling",
                                        device, sizeof device, &ceiling);
    if (rc >= 0) return rc;
    reps = o.reps ? o.reps : (o.quick ? 3 : 11);
    /* --quick: 4001 atoms (two constant chunks) on 37 x 29 x 11 points */
    if (o.quick ? ladder_dcs_case_make(&c, &o, 4001, 37, 29, 11, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL)
                : ladder_dcs_case_make(&c, &o, 4000, 256, 256, 132, 0.1, 0, 1, rows, LADDER_DCS_GPU_TOL))
        return 1;
    printf("system: %d atoms, %d x %d x %d grid\n", c.sys.n, c.grid.n[0], c.grid.n[1], c.grid.n[2]);
    ladder_dcs_run(&l, &c, (int)(sizeof rows / sizeof rows[0]), ceiling, reps, 1);
    rc = ladder_end(&l);
    if ((!o.only || ladder_selected(&l, "sweep")) && wave_sweep(&o, &c, device, ceiling, o.quick ? 2 : 5)) rc = 1;
    ladder_dcs_case_free(&c);
    return rc;
}
