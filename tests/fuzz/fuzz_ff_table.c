/* libFuzzer target for md.h's force-field table reader: md_read_ff_table_mem on arbitrary
 * bytes. A success must hold what the reader promises: at least one entry, type names of at
 * most MD_NAME_MAX characters, r0 > 0, k, sigma, epsilon >= 0 and finite, theta0 in (0, pi],
 * no two entries of a kind with the same types (a bond either way, an angle either direction).
 * Any crash, leak or sanitizer report is a bug; error returns are expected.
 *   make fuzz && build/fuzz/fuzz_ff_table tests/fuzz/corpus/ff_table
 * Seed corpus: tests/fuzz/corpus/ff_table/ (the tables of tests/test_step.c and a water-only one). */
#define MD_IMPLEMENTATION
#include "md.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const md_name *a, const md_name *b) { return strcmp(a->s, b->s) == 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    md_ff_table t;
    int i, j;
    if (md_read_ff_table_mem((const char *)data, size, "fuzz.ff", &t) != MD_OK) return 0;
    if (t.nlj + t.nbond + t.nangle + t.nwater < 1) abort();
    for (i = 0; i < t.nlj; i++) {
        if (strlen(t.lj_type[i].s) > MD_NAME_MAX || !(t.lj_sigma[i] >= 0) || !(t.lj_epsilon[i] >= 0) ||
            !isfinite(t.lj_sigma[i]) || !isfinite(t.lj_epsilon[i]))
            abort();
        for (j = 0; j < i && t.nlj < 2000; j++)
            if (same(&t.lj_type[i], &t.lj_type[j])) abort();
    }
    for (i = 0; i < t.nbond; i++) {
        if (!(t.bond_r0[i] > 0) || !(t.bond_k[i] >= 0) || !isfinite(t.bond_k[i])) abort();
        for (j = 0; j < i && t.nbond < 2000; j++)
            if ((same(&t.bond_type[2 * i], &t.bond_type[2 * j]) && same(&t.bond_type[2 * i + 1], &t.bond_type[2 * j + 1])) ||
                (same(&t.bond_type[2 * i], &t.bond_type[2 * j + 1]) && same(&t.bond_type[2 * i + 1], &t.bond_type[2 * j])))
                abort();
    }
    for (i = 0; i < t.nangle; i++) {
        if (!(t.angle_theta0[i] > 0) || !(t.angle_theta0[i] <= 3.14159265358979323846 * (1 + 1e-15)) ||
            !(t.angle_k[i] >= 0) || !isfinite(t.angle_k[i]))
            abort();
        for (j = 0; j < i && t.nangle < 2000; j++) {
            const md_name *a = t.angle_type + 3 * i, *b = t.angle_type + 3 * j;
            if (same(&a[1], &b[1]) && ((same(&a[0], &b[0]) && same(&a[2], &b[2])) || (same(&a[0], &b[2]) && same(&a[2], &b[0]))))
                abort();
        }
    }
    md_ff_table_free(&t);
    return 0;
}
