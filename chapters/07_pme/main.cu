/* Chapter 07: Ewald and particle-mesh Ewald. The ladder:
 *
 *   CPU, a 1,500-atom TIP3P box (500 molecules), rc 0.9 nm, alpha 2.92 / nm (tolerance 5e-4):
 *     cpu_ewald          the classic Ewald sum (md_ewald_compute): the reference
 *     cpu_pme            PME's reciprocal part (md_pme_compute), OpenMM's grid rule, order 5;
 *                        its error: RMS of (real space + PME) - Ewald over the RMS Ewald force
 *   GPU, the 23,568- and 95,766-atom TIP3P boxes at OpenMM's settings for tolerance 5e-4 and
 *   cutoff 0.9 nm (alpha 2.92 / nm, grids 56^3 and 90^3, order 5), each rung checked against
 *   md.h's CPU PME (double) on the same box, stage by stage:
 *     cpu_pme            the reference (timed once)
 *     spread_atomic      64-bit fixed-point atomics, one thread per atom and stencil column (y, z)
 *     spread_gather      atoms binned into 8^3 bricks, one thread per grid point
 *     spread_tiled       binned as spread_gather; per brick, shared-memory atomics into a halo tile
 *     spread_window      32 consecutive atoms at a time into a shared-memory window, windows into the grid
 *     exercise           your spread kernel (exercise.cu)
 *     fft_forward        cufftExecR2C
 *     solve              influence function, energy and virial
 *     fft_backward       cufftExecC2R
 *     gather             forces, one thread per atom
 *     cufft_pair         forward + backward alone: the floor the reciprocal part is measured against
 *     pme_total          the five stages (md_cuda_pme_plan_enqueue_own), atomic spread
 *     pme_graph          the same five stages captured once into a CUDA graph and replayed
 *     pme_graph_sorted   pme_graph on the same atoms sorted by 1.0 nm cells (cutoff + the 0.1 nm
 *                        buffer: the order md_cuda_sim keeps them in) with spread_window, the
 *                        spread md_cuda_sim uses: the reciprocal part as chapter 08's step runs it
 *     pme_graph_forces   pme_graph_sorted with the forces-only solve (no energy, no virial), as
 *                        chapter 08's step runs it on the steps that report nothing, and as
 *                        OpenMM's reciprocal force group is timed (bench/race.sh)
 *   Rate: atoms per second (one evaluation of the reciprocal part per atom). GPU times are the
 *   median of --reps timed runs of 20 back-to-back evaluations each (the stream stays full as in
 *   an MD loop; the L2 is not flushed: each stage reads what the previous one just wrote).
 *
 * Options beyond the ladder's (--quick, --json FILE, --reps N):
 *   --write-pdb PREFIX   write the two GPU boxes as PREFIX_23568.pdb and PREFIX_95766.pdb (HOH
 *                        residues with atoms O, H1, H2 and a CRYST1 box: what OpenMM's tip3p.xml
 *                        reads, e.g. python3 bench/peers.py openmm-recip --pdb PREFIX_23568.pdb)
 *   --sweep FILE         the error-vs-cost table: orders 4, 5, 6 and grid spacings 0.2 .. 0.0625 nm;
 *                        force and energy error against Ewald on the 1,500-atom box, grid points,
 *                        and the GPU time of one evaluation on the 23,568-atom box at that spacing
 *                        (NaN without a GPU); CSV for tutorials/scripts/plot_pme_error_cost.py
 *   --cpu-only           skip the GPU tables
 *
 *   build/chapters/07_pme [--quick] [--json FILE] [--reps N] [--write-pdb PREFIX] [--sweep FILE] */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "exercise.cu"
#include "ladder.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define CUTOFF 0.9
#define TOLERANCE 5e-4
#define INNER 20 /* evaluations per timed run of a GPU rung */

/* A TIP3P box of `molecules` molecules (seed LADDER_SEED); edge > 0 fixes the edge. */
static md_status water_box(md_system *s, md_topology *t, md_lj_table *lj, int molecules, double edge) {
    md_water_desc d;
    memset(&d, 0, sizeof d);
    d.molecules = molecules;
    d.edge = edge;
    d.seed = LADDER_SEED;
    return md_build_water_box(s, t, lj, &d);
}

/* ---- CPU: Ewald and PME on the small box ---- */

typedef struct cpu_ctx {
    const md_system *s;
    const md_topology *t;
    md_pme_plan *plan;
    md_ewald_params ep;
    double *f;
    md_energy e;
} cpu_ctx;

static md_status run_ewald(void *p) {
    cpu_ctx *c = (cpu_ctx *)p;
    return md_ewald_compute(&c->ep, c->t, c->s->xyzq, c->s->n, c->s->box, c->f, &c->e);
}

static md_status run_pme(void *p) {
    cpu_ctx *c = (cpu_ctx *)p;
    memset(c->f, 0, 3 * (size_t)c->s->n * sizeof(double));
    memset(&c->e, 0, sizeof c->e);
    return md_pme_compute(c->plan, c->s->xyzq, c->s->n, c->s->box, c->f, &c->e);
}

