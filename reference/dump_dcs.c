/* dump_dcs: write a random system, its grid and the output of every CPU rung of
 * md.h's direct Coulomb sum to a directory, for reference/check_dcs.py.
 *
 *   build/reference/dump_dcs DIR
 *
 * Files in DIR:
 *   meta.txt        "nx ny nz", "ox oy oz", "hx hy hz" (%.17g), "natoms", then one
 *                   line per rung: its name
 *   xyzq.f32        natoms * 4 float32 (x, y, z, q), little-endian as in memory
 *   <rung>.f32      nx * ny * nz float32, x fastest (md_grid::data)
 * The system: 300 random charges (seed 2026, md_build_random_charges) in a
 * 2.0 x 1.6 x 1.8 nm box shifted by (-0.4, 0.1, -0.2) nm, so some atoms lie
 * outside the 17 x 13 x 11 grid (origin (-0.3, 0.2, -0.1), spacing 0.11, 0.09,
 * 0.13 nm); atom 0 is moved onto grid point (3, 4, 5) to exercise MD_DCS_MIN_R2. */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>
#include <string.h>

static int write_f32(const char *dir, const char *name, const void *p, size_t count) {
    char path[1024];
    FILE *f;
    size_t w;
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    if (!(f = fopen(path, "wb"))) {
        fprintf(stderr, "dump_dcs: cannot write %s\n", path);
        return 0;
    }
    w = fwrite(p, sizeof(float), count, f);
    if (fclose(f) != 0 || w != count) {
        fprintf(stderr, "dump_dcs: short write to %s\n", path);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    const double box[3] = {2.0, 1.6, 1.8}, shift[3] = {-0.4, 0.1, -0.2};
    const double origin[3] = {-0.3, 0.2, -0.1}, h[3] = {0.11, 0.09, 0.13};
    const md_dcs_variant rungs[] = {MD_DCS_CPU_SIMPLE, MD_DCS_CPU_SCATTER, MD_DCS_CPU_ROWS,
                                    MD_DCS_CPU_ROWS_OMP};
    const int nrungs = (int)(sizeof rungs / sizeof rungs[0]);
    md_system sys;
    md_grid grid;
    char path[1024];
    FILE *meta;
    int i, r;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    if (md_build_random_charges(&sys, 300, box, 1.0, 2026) != MD_OK ||
        md_grid_alloc(&grid, 17, 13, 11, origin, h) != MD_OK) {
        fprintf(stderr, "dump_dcs: %s\n", md_last_error());
        return 1;
    }
    for (i = 0; i < sys.n; i++) {
        sys.xyzq[i].x = (float)(sys.xyzq[i].x + shift[0]);
        sys.xyzq[i].y = (float)(sys.xyzq[i].y + shift[1]);
        sys.xyzq[i].z = (float)(sys.xyzq[i].z + shift[2]);
    }
    sys.xyzq[0].x = (float)(origin[0] + 3 * h[0]);
    sys.xyzq[0].y = (float)(origin[1] + 4 * h[1]);
    sys.xyzq[0].z = (float)(origin[2] + 5 * h[2]);
    snprintf(path, sizeof path, "%s/meta.txt", argv[1]);
    if (!(meta = fopen(path, "w"))) {
        fprintf(stderr, "dump_dcs: cannot write %s\n", path);
        return 1;
    }
    fprintf(meta, "%d %d %d\n%.17g %.17g %.17g\n%.17g %.17g %.17g\n%d\n", grid.n[0], grid.n[1],
            grid.n[2], origin[0], origin[1], origin[2], h[0], h[1], h[2], sys.n);
    if (!write_f32(argv[1], "xyzq", sys.xyzq, 4 * (size_t)sys.n)) return 1;
    for (r = 0; r < nrungs; r++) {
        size_t p;
        for (p = 0; p < md_grid_count(&grid); p++) grid.data[p] = NAN; /* poison */
        if (md_dcs(rungs[r], sys.xyzq, sys.n, &grid) != MD_OK) {
            fprintf(stderr, "dump_dcs: %s: %s\n", md_dcs_variant_name(rungs[r]), md_last_error());
            return 1;
        }
        if (!write_f32(argv[1], md_dcs_variant_name(rungs[r]), grid.data, md_grid_count(&grid))) return 1;
        fprintf(meta, "%s\n", md_dcs_variant_name(rungs[r]));
    }
    if (fclose(meta) != 0) return 1;
    md_grid_free(&grid);
    md_system_free(&sys);
    return 0;
}
