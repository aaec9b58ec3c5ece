"""Compare md.h's RDF and DCD code with the float64 numpy reference (reference/rdf.py).

Runs build/reference/dump_rdf (see its header for the problem), then checks:
  counts   numpy float64 counts vs md.h's float counts. The only legitimate differences are
           pairs within float rounding of a bin edge: per bin |diff| <= 2 + 1e-3 * count and the
           total over all bins differs by at most 2 pairs (a pair may only move to a neighbour bin
           or across rmax).
  norm     g(r), n(r) recomputed in numpy from md.h's own counts with the independent formula:
           relative 1e-12 (same integers, double arithmetic in a different order).
  g        numpy's g(r) from its own counts vs md.h's: per bin within 5 counts' worth.
  dcd      both byte orders read by the independent parser give the written positions within
           1e-6 relative + 1e-7 nm (nm -> Angstrom float32 -> nm), boxes within 1e-12.
Prints PASS/FAIL lines; exits non-zero on any failure."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failed = 0


def report(name, ok, why=""):
    global failed
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    failed += 0 if ok else 1


def main():
    exe = os.path.join(ROOT, "build", "reference", "dump_rdf")
    if not os.path.exists(exe):
        subprocess.check_call(["make", "-s", "build/reference/dump_rdf"], cwd=ROOT)
    with tempfile.TemporaryDirectory() as d:
        subprocess.check_call([exe, d])
        meta = {}
        for line in open(os.path.join(d, "meta.txt")):
            k, *v = line.split()
            meta[k] = v
        e = "<" if meta["endian"][0] == "little" else ">"
        n, nbins, rmax = int(meta["n"][0]), int(meta["nbins"][0]), float(meta["rmax"][0])
        box = np.array([float(x) for x in meta["box"]])
        load = lambda name, t: np.fromfile(os.path.join(d, name), dtype=e + t)  # noqa: E731
        pos = load("pos.f32", "f4").reshape(n, 3).astype(np.float64)
        sa, sb = load("sel_a.i32", "i4"), load("sel_b.i32", "i4")
        for case, sel_b in (("same", None), ("ab", sb)):
            sel_a = np.arange(n) if sel_b is None else sa
            c_counts = load(case + "_counts.u64", "u8").astype(np.int64)
            c_g, c_n = load(case + "_g.f64", "f8"), load(case + "_n.f64", "f8")
            ref = rdf.rdf_counts(pos, box, sel_a, sel_b, rmax, nbins)
            diff = np.abs(c_counts - ref)
            ok = np.all(diff <= 2 + 1e-3 * ref) and abs(int(c_counts.sum()) - int(ref.sum())) <= 2
            report("rdf counts %s (numpy float64 vs md.h)" % case, ok,
                   "max diff %d, totals %d vs %d" % (diff.max(), c_counts.sum(), ref.sum()))
            spd, sc = rdf.selection_norm(sel_a, sel_b, box)
            if case == "ab":
                sums = load("ab_sum.f64", "f8")
                report("rdf normalization sums ab", np.allclose(sums, [spd, sc], rtol=1e-12, atol=0),
                       "%s vs %s" % (sums, [spd, sc]))
            g, nn = rdf.normalize(c_counts, rmax, spd, sc)
            report("rdf g and n from md.h counts %s" % case,
                   np.allclose(g, c_g, rtol=1e-12, atol=0) and np.allclose(nn, c_n, rtol=1e-12, atol=0),
                   "max |dg| %.3g, max |dn| %.3g" % (np.abs(g - c_g).max(), np.abs(nn - c_n).max()))
            g_ref, _ = rdf.normalize(ref, rmax, spd, sc)
            one = rdf.normalize(np.ones(nbins), rmax, spd, sc)[0]  # g of one count per bin
            report("rdf g numpy vs md.h %s" % case, np.all(np.abs(g_ref - c_g) <= 5 * one),
                   "max |dg| %.3g" % np.abs(g_ref - c_g).max())
        frames = [pos.copy(), pos.copy()]
        frames[1][:, 0] += np.float32(0.1)
        frames[1] = frames[1].astype(np.float32).astype(np.float64)
        boxes = [box, box + np.array([0, 0, 0.2])]
        for tag in ("le", "be"):
            got = rdf.read_dcd(os.path.join(d, "traj_%s.dcd" % tag))
            ok = len(got) == 2
            for f in range(min(2, len(got))):
                xyz, b = got[f]
                ok = ok and np.allclose(xyz, frames[f], rtol=1e-6, atol=1e-7)
                ok = ok and b is not None and np.allclose(b, boxes[f], rtol=1e-12, atol=0)
            report("dcd %s-endian read by numpy" % tag, ok, "%d frames or positions/box differ" % len(got))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
