"""GPU timelines of the replicas under each scheduling rung (tutorial 10's figure).

    python3 tutorials/scripts/plot_replica_timeline.py PREFIX OUT.png [--ms T]

PREFIX_<rung>.csv are what `build/chapters/10_coroutines --timeline PREFIX` writes: one row per
measured batch of GPU work (replica, begin_s, end_s: seconds of the GPU clock from the run's
origin event, md_cuda_sched_desc::timeline). One panel per rung found (sequential, threads,
coroutines, graphs), one lane per replica, a bar per batch; the first T milliseconds (default 20)
of each run from its first batch, so the gaps the host leaves show beside the packed rungs. The
title of each panel gives the busy fraction of the window (union of the bars over its length)."""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RUNGS = ("sequential", "threads", "coroutines", "graphs")


def read(path):
    with open(path, newline="") as fh:
        return [(int(r["replica"]), float(r["begin_s"]), float(r["end_s"])) for r in csv.DictReader(fh)]


def busy(bars, lo, hi):
    iv = sorted((max(b, lo), min(e, hi)) for _, b, e in bars if e > lo and b < hi)
    total, cur_lo, cur_hi = 0.0, None, None
    for b, e in iv:
        if cur_hi is None or b > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = b, e
        else:
            cur_hi = max(cur_hi, e)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total / (hi - lo) if hi > lo else float("nan")


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    prefix, out = argv[1], argv[2]
    window = float(argv[argv.index("--ms") + 1]) * 1e-3 if "--ms" in argv else 20e-3
    runs = [(r, read(f"{prefix}_{r}.csv")) for r in RUNGS if os.path.exists(f"{prefix}_{r}.csv")]
    if not runs:
        print(f"no {prefix}_<rung>.csv files")
        return 1
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.2 * len(runs)), sharex=True, squeeze=False)
    for ax, (name, bars) in zip(axes[:, 0], runs):
        t0 = min(b for _, b, _ in bars)
        nrep = max(r for r, _, _ in bars) + 1
        for r, b, e in bars:
            if b - t0 < window:
                ax.broken_barh([((b - t0) * 1e3, (min(e, t0 + window) - b) * 1e3)], (r - 0.4, 0.8), color="C%d" % (r % 10))
        ax.set_ylim(-0.6, nrep - 0.4)
        ax.set_ylabel("replica")
        ax.set_title(f"{name}: GPU busy {busy(bars, t0, t0 + window):.2f} in the first {window * 1e3:g} ms", fontsize=9)
    axes[-1, 0].set_xlabel("GPU time (ms)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
