/* bench/ceilings.cu - measure this GPU's ceilings: the rates every chapter divides by.
 *
 *   make ceilings                  build, run, and keep the JSON in build/bench/ceilings.json
 *   build/bench/ceilings           one JSON line (md_ceilings/1) on stdout, a table on stderr
 *   build/bench/ceilings --effort 0.01   tiny run (for compute-sanitizer; numbers meaningless)
 *
 * No usable GPU: prints "SKIP: <reason>" to stderr, nothing on stdout, and exits 0.
 * A ceiling that fails is printed as null / "failed" and the program exits 1 after printing
 * the rest. MD_SANITIZE=1 in the environment is the same as --effort 0.01. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void row(const char *what, double v, double scale, const char *unit, double per_sm_clk,
                const char *how) {
    if (!isfinite(v)) {
        fprintf(stderr, "  %-22s %12s %-10s %10s  %s\n", what, "failed", "", "", how);
        return;
    }
    if (isfinite(per_sm_clk))
        fprintf(stderr, "  %-22s %12.4g %-10s %10.2f  %s\n", what, v * scale, unit, per_sm_clk, how);
    else
        fprintf(stderr, "  %-22s %12.4g %-10s %10s  %s\n", what, v * scale, unit, "", how);
}

int main(int argc, char **argv) {
    md_cuda_ceilings c;
    md_status st;
    char json[2048];
    double per_clk;
    const char *san = getenv("MD_SANITIZE");
    int i;
    if (san && san[0] == '1') md_cuda_ceilings_set_effort(0.01);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--effort") == 0 && i + 1 < argc) {
            md_cuda_ceilings_set_effort(atof(argv[++i]));
        } else {
            fprintf(stderr, "usage: %s [--effort F]   (F in (0, 1], default 1)\n", argv[0]);
            return 2;
        }
    }
    if (!md_cuda_available()) {
        fprintf(stderr, "SKIP: %s\n", md_last_error());
        return 0;
    }
    st = md_cuda_measure_ceilings(&c);
    if (md_cuda_ceilings_json(json, sizeof json, &c) >= (int)sizeof json) {
        fprintf(stderr, "ceilings: JSON line too long\n");
        return 1;
    }
    printf("%s\n", json);
    fflush(stdout);

    per_clk = (c.sm_count > 0 && c.clock_khz > 0) ? (double)c.sm_count * c.clock_khz * 1e3 : NAN;
    fprintf(stderr, "ceilings of %s (%d SMs, peak clock %.0f MHz)\n", c.device, c.sm_count, c.clock_khz * 1e-3);
    fprintf(stderr, "  %-22s %12s %-10s %10s  %s\n", "ceiling", "value", "unit", "/SM/clock", "how");
    row("MUFU rsqrt", c.rsqrt_per_s, 1e-12, "T/s", c.rsqrt_per_s / per_clk, "8 chains x = rsqrt(x) + c (MUFU.RSQ)");
    row("FP32 FMA", c.fma_per_s, 1e-12, "T/s", c.fma_per_s / per_clk, "8 chains x = fmaf(x, a, b) (FFMA); flop = 2x");
    row("DRAM copy", c.dram_bytes_per_s, 1e-12, "TB/s", NAN, "float4 copy 1 GiB -> 1 GiB, read + write");
    row("cudaMemcpy D2D", c.memcpy_bytes_per_s, 1e-12, "TB/s", NAN, "same buffers, read + write");
    row("shared atomicAdd", c.smem_atomic_per_s, 1e-12, "T/s", c.smem_atomic_per_s / per_clk, "int, own words, no conflicts (ATOMS.ADD)");
    row("kernel launch", c.launch_s, 1e6, "us", NAN, "1000 empty kernels back-to-back on a stream");
    row("graph node", c.graph_node_s, 1e6, "us", NAN, "graph of 1000 empty kernels, per node");
    if (st != MD_OK) {
        fprintf(stderr, "ceilings: %s: %s\n", md_status_string(st), md_last_error());
        return 1;
    }
    return 0;
}
