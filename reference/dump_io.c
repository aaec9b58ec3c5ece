/* dump_io: read a PQR, PDB, XYZ or PSF file with md.h and print the parsed atoms, for
 * reference/check_io.py. Usage: dump_io pqr|pdb|xyz|psf FILE
 * Output: "n N", "status ok|warn" (warn: MD_WARN_CELL), "box bx by bz",
 * "cell a b c alpha beta gamma", then one line per atom
 * "atom name resname resid x y z q r mass type chain icode altloc element segid type_name"
 * (numbers %.9g; an empty name or a 0 character is "-"), then one line "bond i j" per bond.
 * On a read error: "error STATUS MESSAGE" and exit status 2. */
#define MD_IMPLEMENTATION
#include "md.h"

static const char *or_dash(const char *s) { return s[0] ? s : "-"; }
static char ch_or_dash(char c) { return c ? c : '-'; }

int main(int argc, char **argv) {
    md_system s;
    md_status st;
    int i;
    if (argc != 3) {
        fprintf(stderr, "usage: %s pqr|pdb|xyz|psf FILE\n", argv[0]);
        return 1;
    }
    if (strcmp(argv[1], "pqr") == 0)
        st = md_read_pqr(argv[2], &s);
    else if (strcmp(argv[1], "pdb") == 0)
        st = md_read_pdb(argv[2], &s);
    else if (strcmp(argv[1], "xyz") == 0)
        st = md_read_xyz(argv[2], &s);
    else if (strcmp(argv[1], "psf") == 0)
        st = md_read_psf(argv[2], &s);
    else {
        fprintf(stderr, "unknown format %s\n", argv[1]);
        return 1;
    }
    if (st != MD_OK && st != MD_WARN_CELL) {
        printf("error %d %s\n", (int)st, md_last_error());
        return 2;
    }
    printf("n %d\nstatus %s\nbox %.9g %.9g %.9g\n", s.n, st == MD_OK ? "ok" : "warn", s.box[0], s.box[1], s.box[2]);
    printf("cell %.9g %.9g %.9g %.9g %.9g %.9g\n", s.cell[0], s.cell[1], s.cell[2], s.cell[3], s.cell[4], s.cell[5]);
    for (i = 0; i < s.n; i++)
        printf("atom %s %s %d %.9g %.9g %.9g %.9g %.9g %.9g %d %c %c %c %s %s %s\n", or_dash(s.name[i].s),
               or_dash(s.resname[i].s), s.resid[i], s.xyzq[i].x, s.xyzq[i].y, s.xyzq[i].z, s.xyzq[i].w,
               s.radius[i], s.mass[i], s.type[i], ch_or_dash(s.chain[i]), ch_or_dash(s.icode[i]),
               ch_or_dash(s.altloc[i]), or_dash(s.element[i].s), or_dash(s.segid[i].s), or_dash(s.type_name[i].s));
    for (i = 0; i < s.nbond; i++) printf("bond %d %d\n", s.bond[2 * i], s.bond[2 * i + 1]);
    md_system_free(&s);
    return 0;
}
