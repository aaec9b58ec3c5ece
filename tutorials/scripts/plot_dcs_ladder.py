#!/usr/bin/env python3
"""Bar chart of the GPU direct-Coulomb-sum ladder (chapters 02-04) from md_bench JSON lines.

    python3 tutorials/scripts/plot_dcs_ladder.py build/gpu-check/bench.jsonl \
        [--out tutorials/img/dcs_ladder.png] [--chapters 02_,03_,04_]

One bar per (chapter, rung), in file order, height = atom-evals/s; the label on each bar is
the fraction of the measured MUFU rsqrt ceiling (inside the bar from 30% up), a dashed line
marks the ceiling itself (the median of the chapters' measurements) and grey lines separate
the chapters. Orange: the hybrid-rsqrt rungs; grey bar: the CPU baseline.
The wave-sweep lines (variant "sweep_<nz>") and failed rungs (never written) are left out.
If a rung appears more than once (several runs appended), the last line wins.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path, prefixes):
    rows = {}
    device = set()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            if r.get("schema") != "md_bench/1":
                continue
            ch, var = r.get("chapter", ""), r.get("variant", "")
            if not any(ch.startswith(p) for p in prefixes) or var.startswith("sweep_"):
                continue
            if r.get("rate") is None:
                continue
            rows[(ch, var)] = r  # dict keeps first-insertion order; the last line's values win
            device.add(r.get("device", "?"))
    return list(rows.values()), device


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl")
    ap.add_argument("--out", default="tutorials/img/dcs_ladder.png")
    ap.add_argument("--chapters", default="02_,03_,04_", help="comma-separated chapter prefixes")
    a = ap.parse_args()
    rows, device = load(a.jsonl, a.chapters.split(","))
    if not rows:
        sys.exit(f"{a.jsonl}: no md_bench/1 lines for chapters {a.chapters}")
    labels = [f"{r['chapter'][:2]}:{r['variant']}" for r in rows]
    rates = [r["rate"] for r in rows]
    ceilings = sorted(r["ceiling"] for r in rows if r.get("ceiling"))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.5))
    colors = ["#4c72b0" if not r["variant"].startswith(("gpu_hybrid", "hybrid_")) else "#dd8452" for r in rows]
    colors = ["#999999" if r["variant"].startswith("cpu_") else c for r, c in zip(rows, colors)]
    bars = ax.bar(range(len(rows)), rates, color=colors)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("atom-evals / s")
    top = max(rates)
    if ceilings:
        c = ceilings[len(ceilings) // 2]
        top = max(top, c)
        ax.axhline(c, ls="--", color="k", lw=1)
        ax.text(-0.5, c * 1.08, " MUFU rsqrt ceiling", va="bottom", ha="left", fontsize=8)
    ax.set_ylim(top=top * 2.0)  # room for the ceiling's label
    # chapter boundaries
    for i in range(1, len(rows)):
        if rows[i]["chapter"] != rows[i - 1]["chapter"]:
            ax.axvline(i - 0.5, color="#cccccc", lw=0.8)
    for b, r in zip(bars, rows):
        f = r.get("ceiling_fraction")
        if f is not None:
            txt = f"{100 * f:.0f}%" if f >= 0.095 else f"{100 * f:.1f}%"
            if f >= 0.3:  # near the ceiling line: write it inside the bar
                ax.text(b.get_x() + b.get_width() / 2, b.get_height() * 0.75, txt, ha="center", va="top",
                        fontsize=7, color="white", fontweight="bold")
            else:
                ax.text(b.get_x() + b.get_width() / 2, b.get_height() * 1.05, txt, ha="center", va="bottom",
                        fontsize=7)
    ax.set_title("Direct Coulomb sum ladder - " + ", ".join(sorted(device)), fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out} ({len(rows)} rungs)")


if __name__ == "__main__":
    main()
