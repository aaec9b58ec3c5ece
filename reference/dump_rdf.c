/* dump_rdf OUTDIR: write an RDF problem and md.h's answers for reference/check_rdf.py.
 *
 * 1500 random atoms (seed 4242) in a 3.1 x 3.3 x 3.5 nm box, a few moved out of it by
 * whole box lengths; rmax 1.5 nm, 60 bins. Cases: A = B (all atoms) and A != B
 * (indices 0..899 against 600..1499, overlapping). Files (this machine's byte order,
 * checked by the script through meta.txt's "endian" line):
 *   meta.txt        n, box, rmax, nbins, na, nb, endian
 *   pos.f32         n x 3 positions (nm)
 *   sel_a.i32 sel_b.i32
 *   same_counts.u64 same_g.f64 same_n.f64    md_rdf_accumulate(MD_RDF_CPU_SIMPLE) + md_rdf_normalize
 *   ab_counts.u64   ab_g.f64   ab_n.f64
 *   ab_sum.f64      sum_pair_density, sum_centers of the A != B accumulator
 *   traj_le.dcd traj_be.dcd   two frames (pos, then pos + 0.1 nm in x; box of frame 2
 *                             0.2 nm longer in z), cells on, little- and big-endian */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>

static int put(const char *dir, const char *name, const void *p, size_t size, size_t n) {
    char path[1024];
    FILE *f;
    int ok;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb"))) return 0;
    ok = fwrite(p, size, n, f) == n;
    return (fclose(f) == 0) && ok;
}

int main(int argc, char **argv) {
    enum { N = 1500, NB = 60, NA2 = 900, NB2 = 900 };
    static float pos[3 * N];
    static int sa[NA2], sb[NB2];
    double box[3] = {3.1, 3.3, 3.5}, g[NB], n[NB], sums[2];
    md_system sys[2];
    md_rdf r;
    md_dcd_write_desc d;
    char path[1024];
    FILE *f;
    int i, one = 1, k;
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    if (md_build_random_charges(&sys[0], N, box, 1.0, 4242) != MD_OK) goto fail;
    sys[0].xyzq[5].x += 3.1f;
    sys[0].xyzq[77].y -= 3.3f;
    sys[0].xyzq[1234].z += 7.0f;
    for (i = 0; i < N; i++) {
        pos[3 * i] = sys[0].xyzq[i].x;
        pos[3 * i + 1] = sys[0].xyzq[i].y;
        pos[3 * i + 2] = sys[0].xyzq[i].z;
    }
    for (i = 0; i < NA2; i++) sa[i] = i;
    for (i = 0; i < NB2; i++) sb[i] = 600 + i;
    snprintf(path, sizeof path, "%s/meta.txt", argv[1]);
    if (!(f = fopen(path, "w"))) goto fail;
    fprintf(f, "n %d\nbox %.17g %.17g %.17g\nrmax 1.5\nnbins %d\nna %d\nnb %d\nendian %s\n", N, box[0], box[1],
            box[2], NB, NA2, NB2, *(unsigned char *)&one ? "little" : "big");
    fclose(f);
    if (!put(argv[1], "pos.f32", pos, sizeof(float), 3 * N) || !put(argv[1], "sel_a.i32", sa, sizeof(int), NA2) ||
        !put(argv[1], "sel_b.i32", sb, sizeof(int), NB2))
        goto fail;
    for (k = 0; k < 2; k++) {
        if (md_rdf_init(&r, 1.5, NB) != MD_OK) goto fail;
        if ((k == 0 ? md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, sys[0].xyzq, N, NULL, N, NULL, 0, box)
                    : md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, sys[0].xyzq, N, sa, NA2, sb, NB2, box)) != MD_OK ||
            md_rdf_normalize(&r, g, n) != MD_OK)
            goto fail;
        if (!put(argv[1], k ? "ab_counts.u64" : "same_counts.u64", r.counts, sizeof(uint64_t), NB) ||
            !put(argv[1], k ? "ab_g.f64" : "same_g.f64", g, sizeof(double), NB) ||
            !put(argv[1], k ? "ab_n.f64" : "same_n.f64", n, sizeof(double), NB))
            goto fail;
        sums[0] = r.sum_pair_density;
        sums[1] = r.sum_centers;
        if (k == 1 && !put(argv[1], "ab_sum.f64", sums, sizeof(double), 2)) goto fail;
        md_rdf_free(&r);
    }
    if (md_system_alloc(&sys[1], N) != MD_OK) goto fail;
    for (i = 0; i < N; i++) {
        sys[1].xyzq[i] = sys[0].xyzq[i];
        sys[1].xyzq[i].x += 0.1f;
    }
    for (k = 0; k < 3; k++) sys[1].box[k] = box[k] + (k == 2 ? 0.2 : 0.0);
    for (k = 0; k < 2; k++) {
        memset(&d, 0, sizeof d);
        d.big_endian = k;
        d.timestep_ps = 0.01;
        snprintf(path, sizeof path, "%s/traj_%s.dcd", argv[1], k ? "be" : "le");
        if (md_dcd_write(path, sys, 2, &d) != MD_OK) goto fail;
    }
    md_system_free(&sys[0]);
    md_system_free(&sys[1]);
    return 0;
fail:
    fprintf(stderr, "dump_rdf: %s\n", md_last_error());
    return 1;
}