/* Wall-clock seconds of fn: one warm-up run, then the median of reps runs; -1 on failure. */
static double cpu_time(md_status (*fn)(void *), void *ctx, int reps) {
    double t[16];
    int i;
    if (reps < 1) reps = 1;
    if (reps > 16) reps = 16;
    if (fn(ctx) != MD_OK) return -1.0;
    for (i = 0; i < reps; i++) {
        double t0 = md_wall_seconds();
        if (fn(ctx) != MD_OK) return -1.0;
        t[i] = md_wall_seconds() - t0;
    }
    return md_median(t, reps);
}

/* Real space + exclusions (md_nb_compute, chapter 06's kernel, LJ off) of the small box. */
static md_status real_space(const md_system *s, const md_topology *t, const md_lj_table *lj, double alpha,
                            double *f, md_energy *e) {
    md_nb_params np;
    md_nb_plan nb;
    md_status st;
    memset(&np, 0, sizeof np);
    np.cutoff = CUTOFF;
    np.lj = MD_LJ_NONE;
    np.buffer = -1.0;
    np.ewald_beta = alpha;
    if ((st = md_nb_plan_create(&nb, &np, s->n)) != MD_OK) return st;
    st = md_nb_compute(MD_NB_CPU_ALL_PAIRS, &nb, t, lj, s->xyzq, s->box, f, e);
    md_nb_plan_free(&nb);
    return st;
}

