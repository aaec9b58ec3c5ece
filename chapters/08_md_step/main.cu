/* Chapter 08: the MD step on the GPU. The ladder, on a TIP3P box (default: the 23,568-atom
 * benchmark box, 7,856 molecules in 6.2 nm; --quick: 648 molecules), rigid water (SETTLE),
 * PME (tolerance 5e-4, cutoff 0.9 nm), 2 fs, Langevin 300 K at 1/ps:
 *
 *   cpu_step          md.h's md_sim: the reference (double; OpenMP over the force loops)
 *   gpu_step          md_cuda_sim: the GPU-resident step (cluster-pair nonbonded, PME on its
 *                     own stream overlapping it, one fused integrate kernel)
 *   gpu_serial_pme    the same with PME after the nonbonded kernels (no overlap)
 *   gpu_half_list     the exact half-list nonbonded rung (bitwise the CPU's fixed-point sums)
 *   exercise          your integrate kernel (exercise.cu; NVE)
 * Each row starts from the same state as cpu_step and is checked after CHECK_STEPS steps: the
 * error column is the largest |x_gpu - x_cpu| over all coordinates (nm), tolerance 2e-4 nm (the
 * float forces differ from the double ones by ~1e-5 relative; tests/gpu_step.cu states why).
 * Time: GPU rows by CUDA events over --steps steps enqueued back to back (median of --reps runs);
 * the CPU row by wall clock over a few steps. Rate: atom-steps per second; ns/day under each row.
 *
 * Then the breakdown of a gpu_step step (md_cuda_sim_profile): each part's GPU time with the
 * parts run one after another (events between them), their sum, the serial step (the parts
 * back to back: the difference is the GPU's idle time between launches, which chapter 09's
 * graphs remove), the overlapped step, and the host time spent enqueueing one step.
 *
 * Modes (each prints JSON lines for bench/race.sh; the PDB is a water box as md_write_pdb writes
 * it with md_water_pdb_names: HOH residues O, H1, H2 and a CRYST1 box):
 *   --write-pdb PREFIX  write the benchmark boxes as PREFIX_23568.pdb and PREFIX_95766.pdb
 *   --race FILE.pdb     time md.h's step on the PDB's box with OpenMM's race settings (LJ cut at
 *                       0.9 nm with the dispersion correction, as OpenMM's tip3p.xml system) and
 *                       print {"schema":"md_race/1",...} with s_per_step, ns_per_day and the
 *                       potential energy of the PDB's configuration (for bench/peers.py
 *                       openmm-energy)
 *   --water-lanes N     with --race: the integrate kernel's lanes per water, 1 or 3, instead of
 *                       the library's rule (md_cuda_sim_opts::water_lanes), to time both layouts
 *   --pme-window-atoms N  with --race: atoms per block of the windowed PME spread, 32, 64, ...,
 *                       256, instead of the library's rule (md_cuda_sim_opts::pme_window_atoms)
 *   --plain-priority    with --race: the state's stream at the default priority, as PME's
 *                       (md_cuda_sim_opts::plain_priority), to time the streams' priorities
 *   --drift PS          NVE energy drift of PS ps (after 20 ps of Langevin) on --race's box
 *                       (default: the 23,568-atom box), leapfrog with rigid water as OpenMM's
 *                       VerletIntegrator: JSON with the slope in kJ/mol/ns per degree of freedom
 *   --seed N            with --drift: the seed of the starting velocities and the Langevin noise
 *                       (default LADDER_SEED, 2026)
 *   --dt PS, --buffer NM, --ewald-tolerance T, --lj-shift, --energy-every N, --pme-grid N,
 *   --no-com-removal    with --drift: the time step (default 0.002; 20 ps of Langevin whatever
 *                       it is), the Verlet buffer (0.1), the Ewald tolerance of the real-space
 *                       cut and the PME grid (5e-4), the LJ potential shift instead of
 *                       truncation, the steps between energies (50), N^3 PME points instead of
 *                       the tolerance's, the centre-of-mass velocity kept instead of removed
 *                       every step: tutorial 08's drift table and its open question
 *   --validate PS       SPC/E at 298 K and 1 bar: NPT (Langevin + Monte Carlo barostat, LJ
 *                       dispersion correction) for PS ps, the second half sampled: density and
 *                       the O-O g(r) (md.h's RDF, chapter 05) against the published values
 *                       (see VALIDATE_* below), JSON and PASS/FAIL lines
 *
 *   build/chapters/08_md_step [--quick] [--json FILE] [--reps N] [--steps N]
 *                             [--write-pdb PREFIX] [--race FILE.pdb [--water-lanes N]
 *                             [--pme-window-atoms N] [--plain-priority]] [--drift PS [--seed N] [--dt PS]
 *                             [--buffer NM] [--ewald-tolerance T] [--lj-shift] [--energy-every N]
 *                             [--pme-grid N] [--no-com-removal]]
 *                             [--validate PS] */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#ifdef __CUDACC__
