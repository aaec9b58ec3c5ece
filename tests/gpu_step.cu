/* Tests of md_cuda.cu.h's step section (chapter 08): the GPU-resident MD step against md.h's
 * CPU step (md_sim), on the device.
 *
 * GPU tests (SKIP without a GPU, FAIL under MD_REQUIRE_GPU=1):
 *   - bonded_vs_cpu: the bonded kernel against md_bonded_compute (double) on 300 random chains
 *     straddling the box edges (seed 101): forces within 2e-5 of the largest force (float
 *     arithmetic of ~0.1 nm vectors and constants of 1e5; md_bond_f32 / md_angle_f32 are checked
 *     on the host in test_step.c), energy and virial within 2e-5 relative; run twice: the same bits.
 *   - water_step_vs_cpu: a TIP3P box (1500 molecules, 2.48 nm; MD_SANITIZE: 400 in 2.3 nm... see
 *     water_box) with PME, NVE and Langevin, 20 steps on the GPU (cluster rung, PME in float) and
 *     on the CPU (double): positions within 2e-4 nm, velocities within 0.05 nm/ps (the float
 *     forces differ from the double ones by ~1e-5 relative; over 20 steps of 2 fs that moves an
 *     atom by ~1e-6 nm; the bounds leave room for the chaotic growth of the difference), the
 *     potential energy within 2e-5 of the sum of the magnitudes of its terms, the kinetic
 *     energy within 1e-3 relative; constraint deviation of the GPU's double positions below
 *     1e-10 relative (the card asks 1e-6); the same noise (the Philox stream is shared).
 *   - flexible_step_vs_cpu: methanol + water from a PSF (bonds, angles, SHAKE clusters, free
 *     atoms, SETTLE): the same comparison (10 steps of 1 fs), SHAKE constraints within 1e-9.
 *   - reproducible: three runs with the same seed, 150 Langevin steps with the cluster rung and
 *     PME overlapped, one with the state's stream at the greatest priority (the default), one
 *     at the default priority (plain_priority), one with the other water layout of the
 *     integrate kernel (water_lanes 1 or 3): positions and velocities bitwise equal.
 *     water_step_vs_cpu runs both layouts against the CPU, flexible_step_vs_cpu the default.
 *   - restart_bitwise: a checkpoint after 30 steps restored into a new run continues bit for
 *     bit (MD_NB_GPU_HALF_LIST: an exact rung, whose forces do not depend on the atom order
 *     the sort leaves; the cluster rungs' float sums do).
 *   - errors: a runaway atom (40 nm/ps) stops the run with the atom named (both water layouts),
 *     and a NaN velocity is refused; water_lanes 2 and plain_priority 2 are refused.
 *   - nve_short_drift: 2000 NVE steps of the 1500-molecule box on the GPU; the drift must stay
 *     below 1 kJ/mol/ps per 1000 degrees of freedom (the 100 ps comparison with OpenMM is the
 *     benchmark's: bench/race.sh --drift).
 *   - forces_follow_md_h_across_sorts: after every step of a 210-step NVE run (two sorts, many
 *     list builds) the GPU's forces equal md.h's at the same positions within 1e-4 of the largest.
 *   - barostat: the GPU barostat raises a 0.90 g/cm^3 box's density (as test_step.c's CPU test).
 * MD_SANITIZE=1 shrinks the systems and step counts. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"
#include "step_fixtures.h"
#include <vector>

static int sanitize;
static int racecheck; /* MD_SANITIZE_TOOL=racecheck (tests/gpu_check.sh) */

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(a[i] - b[i]) <= m)) m = fabs(a[i] - b[i]);
    return m;
}

/* A TIP3P box of m molecules at 0.997 g/cm^3 (seed): 1500 molecules is a 3.55 nm cube. */
static md_status water_box(md_system *s, md_topology *t, md_lj_table *lj, int m, double density, uint64_t seed) {
    md_water_desc d;
    memset(&d, 0, sizeof d);
    d.molecules = m;
    d.density = density;
    d.seed = seed;
    return md_build_water_box(s, t, lj, &d);
}

/* The Langevin water box of the bitwise-trajectory tests: 1,500 molecules (300 under the
 * sanitizer, with a 0.8 nm cutoff), the box built from box_seed, the noise from seed. */
static md_status langevin_water(md_system *s, md_topology *t, md_lj_table *lj, md_sim_desc *d, uint64_t box_seed,
                                uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->thermostat = MD_THERMOSTAT_LANGEVIN;
    d->seed = seed;
    if (sanitize) d->nb.cutoff = 0.8;
    return water_box(s, t, lj, sanitize ? 300 : 1500, 0.997, box_seed);
}

