/* dump_nb OUTDIR: nonbonded problems and md.h's answers for reference/check_nb.py.
 *
 * System "mix" (seed 9090): 150 four-atom chains (bond 0.12 nm, random directions; every
 * tenth chain closed into a 4-ring by a bond from its last atom to its first) and 30 free
 * atoms, 630 atoms in a 3.0 x 3.2 x 3.4 nm box, no two atoms of different molecules
 * closer than 0.25 nm, 1-4 pairs at least 0.2 nm apart; 3 LJ types (random per atom),
 * charges uniform in [-0.8, 0.8] made neutral; a few atoms moved out of the box by whole
 * box lengths. LJ table: sigma 0.30 0.34 0.25 nm, epsilon 0.65 0.40 0.20 kJ/mol, and the
 * pair (0, 2) overridden to sigma 0.29, epsilon 0.5. Exclusions from the bonds (1-4
 * scaled by 0.5 / (1/1.2)). For every case (mix.txt lists them) md.h's energies, virial
 * and forces from MD_NB_CPU_ALL_PAIRS and MD_NB_CPU_FIXED.
 * Systems "tip3p" and "spce": md_build_water_box with 330 molecules (seeds 31, 32), and
 * "argon": md_build_lj_fluid (864 atoms, lattice at 86.5 K) with every atom moved by up to
 * 0.03 nm (seed 33) so that it is not a perfect lattice; cases as for mix.
 * Files (this machine's byte order; meta.txt says which):
 *   meta.txt                      endian, then per system: "system NAME n ntypes nbond box..."
 *   NAME_xyzq.f32                 n x 4
 *   NAME_type.i32 NAME_bond.i32   LJ types; 2 nbond bond atoms
 *   NAME_sigma.f64 NAME_eps.f64   per-type sigma, epsilon
 *   NAME_excl_start.i32 NAME_excl.i32 NAME_pair14.i32   md.h's exclusions (1-4 scaled)
 *   NAME_keep_excl_start.i32 NAME_keep_excl.i32         with MD_PAIR14_KEEP
 *   NAME_CASE_RUNG.f64            lj lj_dispersion lj14 coul_real coul14 coul_excl
 *                                 coul_self, virial[9], then 3 n forces
 *   NAME_cases.txt                one line per case: name lj coul cutoff buffer switch
 *                                 epsilon_rf beta dispersion rule (rule: lb, geometric) */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>

static const char *outdir;

static int put(const char *name, const void *p, size_t size, size_t n) {
    char path[1024];
    FILE *f;
    int ok;
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    if (!(f = fopen(path, "wb"))) return 0;
    ok = fwrite(p, size, n, f) == n;
    return (fclose(f) == 0) && ok;
}

typedef struct dcase {
    const char *name;
    md_lj_mode lj;
    md_coul_mode coul;
    double cutoff, buffer, rsw, eps_rf, beta;
    int disp;
    md_lj_combine rule;
} dcase;