#include "exercise.cu"
#else /* no nvcc: the Makefile compiles this file as C11; the CPU row runs, the GPU rows SKIP */
#include "md.h"
#endif
#include "ladder.h"
#include <float.h>

#define CHECK_STEPS 10
#define RACE_STEPS 2000

/* A TIP3P (or SPC/E) box of `molecules` molecules at 0.997 g/cm^3, or of edge `edge` nm. */
static md_status water_box(md_system *s, md_topology *t, md_lj_table *lj, md_water_model model, int molecules, double edge) {
    md_water_desc d;
    memset(&d, 0, sizeof d);
    d.model = model;
    d.molecules = molecules;
    d.edge = edge;
    d.seed = LADDER_SEED;
    return md_build_water_box(s, t, lj, &d);
}

#ifdef __CUDACC__
/* A water box read from a PDB (HOH residues), charges from the model, velocities at 300 K. */
static md_status read_box(const char *path, md_system *s, md_topology *t, md_lj_table *lj, uint64_t seed) {
    md_status st = md_read_pdb(path, s);
    md_rng r;
    int i;
    if (st != MD_OK) return st;
    if ((st = md_topology_water_ions(s, MD_WATER_TIP3P, t, lj)) != MD_OK ||
        (st = md_topology_apply_charges(t, s->xyzq, s->n)) != MD_OK) {
        md_system_free(s);
        return st;
    }
    md_rng_seed(&r, seed);
    for (i = 0; i < s->n; i++) { /* Maxwell-Boltzmann; the step constrains and removes the drift */
        double sd = sqrt(MD_KB * 300.0 / t->mass[i]);
        s->vel[i].x = (float)(sd * md_rng_normal(&r));
        s->vel[i].y = (float)(sd * md_rng_normal(&r));
        s->vel[i].z = (float)(sd * md_rng_normal(&r));
    }
    return MD_OK;
}
#endif

/* OpenMM's race settings: Langevin middle 300 K, 1/ps, 2 fs; PME 5e-4, rc 0.9 nm; rigid water. */
static md_sim_desc race_desc(int openmm_lj) {
    md_sim_desc d;
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.seed = LADDER_SEED;
    if (openmm_lj) { /* OpenMM's NonbondedForce: plain LJ cut at rc, with the dispersion correction */
        d.nb.lj = MD_LJ_TRUNCATE;
        d.nb.dispersion_correction = 1;
    }
    return d;
}

static double ns_per_day(double dt_ps, double s_per_step) { return dt_ps * 1e-3 * 86400.0 / s_per_step; }

#ifdef __CUDACC__
/* GPU time per step of `steps` steps (median of reps runs), CUDA events on the run's stream. */
static md_status time_gpu(md_cuda_sim *g, int steps, int reps, int exercise, double *xn, double *s_per_step) {
    cudaEvent_t a, b;
    double t[64];
    md_status st = MD_OK;
    int r, k;
    float ms;
    if (reps > 64) reps = 64;
    MD_CUDA_TRY(cudaEventCreate(&a));
    MD_CUDA_TRY(cudaEventCreate(&b));
    for (r = 0; r <= reps && st == MD_OK; r++) { /* run 0 warms up */
        MD_CUDA_TRY(cudaEventRecord(a, g->state.q.stream));
        if (exercise)
            for (k = 0; k < steps && st == MD_OK; k++) {
                if ((st = exercise_integrate(g, xn)) == MD_OK) st = md_cuda_sim_enqueue_forces(g, 0);
            }
        else st = md_cuda_sim_enqueue(g, steps, 0);
        MD_CUDA_TRY(cudaEventRecord(b, g->state.q.stream));
        MD_CUDA_TRY(cudaEventSynchronize(b));
        MD_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) t[r - 1] = 1e-3 * ms / steps;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (st == MD_OK) st = md_cuda_sim_poll(g, NULL, NULL);
    if (st == MD_OK) *s_per_step = md_median(t, reps);
    return st;
}
#endif

/* ---- the ladder ---- */

