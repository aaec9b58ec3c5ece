/* bench/hybrid_masks.cu - where the software rsqrts of the hybrid rung sit (tutorial 04).
 *
 *   build/bench/hybrid_masks        one line per mask: time, atom-evals/s, x the MUFU ceiling
 *
 * The library's hybrid kernel (md_cuda_dcs_plan_enqueue_mask: 8 x 4 points per thread, two atoms
 * per loop step, atoms from constant memory, 4 resident blocks per SM, no MD_DCS_MIN_R2 test in
 * the loop, then the fix-up) with a 64-bit mask over the 64 atom-evals of a loop step: bit (s 4 + r) 8 + u set =
 * atom s of the pair, row r, point u takes md_soft_rsqrtf. "row" below is s 4 + r. The sweep
 * that chose MD_DCS_HYBRID_SOFT's mask, in its order:
 *   16 of 64: every way to place 2 software points among 8, the same in all rows;
 *   18 to 20: the best of those (u = 0 and 7) plus u = 3 in 2, 3 or 4 of the 8 rows.
 * The instruction mix depends only on the count; the placement changes the schedule the
 * compiler builds. The first line is the library's MD_DCS_GPU_HYBRID (md_cuda_dcs_plan_enqueue
 * with the compiled split), and every map is compared with it. 3072 random atoms, 256 x 256 x 132 points 0.1 nm apart (hybrid_bench.h).
 * No GPU: SKIP. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "hybrid_bench.h" /* the shared harness */

/* One placement: the library's hybrid kernel with mask M on the harness's plan. */
template <unsigned long long M> static md_status hm_launch(md_cuda_dcs_plan *p) {
    return md_cuda_dcs_plan_enqueue_mask<M>(p);
}

/* The library's own rung, as a user runs it. */
static md_status hm_library(md_cuda_dcs_plan *p) { return md_cuda_dcs_plan_enqueue(p); }

