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
 * Rate: pairs within the cutoff per second (each unordered pair once). Time: one evaluation as
 * an MD step pays it (zero, displacement check, the device-gated rebuild kernels, pair kernel,
 * exclusions and 1-4); the pair kernel alone, the list build and the sort are printed under
 * each table. Ceiling (cluster rows): the measured MUFU rsqrt rate times the cluster efficiency
 * (one rsqrt per computed pair).
 *
 *   build/chapters/06_nonbonded [--quick] [--json FILE] [--reps N] */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "exercise.cu"
#include "ladder.h"
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

/* Largest per-atom force error |dF_i| / max(|F_i|, F_rms) (3n doubles each). */
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

typedef struct cpu_ctx {
    md_nb_variant v;
    md_nb_plan *p;
    const md_system *s;
    const md_topology *t;
    const md_lj_table *lj;
    double *f;
} cpu_ctx;

static md_status run_cpu(void *vc) {
    cpu_ctx *c = (cpu_ctx *)vc;
    md_energy e;
    return md_nb_compute(c->v, c->p, c->t, c->lj, c->s->xyzq, c->s->box, c->f, &e);
}

static int cpu_part(const ladder_opts *o) {
    static const md_nb_variant rungs[5] = {MD_NB_CPU_ALL_PAIRS, MD_NB_CPU_CELL_LIST, MD_NB_CPU_VERLET,
                                           MD_NB_CPU_VERLET_FULL, MD_NB_CPU_FIXED};
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_nb_plan p;
    ladder l;
    char title[256], dev[64];
    int threads = 1, reps = o->reps ? o->reps : (o->quick ? 1 : 3);
    long long pairs;
    std::vector<double> ref, f;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    if (water_box(&s, &t, &lj, o->quick ? 300 : 1000, 0.0) != MD_OK || md_nb_plan_create(&p, NULL, s.n) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    pairs = pairs_within(&s, &t, p.params.cutoff);
    snprintf(dev, sizeof dev, "cpu: %d threads", threads);
    snprintf(title, sizeof title,
             "Chapter 06, CPU: LJ + Ewald real space of %d TIP3P atoms (%.3f nm box, cutoff %.2f nm, %lld pairs within)",
             s.n, s.box[0], p.params.cutoff, pairs);
    ladder_begin(&l, o, "06_nonbonded", title, "pairs/s", "pairs", dev);
    ref.assign(3 * (size_t)s.n, 0.0);
    f.assign(3 * (size_t)s.n, 0.0);
    for (int v = 0; v < 5; v++) {
        cpu_ctx c = {rungs[v], &p, &s, &t, &lj, v == 0 ? ref.data() : f.data()};
        const double tm = ladder_time_cpu(run_cpu, &c, reps);
        if (tm < 0.0) {
            ladder_row_error(&l, md_nb_variant_name(rungs[v]), md_last_error());
            continue;
        }
        /* double rungs agree to 1e-12 (sum order only); cpu_fixed to float rounding */
        ladder_row(&l, md_nb_variant_name(rungs[v]), pairs, tm, (double)pairs, NAN,
                   v == 0 ? NAN : force_error(f.data(), ref.data(), s.n), v == 4 ? 1e-4 : 1e-9);
    }
    md_nb_plan_free(&p);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return ladder_end(&l);
}

/* ---- the GPU tables ---- */

typedef struct gpu_ctx {
    md_cuda_nb_plan *p; /* NULL: the exercise */
    md_cuda_nb_plan *list; /* the exercise's full-list plan */
    md_cuda_state *s;
    unsigned what;
} gpu_ctx;

static md_status run_gpu(void *vc, cudaStream_t stream) {
    gpu_ctx *c = (gpu_ctx *)vc;
    md_status st;
    (void)stream; /* the state's own stream, which the timer records on */
    if ((st = md_cuda_state_zero(c->s)) != MD_OK) return st;
    if (!c->p) return exercise_nb(c->list, c->s);
    return md_cuda_nb_enqueue(c->p, c->s, c->what);
}

/* Poison the state's forces and energies (so anything a rung fails to write shows), evaluate,
 * poll. */
static md_status checked_eval(gpu_ctx *c, md_energy *e) {
    md_status st;
    if (cudaMemsetAsync(c->s->d_force, 0xFF, 3 * (size_t)c->s->stride * sizeof(md_fixed), c->s->q.stream) != cudaSuccess ||
        cudaMemsetAsync(c->s->d_energy, 0xFF, MD_CUDA_E_COUNT * sizeof(md_fixed), c->s->q.stream) != cudaSuccess)
        return md_set_error(MD_ERR_CUDA, "checked_eval", 0, NULL, "poison failed");
    if ((st = run_gpu(c, c->s->q.stream)) != MD_OK) return st;
    if (c->p) return md_cuda_nb_plan_poll(c->p, c->s, e);
    return md_cuda_state_poll(c->s, e, NULL);
}

static double bench(gpu_ctx *c, int reps, md_status *st) {
    md_cuda_bench_desc d;
    double t = -1.0;
    memset(&d, 0, sizeof d);
    d.reps = reps;
    d.stream = c->s->q.stream;
    *st = md_cuda_bench(run_gpu, c, &d, &t);
    return *st == MD_OK ? t : -1.0;
}

/* One GPU table: every GPU rung on one water box, checked against md_nb_compute(MD_NB_CPU_FIXED)
 * on the same floats, then timed. */
static int gpu_part(const ladder_opts *o, int molecules, double edge, double rsqrt_per_s) {
    static const md_nb_variant rungs[5] = {MD_NB_GPU_TILES, MD_NB_GPU_FULL_LIST, MD_NB_GPU_HALF_LIST, MD_NB_GPU_CLUSTER,
                                           MD_NB_GPU_CLUSTER_SMEM};
    md_system s, back;
    md_topology t;
    md_lj_table lj;
    md_cuda_state st;
    md_cuda_device_info info;
    md_nb_plan cp;
    md_energy e, ce;
    ladder l;
    char title[256], name[64];
    long long pairs;
    int reps = o->reps ? o->reps : (o->quick ? 3 : 11), failed;
    std::vector<md_fixed> ref_fixed, f;
    std::vector<double> ref, fd;
    md_status r;
    if (water_box(&s, &t, &lj, molecules, edge) != MD_OK || md_cuda_get_device_info(0, &info) != MD_OK ||
        md_cuda_state_create(&st, s.n) != MD_OK || md_cuda_state_upload(&st, &s, &t, &lj) != MD_OK ||
        md_system_alloc(&back, s.n) != MD_OK) {
        printf("FAIL setup: %s\n", md_last_error());
        return 1;
    }
    memcpy(back.box, s.box, sizeof back.box);
    { /* one sorting evaluation wraps the coordinates into the box: the reference uses those floats */
        md_cuda_nb_plan p0;
        gpu_ctx c = {&p0, NULL, &st, MD_CUDA_NB_ENERGY};
        if (md_cuda_nb_plan_create(&p0, &st, MD_NB_GPU_FULL_LIST, NULL, NULL) != MD_OK || checked_eval(&c, &e) != MD_OK ||
            md_cuda_state_download(&st, &back, NULL, NULL) != MD_OK) {
            printf("FAIL setup: %s\n", md_last_error());
            return 1;
        }
        md_cuda_nb_plan_destroy(&p0);
    }
    if (md_nb_plan_create(&cp, NULL, s.n) != MD_OK ||
        md_nb_compute(MD_NB_CPU_FIXED, &cp, &t, &lj, back.xyzq, back.box, NULL, &ce) != MD_OK) {
        printf("FAIL reference: %s\n", md_last_error());
        return 1;
    }
    ref_fixed.assign(cp.fixed_force, cp.fixed_force + 3 * (size_t)s.n);
    ref.resize(3 * (size_t)s.n);
    for (int i = 0; i < 3 * s.n; i++) ref[i] = md_fixed_to_double(ref_fixed[i], MD_FORCE_FIXED_SCALE);
    pairs = pairs_within(&back, &t, cp.params.cutoff);
    snprintf(title, sizeof title,
             "\nChapter 06, GPU: %d TIP3P atoms (%.2f nm box), LJ + Ewald real space, forces + energies, %lld pairs "
             "within %.2f nm",
             s.n, s.box[0], pairs, cp.params.cutoff);
    ladder_begin(&l, o, "06_nonbonded", title, "pairs/s", "pairs", info.name);
    f.resize(3 * (size_t)s.n);
    fd.resize(3 * (size_t)s.n);
    for (int v = 0; v < 6; v++) {
        md_cuda_nb_plan p, plist;
        md_cuda_nb_opts opt;
        md_nb_params rf;
        gpu_ctx c = {&p, NULL, &st, MD_CUDA_NB_ENERGY};
        double tm, err, ceiling = NAN, tk = NAN, tb = NAN, ts = NAN;
        long long bad = 0;
        const int exercise = v == 5, cluster = !exercise && (rungs[v] == MD_NB_GPU_CLUSTER || rungs[v] == MD_NB_GPU_CLUSTER_SMEM);
        md_nb_plan cpr;
        std::vector<md_fixed> rf_fixed;
        snprintf(name, sizeof name, "%s@%d", exercise ? "exercise" : md_nb_variant_name(rungs[v]), s.n);
        memset(&opt, 0, sizeof opt);
        opt.time_kernel = 1;
        if (exercise) { /* reaction field, so the pair forces are the whole answer */
            memset(&rf, 0, sizeof rf);
            rf.coul = MD_COUL_REACTION_FIELD;
            if (md_cuda_nb_plan_create(&plist, &st, MD_NB_GPU_FULL_LIST, &rf, NULL) != MD_OK ||
                md_nb_plan_create(&cpr, &rf, s.n) != MD_OK ||
                md_nb_compute(MD_NB_CPU_FIXED, &cpr, &t, &lj, back.xyzq, back.box, NULL, &ce) != MD_OK) {
                ladder_row_error(&l, name, md_last_error());
                continue;
            }
            rf_fixed.assign(cpr.fixed_force, cpr.fixed_force + 3 * (size_t)s.n);
            md_nb_plan_free(&cpr);
            c.p = &plist; /* build plist's list once */
            if ((r = checked_eval(&c, &e)) != MD_OK) {
                ladder_row_error(&l, name, md_last_error());
                md_cuda_nb_plan_destroy(&plist);
                continue;
            }
            c.p = NULL;
            c.list = &plist;
        } else if ((r = md_cuda_nb_plan_create(&p, &st, rungs[v], NULL, &opt)) != MD_OK) {
            ladder_row_error(&l, name, md_last_error());
            continue;
        }
        /* check on poisoned outputs: the build (and the prune), a count of the pairs in the cutoff
         * (cluster rungs), then the evaluation a step pays */
        r = checked_eval(&c, &e);
        if (r == MD_OK && cluster) {
            c.what = MD_CUDA_NB_ENERGY | MD_CUDA_NB_COUNT;
            r = checked_eval(&c, &e);
            c.what = MD_CUDA_NB_ENERGY;
        }
        if (r == MD_OK) r = checked_eval(&c, &e);
        if (r == MD_OK) r = md_cuda_state_download(&st, NULL, fd.data(), f.data());
        if (r != MD_OK) {
            ladder_row_error(&l, name, md_last_error());
            if (!exercise) md_cuda_nb_plan_destroy(&p);
            else md_cuda_nb_plan_destroy(&plist);
            continue;
        }
        for (int i = 0; i < 3 * s.n; i++) bad += f[i] != (exercise ? rf_fixed[i] : ref_fixed[i]);
        if (cluster || exercise) {
            std::vector<double> rr(3 * (size_t)s.n);
            for (int i = 0; i < 3 * s.n; i++) rr[i] = md_fixed_to_double(exercise ? rf_fixed[i] : ref_fixed[i], MD_FORCE_FIXED_SCALE);
            err = force_error(fd.data(), rr.data(), s.n);
            if (exercise && bad) err = err > 0.0 ? err : 1.0; /* the exercise must be bitwise */
        } else {
            err = bad ? force_error(fd.data(), ref.data(), s.n) + 1e-30 : 0.0; /* bitwise or fail */
        }
        tm = bench(&c, reps, &r);
        if (tm < 0.0) {
            ladder_row_error(&l, name, md_last_error());
            if (!exercise) md_cuda_nb_plan_destroy(&p);
            else md_cuda_nb_plan_destroy(&plist);
            continue;
        }
        if (!exercise) { /* the pair kernel alone: the GPU held while an evaluation is queued, median of reps */
            std::vector<double> tks((size_t)reps);
            for (int k = 0; k < reps; k++) {
                if (md_cuda_hold_stream(st.q.stream, 200.0) != MD_OK || run_gpu(&c, st.q.stream) != MD_OK ||
                    md_cuda_nb_plan_poll(&p, &st, &e) != MD_OK)
                    break;
                tks[k] = p.stats.kernel_s;
            }
            tk = md_median(tks.data(), reps);
            if (cluster && p.stats.computed_pairs > 0) ceiling = rsqrt_per_s * (double)pairs / (double)p.stats.computed_pairs;
            if (rungs[v] != MD_NB_GPU_TILES) { /* the list build and the sort, as extra time over an evaluation */
                c.what = MD_CUDA_NB_ENERGY | MD_CUDA_NB_REBUILD;
                tb = bench(&c, reps, &r) - tm;
                c.what = MD_CUDA_NB_ENERGY | MD_CUDA_NB_SORT;
                ts = bench(&c, reps, &r) - tm;
                c.what = MD_CUDA_NB_ENERGY;
                checked_eval(&c, &e); /* (re-)prune after the sorts */
            }
        }
        ladder_row(&l, name, pairs, tm, (double)pairs, ceiling, err, cluster ? 5e-4 : 0.0);
        if (!exercise) {
            printf("    pair kernel %.1f us (%.3g pairs/s)", 1e6 * tk, (double)pairs / tk);
            if (cluster)
                printf("; cluster efficiency %.3f (%.3f before the prune), %lld entries, %lld with masks, %lld pairs "
                       "counted in the cutoff",
                       (double)pairs / p.stats.computed_pairs, (double)pairs / p.stats.computed_unpruned, p.stats.entries,
                       p.stats.masked_entries, p.stats.pairs_in_cutoff);
            else if (rungs[v] != MD_NB_GPU_TILES)
                printf("; %lld list entries", p.stats.entries);
            if (isfinite(tb)) printf("; list build +%.1f us, sort + build +%.1f us", 1e6 * tb, 1e6 * ts);
            printf("\n");
            md_cuda_nb_plan_destroy(&p);
        } else {
            md_cuda_nb_plan_destroy(&plist);
        }
    }
    failed = ladder_end(&l);
    md_nb_plan_free(&cp);
    md_cuda_state_destroy(&st);
    md_system_free(&back);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
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
    double t0, wall;
    memset(&d, 0, sizeof d);
    d.cells = o->quick ? 6 : 20;
    d.temperature = 180.0; /* half of it goes into the lattice's potential energy: a liquid near 90 K */
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
             "\nChapter 06, NVE on the GPU: %d argon atoms (%.2f nm box), cutoff 0.9 nm, dt %.0f fs, %d steps",
             s.n, s.box[0], dt * 1e3, steps);
    ladder_begin(&l, o, "06_nonbonded", title, "ns/day", "atoms", info.name);
    {
        const long long r0 = pl.stats.rebuilds;
        t0 = md_wall_seconds();
        if (md_cuda_vv_enqueue(&st, &pl, dt, steps, MD_CUDA_NB_ENERGY) != MD_OK || md_cuda_nb_plan_poll(&pl, &st, &e1) != MD_OK) {
            ladder_row_error(&l, "nve_lj_cluster", md_last_error());
            return ladder_end(&l);
        }
        wall = md_wall_seconds() - t0;
        {
            const double drift = (md_energy_total(&e1) - md_energy_total(&e0)) / s.n;
            /* energy conservation is the check: drift per atom over the run, tolerance 1e-3 kJ/mol */
            ladder_row(&l, "nve_lj_cluster", s.n, wall / steps, dt * 1e-3 * 86400.0, NAN, fabs(drift), 1e-3);
            printf("    %.1f us per step; total energy %.4f -> %.4f kJ/mol (drift %.2e kJ/mol per atom); T %.1f K; "
                   "%lld list builds in %d steps (one per %.1f steps), %lld sorts\n",
                   1e6 * wall / steps, md_energy_total(&e0), md_energy_total(&e1), drift,
                   2.0 * e1.kinetic / ((3.0 * s.n - 3.0) * MD_KB), pl.stats.rebuilds - r0, steps,
                   (double)steps / (double)(pl.stats.rebuilds - r0 > 0 ? pl.stats.rebuilds - r0 : 1), pl.stats.sorts);
        }
    }
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
    failed |= cpu_part(&o);
    if (!md_cuda_available()) {
        printf("\nSKIP: %s\n", md_last_error());
        printf("SKIP GPU rungs: no usable CUDA device\n");
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
