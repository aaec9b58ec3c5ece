/* Chapter 05: histograms. The radial distribution function g(r) of one frame, as a
 * ladder of rungs that all count exactly the same integer pairs per bin:
 *
 *   cpu_simple    one loop over the pairs, one histogram (the reference)
 *   cpu_private   OpenMP: one private histogram per thread, summed at the end
 *   gpu_global    one thread per A atom, atomicAdd into one global histogram
 *   gpu_shared    one shared-memory histogram per block, B tiles in shared memory
 *   gpu_warp      one shared-memory histogram per warp
 *   gpu_passes    the shared kernel in passes over bin ranges (for big histograms)
 *   gpu_cell      a GPU cell list (cells >= rmax, CUB radix sort): only neighbouring cells
 *   exercise      your kernel (exercise.cu)
 *
 * System: a disordered FCC crystal at the density of liquid argon (lattice 0.5719 nm,
 * every atom moved by a Gaussian displacement of 0.06 nm per axis, seed LADDER_SEED):
 * a cheap stand-in with liquid-like density and a first peak near 0.4 nm; it is not a
 * simulated Lennard-Jones liquid. A = B = all atoms, rmax 1.5 nm, 300 bins.
 * CPU rungs: 12^3 cells (6,912 atoms); GPU rungs: 29^3 cells (97,556 atoms), checked
 * against cpu_private on that frame. --quick: 6^3 and 8^3 cells.
 * Rate: pair distances per second (all na (na - 1) / 2 pairs, in range or not).
 * Every row goes through ladder.h's ladder_rung (poison, run, check, time); a row whose counts
 * differ from the reference prints FAIL and no rate. A GPU row runs on one md_cuda_rdf_plan:
 * checked with md_cuda_rdf_accumulate (enqueue + sync), timed over enqueues alone (the frames
 * stay on the device; one sync after the timing drains them).
 *
 * Without nvcc the Makefile compiles this file as C11 (the GPU parts sit inside
 * #ifdef __CUDACC__): the CPU rows run and the GPU tables print SKIP.
 *
 *   build/chapters/05_histograms [--quick] [--json FILE] [--reps N] [--write-xyz FILE]
 * --write-xyz FILE writes the GPU table's frame (97,556 atoms; --quick: 2,048) as XYZ (Angstrom),
 * prints its box edge and exits, so bench/peers.py freud-rdf times freud on the same frame. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#ifdef __CUDACC__
#include "md_cuda.cu.h"
#include "ladder.h"
#include "exercise.cu"
#else /* no nvcc: CPU rows only */
#include "md.h"
#include "ladder.h"
#endif
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

#ifdef __CUDACC__
/** The exercise's launcher: count the plan's gathered frame (geometry g) into d_hist. */
typedef md_status (*rdf_exercise_fn)(const md_cuda_rdf_plan *p, const md_cuda_rdf_geom *g, unsigned int *d_hist,
                                     cudaStream_t stream);

/* One frame and the rows of a table. The first row to run is the reference: its counts go to
 * ref. A GPU row uses the plan (one for the whole table). */
typedef struct rdf_case {
    const md_system *s;
    const ladder_rung_row *rows;
    int row;
    md_rdf ref, out;      /* the reference counts; a row's counts */
    int have_ref;
    md_cuda_rdf_plan plan; /* GPU rows */
    md_float4 *d_xyz;      /* the frame on the device */
    unsigned int *d_hist;  /* the exercise's 32-bit histogram */
    unsigned int *h_hist;
    md_cuda_rdf_geom geom; /* the exercise's frame geometry (md_cuda_rdf_plan_gather) */
} rdf_case;
#else /* the C build: CPU rows only */
typedef struct rdf_case {
    const md_system *s;
    const ladder_rung_row *rows;
    int row;
    md_rdf ref, out;
    int have_ref;
} rdf_case;
#endif

