/* dump_step OUTDIR: SETTLE and bonded problems and md.h's answers for reference/check_step.py.
 *
 * "settle" (seed 6060): 150 TIP3P waters at the model's geometry with random orientations in a
 * 3 nm cube (the reference positions), every coordinate then moved by up to 0.01 nm (the
 * unconstrained positions); md.h's md_constraints_apply result; random velocities (standard
 * normal, nm/ps) and md.h's md_constraints_apply_velocities result at the reference positions.
 * "bonded" (seed 6061): 40 chains of 4 atoms (3 bonds, 2 angles each), bond lengths 0.09 to
 * 0.16 nm, wrapped atom by atom into a 2.0 x 2.2 x 2.4 nm box (chains straddle its edges);
 * r0 0.10 to 0.15 nm, k 1e5 to 4e5, theta0 1.6 to 2.2 rad, k 200 to 600; md.h's
 * md_bonded_compute energy, virial and forces.
 * Files (this machine's byte order; meta.txt says which):
 *   meta.txt               endian; "settle NW mass_o mass_h doh dhh"; "bonded N NBOND NANGLE bx by bz"
 *   settle_ref.f64 settle_unc.f64 settle_out.f64    9 NW each (O, H1, H2 per water)
 *   settle_v.f64 settle_vout.f64                    9 NW each
 *   bonded_x.f64 (3 N)  bonded_bond.i32 (2 NBOND)  bonded_bondp.f64 (r0, k per bond)
 *   bonded_angle.i32 (3 NANGLE)  bonded_anglep.f64 (theta0, k per angle)
 *   bonded_out.f64         energy, virial[9], 3 N forces */
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

static double urand(md_rng *r, double lo, double hi) { return lo + (hi - lo) * md_rng_uniform(r); }

static void unit(md_rng *r, double u[3]) {
    double n;
    int k;
    do {
        n = 0;
        for (k = 0; k < 3; k++) {
            u[k] = md_rng_normal(r);
            n += u[k] * u[k];
        }
    } while (n < 1e-6);
    for (k = 0; k < 3; k++) u[k] /= sqrt(n);
}

