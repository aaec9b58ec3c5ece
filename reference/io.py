"""Independent float64 readers for PQR, PDB and XYZ in plain Python: the reference
for md.h's readers (reference/check_io.py compares them).

They follow the rules documented in md.h's io section, written again from that text:
Angstrom -> nm (x 0.1), masses from a small element table, types = index of the
atom name among distinct names in order of first appearance. A malformed file
raises BadInput(line, field, message), with the same line and field md.h names."""
import math

MASSES = {"H": 1.008, "C": 12.011, "N": 14.007, "O": 15.999, "S": 32.06, "P": 30.974,
          "NA": 22.990, "CL": 35.45, "K": 39.098, "MG": 24.305, "CA": 40.078,
          "FE": 55.845, "ZN": 65.38, "AR": 39.948}


class BadInput(ValueError):
    def __init__(self, line, field, message):
        super().__init__(f"{line}: field {field}: {message}")
        self.line, self.field = line, field


def element_mass(symbol):
    return MASSES.get(symbol.upper(), 0.0)


def guess_mass(name, resname, element=""):
    """Element column; else a two-letter ion named like its residue; else the first letter
    after leading digits."""
    if element:
        return element_mass(element)
    if len(name) == 2 and name.upper() == resname.upper() and name.upper() in MASSES:
        return MASSES[name.upper()]
    return element_mass(name.lstrip("0123456789")[:1])


def number(text, line, field):
    """A float64 field: all of it a number, finite, within float32 range."""
    try:
        v = float(text)
    except ValueError:
        raise BadInput(line, field, "not a number") from None
    if not math.isfinite(v) or abs(v) > 3.4028234663852886e38:
        raise BadInput(line, field, "not finite")
    return v


def types_of(names):
    seen = {}
    return [seen.setdefault(n, len(seen)) for n in names]


def finish(atoms, box=(0.0, 0.0, 0.0)):
    for a, t in zip(atoms, types_of([a["name"] for a in atoms])):
        a["type"] = t
    return {"atoms": atoms, "box": list(box)}


def atom(name, resname="", resid=0, xyz=(0, 0, 0), q=0.0, r=0.0, mass=0.0):
    return {"name": name[:7], "resname": resname[:7], "resid": resid,
            "xyz": [0.1 * c for c in xyz], "q": q, "r": 0.1 * r, "mass": mass}


def lines_of(text):
    return [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]


def read_pqr(text):
    atoms = []
    for no, ln in enumerate(lines_of(text), 1):
        f = ln.split()
        if not f or f[0] not in ("ATOM", "HETATM"):
            continue
        if len(f) < 10:
            raise BadInput(no, ["record", "serial", "name", "resName", "resSeq", "x", "y", "z", "q", "r"][len(f)],
                           "missing")
        if len(f) > 11:
            raise BadInput(no, "fields", "too many")
        try:
            resid = int(f[-6])
        except ValueError:
            raise BadInput(no, "resSeq", "not an integer") from None
        x, y, z, q, r = (number(f[k - 5], no, fld) for k, fld in enumerate(["x", "y", "z", "q", "r"]))
        if r < 0:
            raise BadInput(no, "r", "negative")
        atoms.append(atom(f[2], f[3], resid, (x, y, z), q, r, guess_mass(f[2][:7], f[3][:7])))
    if not atoms:
        raise BadInput(max(1, len(lines_of(text)) - (1 if text.endswith("\n") else 0)), "ATOM", "no atoms")
    return finish(atoms)


def cols(ln, a, b):
    return ln[a - 1:b].strip()