static md_status rdf_run_cpu(void *ctx) {
    rdf_case *c = (rdf_case *)ctx;
    md_rdf_reset(&c->out);
    return md_rdf_accumulate((md_rdf_variant)c->rows[c->row].variant, &c->out, c->s->xyzq, c->s->n, NULL, c->s->n,
                             NULL, 0, c->s->box);
}

/* Poison what the row writes: the host counts (a value no frame gives), and for a GPU row the
 * plan's gathered positions and 32-bit histogram and the exercise's histogram (NaN bytes), on
 * the plan's stream. */
static md_status rdf_poison(void *ctx, int row) {
    rdf_case *c = (rdf_case *)ctx;
    md_status st = MD_OK;
    int k;
    c->row = row;
    for (k = 0; k < c->out.nbins; k++) c->out.counts[k] = ~(uint64_t)0;
    if (!md_rdf_variant_is_gpu((md_rdf_variant)c->rows[row].variant)) return MD_OK;
#ifndef __CUDACC__
    (void)st;
    return md_set_error(MD_ERR_UNSUPPORTED, "05_histograms", 0, NULL, "GPU rows need nvcc");
#else
    if ((st = md_cuda_poison((float *)c->plan.d_a, 4 * (size_t)c->plan.na, c->plan.queue.stream)) != MD_OK ||
        (st = md_cuda_poison((float *)c->plan.d_h32, (size_t)c->plan.nbins, c->plan.queue.stream)) != MD_OK)
        return st;
    return md_cuda_poison((float *)c->d_hist, (size_t)c->plan.nbins, c->plan.queue.stream);
#endif
}

#ifdef __CUDACC__
/* One enqueue of a GPU row: the library's rung (gather and count, into the plan's totals) or
 * the exercise's launcher (on the frame the check run gathered). */
static md_status rdf_enqueue(void *ctx, cudaStream_t stream) {
    rdf_case *c = (rdf_case *)ctx;
    const ladder_rung_row *r = &c->rows[c->row];
    (void)stream; /* md_cuda_bench runs on the plan's stream (desc.stream) */
    if (r->launcher) return ((rdf_exercise_fn)r->launcher)(&c->plan, &c->geom, c->d_hist, c->plan.queue.stream);
    return md_cuda_rdf_plan_enqueue((md_rdf_variant)r->variant, &c->plan, &c->out, c->d_xyz, c->s->box);
}
#endif

static md_status rdf_run(void *ctx, int row) {
    rdf_case *c = (rdf_case *)ctx;
    const ladder_rung_row *r = &c->rows[row];
    md_status st = MD_OK;
    int k = 0;
#ifdef __CUDACC__
    cudaError_t e;
#endif
    c->row = row;
    if (!md_rdf_variant_is_gpu((md_rdf_variant)r->variant)) return rdf_run_cpu(c);
#ifndef __CUDACC__
    (void)st;
    (void)k;
    return md_set_error(MD_ERR_UNSUPPORTED, "05_histograms", 0, NULL, "GPU rows need nvcc");
#else
    md_rdf_reset(&c->out);
    if (!r->launcher) return md_cuda_rdf_accumulate((md_rdf_variant)r->variant, &c->plan, &c->out, c->d_xyz, c->s->box);
    if ((st = md_cuda_rdf_plan_gather(&c->plan, &c->out, c->d_xyz, c->s->box, &c->geom)) != MD_OK ||
        (st = rdf_enqueue(c, c->plan.queue.stream)) != MD_OK || (st = md_cuda_rdf_plan_sync(&c->plan, NULL)) != MD_OK)
        return st;
    if ((e = cudaMemcpy(c->h_hist, c->d_hist, (size_t)c->plan.nbins * sizeof *c->h_hist, cudaMemcpyDeviceToHost)) !=
        cudaSuccess)
        return md_cuda_error(e, "cudaMemcpy(exercise histogram)", __FILE__, __LINE__);
    for (k = 0; k < c->plan.nbins; k++) c->out.counts[k] = c->h_hist[k];
    return MD_OK;
#endif
}

