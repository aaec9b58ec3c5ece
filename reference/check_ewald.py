"""Compare md.h's Ewald sum and FFT with the float64 numpy references (reference/ewald.py,
numpy.fft).

Runs build/reference/dump_ewald (see its header for the problems), then checks:
  ewald a/b/c  each energy component (real, recip, self, excl) to 1e-10 relative (1e-9 absolute
               for a component that is 0), forces to 1e-10 of the largest force, the virial to
               1e-10 of its largest entry. Both are double; they differ in summation order and
               in how the reciprocal sum is written (md.h: half space with tables; numpy: full
               space with complex exponentials), so agreement to ~1e-13 is expected and 1e-10
               leaves room for cancellation in the sums. Case b reaches beyond half the box
               (periodic images), case c has a net charge (the neutralising background).
  fft 3D       md_fft3d_r2c against numpy.fft.rfftn, md_fft3d_c2r(r2c(x)) against
               numpy.fft.irfftn(rfftn(x)) * N: 1e-12 of the largest value (double rounding, a
               few log2 N ulps).
  fft 1D       md_fft_complex forward against numpy.fft.fft for lengths 90, 97 (a prime), 98,
               128: 1e-12 of the largest value.
Prints PASS/FAIL lines; exits non-zero on any failure."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ewald  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
report = ewald.Report()
meta = ewald.read_meta


def rel(a, b):
    scale = np.abs(b).max()
    return np.abs(a - b).max() / (scale if scale > 0 else 1.0)


def main():
    exe = os.path.join(ROOT, "build", "reference", "dump_ewald")
    if not os.path.exists(exe):
        subprocess.check_call(["make", "-s", "build/reference/dump_ewald"], cwd=ROOT)
    with tempfile.TemporaryDirectory() as d:
        subprocess.check_call([exe, d])
        e = "<" if meta(os.path.join(d, "meta.txt"))["endian"][0] == "little" else ">"
        load = lambda name, t: np.fromfile(os.path.join(d, name), dtype=e + t)  # noqa: E731
        for case in ("a", "b", "c"):
            m = meta(os.path.join(d, case + "_meta.txt"))
            n = int(m["n"][0])
            box = [float(x) for x in m["box"]]
            pos = load(case + "_pos.f64", "f8").reshape(n, 3)
            q = load(case + "_q.f64", "f8")
            excl = load(case + "_excl.i32", "i4").reshape(-1, 2)
            en, f, W = ewald.ewald(pos, q, box, float(m["alpha"][0]), float(m["rc"][0]), [int(x) for x in m["kmax"]],
                                   float(m["k2max"][0]), [tuple(p) for p in excl])
            c_en = load(case + "_energy.f64", "f8")
            c_f = load(case + "_force.f64", "f8").reshape(n, 3)
            c_w = load(case + "_virial.f64", "f8").reshape(3, 3)
            ref = np.array([en["real"], en["recip"], en["self"], en["excl"]])
            ok = all(abs(c_en[k] - ref[k]) <= 1e-10 * abs(ref[k]) + 1e-9 for k in range(4))
            report("ewald %s energies (real recip self excl) numpy vs md.h" % case, ok,
                   "md.h %s numpy %s" % (c_en, ref))
            report("ewald %s forces numpy vs md.h" % case, rel(c_f, f) < 1e-10, "rel %.3g" % rel(c_f, f))
            report("ewald %s virial numpy vs md.h" % case, rel(c_w, W) < 1e-10, "rel %.3g" % rel(c_w, W))
        for s in range(4):
            dims = [int(x) for x in meta(os.path.join(d, "fft%d_meta.txt" % s))["dims"]]
            x = load("fft%d_in.f64" % s, "f8").reshape(dims)
            X = load("fft%d_r2c.f64" % s, "f8").view(np.complex128).reshape(dims[0], dims[1], dims[2] // 2 + 1)
            y = load("fft%d_c2r.f64" % s, "f8").reshape(dims)
            ref = np.fft.rfftn(x)
            report("fft3d r2c %s numpy.fft.rfftn vs md.h" % dims, rel(X, ref) < 1e-12, "rel %.3g" % rel(X, ref))
            back = np.fft.irfftn(ref, s=dims, axes=(0, 1, 2)) * x.size
            report("fft3d c2r %s numpy.fft.irfftn * N vs md.h" % dims, rel(y, back) < 1e-12, "rel %.3g" % rel(y, back))
        for n in (90, 97, 98, 128):
            x = load("fft1d_%d_in.f64" % n, "f8").view(np.complex128)
            y = load("fft1d_%d_out.f64" % n, "f8").view(np.complex128)
            ref = np.fft.fft(x)
            report("fft 1D length %d numpy.fft.fft vs md.h" % n, rel(y, ref) < 1e-12, "rel %.3g" % rel(y, ref))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
