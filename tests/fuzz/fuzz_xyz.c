/* libFuzzer target: md_read_xyz_mem on arbitrary bytes. Built by `make fuzz`
 * (clang -fsanitize=fuzzer,address,undefined); seeds in tests/fuzz/corpus/xyz/.
 * Run: build/fuzz/fuzz_xyz -max_total_time=60 tests/fuzz/corpus/xyz */
#define MD_IMPLEMENTATION
#include "md.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_system out;
    if (md_read_xyz_mem((const char *)data, size, "fuzz.xyz", &out) == MD_OK) md_system_free(&out);
    return 0;
}
