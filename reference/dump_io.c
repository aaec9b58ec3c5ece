/* dump_io: read a PQR, PDB or XYZ file with md.h and print the parsed atoms, for
 * reference/check_io.py. Usage: dump_io pqr|pdb|xyz FILE
 * Output: "n N", "box bx by bz", then one line per atom
 * "atom name resname resid x y z q r mass type" (numbers %.9g; an empty name is "-").
 * On a read error: "error STATUS MESSAGE" and exit status 2. */
#define MD_IMPLEMENTATION
#include "md.h"

static const char *or_dash(const char *s) { return s[0] ? s : "-"; }

int main(int argc, char **argv) {
    md_system s;
    md_status st;
    int i;
    if (argc != 3) {
        fprintf(stderr, "usage: %s pqr|pdb|xyz FILE\n", argv[0]);
        return 1;
    }
    if (strcmp(argv[1], "pqr") == 0)
        st = md_read_pqr(argv[2], &s);
    else if (strcmp(argv[1], "pdb") == 0)
        st = md_read_pdb(argv[2], &s);
    else if (strcmp(argv[1], "xyz") == 0)
        st = md_read_xyz(argv[2], &s);
    else {
        fprintf(stderr, "unknown format %s\n", argv[1]);
        return 1;
    }
    if (st != MD_OK) {
        printf("error %d %s\n", (int)st, md_last_error());
        return 2;
    }
    printf("n %d\nbox %.9g %.9g %.9g\n", s.n, s.box[0], s.box[1], s.box[2]);
    for (i = 0; i < s.n; i++)
        printf("atom %s %s %d %.9g %.9g %.9g %.9g %.9g %.9g %d\n", or_dash(s.name[i].s),
               or_dash(s.resname[i].s), s.resid[i], s.xyzq[i].x, s.xyzq[i].y, s.xyzq[i].z, s.xyzq[i].w,
               s.radius[i], s.mass[i], s.type[i]);
    md_system_free(&s);
    return 0;
}
