/* libFuzzer target: md_read_pqr_mem on arbitrary bytes. Built by `make fuzz`
 * (clang -fsanitize=fuzzer,address,undefined); seeds in tests/fuzz/corpus/pqr/.
 * Run: build/fuzz/fuzz_pqr -max_total_time=60 tests/fuzz/corpus/pqr */
#define MD_IMPLEMENTATION
#include "md.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_system out;
    if (md_read_pqr_mem((const char *)data, size, "fuzz.pqr", &out) == MD_OK) md_system_free(&out);
    return 0;
}
