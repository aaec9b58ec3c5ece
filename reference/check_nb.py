"""Compare md.h's nonbonded code with the float64 numpy reference (reference/nb.py).

Runs build/reference/dump_nb (see its header for the systems and cases), then checks:
  exclusions  md.h's exclusion lists (1-4 scaled, and 1-4 kept) and 1-4 pairs equal the ones
              numpy derives from the bonds by its own search: exactly.
  water       the builder's boxes: every O-H distance is the model's d_OH and every H-H d_HH
              within 2e-6 nm (float coordinates of about 2 nm carry 1.2e-7 nm of rounding
              each); no two atoms of different molecules closer than 0.17 nm (the builder's
              rule, 1e-6 nm slack for float rounding); neutral to 1e-4 e; density 0.997 g/cm^3
              to 1e-3; the parameters equal OpenMM's tip3p.xml / spce.xml values.
  all_pairs   MD_NB_CPU_ALL_PAIRS (double) vs numpy, per case: every energy term within
              1e-12 of the sum of |pair energies| of the system, forces within 1e-12 of the
              largest force, virial within 1e-12 of its largest entry. Both are float64 on
              the same float32 coordinates; only the summation order (and libm's erfc vs
              scipy's, each within a few ulp) differ: the measured differences are below 1e-14.
  fixed       MD_NB_CPU_FIXED (float pair arithmetic, fixed-point sums) vs numpy: each energy
              term within 1e-6 of the sum of |pair energies| (each float pair term carries a
              relative error of a few 1e-7: the erfc fit's 1.2e-7, md_expf's 2e-7 and some
              roundings; measured: below 1e-7); each force component within 4e-6 of the sum,
              over the atom's pairs, of the magnitudes of the terms of the pair force (LJ
              repulsion and dispersion separately: they cancel near the minimum, their
              rounding does not) plus 1e-6 kJ/mol/nm (measured: below 1.4e-6); the virial
              within 4e-6 of the same sum of |r F| terms over all pairs.
Prints PASS/FAIL lines; exits non-zero on any failure."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LJ_MODES = {1: "shift", 2: "truncate", 3: "switch", 4: "none"}
COUL_MODES = {1: "ewald", 2: "cutoff", 3: "rf", 4: "none"}
TERMS = ["lj", "lj_dispersion", "lj14", "coul_real", "coul14", "coul_excl", "coul_self"]
failed = 0


def report(name, ok, why=""):
    global failed
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    failed += 0 if ok else 1


def csr_pairs(start, excl):
    out = set()
    for i in range(len(start) - 1):
        for j in excl[start[i]:start[i + 1]]:
            out.add((i, int(j)))
    return out


def check_system(d, e, name, n, ntypes, nbond, box, water):
    load = lambda suffix, t: np.fromfile(os.path.join(d, "%s_%s" % (name, suffix)), dtype=e + t)  # noqa: E731
    xyzq = load("xyzq.f32", "f4").reshape(n, 4).astype(np.float64)
    types = load("type.i32", "i4")
    bonds = load("bond.i32", "i4").reshape(nbond, 2)
    sigma, eps = load("sigma.f64", "f8"), load("eps.f64", "f8")
    bl = [tuple(int(x) for x in b) for b in bonds]
    excl, p14 = nb.exclusions(n, bl, "scale")
    keep_excl, _ = nb.exclusions(n, bl, "keep")
    got = csr_pairs(load("excl_start.i32", "i4"), load("excl.i32", "i4"))
    want = excl | {(j, i) for i, j in excl}
    start = load("excl_start.i32", "i4")
    rows_sorted = all(np.all(np.diff(load("excl.i32", "i4")[start[i]:start[i + 1]]) > 0) for i in range(n))
    report("%s exclusions (1-4 scaled) equal numpy's from the bonds" % name, got == want and rows_sorted,
           "%d vs %d pairs, rows sorted %s" % (len(got), len(want), rows_sorted))
    got14 = sorted(tuple(int(x) for x in p) for p in load("pair14.i32", "i4").reshape(-1, 2))
    report("%s 1-4 pairs equal numpy's" % name, got14 == p14, "%d vs %d pairs" % (len(got14), len(p14)))
    gotk = csr_pairs(load("keep_excl_start.i32", "i4"), load("keep_excl.i32", "i4"))
    report("%s exclusions (1-4 kept) equal numpy's" % name, gotk == keep_excl | {(j, i) for i, j in keep_excl},
           "%d vs %d pairs" % (len(gotk), 2 * len(keep_excl)))
    if water:
        check_water(name, xyzq, box, water)
    for line in open(os.path.join(d, "%s_cases.txt" % name)):
        f = line.split()
        case = f[0]
        p = {"lj": LJ_MODES[int(f[1])], "coul": COUL_MODES[int(f[2])], "cutoff": float(f[3]),
             "rsw": float(f[5]), "eps_rf": float(f[6]), "beta": float(f[7]), "disp": int(f[8]) == 1}
        c6, c12 = nb.lj_table(sigma, eps, f[9], [(0, 2, 0.29, 0.5)] if name == "mix" else [])
        ref = nb.nonbonded(xyzq, types, c6, c12, box, excl, p14, 0.5, 1 / 1.2, p)
        fmax = max(np.abs(ref["force"]).max(), 1e-30)  # all zero (no LJ, no charges): exact zeros wanted
        wmax = max(np.abs(ref["virial"]).max(), 1e-30)
        wabs = ref["wabs"]
        for rung, etol, tol in (("all_pairs", 1e-12, 1e-12), ("fixed", 1e-6, 4e-6)):
            buf = np.fromfile(os.path.join(d, "%s_%s_%s.f64" % (name, case, rung)), dtype=e + "f8")
            en, vir, force = buf[:7], buf[7:16].reshape(3, 3), buf[16:].reshape(n, 3)
            eref = np.array([ref[k] for k in TERMS])
            escale = max(ref["eabs"], 1.0)
            de = np.abs(en - eref)
            ok_e = np.all(de <= etol * escale)
            worst = TERMS[int(np.argmax(de))]
            report("%s %s %s energies vs numpy" % (name, case, rung), ok_e,
                   "worst %s: md.h %.12g numpy %.12g (|diff| %.3g, allowed %.3g)" %
                   (worst, en[TERMS.index(worst)], ref[worst], de.max(), etol * escale))
            if rung == "all_pairs":
                df = np.abs(force - ref["force"]).max() / fmax
                dw = np.abs(vir - ref["virial"]).max() / wmax
                report("%s %s %s forces and virial vs numpy" % (name, case, rung), df <= tol and dw <= tol,
                       "max |dF| / max |F| %.3g, max |dW| / max |W| %.3g (tol %g)" % (df, dw, tol))
            else:
                lim = np.repeat(tol * ref["fabs"][:, None] + 1e-6, 3, axis=1)
                df = np.abs(force - ref["force"])
                dw = np.abs(vir - ref["virial"]).max()
                ok = np.all(df <= lim) and dw <= tol * wabs
                k = np.unravel_index(np.argmax(df / lim), df.shape)
                report("%s %s %s forces and virial vs numpy" % (name, case, rung), ok,
                       "atom %d: |dF| %.3g allowed %.3g; max |dW| %.3g allowed %.3g" %
                       (k[0], df[k], lim[k], dw, tol * wabs))


def check_water(name, xyzq, box, w):
    d_oh, d_hh, q_o, q_h, sig_o, eps_o, t_doh, t_dhh = w
    n = len(xyzq)
    pos = xyzq[:, :3]
    mol = pos.reshape(-1, 3, 3)
    doh = np.concatenate([np.linalg.norm(mol[:, 1] - mol[:, 0], axis=1), np.linalg.norm(mol[:, 2] - mol[:, 0], axis=1)])
    dhh = np.linalg.norm(mol[:, 2] - mol[:, 1], axis=1)
    ok = np.abs(doh - d_oh).max() <= 2e-6 and np.abs(dhh - d_hh).max() <= 2e-6
    ok = ok and t_doh == d_oh and t_dhh == d_hh
    report("%s builder geometry (O-H %.5f, H-H %.5f nm)" % (name, d_oh, d_hh), ok,
           "max |dOH| %.3g, max |dHH| %.3g" % (np.abs(doh - d_oh).max(), np.abs(dhh - d_hh).max()))
    i, j = np.triu_indices(n, 1)
    inter = (i // 3) != (j // 3)
    dd = nb.min_image(pos[i[inter]] - pos[j[inter]], box)
    rmin = np.sqrt((dd * dd).sum(axis=1)).min()
    report("%s builder: no intermolecular pair closer than 0.17 nm" % name, rmin >= 0.17 - 1e-6, "closest %.4f nm" % rmin)
    qtot = xyzq[:, 3].sum()
    dens = (n // 3) * (15.99943 + 2 * 1.007947) / 6.02214076e23 / (np.prod(box) * 1e-21)
    charges = np.allclose(xyzq[0::3, 3], q_o, atol=1e-7) and np.allclose(xyzq[1::3, 3], q_h, atol=1e-7)
    report("%s builder: charges, neutrality, density" % name, abs(qtot) < 1e-4 and abs(dens - 0.997) < 1e-3 and charges,
           "total charge %.3g, density %.5f g/cm^3" % (qtot, dens))
    openmm = {"tip3p": (0.09572, -0.834, 0.417, 0.31507524065751241, 0.635968, 1.82421813418),
              "spce": (0.1, -0.8476, 0.4238, 0.31657195050398818, 0.6497752, 1.91061193216)}[name]
    report("%s parameters equal OpenMM's %s.xml" % (name, name),
           np.allclose([d_oh, q_o, q_h, sig_o, eps_o], openmm[:5], rtol=1e-15, atol=0)
           and abs(d_hh - 2 * openmm[0] * np.sin(openmm[5] / 2)) < 1e-15, "values differ")


def main():
    with tempfile.TemporaryDirectory() as d:
        e, meta = nb.run_dump(ROOT, d)
        water = None
        for f in meta:
            if f[0] == "water":
                water = [float(x) for x in (f[2], f[3], f[5], f[6], f[7], f[8], f[9], f[10])]
            elif f[0] == "system":
                check_system(d, e, f[1], int(f[2]), int(f[3]), int(f[4]), np.array([float(x) for x in f[5:8]]),
                             water if f[1] in ("tip3p", "spce") else None)
    print("check_nb: %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
