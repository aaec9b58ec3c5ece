"""Independent float64 readers for PQR, PDB, XYZ and PSF in plain Python: the reference
for md.h's readers (reference/check_io.py compares them).

They follow the rules documented in md.h's io section, written again from that text:
Angstrom -> nm (x 0.1), elements from the element column or md_guess_element's rules,
masses from a small element table (PSF: the mass column), types = index of the atom
name (PSF: type name) among distinct ones in order of first appearance, bonds 0-based,
sorted, once each. A malformed file raises BadInput(line, field, message), with the
same line and field md.h names. A PDB with a non-orthorhombic CRYST1 returns its atoms
with "warn" set (md.h returns MD_WARN_CELL)."""
import math

# IUPAC 2021 standard atomic weights, abridged as md.h's table (keys upper case)
MASSES = {"H": 1.008, "HE": 4.0026, "LI": 6.94, "B": 10.81, "C": 12.011, "N": 14.007, "O": 15.999,
          "F": 18.998, "NE": 20.180, "NA": 22.990, "MG": 24.305, "AL": 26.982, "SI": 28.085, "P": 30.974,
          "S": 32.06, "CL": 35.45, "AR": 39.948, "K": 39.098, "CA": 40.078, "MN": 54.938, "FE": 55.845,
          "CO": 58.933, "NI": 58.693, "CU": 63.546, "ZN": 65.38, "SE": 78.971, "BR": 79.904, "KR": 83.798,
          "RB": 85.468, "SR": 87.62, "CD": 112.41, "I": 126.90, "XE": 131.29, "CS": 132.91, "BA": 137.33}
# the table's spelling of each symbol
SPELLING = {k: k[0] + k[1:].lower() for k in MASSES}
# ion names (residue names, and atom names in those residues) -> element, from the list in
# md_guess_element's documentation
IONS = {}
for _el, _names in [("Na", "NA NA+ SOD"), ("Cl", "CL CL- CLA"), ("K", "K K+ POT"), ("Mg", "MG MG2 MG2+"),
                    ("Ca", "CA CA2 CA2+ CAL"), ("Zn", "ZN ZN2 ZN2+"), ("Li", "LI LI+ LIT"), ("Rb", "RB RB+ RUB"),
                    ("Cs", "CS CS+ CES"), ("Ba", "BA BA2 BAR"), ("Sr", "SR"), ("Cd", "CD CD2"), ("Mn", "MN"),
                    ("Fe", "FE FE2"), ("Cu", "CU CU1"), ("Br", "BR BR-"), ("I", "IOD"), ("F", "F F-")]:
    for _n in _names.split():
        IONS[_n] = _el
CHARMM_IONS = {"SOD": "Na", "POT": "K", "CLA": "Cl", "CAL": "Ca", "LIT": "Li", "RUB": "Rb", "CES": "Cs",
               "BAR": "Ba"}
TWO_LETTER = ["CL", "BR", "FE", "ZN", "MG", "MN", "CU", "SE"]
NAME_MAX = 15
FLT_MAX = 3.4028234663852886e38


class BadInput(ValueError):
    def __init__(self, line, field, message):
        super().__init__(f"{line}: field {field}: {message}")
        self.line, self.field = line, field


def element_mass(symbol):
    return MASSES.get(symbol.upper(), 0.0)


def guess_element(name, resname=""):
    """md_guess_element's four rules."""
    up, res = name.upper(), resname.upper()
    ion = IONS.get(res)
    if ion and (up == ion.upper() or IONS.get(up) == ion):
        return ion
    if up in CHARMM_IONS:
        return CHARMM_IONS[up]
    rest = up.lstrip("0123456789")
    if rest[:2] in TWO_LETTER:
        return SPELLING[rest[:2]]
    if rest[:1] in MASSES:
        return SPELLING[rest[:1]]
    return ""


def element_of(name, resname="", column=""):
    if column:
        return SPELLING.get(column.upper(), column)
    return guess_element(name, resname)


def number(text, line, field):
    """A float64 field: all of it a number, finite, within float32 range."""
    try:
        v = float(text)
    except ValueError:
        raise BadInput(line, field, "not a number") from None
    if not math.isfinite(v) or abs(v) > FLT_MAX:
        raise BadInput(line, field, "not finite")
    return v