static md_status rdf_check(void *ctx, int row, double *error) {
    rdf_case *c = (rdf_case *)ctx;
    (void)row;
    if (!c->have_ref) {
        memcpy(c->ref.counts, c->out.counts, (size_t)c->ref.nbins * sizeof *c->ref.counts);
        c->have_ref = 1;
        *error = NAN;
        return MD_OK;
    }
    *error = count_error(c->out.counts, c->ref.counts, c->ref.nbins);
    return MD_OK;
}

/* CPU rows: wall clock. GPU rows: events around the enqueues on the plan's stream; the frames
 * the library's rung enqueued pile up in the plan's totals, and one sync drains them. */
static md_status rdf_time(void *ctx, int row, int reps, double *seconds) {
    rdf_case *c = (rdf_case *)ctx;
#ifdef __CUDACC__
    md_cuda_bench_desc d;
    md_status st;
#endif
    c->row = row;
    if (!md_rdf_variant_is_gpu((md_rdf_variant)c->rows[row].variant)) return ladder_time_cpu(rdf_run_cpu, c, reps, seconds);
#ifndef __CUDACC__
    return md_set_error(MD_ERR_UNSUPPORTED, "05_histograms", 0, NULL, "GPU rows need nvcc");
#else
    memset(&d, 0, sizeof d);
    d.reps = reps;
    d.stream = c->plan.queue.stream;
    if ((st = md_cuda_bench(rdf_enqueue, c, &d, seconds)) != MD_OK) return st;
    md_rdf_reset(&c->out);
    return md_cuda_rdf_plan_sync(&c->plan, &c->out);
#endif
}

static const ladder_ops rdf_ops = {NULL, rdf_poison, rdf_run, rdf_check, rdf_time, NULL};

/* The GPU ladder on one frame. dense = 0: rmax = RMAX (few pairs in range: the distance
 * arithmetic bounds the kernels); dense = 1: rmax = 0.49 box (about half of all pairs in
 * range: the histogram updates bound them, and privatization shows). Variants of the dense
 * table carry the suffix "_dense" in the table and the JSON. */