static int run_ladder(const ladder_opts *o, int steps) {
    ladder l;
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim c;
    md_sim_desc d = race_desc(0);
    const int molecules = o->quick ? 648 : 7856;
    const int cpu_steps = o->quick ? 5 : 2;
    double t0, t_cpu, *x_ref = NULL;
    char title[320], dev[300] = "cpu";
    int failed;
#ifdef __CUDACC__
    md_cuda_device_info info;
    if (md_cuda_available() && md_cuda_get_device_info(0, &info) == MD_OK) snprintf(dev, sizeof dev, "%s", info.name);
#endif
    if (water_box(&s, &t, &lj, MD_WATER_TIP3P, molecules, o->quick ? 0.0 : 6.2) != MD_OK) {
        printf("FAIL water box: %s\n", md_last_error());
        return 1;
    }
    snprintf(title, sizeof title,
             "Chapter 08: the MD step, TIP3P box of %d atoms (%.2f nm), PME, SETTLE, 2 fs, Langevin\n"
             "time: per step; error: the largest |x - x_cpu| (nm) after %d steps from the same start",
             s.n, s.box[0], CHECK_STEPS);
    ladder_begin(&l, o, "08_md_step", title, "atom-steps/s", "atoms", dev);
    /* the reference: CHECK_STEPS steps on the CPU from the common start; its time per step */
    if (md_sim_create(&c, &s, &t, &lj, &d) != MD_OK) {
        ladder_row_error(&l, "cpu_step", md_last_error());
        free(x_ref);
        return ladder_end(&l);
    }
    x_ref = (double *)malloc(3 * (size_t)s.n * sizeof(double));
    t0 = md_wall_seconds();
    if (!x_ref || md_sim_step(&c, cpu_steps) != MD_OK) {
        ladder_row_error(&l, "cpu_step", md_last_error());
        md_sim_free(&c);
        free(x_ref);
        return ladder_end(&l);
    }
    t_cpu = (md_wall_seconds() - t0) / cpu_steps;
    if (md_sim_step(&c, CHECK_STEPS - cpu_steps) != MD_OK) ladder_row_error(&l, "cpu_step", md_last_error());
    memcpy(x_ref, c.x, 3 * (size_t)s.n * sizeof(double));
    md_sim_free(&c);
    ladder_row(&l, "cpu_step", s.n, t_cpu, s.n, NAN, NAN, 0.0);
    printf("    %.3f ns/day\n", ns_per_day(0.002, t_cpu));
#ifdef __CUDACC__
    if (!md_cuda_available()) {
        printf("SKIP GPU rows: %s\n", md_last_error());
    } else {
        static const char *const names[4] = {"gpu_step", "gpu_serial_pme", "gpu_half_list", "exercise"};
        md_cuda_step_profile pr;
        const int reps = o->reps ? o->reps : (o->quick ? 3 : 7);
        int row;
        for (row = 0; row < 4; row++) {
            md_cuda_sim g;
            md_cuda_sim_opts go;
            md_sim_desc dd = d;
            double *x = (double *)malloc(3 * (size_t)s.n * sizeof(double)), *xn = NULL, err = 0.0, sps = 0.0;
            md_status st;
            int k;
            if (!ladder_selected(&l, names[row])) {
                free(x);
                continue;
            }
            memset(&go, 0, sizeof go);
            if (row == 1) go.serial_pme = 1;
            if (row == 2) go.nb_variant = MD_NB_GPU_HALF_LIST;
            if (row == 3) { /* the exercise integrates NVE without centre-of-mass removal */
                dd.thermostat = MD_THERMOSTAT_NONE;
                dd.com_removal = -1;
            }
            if ((st = md_cuda_sim_create(&g, &s, &t, &lj, &dd, &go)) != MD_OK) {
                ladder_row_error(&l, names[row], md_last_error());
                free(x);
                continue;
            }
            if (row == 3) {
                md_sim cc;
                if (cudaMalloc(&xn, 3 * (size_t)s.n * sizeof(double)) != cudaSuccess ||
                    md_sim_create(&cc, &s, &t, &lj, &dd) != MD_OK || md_sim_step(&cc, CHECK_STEPS) != MD_OK) {
                    ladder_row_error(&l, names[row], "cannot set up the exercise's reference");
                    md_cuda_sim_destroy(&g);
                    free(x);
                    continue;
                }
                memcpy(x_ref, cc.x, 3 * (size_t)s.n * sizeof(double));
                md_sim_free(&cc);
                for (k = 0; k < CHECK_STEPS && st == MD_OK; k++)
                    if ((st = exercise_integrate(&g, xn)) == MD_OK) st = md_cuda_sim_enqueue_forces(&g, 0);
            } else {
                st = md_cuda_sim_enqueue(&g, CHECK_STEPS, 0);
            }
            if (st == MD_OK) st = md_cuda_sim_poll(&g, NULL, NULL);
            if (st == MD_OK) st = md_cuda_sim_download(&g, x, NULL, NULL);
            if (st != MD_OK) {
                ladder_row_error(&l, names[row], md_last_error());
            } else {
                for (k = 0; k < 3 * s.n; k++) err = fmax(err, fabs(x[k] - x_ref[k]));
                if (err <= 2e-4 && (st = time_gpu(&g, steps, reps, row == 3, xn, &sps)) != MD_OK)
                    ladder_row_error(&l, names[row], md_last_error());
                else {
                    ladder_row(&l, names[row], s.n, err <= 2e-4 ? sps : -1.0, s.n, NAN, err, 2e-4);
                    if (err <= 2e-4) printf("    %.1f ns/day\n", ns_per_day(dd.dt ? dd.dt : 0.002, sps));
                }
                if (row == 0 && err <= 2e-4) {
                    if (md_cuda_sim_profile(&g, o->quick ? 50 : 200, &pr) == MD_OK) {
                        printf("\nwhere a gpu_step step goes (GPU time per step, parts one after another):\n");
                        printf("  %-34s %9.2f us %5.1f%%\n", "integrate (one kernel)", 1e6 * pr.integrate,
                               100 * pr.integrate / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "nonbonded (md_cuda_nb_enqueue)", 1e6 * pr.nonbonded,
                               100 * pr.nonbonded / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "bonded", 1e6 * pr.bonded, 100 * pr.bonded / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "PME spread", 1e6 * pr.pme_spread,
                               100 * pr.pme_spread / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "PME forward FFT", 1e6 * pr.pme_forward,
                               100 * pr.pme_forward / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "PME solve", 1e6 * pr.pme_solve,
                               100 * pr.pme_solve / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "PME backward FFT", 1e6 * pr.pme_backward,
                               100 * pr.pme_backward / pr.step_serial);
                        printf("  %-34s %9.2f us %5.1f%%\n", "PME gather", 1e6 * pr.pme_gather,
                               100 * pr.pme_gather / pr.step_serial);
                        printf("  %-34s %9.2f us\n", "sum of the parts", 1e6 * pr.parts_sum);
                        printf("  %-34s %9.2f us (idle between launches: %.2f us)\n", "serial step, back to back",
                               1e6 * pr.step_serial, 1e6 * (pr.step_serial - pr.parts_sum));
                        printf("  %-34s %9.2f us\n", "overlapped step (gpu_step)", 1e6 * pr.step);
                        printf("  %-34s %9.2f us\n\n", "host time to enqueue one step", 1e6 * pr.host_enqueue);
                    } else {
                        printf("  breakdown failed: %s\n", md_last_error());
                    }
                }
            }
            if (xn) cudaFree(xn);
            md_cuda_sim_destroy(&g);
            free(x);
        }
    }
#else
    (void)steps;
    printf("SKIP GPU rows: nvcc not found (this build has the CPU row only)\n");
#endif
    failed = ladder_end(&l);
    free(x_ref);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return failed;
}

