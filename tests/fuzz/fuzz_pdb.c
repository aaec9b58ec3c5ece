/* libFuzzer target: md_read_pdb_mem on arbitrary bytes. Built by `make fuzz`
 * (clang -fsanitize=fuzzer,address,undefined); seeds in tests/fuzz/corpus/pdb/.
 * MD_WARN_CELL is a success with a filled output (freed like MD_OK). A success must hold
 * bonds inside 0..n-1, each i < j, sorted and distinct, and never both a box and a cell.
 * Run: build/fuzz/fuzz_pdb -max_total_time=60 tests/fuzz/corpus/pdb */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_system out;
    int k;
    md_status st = md_read_pdb_mem((const char *)data, size, "fuzz.pdb", &out);
    if (st != MD_OK && st != MD_WARN_CELL) return 0;
    for (k = 0; k < out.nbond; k++) {
        const int *b = out.bond + 2 * k;
        if (b[0] < 0 || b[1] >= out.n || b[0] >= b[1]) abort();
        if (k > 0 && (b[-2] > b[0] || (b[-2] == b[0] && b[-1] >= b[1]))) abort();
    }
    if ((st == MD_WARN_CELL) != (out.cell[0] > 0.0) || (out.box[0] > 0.0 && out.cell[0] > 0.0)) abort();
    md_system_free(&out);
    return 0;
}