static const dcase cases[] = {
    {"shift_ewald", MD_LJ_POTENTIAL_SHIFT, MD_COUL_EWALD, 0.9, 0.1, 0, 0, 0, 1, MD_LJ_COMBINE_LB},
    {"truncate_cutoff", MD_LJ_TRUNCATE, MD_COUL_CUTOFF, 0.9, 0.1, 0, 0, 0, 1, MD_LJ_COMBINE_LB},
    {"switch_rf", MD_LJ_FORCE_SWITCH, MD_COUL_REACTION_FIELD, 0.9, 0.1, 0.75, 78.3, 0, 0, MD_LJ_COMBINE_LB},
    {"shift_rfinf", MD_LJ_POTENTIAL_SHIFT, MD_COUL_REACTION_FIELD, 1.0, 0.05, 0, 0, 0, 0, MD_LJ_COMBINE_GEOMETRIC},
    {"truncate_ewald_beta", MD_LJ_TRUNCATE, MD_COUL_EWALD, 0.9, 0.1, 0, 0, 3.0, 1, MD_LJ_COMBINE_GEOMETRIC},
    {"none_ewald_long", MD_LJ_NONE, MD_COUL_EWALD, 0.95, 0.05, 0, 0, 0, 1, MD_LJ_COMBINE_LB},
    {"switch_none", MD_LJ_FORCE_SWITCH, MD_COUL_NONE, 0.9, 0.1, 0, 0, 0, 1, MD_LJ_COMBINE_LB},
    {"truncate_rf", MD_LJ_TRUNCATE, MD_COUL_REACTION_FIELD, 0.9, 0.1, 0, 78.3, 0, 1, MD_LJ_COMBINE_LB},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static double dist2(const double *a, const md_float4 *b, const double box[3]) {
    double s = 0;
    int k;
    const float c[3] = {b->x, b->y, b->z};
    for (k = 0; k < 3; k++) {
        double d = a[k] - c[k];
        d -= box[k] * rint(d / box[k]);
        s += d * d;
    }
    return s;
}

/* The mix system: positions and charges in sys, types, bonds. */
static int build_mix(md_system *s, int *bond, int *nbond, const double box[3]) {
    enum { NMOL = 150, NFREE = 30 };
    md_rng rng;
    int m, a, k, placed = 0, nb = 0;
    double mean = 0;
    if (md_system_alloc(s, 4 * NMOL + NFREE) != MD_OK) return 0;
    md_rng_seed(&rng, 9090);
    for (m = 0; m < NMOL + NFREE; m++) {
        int size = m < NMOL ? 4 : 1, tries;
        for (tries = 0; tries < 100000; tries++) {
            double p[4][3], u[3] = {0, 0, 0};
            int ok = 1, b;
            for (k = 0; k < 3; k++) p[0][k] = box[k] * md_rng_uniform(&rng);
            for (a = 1; a < size; a++) {
                double v[3], nn, dot;
                do {
                    nn = 0;
                    for (k = 0; k < 3; k++) {
                        v[k] = md_rng_normal(&rng);
                        nn += v[k] * v[k];
                    }
                    nn = sqrt(nn);
                    for (k = 0; k < 3; k++) v[k] /= nn;
                    dot = v[0] * u[0] + v[1] * u[1] + v[2] * u[2];
                } while (a > 1 && dot < -0.2);
                for (k = 0; k < 3; k++) {
                    u[k] = v[k];
                    p[a][k] = p[a - 1][k] + 0.12 * v[k];
                }
            }
            if (size == 4) {
                double d14 = 0;
                for (k = 0; k < 3; k++) d14 += (p[3][k] - p[0][k]) * (p[3][k] - p[0][k]);
                if (d14 < 0.04) ok = 0;
            }
            for (a = 0; a < size && ok; a++)
                for (b = 0; b < placed && ok; b++)
                    if (dist2(p[a], &s->xyzq[b], box) < 0.25 * 0.25) ok = 0;
            if (!ok) continue;
            for (a = 0; a < size; a++) {
                s->xyzq[placed + a].x = (float)p[a][0];
                s->xyzq[placed + a].y = (float)p[a][1];
                s->xyzq[placed + a].z = (float)p[a][2];
                if (a > 0) {
                    bond[2 * nb] = placed + a - 1;
                    bond[2 * nb + 1] = placed + a;
                    nb++;
                }
            }
            if (size == 4 && m % 10 == 0) {
                bond[2 * nb] = placed + 3;
                bond[2 * nb + 1] = placed;
                nb++;
            }
            placed += size;
            break;
        }
        if (tries == 100000) return 0;
    }
    for (a = 0; a < s->n; a++) {
        s->type[a] = (int)(3 * md_rng_uniform(&rng));
        s->xyzq[a].w = (float)(0.8 * (2 * md_rng_uniform(&rng) - 1));
        mean += s->xyzq[a].w;
        s->mass[a] = 12.0f;
    }
    for (a = 0; a < s->n; a++) s->xyzq[a].w = (float)(s->xyzq[a].w - mean / s->n);
    s->xyzq[7].x += (float)box[0];
    s->xyzq[100].y -= (float)box[1];
    s->xyzq[333].z += (float)(2 * box[2]);
    for (k = 0; k < 3; k++) s->box[k] = box[k];
    *nbond = nb;
    return 1;
}

static int dump_system(const char *name, md_system *s, md_topology *t, const double *sigma, const double *eps,
                       int ntypes, int override, FILE *meta) {
    char fname[256];
    FILE *cf;
    int c, r, i;
    md_topology keep;
    md_exclusion_desc kd;
    static double buf[16 + 3 * 4096];
    fprintf(meta, "system %s %d %d %d %.17g %.17g %.17g\n", name, s->n, ntypes, t->nbond, s->box[0], s->box[1],
            s->box[2]);
#define PUT(suffix, p, sz, n)                                                                                  \
    do {                                                                                                       \
        snprintf(fname, sizeof fname, "%s_%s", name, suffix);                                                  \
        if (!put(fname, p, sz, n)) return 0;                                                                   \
    } while (0)
    PUT("xyzq.f32", s->xyzq, sizeof(float), 4 * (size_t)s->n);
    PUT("type.i32", t->lj_type, sizeof(int), (size_t)s->n);
    PUT("bond.i32", t->bond, sizeof(int), 2 * (size_t)t->nbond);
    PUT("sigma.f64", sigma, sizeof(double), (size_t)ntypes);
    PUT("eps.f64", eps, sizeof(double), (size_t)ntypes);
    PUT("excl_start.i32", t->excl_start, sizeof(int), (size_t)s->n + 1);
    PUT("excl.i32", t->excl, sizeof(int), (size_t)t->excl_start[s->n]);
    PUT("pair14.i32", t->pair14, sizeof(int), 2 * (size_t)t->npair14);
    memset(&keep, 0, sizeof keep);
    if (md_topology_alloc(&keep, s->n) != MD_OK || md_topology_set_bonds(&keep, t->nbond, t->bond, NULL, NULL) != MD_OK)
        return 0;
    memset(&kd, 0, sizeof kd);
    kd.pair14 = MD_PAIR14_KEEP;
    if (md_topology_build_exclusions(&keep, &kd) != MD_OK) return 0;
    PUT("keep_excl_start.i32", keep.excl_start, sizeof(int), (size_t)s->n + 1);
    PUT("keep_excl.i32", keep.excl, sizeof(int), (size_t)keep.excl_start[s->n]);
    md_topology_free(&keep);
    snprintf(fname, sizeof fname, "%s/%s_cases.txt", outdir, name);
    if (!(cf = fopen(fname, "w"))) return 0;
    if (s->n > 4096) return 0;
    if (override && ntypes < 3) return 0;
    for (c = 0; c < NCASES; c++) {
        const dcase *dc = &cases[c];
        md_lj_table lj;
        md_nb_params prm;
        md_nb_plan plan;
        memset(&prm, 0, sizeof prm);
        prm.cutoff = dc->cutoff;
        prm.buffer = dc->buffer;
        prm.lj = dc->lj;
        prm.coul = dc->coul;
        prm.switch_radius = dc->rsw;
        prm.epsilon_rf = dc->eps_rf;
        prm.ewald_beta = dc->beta;
        prm.dispersion_correction = dc->disp;
        if (md_lj_table_create(&lj, ntypes, sigma, eps, dc->rule) != MD_OK) return 0;
        if (override && md_lj_table_set_pair(&lj, 0, 2, 0.29, 0.5) != MD_OK) return 0;
        if (md_nb_plan_create(&plan, &prm, s->n) != MD_OK) return 0;
        fprintf(cf, "%s %d %d %.17g %.17g %.17g %.17g %.17g %d %s\n", dc->name, (int)plan.params.lj,
                (int)plan.params.coul, plan.params.cutoff, plan.params.buffer, plan.params.switch_radius,
                plan.params.epsilon_rf, plan.params.ewald_beta, plan.params.dispersion_correction,
                dc->rule == MD_LJ_COMBINE_LB ? "lb" : "geometric");
        for (r = 0; r < 2; r++) {
            md_nb_variant v = r == 0 ? MD_NB_CPU_ALL_PAIRS : MD_NB_CPU_FIXED;
            md_energy e;
            if (md_nb_compute(v, &plan, t, &lj, s->xyzq, s->box, buf + 16, &e) != MD_OK) return 0;
            buf[0] = e.lj;
            buf[1] = e.lj_dispersion;
            buf[2] = e.lj14;
            buf[3] = e.coul_real;
            buf[4] = e.coul14;
            buf[5] = e.coul_excl;
            buf[6] = e.coul_self;
            for (i = 0; i < 9; i++) buf[7 + i] = e.virial[i];
            snprintf(fname, sizeof fname, "%s_%s_%s.f64", name, dc->name, r == 0 ? "all_pairs" : "fixed");
            if (!put(fname, buf, sizeof(double), 16 + 3 * (size_t)s->n)) return 0;
        }
        md_nb_plan_free(&plan);
        md_lj_table_free(&lj);
    }
    fclose(cf);
    return 1;
#undef PUT
}

int main(int argc, char **argv) {
    static int bond[2 * 1000];
    double box[3] = {3.0, 3.2, 3.4}, sigma[3] = {0.30, 0.34, 0.25}, eps[3] = {0.65, 0.40, 0.20};
    md_system s;
    md_topology t;
    md_lj_table wlj;
    md_water_desc wd;
    char path[1024];
    FILE *meta;
    int nbond, one = 1, w;
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    snprintf(path, sizeof path, "%s/meta.txt", outdir);
    if (!(meta = fopen(path, "w"))) goto fail;
    fprintf(meta, "endian %s\n", *(unsigned char *)&one ? "little" : "big");
    if (!build_mix(&s, bond, &nbond, box)) goto fail;
    if (md_topology_from_system(&t, &s, nbond, bond) != MD_OK) goto fail;
    if (!dump_system("mix", &s, &t, sigma, eps, 3, 1, meta)) goto fail;
    md_topology_free(&t);
    md_system_free(&s);
    for (w = 0; w < 2; w++) {
        md_water_params wp;
        double ws[2], we[2];
        memset(&wd, 0, sizeof wd);
        wd.model = w == 0 ? MD_WATER_TIP3P : MD_WATER_SPCE;
        wd.molecules = 330;
        wd.seed = 31 + (uint64_t)w;
        if (md_build_water_box(&s, &t, &wlj, &wd) != MD_OK || md_water_model_params(wd.model, &wp) != MD_OK) goto fail;
        ws[0] = wlj.sigma[0];
        ws[1] = wlj.sigma[1];
        we[0] = wlj.epsilon[0];
        we[1] = wlj.epsilon[1];
        fprintf(meta, "water %s %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", wp.name, wp.d_oh, wp.d_hh,
                wp.angle_hoh, wp.q_o, wp.q_h, wp.sigma_o, wp.epsilon_o, t.water_doh, t.water_dhh);
        if (!dump_system(wp.name, &s, &t, ws, we, 2, 0, meta)) goto fail;
        md_topology_free(&t);
        md_lj_table_free(&wlj);
        md_system_free(&s);
    }
    {
        md_rng rng;
        int i;
        double sig = MD_ARGON_SIGMA, ep = MD_ARGON_EPSILON;
        if (md_build_lj_fluid(&s, &t, &wlj, NULL) != MD_OK) goto fail;
        md_rng_seed(&rng, 33);
        for (i = 0; i < s.n; i++) {
            s.xyzq[i].x += (float)(0.06 * (md_rng_uniform(&rng) - 0.5));
            s.xyzq[i].y += (float)(0.06 * (md_rng_uniform(&rng) - 0.5));
            s.xyzq[i].z += (float)(0.06 * (md_rng_uniform(&rng) - 0.5));
        }
        if (!dump_system("argon", &s, &t, &sig, &ep, 1, 0, meta)) goto fail;
        md_topology_free(&t);
        md_lj_table_free(&wlj);
        md_system_free(&s);
    }
    fclose(meta);
    return 0;
fail:
    fprintf(stderr, "dump_nb: %s\n", md_last_error());
    return 1;
}
