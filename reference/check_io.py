"""Check md.h's PQR, PDB, XYZ and PSF readers against reference/io.py (plain-Python float64).

Random files (numpy seed 2026) are written here, read by build/reference/dump_io (md.h)
and by reference/io.py, and compared: counts, names, residues, chains, insertion codes,
alternate locations, elements, segments, type names, types, bonds, element masses and
status (MD_WARN_CELL) exactly; positions, charges, radii, PSF masses, box and cell to
float32 rounding (rtol 1.2e-7: md.h stores floats, each the nearest float to the float64
value, half an ulp = 6e-8 relative). Bad files must be rejected by both, naming the same
line and field.
Prints PASS/FAIL lines; exits non-zero on any failure."""
import os
import subprocess
import sys
import tempfile

import numpy as np

import importlib.util

# reference/io.py is loaded by path: "import io" would find Python's own io module
_spec = importlib.util.spec_from_file_location("md_io_ref", os.path.join(os.path.dirname(__file__), "io.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DUMP = os.path.join(ROOT, "build", "reference", "dump_io")
RTOL = 1.2e-7
failures = 0


def report(ok, name, why=""):
    global failures
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
    failures += not ok


def dump(fmt, path):
    p = subprocess.run([DUMP, fmt, path], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stdout.strip()
    out = {"atoms": [], "bonds": []}
    dash = lambda t: "" if t == "-" else t
    for ln in p.stdout.splitlines():
        f = ln.split()
        if f[0] == "box":
            out["box"] = [float(v) for v in f[1:]]
        elif f[0] == "cell":
            out["cell"] = [float(v) for v in f[1:]]
        elif f[0] == "status":
            out["warn"] = f[1] == "warn"
        elif f[0] == "bond":
            out["bonds"].append((int(f[1]), int(f[2])))
        elif f[0] == "atom":
            out["atoms"].append({"name": dash(f[1]), "resname": dash(f[2]), "resid": int(f[3]),
                                 "xyz": [float(v) for v in f[4:7]], "q": float(f[7]), "r": float(f[8]),
                                 "mass": float(f[9]), "type": int(f[10]), "chain": dash(f[11]),
                                 "icode": dash(f[12]), "altloc": dash(f[13]), "element": dash(f[14]),
                                 "segid": dash(f[15]), "type_name": dash(f[16])})
    return out, ""


READERS = {"pqr": ref.read_pqr, "pdb": ref.read_pdb, "xyz": ref.read_xyz, "psf": ref.read_psf}
EXACT = ("name", "resname", "resid", "type", "chain", "icode", "altloc", "element", "segid", "type_name")


def compare(name, fmt, text, want_bonds=None, want_warn=False):
    path = os.path.join(tmp, name)
    with open(path, "w", newline="") as fh:
        fh.write(text)
    want = READERS[fmt](text)
    got, err = dump(fmt, path)
    if got is None:
        return report(False, name, f"md.h rejected it: {err}")
    if len(got["atoms"]) != len(want["atoms"]):
        return report(False, name, f"{len(got['atoms'])} atoms, reference {len(want['atoms'])}")
    if got["warn"] != want["warn"] or want["warn"] != want_warn:
        return report(False, name, f"status warn={got['warn']}, reference {want['warn']}, expected {want_warn}")
    if not np.allclose(got["box"], want["box"], rtol=RTOL, atol=0):
        return report(False, name, f"box {got['box']} vs {want['box']}")
    if not np.allclose(got["cell"], want["cell"], rtol=RTOL, atol=0):
        return report(False, name, f"cell {got['cell']} vs {want['cell']}")
    if got["bonds"] != [tuple(b) for b in want["bonds"]]:
        return report(False, name, f"{len(got['bonds'])} bonds {got['bonds'][:4]}..., reference "
                                   f"{len(want['bonds'])} {want['bonds'][:4]}...")
    if want_bonds is not None and len(want["bonds"]) != want_bonds:
        return report(False, name, f"{len(want['bonds'])} bonds, the file was written with {want_bonds}")
    for i, (g, w) in enumerate(zip(got["atoms"], want["atoms"])):
        for key in EXACT:
            if g[key] != w[key]:
                return report(False, name, f"atom {i} {key}: {g[key]!r} vs {w[key]!r}")
        gv = np.array(g["xyz"] + [g["q"], g["r"], g["mass"]])
        wv = np.array(w["xyz"] + [w["q"], w["r"], w["mass"]])
        if not np.allclose(gv, wv, rtol=RTOL, atol=1e-30):
            return report(False, name, f"atom {i}: {gv} vs {wv}")
    report(True, f"{name} ({len(want['atoms'])} atoms, {len(want['bonds'])} bonds)")


def compare_bad(name, fmt, text):
    path = os.path.join(tmp, name)
    with open(path, "w", newline="") as fh:
        fh.write(text)
    try:
        READERS[fmt](text)
        return report(False, name, "the reference accepted it")
    except ref.BadInput as e:
        where = f"{name}:{e.line}: field {e.field}:"
    got, err = dump(fmt, path)
    if got is not None:
        return report(False, name, "md.h accepted it")
    report(where in err, f"{name} rejected at '{where}'", f"md.h said: {err}")


rng = np.random.default_rng(2026)
NAMES = ["N", "CA", "C", "O", "CB", "1HB", "OW", "HW1", "NA", "CL", "ZN", "SE", "K", "MG", "CL1", "FE", "BR",
         "SOD", "CLA", "POT", "CAL", "NB", "HG21", "F1", "LONGNAME8"]
RES = ["ALA", "GLY", "HOH", "NA", "CL", "ZN", "LIG", "SOL", "NA+", "CL-", "SOD", "CLA", "POT", "CAL", "ZN2",
       "HEM", "MG", "CA", "TIP3"]


def pick(seq):
    return seq[rng.integers(len(seq))]


def coord():
    return rng.uniform(-99.0, 999.0)


def pqr_text(n):
    out = ["REMARK   1 PQR FILE GENERATED BY check_io.py"]
    for i in range(n):
        name, res = pick(NAMES), pick(RES)
        if rng.random() < 0.3:
            name = res = pick(["NA", "CL", "ZN", "K", "SOD", "CLA", "POT", "CAL"])
        chain = pick([" A", " B", " XY", ""])
        resseq = str(int(rng.integers(-50, 5000))) + pick(["", "", "A", "B"])
        if not chain and rng.random() < 0.3:  # a chain letter run into a 4-digit resSeq
            resseq = pick("ABW") + str(int(rng.integers(1000, 9999))) + pick(["", "C"])
        x, y, z = (coord() for _ in range(3))
        q, r = rng.uniform(-1, 1), rng.uniform(0, 2.5)
        digits = int(rng.integers(1, 8))
        ln = (f"{'ATOM' if rng.random() < 0.8 else 'HETATM'} {i + 1:6d} {name:4s} {res}{chain} "
              f"{resseq:>5s} {x:.{digits}f} {y:.3f} {z:.{digits}e} {q:.4f} {r:.4f}")
        out.append(ln + ("\r" if rng.random() < 0.2 else ""))
        if rng.random() < 0.05:
            out.append("TER")
    return "\n".join(out + ["END", ""])


def pdb_text(n, triclinic=False, bonds=0):
    a, b, c = rng.uniform(10, 200, 3)
    if triclinic:
        cryst = f"CRYST1{a:9.3f}{b:9.3f}{c:9.3f}{90:7.2f}{rng.uniform(95, 125):7.2f}{90:7.2f} P 1           1"
    else:
        cryst = pick([f"CRYST1{a:9.3f}{b:9.3f}{c:9.3f}{90:7.2f}{90:7.2f}{90:7.2f} P 1           1",
                      f"CRYST1{0:9.3f}{0:9.3f}{0:9.3f}{90:7.2f}{90:7.2f}{90:7.2f} P 1           1"])
    out = [cryst]
    for i in range(n):
        name, res = pick(NAMES[:-1]), pick(RES)
        el = pick(["", "", "C", "N", "O", "H", "NA", "CL", "CA", "SE", "FE", "XX"])
        ch = pick(["", "", "1+", "2-", "+1", "-2", "0", " 0"])
        x, y, z = (coord() for _ in range(3))
        nm = f" {name:<3s}" if len(name) < 4 else name
        resseq = f"{int(rng.integers(-999, 9999)):4d}{pick([' ', ' ', 'A', 'B'])}"
        if rng.random() < 0.1:
            resseq = f"{int(rng.integers(10000, 99999)):5d}"
        out.append(f"{'ATOM  ' if rng.random() < 0.8 else 'HETATM'}{i + 1:5d} {nm:<4s}{pick(' ABC')}{res:<4s}"
                   f"{pick(' AB')}{resseq}   {x:8.3f}{y:8.3f}{z:8.3f}{1.0:6.2f}{0.0:6.2f}      "
                   f"{pick(['', 'PROA', 'W1'])[:4]:<4s}{el:>2s}{ch:2s}".rstrip())
    out += ["ENDMDL", "ATOM      1  N   GLY A   1       1.000   1.000   1.000"]
    for _ in range(bonds):
        i, j = rng.choice(n, 2, replace=False) + 1
        out.append(f"CONECT{i:5d}{j:5d}" + (f"{int(rng.integers(1, n + 1)):5d}" if rng.random() < 0.3 else ""))
    return "\n".join(out + ["END", ""])


def xyz_text(n):
    box = rng.uniform(10, 100, 3)
    out = [f"{n}", f'Lattice="{box[0]:.6f} 0 0 0 {box[1]:.6f} 0 0 0 {box[2]:.6f}" Properties=species:S:1:pos:R:3']
    for _ in range(n):
        sym = pick(["H", "C", "N", "O", "S", "P", "Na", "Cl", "K", "Mg", "Ca", "Fe", "Zn", "Ar", "Se", "X", "OW",
                    "HW1", "CL1", "Br", "cs"])
        x, y, z = (coord() for _ in range(3))
        out.append(f"{sym}\t{x:.9f}  {y:.4e} {z:.2f}" + (" 1.0 2.0" if rng.random() < 0.3 else ""))
    out += ["1", "second frame", "C 0 0 0"]
    return "\n".join(out + [""])


def psf_text(n, flavour, nbond):
    """A PSF in one of the layouts md_read_psf documents (CHARMM standard and EXT, X-PLOR, NAMD)."""
    head = {"std": "PSF", "ext": "PSF EXT CMAP XPLOR", "namd": "PSF NAMD", "xplor": "PSF"}[flavour]
    out = [head, "", "       2 !NTITLE", "* random PSF written by check_io.py", "*  seed 2026", "",
           f"{n:8d} !NATOM"]
    for i in range(n):
        name, res = pick(NAMES[:-1]), pick(RES)
        seg = pick(["PROA", "WAT", "IONS", "SOLVENT1"]) if flavour in ("ext", "namd") else pick(["PROA", "WAT", ""])
        resid = f"{int(rng.integers(1, 9999))}{pick(['', '', 'A'])}"
        typ = (str(int(rng.integers(1, 99))) if flavour == "std" else
               pick(["CT1", "HA", "OT", "HT", "SOD", "CLA", "CG2R61", "NH3"]))
        q, m = rng.uniform(-1.5, 1.5), pick([rng.uniform(1, 60), 0.0, 1.008, 15.9994])
        imove = "" if flavour == "xplor" and seg else f"{0:8d}"
        if flavour == "ext":
            ln = f"{i + 1:10d} {seg:<8s} {resid:<8s} {res:<8s} {name:<8s} {typ:<6s} {q:14.6g}{m:14.6g}{imove}"
        else:
            ln = f"{i + 1:8d} {seg:<4s} {resid:<4s} {res:<4s} {name:<4s} {typ:<4s} {q:14.6g}{m:14.6g}{imove}"
        if flavour == "namd" and rng.random() < 0.2:
            ln += f"{rng.uniform(-1, 0):14.6g}{rng.uniform(0, 3):14.6g}"  # Drude alpha, thole
        out.append(ln)
    out += ["", f"{nbond:8d} !NBOND: bonds"]
    ids = []
    for _ in range(nbond):
        i, j = rng.choice(n, 2, replace=False) + 1
        ids += [i, j]
    w = 10 if flavour == "ext" else 8
    for k in range(0, len(ids), 8):
        out.append("".join(f"{v:{w}d}" for v in ids[k:k + 8]))
    out += ["", f"{2:8d} !NTHETA: angles", f"{1:8d}{2:8d}{3:8d}{2:8d}{3:8d}{4:8d}", ""]
    return "\n".join(out + [""])


if not os.access(DUMP, os.X_OK):
    print(f"FAIL check_io: {DUMP} is not built (make)")
    sys.exit(1)

with tempfile.TemporaryDirectory() as tmp:
    compare("random.pqr", "pqr", pqr_text(400))
    compare("random.pdb", "pdb", pdb_text(400, bonds=60))
    compare("random_box.pdb", "pdb", pdb_text(50))
    compare("random_tric.pdb", "pdb", pdb_text(50, triclinic=True), want_warn=True)
    compare("random.xyz", "xyz", xyz_text(400))
    for fl in ("std", "ext", "namd", "xplor"):
        compare(f"random_{fl}.psf", "psf", psf_text(300, fl, 250))
    compare_bad("trunc.xyz", "xyz", "10\ncomment\n" + "C 1.000 2.000 3.000\n" * 7)
    compare_bad("nan.xyz", "xyz", "2\n\nC 1.000 2.000 3.000\nO 1.000 nan 3.000\n")
    compare_bad("absurd.xyz", "xyz", "100000\n\nC 1.000 2.000 3.000\n")
    compare_bad("lattice.xyz", "xyz", '1\nLattice="10 0 0 0 0 0 0 0 10"\nC 1 2 3\n')
    compare_bad("cut.xyz", "xyz", "2\n\nC 1.000 2.000 3.000\nO 1.000 2.000 0.1")
    compare_bad("short.pqr", "pqr", "REMARK\nATOM 1 N ALA 1 1.0 2.0 3.0\n")
    compare_bad("bad.pqr", "pqr", "REMARK\nREMARK\nATOM 1 N ALA 1 1.2.3 2.0 3.0 0.1 1.5\n")
    compare_bad("cut.pqr", "pqr", "ATOM 1 N ALA 1 1.0 2.0 3.0 0.1 1.5\nATOM 2 O ALA 1 1.0 2.0 3.0 -0.17 1.5")
    compare_bad("longname.pqr", "pqr", "ATOM 1 VERYLONGNAME16CH ALA 1 1.0 2.0 3.0 0.1 1.5\n")
    compare_bad("tric.pdb", "pdb", "CRYST1   30.000   40.000   50.000  90.00 180.00  90.00 P 1           1\n"
                "ATOM      1  O   HOH     1       1.000   2.000   3.000\n")
    compare_bad("short.pdb", "pdb", "ATOM      1  N   GLY A   1      11.104   6.1\n")
    compare_bad("cut.pdb", "pdb", "ATOM      1  N   GLY A   1      11.104   6.134  -6.504  1.00  0.")
    compare_bad("conect.pdb", "pdb", "ATOM      1  N   GLY A   1      11.104   6.134  -6.504\nCONECT    1    7\n")
    compare_bad("noheader.psf", "psf", "       1 !NTITLE\n* x\n")
    compare_bad("order.psf", "psf", "PSF\n\n       1 !NTITLE\n* x\n\n       2 !NATOM\n"
                "       2 A    1    ALA  N    NH1   -0.47   14.007   0\n"
                "       1 A    1    ALA  CA   CT1    0.07   12.011   0\n")
    compare_bad("bondrange.psf", "psf", "PSF\n\n       1 !NTITLE\n* x\n\n       1 !NATOM\n"
                "       1 A    1    ALA  N    NH1   -0.47   14.007   0\n\n       1 !NBOND: bonds\n       1       2\n")
    compare_bad("cutbond.psf", "psf", "PSF\n\n       1 !NTITLE\n* x\n\n       2 !NATOM\n"
                "       1 A    1    ALA  N    NH1   -0.47   14.007   0\n"
                "       2 A    1    ALA  CA   CT1    0.07   12.011   0\n\n       1 !NBOND: bonds\n       1       2")

print(f"{'all' if failures == 0 else failures} {'passed' if failures == 0 else 'failed'}")
sys.exit(1 if failures else 0)
