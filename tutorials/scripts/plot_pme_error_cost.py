"""Plot PME's accuracy against its cost from the table `build/chapters/07_pme --sweep FILE` writes.

    python3 tutorials/scripts/plot_pme_error_cost.py SWEEP.csv OUT.png

Columns of SWEEP.csv: order, spacing_nm, grid, grid_points, force_error, energy_error_kj_mol,
cpu_small_s, gpu_atoms, gpu_s. The left panel is the RMS relative force error against Ewald
(computed, no timing) over the grid points per box, one line per spline order, with OpenMM's
tolerance 5e-4 marked. The right panel, drawn only when the file holds GPU times (a run on a
device), is the same error over the GPU time of one reciprocal evaluation on the 23,568-atom box.
Without GPU times the right panel says so instead of showing numbers."""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    d = np.genfromtxt(argv[0], delimiter=",", names=True)
    have_gpu = np.isfinite(d["gpu_s"]).any()
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.0), dpi=120)
    for order in sorted(set(d["order"].astype(int))):
        m = d["order"] == order
        axes[0].loglog(d["grid_points"][m], d["force_error"][m], "o-", label="order %d" % order)
        if have_gpu:
            axes[1].semilogy(1e6 * d["gpu_s"][m], d["force_error"][m], "o-", label="order %d" % order)
    for ax in axes:
        ax.axhline(5e-4, color="gray", lw=0.8, ls="--")
        ax.set_ylabel("RMS relative force error vs Ewald")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].xaxis.set_minor_formatter(NullFormatter())  # a log axis: its minor labels overlap
    axes[0].set_xticks([3e3, 1e4, 3e4, 6e4])
    axes[0].set_xticklabels(["3,000", "10,000", "30,000", "60,000"])
    axes[0].set_xlabel("grid points (K0 K1 K2)")
    axes[0].set_title("accuracy vs grid size", fontsize=10)
    axes[0].legend(fontsize=8)
    if have_gpu:
        axes[1].set_xlabel("GPU time per evaluation (us), %d atoms" % int(d["gpu_atoms"][0]))
        axes[1].set_title("accuracy vs GPU cost", fontsize=10)
        axes[1].legend(fontsize=8)
    else:
        axes[1].text(0.5, 0.5, "GPU times: measured by `make gpu-check`\n(see README)", ha="center", va="center",
                     transform=axes[1].transAxes)
        axes[1].set_xticks([])
        axes[1].set_yticks([])
    fig.tight_layout()
    fig.savefig(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