/* ---- modes for bench/race.sh ---- */

static int write_pdbs(const char *prefix) {
    static const int molecules[2] = {7856, 31922};
    static const double edges[2] = {6.2, 9.9};
    int k;
    for (k = 0; k < 2; k++) {
        md_system s;
        md_topology t;
        md_lj_table lj;
        char path[1024];
        if (water_box(&s, &t, &lj, MD_WATER_TIP3P, molecules[k], edges[k]) != MD_OK) {
            printf("FAIL --write-pdb: %s\n", md_last_error());
            return 1;
        }
        md_water_pdb_names(&s);
        snprintf(path, sizeof path, "%s_%d.pdb", prefix, s.n);
        if (md_write_pdb(path, &s) != MD_OK) {
            printf("FAIL --write-pdb: %s\n", md_last_error());
            return 1;
        }
        printf("wrote %s (%d atoms, %.2f nm)\n", path, s.n, s.box[0]);
        md_system_free(&s);
        md_topology_free(&t);
        md_lj_table_free(&lj);
    }
    return 0;
}

/* What --drift runs: ps of NVE after 20 ps of Langevin, from a seed, with the race's settings
 * unless one of --dt, --buffer, --ewald-tolerance, --lj-shift, --energy-every, --pme-grid,
 * --no-com-removal changes them (the knobs tutorial 08's drift table turns; 0 or unset: the
 * race's value). */
typedef struct drift_opts {
    double ps;                /* --drift PS: picoseconds of NVE */
    unsigned long long seed;  /* --seed N: the Langevin noise, and the starting velocities of a
                                 --race PDB's box (the built box's come from its builder) */
    double dt;                /* --dt PS: time step (0: 0.002) */
    double buffer;            /* --buffer NM: Verlet buffer (0: the library's, 0.1) */
    double tolerance;         /* --ewald-tolerance T (0: 5e-4, OpenMM's race setting) */
    int lj_shift;             /* --lj-shift: LJ potential shift instead of OpenMM's truncation */
    int every;                /* --energy-every N: steps between energies (0: 50) */
    int pme_grid;             /* --pme-grid N: N^3 PME points (0: the library's rule for the tolerance) */
    int no_com;               /* --no-com-removal: keep the centre-of-mass velocity (md_sim_desc::com_removal -1) */
} drift_opts;

