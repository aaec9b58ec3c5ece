/* Prints md.h's replica-exchange decisions (md_remd_exchange) for a random energy stream and
 * md_remd_probability for random inputs, so that reference/check_remd.py can recompute them
 * with an independent Python implementation (reference/remd.py).
 * Usage: dump_remd SEED
 * Lines: "temps T0 .. T7", then per round "round m E0 .. E7 acc A0 .. A6 slot S0 .. S7 scale
 * F0 .. F7" (energies by replica, before the round; decisions and slots after), then
 * "prob Ti Tj Ui Uj p" lines and "stats attempts accepts" per pair. */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdlib.h>

enum { N = 8, ROUNDS = 400 };

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    md_remd x;
    md_rng r;
    double t[N], e[N], scale[N];
    int acc[N - 1], k, m;
    if (md_remd_ladder(t, N, 300.0, 450.0) != MD_OK || md_remd_create(&x, N, t, seed) != MD_OK) {
        fprintf(stderr, "%s\n", md_last_error());
        return 1;
    }
    printf("temps");
    for (k = 0; k < N; k++) printf(" %.17g", t[k]);
    printf("\n");
    md_rng_seed(&r, seed ^ 0xABCDEFull);
    for (m = 0; m < ROUNDS; m++) {
        /* energies that rise with the temperature a replica holds, with noise: swaps are
           neither all accepted nor all refused */
        for (k = 0; k < N; k++) e[k] = -30000.0 + 60.0 * x.slot_of[k] + 40.0 * md_rng_normal(&r);
        if (md_remd_exchange(&x, e, acc, scale) != MD_OK) {
            fprintf(stderr, "%s\n", md_last_error());
            return 1;
        }
        printf("round %d", m);
        for (k = 0; k < N; k++) printf(" %.17g", e[k]);
        printf(" acc");
        for (k = 0; k < N - 1; k++) printf(" %d", acc[k]);
        printf(" slot");
        for (k = 0; k < N; k++) printf(" %d", x.slot_of[k]);
        printf(" scale");
        for (k = 0; k < N; k++) printf(" %.17g", scale[k]);
        printf("\n");
    }
    for (k = 0; k < N - 1; k++) printf("stats %lld %lld\n", x.attempts[k], x.accepts[k]);
    for (m = 0; m < 50; m++) {
        double ti = 250.0 + 200.0 * md_rng_uniform(&r), tj = 250.0 + 200.0 * md_rng_uniform(&r);
        double ui = -1000.0 + 50.0 * md_rng_normal(&r), uj = -1000.0 + 50.0 * md_rng_normal(&r);
        printf("prob %.17g %.17g %.17g %.17g %.17g\n", ti, tj, ui, uj, md_remd_probability(ti, tj, ui, uj));
    }
    md_remd_free(&x);
    return 0;
}
