/* examples/water_md - equilibrate and run a water box on the GPU: rigid water (SETTLE), PME,
 * Langevin thermostat, optional Monte Carlo barostat, a DCD trajectory, an energies CSV, a
 * checkpoint to restart from, and a progress line with ns/day.
 *
 *   water_md [--molecules N | --pdb FILE] [--model tip3p|spce] [--equil PS] [--ps PS]
 *            [--npt] [--temperature K] [--pressure BAR] [--dt PS] [--seed N]
 *            [--out PREFIX] [--every PS] [--restart FILE.chk]
 *     --molecules N   a box of N molecules at 0.997 g/cm^3 from md.h's builder (default 2000)
 *     --pdb FILE      a water box from a PDB file (HOH residues O, H1, H2; CRYST1 box) instead
 *     --model M       water model for the builder and the PDB's charges (default tip3p)
 *     --equil PS      equilibration first (Langevin, with the barostat under --npt; default 10)
 *     --ps PS         production time (default 20)
 *     --npt           Monte Carlo barostat every 25 steps during both phases (else NVT)
 *     --temperature K (default 300)   --pressure BAR (default 1)   --dt PS (default 0.002)
 *     --seed N        thermostat and barostat seed (default 1)
 *     --out PREFIX    PREFIX.dcd (a frame every --every ps of production), PREFIX.csv (energies
 *                     at every frame), PREFIX.chk (the checkpoint at the end) (default water_md)
 *     --every PS      frame and progress interval (default 1)
 *     --restart FILE  continue from a checkpoint (its system must be the one given): skips the
 *                     equilibration
 * The progress line (md.h's md_progress_line) shows step, time, potential energy, temperature,
 * density and ns/day of the steps since the last line. A run that explodes stops with the
 * error naming the atom (md_cuda_sim_poll). No GPU: prints "SKIP: <reason>" and exits 0. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MD_CUDA_STEP_DECLARED
static int usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [--molecules N | --pdb FILE] [--model tip3p|spce] [--equil PS] [--ps PS] [--npt]\n"
            "       [--temperature K] [--pressure BAR] [--dt PS] [--seed N] [--out PREFIX] [--every PS]\n"
            "       [--restart FILE.chk]\n",
            prog);
    return 2;
}

/* A positive number from argv or an error naming the option. */
static int number(const char *opt, const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    if (end == s || *end || !(*v > 0.0)) {
        fprintf(stderr, "water_md: %s: must be a positive number ('%s')\n", opt, s);
        return 1;
    }
    return 0;
}