static void free_sys(md_system *s, md_topology *t, md_lj_table *lj) {
    md_system_free(s);
    md_topology_free(t);
    md_lj_table_free(lj);
}

/* ---- bonded ---- */

static void bonded_vs_cpu(void) {
    const int nmol = sanitize ? 20 : 300, n = 4 * nmol;
    const double box[3] = {3.0, 3.2, 3.4};
    md_rng r;
    md_bonded b;
    md_cuda_bonded_plan p;
    md_energy e;
    std::vector<double> x(3 * n), f(3 * n, 0.0), g(3 * n);
    std::vector<int> bond(6 * nmol), ang(6 * nmol);
    std::vector<double> r0(3 * nmol), kb(3 * nmol), th(2 * nmol), ka(2 * nmol);
    std::vector<float4> hx(n);
    std::vector<md_fixed> hf(3 * n), hf2(3 * n);
    md_fixed *d_f = NULL, *d_e = NULL, he[10], he2[10];
    float4 *d_x = NULL;
    double *d_box = NULL, fmax = 0, worst = 0;
    int i, k, a;
    NEED_GPU();
    md_rng_seed(&r, 101);
    for (int m = 0; m < nmol; m++) {
        double q[3];
        for (a = 0; a < 3; a++) q[a] = box[a] * md_rng_uniform(&r);
        for (i = 0; i < 4; i++) {
            if (i > 0) {
                double u[3], nn = 0;
                for (a = 0; a < 3; a++) {
                    u[a] = md_rng_normal(&r);
                    nn += u[a] * u[a];
                }
                for (a = 0; a < 3; a++) q[a] += (0.09 + 0.07 * md_rng_uniform(&r)) * u[a] / sqrt(nn);
            }
            for (a = 0; a < 3; a++) x[3 * (4 * m + i) + a] = q[a] - box[a] * floor(q[a] / box[a]);
        }
        for (k = 0; k < 3; k++) {
            bond[2 * (3 * m + k)] = 4 * m + k;
            bond[2 * (3 * m + k) + 1] = 4 * m + k + 1;
            r0[3 * m + k] = 0.1 + 0.05 * md_rng_uniform(&r);
            kb[3 * m + k] = 1e5 + 3e5 * md_rng_uniform(&r);
        }
        for (k = 0; k < 2; k++) {
            for (a = 0; a < 3; a++) ang[3 * (2 * m + k) + a] = 4 * m + k + a;
            th[2 * m + k] = 1.6 + 0.6 * md_rng_uniform(&r);
            ka[2 * m + k] = 200 + 400 * md_rng_uniform(&r);
        }
    }
    memset(&b, 0, sizeof b);
    b.nbond = 3 * nmol, b.bond = bond.data(), b.bond_r0 = r0.data(), b.bond_k = kb.data();
    b.nangle = 2 * nmol, b.angle = ang.data(), b.angle_theta0 = th.data(), b.angle_k = ka.data();
    memset(&e, 0, sizeof e);
    MD_CHECK_OK(md_bonded_compute(&b, x.data(), n, box, f.data(), &e));
    for (i = 0; i < n; i++) hx[i] = make_float4((float)x[3 * i], (float)x[3 * i + 1], (float)x[3 * i + 2], 0.0f);
    MD_CHECK_OK(md_cuda_bonded_plan_create(&p, &b));
    MD_CHECK(cudaMalloc(&d_f, 3 * (size_t)n * sizeof(md_fixed)) == cudaSuccess &&
             cudaMalloc(&d_e, 10 * sizeof(md_fixed)) == cudaSuccess && cudaMalloc(&d_x, n * sizeof(float4)) == cudaSuccess &&
             cudaMalloc(&d_box, 3 * sizeof(double)) == cudaSuccess);
    MD_CHECK(cudaMemcpy(d_x, hx.data(), n * sizeof(float4), cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(d_box, box, 3 * sizeof(double), cudaMemcpyHostToDevice) == cudaSuccess);
    for (int run = 0; run < 2; run++) {
        MD_CHECK(cudaMemset(d_f, 0, 3 * (size_t)n * sizeof(md_fixed)) == cudaSuccess &&
                 cudaMemset(d_e, 0, 10 * sizeof(md_fixed)) == cudaSuccess);
        MD_CHECK_OK(md_cuda_bonded_enqueue(&p, 0, d_x, NULL, d_box, d_f, n, d_e, d_e + 1));
        MD_CHECK(cudaMemcpy(run ? hf2.data() : hf.data(), d_f, 3 * (size_t)n * sizeof(md_fixed), cudaMemcpyDeviceToHost) ==
                 cudaSuccess);
        MD_CHECK(cudaMemcpy(run ? he2 : he, d_e, 10 * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    MD_CHECK(memcmp(hf.data(), hf2.data(), 3 * (size_t)n * sizeof(md_fixed)) == 0 && memcmp(he, he2, sizeof he) == 0);
    for (i = 0; i < n; i++)
        for (a = 0; a < 3; a++) g[3 * i + a] = md_fixed_to_double(hf[(size_t)a * n + i], MD_FORCE_FIXED_SCALE);
    for (i = 0; i < 3 * n; i++) fmax = fmax > fabs(f[i]) ? fmax : fabs(f[i]);
    worst = max_abs_diff(f.data(), g.data(), 3 * (size_t)n);
    printf("  bonded: largest force difference %.3g of the largest force %.4g\n", worst / fmax, fmax);
    MD_CHECKF(worst <= 2e-5 * fmax, "forces differ by %g (largest %g)", worst, fmax);
    MD_CHECK_CLOSE(md_fixed_to_double(he[0], MD_ENERGY_FIXED_SCALE), e.bonded, 2e-5, 1e-6);
    for (k = 0; k < 9; k++)
        MD_CHECK_CLOSE(md_fixed_to_double(he[1 + k], MD_ENERGY_FIXED_SCALE), e.virial[k], 2e-5, 2e-5 * fabs(e.virial[0]));
    md_cuda_bonded_plan_destroy(&p);
    cudaFree(d_f);
    cudaFree(d_e);
    cudaFree(d_x);
    cudaFree(d_box);
}

/* ---- the step against md_sim ---- */

/* Run `steps` steps on the CPU and on the GPU from the same system and compare. */
static void compare_runs(const md_system *sys, const md_topology *t, const md_lj_table *lj, const md_sim_desc *d,
                         int steps, double xtol, double vtol, const char *what, int water_lanes) {
    md_cuda_sim_opts o;
    md_sim c;
    md_cuda_sim g;
    md_energy ec, eg;
    const int n = sys->n;
    std::vector<double> x(3 * n), v(3 * n);
    double dx, dv, mag, dev;
    MD_CHECK_OK(md_sim_create(&c, sys, t, lj, d));
    memset(&o, 0, sizeof o);
    o.water_lanes = water_lanes;
    MD_CHECK_OK(md_cuda_sim_create(&g, sys, t, lj, d, &o));
    MD_CHECK(g.ndof == c.ndof);
    if (water_lanes) MD_CHECK(g.step.water_lanes == water_lanes);
    MD_CHECK(g.step.water_lanes == 1 || g.step.water_lanes == 3);
    /* the same initial state (constrained on the host by the same code) */
    MD_CHECK_OK(md_cuda_sim_download(&g, x.data(), v.data(), NULL));
    MD_CHECK(memcmp(x.data(), c.x, 3 * (size_t)n * sizeof(double)) == 0);
    MD_CHECK(max_abs_diff(v.data(), c.v, 3 * (size_t)n) < 1e-12);
    MD_CHECK_OK(md_sim_step(&c, steps));
    MD_CHECK_OK(md_cuda_sim_enqueue(&g, steps, MD_CUDA_SIM_ENERGY));
    MD_CHECK_OK(md_cuda_sim_poll(&g, &eg, NULL));
    MD_CHECK_OK(md_sim_energy(&c, &ec));
    MD_CHECK_OK(md_cuda_sim_download(&g, x.data(), v.data(), NULL));
    dx = max_abs_diff(x.data(), c.x, 3 * (size_t)n);
    dv = max_abs_diff(v.data(), c.v, 3 * (size_t)n);
    mag = fabs(ec.lj) + fabs(ec.lj14) + fabs(ec.coul_real) + fabs(ec.coul14) + fabs(ec.coul_excl) + fabs(ec.coul_recip) +
          fabs(ec.coul_self) + fabs(ec.bonded) + fabs(ec.lj_dispersion);
    dev = md_constraints_max_deviation(&c.cons, x.data(), c.box);
    printf("  %s (%d lanes per water), %d steps: |dx| %.3g nm, |dv| %.3g nm/ps, potential GPU %.6f CPU %.6f (%.2g of %.4g), kinetic GPU "
           "%.6f CPU %.6f, GPU constraint deviation %.3g\n",
           what, g.step.water_lanes, steps, dx, dv, md_energy_potential(&eg), md_energy_potential(&ec),
           fabs(md_energy_potential(&eg) - md_energy_potential(&ec)) / mag, mag, eg.kinetic, ec.kinetic, dev);
    MD_CHECKF(dx < xtol, "positions differ by %g nm", dx);
    MD_CHECKF(dv < vtol, "velocities differ by %g nm/ps", dv);
    MD_CHECKF(fabs(md_energy_potential(&eg) - md_energy_potential(&ec)) < 2e-5 * mag, "potential %g vs %g",
              md_energy_potential(&eg), md_energy_potential(&ec));
    MD_CHECK_CLOSE(eg.kinetic, ec.kinetic, 1e-3, 0.0);
    MD_CHECKF(dev < 1e-10, "GPU constraint deviation %g", dev);
    md_cuda_sim_destroy(&g);
    md_sim_free(&c);
}

static void water_step_vs_cpu(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    NEED_GPU();
    MD_CHECK_OK(water_box(&s, &t, &lj, sanitize ? 300 : 1500, 0.997, 1));
    memset(&d, 0, sizeof d);
    if (sanitize) d.nb.cutoff = 0.8;
    compare_runs(&s, &t, &lj, &d, 20, 2e-4, 0.05, "TIP3P NVE", 1);
    compare_runs(&s, &t, &lj, &d, 20, 2e-4, 0.05, "TIP3P NVE", 3);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.seed = 2;
    compare_runs(&s, &t, &lj, &d, 20, 2e-4, 0.05, "TIP3P Langevin", 1);
    compare_runs(&s, &t, &lj, &d, 20, 2e-4, 0.05, "TIP3P Langevin", 3);
    free_sys(&s, &t, &lj);
}

/* Methanol and water from a PSF: bonds, angles, SHAKE clusters, SETTLE; 1 fs. */
static void flexible_step_vs_cpu(void) {
    md_system sys;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    NEED_GPU();
    MD_CHECK_OK(psf_system(64, 300, 0.37, 8 * 0.37, 1, &sys, &t, &lj));
    memset(&d, 0, sizeof d);
    d.dt = 0.001;
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.seed = 3;
    d.nb.cutoff = 0.8;
    d.nb.buffer = 0.1;
    compare_runs(&sys, &t, &lj, &d, 10, 2e-4, 0.05, "methanol + water Langevin", 0);
    free_sys(&sys, &t, &lj);
}

static void reproducible(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim_opts o;
    md_cuda_sim a, b, c;
    int least = 0, greatest = 0, pa = 1, pb = 1;
    NEED_GPU();
    MD_CHECK_OK(langevin_water(&s, &t, &lj, &d, 4, 44));
    /* b's state stream at the default priority: the overlap of PME and nonbonded kernels then
     * runs in another order, and the trajectory must still be the same bits */
    memset(&o, 0, sizeof o);
    o.plain_priority = 1;
    MD_CHECK_OK(md_cuda_sim_create(&a, &s, &t, &lj, &d, NULL));
    MD_CHECK_OK(md_cuda_sim_create(&b, &s, &t, &lj, &d, &o));
    MD_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
    MD_CHECK(cudaStreamGetPriority(a.state.q.stream, &pa) == cudaSuccess && pa == greatest);
    MD_CHECK(cudaStreamGetPriority(b.state.q.stream, &pb) == cudaSuccess && pb == least);
    /* c: each water on one thread where a (the default for this box) takes three lanes, or the
     * other way round: SETTLE is the same instructions on the same inputs either way */
    memset(&o, 0, sizeof o);
    o.water_lanes = a.step.water_lanes == 3 ? 1 : 3;
    MD_CHECK_OK(md_cuda_sim_create(&c, &s, &t, &lj, &d, &o));
    MD_CHECK(c.step.water_lanes != a.step.water_lanes && c.opts.water_lanes == c.step.water_lanes);
    { /* the rule, bounded without repeating it: any launchable kernel keeps at least one 64-thread
       * block (2 warps) per SM resident, so ceil(nwater / 10) <= 2 x SMs water warps must get
       * three lanes; more than 64 warps per SM (the hardware's most) must get one */
        int sms = 0;
        const long long warps = (a.step.nwater + 9) / 10;
        MD_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess && sms > 0);
        if (warps <= 2ll * sms)
            MD_CHECKF(a.step.water_lanes == 3, "%lld water warps on %d SMs: %d lanes", warps, sms, a.step.water_lanes);
        if (warps > 64ll * sms) MD_CHECK(a.step.water_lanes == 1);
    }
    MD_CHECK_OK(md_cuda_sim_enqueue(&a, sanitize ? 10 : 150, 0));
    MD_CHECK_OK(md_cuda_sim_enqueue(&b, sanitize ? 10 : 150, 0));
    MD_CHECK_OK(md_cuda_sim_enqueue(&c, sanitize ? 10 : 150, 0));
    {
        std::vector<double> xa(3 * s.n), va(3 * s.n), xb(3 * s.n), vb(3 * s.n);
        MD_CHECK_OK(md_cuda_sim_download(&a, xa.data(), va.data(), NULL));
        MD_CHECK_OK(md_cuda_sim_download(&b, xb.data(), vb.data(), NULL));
        MD_CHECK(memcmp(xa.data(), xb.data(), xa.size() * sizeof(double)) == 0);
        MD_CHECK(memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0);
        MD_CHECK_OK(md_cuda_sim_download(&c, xb.data(), vb.data(), NULL));
        MD_CHECKF(memcmp(xa.data(), xb.data(), xa.size() * sizeof(double)) == 0, "%d vs %d lanes per water: positions",
                  a.step.water_lanes, c.step.water_lanes);
        MD_CHECKF(memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0, "%d vs %d lanes per water: velocities",
                  a.step.water_lanes, c.step.water_lanes);
    }
    md_cuda_sim_destroy(&a);
    md_cuda_sim_destroy(&b);
    md_cuda_sim_destroy(&c);
    free_sys(&s, &t, &lj);
}

/* One step of md_cuda_sim_enqueue, for md_cuda_graph_capture. */
static md_status one_step(void *ctx, cudaStream_t stream) {
    (void)stream; /* the simulation's own stream, which the capture runs on */
    return md_cuda_sim_enqueue((md_cuda_sim *)ctx, 1, 0);
}

/* A step captured into a graph and replayed: the list build is then two device-gated kernels
 * (the default), or with md_cuda_nb_opts::if_node_build an IF node decided on the device
 * (md_cuda_nb_enqueue through md_cuda_graph_run_if). Both replays give the stream's trajectory bitwise and build the list
 * exactly as often, and that is more than once (the IF node ran) and less than every step (it
 * was skipped). No sorts (sort_interval -1): a replayed graph repeats the captured kind of step.
 * Under compute-sanitizer's racecheck the IF-node replay is left out: there the process dies
 * (SIGSEGV, 0 hazards reported; CUDA 13.0, H100, 2026-11-24), while the gated replay, memcheck
 * of both and the plain run pass, and tests/gpu_graph.cu's IF nodes pass racecheck. */
static void captured_steps_match_stream(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim_opts o;
    md_cuda_sim g[3];
    const int steps = sanitize ? 12 : 120;
    long long builds[3];
    int k, j;
    NEED_GPU();
    MD_CHECK_OK(langevin_water(&s, &t, &lj, &d, 8, 45));
    memset(&o, 0, sizeof o);
    o.nb.sort_interval = -1;
    for (k = 0; k < 3; k++) MD_CHECK_OK(md_cuda_sim_create(&g[k], &s, &t, &lj, &d, &o));
    MD_CHECK_OK(md_cuda_sim_enqueue(&g[0], steps, 0));
    if (racecheck) printf("  racecheck: the IF-node graph's replay is left out (the tool's process dies on it)\n");
    for (k = racecheck ? 2 : 1; k < 3; k++) {
        const cudaStream_t st = g[k].state.q.stream;
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        g[k].nb.opts.if_node_build = k == 1;
        MD_CHECK_OK(md_cuda_graph_capture(st, one_step, &g[k], &graph));
        MD_CHECK_OK(md_cuda_graph_instantiate(graph, st, &exec));
        {
            size_t nodes = 0;
            int conditional = 0;
            std::vector<cudaGraphNode_t> v;
            MD_CHECK(cudaGraphGetNodes(graph, NULL, &nodes) == cudaSuccess);
            v.resize(nodes);
            MD_CHECK(cudaGraphGetNodes(graph, v.data(), &nodes) == cudaSuccess);
            for (size_t i = 0; i < nodes; i++) {
                cudaGraphNodeType ty;
                MD_CHECK(cudaGraphNodeGetType(v[i], &ty) == cudaSuccess);
                conditional += ty == cudaGraphNodeTypeConditional;
            }
            MD_CHECKF(conditional == (k == 1 ? 1 : 0), "%s: %d conditional nodes in the step's graph",
                      k == 1 ? "IF node" : "gated kernels", conditional);
        }
        for (j = 0; j < steps; j++) MD_CHECK(cudaGraphLaunch(exec, st) == cudaSuccess);
        (void)cudaGraphExecDestroy(exec);
        (void)cudaGraphDestroy(graph);
    }
    {
        std::vector<double> x0(3 * s.n), v0(3 * s.n), x(3 * s.n), v(3 * s.n);
        for (k = 0; k < 3; k++) {
            MD_CHECK_OK(md_cuda_sim_poll(&g[k], NULL, NULL));
            builds[k] = g[k].nb.stats.rebuilds;
        }
        MD_CHECK_OK(md_cuda_sim_download(&g[0], x0.data(), v0.data(), NULL));
        for (k = racecheck ? 2 : 1; k < 3; k++) {
            MD_CHECK_OK(md_cuda_sim_download(&g[k], x.data(), v.data(), NULL));
            MD_CHECKF(memcmp(x0.data(), x.data(), x.size() * sizeof(double)) == 0 &&
                          memcmp(v0.data(), v.data(), v.size() * sizeof(double)) == 0,
                      "%s: the replayed graph's trajectory differs from the stream's", k == 1 ? "IF node" : "gated kernels");
            MD_CHECKF(builds[k] == builds[0], "%s: %lld list builds, the stream %lld", k == 1 ? "IF node" : "gated kernels",
                      builds[k], builds[0]);
        }
        printf("  %d steps: %lld list builds on the stream, in the IF-node graph and in the gated kernels' graph\n", steps,
               builds[0]);
        MD_CHECKF(builds[0] >= 2 && builds[0] < steps, "%lld list builds in %d steps", builds[0], steps);
    }
    for (k = 0; k < 3; k++) md_cuda_sim_destroy(&g[k]);
    free_sys(&s, &t, &lj);
}

static void restart_bitwise(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim_opts o;
    md_cuda_sim a, b;
    md_checkpoint ck;
    NEED_GPU();
    MD_CHECK_OK(water_box(&s, &t, &lj, sanitize ? 300 : 1000, 0.997, 5));
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.seed = 55;
    d.nb.cutoff = 0.8;
    memset(&o, 0, sizeof o);
    o.nb_variant = MD_NB_GPU_HALF_LIST;
    MD_CHECK_OK(md_cuda_sim_create(&a, &s, &t, &lj, &d, &o));
    MD_CHECK_OK(md_cuda_sim_create(&b, &s, &t, &lj, &d, &o));
    MD_CHECK_OK(md_cuda_sim_enqueue(&a, 30, 0));
    MD_CHECK_OK(md_cuda_sim_checkpoint(&a, &ck));
    MD_CHECK(ck.step == 30);
    MD_CHECK_OK(md_cuda_sim_enqueue(&a, 30, 0));
    MD_CHECK_OK(md_cuda_sim_restore(&b, &ck));
    MD_CHECK_OK(md_cuda_sim_enqueue(&b, 30, 0));
    {
        std::vector<double> xa(3 * s.n), va(3 * s.n), xb(3 * s.n), vb(3 * s.n);
        long long sa = 0, sb = 0;
        MD_CHECK_OK(md_cuda_sim_download(&a, xa.data(), va.data(), NULL));
        MD_CHECK_OK(md_cuda_sim_download(&b, xb.data(), vb.data(), NULL));
        MD_CHECK_OK(md_cuda_sim_poll(&a, NULL, &sa));
        MD_CHECK_OK(md_cuda_sim_poll(&b, NULL, &sb));
        MD_CHECK(sa == 60 && sb == 60);
        MD_CHECKF(memcmp(xa.data(), xb.data(), xa.size() * sizeof(double)) == 0, "positions differ by %g",
                  max_abs_diff(xa.data(), xb.data(), xa.size()));
        MD_CHECKF(memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0, "velocities differ by %g",
                  max_abs_diff(va.data(), vb.data(), va.size()));
    }
    md_checkpoint_free(&ck);
    md_cuda_sim_destroy(&a);
    md_cuda_sim_destroy(&b);
    free_sys(&s, &t, &lj);
}

static void errors(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim g;
    md_cuda_sim_opts o;
    md_checkpoint ck;
    int lanes;
    NEED_GPU();
    MD_CHECK_OK(water_box(&s, &t, &lj, 300, 0.997, 6));
    memset(&d, 0, sizeof d);
    d.nb.cutoff = 0.8;
    memset(&o, 0, sizeof o);
    o.water_lanes = 2;
    MD_CHECK_ERROR(md_cuda_sim_create(&g, &s, &t, &lj, &d, &o), MD_ERR_INVALID_ARGUMENT, "water_lanes");
    o.water_lanes = 0;
    o.plain_priority = 2;
    MD_CHECK_ERROR(md_cuda_sim_create(&g, &s, &t, &lj, &d, &o), MD_ERR_INVALID_ARGUMENT, "plain_priority");
    o.plain_priority = 0;
    for (lanes = 1; lanes <= 3; lanes += 2) { /* both layouts of the integrate kernel name the atom */
        o.water_lanes = lanes;
        MD_CHECK_OK(md_cuda_sim_create(&g, &s, &t, &lj, &d, &o));
        MD_CHECK_OK(md_cuda_sim_checkpoint(&g, &ck));
        ck.v[3 * 30] = 40.0; /* the oxygen of water 10 at 40 nm/ps: 0.08 nm in one step */
        MD_CHECK_OK(md_cuda_sim_restore(&g, &ck));
        MD_CHECK_OK(md_cuda_sim_enqueue(&g, 3, 0));
        MD_CHECK_ERROR(md_cuda_sim_poll(&g, NULL, NULL), MD_ERR_RANGE, "moved");
        MD_CHECKF(strstr(md_last_error(), "atom 30") != NULL, "%d lanes: %s", lanes, md_last_error());
        md_cuda_sim_destroy(&g);
        if (lanes == 1) md_checkpoint_free(&ck);
    }
    MD_CHECK_OK(md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL));
    ck.v[3 * 30] = 0.0;
    MD_CHECK_OK(md_cuda_sim_restore(&g, &ck));
    MD_CHECK_OK(md_cuda_sim_enqueue(&g, 2, MD_CUDA_SIM_ENERGY));
    MD_CHECK_OK(md_cuda_sim_poll(&g, NULL, NULL));
    ck.v[3 * 31 + 1] = NAN;
    MD_CHECK_ERROR(md_cuda_sim_restore(&g, &ck), MD_ERR_RANGE, "not finite");
    md_checkpoint_free(&ck);
    md_cuda_sim_destroy(&g);
    free_sys(&s, &t, &lj);
}

static void nve_short_drift(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim g;
    const int chunks = sanitize ? 2 : 40, per = sanitize ? 10 : 50;
    double sx = 0, sy = 0, sxx = 0, sxy = 0, e0 = 0, slope;
    NEED_GPU();
    MD_CHECK_OK(water_box(&s, &t, &lj, sanitize ? 300 : 1500, 0.997, 7));
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.friction = 20;
    if (sanitize) d.nb.cutoff = 0.8;
    MD_CHECK_OK(md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL));
    MD_CHECK_OK(md_cuda_sim_enqueue(&g, sanitize ? 20 : 1000, 0));
    MD_CHECK_OK(md_cuda_sim_get_system(&g, &s));
    md_cuda_sim_destroy(&g);
    memset(&d, 0, sizeof d);
    if (sanitize) d.nb.cutoff = 0.8;
    MD_CHECK_OK(md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL));
    for (int k = 0; k <= chunks; k++) {
        md_energy e;
        double tot;
        MD_CHECK_OK(md_cuda_sim_enqueue(&g, k ? per : 1, MD_CUDA_SIM_ENERGY));
        MD_CHECK_OK(md_cuda_sim_poll(&g, &e, NULL));
        tot = md_energy_total(&e);
        if (k == 0) e0 = tot;
        sx += g.time_ps, sy += tot - e0, sxx += g.time_ps * g.time_ps, sxy += g.time_ps * (tot - e0);
    }
    slope = ((chunks + 1) * sxy - sx * sy) / ((chunks + 1) * sxx - sx * sx);
    printf("  GPU NVE %d atoms, %.1f ps: drift %.4g kJ/mol/ps (%.3g per 1000 dof)\n", s.n, g.time_ps, slope,
           slope / g.ndof * 1000);
    /* under the sanitizer the run is too short (and unequilibrated) for a drift: the energies must
     * still be finite and the fit a number */
    MD_CHECKF(isfinite(slope) && (sanitize || fabs(slope) / g.ndof * 1000 < 1.0), "drift %g kJ/mol/ps", slope);
    md_cuda_sim_destroy(&g);
    free_sys(&s, &t, &lj);
}