def read_pdb(text):
    atoms, box, cryst = [], [0.0, 0.0, 0.0], None
    for no, ln in enumerate(lines_of(text), 1):
        if ln.startswith("ENDMDL") or ln.startswith("END") and (len(ln) == 3 or ln[3] in " \t"):
            break
        if ln.startswith("CRYST1"):
            if cryst:
                raise BadInput(no, "CRYST1", "second CRYST1")
            cryst = no
            v = []
            for fld, a, b in [("a", 7, 15), ("b", 16, 24), ("c", 25, 33), ("alpha", 34, 40), ("beta", 41, 47),
                              ("gamma", 48, 54)]:
                if len(ln) < b:
                    raise BadInput(no, fld, "missing")
                v.append(number(cols(ln, a, b), no, fld))
            for fld, ang in zip(["alpha", "beta", "gamma"], v[3:]):
                if abs(ang - 90) > 1e-3:
                    raise BadInput(no, fld, "not 90")
            for fld, e in zip("abc", v[:3]):
                if not e > 0:
                    raise BadInput(no, fld, "edge <= 0")
            box = [0.0, 0.0, 0.0] if v[:3] == [1.0, 1.0, 1.0] else [0.1 * e for e in v[:3]]
            continue
        if not (ln.startswith("ATOM") or ln.startswith("HETATM")):
            continue
        xyz = []
        for k, fld in enumerate("xyz"):
            if len(ln) < 38 + 8 * k:
                raise BadInput(no, fld, "missing")
            xyz.append(number(cols(ln, 31 + 8 * k, 38 + 8 * k), no, fld))
        rs = cols(ln, 23, 26)
        resid = int(rs) if rs else 0
        ch = cols(ln, 79, 80)
        q = 0.0
        if ch:
            if len(ch) == 2 and ch[0].isdigit() and ch[1] in "+-":
                q = float(ch[0]) * (-1 if ch[1] == "-" else 1)
            elif len(ch) == 2 and ch[1].isdigit() and ch[0] in "+-":
                q = float(ch[1]) * (-1 if ch[0] == "-" else 1)
            else:
                raise BadInput(no, "charge", "bad")
        name, resname = cols(ln, 13, 16), cols(ln, 18, 21)
        atoms.append(atom(name, resname, resid, xyz, q, 0.0, guess_mass(name, resname, cols(ln, 77, 78))))
    if not atoms:
        raise BadInput(1, "ATOM", "no atoms")
    return finish(atoms, box)


def read_xyz(text):
    """First frame."""
    lines = lines_of(text)
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines) and not lines[i].split():
        i += 1
    if i == len(lines):
        raise BadInput(max(1, i), "atom count", "missing")
    f = lines[i].split()
    if len(f) != 1:
        raise BadInput(i + 1, "atom count", "more than the count")
    try:
        n = int(f[0])
    except ValueError:
        raise BadInput(i + 1, "atom count", "not an integer") from None
    if n <= 0:
        raise BadInput(i + 1, "atom count", "not positive")
    if n > len(text[sum(len(x) + 1 for x in text.split("\n")[:i + 1]):]) // 8:
        raise BadInput(i + 1, "atom count", "cannot fit")
    box = [0.0, 0.0, 0.0]
    comment = lines[i + 1]
    if 'Lattice="' in comment:
        inner = comment.split('Lattice="', 1)[1].split('"')[0]
        m = [number(t, i + 2, "Lattice") for t in inner.split()]
        if len(m) != 9 or any(m[k] != 0 for k in (1, 2, 3, 5, 6, 7)) or not all(m[k] > 0 for k in (0, 4, 8)):
            raise BadInput(i + 2, "Lattice", "bad")
        box = [0.1 * m[0], 0.1 * m[4], 0.1 * m[8]]
    atoms = []
    for k in range(n):
        no = i + 3 + k
        if no > len(lines):
            raise BadInput(no, "atoms", "truncated")
        f = lines[no - 1].split()
        if len(f) < 4:
            raise BadInput(no, ["symbol", "x", "y", "z"][len(f)], "missing")
        xyz = [number(f[c + 1], no, "xyz"[c]) for c in range(3)]
        atoms.append(atom(f[0], xyz=xyz, mass=element_mass(f[0][:7])))
    return finish(atoms, box)
