/* Chapter 06: nonbonded forces with neighbour lists. LJ + Ewald real-space Coulomb (cutoff
 * 0.9 nm, buffer 0.1 nm, LJ potential shift, Ewald tolerance 5e-4) on TIP3P water boxes, forces
 * and energies, as a ladder:
 *
 *   cpu_all_pairs     every pair, double (the reference of the CPU table)
 *   cpu_cell_list     cells >= rc, double
 *   cpu_verlet        half Verlet list with a buffer, double
 *   cpu_verlet_full   full Verlet list (each atom sums its own force), double
 *   cpu_fixed         half list, float pair arithmetic, 64-bit fixed-point sums (the GPU reference)
 *   gpu_tiles         all pairs in shared-memory tiles                       bitwise = cpu_fixed
 *   gpu_full_list     full list, no atomics, masks instead of branches       bitwise = cpu_fixed
 *   gpu_half_list     half list, atomics for the j forces                    bitwise = cpu_fixed
 *   gpu_cluster       cluster pairs (8 x 4 atoms per warp tile), LJ table through L1
 *   gpu_cluster_smem  the same, LJ table in shared memory
 *   exercise          exercise.cu (reaction-field Coulomb, checked bitwise against cpu_fixed)
 * then an NVE run of liquid argon on the GPU (velocity Verlet, cluster rung) with ns/day.
 *
 * Systems: CPU table 1,000 molecules (3,000 atoms); GPU tables 1,350 (4,050 atoms), 7,856 in a
 * 6.2 nm box (23,568 atoms) and 31,922 in a 9.9 nm box (95,766 atoms); argon 32,000 atoms.
 * --quick: 300 molecules for the CPU, 300 and 1,350 for the GPU, 864 argon atoms.
 * Every row goes through ladder.h's ladder_rung (setup, poison, run, check, time). Rate: pairs
 * within the cutoff per second (each unordered pair once). Time: one evaluation as an MD step
 * pays it (zero, displacement check, the device-gated rebuild kernels, pair kernel, exclusions
 * and 1-4); the pair kernel alone, the list build and the sort are printed under each GPU row.
 * Ceiling (cluster rows): the measured MUFU rsqrt rate times the cluster efficiency (one rsqrt
 * per computed pair).
 *
 *   build/chapters/06_nonbonded [--quick] [--json FILE] [--reps N] [--only A,B] */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "ladder.h"
#include "exercise.cu"
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

/* A TIP3P water box (md_build_water_box, seed LADDER_SEED); edge 0 takes it from the density. */
static md_status water_box(md_system *s, md_topology *t, md_lj_table *lj, int molecules, double edge) {
    md_water_desc d;
    memset(&d, 0, sizeof d);
    d.molecules = molecules;
    d.edge = edge;
    d.seed = LADDER_SEED;
    return md_build_water_box(s, t, lj, &d);
}

/* Largest per-atom force error |dF_i| / max(|F_i|, F_rms) (3n doubles each); NaN anywhere
 * gives NaN, which fails every tolerance. */