/* RMS over atoms of |a - b| over the RMS of |b|. */
static double rms_rel(const double *a, const double *b, int n3) {
    double num = 0.0, den = 0.0;
    int i;
    for (i = 0; i < n3; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : (num > 0.0 ? INFINITY : 0.0);
}

/* PME (order, spacing) on the small box against Ewald's forces fe and reciprocal energy:
 * RMS relative total force error, |dE_recip|, grid and CPU time. spacing 0: OpenMM's rule. */
static md_status pme_error(const md_system *s, const double *freal, const double *fe,
                           double e_recip, int order, double spacing, double *ferr, double *eerr, int grid[3],
                           double *cpu_s) {
    md_pme_params pp;
    md_pme_plan plan;
    md_energy e;
    md_status st = MD_OK;
    double *f = (double *)malloc(3 * (size_t)s->n * sizeof(double)), t[3];
    int k;
    if (!f) return MD_ERR_OUT_OF_MEMORY;
    memset(&pp, 0, sizeof pp);
    pp.cutoff = CUTOFF;
    pp.tolerance = TOLERANCE;
    pp.order = order;
    pp.spacing = spacing;
    if ((st = md_pme_plan_create(&plan, &pp, s->box, s->n)) != MD_OK) {
        free(f);
        return st;
    }
    for (k = 0; k < 3 && st == MD_OK; k++) { /* the median of 3 timed evaluations */
        double t0 = md_wall_seconds();
        memcpy(f, freal, 3 * (size_t)s->n * sizeof(double));
        memset(&e, 0, sizeof e);
        st = md_pme_compute(&plan, s->xyzq, s->n, s->box, f, &e);
        t[k] = md_wall_seconds() - t0;
    }
    *cpu_s = md_median(t, 3);
    if (st == MD_OK) {
        *ferr = rms_rel(f, fe, 3 * s->n);
        *eerr = fabs(e.coul_recip - e_recip);
        memcpy(grid, plan.params.grid, 3 * sizeof(int));
    }
    md_pme_plan_free(&plan);
    free(f);
    return st;
}

/* ---- GPU ---- */

typedef enum rung {
    R_SPREAD_ATOMIC = 0,
    R_SPREAD_GATHER,
    R_SPREAD_TILED,
    R_SPREAD_WINDOW,
    R_EXERCISE,
    R_FORWARD,
    R_SOLVE,
    R_BACKWARD,
    R_GATHER,
    R_CUFFT_PAIR,
    R_TOTAL,
    R_GRAPH,
    R_GRAPH_SORTED,
    R_GRAPH_FORCES,
    R_COUNT
} rung;

static const char *const rung_names[R_COUNT] = {"spread_atomic", "spread_gather", "spread_tiled", "spread_window",
                                                "exercise",      "fft_forward",   "solve",        "fft_backward",
                                                "gather",        "cufft_pair",    "pme_total",    "pme_graph",
                                                "pme_graph_sorted", "pme_graph_forces"};

typedef struct gpu_ctx {
    rung r;
    md_cuda_pme_plan *p;
    md_fixed *d_scratch; /* forces, energy, virial of the stage rungs */
    cudaGraphExec_t graph;
    int inner;
} gpu_ctx;

static md_status run_rung_once(gpu_ctx *c) {
    md_cuda_pme_plan *p = c->p;
    const size_t cap = (size_t)p->capacity;
    switch (c->r) {
    case R_SPREAD_ATOMIC:
        return md_cuda_pme_enqueue_spread(p, MD_CUDA_PME_SPREAD_ATOMIC, p->d_xyzq, p->n, p->d_box);
    case R_SPREAD_GATHER:
        return md_cuda_pme_enqueue_spread(p, MD_CUDA_PME_SPREAD_GATHER, p->d_xyzq, p->n, p->d_box);
    case R_SPREAD_TILED:
        return md_cuda_pme_enqueue_spread(p, MD_CUDA_PME_SPREAD_TILED, p->d_xyzq, p->n, p->d_box);
    case R_SPREAD_WINDOW:
        return md_cuda_pme_enqueue_spread(p, MD_CUDA_PME_SPREAD_WINDOW, p->d_xyzq, p->n, p->d_box);
    case R_EXERCISE:
        return exercise_spread(p, p->d_xyzq, p->n, p->d_box);
    case R_FORWARD:
        return md_cuda_pme_enqueue_forward(p);
    case R_SOLVE:
        return md_cuda_pme_enqueue_solve(p, p->d_box, c->d_scratch + 3 * cap, c->d_scratch + 3 * cap + 1);
    case R_BACKWARD:
        return md_cuda_pme_enqueue_backward(p);
    case R_GATHER:
        return md_cuda_pme_enqueue_gather(p, p->d_xyzq, p->n, p->d_box, c->d_scratch, p->capacity);
    case R_CUFFT_PAIR: {
        md_status st = md_cuda_pme_enqueue_forward(p);
        return st == MD_OK ? md_cuda_pme_enqueue_backward(p) : st;
    }
    case R_TOTAL:
        return md_cuda_pme_plan_enqueue_own(p);
    case R_GRAPH:
    case R_GRAPH_SORTED: /* p: the sorted plan for these two */
    case R_GRAPH_FORCES:
        MD_CUDA_TRY(cudaGraphLaunch(c->graph, p->queue.stream));
        return MD_OK;
    default:
        return MD_ERR_INVALID_ARGUMENT;
    }
}

static md_status run_gpu(void *v, cudaStream_t stream) {
    gpu_ctx *c = (gpu_ctx *)v;
    md_status st = MD_OK;
    int k;
    (void)stream; /* the plan's stream, which md_cuda_bench records its events on */
    for (k = 0; k < c->inner && st == MD_OK; k++) st = run_rung_once(c);
    return st;
}

/* Largest |a - b| over the largest |b| (float a, double b). */
static double grid_err(const float *a, const double *b, size_t n) {
    double num = 0.0, den = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

static double vec_err(const double *a, const double *b, size_t n) {
    double num = 0.0, den = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= num)) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* Check every rung once against the CPU plan's stages (poisoned grids first), in pipeline order;
 * err[r] is the rung's error, NaN where the check could not run. */
static md_status check_rungs(md_cuda_pme_plan *g, md_pme_plan *c, const md_system *s, double err[R_COUNT]) {
    const size_t npts = (size_t)g->params.grid[0] * g->params.grid[1] * g->params.grid[2];
    const size_t ncp = (size_t)g->params.grid[0] * g->params.grid[1] * g->nh;
    float *hr = (float *)malloc(npts * sizeof(float)), *hc = (float *)malloc(2 * ncp * sizeof(float));
    double *fc = (double *)calloc(3 * (size_t)s->n, sizeof(double)), *fg = (double *)calloc(3 * (size_t)s->n, sizeof(double));
    md_energy ec, eg;
    md_status st = MD_OK;
    size_t i;
    int r;
    for (r = 0; r < R_COUNT; r++) err[r] = NAN;
    if (!hr || !hc || !fc || !fg) {
        st = MD_ERR_OUT_OF_MEMORY;
        goto done;
    }
#define TRY(x)                                                                                                         \
    if ((st = (x)) != MD_OK) goto done
    TRY(md_pme_spread(c, s->xyzq, s->n, s->box));
    for (r = R_SPREAD_ATOMIC; r <= R_EXERCISE; r++) {
        gpu_ctx one;
        memset(&one, 0, sizeof one);
        one.r = (rung)r;
        one.p = g;
        one.inner = 1;
        TRY(md_cuda_poison(g->d_real, npts, g->queue.stream));
        if (run_rung_once(&one) != MD_OK) continue; /* the exercise may refuse; its error stays NaN */
        TRY(md_cuda_pme_plan_read(g, MD_CUDA_PME_REAL, hr));
        err[r] = grid_err(hr, c->grid, npts);
    }
    TRY(md_cuda_pme_enqueue_spread(g, MD_CUDA_PME_SPREAD_ATOMIC, g->d_xyzq, s->n, g->d_box));
    TRY(md_cuda_pme_plan_read(g, MD_CUDA_PME_REAL, hr));
    for (i = 0; i < npts; i++) c->grid[i] = hr[i]; /* each CPU stage continues from the GPU's last output */
    TRY(md_cuda_poison((float *)g->d_complex, 2 * ncp, g->queue.stream));
    TRY(md_cuda_pme_enqueue_forward(g));
    TRY(md_pme_forward(c));
    TRY(md_cuda_pme_plan_read(g, MD_CUDA_PME_COMPLEX, hc));
    err[R_FORWARD] = grid_err(hc, c->cgrid, 2 * ncp);
    for (i = 0; i < 2 * ncp; i++) c->cgrid[i] = hc[i];
    TRY(md_cuda_pme_enqueue_solve(g, g->d_box, g->d_out + 3 * (size_t)g->capacity, g->d_out + 3 * (size_t)g->capacity + 1));
    TRY(md_pme_solve(c, s->box));
    TRY(md_cuda_pme_plan_read(g, MD_CUDA_PME_COMPLEX, hc));
    err[R_SOLVE] = grid_err(hc, c->cgrid, 2 * ncp);
    for (i = 0; i < 2 * ncp; i++) c->cgrid[i] = hc[i];
    TRY(md_cuda_poison(g->d_real, npts, g->queue.stream));
    TRY(md_cuda_pme_enqueue_backward(g));
    TRY(md_pme_backward(c));
    TRY(md_cuda_pme_plan_read(g, MD_CUDA_PME_REAL, hr));
    err[R_BACKWARD] = grid_err(hr, c->grid, npts);
    err[R_CUFFT_PAIR] = err[R_FORWARD] > err[R_BACKWARD] ? err[R_FORWARD] : err[R_BACKWARD];
    for (i = 0; i < npts; i++) c->grid[i] = hr[i];
    MD_CUDA_TRY(cudaMemsetAsync(g->d_out, 0, 3 * (size_t)g->capacity * sizeof(md_fixed), g->queue.stream));
    TRY(md_cuda_pme_enqueue_gather(g, g->d_xyzq, s->n, g->d_box, g->d_out, g->capacity));
    TRY(md_pme_gather(c, s->xyzq, s->n, s->box, fc));
    memset(&eg, 0, sizeof eg);
    TRY(md_cuda_pme_plan_sync(g, fg, &eg));
    err[R_GATHER] = vec_err(fg, fc, 3 * (size_t)s->n);
    /* the whole evaluation against md_pme_compute */
    memset(fc, 0, 3 * (size_t)s->n * sizeof(double));
    memset(fg, 0, 3 * (size_t)s->n * sizeof(double));
    memset(&ec, 0, sizeof ec);
    memset(&eg, 0, sizeof eg);
    TRY(md_pme_compute(c, s->xyzq, s->n, s->box, fc, &ec));
    TRY(md_cuda_pme_plan_enqueue_own(g));
    TRY(md_cuda_pme_plan_sync(g, fg, &eg));
    err[R_TOTAL] = vec_err(fg, fc, 3 * (size_t)s->n);
    if (fabs(eg.coul_recip - ec.coul_recip) > 1e-5 * fabs(ec.coul_recip) + 1e-3) err[R_TOTAL] = INFINITY;
    printf("    reciprocal energy: GPU %.6f, CPU %.6f kJ/mol\n", eg.coul_recip, ec.coul_recip);
#undef TRY
done:
    free(hr), free(hc), free(fc), free(fg);
    return st;
}

/* The rungs pme_graph_sorted and pme_graph_forces: s's atoms in md_cuda_sim's order (cells of
 * cutoff + 0.1 nm buffer, md_cell_list_build's order) on a plan of their own with the windowed
 * spread, checked against md_pme_compute on the same order (err[0]: the force error, INFINITY
 * when the energy differs; err[1]: the forces-only evaluation's force error), then each captured
 * into a graph (graph[0] / exec[0] with energy and virial, graph[1] / exec[1] forces only). */
static md_status sorted_setup(const md_system *s, const md_pme_params *pp, md_pme_plan *c, md_cuda_pme_plan *gs,
                              cudaGraph_t graph[2], cudaGraphExec_t exec[2], double err[2]) {
    md_cell_list cl;
    md_float4 *xs = (md_float4 *)malloc((size_t)s->n * sizeof *xs);
    double *fc = (double *)calloc(3 * (size_t)s->n, sizeof(double)), *fg = (double *)calloc(3 * (size_t)s->n, sizeof(double));
    md_energy ec, eg;
    md_status st;
    int i;
    memset(&cl, 0, sizeof cl);
    memset(&ec, 0, sizeof ec);
    memset(&eg, 0, sizeof eg);
    err[0] = err[1] = NAN;
    if (!xs || !fc || !fg) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, "sorted_setup", 0, "n", "%d atoms", s->n);
        goto done;
    }
    if ((st = md_cell_list_build(&cl, s->xyzq, s->n, s->box, CUTOFF + 0.1)) != MD_OK) goto done;
    for (i = 0; i < s->n; i++) xs[i] = s->xyzq[cl.atom[i]];
    if ((st = md_cuda_pme_plan_create(gs, pp, s->box, s->n)) != MD_OK ||
        (st = md_cuda_pme_plan_set_spread(gs, MD_CUDA_PME_SPREAD_WINDOW)) != MD_OK ||
        (st = md_cuda_pme_plan_upload(gs, xs, s->n, s->box)) != MD_OK ||
        (st = md_pme_compute(c, xs, s->n, s->box, fc, &ec)) != MD_OK ||
        (st = md_cuda_pme_plan_enqueue_own(gs)) != MD_OK || (st = md_cuda_pme_plan_sync(gs, fg, &eg)) != MD_OK)
        goto done;
    err[0] = vec_err(fg, fc, 3 * (size_t)s->n);
    if (fabs(eg.coul_recip - ec.coul_recip) > 1e-5 * fabs(ec.coul_recip) + 1e-3) err[0] = INFINITY;
    /* forces only, into the zeroed output */
    memset(fg, 0, 3 * (size_t)s->n * sizeof(double));
    if (cudaMemsetAsync(gs->d_out, 0, (3 * (size_t)gs->capacity + 10) * sizeof(md_fixed), gs->queue.stream) !=
        cudaSuccess) {
        st = md_cuda_error(cudaGetLastError(), "cudaMemsetAsync", __FILE__, __LINE__);
        goto done;
    }
    if ((st = md_cuda_pme_plan_enqueue(gs, gs->d_xyzq, s->n, gs->d_box, gs->d_out, gs->capacity, NULL, NULL)) != MD_OK ||
        (st = md_cuda_pme_plan_sync(gs, fg, NULL)) != MD_OK)
        goto done;
    err[1] = vec_err(fg, fc, 3 * (size_t)s->n);
    for (i = 0; i < 2 && st == MD_OK; i++) {
        cudaError_t e = cudaStreamBeginCapture(gs->queue.stream, cudaStreamCaptureModeThreadLocal);
        if (e != cudaSuccess) {
            st = md_cuda_error(e, "cudaStreamBeginCapture", __FILE__, __LINE__);
            break;
        }
        st = i == 0 ? md_cuda_pme_plan_enqueue_own(gs)
                    : md_cuda_pme_plan_enqueue(gs, gs->d_xyzq, s->n, gs->d_box, gs->d_out, gs->capacity, NULL, NULL);
        e = cudaStreamEndCapture(gs->queue.stream, &graph[i]);
        if (st == MD_OK && e != cudaSuccess) st = md_cuda_error(e, "cudaStreamEndCapture", __FILE__, __LINE__);
        if (st == MD_OK) st = md_cuda_graph_instantiate(graph[i], gs->queue.stream, &exec[i]);
    }