int main(void) {
    static const hb_entry masks[] = {
        {"library", hm_library},
        {"16: u=0,1", hm_launch<0x0303030303030303ull>},
        {"16: u=0,2", hm_launch<0x0505050505050505ull>},
        {"16: u=0,3", hm_launch<0x0909090909090909ull>},
        {"16: u=0,4", hm_launch<0x1111111111111111ull>},
        {"16: u=0,5", hm_launch<0x2121212121212121ull>},
        {"16: u=0,6", hm_launch<0x4141414141414141ull>},
        {"16: u=0,7", hm_launch<0x8181818181818181ull>},
        {"16: u=1,2", hm_launch<0x0606060606060606ull>},
        {"16: u=1,3", hm_launch<0x0a0a0a0a0a0a0a0aull>},
        {"16: u=1,4", hm_launch<0x1212121212121212ull>},
        {"16: u=1,5", hm_launch<0x2222222222222222ull>},
        {"16: u=1,6", hm_launch<0x4242424242424242ull>},
        {"16: u=1,7", hm_launch<0x8282828282828282ull>},
        {"16: u=2,3", hm_launch<0x0c0c0c0c0c0c0c0cull>},
        {"16: u=2,4", hm_launch<0x1414141414141414ull>},
        {"16: u=2,5", hm_launch<0x2424242424242424ull>},
        {"16: u=2,6", hm_launch<0x4444444444444444ull>},
        {"16: u=2,7", hm_launch<0x8484848484848484ull>},
        {"16: u=3,4", hm_launch<0x1818181818181818ull>},
        {"16: u=3,5", hm_launch<0x2828282828282828ull>},
        {"16: u=3,6", hm_launch<0x4848484848484848ull>},
        {"16: u=3,7", hm_launch<0x8888888888888888ull>},
        {"16: u=4,5", hm_launch<0x3030303030303030ull>},
        {"16: u=4,6", hm_launch<0x5050505050505050ull>},
        {"16: u=4,7", hm_launch<0x9090909090909090ull>},
        {"16: u=5,6", hm_launch<0x6060606060606060ull>},
        {"16: u=5,7", hm_launch<0xa0a0a0a0a0a0a0a0ull>},
        {"16: u=6,7", hm_launch<0xc0c0c0c0c0c0c0c0ull>},
        {"18: +u3 rows 01", hm_launch<0x8181818181818989ull>},
        {"18: +u3 rows 02", hm_launch<0x8181818181898189ull>},
        {"18: +u3 rows 03", hm_launch<0x8181818189818189ull>},
        {"18: +u3 rows 04", hm_launch<0x8181818981818189ull>},
        {"18: +u3 rows 05", hm_launch<0x8181898181818189ull>},
        {"18: +u3 rows 06", hm_launch<0x8189818181818189ull>},
        {"18: +u3 rows 07", hm_launch<0x8981818181818189ull>},
        {"18: +u3 rows 12", hm_launch<0x8181818181898981ull>},
        {"18: +u3 rows 13", hm_launch<0x8181818189818981ull>},
        {"18: +u3 rows 14", hm_launch<0x8181818981818981ull>},
        {"18: +u3 rows 15", hm_launch<0x8181898181818981ull>},
        {"18: +u3 rows 16", hm_launch<0x8189818181818981ull>},
        {"18: +u3 rows 17", hm_launch<0x8981818181818981ull>},
        {"18: +u3 rows 23", hm_launch<0x8181818189898181ull>},
        {"18: +u3 rows 24", hm_launch<0x8181818981898181ull>},
        {"18: +u3 rows 25", hm_launch<0x8181898181898181ull>},
        {"18: +u3 rows 26", hm_launch<0x8189818181898181ull>},
        {"18: +u3 rows 27", hm_launch<0x8981818181898181ull>},
        {"18: +u3 rows 34", hm_launch<0x8181818989818181ull>},
        {"18: +u3 rows 35", hm_launch<0x8181898189818181ull>},
        {"18: +u3 rows 36", hm_launch<0x8189818189818181ull>},
        {"18: +u3 rows 37", hm_launch<0x8981818189818181ull>},
        {"18: +u3 rows 45", hm_launch<0x8181898981818181ull>},
        {"18: +u3 rows 46", hm_launch<0x8189818981818181ull>},
        {"18: +u3 rows 47", hm_launch<0x8981818981818181ull>},
        {"18: +u3 rows 56", hm_launch<0x8189898181818181ull>},
        {"18: +u3 rows 57", hm_launch<0x8981898181818181ull>},
        {"18: +u3 rows 67", hm_launch<0x8989818181818181ull>},
        {"19: +u3 rows 024", hm_launch<0x8181818981898189ull>},
        {"19: +u3 rows 026", hm_launch<0x8189818181898189ull>},
        {"19: +u3 rows 034", hm_launch<0x8181818989818189ull>},
        {"19: +u3 rows 046", hm_launch<0x8189818981818189ull>},
        {"19: +u3 rows 047", hm_launch<0x8981818981818189ull>},
        {"19: +u3 rows 135", hm_launch<0x8181898189818981ull>},
        {"19: +u3 rows 146", hm_launch<0x8189818981818981ull>},
        {"19: +u3 rows 237", hm_launch<0x8981818189898181ull>},
        {"19: +u3 rows 246", hm_launch<0x8189818981898181ull>},
        {"19: +u3 rows 256", hm_launch<0x8189898181898181ull>},
        {"19: +u2 rows 246", hm_launch<0x8185818581858181ull>},
        {"19: +u4 rows 246", hm_launch<0x8191819181918181ull>},
        {"20: +u3 rows 0145", hm_launch<0x8181898981818989ull>},
        {"20: +u3 rows 0246", hm_launch<0x8189818981898189ull>},
        {"20: +u3 rows 1357", hm_launch<0x8981898189818981ull>},
        {"20: +u3 rows 2367", hm_launch<0x8989818189898181ull>},
    };
    return hb_run_table(masks, (int)(sizeof masks / sizeof masks[0]), "", 22);
}
