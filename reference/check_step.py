"""Compare md.h's constraints and bonded terms with the float64 numpy reference (reference/step.py).

Runs build/reference/dump_step (see its header for the problems), then checks:
  settle      md.h's SETTLE positions against Newton's solution of the SHAKE equations, per
              water: within 1e-11 nm (both are double; Newton stops at 1e-15 relative and the
              closed form rounds ~20 operations on 0.1 nm vectors: measured 4e-16 nm).
  velocities  md.h's rigid velocities against numpy's 3 x 3 solve: within 1e-12 nm/ps
              (measured 2e-15).
  bonded      md.h's energy within 1e-12 relative of numpy's; forces within 1e-9 of the largest
              force (complex-step derivatives are exact to rounding; md.h's atan2 angle and
              analytic gradient round differently from numpy's arccos); virial entries within
              1e-9 of the largest entry (measured: all three below 1e-15).
Prints PASS/FAIL lines; exits non-zero on any failure."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nb  # noqa: E402
import step  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failed = 0


def report(name, ok, why=""):
    global failed
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    failed += 0 if ok else 1


def main():
    with tempfile.TemporaryDirectory() as d:
        e, meta = nb.run_dump(ROOT, d, "dump_step")
        load = lambda name, t: np.fromfile(os.path.join(d, name), dtype=e + t)  # noqa: E731
        info = {f[0]: f[1:] for f in meta}
        nw = int(info["settle"][0])
        mo, mh, doh, dhh = (float(v) for v in info["settle"][1:5])
        m = np.array([mo, mh, mh])
        ref, unc, out = (load("settle_%s.f64" % s, "f8").reshape(nw, 3, 3) for s in ("ref", "unc", "out"))
        v, vout = (load("settle_%s.f64" % s, "f8").reshape(nw, 3, 3) for s in ("v", "vout"))
        worst = max(np.max(np.abs(step.shake_water(ref[k], unc[k], m, doh, dhh) - out[k])) for k in range(nw))
        moved = max(np.max(np.abs(out[k] - unc[k])) for k in range(nw))
        report("settle: %d waters equal the solution of the SHAKE equations" % nw, worst < 1e-11 and moved > 1e-3,
               "largest difference %g nm (constraints moved atoms by up to %g nm)" % (worst, moved))
        worst = max(np.max(np.abs(step.rigid_velocity(ref[k], v[k], m) - vout[k])) for k in range(nw))
        report("settle velocities: equal numpy's 3 x 3 solve", worst < 1e-12, "largest difference %g nm/ps" % worst)
        n, nbd, nang = (int(x) for x in info["bonded"][:3])
        box = np.array([float(x) for x in info["bonded"][3:6]])
        x = load("bonded_x.f64", "f8").reshape(n, 3)
        bonds = load("bonded_bond.i32", "i4").reshape(nbd, 2)
        bp = load("bonded_bondp.f64", "f8").reshape(nbd, 2)
        angles = load("bonded_angle.i32", "i4").reshape(nang, 3)
        ap = load("bonded_anglep.f64", "f8").reshape(nang, 2)
        res = load("bonded_out.f64", "f8")
        en, f, w = step.bonded_forces_virial(x, box, bonds, bp, angles, ap)
        report("bonded energy equals numpy's", abs(res[0] - en) <= 1e-12 * abs(en), "%.17g vs %.17g" % (res[0], en))
        fm = res[10:].reshape(n, 3)
        err = np.max(np.abs(fm - f)) / np.max(np.abs(f))
        report("bonded forces equal numpy's complex-step gradient", err < 1e-9, "relative difference %g" % err)
        err = np.max(np.abs(res[1:10].reshape(3, 3) - w)) / np.max(np.abs(w))
        report("bonded virial equals numpy's complex-step deformation derivative", err < 1e-9,
               "relative difference %g" % err)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
