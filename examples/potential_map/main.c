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

#define USAGE                                                                                      \
    "usage: %s input.pqr out.dx [--spacing nm] [--margin nm] [--variant NAME]\n"                   \
    "  --spacing  grid spacing in nm (default 0.05)\n"                                             \
    "  --margin   space around the atoms' bounding box in nm (default 0.5)\n"                      \
    "  --variant  md.h DCS rung: cpu_simple, cpu_scatter, cpu_rows, cpu_rows_omp (default)\n"

/* A bad command line: say what was wrong, then how to ask for help; exit status 2. */
static int bad(const char *prog, const char *what, const char *value) {
    fprintf(stderr, "%s: %s '%s' (try --help)\n", prog, what, value);
    return 2;
}

/* A number >= 0 (> 0 when @p positive) for option @p opt, or -1 after saying why. */
static double number(const char *prog, const char *opt, const char *s, int positive) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v) || v < 0.0 || (positive && v == 0.0)) {
        fprintf(stderr, "%s: %s: expected a %s number of nm, got '%s'\n", prog, opt,
                positive ? "positive" : "non-negative", s);
        return -1.0;
    }
    return v;
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
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf(USAGE, argv[0]);
            return 0;
        } else if (strcmp(a, "--spacing") == 0 || strcmp(a, "--margin") == 0 || strcmp(a, "--variant") == 0) {
            const char *v;
            if (i + 1 >= argc) return bad(argv[0], "missing value after", a);
            v = argv[++i];
            if (strcmp(a, "--variant") == 0) vname = v;
            else if (strcmp(a, "--spacing") == 0) {
                if ((spacing = number(argv[0], a, v, 1)) < 0) return 2;
            } else if ((margin = number(argv[0], a, v, 0)) < 0) return 2;
        } else if (a[0] == '-' && a[1] != '\0') {
            return bad(argv[0], "unknown option", a);
        } else if (!in) {
            in = a;
        } else if (!out) {
            out = a;
        } else {
            return bad(argv[0], "unexpected extra argument", a);
        }
    }
    if (!in || !out) {
        fprintf(stderr, "%s: missing %s\n" USAGE, argv[0], in ? "out.dx" : "input.pqr and out.dx", argv[0]);
        return 2;
    }
    for (d = 0; d < MD_DCS_VARIANT_COUNT; d++)
        if (strcmp(md_dcs_variant_name((md_dcs_variant)d), vname) == 0) variant = (md_dcs_variant)d;
    if (variant == MD_DCS_VARIANT_COUNT || md_dcs_variant_is_gpu(variant)) {
        fprintf(stderr, "%s: --variant: '%s' is not a CPU rung (cpu_simple, cpu_scatter, cpu_rows, cpu_rows_omp)\n",
                argv[0], vname);
        return 2;
    }
    if (strcmp(in, out) == 0) return bad(argv[0], "out.dx would overwrite the input", out);

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