#ifdef __CUDACC__
static int gpu_part(const ladder_opts *o, int cells, int dense) {
    static const int rungs[6] = {MD_RDF_GPU_GLOBAL, MD_RDF_GPU_SHARED, MD_RDF_GPU_WARP, MD_RDF_GPU_PASSES, MD_RDF_GPU_CELL,
                                 MD_RDF_GPU_WARP};
    md_cuda_device_info info;
    md_system s;
    rdf_case c;
    ladder_rung_row rows[7];
    ladder_measure m;
    double pairs, smem_ceiling = NAN, in_range, ceiling = NAN, rmax;
    uint64_t total = 0;
    ladder l;
    char title[256], dev[300], names[7][32];
    int v, k, reps = o->reps ? o->reps : (o->quick ? 3 : (dense ? 5 : 11)), failed;
    cudaError_t e;
    if (!md_cuda_available()) {
        printf("\nSKIP: %s\n", md_last_error());
        return 0;
    }
    if (md_cuda_get_device_info(0, &info) != MD_OK || disordered_fcc(&s, cells) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    snprintf(dev, sizeof dev, "%s", info.name);
    for (v = 0; v < 7; v++) {
        snprintf(names[v], sizeof names[v], "%s%s",
                 v == 0 ? "cpu_private" : v < 6 ? md_rdf_variant_name((md_rdf_variant)rungs[v - 1]) : "exercise",
                 dense ? "_dense" : "");
        rows[v].variant = v == 0 ? MD_RDF_CPU_PRIVATE : rungs[v - 1];
        rows[v].name = names[v];
        rows[v].launcher = v == 6 ? LADDER_FN(exercise_rdf) : NULL;
        rows[v].split = 0;
    }
    pairs = 0.5 * (double)s.n * (double)(s.n - 1);
    rmax = dense ? 0.49 * s.box[0] : RMAX;
    memset(&c, 0, sizeof c);
    c.s = &s;
    c.rows = rows;
    if (md_rdf_init(&c.ref, rmax, NBINS) != MD_OK || md_rdf_init(&c.out, rmax, NBINS) != MD_OK ||
        md_cuda_rdf_plan_create(&c.plan, s.n, NULL, s.n, NULL, 0, NBINS, NULL) != MD_OK ||
        md_cuda_alloc((void **)&c.d_xyz, (size_t)s.n, sizeof(md_float4), "frame") != MD_OK ||
        md_cuda_alloc((void **)&c.d_hist, NBINS, sizeof(unsigned int), "exercise histogram") != MD_OK ||
        !(c.h_hist = (unsigned int *)malloc(NBINS * sizeof(unsigned int)))) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    /* the frame on the device, landed before the plan's (non-blocking) stream reads it */
    if ((e = cudaMemcpy(c.d_xyz, s.xyzq, (size_t)s.n * sizeof(md_float4), cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess) {
        printf("FAIL setup: %s\n", cudaGetErrorString(e));
        return 1;
    }
    if (!o->quick && md_cuda_ceiling_smem_atomic(&smem_ceiling) != MD_OK) {
        printf("note: shared-atomic ceiling not measured: %s\n", md_last_error());
        smem_ceiling = NAN;
    }
    snprintf(title, sizeof title,
             "\nChapter 05, GPU%s: RDF of a %d-atom frame (disordered FCC, A = B, %.4g pairs, rmax %.2f nm, %d bins)",
             dense ? " (dense: rmax = 0.49 box)" : "", s.n, pairs, rmax, NBINS);
    ladder_begin(&l, o, "05_histograms", title, "pairs/s", "pairs", dev);
    m.work = pairs;
    m.size = (long long)pairs;
    m.tol = 0.0; /* integer counts: exactly equal */
    m.ceiling = NAN;
    m.reps = 1; /* the CPU reference on this big frame is slow */
    failed = !ladder_rung(&l, &rdf_ops, &c, 0, names[0], &m);
    for (k = 0; k < NBINS; k++) total += c.ref.counts[k];
    in_range = (double)total / pairs; /* shared atomics per pair */
    if (isfinite(smem_ceiling) && in_range > 0) ceiling = smem_ceiling / in_range;
    printf("    %.4f of the pairs are inside rmax (one shared atomic each)\n", in_range);
    m.ceiling = ceiling;
    m.reps = reps;
    for (v = 1; v < 7 && c.have_ref; v++) {
        if (!ladder_selected(&l, names[v])) continue;
        if (v == 6 && (double)total > 4294967295.0) { /* the exercise: 32-bit counts of one launch must not wrap */
            ladder_row_skip(&l, names[v], "this frame's counts could overflow a 32-bit bin in one launch");
            continue;
        }
        if (ladder_rung(&l, &rdf_ops, &c, v, names[v], &m) && rows[v].variant == MD_RDF_GPU_WARP && !rows[v].launcher &&
            isfinite(smem_ceiling) && l.last_time > 0.0)
            printf("    %s: %.3g shared atomics/s (%.4f per pair) = %.1f%% of the measured shared-atomic ceiling %.3g/s\n",
                   names[v], in_range * pairs / l.last_time, in_range, 100.0 * in_range * pairs / l.last_time / smem_ceiling,
                   smem_ceiling);
    }
    failed = ladder_end(&l) || failed;
    md_cuda_rdf_plan_destroy(&c.plan);
    md_cuda_free(c.d_xyz);
    md_cuda_free(c.d_hist);
    free(c.h_hist);
    md_rdf_free(&c.ref);
    md_rdf_free(&c.out);
    md_system_free(&s);
    return failed;
}
#else
static int gpu_part(const ladder_opts *o, int cells, int dense) {
    (void)o;
    (void)cells;
    (void)dense;
    printf("\nSKIP: nvcc not found: the GPU rows were not built (only the CPU rows ran)\n");
    return 0;
}
#endif

/* The CPU ladder on a small frame: cpu_simple (the reference), cpu_private. */
static int cpu_part(const ladder_opts *o, int cells) {
    static const ladder_rung_row rows[2] = {{MD_RDF_CPU_SIMPLE, "cpu_simple", NULL, 0},
                                            {MD_RDF_CPU_PRIVATE, "cpu_private", NULL, 0}};
    ladder l;
    md_system s;
    rdf_case c;
    ladder_measure m;
    char device[64], title[256];
    int threads = 1, v, failed;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    snprintf(device, sizeof device, "cpu: %d threads", threads);
    memset(&c, 0, sizeof c);
    if (disordered_fcc(&s, cells) != MD_OK || md_rdf_init(&c.ref, RMAX, NBINS) != MD_OK ||
        md_rdf_init(&c.out, RMAX, NBINS) != MD_OK) {
        fprintf(stderr, "setup: %s\n", md_last_error());
        return 1;
    }
    c.s = &s;
    c.rows = rows;
    m.work = 0.5 * (double)s.n * (double)(s.n - 1);
    m.size = (long long)m.work;
    m.ceiling = NAN;
    m.tol = 0.0;
    m.reps = o->reps ? o->reps : (o->quick ? 1 : 3);
    snprintf(title, sizeof title,
             "Chapter 05, CPU: RDF of a %d-atom frame (disordered FCC, A = B, %.4g pairs, rmax %.1f nm, %d bins)",
             s.n, m.work, RMAX, NBINS);
    ladder_begin(&l, o, "05_histograms", title, "pairs/s", "pairs", device);
    for (v = 0; v < 2; v++)
        if (v == 0 || ladder_selected(&l, rows[v].name)) (void)ladder_rung(&l, &rdf_ops, &c, v, rows[v].name, &m);
    failed = ladder_end(&l);
    md_rdf_free(&c.ref);
    md_rdf_free(&c.out);
    md_system_free(&s);
    return failed;
}

/* --write-xyz FILE: the GPU table's frame as XYZ (Angstrom), for bench/peers.py freud-rdf. */
static int write_frame(const char *path, int cells) {
    md_system s;
    char comment[128];
    if (disordered_fcc(&s, cells) != MD_OK) {
        fprintf(stderr, "frame: %s\n", md_last_error());
        return 1;
    }
    snprintf(comment, sizeof comment, "disordered FCC, %d^3 cells, cubic box %.6f nm, seed %d", cells, s.box[0], LADDER_SEED);
    if (md_write_xyz(path, &s, comment, 0) != MD_OK) {
        fprintf(stderr, "frame: %s\n", md_last_error());
        md_system_free(&s);
        return 1;
    }
    printf("wrote %s: %d atoms, cubic box %.6f nm (rmax %.2f nm, %d bins)\n", path, s.n, s.box[0], RMAX, NBINS);
    md_system_free(&s);
    return 0;
}

int main(int argc, char **argv) {
    ladder_opts o;
    const char *xyz = NULL;
    int failed, rc, k, m;
    for (k = 1, m = 1; k < argc; k++) { /* take --write-xyz FILE out before the common options */
        if (strcmp(argv[k], "--write-xyz") == 0 && k + 1 < argc) xyz = argv[++k];
        else argv[m++] = argv[k];
    }
    argc = m;
    rc = ladder_parse(&o, argc, argv,
                      "RDF histogram ladder: CPU rungs, then GPU rungs when a device exists.\n"
                      "  --write-xyz FILE  write the GPU table's frame as XYZ and exit (for bench/peers.py freud-rdf)");
    if (rc) return rc > 0 ? 0 : 2;
    if (xyz) return write_frame(xyz, o.quick ? 8 : 29); /* the frame only, no ladder */
    if (o.atoms || o.grid[0]) printf("note: --atoms and --grid are for the Coulomb chapters; ignored here\n");
    failed = cpu_part(&o, o.quick ? 6 : 12);
    failed |= gpu_part(&o, o.quick ? 8 : 29, 0);
#ifdef __CUDACC__
    if (md_cuda_available()) failed |= gpu_part(&o, o.quick ? 8 : 29, 1);
#endif
    return failed ? 1 : 0;
}
