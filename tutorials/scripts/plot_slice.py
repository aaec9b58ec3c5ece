"""Plot one z-slice of an OpenDX potential map as a PNG.

    python3 tutorials/scripts/plot_slice.py MAP.dx [OUT.png] [--z NM] [--pqr FILE]

OUT.png defaults to tutorials/img/01_water_slice.png. The slice is the grid
plane nearest to z = NM (default: the middle plane). With --pqr, atoms within
0.05 nm of the plane are drawn on top (large circles:
negative charges, O; small: positive, H). The color scale is symmetric and clipped at the 98th
percentile of |V| on the plane: the potential diverges at the atoms.

To remake the tutorial's figure:
    make build/examples/potential_map
    build/examples/potential_map examples/potential_map/water.pqr /tmp/water.dx --spacing 0.025
    python3 tutorials/scripts/plot_slice.py /tmp/water.dx --z 1.398 --pqr examples/potential_map/water.pqr"""
import argparse
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "reference"))
import dcs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dx")
    ap.add_argument("png", nargs="?", default=os.path.join(ROOT, "tutorials", "img", "01_water_slice.png"))
    ap.add_argument("--z", type=float, default=None, help="height of the slice (nm)")
    ap.add_argument("--pqr", default=None, help="draw the atoms near the slice")
    a = ap.parse_args()

    v, origin, h, _ = dcs.read_dx(a.dx)                  # v[i, j, k]
    nx, ny, nz = v.shape
    k = nz // 2 if a.z is None else int(round((a.z - origin[2]) / h[2]))
    k = min(max(k, 0), nz - 1)
    z = origin[2] + k * h[2]
    plane = v[:, :, k].T                                  # rows y, columns x
    lim = np.percentile(np.abs(plane), 98)
    extent = [origin[0], origin[0] + (nx - 1) * h[0], origin[1], origin[1] + (ny - 1) * h[1]]
    fig, ax = plt.subplots(figsize=(6.4, 5.4), dpi=120)
    im = ax.imshow(plane, origin="lower", extent=extent, cmap="RdBu_r", vmin=-lim, vmax=lim,
                   interpolation="bilinear")
    fig.colorbar(im, ax=ax, label="V (kJ mol$^{-1}$ e$^{-1}$), clipped at the 98th percentile")
    if a.pqr:
        xyzq = []
        for line in open(a.pqr):
            if line.startswith(("ATOM", "HETATM")):
                f = line.split()
                xyzq.append([float(f[-5]) * 0.1, float(f[-4]) * 0.1, float(f[-3]) * 0.1, float(f[-2])])
        xyzq = np.array(xyzq)
        near = np.abs(xyzq[:, 2] - z) <= 0.05
        for sign, size in ((-1, 40), (1, 12)):
            s = near & (np.sign(xyzq[:, 3]) == sign)
            ax.scatter(xyzq[s, 0], xyzq[s, 1], s=size, facecolors="none", edgecolors="black",
                       linewidths=0.7,
                       label=("O (q < 0)" if sign < 0 else "H (q > 0)") + " within 0.05 nm of the plane")
        ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
    ax.set_xlabel("x (nm)")
    ax.set_ylabel("y (nm)")
    ax.set_title("Direct Coulomb sum, TIP3P water box: slice z = %.3f nm" % z, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(a.png)), exist_ok=True)
    fig.savefig(a.png)
    print("wrote %s (plane k = %d of %d, z = %.3f nm, |V| clip %.4g)" % (a.png, k, nz, z, lim))


if __name__ == "__main__":
    main()