static double force_error(const double *f, const double *ref, int n) {
    double rms = 0.0, worst = 0.0;
    for (int i = 0; i < 3 * n; i++) rms += ref[i] * ref[i];
    rms = sqrt(rms / n);
    for (int i = 0; i < n; i++) {
        double d2 = 0.0, m2 = 0.0, e;
        for (int k = 0; k < 3; k++) {
            d2 += (f[3 * i + k] - ref[3 * i + k]) * (f[3 * i + k] - ref[3 * i + k]);
            m2 += ref[3 * i + k] * ref[3 * i + k];
        }
        e = sqrt(d2) / (sqrt(m2) > rms ? sqrt(m2) : rms);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Pairs within the cutoff (each once), from md.h's Verlet list of radius rc. */
static long long pairs_within(const md_system *s, const md_topology *t, double rc) {
    md_cell_list cl;
    md_verlet_list vl;
    long long n = -1;
    memset(&cl, 0, sizeof cl);
    memset(&vl, 0, sizeof vl);
    if (md_verlet_list_build(&vl, &cl, s->xyzq, s->n, s->box, rc, 0, t) == MD_OK) n = (long long)vl.npairs;
    md_verlet_list_free(&vl);
    md_cell_list_free(&cl);
    return n;
}

/* ---- the CPU table ---- */

typedef struct cpu_case {
    const ladder_rung_row *rows;
    int row;
    md_nb_plan p;
    md_system s;
    md_topology t;
    md_lj_table lj;
    std::vector<double> ref, f;
    int have_ref;
} cpu_case;

static md_status cpu_run1(void *ctx) {
    cpu_case *c = (cpu_case *)ctx;
    md_energy e;
    return md_nb_compute((md_nb_variant)c->rows[c->row].variant, &c->p, &c->t, &c->lj, c->s.xyzq, c->s.box, c->f.data(), &e);
}

static md_status cpu_poison(void *ctx, int row) {
    cpu_case *c = (cpu_case *)ctx;
    c->row = row;
    for (size_t k = 0; k < c->f.size(); k++) c->f[k] = NAN;
    return MD_OK;
}

static md_status cpu_run(void *ctx, int row) {
    ((cpu_case *)ctx)->row = row;
    return cpu_run1(ctx);
}

static md_status cpu_check(void *ctx, int row, double *error) {
    cpu_case *c = (cpu_case *)ctx;
    (void)row;
    if (!c->have_ref) { /* the first row is the reference */
        c->ref = c->f;
        c->have_ref = 1;
        *error = NAN;
        return MD_OK;
    }
    *error = force_error(c->f.data(), c->ref.data(), c->s.n);
    return MD_OK;
}

static md_status cpu_time(void *ctx, int row, int reps, double *seconds) {
    ((cpu_case *)ctx)->row = row;
    return ladder_time_cpu(cpu_run1, ctx, reps, seconds);
}

static const ladder_ops cpu_ops = {NULL, cpu_poison, cpu_run, cpu_check, cpu_time, NULL};

static int cpu_part(const ladder_opts *o) {
    static const ladder_rung_row rows[5] = {{MD_NB_CPU_ALL_PAIRS, "cpu_all_pairs", NULL, 0},
                                            {MD_NB_CPU_CELL_LIST, "cpu_cell_list", NULL, 0},
                                            {MD_NB_CPU_VERLET, "cpu_verlet", NULL, 0},
                                            {MD_NB_CPU_VERLET_FULL, "cpu_verlet_full", NULL, 0},
                                            {MD_NB_CPU_FIXED, "cpu_fixed", NULL, 0}};
    cpu_case c;
    ladder l;
    ladder_measure m;
    char title[256], dev[64];
    int threads = 1, failed;
    long long pairs;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    c.rows = rows;
    c.have_ref = 0;
    if (water_box(&c.s, &c.t, &c.lj, o->quick ? 300 : 1000, 0.0) != MD_OK || md_nb_plan_create(&c.p, NULL, c.s.n) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    c.f.assign(3 * (size_t)c.s.n, 0.0);
    pairs = pairs_within(&c.s, &c.t, c.p.params.cutoff);
    snprintf(dev, sizeof dev, "cpu: %d threads", threads);
    snprintf(title, sizeof title,
             "Chapter 06, CPU: LJ + Ewald real space of %d TIP3P atoms (%.3f nm box, cutoff %.2f nm, %lld pairs within)",
             c.s.n, c.s.box[0], c.p.params.cutoff, pairs);
    ladder_begin(&l, o, "06_nonbonded", title, "pairs/s", "pairs", dev);
    m.work = (double)pairs;
    m.size = pairs;
    m.ceiling = NAN;
    m.reps = o->reps ? o->reps : (o->quick ? 1 : 3);
    for (int v = 0; v < 5; v++) {
        if (v > 0 && !ladder_selected(&l, rows[v].name)) continue;
        m.tol = v == 4 ? 1e-4 : 1e-9; /* double rungs differ only in the order of the sums; cpu_fixed in float */
        (void)ladder_rung(&l, &cpu_ops, &c, v, rows[v].name, &m);
    }
    failed = ladder_end(&l);
    md_nb_plan_free(&c.p);
    md_system_free(&c.s);
    md_topology_free(&c.t);
    md_lj_table_free(&c.lj);
    return failed;
}

/* ---- the GPU tables ---- */

/* One GPU table: a water box on one md_cuda_state, the rows of the table, the reference of
 * md_nb_compute(MD_NB_CPU_FIXED) on the state's own floats (Ewald; reaction field for the
 * exercise), and the plan of the row being run. */
typedef struct gpu_case {
    ladder *l;
    const ladder_rung_row *rows;
    int row;
    md_system s, back;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_cuda_nb_plan p;    /* the row's plan (the exercise: its full-list plan) */
    unsigned what;        /* md_cuda_nb_enqueue flags of a timed evaluation */
    long long pairs;      /* pairs within the cutoff */
    double rsqrt_per_s;   /* MUFU ceiling (NaN: not measured) */
    std::vector<md_fixed> ref_ewald, ref_rf, f;
    std::vector<double> fd, rd;
} gpu_case;

static int is_cluster(int v) { return v == MD_NB_GPU_CLUSTER || v == MD_NB_GPU_CLUSTER_SMEM; }

/* One evaluation on the state's stream: zero, then the row's enqueue (or the exercise). */
static md_status gpu_enqueue(void *ctx, cudaStream_t stream) {
    gpu_case *c = (gpu_case *)ctx;
    md_status st;
    (void)stream; /* the state's own stream, on which md_cuda_bench records */
    if ((st = md_cuda_state_zero(&c->st)) != MD_OK) return st;
    if (c->rows[c->row].launcher) return ((md_status(*)(const md_cuda_nb_plan *, md_cuda_state *))c->rows[c->row].launcher)(&c->p, &c->st);
    return md_cuda_nb_enqueue(&c->p, &c->st, c->what);
}

/* The row's plan: its rung with the chapter's parameters (the exercise: a full-list plan with
 * reaction-field Coulomb, whose list its kernel walks). */
static md_status gpu_setup(void *ctx, int row) {
    gpu_case *c = (gpu_case *)ctx;
    md_cuda_nb_opts o;
    md_nb_params rf;
    memset(&o, 0, sizeof o);
    memset(&rf, 0, sizeof rf);
    o.time_kernel = 1;
    rf.coul = MD_COUL_REACTION_FIELD;
    c->row = row;
    c->what = MD_CUDA_NB_ENERGY;
    return md_cuda_nb_plan_create(&c->p, &c->st, (md_nb_variant)c->rows[row].variant, c->rows[row].launcher ? &rf : NULL,
                                  &o);
}

static md_status gpu_poison(void *ctx, int row) {
    gpu_case *c = (gpu_case *)ctx;
    c->row = row;
    if (cudaMemsetAsync(c->st.d_force, 0xFF, 3 * (size_t)c->st.stride * sizeof(md_fixed), c->st.q.stream) != cudaSuccess ||
        cudaMemsetAsync(c->st.d_energy, 0xFF, MD_CUDA_E_COUNT * sizeof(md_fixed), c->st.q.stream) != cudaSuccess)
        return md_set_error(MD_ERR_CUDA, "06_nonbonded", 0, NULL, "poison failed");
    return MD_OK;
}

/* The run: the build (and the cluster rungs' prune), for the cluster rungs a count of the
 * pairs in the cutoff, then the evaluation a step pays, each polled; the forces downloaded. */
static md_status gpu_run(void *ctx, int row) {
    gpu_case *c = (gpu_case *)ctx;
    const ladder_rung_row *r = &c->rows[row];
    md_energy e;
    md_status st;
    c->row = row;
    if (r->launcher) { /* the exercise walks its plan's list: build it first */
        if ((st = md_cuda_state_zero(&c->st)) != MD_OK || (st = md_cuda_nb_enqueue(&c->p, &c->st, 0)) != MD_OK ||
            (st = md_cuda_nb_plan_poll(&c->p, &c->st, &e)) != MD_OK)
            return st;
    } else {
        if ((st = gpu_enqueue(c, c->st.q.stream)) != MD_OK || (st = md_cuda_nb_plan_poll(&c->p, &c->st, &e)) != MD_OK)
            return st;
        if (is_cluster(r->variant)) {
            c->what = MD_CUDA_NB_ENERGY | MD_CUDA_NB_COUNT;
            st = gpu_enqueue(c, c->st.q.stream);
            c->what = MD_CUDA_NB_ENERGY;
            if (st != MD_OK || (st = md_cuda_nb_plan_poll(&c->p, &c->st, &e)) != MD_OK) return st;
        }
    }
    if ((st = gpu_poison(c, row)) != MD_OK || (st = gpu_enqueue(c, c->st.q.stream)) != MD_OK ||
        (st = md_cuda_state_poll(&c->st, &e, NULL)) != MD_OK)
        return st;
    return md_cuda_state_download(&c->st, NULL, c->fd.data(), c->f.data());
}

/* The exact rungs and the exercise: every force word equal to cpu_fixed's (error 0), else the
 * force error plus a hair (so it fails tolerance 0). The cluster rungs: the force error. */
static md_status gpu_check(void *ctx, int row, double *error) {
    gpu_case *c = (gpu_case *)ctx;
    const std::vector<md_fixed> &ref = c->rows[row].launcher ? c->ref_rf : c->ref_ewald;
    long long bad = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        bad += c->f[i] != ref[i];
        c->rd[i] = md_fixed_to_double(ref[i], MD_FORCE_FIXED_SCALE);
    }
    *error = force_error(c->fd.data(), c->rd.data(), c->s.n);
    if (!is_cluster(c->rows[row].variant)) *error = bad ? *error + 1e-30 : 0.0;
    return MD_OK;
}

/* The median evaluation (md_cuda_bench on the state's stream), then, printed under the row: the
 * pair kernel alone (events around it, the GPU held while the evaluation is queued), the
 * cluster efficiency, and the extra time of a list build and of a sort. */
static md_status gpu_time(void *ctx, int row, int reps, double *seconds) {
    gpu_case *c = (gpu_case *)ctx;
    const ladder_rung_row *r = &c->rows[row];
    md_cuda_bench_desc d;
    md_energy e;
    md_status st;
    std::vector<double> tk((size_t)reps);
    double tb = NAN, ts = NAN;
    int n = 0;
    memset(&d, 0, sizeof d);
    d.reps = reps;
    d.stream = c->st.q.stream;
    c->row = row;
    if ((st = md_cuda_bench(gpu_enqueue, c, &d, seconds)) != MD_OK) return st;
    if (r->launcher) return MD_OK;
    for (int k = 0; k < reps; k++) {
        if ((st = md_cuda_hold_stream(c->st.q.stream, 200.0)) != MD_OK || (st = gpu_enqueue(c, c->st.q.stream)) != MD_OK ||
            (st = md_cuda_nb_plan_poll(&c->p, &c->st, &e)) != MD_OK)
            return st;
        tk[n++] = c->p.stats.kernel_s;
    }
    if (r->variant != MD_NB_GPU_TILES) {
        double t;
        c->what = MD_CUDA_NB_ENERGY | MD_CUDA_NB_REBUILD;
        if ((st = md_cuda_bench(gpu_enqueue, c, &d, &t)) == MD_OK) tb = t - *seconds;
        c->what = MD_CUDA_NB_ENERGY | MD_CUDA_NB_SORT;
        if (st == MD_OK && (st = md_cuda_bench(gpu_enqueue, c, &d, &t)) == MD_OK) ts = t - *seconds;
        c->what = MD_CUDA_NB_ENERGY;
        if (st != MD_OK) return st;
    }
    {
        const double kt = md_median(tk.data(), n);
        int w = snprintf(c->l->note, sizeof c->l->note, "kernel %.1f us (%.3g pairs/s)", 1e6 * kt,
                         (double)c->pairs / kt);
        if (is_cluster(r->variant) && w > 0 && (size_t)w < sizeof c->l->note)
            w += snprintf(c->l->note + w, sizeof c->l->note - (size_t)w, "; efficiency %.3f (%.3f unpruned)",
                          (double)c->pairs / (double)c->p.stats.computed_pairs,
                          (double)c->pairs / (double)c->p.stats.computed_unpruned);
        if (isfinite(tb) && w > 0 && (size_t)w < sizeof c->l->note)
            snprintf(c->l->note + w, sizeof c->l->note - (size_t)w, "; build +%.1f us, sort +%.1f us", 1e6 * tb,
                     1e6 * ts);
    }
    return MD_OK;
}

static void gpu_teardown(void *ctx, int row) {
    (void)row;
    md_cuda_nb_plan_destroy(&((gpu_case *)ctx)->p);
}

static const ladder_ops gpu_ops = {gpu_setup, gpu_poison, gpu_run, gpu_check, gpu_time, gpu_teardown};

/* One GPU table: every GPU rung on one water box. */
static int gpu_part(const ladder_opts *o, int molecules, double edge, double rsqrt_per_s) {
    static const ladder_rung_row rows[6] = {{MD_NB_GPU_TILES, "gpu_tiles", NULL, 0},
                                            {MD_NB_GPU_FULL_LIST, "gpu_full_list", NULL, 0},
                                            {MD_NB_GPU_HALF_LIST, "gpu_half_list", NULL, 0},
                                            {MD_NB_GPU_CLUSTER, "gpu_cluster", NULL, 0},
                                            {MD_NB_GPU_CLUSTER_SMEM, "gpu_cluster_smem", NULL, 0},
                                            {MD_NB_GPU_FULL_LIST, "exercise", LADDER_FN(exercise_nb), 0}};
    gpu_case *c = new gpu_case;
    md_cuda_device_info info;
    md_nb_plan cp;
    md_nb_params rf;
    md_energy e;
    ladder l;
    ladder_measure m;
    char title[256], name[64];
    int failed;
    c->l = &l;
    c->rows = rows;
    c->rsqrt_per_s = rsqrt_per_s;
    memset(&c->p, 0, sizeof c->p);
    memset(&rf, 0, sizeof rf);
    rf.coul = MD_COUL_REACTION_FIELD;
    if (water_box(&c->s, &c->t, &c->lj, molecules, edge) != MD_OK || md_cuda_get_device_info(0, &info) != MD_OK ||
        md_cuda_state_create(&c->st, c->s.n) != MD_OK || md_cuda_state_upload(&c->st, &c->s, &c->t, &c->lj) != MD_OK ||
        md_system_alloc(&c->back, c->s.n) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    memcpy(c->back.box, c->s.box, sizeof c->back.box);
    /* one sorting evaluation wraps the coordinates into the box; the references use those floats */
    c->rows = rows;
    if (gpu_setup(c, 1) != MD_OK || md_cuda_state_zero(&c->st) != MD_OK || md_cuda_nb_enqueue(&c->p, &c->st, 0) != MD_OK ||
        md_cuda_nb_plan_poll(&c->p, &c->st, &e) != MD_OK || md_cuda_state_download(&c->st, &c->back, NULL, NULL) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    md_cuda_nb_plan_destroy(&c->p);
    for (int k = 0; k < 2; k++) {
        if (md_nb_plan_create(&cp, k ? &rf : NULL, c->s.n) != MD_OK ||
            md_nb_compute(MD_NB_CPU_FIXED, &cp, &c->t, &c->lj, c->back.xyzq, c->back.box, NULL, &e) != MD_OK) {
            printf("FAIL reference: %s\n", md_last_error());
            return 1;
        }
        (k ? c->ref_rf : c->ref_ewald).assign(cp.fixed_force, cp.fixed_force + 3 * (size_t)c->s.n);
        if (!k) c->pairs = pairs_within(&c->back, &c->t, cp.params.cutoff);
        md_nb_plan_free(&cp);
    }
    c->f.resize(3 * (size_t)c->s.n);
    c->fd.resize(3 * (size_t)c->s.n);
    c->rd.resize(3 * (size_t)c->s.n);
    snprintf(title, sizeof title,
             "\nChapter 06, GPU: %d TIP3P atoms (%.2f nm box), LJ + Ewald real space, forces + energies, %lld pairs "
             "within 0.90 nm",
             c->s.n, c->s.box[0], c->pairs);
    ladder_begin(&l, o, "06_nonbonded", title, "pairs/s", "pairs", info.name);
    m.work = (double)c->pairs;
    m.size = c->pairs;
    m.reps = o->reps ? o->reps : (o->quick ? 3 : 11);
    for (int v = 0; v < 6; v++) {
        snprintf(name, sizeof name, "%s@%d", rows[v].name, c->s.n);
        if (!ladder_selected(&l, rows[v].name)) continue;
        m.tol = is_cluster(rows[v].variant) && !rows[v].launcher ? 5e-4 : 0.0;
        /* the cluster rows' ceiling: one MUFU rsqrt per computed pair, at the efficiency the
         * check run measures; set after it (the row is timed only if it passed) */
        m.ceiling = NAN;
        if (is_cluster(rows[v].variant) && isfinite(rsqrt_per_s)) {
            /* the efficiency of this box's list, measured once by a plan of the rung */
            md_cuda_nb_plan q;
            if (md_cuda_nb_plan_create(&q, &c->st, (md_nb_variant)rows[v].variant, NULL, NULL) == MD_OK &&
                md_cuda_state_zero(&c->st) == MD_OK && md_cuda_nb_enqueue(&q, &c->st, MD_CUDA_NB_ENERGY) == MD_OK &&
                md_cuda_nb_plan_poll(&q, &c->st, &e) == MD_OK && q.stats.computed_pairs > 0)
                m.ceiling = rsqrt_per_s * (double)c->pairs / (double)q.stats.computed_pairs;
            md_cuda_nb_plan_destroy(&q);
        }
        (void)ladder_rung(&l, &gpu_ops, c, v, name, &m);
    }
    failed = ladder_end(&l);
    md_cuda_state_destroy(&c->st);
    md_system_free(&c->back);
    md_system_free(&c->s);
    md_topology_free(&c->t);
    md_lj_table_free(&c->lj);
    delete c;
    return failed;
}

/* ---- NVE: liquid argon, velocity Verlet on the GPU ---- */

static int nve_part(const ladder_opts *o) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_fcc_desc d;
    md_nb_params p;
    md_cuda_state st;
    md_cuda_nb_plan pl;
    md_cuda_device_info info;
    md_energy e0, e1;
    ladder l;
    char title[256];
    const double dt = 0.004;
    const int steps = o->quick ? 200 : 2000;
    double t0, wall, drift;
    long long r0;
    memset(&d, 0, sizeof d);
    d.cells = o->quick ? 6 : 20;
    d.temperature = 180.0; /* about half of it goes into the lattice's potential energy: a liquid near 90 K */
    d.seed = LADDER_SEED;
    memset(&p, 0, sizeof p);
    p.coul = MD_COUL_NONE;
    if (md_build_lj_fluid(&s, &t, &lj, &d) != MD_OK || md_cuda_get_device_info(0, &info) != MD_OK ||
        md_cuda_state_create(&st, s.n) != MD_OK || md_cuda_state_upload(&st, &s, &t, &lj) != MD_OK ||
        md_cuda_nb_plan_create(&pl, &st, MD_NB_GPU_CLUSTER, &p, NULL) != MD_OK ||
        md_cuda_vv_enqueue(&st, &pl, dt, 100, MD_CUDA_NB_ENERGY) != MD_OK || /* melt a little first */
        md_cuda_nb_plan_poll(&pl, &st, &e0) != MD_OK) {
        printf("FAIL NVE setup: %s\n", md_last_error());
        return 1;
    }
    snprintf(title, sizeof title,
             "\nChapter 06, NVE on the GPU: %d argon atoms (%.2f nm box), cutoff 0.9 nm, dt %.0f fs, %d steps", s.n,
             s.box[0], dt * 1e3, steps);
    ladder_begin(&l, o, "06_nonbonded", title, "ns/day", "atoms", info.name);
    r0 = pl.stats.rebuilds;
    t0 = md_wall_seconds();
    if (md_cuda_vv_enqueue(&st, &pl, dt, steps, MD_CUDA_NB_ENERGY) != MD_OK || md_cuda_nb_plan_poll(&pl, &st, &e1) != MD_OK) {
        ladder_row_error(&l, "nve_lj_cluster", md_last_error());
        return ladder_end(&l);
    }
    wall = md_wall_seconds() - t0;
    drift = (md_energy_total(&e1) - md_energy_total(&e0)) / s.n;
    snprintf(l.note, sizeof l.note,
             "%.1f us per step; energy drift %.2e kJ/mol per atom over %.0f ps; T %.1f K; %lld list builds (one per %.1f "
             "steps)",
             1e6 * wall / steps, drift, steps * dt, 2.0 * e1.kinetic / ((3.0 * s.n - 3.0) * MD_KB), pl.stats.rebuilds - r0,
             (double)steps / (double)(pl.stats.rebuilds - r0 > 0 ? pl.stats.rebuilds - r0 : 1));
    /* the check is energy conservation: |drift| per atom over the run below 1e-3 kJ/mol */
    (void)ladder_row(&l, "nve_lj_cluster", s.n, wall / steps, dt * 1e-3 * 86400.0, NAN, fabs(drift), 1e-3);
    md_cuda_nb_plan_destroy(&pl);
    md_cuda_state_destroy(&st);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return ladder_end(&l);
}

int main(int argc, char **argv) {
    ladder_opts o;
    int rc = ladder_parse(&o, argc, argv, "Nonbonded ladder: CPU rungs, then GPU rungs on three water boxes and an NVE run."),
        failed = 0;
    double rsqrt = NAN;
    if (rc) return rc > 0 ? 0 : 2;
    if (o.atoms || o.grid[0]) printf("note: --atoms and --grid are for the Coulomb chapters; ignored here\n");
    failed |= cpu_part(&o);
    if (!md_cuda_available()) {
        printf("\nSKIP: %s\n", md_last_error());
        return failed;
    }
    if (!o.quick && md_cuda_ceiling_rsqrt(&rsqrt) != MD_OK) {
        printf("note: rsqrt ceiling not measured: %s\n", md_last_error());
        rsqrt = NAN;
    }
    if (o.quick) {
        failed |= gpu_part(&o, 300, 0.0, rsqrt);
        failed |= gpu_part(&o, 1350, 0.0, rsqrt);
    } else {
        failed |= gpu_part(&o, 1350, 0.0, rsqrt);
        failed |= gpu_part(&o, 7856, 6.2, rsqrt);
        failed |= gpu_part(&o, 31922, 9.9, rsqrt);
    }
    failed |= nve_part(&o);
    return failed ? 1 : 0;
}
