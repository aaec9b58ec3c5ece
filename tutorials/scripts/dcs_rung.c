/* dcs_rung: run one md.h DCS rung once on the default system of the Coulomb
 * chapters (chapters/ladder.h), for profilers such as cachegrind.
 *
 *   dcs_rung VARIANT NATOMS N      (VARIANT: a CPU rung name, or "none": setup only)
 *
 * Prints the rung, the size and V at grid point 0 (so the work is not optimised away). */
#define MD_IMPLEMENTATION
#include "md.h"
#include "ladder.h"

int main(int argc, char **argv) {
    md_system sys;
    md_grid grid;
    int v, natoms, n;
    if (argc != 4 || (natoms = atoi(argv[2])) < 1 || (n = atoi(argv[3])) < 2) {
        fprintf(stderr, "usage: %s VARIANT|none NATOMS N\n", argv[0]);
        return 2;
    }
    if (ladder_dcs_system(&sys, &grid, natoms, n, n, n, 0.05) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    for (v = 0; v < MD_DCS_VARIANT_COUNT; v++)
        if (strcmp(argv[1], md_dcs_variant_name((md_dcs_variant)v)) == 0) break;
    if (strcmp(argv[1], "none") != 0) {
        if (v == MD_DCS_VARIANT_COUNT || md_dcs((md_dcs_variant)v, sys.xyzq, sys.n, &grid) != MD_OK) {
            fprintf(stderr, "%s: %s\n", argv[1], v == MD_DCS_VARIANT_COUNT ? "unknown rung" : md_last_error());
            return 1;
        }
    }
    printf("%s %d atoms %d^3 V0 %g\n", argv[1], natoms, n, grid.data[0]);
    md_grid_free(&grid);
    md_system_free(&sys);
    return 0;
}
