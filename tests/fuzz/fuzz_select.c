/* libFuzzer target for md_select: the input (NUL-terminated copy) is an
 * expression applied to a 12-atom system with names OW/HW1/HW2 and types 0-2.
 * Any crash, leak or sanitizer report is a bug; error returns are expected,
 * and a success must give 1..12 indices, increasing, inside 0..11.
 *   make fuzz && build/fuzz/fuzz_select */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[3] = {"OW", "HW1", "HW2"};
    md_system s;
    char *expr;
    int *idx = NULL, n = 0, i;
    if (size > 4096 || !(expr = (char *)malloc(size + 1))) return 0;
    memcpy(expr, data, size);
    expr[size] = '\0';
    if (md_system_alloc(&s, 12) != MD_OK) {
        free(expr);
        return 0;
    }
    for (i = 0; i < 12; i++) {
        snprintf(s.name[i].s, sizeof s.name[i].s, "%s", names[i % 3]);
        s.type[i] = i % 3;
    }
    if (md_select(&s, expr, &idx, &n) == MD_OK) {
        if (n < 1 || n > 12) abort();
        for (i = 0; i < n; i++)
            if (idx[i] < 0 || idx[i] > 11 || (i > 0 && idx[i] <= idx[i - 1])) abort();
        md_free(idx);
    }
    md_system_free(&s);
    free(expr);
    return 0;
}