int main(int argc, char **argv) {
    const int nw = 150, nmol = 40, n = 4 * nmol;
    md_water_params p;
    md_topology t;
    md_constraints c;
    md_bonded b;
    md_energy e;
    md_rng r;
    double ref[9 * 150], unc[9 * 150], out[9 * 150], v[9 * 150], vout[9 * 150];
    double x[3 * 160], box[3] = {2.0, 2.2, 2.4}, res[10 + 3 * 160], bp[2 * 120], ap[2 * 80];
    int bond[2 * 120], angle[3 * 80], k, i, a, one = 1;
    double r0[120], kb[120], th[80], ka[80];
    char path[1024];
    FILE *meta;
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    snprintf(path, sizeof path, "%s/meta.txt", outdir);
    if (!(meta = fopen(path, "w"))) return 1;
    fprintf(meta, "endian %s\n", *(const char *)&one ? "little" : "big");
    /* settle */
    md_water_model_params(MD_WATER_TIP3P, &p);
    md_rng_seed(&r, 6060);
    if (md_topology_alloc(&t, 3 * nw) != MD_OK || !(t.water = (int *)malloc(3 * nw * sizeof(int)))) return 1;
    t.nwater = nw;
    t.water_doh = p.d_oh;
    t.water_dhh = p.d_hh;
    for (k = 0; k < nw; k++) {
        double o[3], u[3], w[3], h = sqrt(p.d_oh * p.d_oh - 0.25 * p.d_hh * p.d_hh), nn;
        for (a = 0; a < 3; a++) o[a] = urand(&r, 0, 3);
        unit(&r, u);
        do {
            double q[3];
            unit(&r, q);
            w[0] = q[1] * u[2] - q[2] * u[1];
            w[1] = q[2] * u[0] - q[0] * u[2];
            w[2] = q[0] * u[1] - q[1] * u[0];
            nn = sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
        } while (nn < 1e-3);
        for (a = 0; a < 3; a++) {
            w[a] /= nn;
            ref[9 * k + a] = o[a];
            ref[9 * k + 3 + a] = o[a] + h * u[a] + 0.5 * p.d_hh * w[a];
            ref[9 * k + 6 + a] = o[a] + h * u[a] - 0.5 * p.d_hh * w[a];
        }
        for (i = 0; i < 3; i++) {
            t.water[3 * k + i] = 3 * k + i;
            t.mass[3 * k + i] = (float)(i == 0 ? p.mass_o : p.mass_h);
        }
    }
    for (i = 0; i < 9 * nw; i++) {
        unc[i] = out[i] = ref[i] + urand(&r, -0.01, 0.01);
        v[i] = vout[i] = md_rng_normal(&r);
    }
    if (md_constraints_create(&c, &t, NULL) != MD_OK || md_constraints_apply(&c, ref, out, NULL) != MD_OK ||
        md_constraints_apply_velocities(&c, ref, vout, NULL) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    fprintf(meta, "settle %d %.17g %.17g %.17g %.17g\n", nw, c.mass_o, c.mass_h, c.doh, c.dhh);
    if (!put("settle_ref.f64", ref, 8, 9 * nw) || !put("settle_unc.f64", unc, 8, 9 * nw) ||
        !put("settle_out.f64", out, 8, 9 * nw) || !put("settle_v.f64", v, 8, 9 * nw) || !put("settle_vout.f64", vout, 8, 9 * nw))
        return 1;
    md_constraints_free(&c);
    md_topology_free(&t);
    /* bonded */
    md_rng_seed(&r, 6061);
    for (k = 0; k < nmol; k++) {
        double q[3], u[3];
        for (a = 0; a < 3; a++) q[a] = urand(&r, 0, box[a]);
        for (i = 0; i < 4; i++) {
            if (i > 0) {
                double len = urand(&r, 0.09, 0.16);
                unit(&r, u);
                for (a = 0; a < 3; a++) q[a] += len * u[a];
            }
            for (a = 0; a < 3; a++) x[3 * (4 * k + i) + a] = q[a] - box[a] * floor(q[a] / box[a]);
        }
        for (i = 0; i < 3; i++) {
            bond[2 * (3 * k + i)] = 4 * k + i;
            bond[2 * (3 * k + i) + 1] = 4 * k + i + 1;
            r0[3 * k + i] = urand(&r, 0.1, 0.15);
            kb[3 * k + i] = urand(&r, 1e5, 4e5);
        }
        for (i = 0; i < 2; i++) {
            for (a = 0; a < 3; a++) angle[3 * (2 * k + i) + a] = 4 * k + i + a;
            th[2 * k + i] = urand(&r, 1.6, 2.2);
            ka[2 * k + i] = urand(&r, 200, 600);
        }
    }
    memset(&b, 0, sizeof b);
    b.nbond = 3 * nmol, b.bond = bond, b.bond_r0 = r0, b.bond_k = kb;
    b.nangle = 2 * nmol, b.angle = angle, b.angle_theta0 = th, b.angle_k = ka;
    memset(&e, 0, sizeof e);
    memset(res, 0, sizeof res);
    if (md_bonded_compute(&b, x, n, box, res + 10, &e) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    res[0] = e.bonded;
    for (a = 0; a < 9; a++) res[1 + a] = e.virial[a];
    for (k = 0; k < b.nbond; k++) {
        bp[2 * k] = r0[k];
        bp[2 * k + 1] = kb[k];
    }
    for (k = 0; k < b.nangle; k++) {
        ap[2 * k] = th[k];
        ap[2 * k + 1] = ka[k];
    }
    fprintf(meta, "bonded %d %d %d %.17g %.17g %.17g\n", n, b.nbond, b.nangle, box[0], box[1], box[2]);
    if (!put("bonded_x.f64", x, 8, 3 * n) || !put("bonded_bond.i32", bond, 4, 2 * b.nbond) ||
        !put("bonded_bondp.f64", bp, 8, 2 * b.nbond) || !put("bonded_angle.i32", angle, 4, 3 * b.nangle) ||
        !put("bonded_anglep.f64", ap, 8, 2 * b.nangle) || !put("bonded_out.f64", res, 8, 10 + 3 * n))
        return 1;
    return fclose(meta) != 0;
}
