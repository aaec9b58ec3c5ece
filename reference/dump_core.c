/* Prints md.h's RNG streams and a small random-charge system so that
 * reference/check_core.py can recompute them independently in Python.
 * Usage: dump_core SEED */
#define MD_IMPLEMENTATION
#include "md.h"
#include <inttypes.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    md_rng r;
    md_system s;
    double box[3] = {2.5, 3.0, 3.5};
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1234;
    int i;
    md_rng_seed(&r, seed);
    for (i = 0; i < 8; i++) printf("next %" PRIu64 "\n", md_rng_next(&r));
    for (i = 0; i < 4; i++) printf("uniform %.17g\n", md_rng_uniform(&r));
    for (i = 0; i < 4; i++) printf("normal %.17g\n", md_rng_normal(&r));
    if (md_build_random_charges(&s, 5, box, 0.8, seed) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    for (i = 0; i < s.n; i++)
        printf("atom %.9g %.9g %.9g %.9g\n", s.xyzq[i].x, s.xyzq[i].y, s.xyzq[i].z, s.xyzq[i].w);
    md_system_free(&s);
    return 0;
}