/* Run nsteps steps in chunks of `every`, a frame and a progress line after each chunk. */
static int run(md_cuda_sim *g, long long nsteps, int every, md_dcd_writer *dcd, FILE *csv, md_system *frame) {
    long long done = 0;
    while (done < nsteps) {
        const int chunk = (int)(nsteps - done < every ? nsteps - done : every);
        md_sim_report r;
        double w0 = md_wall_seconds(), sec;
        char line[256];
        if (md_cuda_sim_run(g, chunk, MD_CUDA_SIM_ENERGY) != MD_OK || md_cuda_sim_poll(g, &r.energy, &r.step) != MD_OK) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            return 1;
        }
        sec = md_wall_seconds() - w0;
        done += chunk;
        r.time_ps = g->time_ps;
        r.temperature = md_cuda_sim_temperature(g, r.energy.kinetic);
        r.volume = g->box[0] * g->box[1] * g->box[2];
        r.density = md_cuda_sim_density(g);
        md_progress_line(line, sizeof line, &r, r.step + (nsteps - done), g->desc.dt * chunk * 1e-3 * 86400.0 / sec);
        printf("%s\n", line);
        fflush(stdout);
        if (csv && md_energy_csv_row(csv, &r) != MD_OK) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            return 1;
        }
        if (dcd && (md_cuda_sim_get_system(g, frame) != MD_OK || md_dcd_writer_append(dcd, frame->xyzq, frame->box) != MD_OK)) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *pdb = NULL, *out = "water_md", *restart = NULL, *model_name = "tip3p";
    double equil = 10.0, ps = 20.0, temperature = 300.0, pressure = 1.0, dt = 0.002, every_ps = 1.0, v;
    int molecules = 2000, npt = 0, i, rc = 1;
    unsigned long long seed = 1;
    md_water_model model = MD_WATER_TIP3P;
    md_system sys, frame;
    md_topology top;
    md_lj_table lj;
    md_sim_desc d;
    md_cuda_sim g;
    md_dcd_writer dcd;
    md_dcd_write_desc dd;
    FILE *csv = NULL;
    char path[1024];
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(argv[0]);
            return 0;
        }
        if (strcmp(a, "--npt") == 0) {
            npt = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "water_md: missing value after '%s'\n", a);
            return usage(argv[0]);
        }
        if (strcmp(a, "--molecules") == 0) {
            if (number(a, argv[++i], &v)) return 2;
            molecules = (int)v;
        } else if (strcmp(a, "--pdb") == 0) pdb = argv[++i];
        else if (strcmp(a, "--model") == 0) {
            model_name = argv[++i];
            if (strcmp(model_name, "tip3p") == 0) model = MD_WATER_TIP3P;
            else if (strcmp(model_name, "spce") == 0) model = MD_WATER_SPCE;
            else {
                fprintf(stderr, "water_md: --model: tip3p or spce ('%s')\n", model_name);
                return 2;
            }
        } else if (strcmp(a, "--equil") == 0) {
            if (strcmp(argv[i + 1], "0") == 0) equil = 0, i++;
            else if (number(a, argv[++i], &equil)) return 2;
        } else if (strcmp(a, "--ps") == 0) {
            if (number(a, argv[++i], &ps)) return 2;
        } else if (strcmp(a, "--temperature") == 0) {
            if (number(a, argv[++i], &temperature)) return 2;
        } else if (strcmp(a, "--pressure") == 0) {
            if (number(a, argv[++i], &pressure)) return 2;
        } else if (strcmp(a, "--dt") == 0) {
            if (number(a, argv[++i], &dt)) return 2;
        } else if (strcmp(a, "--every") == 0) {
            if (number(a, argv[++i], &every_ps)) return 2;
        } else if (strcmp(a, "--seed") == 0) {
            if (number(a, argv[++i], &v)) return 2;
            seed = (unsigned long long)v;
        } else if (strcmp(a, "--out") == 0) out = argv[++i];
        else if (strcmp(a, "--restart") == 0) restart = argv[++i];
        else {
            fprintf(stderr, "water_md: unknown argument '%s'\n", a);
            return usage(argv[0]);
        }
    }
    if (pdb) {
        if (md_read_pdb(pdb, &sys) != MD_OK || md_topology_water_ions(&sys, model, &top, &lj) != MD_OK ||
            md_topology_apply_charges(&top, sys.xyzq, sys.n) != MD_OK) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            return 1;
        }
    } else {
        md_water_desc wd;
        memset(&wd, 0, sizeof wd);
        wd.model = model;
        wd.molecules = molecules;
        wd.temperature = temperature;
        wd.seed = seed;
        if (md_build_water_box(&sys, &top, &lj, &wd) != MD_OK) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            return 1;
        }
    }
    if (!md_cuda_available()) {
        printf("SKIP: %s\n", md_last_error());
        return 0;
    }
    memset(&d, 0, sizeof d);
    d.dt = dt;
    d.thermostat = MD_THERMOSTAT_LANGEVIN;
    d.temperature = temperature;
    d.pressure = pressure;
    d.barostat_interval = npt ? 25 : 0;
    d.seed = seed;
    d.nb.dispersion_correction = 1;
    d.nb.lj = MD_LJ_TRUNCATE;
    memset(&dcd, 0, sizeof dcd);
    if (md_cuda_sim_create(&g, &sys, &top, &lj, &d, NULL) != MD_OK || md_system_alloc(&frame, sys.n) != MD_OK ||
        md_system_copy_topology(&frame, &sys) != MD_OK) {
        fprintf(stderr, "water_md: %s\n", md_last_error());
        return 1;
    }
    printf("water_md: %d %s molecules (%d atoms) in %.3f x %.3f x %.3f nm, %s at %g K%s, dt %g ps, PME grid %d^3\n",
           sys.n / 3, model_name, sys.n, g.box[0], g.box[1], g.box[2], npt ? "NPT" : "NVT", temperature,
           npt ? "" : "", dt, g.pme.params.grid[0]);
    if (restart) {
        md_checkpoint ck;
        if (md_checkpoint_read(restart, &ck) != MD_OK || md_cuda_sim_restore(&g, &ck) != MD_OK) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            goto done;
        }
        printf("restarted from %s at step %lld (%.3f ps)\n", restart, ck.step, ck.time_ps);
        md_checkpoint_free(&ck);
    } else if (equil > 0) {
        printf("equilibration, %g ps:\n", equil);
        if (run(&g, (long long)(equil / dt + 0.5), (int)(equil / dt / 5 + 0.5) > 0 ? (int)(equil / dt / 5 + 0.5) : 1, NULL,
                NULL, &frame))
            goto done;
    }
    memset(&dd, 0, sizeof dd);
    dd.timestep_ps = every_ps;
    snprintf(path, sizeof path, "%s.dcd", out);
    if (md_dcd_writer_open(&dcd, path, sys.n, &dd) != MD_OK) {
        fprintf(stderr, "water_md: %s\n", md_last_error());
        goto done;
    }
    snprintf(path, sizeof path, "%s.csv", out);
    if (!(csv = fopen(path, "w")) || md_energy_csv_header(csv) != MD_OK) {
        fprintf(stderr, "water_md: cannot write %s\n", path);
        goto done;
    }
    printf("production, %g ps:\n", ps);
    if (run(&g, (long long)(ps / dt + 0.5), (int)(every_ps / dt + 0.5) > 0 ? (int)(every_ps / dt + 0.5) : 1, &dcd, csv,
            &frame))
        goto done;
    {
        md_checkpoint ck;
        snprintf(path, sizeof path, "%s.chk", out);
        if (md_cuda_sim_checkpoint(&g, &ck) != MD_OK || md_checkpoint_write(path, &ck) != MD_OK) {
            fprintf(stderr, "water_md: %s\n", md_last_error());
            goto done;
        }
        md_checkpoint_free(&ck);
    }
    printf("wrote %s.dcd (%d frames), %s.csv, %s.chk\n", out, dcd.nframes, out, out);
    rc = 0;
done:
    if (csv) fclose(csv);
    md_dcd_writer_close(&dcd);
    md_cuda_sim_destroy(&g);
    md_system_free(&frame);
    md_system_free(&sys);
    md_topology_free(&top);
    md_lj_table_free(&lj);
    return rc;
}
#else
int main(void) {
    printf("SKIP: md_cuda.cu.h has no step section in this build (it needs section nb's MD state)\n");
    return 0;
}
#endif
