/* Fixtures shared by tests/test_step.c and tests/gpu_step.cu: a force-field table for methanol
 * (CHARMM-like values in kJ/mol) and TIP3P, and a PSF of methanols and waters on a lattice. */
#ifndef STEP_FIXTURES_H
#define STEP_FIXTURES_H
#include "md.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ff_text =
    "# methanol (CHARMM-like values in kJ/mol) and TIP3P\n"
    "lj CT3 0.3671 0.3347\n"
    "lj HA3 0.2352 0.1004\n"
    "lj OH1 0.3154 0.6368   # hydroxyl oxygen\n"
    "lj H   0.0400 0.1925\n"
    "lj OT  0.315061 0.636386\n"
    "lj HT  0 0\n"
    "\n"
    "bond CT3 HA3 0.111 269449.6\n"
    "bond OH1 CT3 0.142 358150.4\n"
    "bond OH1 H   0.096 456056.0\n"
    "bond OT HT 0.09572 462750.4\n"
    "angle HA3 CT3 HA3 108.4 297.064\n"
    "angle OH1 CT3 HA3 108.89 384.0912\n"
    "angle CT3 OH1 H 106.0 481.16\n"
    "angle HT OT HT 104.52 836.8\n"
    "water OT HT\n";

/* A PSF of nmeoh methanols (C, 3 H on C, O, H) and nwat TIP3P waters, atoms on a lattice
 * with spacing `a` nm. Returns a malloc'd string and the positions in pos (3 n doubles). */
static inline char *make_psf(int nmeoh, int nwat, double a, double **pos, int *natoms) {
    size_t cap = 1 << 20, len = 0;
    char *s = (char *)malloc(cap);
    int n = 6 * nmeoh + 3 * nwat, i, m, nb = 5 * nmeoh + 2 * nwat, k = 0, side;
    double *x = (double *)malloc(3 * (size_t)n * sizeof(double));
    if (!s || !x) return NULL;
    side = (int)ceil(cbrt((double)(nmeoh + nwat)));
#define P(...) len += (size_t)snprintf(s + len, cap - len, __VA_ARGS__)
    P("PSF EXT\n\n         1 !NTITLE\n* methanol and water\n\n%10d !NATOM\n", n);
    for (m = 0; m < nmeoh + nwat; m++) {
        double o[3] = {(m % side + 0.5) * a, (m / side % side + 0.5) * a, (m / side / side + 0.5) * a};
        int base = m < nmeoh ? 6 * m : 6 * nmeoh + 3 * (m - nmeoh);
        if (m < nmeoh) { /* C at o, O along +x, HO above O, three H around C */
            static const char *nm[6] = {"C1", "H11", "H12", "H13", "O1", "HO1"};
            static const char *ty[6] = {"CT3", "HA3", "HA3", "HA3", "OH1", "H"};
            static const double q[6] = {-0.04, 0.09, 0.09, 0.09, -0.66, 0.43}, ms[6] = {12.011, 1.008, 1.008, 1.008, 15.999, 1.008};
            static const double d[6][3] = {{0, 0, 0},       {-0.037, 0.1046, 0}, {-0.037, -0.0523, 0.0906},
                                           {-0.037, -0.0523, -0.0906}, {0.142, 0, 0}, {0.1685, 0.0923, 0}};
            for (i = 0; i < 6; i++) {
                P("%10d %-8s %-8d %-8s %-8s %-6s %14.6f %14.4f %11d\n", base + i + 1, "MEOH", m + 1, "MEOH", nm[i], ty[i],
                  q[i], ms[i], 0);
                for (k = 0; k < 3; k++) x[3 * (base + i) + k] = o[k] + d[i][k];
            }
        } else {
            static const char *nm[3] = {"OH2", "H1", "H2"};
            static const char *ty[3] = {"OT", "HT", "HT"};
            static const double q[3] = {-0.834, 0.417, 0.417}, ms[3] = {15.9994, 1.008, 1.008};
            static const double d[3][3] = {{0, 0, 0}, {0.09572, 0, 0}, {-0.02399872, 0.09266272, 0}};
            for (i = 0; i < 3; i++) {
                P("%10d %-8s %-8d %-8s %-8s %-6s %14.6f %14.4f %11d\n", base + i + 1, "SOLV", m + 1, "TIP3", nm[i], ty[i],
                  q[i], ms[i], 0);
                for (k = 0; k < 3; k++) x[3 * (base + i) + k] = o[k] + d[i][k];
            }
        }
    }
    P("\n%10d !NBOND: bonds\n", nb);
    k = 0;
    for (m = 0; m < nmeoh; m++) {
        int b = 6 * m + 1, pairs[10] = {b, b + 1, b, b + 2, b, b + 3, b, b + 4, b + 4, b + 5};
        for (i = 0; i < 10; i++) {
            P("%10d", pairs[i]);
            if (++k % 8 == 0) P("\n");
        }
    }
    for (m = 0; m < nwat; m++) {
        int b = 6 * nmeoh + 3 * m + 1, pairs[4] = {b, b + 1, b, b + 2};
        for (i = 0; i < 4; i++) {
            P("%10d", pairs[i]);
            if (++k % 8 == 0) P("\n");
        }
    }
    P("\n\n%10d !NTHETA: angles\n\n", 0);
#undef P
    *pos = x;
    *natoms = n;
    return s;
}

/* make_psf's system read back with its lattice positions in a cubic box of edge `edge`, and its
 * topology and LJ table from ff_text (rigid waters; SHAKE on the bonds to hydrogen with hbonds). */
static inline md_status psf_system(int nmeoh, int nwat, double a, double edge, int hbonds, md_system *sys,
                                   md_topology *t, md_lj_table *lj) {
    md_ff_table tab;
    md_psf_desc pd;
    md_status st;
    double *pos = NULL;
    int n = 0, i;
    char *psf = make_psf(nmeoh, nwat, a, &pos, &n);
    if (!psf) return MD_ERR_OUT_OF_MEMORY;
    if ((st = md_read_ff_table_mem(ff_text, strlen(ff_text), "ff.txt", &tab)) == MD_OK) {
        if ((st = md_read_psf_mem(psf, strlen(psf), "meoh.psf", sys)) == MD_OK) {
            for (i = 0; i < n; i++) {
                sys->xyzq[i].x = (float)pos[3 * i];
                sys->xyzq[i].y = (float)pos[3 * i + 1];
                sys->xyzq[i].z = (float)pos[3 * i + 2];
            }
            sys->box[0] = sys->box[1] = sys->box[2] = edge;
            memset(&pd, 0, sizeof pd);
            pd.constrain_hbonds = hbonds;
            if ((st = md_topology_from_psf(sys, &tab, &pd, t, lj)) != MD_OK) md_system_free(sys);
        }
        md_ff_table_free(&tab);
    }
    free(psf);
    free(pos);
    return st;
}

#endif /* STEP_FIXTURES_H */