static void barostat(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim g;
    double rho0, rho1;
    NEED_GPU();
    MD_CHECK_OK(water_box(&s, &t, &lj, sanitize ? 300 : 1000, 0.90, 9));
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.friction = 5;
    d.barostat_interval = 5;
    d.seed = 31;
    d.nb.cutoff = 0.8;
    MD_CHECK_OK(md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL));
    rho0 = md_cuda_sim_density(&g);
    MD_CHECK_OK(md_cuda_sim_run(&g, sanitize ? 100 : 2000, MD_CUDA_SIM_ENERGY));
    MD_CHECK_OK(md_cuda_sim_poll(&g, NULL, NULL));
    rho1 = md_cuda_sim_density(&g);
    printf("  GPU barostat: density %.4f -> %.4f g/cm3 (%lld of %lld moves accepted)\n", rho0, rho1,
           g.baro.total_accepted, g.baro.total_attempted);
    MD_CHECK(g.baro.total_attempted == (sanitize ? 20 : 400) && g.baro.total_accepted > 5);
    if (!sanitize) MD_CHECKF(rho1 > rho0 + 0.04 && rho1 < 1.08, "density %g -> %g", rho0, rho1);
    md_cuda_sim_destroy(&g);
    free_sys(&s, &t, &lj);
}