#ifdef __CUDACC__
/* The race: md.h's step on the PDB's box with OpenMM's settings; one JSON line. */
static int race(const char *pdb, int steps, int reps, int water_lanes, int window_atoms, int plain_priority) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d = race_desc(1);
    md_cuda_sim g;
    md_energy e;
    md_sim ref;
    md_cuda_device_info info;
    md_cuda_sim_opts go;
    double sps = 0.0;
    if (!md_cuda_available()) {
        printf("SKIP --race: %s\n", md_last_error());
        return 0;
    }
    md_cuda_get_device_info(0, &info);
    memset(&go, 0, sizeof go);
    go.water_lanes = water_lanes; /* 0: the library's rule */
    go.pme_window_atoms = window_atoms; /* 0: the library's rule */
    go.plain_priority = plain_priority; /* 0: the state's stream at the device's greatest priority */
    if (read_box(pdb, &s, &t, &lj, LADDER_SEED) != MD_OK || md_cuda_sim_create(&g, &s, &t, &lj, &d, &go) != MD_OK) {
        printf("FAIL --race %s: %s\n", pdb, md_last_error());
        return 1;
    }
    /* the potential energy of the PDB's own configuration (unconstrained, as OpenMM's
     * setPositions leaves it), on the CPU in double: what bench/peers.py openmm-energy reports */
    if (md_sim_prepare(&ref, &s, &t, &lj, &d) != MD_OK) {
        printf("FAIL --race %s: %s\n", pdb, md_last_error());
        return 1;
    }
    {
        int i;
        for (i = 0; i < s.n; i++) {
            ref.x[3 * i] = s.xyzq[i].x;
            ref.x[3 * i + 1] = s.xyzq[i].y;
            ref.x[3 * i + 2] = s.xyzq[i].z;
        }
    }
    if (md_sim_compute_forces(&ref) != MD_OK || md_cuda_sim_enqueue(&g, 1, MD_CUDA_SIM_ENERGY) != MD_OK ||
        md_cuda_sim_poll(&g, &e, NULL) != MD_OK || time_gpu(&g, steps, reps, 0, NULL, &sps) != MD_OK) {
        printf("FAIL --race %s: %s\n", pdb, md_last_error());
        return 1;
    }
    printf("{\"schema\": \"md_race/1\", \"code\": \"md.h\", \"what\": \"step\", \"device\": \"%s\", \"atoms\": %d, "
           "\"steps\": %d, \"s_per_step\": %.9g, \"ns_per_day\": %.6g, \"pme_grid\": [%d, %d, %d], \"cutoff_nm\": %g, "
           "\"ewald_tolerance\": %g, \"potential_kj_mol\": %.10g, \"recip_kj_mol\": %.10g, \"nb_variant\": \"%s\", "
           "\"list_builds_per_1000_steps\": %.4g, \"water_lanes\": %d, \"pme_window_atoms\": %d, \"plain_priority\": %d}\n",
           info.name, s.n, steps, sps, ns_per_day(0.002, sps), g.pme.params.grid[0], g.pme.params.grid[1],
           g.pme.params.grid[2], g.desc.nb.cutoff, g.desc.nb.ewald_tolerance, md_energy_potential(&ref.energy),
           ref.energy.coul_recip, md_nb_variant_name(g.opts.nb_variant),
           1000.0 * (double)g.nb.stats.rebuilds / (double)g.steps, g.opts.water_lanes, g.opts.pme_window_atoms,
           g.opts.plain_priority);
    md_sim_free(&ref);
    md_cuda_sim_destroy(&g);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return 0;
}

/* NVE drift over o->ps picoseconds after 20 ps of Langevin; the total energy every o->every steps
 * (0.1 ps at the defaults), least squares. The seed draws the starting velocities and the
 * Langevin noise: one slope is one sample of a quantity that moves a lot from start to start, so
 * bench/race.sh runs several seeds. */
