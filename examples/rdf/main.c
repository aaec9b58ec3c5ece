/* rdf: the radial distribution function of a trajectory, on the CPU.
 *
 *   build/examples/rdf TRAJ OUT.csv [--a SEL] [--b SEL] [--rmax NM] [--bins N] [--top FILE]
 *
 * TRAJ is a .dcd or .xyz trajectory (md_traj_open); every frame is added to one
 * accumulator with the OpenMP rung (md_rdf_accumulate, MD_RDF_CPU_PRIVATE) and the
 * result is written as CSV "r_nm,g,n" (md_rdf_write_csv). Selections (md_select):
 * "all", "name NAME", "type T", "index I-J"; --b defaults to --a (A = B). DCD files
 * hold no atom names, so "name" selections need --top FILE (.psf, .pdb, .pqr or .xyz
 * with the same atoms; md_read_topology). --rmax defaults to 0.49 of the shortest box
 * edge of the first frame, --bins to 200. Every frame needs an orthorhombic box >= 2 rmax.
 * --help prints the options; a bad option exits 2 naming it and its value. See README.md
 * beside this file. */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE                                                                                      \
    "usage: %s TRAJ OUT.csv [--a SEL] [--b SEL] [--rmax NM] [--bins N] [--top FILE]\n"             \
    "  TRAJ      a .dcd or .xyz trajectory; every frame needs an orthorhombic box >= 2 rmax\n"     \
    "  OUT.csv   g(r) as CSV: r_nm,g,n (bin centre, g(r), coordination number n(r))\n"             \
    "  --a SEL   the centre atoms (default all); --b SEL the counted atoms (default: --a)\n"       \
    "            SEL: all | name NAME | type T | index I | index I-J (0-based, inclusive)\n"      \
    "  --rmax NM largest distance in nm (default 0.49 of the first frame's shortest box edge)\n"  \
    "  --bins N  number of bins (default 200)\n"                                                  \
    "  --top F   a .pdb, .pqr or .xyz with the same atoms, for 'name' selections of a DCD\n"

/* A bad command line: what was wrong and the value; exit status 2. */
static int bad(const char *what, const char *value) {
    fprintf(stderr, "error: %s '%s' (try --help)\n", what, value);
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
    const char *traj = NULL, *out = NULL, *sel_a = "all", *sel_b = NULL, *top = NULL;
    double rmax = 0.0;
    int nbins = 200, i, got, *ia = NULL, *ib = NULL, na = 0, nb = 0, frames = 0, rc = 1;
    double v;
    md_traj t;
    md_system frame, topo;
    md_rdf r;
    md_status st;
    memset(&t, 0, sizeof t);
    memset(&frame, 0, sizeof frame);
    memset(&topo, 0, sizeof topo);
    memset(&r, 0, sizeof r);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf(USAGE, argv[0]);
            return 0;
        }
        if ((!strcmp(argv[i], "--a") || !strcmp(argv[i], "--b") || !strcmp(argv[i], "--rmax") ||
             !strcmp(argv[i], "--bins") || !strcmp(argv[i], "--top")) && i + 1 >= argc)
            return bad("missing value after", argv[i]);
        if (strcmp(argv[i], "--a") == 0) sel_a = argv[++i];
        else if (strcmp(argv[i], "--b") == 0) sel_b = argv[++i];
        else if (strcmp(argv[i], "--rmax") == 0) {
            if (!parse_number("--rmax", argv[++i], &rmax)) return 2;
            if (!(rmax > 0.0 && rmax < 1e30)) {
                fprintf(stderr, "error: --rmax: must be a positive number of nm ('%s')\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--bins") == 0) {
            if (!parse_number("--bins", argv[++i], &v)) return 2;
            if (!(v >= 1 && v <= 67108864) || v != (double)(int)v) { /* md_rdf_init takes 0 as the default */
                fprintf(stderr, "error: --bins: must be a whole number from 1 to 2^26 ('%s')\n", argv[i]);
                return 2;
            }
            nbins = (int)v;
        }
        else if (strcmp(argv[i], "--top") == 0) top = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] != '\0') return bad("unknown option", argv[i]);
        else if (!traj) traj = argv[i];
        else if (!out) out = argv[i];
        else return bad("unexpected extra argument", argv[i]);
    }
    if (!traj || !out) {
        fprintf(stderr, "error: missing %s\n" USAGE, traj ? "OUT.csv" : "TRAJ and OUT.csv", argv[0]);
        return 2;
    }
    if (strcmp(out, traj) == 0 || (top && strcmp(out, top) == 0)) return bad("OUT.csv would overwrite an input:", out);
    if ((st = md_traj_open(&t, traj)) != MD_OK) goto fail;
    if ((st = md_traj_next(&t, &frame, &got)) != MD_OK) goto fail;
    if (!got) {
        st = md_set_error(MD_ERR_PARSE, traj, 0, NULL, "the trajectory has no frame");
        goto fail;
    }
    if (top && (st = md_read_topology(top, &topo)) != MD_OK && st != MD_WARN_CELL) goto fail; /* names only */
    if (top && topo.n != frame.n) {
        st = md_set_error(MD_ERR_INVALID_ARGUMENT, top, 0, NULL, "has %d atoms, the trajectory %d", topo.n, frame.n);
        goto fail;
    }
    if ((st = md_select(top ? &topo : &frame, sel_a, &ia, &na)) != MD_OK) goto fail;
    if (sel_b && (st = md_select(top ? &topo : &frame, sel_b, &ib, &nb)) != MD_OK) goto fail;
    if (rmax == 0.0) {
        rmax = frame.box[0];
        for (i = 1; i < 3; i++)
            if (frame.box[i] < rmax) rmax = frame.box[i];
        rmax *= 0.49;
    }
    if ((st = md_rdf_init(&r, rmax, nbins)) != MD_OK) goto fail;
    do {
        if ((st = md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &r, frame.xyzq, frame.n, ia, na, ib ? ib : NULL, nb,
                                    frame.box)) != MD_OK) {
            fprintf(stderr, "%s: frame %d:\n", traj, frames);
            goto fail;
        }
        frames++;
        if ((st = md_traj_next(&t, &frame, &got)) != MD_OK) goto fail;
    } while (got);
    if ((st = md_rdf_write_csv(out, &r)) != MD_OK) goto fail;
    printf("%s: %d frames, |A| = %d, |B| = %d, rmax %.4g nm, %d bins -> %s\n", traj, frames, na, ib ? nb : na,
           rmax, nbins, out);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "error: %s\n", md_last_error());
    md_traj_close(&t);
    md_rdf_free(&r);
    md_free(ia);
    md_free(ib);
    md_system_free(&frame);
    md_system_free(&topo);
    return rc;
}
