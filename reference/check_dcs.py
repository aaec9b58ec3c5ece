"""Check md.h's direct-Coulomb-sum CPU rungs against the float64 numpy reference.

Runs build/reference/dump_dcs (a random system of 300 charges, seed 2026, on a
17 x 13 x 11 grid with non-cubic spacing and a non-zero origin, one atom
exactly on a grid point), recomputes the map with reference/dcs.py and prints
PASS/FAIL per rung. Exit status 1 on any failure.

Tolerances (max |out - ref| / max |ref|):
  cpu_simple  2e-7: it accumulates in double; only the final rounding to float
              (2^-24 = 6e-8 of each value) differs.
  float rungs 2e-5: dominated by forming the grid point coordinate in float
              (~2 ulps of |x| <= 2 nm, ~2.4e-7 nm) divided by the distance to the
              nearest atom, which sets max|V|; plus the correctly rounded sqrt
              and divide and the float sum of 300 terms (below 1e-6 here).
              tests/test_dcs.c derives the same budget in detail."""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import dcs  # noqa: E402

TOL = {"cpu_simple": 2e-7}
TOL_FLOAT = 2e-5


def main():
    exe = os.path.join(ROOT, "build", "reference", "dump_dcs")
    if not os.path.exists(exe):
        subprocess.run(["make", "-s", "build/reference/dump_dcs"], cwd=ROOT, check=True)
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([exe, d], check=True)
        with open(os.path.join(d, "meta.txt")) as f:
            lines = f.read().split("\n")
        n = [int(t) for t in lines[0].split()]
        origin = [float(t) for t in lines[1].split()]
        spacing = [float(t) for t in lines[2].split()]
        natoms = int(lines[3])
        rungs = [t for t in lines[4:] if t]
        xyzq = np.fromfile(os.path.join(d, "xyzq.f32"), dtype="<f4").reshape(natoms, 4)
        ref = dcs.dcs(xyzq, n, origin, spacing)
        # the atom on a grid point: that point gets the other atoms only
        i, j, k = 3, 4, 5
        p = np.array([origin[0] + i * spacing[0], origin[1] + j * spacing[1], origin[2] + k * spacing[2]])
        others = xyzq[1:].astype(np.float64)
        v_other = dcs.COULOMB * np.sum(others[:, 3] / np.linalg.norm(p - others[:, :3], axis=1))
        if abs(ref[k, j, i] - v_other) <= 1e-9 * np.abs(ref).max():
            print("PASS numpy: atom on grid point (3,4,5) adds nothing there")
        else:
            print("FAIL numpy: atom on grid point: %g vs %g" % (ref[k, j, i], v_other))
            failed += 1
        if not rungs:
            print("FAIL dump_dcs: wrote no rungs")
            failed += 1
        for name in rungs:
            out = np.fromfile(os.path.join(d, name + ".f32"), dtype="<f4").reshape(n[2], n[1], n[0])
            err = dcs.max_rel_error(out, ref)
            tol = TOL.get(name, TOL_FLOAT)
            if err <= tol:
                print("PASS %s: max rel error %.2e <= %.0e (%d atoms, %dx%dx%d grid)"
                      % (name, err, tol, natoms, n[0], n[1], n[2]))
            else:
                print("FAIL %s: max rel error %.2e > %.0e" % (name, err, tol))
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
