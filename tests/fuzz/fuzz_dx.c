/* libFuzzer target: md_read_dx_mem on arbitrary bytes. Built by `make fuzz`
 * (clang -fsanitize=fuzzer,address,undefined); seeds in tests/fuzz/corpus/dx/.
 * Run: build/fuzz/fuzz_dx -max_total_time=60 tests/fuzz/corpus/dx */
#define MD_IMPLEMENTATION
#include "md.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_grid out;
    if (md_read_dx_mem((const char *)data, size, "fuzz.dx", &out) == MD_OK) md_grid_free(&out);
    return 0;
}
