/* Chapter 05: histograms. The radial distribution function g(r) of one frame, as a
 * ladder of rungs that all count exactly the same integer pairs per bin:
 *
 *   cpu_simple    one loop over the pairs, one histogram (the reference)
 *   cpu_private   OpenMP: one private histogram per thread, summed at the end
 *   gpu_global    one thread per A atom, atomicAdd into one global histogram
 *   gpu_shared    one shared-memory histogram per block, B tiles in shared memory
 *   gpu_warp      one shared-memory histogram per warp
 *   gpu_passes    the shared kernel in passes over bin ranges (for big histograms)
 *   exercise      your kernel (exercise.cu)
 *
 * System: a disordered FCC crystal at the density of liquid argon (lattice 0.5719 nm,
 * every atom moved by a Gaussian displacement of 0.06 nm per axis, seed LADDER_SEED):
 * a cheap stand-in with liquid-like density and a first peak near 0.4 nm; it is not a
 * simulated Lennard-Jones liquid. A = B = all atoms, rmax 1.5 nm, 300 bins.
 * CPU rungs: 12^3 cells (6,912 atoms); GPU rungs: 29^3 cells (97,556 atoms), checked
 * against cpu_private on that frame. --quick: 6^3 and 8^3 cells.
 * Rate: pair distances per second (all na (na - 1) / 2 pairs, in range or not).
 *
 *   build/chapters/05_histograms [--quick] [--json FILE] [--reps N] */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#ifdef __CUDACC__
#include "exercise.cu"
#else /* no nvcc: the Makefile compiles this file as C11; the CPU rungs run, the GPU rungs SKIP */
#include "md.h"
#endif
#include "ladder.h"
#include <float.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define RMAX 1.5
#define NBINS 300
#define JITTER 0.06

/* The liquid stand-in: FCC (md_build_fcc, argon lattice) with every atom displaced by
 * N(0, JITTER^2) per axis. */
static md_status disordered_fcc(md_system *s, int cells) {
    md_fcc_desc d;
    md_rng rng;
    md_status st;
    int i;
    memset(&d, 0, sizeof d);
    d.cells = cells;
    d.seed = LADDER_SEED;
    if ((st = md_build_fcc(s, &d)) != MD_OK) return st;
    md_rng_seed(&rng, LADDER_SEED + 1);
    for (i = 0; i < s->n; i++) {
        s->xyzq[i].x += (float)(JITTER * md_rng_normal(&rng));
        s->xyzq[i].y += (float)(JITTER * md_rng_normal(&rng));
        s->xyzq[i].z += (float)(JITTER * md_rng_normal(&rng));
    }
    return MD_OK;
}

/* Counts agree exactly (0) or the largest count difference relative to the largest
 * count: the error column. */
static double count_error(const uint64_t *out, const uint64_t *ref, int n) {
    double worst = 0.0, scale = 1.0;
    int k;
    for (k = 0; k < n; k++)
        if ((double)ref[k] > scale) scale = (double)ref[k];
    for (k = 0; k < n; k++) {
        double e = fabs((double)out[k] - (double)ref[k]) / scale;
        if (e > worst) worst = e;
    }
    return worst;
}

typedef struct cpu_ctx {
    md_rdf_variant v;
    const md_system *s;
    md_rdf *r;
} cpu_ctx;

static md_status run_cpu(void *p) {
    cpu_ctx *c = (cpu_ctx *)p;
    md_rdf_reset(c->r);
    return md_rdf_accumulate(c->v, c->r, c->s->xyzq, c->s->n, NULL, c->s->n, NULL, 0, c->s->box);
}

#ifdef __CUDACC__
typedef struct gpu_ctx {
    md_rdf_variant v; /* MD_RDF_VARIANT_COUNT: the exercise */
    md_cuda_rdf_plan *plan;
    md_rdf *r;
    const md_float4 *d_xyz;
    const double *box;
    unsigned int *d_hist;
} gpu_ctx;

static md_status run_gpu(void *p, cudaStream_t stream) {
    gpu_ctx *c = (gpu_ctx *)p;
    (void)stream; /* the plan's stream is the default stream, as the timer's */
    if (c->v == MD_RDF_VARIANT_COUNT) return exercise_rdf(c->plan, c->r, c->box, c->d_hist, 0);
    md_rdf_reset(c->r);
    return md_cuda_rdf_accumulate(c->v, c->plan, c->r, c->d_xyz, c->box);
}

/* The GPU ladder on one frame. dense = 0: rmax = RMAX (few pairs in range: the distance
 * arithmetic bounds the kernels); dense = 1: rmax = 0.49 box (about half of all pairs in
 * range: the histogram updates bound them, and privatization shows). Variants of the dense
 * table carry the suffix "_dense" in the table and the JSON. */
