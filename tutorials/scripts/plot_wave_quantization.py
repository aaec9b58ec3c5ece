#!/usr/bin/env python3
"""Wave quantization: rate of gpu_unroll8 against the number of z-planes (chapter 03's sweep).

    python3 tutorials/scripts/plot_wave_quantization.py build/gpu-check/bench.jsonl \
        [--out tutorials/img/wave_quantization.png] [--planes-per-wave P] [--plane 256x256] [--sms N]

Reads the md_bench JSON lines whose variant is "sweep_<nz>" (nx x ny x nz points, written by
build/chapters/03_coalesced_unrolled --json; --plane names nx x ny for the axis label, the
chapter's default is 256 x 256). --planes-per-wave P (printed by the chapter in the sweep's
header line, "(P planes per wave)") draws a dotted line at every multiple of P, where a new
wave starts. --sms N with --blocks-per-plane B (also in that header line) adds the time model
"the busiest SM runs ceil(nz B / N) blocks one after another", scaled to the best measured
point, as a second curve.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl")
    ap.add_argument("--out", default="tutorials/img/wave_quantization.png")
    ap.add_argument("--planes-per-wave", type=int, default=0)
    ap.add_argument("--plane", default="256x256", help="nx x ny of the sweep's planes (axis label only)")
    ap.add_argument("--sms", type=int, default=0, help="SM count, for the per-SM block model")
    ap.add_argument("--blocks-per-plane", type=int, default=0, help="blocks per plane, for the per-SM block model")
    a = ap.parse_args()
    pts = {}
    device = set()
    with open(a.jsonl) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            v = r.get("variant", "")
            if r.get("schema") != "md_bench/1" or not v.startswith("sweep_") or r.get("rate") is None:
                continue
            try:
                nz = int(v[len("sweep_"):])
            except ValueError:
                sys.exit(f"{a.jsonl}:{n}: variant '{v}' is not sweep_<nz>")
            pts[nz] = r
            device.add(r.get("device", "?"))
    if not pts:
        sys.exit(f"{a.jsonl}: no sweep_<nz> lines (run build/chapters/03_coalesced_unrolled --json FILE)")
    nz = sorted(pts)
    rate = [pts[z]["rate"] for z in nz]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(nz, rate, "o-", color="#4c72b0")
    ceil = [pts[z]["ceiling"] for z in nz if pts[z].get("ceiling")]
    if ceil:
        ax.axhline(sorted(ceil)[len(ceil) // 2], ls="--", color="k", lw=1, label="MUFU rsqrt ceiling")
    if a.planes_per_wave > 0:
        m = a.planes_per_wave
        while m <= nz[-1]:
            ax.axvline(m, ls=":", color="#dd8452")
            m += a.planes_per_wave
        ax.plot([], [], ls=":", color="#dd8452", label=f"multiples of {a.planes_per_wave} planes (one wave)")
    if a.sms > 0 and a.blocks_per_plane > 0:
        # rate model: work ~ nz, time ~ ceil(nz * B / SMs) (blocks on the busiest SM), scaled
        # so that the model's best point equals the best measured rate
        eff = [z * a.blocks_per_plane / (a.sms * -(-z * a.blocks_per_plane // a.sms)) for z in nz]
        k = max(rate) / max(eff)
        ax.plot(nz, [k * e for e in eff], "s--", color="#55a868", ms=4, lw=1,
                label=f"model: time ~ ceil(blocks / {a.sms} SMs)")
    ax.set_xlabel(f"grid planes nz ({a.plane.replace('x', ' x ')} x nz points)")
    ax.set_ylabel("atom-evals / s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Wave quantization, gpu_unroll8 - " + ", ".join(sorted(device)), fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out} ({len(nz)} sizes)")


if __name__ == "__main__":
    main()