static int drift(const char *pdb, const drift_opts *o) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d = race_desc(1);
    md_cuda_sim g;
    md_cuda_device_info info;
    const double dt = o->dt > 0 ? o->dt : 0.002;
    const int per = o->every > 0 ? o->every : 50, nout = (int)(o->ps / (per * dt) + 0.5);
    const int equil = (int)(20.0 / dt + 0.5);
    double sx = 0, sy = 0, sxx = 0, sxy = 0, e0 = 0, w0, slope, dev = 0;
    int k;
    if (!md_cuda_available()) {
        printf("SKIP --drift: %s\n", md_last_error());
        return 0;
    }
    md_cuda_get_device_info(0, &info);
    d.seed = o->seed;
    d.dt = dt;
    if (o->buffer > 0) d.nb.buffer = o->buffer;
    d.nb.ewald_tolerance = d.pme.tolerance = o->tolerance > 0 ? o->tolerance : MD_NB_DEFAULT_EWALD_TOLERANCE;
    if (o->lj_shift) d.nb.lj = MD_LJ_POTENTIAL_SHIFT;
    if (o->pme_grid > 0) d.pme.grid[0] = d.pme.grid[1] = d.pme.grid[2] = o->pme_grid;
    if (o->no_com) d.com_removal = -1;
    if ((pdb ? read_box(pdb, &s, &t, &lj, o->seed) : water_box(&s, &t, &lj, MD_WATER_TIP3P, 7856, 6.2)) != MD_OK ||
        md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL) != MD_OK || md_cuda_sim_enqueue(&g, equil, 0) != MD_OK ||
        md_cuda_sim_get_system(&g, &s) != MD_OK) {
        printf("FAIL --drift: %s\n", md_last_error());
        return 1;
    }
    md_cuda_sim_destroy(&g);
    d.thermostat = MD_THERMOSTAT_NONE;
    if (md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL) != MD_OK) {
        printf("FAIL --drift: %s\n", md_last_error());
        return 1;
    }
    w0 = md_wall_seconds();
    for (k = 0; k <= nout; k++) {
        md_energy e;
        double tot;
        if (md_cuda_sim_enqueue(&g, k ? per : 1, MD_CUDA_SIM_ENERGY) != MD_OK || md_cuda_sim_poll(&g, &e, NULL) != MD_OK) {
            printf("FAIL --drift at %.1f ps: %s\n", g.time_ps, md_last_error());
            return 1;
        }
        tot = md_energy_total(&e);
        if (k == 0) e0 = tot;
        sx += g.time_ps, sy += tot - e0, sxx += g.time_ps * g.time_ps, sxy += g.time_ps * (tot - e0);
        dev = fmax(dev, fabs(tot - e0));
    }
    slope = ((nout + 1) * sxy - sx * sy) / ((nout + 1) * sxx - sx * sx); /* kJ/mol/ps */
    printf("{\"schema\": \"md_race/1\", \"code\": \"md.h\", \"what\": \"drift\", \"device\": \"%s\", \"atoms\": %d, "
           "\"seed\": %llu, \"dt_ps\": %.6g, \"buffer_nm\": %.6g, \"ewald_tolerance\": %.6g, \"lj\": \"%s\", "
           "\"energy_every\": %d, \"pme_grid\": [%d, %d, %d], \"com_removal\": %d, \"ps\": %.6g, \"dof\": %d, "
           "\"drift_kj_mol_ns\": %.6g, \"drift_kj_mol_ns_per_dof\": %.6g, \"max_excursion_kj_mol\": %.6g, "
           "\"wall_s\": %.3f}\n",
           info.name, s.n, o->seed, dt, o->buffer > 0 ? o->buffer : MD_NB_DEFAULT_BUFFER, d.nb.ewald_tolerance,
           o->lj_shift ? "shift" : "truncate", per, g.pme.params.grid[0], g.pme.params.grid[1], g.pme.params.grid[2],
           !o->no_com, g.time_ps, g.ndof, 1e3 * slope, 1e3 * slope / g.ndof, dev, md_wall_seconds() - w0);
    md_cuda_sim_destroy(&g);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return 0;
}

/* The published SPC/E values the validation compares with, and their tolerances.
 *   Density at 298 K and 1 bar (PME, LJ with the long-range correction): 0.994 g/cm^3, from
 *   C. Vega and J. L. F. Abascal, Phys. Chem. Chem. Phys. 13, 19663 (2011), Table 2; within 1%.
 *   O-O g(r), first peak at 298 K: r = 0.275 nm, g = 3.0, from P. Mark and L. Nilsson, J. Phys.
 *   Chem. A 105, 9954 (2001), Table 2 (SPC/E, 298 K); position within 0.005 nm (two bins of the
 *   0.0025 nm histogram), height within 5% (the peak height depends on the bin width and the
 *   sampling). */
#define VALIDATE_DENSITY 0.994
#define VALIDATE_GR_R 0.275
#define VALIDATE_GR_H 3.0