static int gpu_part(ladder_opts *o, int cells, int dense) {
    static const md_rdf_variant rungs[4] = {MD_RDF_GPU_GLOBAL, MD_RDF_GPU_SHARED, MD_RDF_GPU_WARP, MD_RDF_GPU_PASSES};
    md_cuda_device_info info;
    md_system s;
    md_rdf ref, g;
    md_cuda_rdf_plan plan;
    md_float4 *d_xyz = NULL;
    unsigned int *d_hist = NULL, *h_hist = NULL;
    double pairs, t_ref, smem_ceiling = NAN, in_range, ceiling = NAN, t;
    uint64_t total = 0;
    md_cuda_bench_desc bd;
    ladder l;
    char title[256], dev[300];
    int v, k, reps = o->reps ? o->reps : (o->quick ? 3 : (dense ? 5 : 11)), failed;
    double rmax;
    char names[5][32];
    cpu_ctx cc;
    for (v = 0; v < 5; v++)
        snprintf(names[v], sizeof names[v], "%s%s", v < 4 ? md_rdf_variant_name(rungs[v]) : "exercise",
                 dense ? "_dense" : "");
    if (!md_cuda_available()) {
        printf("\nSKIP: %s\n", md_last_error());
        for (v = 0; v < 5; v++) printf("SKIP %s: no usable CUDA device\n", names[v]);
        return 0;
    }
    if (md_cuda_get_device_info(0, &info) != MD_OK || disordered_fcc(&s, cells) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    snprintf(dev, sizeof dev, "%s", info.name);
    pairs = 0.5 * (double)s.n * (double)(s.n - 1);
    rmax = dense ? 0.49 * s.box[0] : RMAX;
    if (md_rdf_init(&ref, rmax, NBINS) != MD_OK || md_rdf_init(&g, rmax, NBINS) != MD_OK) return 1;
    if (!o->quick && md_cuda_ceiling_smem_atomic(&smem_ceiling) != MD_OK) {
        printf("note: shared-atomic ceiling not measured: %s\n", md_last_error());
        smem_ceiling = NAN;
    }
    snprintf(title, sizeof title,
             "\nChapter 05, GPU%s: RDF of a %d-atom frame (disordered FCC, A = B, %.4g pairs, rmax %.2f nm, %d bins)",
             dense ? " (dense: rmax = 0.49 box)" : "", s.n, pairs, rmax, NBINS);
    ladder_begin(&l, o, "05_histograms", title, "pairs/s", "pairs", dev);
    cc.v = MD_RDF_CPU_PRIVATE;
    cc.s = &s;
    cc.r = &ref;
    t_ref = ladder_time_cpu(run_cpu, &cc, 1);
    if (t_ref < 0) {
        ladder_row_error(&l, dense ? "cpu_private_dense" : "cpu_private", md_last_error());
        return 1;
    }
    for (k = 0; k < NBINS; k++) total += ref.counts[k];
    in_range = (double)total / pairs; /* shared atomics per pair */
    if (isfinite(smem_ceiling) && in_range > 0) ceiling = smem_ceiling / in_range;
    ladder_row(&l, dense ? "cpu_private_dense" : "cpu_private", (long long)pairs, t_ref, pairs, NAN, NAN, 0.0);
    printf("    %.4f of the pairs are inside rmax (one shared atomic each)\n", in_range);
    l.device = dev;
    if (cudaMalloc((void **)&d_xyz, (size_t)s.n * sizeof(md_float4)) != cudaSuccess ||
        cudaMemcpy(d_xyz, s.xyzq, (size_t)s.n * sizeof(md_float4), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMalloc((void **)&d_hist, NBINS * sizeof(unsigned int)) != cudaSuccess ||
        md_cuda_rdf_plan_create(&plan, s.n, NULL, s.n, NULL, 0, NBINS, NULL) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    memset(&bd, 0, sizeof bd);
    bd.reps = reps;
    for (v = 0; v <= 4; v++) {
        gpu_ctx gc;
        const char *name = names[v];
        double err;
        gc.v = v < 4 ? rungs[v] : MD_RDF_VARIANT_COUNT;
        gc.plan = &plan;
        gc.r = &g;
        gc.d_xyz = d_xyz;
        gc.box = s.box;
        gc.d_hist = d_hist;
        if (v == 4) { /* the exercise: 32-bit counts of one launch must not wrap */
            if ((double)total > 4294967295.0) {
                ladder_row_skip(&l, name, "this frame's counts could overflow a 32-bit bin in one launch");
                continue;
            }
        }
        /* check first, on a poisoned plan (and exercise histogram), then time */
        if ((v == 4 && md_cuda_poison((float *)d_hist, NBINS, 0) != MD_OK) ||
            md_cuda_poison((float *)plan.d_a, 4 * (size_t)plan.na, 0) != MD_OK ||
            md_cuda_poison((float *)plan.d_h64, 2 * ((size_t)NBINS + 1), 0) != MD_OK) {
            ladder_row_error(&l, name, md_last_error());
            continue;
        }
        if (v == 4) {
            md_status st;
            gpu_ctx prep = gc;
            prep.v = MD_RDF_GPU_GLOBAL; /* gathers the frame into plan.d_a */
            if ((st = run_gpu(&prep, 0)) == MD_OK) st = run_gpu(&gc, 0);
            if (st != MD_OK) {
                ladder_row_error(&l, name, md_last_error());
                continue;
            }
            if (!h_hist) h_hist = (unsigned int *)malloc(NBINS * sizeof(unsigned int));
            if (!h_hist || cudaMemcpy(h_hist, d_hist, NBINS * sizeof(unsigned int), cudaMemcpyDeviceToHost) != cudaSuccess) {
                ladder_row_error(&l, name, "cannot copy the exercise histogram back");
                continue;
            }
            for (k = 0; k < NBINS; k++) g.counts[k] = h_hist[k];
        } else if (run_gpu(&gc, 0) != MD_OK) {
            ladder_row_error(&l, name, md_last_error());
            continue;
        }
        err = count_error(g.counts, ref.counts, NBINS);
        if (err != 0.0) {
            ladder_row(&l, name, (long long)pairs, -1.0, pairs, ceiling, err, 0.0);
            continue;
        }
        if (md_cuda_bench(run_gpu, &gc, &bd, &t) != MD_OK) {
            ladder_row_error(&l, name, md_last_error());
            continue;
        }
        ladder_row(&l, name, (long long)pairs, t, pairs, ceiling, 0.0, 0.0);
        if (v == 2 && isfinite(smem_ceiling))
            printf("    %s: %.3g shared atomics/s (%.4f per pair) = %.1f%% of the measured shared-atomic "
                   "ceiling %.3g/s\n", name, in_range * pairs / t, in_range, 100.0 * in_range * pairs / t / smem_ceiling,
                   smem_ceiling);
    }
    failed = ladder_end(&l);
    md_cuda_rdf_plan_destroy(&plan);
    {
        cudaError_t e1 = cudaFree(d_xyz), e2 = cudaFree(d_hist);
        if (e1 != cudaSuccess || e2 != cudaSuccess) {
            printf("FAIL cudaFree: %s\n", cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
            failed = 1;
        }
    }
    free(h_hist);
    md_rdf_free(&ref);
    md_rdf_free(&g);
    md_system_free(&s);
    return failed;
}
#else
static int gpu_part(ladder_opts *o, int cells, int dense) {
    (void)o, (void)cells, (void)dense;
    printf("\nSKIP: nvcc not found: the GPU rungs were not built\n");
    return 0;
}
#endif

int main(int argc, char **argv) {
    ladder_opts o;
    ladder l;
    md_system s;
    md_rdf ref, r;
    cpu_ctx c;
    char device[64], title[256];
    double pairs, t_simple, t_private, err;
    int rc = ladder_parse(&o, argc, argv,
                          "RDF histogram ladder: CPU rungs, then GPU rungs when a device exists.");
    int cpu_cells, gpu_cells, threads = 1, reps, failed;
    if (rc) return rc > 0 ? 0 : 2;
    cpu_cells = o.quick ? 6 : 12;
    gpu_cells = o.quick ? 8 : 29;
    reps = o.reps ? o.reps : (o.quick ? 1 : 3);
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    snprintf(device, sizeof device, "cpu: %d threads", threads);
    if (disordered_fcc(&s, cpu_cells) != MD_OK || md_rdf_init(&ref, RMAX, NBINS) != MD_OK ||
        md_rdf_init(&r, RMAX, NBINS) != MD_OK) {
        fprintf(stderr, "setup: %s\n", md_last_error());
        return 1;
    }
    pairs = 0.5 * (double)s.n * (double)(s.n - 1);
    snprintf(title, sizeof title,
             "Chapter 05, CPU: RDF of a %d-atom frame (disordered FCC, A = B, %.4g pairs, rmax %.1f nm, %d bins)",
             s.n, pairs, RMAX, NBINS);
    ladder_begin(&l, &o, "05_histograms", title, "pairs/s", "pairs", device);
    c.s = &s;
    c.v = MD_RDF_CPU_SIMPLE;
    c.r = &ref;
    t_simple = ladder_time_cpu(run_cpu, &c, reps);
    if (t_simple < 0) ladder_row_error(&l, "cpu_simple", md_last_error());
    else ladder_row(&l, "cpu_simple", (long long)pairs, t_simple, pairs, NAN, NAN, 0.0);
    c.v = MD_RDF_CPU_PRIVATE;
    c.r = &r;
    t_private = ladder_time_cpu(run_cpu, &c, reps);
    if (t_private < 0) ladder_row_error(&l, "cpu_private", md_last_error());
    else {
        err = count_error(r.counts, ref.counts, NBINS);
        ladder_row(&l, "cpu_private", (long long)pairs, t_private, pairs, NAN, err, 0.0);
        printf("CPU multicore speedup (cpu_private / cpu_simple, %d threads): %.2fx\n", threads, t_simple / t_private);
    }
    failed = ladder_end(&l);
    md_rdf_free(&ref);
    md_rdf_free(&r);
    md_system_free(&s);
    failed |= gpu_part(&o, gpu_cells, 0);
#ifdef __CUDACC__
    if (md_cuda_available()) failed |= gpu_part(&o, gpu_cells, 1);
#endif
    return failed ? 1 : 0;
}