def integer(text, line, field, lo=-2**31, hi=2**31 - 1):
    t = text[1:] if text[:1] in "+-" else text
    if not t.isdigit():
        raise BadInput(line, field, "not an integer")
    v = int(text)
    if not lo <= v <= hi:
        raise BadInput(line, field, "out of range")
    return v


def name_field(text, line, field):
    if len(text) > NAME_MAX:
        raise BadInput(line, field, "too long")
    return text


def resseq_icode(text, line, field):
    """'36' -> (36, ''), '36A' -> (36, 'A')."""
    if len(text) >= 2 and text[-1].isalpha() and text[-2].isdigit():
        return integer(text[:-1], line, field), text[-1]
    return integer(text, line, field), ""


def is_resid(t):
    """An optional sign, digits, an optional insertion code letter."""
    t = t[1:] if t[:1] in ("+", "-") else t
    d = t[:-1] if t[-1:].isalpha() else t
    return d.isdigit() and d.isascii()


def types_of(keys):
    seen = {}
    return [seen.setdefault(k, len(seen)) for k in keys]


def finish(atoms, box=(0.0, 0.0, 0.0), bonds=(), cell=(0.0,) * 6, key="name", warn=False):
    for a, t in zip(atoms, types_of([a[key] for a in atoms])):
        a["type"] = t
    bonds = sorted({(min(i, j), max(i, j)) for i, j in bonds})
    return {"atoms": atoms, "box": list(box), "cell": list(cell), "bonds": bonds, "warn": warn}


def atom(name, resname="", resid=0, xyz=(0, 0, 0), q=0.0, r=0.0, element="", mass=None, chain="", icode="",
         altloc="", segid="", type_name=""):
    return {"name": name, "resname": resname, "resid": resid, "xyz": [0.1 * c for c in xyz], "q": q,
            "r": 0.1 * r, "element": element, "mass": element_mass(element) if mass is None else mass,
            "chain": chain, "icode": icode, "altloc": altloc, "segid": segid, "type_name": type_name}


def lines_of(text):
    """(line, ended with an end of line) pairs; a '\\r' before the '\\n' is dropped."""
    parts = text.split("\n")
    out = [(p, True) for p in parts[:-1]]
    if parts[-1]:
        out.append((parts[-1], False))
    return [(ln[:-1], True) if ln.endswith("\r") else (ln, eol) for ln, eol in out]


def need_eol(eol, line, field):
    if not eol:
        raise BadInput(line, field, "no end of line")


def read_pqr(text):
    names = ["record", "serial", "name", "resName", "resSeq", "x", "y", "z", "q", "r"]
    atoms = []
    lines = lines_of(text)
    for no, (ln, eol) in enumerate(lines, 1):
        f = ln.split()
        if not f or f[0] not in ("ATOM", "HETATM"):
            continue
        if len(f) < 10:
            raise BadInput(no, names[len(f)], "missing")
        if len(f) > 11:
            raise BadInput(no, "fields", "too many")
        need_eol(eol, no, "r")
        rs, chain, segid = f[-6], "", ""
        if len(f) == 10 and rs[:1].isalpha() and (rs[1:2].isdigit() or rs[1:2] == "-"):
            chain, rs = rs[0], rs[1:]
        resid, icode = resseq_icode(rs, no, "resSeq")
        x, y, z, q, r = (number(f[k - 5], no, fld) for k, fld in enumerate(["x", "y", "z", "q", "r"]))
        if r < 0:
            raise BadInput(no, "r", "negative")
        name, resname = name_field(f[2], no, "name"), name_field(f[3], no, "resName")
        if len(f) == 11:
            if len(f[4]) == 1:
                chain = f[4]
            else:
                segid = name_field(f[4], no, "chain")
        atoms.append(atom(name, resname, resid, (x, y, z), q, r, guess_element(name, resname), chain=chain,
                          icode=icode, segid=segid))
    if not atoms:
        raise BadInput(max(1, len(lines)), "ATOM", "no atoms")
    return finish(atoms)


def cols(ln, a, b):
    return ln[a - 1:b].strip()


def col_char(ln, c):
    return ln[c - 1] if len(ln) >= c and not ln[c - 1].isspace() else ""


def pdb_field_at(col):
    for last, field in [(54, "z"), (60, "occupancy"), (66, "tempFactor"), (76, "segID"), (78, "element")]:
        if col <= last:
            return field
    return "charge"