done:
    md_cell_list_free(&cl);
    free(xs), free(fc), free(fg);
    return st;
}

/* The GPU table for one box. Returns 1 if a rung failed. */
static int gpu_part(const ladder_opts *o, int molecules, double edge, const char *pdb_prefix) {
    md_cuda_device_info info;
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_cuda_pme_plan g;
    md_pme_plan c;
    md_pme_params pp;
    md_cuda_bench_desc bd;
    gpu_ctx gc;
    ladder l;
    cudaGraph_t graph = NULL, graph_sorted[2] = {NULL, NULL};
    cudaGraphExec_t exec_sorted[2] = {NULL, NULL};
    md_cuda_pme_plan gs; /* the plan of pme_graph_sorted and pme_graph_forces */
    gpu_ctx gcs, gcf;
    double err[R_COUNT], times[R_COUNT], t_cpu, t0;
    char title[256], dev[300];
    int r, failed;
    for (r = 0; r < R_COUNT; r++) times[r] = NAN;
    if (water_box(&s, &t, &lj, molecules, edge) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    if (pdb_prefix) {
        char path[1024];
        md_system copy;
        snprintf(path, sizeof path, "%s_%d.pdb", pdb_prefix, s.n);
        if (md_system_alloc(&copy, s.n) != MD_OK) return 1;
        memcpy(copy.xyzq, s.xyzq, (size_t)s.n * sizeof *s.xyzq);
        memcpy(copy.name, s.name, (size_t)s.n * sizeof *s.name);
        memcpy(copy.resname, s.resname, (size_t)s.n * sizeof *s.resname);
        memcpy(copy.resid, s.resid, (size_t)s.n * sizeof *s.resid);
        memcpy(copy.mass, s.mass, (size_t)s.n * sizeof *s.mass);
        memcpy(copy.box, s.box, sizeof copy.box);
        md_water_pdb_names(&copy);
        if (md_write_pdb(path, &copy) != MD_OK) {
            printf("FAIL --write-pdb: %s\n", md_last_error());
            return 1;
        }
        printf("wrote %s (%d atoms, box %.4f nm: HOH with O H1 H2, CRYST1)\n", path, s.n, s.box[0]);
        md_system_free(&copy);
    }
    if (!md_cuda_available()) {
        printf("\nSKIP: %s\n", md_last_error());
        for (r = 0; r < R_COUNT; r++) printf("SKIP %s: no usable CUDA device\n", rung_names[r]);
        md_system_free(&s), md_topology_free(&t), md_lj_table_free(&lj);
        return 0;
    }
    memset(&pp, 0, sizeof pp);
    pp.cutoff = CUTOFF;
    pp.tolerance = TOLERANCE;
    if (md_cuda_get_device_info(0, &info) != MD_OK || md_cuda_pme_plan_create(&g, &pp, s.box, s.n) != MD_OK ||
        md_pme_plan_create(&c, &g.params, NULL, s.n) != MD_OK || md_cuda_pme_plan_upload(&g, s.xyzq, s.n, s.box) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    snprintf(dev, sizeof dev, "%s", info.name);
    snprintf(title, sizeof title,
             "\nChapter 07, GPU: PME reciprocal part of a %d-atom TIP3P box (%.2f nm), alpha %.4f / nm, grid %d x %d x %d, "
             "order %d",
             s.n, s.box[0], g.params.alpha, g.params.grid[0], g.params.grid[1], g.params.grid[2], g.params.order);
    ladder_begin(&l, o, "07_pme", title, "atoms/s", "atoms", dev);
    { /* the CPU reference, timed once */
        double *f = (double *)calloc(3 * (size_t)s.n, sizeof(double));
        md_energy e;
        memset(&e, 0, sizeof e);
        t0 = md_wall_seconds();
        if (!f || md_pme_compute(&c, s.xyzq, s.n, s.box, f, &e) != MD_OK) {
            ladder_row_error(&l, "cpu_pme", md_last_error());
            return 1;
        }
        t_cpu = md_wall_seconds() - t0;
        free(f);
        ladder_row(&l, "cpu_pme", s.n, t_cpu, s.n, NAN, NAN, 0.0);
    }
    memset(&gc, 0, sizeof gc);
    gc.p = &g;
    if (md_cuda_alloc((void **)&gc.d_scratch, 3 * (size_t)s.n + 10, sizeof(md_fixed), "scratch") != MD_OK ||
        cudaMemsetAsync(gc.d_scratch, 0, (3 * (size_t)s.n + 10) * sizeof(md_fixed), g.queue.stream) != cudaSuccess ||
        check_rungs(&g, &c, &s, err) != MD_OK) {
        ladder_row_error(&l, "check", md_last_error());
        return 1;
    }
    err[R_GRAPH] = err[R_TOTAL];
    { /* capture the whole evaluation once */
        cudaError_t ce = cudaStreamBeginCapture(g.queue.stream, cudaStreamCaptureModeThreadLocal);
        md_status cs = ce == cudaSuccess ? md_cuda_pme_plan_enqueue_own(&g) : MD_ERR_CUDA;
        cudaError_t ee = ce == cudaSuccess ? cudaStreamEndCapture(g.queue.stream, &graph) : ce;
        if (cs != MD_OK || ee != cudaSuccess || md_cuda_graph_instantiate(graph, g.queue.stream, &gc.graph) != MD_OK) {
            printf("note: graph capture failed (%s); pme_graph is not timed\n", cudaGetErrorString(ee));
            err[R_GRAPH] = NAN;
            gc.graph = NULL;
        }
    }
    memset(&gs, 0, sizeof gs);
    memset(&gcs, 0, sizeof gcs);
    memset(&gcf, 0, sizeof gcf);
    gcs.p = gcf.p = &gs;
    /* err[R_GRAPH_SORTED] and err[R_GRAPH_FORCES], adjacent in the enum: sorted_setup's err[2] */
    if (sorted_setup(&s, &pp, &c, &gs, graph_sorted, exec_sorted, &err[R_GRAPH_SORTED]) != MD_OK) {
        printf("note: the sorted plan failed (%s); pme_graph_sorted and pme_graph_forces are not timed\n",
               md_last_error());
        err[R_GRAPH_SORTED] = err[R_GRAPH_FORCES] = NAN;
    }
    gcs.graph = exec_sorted[0];
    gcf.graph = exec_sorted[1];
    memset(&bd, 0, sizeof bd);
    bd.reps = o->reps ? o->reps : (o->quick ? 3 : 21);
    bd.keep_l2 = 1;
    gc.inner = gcs.inner = gcf.inner = o->quick ? 1 : INNER;
    for (r = 0; r < R_COUNT; r++) {
        gpu_ctx *cx = r == R_GRAPH_SORTED ? &gcs : r == R_GRAPH_FORCES ? &gcf : &gc;
        double tt;
        cx->r = (rung)r;
        bd.stream = cx->p->queue.stream;
        if ((r == R_GRAPH || r == R_GRAPH_SORTED || r == R_GRAPH_FORCES) && !cx->graph) {
            ladder_row_skip(&l, rung_names[r], "graph capture failed");
            continue;
        }
        if (isnan(err[r])) {
            ladder_row_error(&l, rung_names[r], "not checked (it did not run)");
            continue;
        }
        if (!(err[r] <= 1e-4)) { /* a wrong rung is reported, never timed */
            ladder_row(&l, rung_names[r], s.n, -1.0, s.n, NAN, err[r], 1e-4);
            continue;
        }
        if (md_cuda_bench(run_gpu, cx, &bd, &tt) != MD_OK) {
            ladder_row_error(&l, rung_names[r], md_last_error());
            continue;
        }
        times[r] = tt / cx->inner;
        ladder_row(&l, rung_names[r], s.n, times[r], s.n, NAN, err[r], 1e-4);
    }
    if (isfinite(times[R_CUFFT_PAIR])) {
        double sum = times[R_SPREAD_ATOMIC] + times[R_FORWARD] + times[R_SOLVE] + times[R_BACKWARD] + times[R_GATHER];
        printf("    stages summed %.2f us; pme_total %.2f us, pme_graph %.2f us; cuFFT pair alone %.2f us\n", 1e6 * sum,
               1e6 * times[R_TOTAL], 1e6 * times[R_GRAPH], 1e6 * times[R_CUFFT_PAIR]);
        printf("    reciprocal part / cuFFT pair: %.2fx (total), %.2fx (graph), %.2fx (graph, sorted atoms), %.2fx (graph, "
               "sorted, forces only); goal <= 2x\n",
               times[R_TOTAL] / times[R_CUFFT_PAIR], times[R_GRAPH] / times[R_CUFFT_PAIR],
               times[R_GRAPH_SORTED] / times[R_CUFFT_PAIR], times[R_GRAPH_FORCES] / times[R_CUFFT_PAIR]);
        printf("    pme_graph_sorted %.2f us, pme_graph_forces %.2f us\n", 1e6 * times[R_GRAPH_SORTED],
               1e6 * times[R_GRAPH_FORCES]);
    }
    failed = ladder_end(&l);
    for (r = 0; r < 2; r++) {
        if (exec_sorted[r]) (void)cudaGraphExecDestroy(exec_sorted[r]);
        if (graph_sorted[r]) (void)cudaGraphDestroy(graph_sorted[r]);
    }
    md_cuda_pme_plan_destroy(&gs);
    if (gc.graph) (void)cudaGraphExecDestroy(gc.graph);
    if (graph) (void)cudaGraphDestroy(graph);
    md_cuda_free(gc.d_scratch);
    md_cuda_pme_plan_destroy(&g);
    md_pme_plan_free(&c);
    md_system_free(&s), md_topology_free(&t), md_lj_table_free(&lj);
    return failed;
}

/* GPU time of one evaluation (pme_graph when it captures, else pme_total) for a plan on s. */
static double gpu_time(const md_system *s, const md_pme_params *pp, int reps) {
    md_cuda_pme_plan g;
    md_cuda_bench_desc bd;
    gpu_ctx gc;
    double t = NAN;
    if (md_cuda_pme_plan_create(&g, pp, s->box, s->n) != MD_OK || md_cuda_pme_plan_upload(&g, s->xyzq, s->n, s->box) != MD_OK)
        return NAN;
    memset(&gc, 0, sizeof gc);
    gc.p = &g;
    gc.r = R_TOTAL;
    gc.inner = INNER;
    memset(&bd, 0, sizeof bd);
    bd.reps = reps;
    bd.keep_l2 = 1;
    bd.stream = g.queue.stream;
    if (md_cuda_bench(run_gpu, &gc, &bd, &t) == MD_OK) t /= INNER;
    else t = NAN;
    md_cuda_pme_plan_destroy(&g);
    return t;
}

int main(int argc, char **argv) {
    ladder_opts o;
    ladder l;
    md_system s, big;
    md_topology t, bigt;
    md_lj_table lj, biglj;
    cpu_ctx cc;
    md_ewald_params ep;
    md_energy er;
    const char *pdb_prefix = NULL, *sweep = NULL;
    char device[64], title[256];
    char *rest[16] = {NULL};
    double *fe, *freal, t_ewald, t_pme, alpha, e_recip;
    int i, nrest = 0, cpu_only = 0, threads = 1, failed, reps, small;
    for (i = 0; i < argc; i++) { /* this chapter's options; the rest go to ladder_parse */
        if (i > 0 && strcmp(argv[i], "--write-pdb") == 0 && i + 1 < argc) pdb_prefix = argv[++i];
        else if (i > 0 && strcmp(argv[i], "--sweep") == 0 && i + 1 < argc) sweep = argv[++i];
        else if (i > 0 && strcmp(argv[i], "--cpu-only") == 0) cpu_only = 1;
        else if (nrest < 16) rest[nrest++] = argv[i];
    }
    i = ladder_parse(&o, nrest, rest,
                     "Ewald and PME ladder: CPU Ewald and PME, then the GPU stages when a device exists.\n"
                     "  --write-pdb PREFIX  write the GPU boxes as PDB files for OpenMM (bench/peers.py)\n"
                     "  --sweep FILE        error-vs-cost table (CSV) for tutorials/scripts/plot_pme_error_cost.py\n"
                     "  --cpu-only          skip the GPU tables");
    if (i) return i > 0 ? 0 : 2;
    small = o.quick ? 216 : 500;
    reps = o.reps ? o.reps : (o.quick ? 1 : 3);
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    snprintf(device, sizeof device, "cpu: %d threads", threads);
    if (water_box(&s, &t, &lj, small, 0.0) != MD_OK) {
        fprintf(stderr, "setup: %s\n", md_last_error());
        return 1;
    }
    alpha = md_ewald_beta(CUTOFF, TOLERANCE);
    fe = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    freal = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    if (!fe || !freal || real_space(&s, &t, &lj, alpha, freal, &er) != MD_OK) {
        fprintf(stderr, "setup: %s\n", md_last_error());
        return 1;
    }
    snprintf(title, sizeof title,
             "Chapter 07, CPU: electrostatics of a %d-atom TIP3P box (%.3f nm), rc %.1f nm, alpha %.4f / nm", s.n,
             s.box[0], CUTOFF, alpha);
    ladder_begin(&l, &o, "07_pme", title, "atoms/s", "atoms", device);
    memset(&cc, 0, sizeof cc);
    cc.s = &s;
    cc.t = &t;
    cc.f = fe;
    memset(&ep, 0, sizeof ep);
    ep.rc = CUTOFF;
    ep.alpha = alpha;
    cc.ep = ep;
    t_ewald = cpu_time(run_ewald, &cc, 1);
    if (t_ewald < 0) {
        ladder_row_error(&l, "cpu_ewald", md_last_error());
        return 1;
    }
    ladder_row(&l, "cpu_ewald", s.n, t_ewald, s.n, NAN, NAN, 0.0);
    e_recip = cc.e.coul_recip;
    {
        md_energy ee = cc.e;
        double ferr = NAN, eerr = NAN, cs = 0.0;
        int grid[3] = {0, 0, 0};
        md_pme_params pp;
        md_pme_plan plan;
        memset(&pp, 0, sizeof pp);
        pp.cutoff = CUTOFF;
        pp.tolerance = TOLERANCE;
        if (pme_error(&s, freal, fe, e_recip, MD_PME_DEFAULT_ORDER, 0.0, &ferr, &eerr, grid, &cs) != MD_OK ||
            md_pme_plan_create(&plan, &pp, s.box, s.n) != MD_OK) {
            ladder_row_error(&l, "cpu_pme", md_last_error());
            return 1;
        }
        cc.plan = &plan;
        cc.f = (double *)malloc(3 * (size_t)s.n * sizeof(double));
        t_pme = cc.f ? cpu_time(run_pme, &cc, reps) : -1.0;
        if (t_pme < 0) ladder_row_error(&l, "cpu_pme", md_last_error());
        else ladder_row(&l, "cpu_pme", s.n, t_pme, s.n, NAN, ferr, TOLERANCE);
        printf("    PME (grid %d x %d x %d, order %d) against Ewald: RMS relative force error %.3g (the tolerance is "
               "%.0e), reciprocal energy error %.3g kJ/mol of %.6g\n",
               grid[0], grid[1], grid[2], MD_PME_DEFAULT_ORDER, ferr, TOLERANCE, eerr, ee.coul_recip);
        printf("    Ewald: real %.6f, reciprocal %.6f, self %.6f, exclusions %.6f kJ/mol\n", ee.coul_real, ee.coul_recip,
               ee.coul_self, ee.coul_excl);
        free(cc.f);
        md_pme_plan_free(&plan);
    }
    failed = ladder_end(&l);
    if (sweep) { /* the error-vs-cost table */
        FILE *f = fopen(sweep, "w");
        static const double spacings[6] = {0.2, 0.16, 0.125, 0.1, 0.08, 0.0625};
        int order, k, have_gpu = !cpu_only && md_cuda_available();
        if (!f) {
            fprintf(stderr, "cannot write %s\n", sweep);
            return 1;
        }
        if (have_gpu && water_box(&big, &bigt, &biglj, o.quick ? 1500 : 7856, o.quick ? 0.0 : 6.2) != MD_OK) have_gpu = 0;
        fprintf(f, "order,spacing_nm,grid,grid_points,force_error,energy_error_kj_mol,cpu_small_s,gpu_atoms,gpu_s\n");
        printf("\nerror vs cost (PME against Ewald on the %d-atom box; GPU time on the %d-atom box)\n", s.n,
               have_gpu ? big.n : 0);
        printf("%5s %8s %6s %12s %12s %12s %10s\n", "order", "spacing", "grid", "force err", "energy err", "cpu (ms)",
               "gpu (us)");
        for (order = MD_PME_MIN_ORDER; order <= MD_PME_MAX_ORDER; order++)
            for (k = 0; k < 6; k++) {
                double ferr, eerr, cs, gt = NAN;
                int grid[3];
                if (pme_error(&s, freal, fe, e_recip, order, spacings[k], &ferr, &eerr, grid, &cs) != MD_OK) {
                    fprintf(stderr, "sweep: %s\n", md_last_error());
                    return 1;
                }
                if (have_gpu) {
                    md_pme_params pp;
                    memset(&pp, 0, sizeof pp);
                    pp.cutoff = CUTOFF;
                    pp.tolerance = TOLERANCE;
                    pp.order = order;
                    pp.spacing = spacings[k];
                    gt = gpu_time(&big, &pp, o.quick ? 3 : 11);
                }
                fprintf(f, "%d,%.6g,%d,%lld,%.6g,%.6g,%.6g,%d,%.6g\n", order, spacings[k], grid[0],
                        (long long)grid[0] * grid[1] * grid[2], ferr, eerr, cs, have_gpu ? big.n : 0, gt);
                printf("%5d %8.4f %6d %12.3e %12.3e %12.3f %10.2f\n", order, spacings[k], grid[0], ferr, eerr, 1e3 * cs,
                       1e6 * gt);
            }
        fclose(f);
        if (have_gpu) md_system_free(&big), md_topology_free(&bigt), md_lj_table_free(&biglj);
        printf("wrote %s\n", sweep);
    }
    free(fe);
    free(freal);
    md_system_free(&s), md_topology_free(&t), md_lj_table_free(&lj);
    if (!cpu_only) {
        if (o.quick) failed |= gpu_part(&o, 1500, 0.0, pdb_prefix);
        else {
            failed |= gpu_part(&o, 7856, 6.2, pdb_prefix);
            failed |= gpu_part(&o, 31922, 9.9, pdb_prefix);
        }
    }
    return failed ? 1 : 0;
}
