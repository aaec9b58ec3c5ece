"""Timeline of host and GPU activity, before and after CUDA graphs (tutorial 09's figure).

    python3 tutorials/scripts/plot_graph_timeline.py TIMELINE.csv OUT.png [--atoms N] [--steps S]

TIMELINE.csv is what `build/chapters/09_cuda_graphs --timeline TIMELINE.csv` writes from its
stamped run: one row per host launch call and per GPU step, columns atoms, rung, lane (host or
gpu), start_us, end_us, step; times are microseconds after a GPU timestamp enqueued on the idle
GPU (the GPU lane lags the host lane by that stamp's launch latency, a few microseconds).

Two panels, the rung `stream` above and the rung `loop` below, each with a host lane (the time
the launching thread spends in its launch calls) and a GPU lane (the span of every step between
its start and end timestamps); both panels share one time axis, the first S steps (default 12)
of the stream rung, so the gaps the host leaves on the GPU show beside the loop rung's packed
steps. N picks the system (default: the smallest in the file)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append((int(r["atoms"]), r["rung"], r["lane"], float(r["start_us"]), float(r["end_us"]), int(r["step"])))
    return rows


def main(argv):
    opts = {"--atoms": None, "--steps": "12"}
    args = []
    i = 0
    while i < len(argv):
        if argv[i] in opts and i + 1 < len(argv):
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 2:
        sys.exit(__doc__)
    rows = read(args[0])
    if not rows:
        sys.exit("no rows in " + args[0])
    atoms = int(opts["--atoms"]) if opts["--atoms"] else min(r[0] for r in rows)
    steps = int(opts["--steps"])
    rows = [r for r in rows if r[0] == atoms]
    rungs = [g for g in ("stream", "loop") if any(r[1] == g for r in rows)]
    if not rungs:
        sys.exit("no rows of the rungs stream or loop for %d atoms" % atoms)
    # the window: the stream rung's first `steps` GPU steps (or the first rung's)
    ref = [r for r in rows if r[1] == rungs[0] and r[2] == "gpu" and r[5] < steps]
    t_end = max(r[4] for r in ref) * 1.05
    fig, axes = plt.subplots(len(rungs), 1, figsize=(8.0, 1.6 + 1.3 * len(rungs)), dpi=120, sharex=True)
    if len(rungs) == 1:
        axes = [axes]
    colors = {"host": "#4c72b0", "gpu": "#dd8452"}
    for ax, rung in zip(axes, rungs):
        for y, lane in ((1, "host"), (0, "gpu")):
            spans = [(r[3], r[4] - r[3]) for r in rows if r[1] == rung and r[2] == lane and r[3] < t_end]
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colors[lane], edgecolors="white", linewidth=0.3)
        gpu = sorted((r[3], r[4]) for r in rows if r[1] == rung and r[2] == "gpu")
        busy = sum(e - s for s, e in gpu)
        total = gpu[-1][1] - gpu[0][0] if gpu else 0.0
        ax.set_yticks([0, 1])
        ax.set_yticklabels(["GPU steps", "host launches"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_title("%s: GPU busy %.0f%% of the interval" % (rung, 100.0 * busy / total if total > 0 else 0.0),
                     fontsize=9, loc="left")
    axes[-1].set_xlim(0, t_end)
    axes[-1].set_xlabel("time (us) after the alignment stamp, %d atoms" % atoms)
    fig.tight_layout()
    fig.savefig(args[1])
    print("wrote %s" % args[1])


if __name__ == "__main__":
    main(sys.argv[1:])