def read_pdb(text):
    atoms, box, cell, cryst, serials, conect, warn = [], [0.0] * 3, [0.0] * 6, None, [], [], False
    model_done = False
    for no, (ln, eol) in enumerate(lines_of(text), 1):
        if ln.startswith("END") and (len(ln) == 3 or ln[3] in " \t\r\v\f"):
            break
        if ln.startswith("ENDMDL"):
            model_done = True
            continue
        if ln.startswith("CONECT"):
            need_eol(eol, no, "CONECT")
            a = integer(cols(ln, 7, 11), no, "CONECT", -2**63 + 1, 2**63 - 1)
            for c0 in (12, 17, 22, 27):
                if cols(ln, c0, c0 + 4):
                    conect.append((a, integer(cols(ln, c0, c0 + 4), no, "CONECT", -2**63 + 1, 2**63 - 1), no))
            continue
        if model_done:
            continue
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
            if v[:3] in ([0.0] * 3, [1.0] * 3):
                continue
            for fld, e in zip("abc", v[:3]):
                if not e > 0:
                    raise BadInput(no, fld, "edge <= 0")
            for fld, ang in zip(["alpha", "beta", "gamma"], v[3:]):
                if not 0 < ang < 180:
                    raise BadInput(no, fld, "angle out of (0, 180)")
            if all(abs(ang - 90) <= 1e-3 for ang in v[3:]):
                box = [0.1 * e for e in v[:3]]
            else:
                cell, warn = [0.1 * e for e in v[:3]] + v[3:], True
            continue
        if not (ln.startswith("ATOM") or ln.startswith("HETATM")):
            continue
        xyz = []
        for k, fld in enumerate("xyz"):
            if len(ln) < 38 + 8 * k:
                raise BadInput(no, fld, "missing")
            xyz.append(number(cols(ln, 31 + 8 * k, 38 + 8 * k), no, fld))
        if len(ln) < 80:
            need_eol(eol, no, pdb_field_at(len(ln)))
        if col_char(ln, 27).isdigit():
            rs, icode = cols(ln, 23, 27), ""
        else:
            rs, icode = cols(ln, 23, 26), col_char(ln, 27)
        resid = integer(rs, no, "resSeq") if rs else 0
        ch = cols(ln, 79, 80)
        q = 0.0
        if ch:
            if len(ch) == 1 and ch.isdigit():
                q = float(ch)
            elif len(ch) == 2 and ch[0].isdigit() and ch[1] in "+-":
                q = float(ch[0]) * (-1 if ch[1] == "-" else 1)
            elif len(ch) == 2 and ch[1].isdigit() and ch[0] in "+-":
                q = float(ch[1]) * (-1 if ch[0] == "-" else 1)
            else:
                raise BadInput(no, "charge", "bad")
        name, resname = cols(ln, 13, 16), cols(ln, 18, 21)
        s = cols(ln, 7, 11)
        try:
            serials.append(int(s) if s.lstrip("+-").isdigit() else None)
        except ValueError:
            serials.append(None)
        atoms.append(atom(name, resname, resid, xyz, q, 0.0, element_of(name, resname, cols(ln, 77, 78)),
                          chain=col_char(ln, 22), icode=icode, altloc=col_char(ln, 17), segid=cols(ln, 73, 76)))
    if not atoms:
        raise BadInput(1, "ATOM", "no atoms")
    index = {}
    for i, s in enumerate(serials):
        if s is not None:
            index.setdefault(s, []).append(i)
    bonds = []
    for a, b, no in conect:
        ij = []
        for s in (a, b):
            if len(index.get(s, [])) != 1:
                raise BadInput(no, "CONECT", "unknown or shared serial")
            ij.append(index[s][0])
        if ij[0] == ij[1]:
            raise BadInput(no, "CONECT", "bonded to itself")
        bonds.append(tuple(ij))
    return finish(atoms, box, bonds, cell, warn=warn)


def read_xyz(text):
    """First frame."""
    lines = lines_of(text)
    i = 0
    while i < len(lines) and not lines[i][0].split():
        i += 1
    if i == len(lines):
        raise BadInput(max(1, i), "atom count", "missing")
    f = lines[i][0].split()
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
    comment = lines[i + 1][0]
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
        ln, eol = lines[no - 1]
        f = ln.split()
        if len(f) < 4:
            raise BadInput(no, ["symbol", "x", "y", "z"][len(f)], "missing")
        need_eol(eol, no, "z" if len(f) == 4 else f"column {len(f)}")
        xyz = [number(f[c + 1], no, "xyz"[c]) for c in range(3)]
        sym = name_field(f[0], no, "symbol")
        atoms.append(atom(sym, xyz=xyz, element=SPELLING[sym.upper()] if sym.upper() in MASSES else guess_element(sym)))
    return finish(atoms, box)


