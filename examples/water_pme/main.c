/* water_pme: the electrostatic energy and forces of a periodic water (and salt) box read from a
 * PDB file, with Ewald real space + PME, on the CPU.
 *
 *   build/examples/water_pme BOX.pdb [--model tip3p|spce] [--cutoff NM] [--tolerance T]
 *                            [--order P] [--forces OUT.csv] [--ewald]
 *
 * BOX.pdb: HOH (or WAT, SOL, ...) residues of three atoms (O first, then two H), NA and CL ions,
 * and a CRYST1 box (md_read_pdb; md_topology_water_ions assigns the model's charges and the
 * O-H / H-H exclusions). Real space and the exclusion correction come from md_nb_compute
 * (MD_COUL_EWALD, no LJ), the reciprocal part from md_pme_compute with alpha and the grid
 * chosen by md_pme_choose (OpenMM's rule for the tolerance, default 5e-4, and cutoff, default
 * 0.9 nm; the cutoff must not exceed half the box). --forces writes one CSV line per atom:
 * index, name, fx, fy, fz (kJ/mol/nm). --ewald also computes the classic Ewald sum (slow: for
 * boxes of a few thousand atoms) and prints the RMS relative force error of PME against it;
 * the program then exits 1 if that error exceeds the tolerance. Energies in kJ/mol. */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char *prog) {
    fprintf(stderr,
            "usage: %s BOX.pdb [--model tip3p|spce] [--cutoff NM] [--tolerance T] [--order P] [--forces OUT.csv] "
            "[--ewald]\n",
            prog);
    return 2;
}