/* The GPU's forces against md.h's at the same positions after every step of an NVE run that
 * crosses spatial sorts and many list builds: the float mirror of the positions must move
 * continuously between sorts, or an atom wrapped into the box between two builds loses the pairs
 * of its list entries (md_cuda_mirror_coord). Positions go from the GPU run (double) into md.h's
 * md_sim; tolerance 1e-4 of the largest force (the float pair kernel and fixed-point sums give
 * about 5e-6; a lost pair gives 0.3 and more). */
static void forces_follow_md_h_across_sorts(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim g;
    md_sim c;
    const int steps = sanitize ? 12 : 210;
    int k, sorts = 0;
    double worst = 0.0;
    NEED_GPU();
    MD_CHECK_OK(water_box(&s, &t, &lj, sanitize ? 300 : 1500, 0.997, 12));
    memset(&d, 0, sizeof d);
    d.nb.coul = MD_COUL_REACTION_FIELD; /* no PME: the nonbonded list is what is checked */
    if (sanitize) d.nb.cutoff = 0.8;
    {
        md_cuda_sim_opts o;
        memset(&o, 0, sizeof o);
        o.nb.sort_interval = sanitize ? 5 : 100;
        MD_CHECK_OK(md_cuda_sim_create(&g, &s, &t, &lj, &d, &o));
    }
    MD_CHECK_OK(md_sim_create(&c, &s, &t, &lj, &d));
    std::vector<double> x(3 * (size_t)s.n), f(3 * (size_t)s.n);
    for (k = 1; k <= steps; k++) {
        double fmax = 0.0, df;
        MD_CHECK_OK(md_cuda_sim_enqueue(&g, 1, 0));
        MD_CHECK_OK(md_cuda_sim_poll(&g, NULL, NULL));
        MD_CHECK_OK(md_cuda_sim_download(&g, x.data(), NULL, NULL));
        MD_CHECK_OK(md_cuda_state_download(&g.state, NULL, f.data(), NULL));
        memcpy(c.x, x.data(), 3 * (size_t)s.n * sizeof(double));
        MD_CHECK_OK(md_sim_compute_forces(&c));
        for (size_t i = 0; i < 3 * (size_t)s.n; i++) fmax = fmax > fabs(c.f[i]) ? fmax : fabs(c.f[i]);
        df = max_abs_diff(f.data(), c.f, 3 * (size_t)s.n) / fmax;
        worst = worst > df ? worst : df;
        if (!(df < 1e-4)) {
            MD_CHECKF(df < 1e-4, "step %d: GPU forces differ from md.h's by %.3g of the largest", k, df);
            break;
        }
    }
    sorts = (int)g.nb.stats.sorts;
    printf("  %d NVE steps, %d sorts, %lld list builds: largest force difference %.3g of the largest force\n", steps,
           sorts, (long long)g.nb.stats.rebuilds, worst);
    MD_CHECKF(sorts >= 2, "only %d sorts: the run must cross a sort", sorts);
    md_sim_free(&c);
    md_cuda_sim_destroy(&g);
    free_sys(&s, &t, &lj);
}

