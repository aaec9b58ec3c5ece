/* libFuzzer target: md_read_psf_mem on arbitrary bytes, then md_system_copy_topology of a
 * success onto a fresh frame. Built by `make fuzz` (clang -fsanitize=fuzzer,address,undefined);
 * seeds in tests/fuzz/corpus/psf/ (the CHARMM standard, EXT and NAMD fixtures of tests/data/).
 * A success must hold bonds inside 0..n-1, each i < j, sorted and distinct, and types below n.
 * Run: build/fuzz/fuzz_psf -max_total_time=60 tests/fuzz/corpus/psf */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_system out, frame;
    int k;
    if (md_read_psf_mem((const char *)data, size, "fuzz.psf", &out) != MD_OK) return 0;
    for (k = 0; k < out.nbond; k++) {
        const int *b = out.bond + 2 * k;
        if (b[0] < 0 || b[1] >= out.n || b[0] >= b[1]) abort();
        if (k > 0 && (b[-2] > b[0] || (b[-2] == b[0] && b[-1] >= b[1]))) abort();
    }
    for (k = 0; k < out.n; k++)
        if (out.type[k] < 0 || out.type[k] >= out.n) abort();
    if (md_system_alloc(&frame, out.n) == MD_OK) {
        if (md_system_copy_topology(&frame, &out) != MD_OK || frame.nbond != out.nbond) abort();
        md_system_free(&frame);
    }
    md_system_free(&out);
    return 0;
}