def read_psf(text):
    """PSF as md_read_psf documents it: blank-separated fields, IDs 1..N, NBOND after the atoms."""
    lines, raw = lines_of(text), text.encode().split(b"\n")
    k = 0

    def left():  # bytes after the first k lines
        return len(text.encode()) - min(len(text.encode()), sum(len(r) + 1 for r in raw[:k]))

    def next_nonblank():
        nonlocal k
        while k < len(lines) and not lines[k][0].split():
            k += 1
        if k == len(lines):
            return None
        k += 1
        return lines[k - 1][0]

    def count(ln, tag, hi):
        f = ln.split()
        if len(f) < 2 or not f[1].startswith(tag):
            raise BadInput(k, tag[1:], "missing")
        return integer(f[0], k, tag[1:], 0, hi)

    head = next_nonblank()
    if head is None or not head.lstrip().startswith("PSF"):
        raise BadInput(max(k, 1), "header", "no PSF header")
    ln = next_nonblank()
    if ln is None:
        raise BadInput(k + 1, "NTITLE", "missing")
    ntitle = count(ln, "!NTITLE", 2**63 - 1)
    if k + ntitle > len(lines):
        raise BadInput(len(lines) + 1, "NTITLE", "truncated title")
    k += ntitle
    ln = next_nonblank()
    if ln is None:
        raise BadInput(k + 1, "NATOM", "missing")
    natom = count(ln, "!NATOM", 2**31 - 1)
    if natom < 1 or natom > left() // 16:
        raise BadInput(k, "NATOM", "out of range")
    fields = ["ID", "segid", "resid", "resname", "name", "type", "charge", "mass", "IMOVE"]
    atoms = []
    for i in range(natom):
        if k == len(lines):
            raise BadInput(k + 1, "NATOM", "truncated")
        ln, eol = lines[k]
        k += 1
        f = ln.split()
        if len(f) < 8:
            raise BadInput(k, fields[len(f)], "missing")
        blank_segid = len(f) == 8 and is_resid(f[1]) and not is_resid(f[2])
        g = [f[0], ""] + f[1:7] if blank_segid else f[:8]
        if not eol:
            need_eol(eol, k, ("IMOVE" if blank_segid else "mass") if len(f) == 8 else
                     "IMOVE" if len(f) == 9 else f"column {len(f)}")
        if integer(g[0], k, "ID", -2**63, 2**63 - 1) != i + 1:
            raise BadInput(k, "ID", "not in order")
        segid = name_field(g[1], k, "segid")
        resid, icode = resseq_icode(g[2], k, "resid")
        resname, name, typ = (name_field(g[j], k, fields[j]) for j in (3, 4, 5))
        q, m = number(g[6], k, "charge"), number(g[7], k, "mass")
        if m < 0:
            raise BadInput(k, "mass", "negative")
        atoms.append(atom(name, resname, resid, q=q, element=guess_element(name, resname), mass=m, icode=icode,
                          segid=segid, type_name=typ))
    bonds = []
    ln = next_nonblank()
    if ln is not None:
        nb = count(ln, "!NBOND", (2**31 - 1) // 2)
        if nb > left() // 4:
            raise BadInput(k, "NBOND", "cannot fit")
        ids, eol = [], True
        while len(ids) < 2 * nb:
            if k == len(lines) or not lines[k][0].split():
                raise BadInput(k + 1, "NBOND", "truncated")
            ln, eol = lines[k]
            k += 1
            for t in ln.split():
                if len(ids) == 2 * nb:
                    raise BadInput(k, "NBOND", "too many")
                ids.append(integer(t, k, "NBOND", 1, natom) - 1)
                if len(ids) % 2 == 0 and ids[-1] == ids[-2]:
                    raise BadInput(k, "NBOND", "bonded to itself")
        if nb:
            need_eol(eol, k, "NBOND")
        bonds = list(zip(ids[0::2], ids[1::2]))
    return finish(atoms, bonds=bonds, key="type_name")
