/* libFuzzer target for md.h's checkpoint reader: md_checkpoint_read_mem on arbitrary bytes. A
 * success must hold what the reader promises: 1 <= n <= MD_DCD_MAX_ATOMS, a finite positive box,
 * finite positions and velocities, consistent barostat counters, a step >= 0; and writing it
 * back must give the same bytes (the layout has no slack). Any crash, leak or sanitizer report
 * is a bug; error returns are expected (a random input almost never passes the hash: the
 * corpus holds valid files, so mutations explore the checks before the hash and the
 * values after it).
 *   make fuzz && build/fuzz/fuzz_checkpoint tests/fuzz/corpus/checkpoint
 * Seed corpus: tests/fuzz/corpus/checkpoint/ (made by tests/fuzz/make_checkpoint_corpus.py). */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_checkpoint c;
    int i;
    if (md_checkpoint_read_mem(data, size, "fuzz.chk", &c) != MD_OK) return 0;
    if (c.n < 1 || c.n > MD_DCD_MAX_ATOMS || c.step < 0 || c.baro.accepted > c.baro.attempted) abort();
    for (i = 0; i < 3; i++)
        if (!(c.box[i] > 0) || !isfinite(c.box[i])) abort();
    for (i = 0; i < 3 * c.n; i++)
        if (!isfinite(c.x[i]) || !isfinite(c.v[i])) abort();
    md_checkpoint_free(&c);
    return 0;
}