static int validate(double ps) {
    md_system s, frame;
    md_topology t;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim g;
    md_rdf rdf;
    int *ox = NULL, nox = 0, k, i, bad = 0, nsample, peak = 0;
    const int per = 250; /* steps between samples: 0.5 ps */
    double rho = 0.0, *gr, r_peak, h_peak;
    if (!md_cuda_available()) {
        printf("SKIP --validate: %s\n", md_last_error());
        return 0;
    }
    if (water_box(&s, &t, &lj, MD_WATER_SPCE, 7856, 0.0) != MD_OK || md_system_alloc(&frame, s.n) != MD_OK) {
        printf("FAIL --validate: %s\n", md_last_error());
        return 1;
    }
    memset(&d, 0, sizeof d);
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.temperature = 298.0;
    d.barostat_interval = 25;
    d.pressure = 1.0;
    d.seed = LADDER_SEED;
    d.nb.lj = MD_LJ_TRUNCATE;
    d.nb.dispersion_correction = 1;
    if (md_cuda_sim_create(&g, &s, &t, &lj, &d, NULL) != MD_OK || md_select(&s, "name OW", &ox, &nox) != MD_OK ||
        md_rdf_init(&rdf, 1.2, 480) != MD_OK) {
        printf("FAIL --validate: %s\n", md_last_error());
        return 1;
    }
    nsample = (int)(ps / 2 / (per * 0.002));
    if (md_cuda_sim_run(&g, (int)(ps / 2 / 0.002), 0) != MD_OK) { /* equilibration: half the run */
        printf("FAIL --validate: %s\n", md_last_error());
        return 1;
    }
    for (k = 0; k < nsample; k++) {
        if (md_cuda_sim_run(&g, per, 0) != MD_OK || md_cuda_sim_get_system(&g, &frame) != MD_OK ||
            md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &rdf, frame.xyzq, frame.n, ox, nox, NULL, 0, frame.box) != MD_OK) {
            printf("FAIL --validate at %.1f ps: %s\n", g.time_ps, md_last_error());
            return 1;
        }
        rho += md_cuda_sim_density(&g) / nsample;
    }
    gr = (double *)malloc((size_t)rdf.nbins * sizeof(double));
    if (!gr || md_rdf_normalize(&rdf, gr, NULL) != MD_OK) {
        printf("FAIL --validate: %s\n", md_last_error());
        return 1;
    }
    for (i = 1; i < rdf.nbins; i++)
        if (gr[i] > gr[peak]) peak = i;
    r_peak = (peak + 0.5) * rdf.rmax / rdf.nbins;
    h_peak = gr[peak];
    printf("{\"schema\": \"md_race/1\", \"code\": \"md.h\", \"what\": \"spce_validation\", \"atoms\": %d, \"ps\": %.6g, "
           "\"density_g_cm3\": %.6g, \"density_published\": %g, \"goo_peak_nm\": %.5g, \"goo_peak_height\": %.5g, "
           "\"goo_published_nm\": %g, \"goo_published_height\": %g}\n",
           s.n, g.time_ps, rho, VALIDATE_DENSITY, r_peak, h_peak, VALIDATE_GR_R, VALIDATE_GR_H);
    if (fabs(rho - VALIDATE_DENSITY) <= 0.01 * VALIDATE_DENSITY) printf("PASS density %.4f within 1%% of %.3f\n", rho, VALIDATE_DENSITY);
    else printf("FAIL density %.4f not within 1%% of %.3f\n", rho, VALIDATE_DENSITY), bad++;
    if (fabs(r_peak - VALIDATE_GR_R) <= 0.005) printf("PASS g_OO first peak at %.4f nm (published %.4f)\n", r_peak, VALIDATE_GR_R);
    else printf("FAIL g_OO first peak at %.4f nm (published %.4f)\n", r_peak, VALIDATE_GR_R), bad++;
    if (fabs(h_peak - VALIDATE_GR_H) <= 0.05 * VALIDATE_GR_H) printf("PASS g_OO first peak height %.3f (published %.2f)\n", h_peak, VALIDATE_GR_H);
    else printf("FAIL g_OO first peak height %.3f (published %.2f)\n", h_peak, VALIDATE_GR_H), bad++;
    free(gr);
    md_free(ox);
    md_rdf_free(&rdf);
    md_cuda_sim_destroy(&g);
    md_system_free(&s);
    md_system_free(&frame);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return bad ? 1 : 0;
}
#endif

