/* libFuzzer target for md.h's DCD reader: md_dcd_open_mem on the input, then
 * md_dcd_next until the end, an error, or 64 frames. Any crash, leak or
 * sanitizer report is a bug; error returns are expected.
 *   make fuzz && build/fuzz/fuzz_dcd tests/fuzz/corpus/dcd
 * Seed corpus: tests/fuzz/make_dcd_corpus.py (both byte orders, with and without cells)
 * and copies of the DCD fixtures of tests/data/ (NSAVC, triclinic cells in three layouts). */
#define MD_IMPLEMENTATION
#include "md.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_dcd_reader r;
    md_system frame;
    int got = 1, k;
    memset(&frame, 0, sizeof frame);
    if (md_dcd_open_mem(&r, data, size, "fuzz.dcd") != MD_OK) return 0;
    for (k = 0; k < 64 && got; k++)
        if (md_dcd_next(&r, &frame, &got) != MD_OK) break;
    md_dcd_close(&r);
    md_system_free(&frame);
    return 0;
}
