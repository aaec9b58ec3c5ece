/* examples/lj_fluid - a Lennard-Jones liquid (argon) run on the GPU: velocity Verlet (NVE), the
 * cluster-pair nonbonded kernel, a DCD trajectory VMD reads, and a progress line with ns/day.
 *
 *   lj_fluid [--cells N] [--steps N] [--dt PS] [--every N] [--temperature K] [--out FILE.dcd]
 *     --cells N        FCC unit cells per edge, 4 N^3 atoms (default 16: 16,384 atoms, 9.15 nm)
 *     --steps N        time steps (default 20000)
 *     --dt PS          time step in ps (default 0.004)
 *     --every N        steps between frames and progress lines (default 1000)
 *     --temperature K  initial temperature of the FCC lattice (default 180: about half of it goes
 *                      into the potential energy as the crystal melts, a liquid near 90 K)
 *     --out FILE.dcd   trajectory (default lj_fluid.dcd; the box in every frame)
 *
 * Argon: sigma 0.3405 nm, epsilon 0.996 kJ/mol, cutoff 0.9 nm (2.6 sigma) with the potential
 * shifted to 0 there, Verlet buffer 0.1 nm. Every --every steps it polls the energies and
 * prints: time (ps), temperature (K), total energy (kJ/mol), its drift per atom since the
 * start, list builds so far, and ns/day of the steps since the last line. Frames are kept on
 * the host and written at the end by md_dcd_write (one atomic write; load it in VMD with
 * `vmd -dcd lj_fluid.dcd`, or with a PDB of the first frame for names). At the end it checks
 * energy conservation (drift below 1e-3 kJ/mol per atom) and exits 1 if not.
 * No GPU: prints "SKIP: <reason>" and exits 0. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [--cells N] [--steps N] [--dt PS] [--every N] [--temperature K] [--out FILE.dcd]\n", prog);
    return 2;
}

int main(int argc, char **argv) {
    const char *out = "lj_fluid.dcd";
    int cells = 16, steps = 20000, every = 1000, i, nframes = 0, done = 0, rc = 1;
    double dt = 0.004, temperature = 180.0, e0 = 0.0, t_last, drift = 0.0;
    md_system sys, *frames = NULL;
    md_topology top;
    md_lj_table lj;
    md_fcc_desc fcc;
    md_nb_params params;
    md_cuda_state st;
    md_cuda_nb_plan plan;
    md_energy e;
    md_dcd_write_desc dd;
    long long builds0 = 0;
    memset(&st, 0, sizeof st);
    memset(&plan, 0, sizeof plan);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cells") == 0 && i + 1 < argc) cells = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dt") == 0 && i + 1 < argc) dt = atof(argv[++i]);
        else if (strcmp(argv[i], "--every") == 0 && i + 1 < argc) every = atoi(argv[++i]);
        else if (strcmp(argv[i], "--temperature") == 0 && i + 1 < argc) temperature = atof(argv[++i]);
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(argv[0]);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", argv[0], argv[i]);
            return usage(argv[0]);
        }
    }
    if (cells < 4 || steps < 1 || every < 1 || !(dt > 0.0) || !(temperature > 0.0)) {
        fprintf(stderr, "%s: --cells >= 4 (the box must hold twice cutoff + buffer), --steps, --every >= 1, "
                        "--dt and --temperature > 0\n", argv[0]);
        return 2;
    }
    memset(&fcc, 0, sizeof fcc);
    fcc.cells = cells;
    fcc.temperature = temperature;
    fcc.seed = 2026;
    if (md_build_lj_fluid(&sys, &top, &lj, &fcc) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        md_system_free(&sys);
        md_topology_free(&top);
        md_lj_table_free(&lj);
        return 0;
    }
    memset(&params, 0, sizeof params);
    params.coul = MD_COUL_NONE; /* argon has no charges */
    nframes = steps / every + 1;
    frames = (md_system *)calloc((size_t)nframes, sizeof(md_system));
    if (!frames || md_cuda_state_create(&st, sys.n) != MD_OK || md_cuda_state_upload(&st, &sys, &top, &lj) != MD_OK ||
        md_cuda_nb_plan_create(&plan, &st, MD_NB_GPU_CLUSTER, &params, NULL) != MD_OK ||
        md_cuda_vv_enqueue(&st, &plan, dt, 0, MD_CUDA_NB_ENERGY) != MD_OK || /* the forces of the start */
        md_cuda_state_enqueue_kinetic(&st) != MD_OK || md_cuda_nb_plan_poll(&plan, &st, &e) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        goto fail;
    }
    e0 = md_energy_total(&e);
    printf("lj_fluid: %d argon atoms in a %.3f nm box, dt %.1f fs, %d steps, cutoff %.2f nm + buffer %.2f nm, %s\n",
           sys.n, sys.box[0], dt * 1e3, steps, plan.params.cutoff, plan.params.buffer, md_nb_variant_name(plan.variant));
    printf("%10s %9s %16s %14s %8s %10s\n", "time_ps", "T_K", "E_total_kJmol", "drift/atom", "builds", "ns/day");
    if (md_system_alloc(&frames[0], sys.n) != MD_OK || md_cuda_state_download(&st, &frames[0], NULL, NULL) != MD_OK) goto fail;
    memcpy(frames[0].box, sys.box, sizeof sys.box);
    t_last = md_wall_seconds();
    for (int f = 1; f < nframes; f++) {
        double now, temp;
        if (md_cuda_vv_enqueue(&st, &plan, dt, every, MD_CUDA_NB_ENERGY) != MD_OK ||
            md_cuda_nb_plan_poll(&plan, &st, &e) != MD_OK) {
            fprintf(stderr, "step %d: %s\n", done, md_last_error());
            goto fail;
        }
        now = md_wall_seconds();
        done += every;
        temp = 2.0 * e.kinetic / ((3.0 * sys.n - 3.0) * MD_KB);
        drift = (md_energy_total(&e) - e0) / sys.n;
        printf("%10.1f %9.2f %16.4f %14.3e %8lld %10.1f\n", done * dt, temp, md_energy_total(&e), drift,
               plan.stats.rebuilds - builds0, dt * every * 1e-3 / (now - t_last) * 86400.0);
        fflush(stdout);
        if (md_system_alloc(&frames[f], sys.n) != MD_OK || md_cuda_state_download(&st, &frames[f], NULL, NULL) != MD_OK)
            goto fail;
        memcpy(frames[f].box, sys.box, sizeof sys.box);
        t_last = md_wall_seconds(); /* the next block's clock starts after the frame is copied */
    }
    memset(&dd, 0, sizeof dd);
    dd.timestep_ps = dt * every;
    if (md_dcd_write(out, frames, nframes, &dd) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        goto fail;
    }
    printf("wrote %s: %d frames of %d atoms; %lld list builds, %lld sorts\n", out, nframes, sys.n, plan.stats.rebuilds,
           plan.stats.sorts);
    if (fabs(drift) < 1e-3) {
        printf("check: energy drift %.2e kJ/mol per atom over %.1f ps (ok, limit 1e-3)\n", drift, done * dt);
        rc = 0;
    } else {
        printf("check: energy drift %.2e kJ/mol per atom over %.1f ps (FAIL, limit 1e-3)\n", drift, done * dt);
    }
fail:
    for (i = 0; frames && i < nframes; i++) md_system_free(&frames[i]);
    free(frames);
    md_cuda_nb_plan_destroy(&plan);
    md_cuda_state_destroy(&st);
    md_system_free(&sys);
    md_topology_free(&top);
    md_lj_table_free(&lj);
    return rc;
}