/* A whole-string number for option @p opt: 1, or 0 after printing why. */
static int parse_number(const char *opt, const char *text, double *v) {
    char *end;
    *v = strtod(text, &end);
    if (end == text || *end != '\0') {
        fprintf(stderr, "error: %s: not a number ('%s')\n", opt, text);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *pdb = NULL, *forces_path = NULL;
    md_water_model model = MD_WATER_TIP3P;
    double cutoff = 0.9, tol = 5e-4, v, *f = NULL, *fe = NULL, t0, t_nb, t_pme;
    int order = 5, ewald = 0, i, rc = 1;
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_nb_params np;
    md_nb_plan nb;
    md_pme_params pp;
    md_pme_plan pme;
    md_energy e;
    memset(&s, 0, sizeof s), memset(&t, 0, sizeof t), memset(&lj, 0, sizeof lj);
    memset(&nb, 0, sizeof nb), memset(&pme, 0, sizeof pme);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "tip3p") == 0) model = MD_WATER_TIP3P;
            else if (strcmp(argv[i], "spce") == 0) model = MD_WATER_SPCE;
            else {
                fprintf(stderr, "error: --model: tip3p or spce, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--cutoff") == 0 && i + 1 < argc) {
            if (!parse_number("--cutoff", argv[++i], &cutoff)) return 2;
        } else if (strcmp(argv[i], "--tolerance") == 0 && i + 1 < argc) {
            if (!parse_number("--tolerance", argv[++i], &tol)) return 2;
        } else if (strcmp(argv[i], "--order") == 0 && i + 1 < argc) {
            if (!parse_number("--order", argv[++i], &v)) return 2;
            if (v != (int)v) {
                fprintf(stderr, "error: --order: must be a whole number (got %s)\n", argv[i]);
                return 2;
            }
            order = (int)v;
        } else if (strcmp(argv[i], "--forces") == 0 && i + 1 < argc) {
            forces_path = argv[++i];
        } else if (strcmp(argv[i], "--ewald") == 0) {
            ewald = 1;
        } else if (argv[i][0] == '-' || pdb) {
            return usage(argv[0]);
        } else {
            pdb = argv[i];
        }
    }
    if (!pdb) return usage(argv[0]);
    if (md_read_pdb(pdb, &s) != MD_OK || md_topology_water_ions(&s, model, &t, &lj) != MD_OK ||
        md_topology_apply_charges(&t, s.xyzq, s.n) != MD_OK)
        goto fail;
    if (s.box[0] == 0.0) {
        md_set_error(MD_ERR_RANGE, pdb, 0, "CRYST1", "the file has no box: PME needs a periodic box");
        goto fail;
    }
    memset(&np, 0, sizeof np);
    np.cutoff = cutoff;
    np.lj = MD_LJ_NONE;
    np.buffer = -1.0; /* one evaluation: no Verlet buffer */
    np.ewald_tolerance = tol;
    memset(&pp, 0, sizeof pp);
    pp.cutoff = cutoff;
    pp.tolerance = tol;
    pp.order = order;
    if (md_nb_plan_create(&nb, &np, s.n) != MD_OK || md_pme_plan_create(&pme, &pp, s.box, s.n) != MD_OK) goto fail;
    if (!(f = (double *)malloc(3 * (size_t)s.n * sizeof(double)))) {
        md_set_error(MD_ERR_OUT_OF_MEMORY, "water_pme", 0, "n", "out of memory");
        goto fail;
    }
    t0 = md_wall_seconds();
    if (md_nb_compute(MD_NB_CPU_CELL_LIST, &nb, &t, &lj, s.xyzq, s.box, f, &e) != MD_OK) goto fail;
    t_nb = md_wall_seconds() - t0;
    t0 = md_wall_seconds();
    if (md_pme_compute(&pme, s.xyzq, s.n, s.box, f, &e) != MD_OK) goto fail;
    t_pme = md_wall_seconds() - t0;
    printf("%s: %d atoms (%d %s waters, %d ions), box %.4f x %.4f x %.4f nm, net charge %+.4f e\n", pdb, s.n,
           t.nwater, model == MD_WATER_SPCE ? "SPC/E" : "TIP3P", s.n - 3 * t.nwater, s.box[0], s.box[1], s.box[2],
           md_system_charge(&s));
    printf("PME: alpha %.6f / nm, grid %d x %d x %d, order %d, cutoff %.3f nm (tolerance %g)\n", pme.params.alpha,
           pme.params.grid[0], pme.params.grid[1], pme.params.grid[2], pme.params.order, cutoff, tol);
    printf("real space      %16.6f kJ/mol\n", e.coul_real);
    printf("exclusions      %16.6f kJ/mol\n", e.coul_excl);
    printf("self            %16.6f kJ/mol\n", e.coul_self);
    printf("reciprocal      %16.6f kJ/mol\n", e.coul_recip);
    printf("electrostatic   %16.6f kJ/mol  (%.4f kJ/mol per molecule or ion)\n",
           e.coul_real + e.coul_excl + e.coul_self + e.coul_recip,
           (e.coul_real + e.coul_excl + e.coul_self + e.coul_recip) / (t.nwater + (s.n - 3 * t.nwater)));
    printf("virial trace    %16.6f kJ/mol\n", e.virial[0] + e.virial[4] + e.virial[8]);
    printf("time: real space %.3f ms, PME %.3f ms\n", 1e3 * t_nb, 1e3 * t_pme);
    if (forces_path) {
        FILE *out = fopen(forces_path, "w");
        if (!out) {
            md_set_error(MD_ERR_IO, forces_path, 0, NULL, "cannot open for writing");
            goto fail;
        }
        fprintf(out, "index,name,fx,fy,fz\n");
        for (i = 0; i < s.n; i++)
            fprintf(out, "%d,%s,%.9g,%.9g,%.9g\n", i, s.name[i].s, f[3 * i], f[3 * i + 1], f[3 * i + 2]);
        if (fclose(out) != 0) {
            md_set_error(MD_ERR_IO, forces_path, 0, NULL, "write failed");
            goto fail;
        }
        printf("wrote %s\n", forces_path);
    }
    rc = 0;
    if (ewald) {
        md_ewald_params ep;
        md_energy ee;
        double num = 0.0, den = 0.0, err;
        memset(&ep, 0, sizeof ep);
        ep.rc = cutoff;
        ep.alpha = pme.params.alpha;
        if (!(fe = (double *)malloc(3 * (size_t)s.n * sizeof(double)))) goto fail;
        t0 = md_wall_seconds();
        if (md_ewald_compute(&ep, &t, s.xyzq, s.n, s.box, fe, &ee) != MD_OK) goto fail;
        for (i = 0; i < 3 * s.n; i++) {
            num += (f[i] - fe[i]) * (f[i] - fe[i]);
            den += fe[i] * fe[i];
        }
        err = sqrt(num / den);
        printf("Ewald (%.3f s): reciprocal %.6f kJ/mol, electrostatic %.6f kJ/mol; PME's RMS relative force error %.3g "
               "(tolerance %g)\n",
               md_wall_seconds() - t0, ee.coul_recip, ee.coul_real + ee.coul_excl + ee.coul_self + ee.coul_recip, err, tol);
        if (!(err <= tol)) {
            fprintf(stderr, "error: PME's force error %.3g exceeds the tolerance %g\n", err, tol);
            rc = 1;
        }
    }
    goto done;
fail:
    fprintf(stderr, "error: %s\n", md_last_error());
    rc = 1;
done:
    free(f);
    free(fe);
    md_pme_plan_free(&pme);
    md_nb_plan_free(&nb);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return rc;
}