int main(int argc, char **argv) {
    ladder_opts o;
    const char *pdb_prefix = NULL, *race_pdb = NULL;
    double validate_ps = 0.0;
    drift_opts dr;
    int drift_knobs = 0, steps = 0, water_lanes = 0, window_atoms = 0, plain_priority = 0, i, rc, n = 1;
    char **rest = (char **)malloc((size_t)argc * sizeof(char *));
    if (!rest) return 1;
    rest[0] = argv[0];
    memset(&dr, 0, sizeof dr);
    dr.seed = LADDER_SEED;
    for (i = 1; i < argc; i++) { /* this chapter's options; the rest go to the ladder's parser */
        const int more = i + 1 < argc;
        if (strcmp(argv[i], "--write-pdb") == 0 && more) pdb_prefix = argv[++i];
        else if (strcmp(argv[i], "--race") == 0 && more) race_pdb = argv[++i];
        else if (strcmp(argv[i], "--drift") == 0 && more) dr.ps = atof(argv[++i]);
        else if (strcmp(argv[i], "--validate") == 0 && more) validate_ps = atof(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && more) {
            char *end;
            dr.seed = strtoull(argv[++i], &end, 10);
            if (*end != '\0' || end == argv[i] || argv[i][0] == '-') {
                fprintf(stderr, "%s: --seed wants a non-negative integer (got '%s')\n", argv[0], argv[i]);
                free(rest);
                return 2;
            }
        }
        else if ((strcmp(argv[i], "--dt") == 0 || strcmp(argv[i], "--buffer") == 0 ||
                  strcmp(argv[i], "--ewald-tolerance") == 0 || strcmp(argv[i], "--energy-every") == 0 ||
                  strcmp(argv[i], "--pme-grid") == 0) && more) {
            /* --drift's knobs: a positive number each (the library checks the ranges) */
            const char *name = argv[i];
            const int whole = strcmp(name, "--energy-every") == 0 || strcmp(name, "--pme-grid") == 0;
            char *end;
            const double v = strtod(argv[++i], &end);
            if (*end != '\0' || end == argv[i] || !(v > 0) || (whole && (v > 1e6 || v != (int)v))) {
                fprintf(stderr, "%s: %s wants a positive %s (got '%s')\n", argv[0], name,
                        whole ? "whole number up to 10^6" : "number", argv[i]);
                free(rest);
                return 2;
            }
            if (strcmp(name, "--dt") == 0) dr.dt = v;
            else if (strcmp(name, "--buffer") == 0) dr.buffer = v;
            else if (strcmp(name, "--ewald-tolerance") == 0) dr.tolerance = v;
            else if (strcmp(name, "--pme-grid") == 0) dr.pme_grid = (int)v;
            else dr.every = (int)v;
            drift_knobs = 1;
        }
        else if (strcmp(argv[i], "--lj-shift") == 0) dr.lj_shift = drift_knobs = 1;
        else if (strcmp(argv[i], "--no-com-removal") == 0) dr.no_com = drift_knobs = 1;
        else if (strcmp(argv[i], "--plain-priority") == 0) plain_priority = 1;
        else if (strcmp(argv[i], "--steps") == 0 && more) steps = atoi(argv[++i]);
        else if ((strcmp(argv[i], "--water-lanes") == 0 || strcmp(argv[i], "--pme-window-atoms") == 0) && more) {
            /* the value itself is md_cuda_sim_create's to check (md_cuda_sim_opts::water_lanes,
             * ::pme_window_atoms) */
            const char *name = argv[i];
            char *end;
            const int v = (int)strtol(argv[++i], &end, 10);
            if (*end != '\0' || end == argv[i]) {
                fprintf(stderr, "%s: %s wants a number (got '%s')\n", argv[0], name, argv[i]);
                free(rest);
                return 2;
            }
            if (name[2] == 'w') water_lanes = v;
            else window_atoms = v;
        }
        else rest[n++] = argv[i];
    }
    if ((rc = ladder_parse(&o, n, rest,
                           "  --steps N           GPU steps per timed run (default 500; --quick 100)\n"
                           "  --write-pdb PREFIX  write the benchmark boxes as PDB files for OpenMM (bench/race.sh)\n"
                           "  --race FILE.pdb     md.h's step time on the PDB's box, OpenMM's settings (JSON)\n"
                           "  --water-lanes N     --race: lanes per water in the integrate kernel, 1 or 3 (default: the library's rule)\n"
                           "  --pme-window-atoms N --race: atoms per block of the windowed PME spread, 32..256 (default: the library's rule)\n"
                           "  --plain-priority    --race: the state's stream at the default priority, as PME's (default: the greatest)\n"
                           "  --drift PS          NVE energy drift over PS ps (JSON; with --race's PDB if given)\n"
                           "  --seed N            --drift: seed of the starting velocities and the Langevin noise (default 2026)\n"
                           "  --dt PS, --buffer NM, --ewald-tolerance T, --lj-shift, --energy-every N, --pme-grid N,\n"
                           "  --no-com-removal    --drift: time step (0.002), Verlet buffer (0.1), Ewald tolerance (5e-4),\n"
                           "                      LJ potential shift (truncated), steps between energies (50), N^3 PME\n"
                           "                      points (the tolerance's), keep the centre-of-mass velocity (removed)\n"
                           "  --validate PS       SPC/E density and O-O g(r) after PS ps of NPT at 298 K")) != 0) {
        free(rest);
        return rc > 0 ? 0 : 2;
    }
    free(rest);
    if (dr.ps < 0 || validate_ps < 0 || steps < 0) {
        fprintf(stderr, "%s: --drift, --validate and --steps want positive numbers\n", argv[0]);
        return 2;
    }
    if (drift_knobs && !(dr.ps > 0)) {
        fprintf(stderr, "%s: --dt, --buffer, --ewald-tolerance, --lj-shift, --energy-every, --pme-grid and "
                        "--no-com-removal go with --drift PS\n", argv[0]);
        return 2;
    }
    if (steps == 0) steps = o.quick ? 100 : 500;
    if (pdb_prefix) return write_pdbs(pdb_prefix);
#ifdef __CUDACC__
    if (dr.ps > 0) return drift(race_pdb, &dr);
    if (validate_ps > 0) return validate(validate_ps);
    if (race_pdb)
        return race(race_pdb, steps > 0 ? steps : RACE_STEPS, o.reps ? o.reps : 5, water_lanes, window_atoms,
                    plain_priority);
#else
    (void)water_lanes; /* --race's options: GPU only */
    (void)window_atoms;
    (void)plain_priority;
    if (dr.ps > 0 || validate_ps > 0 || race_pdb) {
        printf("SKIP --race, --drift, --validate: nvcc not found (GPU modes)\n");
        return 0;
    }
#endif
    return run_ladder(&o, steps);
}
