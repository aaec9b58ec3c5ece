/* potential_map: the electrostatic potential of a PQR file on a grid, written
 * as OpenDX (open it in VMD, PyMOL or ChimeraX).
 *
 *   potential_map input.pqr out.dx [--spacing nm] [--margin nm] [--variant NAME]
 *
 * The grid covers the atoms' bounding box plus --margin (default 0.5 nm) on
 * every side with points every --spacing (default 0.05 nm). The map is the
 * direct Coulomb sum V = MD_COULOMB * sum_i q_i / r_i in kJ mol^-1 e^-1 (no
 * periodic images, no solvent screening), computed by md.h rung NAME
 * (default cpu_rows_omp; cpu_simple, cpu_scatter, cpu_rows also work). */
#define MD_IMPLEMENTATION
#include "md.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char *prog) {
    fprintf(stderr,
            "usage: %s input.pqr out.dx [--spacing nm] [--margin nm] [--variant NAME]\n"
            "  --spacing  grid spacing in nm (default 0.05)\n"
            "  --margin   space around the atoms' bounding box in nm (default 0.5)\n"
            "  --variant  md.h DCS rung: cpu_simple, cpu_scatter, cpu_rows, cpu_rows_omp (default)\n",
            prog);
    return 2;
}

/* A positive finite number, or 0 (bad). */
static double positive(const char *s) {
    char *end;
    double v = strtod(s, &end);
    return (*s && !*end && isfinite(v) && v > 0.0) ? v : 0.0;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *vname = "cpu_rows_omp";
    double spacing = 0.05, margin = 0.5, lo[3], hi[3], origin[3], h[3], t0, t;
    md_dcs_variant variant = MD_DCS_VARIANT_COUNT;
    md_system sys;
    md_grid grid;
    int i, d, n[3];
    size_t p, count;
    float vmin, vmax;
    char comment[512];

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--spacing") == 0 && i + 1 < argc) {
            if (!(spacing = positive(argv[++i]))) return usage(argv[0]);
        } else if (strcmp(argv[i], "--margin") == 0 && i + 1 < argc) {
            char *end;
            margin = strtod(argv[++i], &end);
            if (*end || !isfinite(margin) || margin < 0.0) return usage(argv[0]);
        } else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
            vname = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return usage(argv[0]);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return usage(argv[0]);
        }
    }
    if (!in || !out) return usage(argv[0]);
    for (d = 0; d < MD_DCS_VARIANT_COUNT; d++)
        if (strcmp(md_dcs_variant_name((md_dcs_variant)d), vname) == 0) variant = (md_dcs_variant)d;
    if (variant == MD_DCS_VARIANT_COUNT) {
        fprintf(stderr, "%s: unknown variant '%s'\n", argv[0], vname);
        return usage(argv[0]);
    }

    if (md_read_pqr(in, &sys) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    /* grid box = bounding box of the atoms + margin */
    for (d = 0; d < 3; d++) lo[d] = hi[d] = (&sys.xyzq[0].x)[d];
    for (i = 1; i < sys.n; i++)
        for (d = 0; d < 3; d++) {
            double c = (&sys.xyzq[i].x)[d];
            if (c < lo[d]) lo[d] = c;
            if (c > hi[d]) hi[d] = c;
        }
    for (d = 0; d < 3; d++) {
        double extent = hi[d] - lo[d] + 2.0 * margin, cells = ceil(extent / spacing - 1e-9);
        if (cells > 4096.0) {
            fprintf(stderr, "%s: %.0f points along axis %d: increase --spacing\n", argv[0], cells + 1, d);
            md_system_free(&sys);
            return 1;
        }
        n[d] = (int)cells + 1;
        origin[d] = lo[d] - margin;
        h[d] = spacing;
    }
    if (md_grid_alloc(&grid, n[0], n[1], n[2], origin, h) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        md_system_free(&sys);
        return 1;
    }
    t0 = md_wall_seconds();
    if (md_dcs(variant, sys.xyzq, sys.n, &grid) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        md_grid_free(&grid);
        md_system_free(&sys);
        return 1;
    }
    t = md_wall_seconds() - t0;
    count = md_grid_count(&grid);
    vmin = vmax = grid.data[0];
    for (p = 1; p < count; p++) {
        if (grid.data[p] < vmin) vmin = grid.data[p];
        if (grid.data[p] > vmax) vmax = grid.data[p];
    }
    snprintf(comment, sizeof comment,
             "electrostatic potential (kJ/mol/e), direct Coulomb sum of %d charges from %s, md.h %s",
             sys.n, in, md_dcs_variant_name(variant));
    for (p = 0; comment[p]; p++) /* the comment must be one line */
        if (comment[p] == '\n' || comment[p] == '\r') comment[p] = ' ';
    if (md_write_dx(out, &grid, comment) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        md_grid_free(&grid);
        md_system_free(&sys);
        return 1;
    }
    printf("%s: %d atoms, total charge %+.4f e\n", in, sys.n, md_system_charge(&sys));
    printf("grid %d x %d x %d points, spacing %g nm, origin (%.4f, %.4f, %.4f) nm\n", n[0], n[1], n[2],
           spacing, origin[0], origin[1], origin[2]);
    printf("%s: %.3f s, %.3g atom-evals/s; V from %.6g to %.6g kJ/mol/e\n", md_dcs_variant_name(variant), t,
           (double)sys.n * (double)count / t, vmin, vmax);
    printf("wrote %s\n", out);
    md_grid_free(&grid);
    md_system_free(&sys);
    return 0;
}
