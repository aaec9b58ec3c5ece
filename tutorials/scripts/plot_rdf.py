"""Plot g(r) (and the coordination number n(r)) from md_rdf_write_csv files.

    python3 tutorials/scripts/plot_rdf.py OUT.png CSV[:LABEL] [CSV[:LABEL] ...] [--title TEXT]

Each CSV has the columns r_nm, g, n (examples/rdf writes them). g(r) is drawn on the
left axis, n(r) dashed on the right."""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main(argv):
    title = None
    if "--title" in argv:
        k = argv.index("--title")
        title = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    if len(argv) < 2:
        sys.exit(__doc__)
    out, csvs = argv[0], argv[1:]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ax2 = ax.twinx()
    for c in csvs:
        path, _, label = c.partition(":")
        d = np.loadtxt(path, delimiter=",", skiprows=1)
        line, = ax.plot(d[:, 0], d[:, 1], label=label or path)
        ax2.plot(d[:, 0], d[:, 2], "--", color=line.get_color(), alpha=0.6)
    ax.axhline(1.0, color="gray", lw=0.5)
    ax.set_xlabel("r (nm)")
    ax.set_ylabel("g(r)")
    ax2.set_ylabel("n(r), dashed")
    ax.set_xlim(0, None)
    ax.set_ylim(0, None)
    ax2.set_ylim(0, None)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1:])