static void registry_names_step_kernels(void) {
    int integrate = 0, bonded = 0, k;
    NEED_GPU();
    for (k = 0; k < md_cuda_kernel_count(); k++) {
        const char *nm = NULL;
        if (md_cuda_kernel_at(k, NULL, &nm) != MD_OK || !nm) continue;
        /* the general integrate kernel and the waters-only ones, three lanes or one thread per
         * water (md__step_kernel), each once */
        integrate += strcmp(nm, "md__step_integrate_kernel<0>") == 0 || strcmp(nm, "md__step_integrate_kernel<1>") == 0 ||
                     strcmp(nm, "md__step_integrate_kernel<2>") == 0;
        bonded += strcmp(nm, "md__bonded_kernel") == 0;
    }
    MD_CHECKF(integrate >= 1 && integrate <= 3 && bonded == 1, "integrate kernels %d (1 to 3), bonded kernels %d (1)",
              integrate, bonded);
}

int main(void) {
    const char *san = getenv("MD_SANITIZE");
    const char *tool = getenv("MD_SANITIZE_TOOL");
    sanitize = san && san[0] == '1';
    racecheck = sanitize && tool && strcmp(tool, "racecheck") == 0;
    MD_RUN(bonded_vs_cpu);
    MD_RUN(water_step_vs_cpu);
    MD_RUN(flexible_step_vs_cpu);
    MD_RUN(reproducible);
    MD_RUN(captured_steps_match_stream);
    MD_RUN(restart_bitwise);
    MD_RUN(errors);
    MD_RUN(nve_short_drift);
    MD_RUN(forces_follow_md_h_across_sorts);
    MD_RUN(barostat);
    MD_RUN(registry_names_step_kernels);
    return md_test_summary();
}
