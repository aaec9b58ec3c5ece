"""Write the reader fixtures of tests/data/ (committed; rerun after changing this file):
    python3 tests/data/make_fixtures.py
Each file reproduces what a real tool writes, with the layout taken from that tool's
format (cited at each writer below), not from md.h's own writers. tests/test_io.c and
tests/test_topology.c read them; tests/fuzz/ corpora hold copies of the text ones.

The system is small on purpose: two TIP3P waters, a sodium and a chloride (CHARMM
names SOD, CLA), positions in Angstrom."""
import math
import os
import struct

import numpy as np

OUT = os.path.dirname(os.path.abspath(__file__))
AKMA_PS = 0.04888821  # CHARMM's time unit in ps

# (segid, resid, resname, name, type, charge, mass, x, y, z) of the water-and-ions system
ATOMS = [
    ("WAT", "1", "TIP3", "OH2", "OT", -0.834, 15.9994, 1.000, 2.000, 3.000),
    ("WAT", "1", "TIP3", "H1", "HT", 0.417, 1.008, 1.957, 2.000, 3.000),
    ("WAT", "1", "TIP3", "H2", "HT", 0.417, 1.008, 0.760, 2.927, 3.000),
    ("WAT", "2", "TIP3", "OH2", "OT", -0.834, 15.9994, 5.000, 5.500, 6.000),
    ("WAT", "2", "TIP3", "H1", "HT", 0.417, 1.008, 5.957, 5.500, 6.000),
    ("WAT", "2", "TIP3", "H2", "HT", 0.417, 1.008, 4.760, 6.427, 6.000),
    ("IONS", "1", "SOD", "SOD", "SOD", 1.0, 22.98977, 8.000, 1.000, 1.500),
    ("IONS", "2", "CLA", "CLA", "CLA", -1.0, 35.45, 2.000, 8.000, 7.500),
]
BONDS = [(1, 2), (1, 3), (4, 5), (4, 6)]
ANGLES = [(2, 1, 3), (5, 4, 6)]


def write(name, text):
    with open(os.path.join(OUT, name), "w", newline="") as f:
        f.write(text)


def g14_6(x):
    """Fortran G14.6 (as CHARMM writes charges and masses): F format with 6 significant
    digits and 4 trailing blanks for 0.1 <= |x| < 1e6, else E14.6."""
    if x != 0 and 0.1 <= abs(x) < 1e6:
        d = 6 - (int(math.floor(math.log10(abs(x)))) + 1)
        return f"{x:10.{d}f}    "
    m, e = (0.0, 0) if x == 0 else (x / 10 ** (math.floor(math.log10(abs(x))) + 1), math.floor(math.log10(abs(x))) + 1)
    return f"{m:10.6f}E{e:+03d}".rjust(14)


def psf_tail(id_width):
    """NBOND (4 pairs a line), NTHETA (3 triples a line) and the empty sections CHARMM writes."""
    w = id_width
    out = ["", f"{len(BONDS):{w}d} !NBOND: bonds"]
    flat = [i for b in BONDS for i in b]
    out += ["".join(f"{v:{w}d}" for v in flat[k:k + 8]) for k in range(0, len(flat), 8)]
    out += ["", f"{len(ANGLES):{w}d} !NTHETA: angles"]
    flat = [i for a in ANGLES for i in a]
    out += ["".join(f"{v:{w}d}" for v in flat[k:k + 9]) for k in range(0, len(flat), 9)]
    for sec in ("!NPHI: dihedrals", "!NIMPHI: impropers", "!NDON: donors", "!NACC: acceptors"):
        out += ["", f"{0:{w}d} {sec}", ""]
    out += ["", f"{0:{w}d} !NNB", "", "".join(f"{0:{w}d}" for _ in ATOMS), "",
            f"{1:{w}d}{0:{w}d} !NGRP", f"{0:{w}d}{0:{w}d}{0:{w}d}", ""]
    return out


def psf_charmm_standard():
    """CHARMM standard PSF: (I8,1X,A4,1X,A4,1X,A4,1X,A4,1X,I4,1X,2G14.6,I8), numeric types
    (CHARMM's IAC), from psffres.src as quoted by MDAnalysis's PSF format page."""
    iac = {"OT": 75, "HT": 4, "SOD": 90, "CLA": 91}
    out = ["PSF", "", "       3 !NTITLE", "* WATER AND IONS, CHARMM STANDARD PSF",
           "*  DATE:     1/ 1/24      0: 0: 0      CREATED BY USER: md", "*", "", f"{len(ATOMS):8d} !NATOM"]
    for k, (seg, resid, res, name, typ, q, m, *_xyz) in enumerate(ATOMS, 1):
        out.append(f"{k:8d} {seg:<4s} {resid:<4s} {res:<4s} {name:<4s} {iac[typ]:4d} {g14_6(q)}{g14_6(m)}{0:8d}")
    write("water_ions.psf", "\n".join(out + psf_tail(8)) + "\n")


def psf_charmm_ext():
    """CHARMM EXT PSF with X-PLOR type names: (I10,1X,A8,1X,A8,1X,A8,1X,A8,1X,A4,1X,2G14.6,I8),
    with an 8-character segid and atom name (the width EXT exists for)."""
    out = ["PSF EXT CMAP XPLOR", "", "         2 !NTITLE", "* WATER AND IONS, CHARMM EXT PSF", "*", "",
           f"{len(ATOMS):10d} !NATOM"]
    for k, (seg, resid, res, name, typ, q, m, *_xyz) in enumerate(ATOMS, 1):
        seg = "SOLVENT1" if seg == "WAT" else seg
        name = "CLALONG8" if name == "CLA" else name
        out.append(f"{k:10d} {seg:<8s} {resid:<8s} {res:<8s} {name:<8s} {typ:<4s} {g14_6(q)}{g14_6(m)}{0:8d}")
    write("water_ions_ext.psf", "\n".join(out + psf_tail(10)) + "\n")


def psf_namd():
    """NAMD/VMD space-separated PSF ("PSF NAMD" flag, VMD 1.9.1 psfplugin), whose fields overrun
    the fixed widths: a 6-character CHARMM36 type, a resid with an insertion code (36A)."""
    types = {"OT": "OT", "HT": "HT", "SOD": "SOD", "CLA": "CLA"}
    out = ["PSF NAMD CMAP", "", "       1 !NTITLE", " REMARKS written like VMD's psfplugin", "",
           f"{len(ATOMS):8d} !NATOM"]
    for k, (seg, resid, res, name, typ, q, m, *_xyz) in enumerate(ATOMS, 1):
        resid = "36A" if seg == "IONS" and resid == "1" else resid
        typ = "CG2R61" if name == "H2" else types[typ]
        out.append(f"{k:8d} {seg:<4s} {resid:<4s} {res:<4s} {name:<4s} {typ:<4s} {q:10.6f} {m:13.4f} {0:11d}")
    write("water_ions_namd.psf", "\n".join(out + psf_tail(8)) + "\n")


def dcd_record(payload):
    return struct.pack("<i", len(payload)) + payload + struct.pack("<i", len(payload))


def dcd(name, frames, cells, nsavc=100, delta_ps=0.002):
    """A CHARMM/NAMD DCD (little-endian, ICNTRL[19] = 24: CHARMM version, so DELTA is a float
    in AKMA units): ICNTRL[0] frames, [1] ISTART, [2] NSAVC, [3] NSTEP, [9] DELTA, [10] 1 (unit
    cell in every frame). cells: 6 doubles per frame in the file's order A, gamma, B, beta, alpha, C."""
    icntrl = [0] * 20
    icntrl[0], icntrl[1], icntrl[2], icntrl[3] = len(frames), nsavc, nsavc, nsavc * len(frames)
    icntrl[10], icntrl[19] = 1, 24
    head = bytearray(b"CORD" + struct.pack("<20i", *icntrl))
    head[4 + 36:4 + 40] = struct.pack("<f", delta_ps / AKMA_PS)
    title = struct.pack("<i", 2) + b"REMARKS FILENAME=water_ions.dcd CREATED BY make_fixtures.py".ljust(80) + \
        b"REMARKS DATE: 01/01/24".ljust(80)
    out = dcd_record(bytes(head)) + dcd_record(title) + dcd_record(struct.pack("<i", len(frames[0])))
    for xyz, cell in zip(frames, cells):
        out += dcd_record(struct.pack("<6d", *cell))
        for axis in range(3):
            out += dcd_record(struct.pack(f"<{len(xyz)}f", *[p[axis] for p in xyz]))
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(out)


def shape_matrix(a, b, c, alpha, beta, gamma):
    """CHARMM's symmetric shape matrix: the symmetric square root of the metric tensor, written
    h11 h21 h22 h31 h32 h33."""
    ca, cb, cg = (math.cos(math.radians(t)) for t in (alpha, beta, gamma))
    g = np.array([[a * a, a * b * cg, a * c * cb], [a * b * cg, b * b, b * c * ca], [a * c * cb, b * c * ca, c * c]])
    w, v = np.linalg.eigh(g)
    h = v @ np.diag(np.sqrt(w)) @ v.T
    return [h[0, 0], h[1, 0], h[1, 1], h[2, 0], h[2, 1], h[2, 2]]


def dcds():
    xyz0 = [a[7:10] for a in ATOMS]
    xyz1 = [(x + 0.5, y - 0.25, z + 1.0) for x, y, z in xyz0]
    # orthorhombic, NAMD-style cosines 0; frames 100 steps of 2 fs apart
    dcd("water_ions.dcd", [xyz0, xyz1], [[20.0, 0.0, 21.0, 0.0, 0.0, 22.0], [20.5, 0.0, 21.5, 0.0, 0.0, 22.5]])
    # gamma = 60 degrees written three ways: cosines (OpenMM, VMD), degrees (MDAnalysis),
    # and a truncated octahedron (109.47 degrees) as CHARMM's shape matrix
    dcd("triclinic_cosines.dcd", [xyz0], [[30.0, 0.5, 30.0, 0.0, 0.0, 30.0]])
    dcd("triclinic_degrees.dcd", [xyz0], [[30.0, 60.0, 30.0, 90.0, 90.0, 30.0]])
    t = math.degrees(math.acos(-1.0 / 3.0))
    h = shape_matrix(70.0, 70.0, 70.0, t, t, t)
    dcd("octahedron_charmm.dcd", [xyz0], [h])


def pdbs():
    # CHARMM-GUI / CHARMM-style PDB: no element column, segid in 73-76, CHARMM ion names; a heme
    # iron and its pyrrole nitrogen NA (not sodium); a protein CA (not calcium); GROMACS and
    # AMBER ion residues (NA, CL-, K+, MG, CAL, ZN2) without element columns
    rows = [("ATOM", "N", "ALA", "A", 1, "PROA"), ("ATOM", "CA", "ALA", "A", 1, "PROA"),
            ("HETATM", "FE", "HEM", "A", 2, "HETA"), ("HETATM", "NA", "HEM", "A", 2, "HETA"),
            ("HETATM", "SOD", "SOD", "", 1, "IONS"), ("HETATM", "CLA", "CLA", "", 2, "IONS"),
            ("HETATM", "POT", "POT", "", 3, "IONS"), ("HETATM", "CAL", "CAL", "", 4, "IONS"),
            ("HETATM", "ZN", "ZN2", "", 5, "IONS"), ("HETATM", "MG", "MG", "", 6, "IONS"),
            ("HETATM", "NA", "NA+", "", 7, "IONS"), ("HETATM", "CL", "CL-", "", 8, "IONS"),
            ("HETATM", "K", "K", "", 9, "IONS"), ("HETATM", "CL1", "LIG", "", 10, "HETB")]
    out = ["REMARK   written like CHARMM's PDB writer (segid in 73-76, no element column)"]
    for k, (rec, name, res, chain, resid, seg) in enumerate(rows, 1):
        nm = f" {name:<3s}" if len(name) < 4 else name
        out.append(f"{rec:<6s}{k:5d} {nm:<4s} {res:<4s}{chain:1s}{resid:4d}    "
                   f"{k:8.3f}{-k:8.3f}{0.5 * k:8.3f}{1.0:6.2f}{0.0:6.2f}      {seg:<4s}")
    write("charmm_ions.pdb", "\n".join(out + ["END", ""]))

    # RCSB-style PDB: alternate locations, insertion codes, chains, element column, formal
    # charge "0" in columns 79-80 as older writers put it, CONECT records after ENDMDL of a
    # two-model file (as for NMR ensembles)
    out = ["HEADER    TEST FIXTURE",
           "CRYST1   40.000   50.000   60.000  90.00  90.00  90.00 P 1           1",
           "MODEL        1"]
    atoms = [("ATOM", " N  ", " ", "GLY", "A", "  35", " ", "N", " 0"),
             ("ATOM", " CA ", "A", "GLY", "A", "  35", " ", "C", " 0"),
             ("ATOM", " CA ", "B", "GLY", "A", "  35", " ", "C", " 0"),
             ("ATOM", " N  ", " ", "SER", "A", "  36", "A", "N", "  "),
             ("ATOM", " OG ", " ", "SER", "A", "  36", "B", "O", "1-"),
             ("HETATM", "ZN  ", " ", " ZN", "B", " 401", " ", "ZN", "2+")]
    for k, (rec, name, alt, res, chain, rs, ic, el, chg) in enumerate(atoms, 1):
        out.append(f"{rec:<6s}{k:5d} {name}{alt}{res:>3s} {chain}{rs}{ic}   {k + 0.125:8.3f}{2.0 * k:8.3f}"
                   f"{-1.5 * k:8.3f}{1.0:6.2f}{20.0:6.2f}          {el:>2s}{chg}")
    out += ["ENDMDL", "MODEL        2"]
    out += [ln[:30] + f"{9.0:8.3f}" + ln[38:] for ln in out[3:3 + len(atoms)]]
    out += ["ENDMDL", "CONECT    1    2    3", "CONECT    2    1", "CONECT    5    6", "END", ""]
    write("altloc_icode.pdb", "\n".join(out))

    # "no cell" as VMD, NAMD and MDAnalysis write it: CRYST1 with all-zero edges
    write("vmd_nocell.pdb", "CRYST1    0.000    0.000    0.000  90.00  90.00  90.00 P 1           1\n"
          "ATOM      1  OH2 TIP3W   1       1.000   2.000   3.000  1.00  0.00      WAT  O\n"
          "END\n")
    # a truncated octahedron (CHARMM-GUI's default water box shape)
    write("octahedron.pdb", "CRYST1   77.000   77.000   77.000 109.47 109.47 109.47 P 1           1\n"
          "ATOM      1  OH2 TIP3W   1       1.000   2.000   3.000  1.00  0.00      WAT  O\n"
          "ATOM      2  H1  TIP3W   1       1.957   2.000   3.000  1.00  0.00      WAT  H\n"
          "END\n")


def pqrs():
    """PDB2PQR's PQR writer (pdb2pqr Atom.get_pqr_string): 'ATOM' ljust 6, serial rjust 5, name
    (' ' + ljust 3 unless 4 long), resname ljust 3 + ' ', chain (with --chain), resSeq rjust 4,
    then the insertion code and 3 blanks (or 4 blanks), x y z %8.3f, charge %8.4f, radius %7.4f."""
    def line(serial, name, res, chain, resseq, icode, x, y, z, q, r):
        nm = name.ljust(4)[:4] if len(name) == 4 else " " + name.ljust(3)[:3]
        rn = res.ljust(4)[:4] if len(res) == 4 else res.ljust(3)[:3] + " "
        ins = f"{icode}   " if icode else "    "
        return f"{'ATOM':<6s}{serial:5d} {nm} {rn}{chain}{str(resseq).rjust(4)[:4]}{ins}{x:8.3f}{y:8.3f}{z:8.3f}{q:8.4f}{r:7.4f}"
    rows = [(1, "N", "GLY", "A", 35, "", -0.3479, 1.8240), (2, "CA", "GLY", "A", 35, "", -0.0252, 1.9080),
            (3, "N", "SER", "A", 36, "A", -0.4157, 1.8240), (4, "CA", "SER", "A", 36, "A", -0.0249, 1.9080),
            (5, "N", "THR", "A", 36, "B", -0.4157, 1.8240), (6, "OW", "HOH", "W", 1000, "", -0.8340, 1.7683),
            (7, "NA", "NA", "I", 1001, "", 1.0000, 1.8680), (8, "CL", "CL", "I", 1002, "", -1.0000, 2.4700)]
    out = ["REMARK   1 PQR file written like PDB2PQR (--chain, insertion codes)"]
    for s, name, res, chain, resseq, ic, q, r in rows:
        out.append(line(s, name, res, chain, resseq, ic, 1.0 * s, -2.0 * s, 0.25 * s, q, r))
    write("pdb2pqr_icode.pqr", "\n".join(out + ["TER", "END", ""]))
    # the same without --chain: the insertion code still follows resSeq
    out = ["REMARK   1 PQR file written like PDB2PQR (no chain)"]
    for s, name, res, chain, resseq, ic, q, r in rows[:5]:
        out.append(line(s, name, res, "", resseq, ic, 1.0 * s, -2.0 * s, 0.25 * s, q, r))
    write("pdb2pqr_nochain.pqr", "\n".join(out + ["END", ""]))
    # a PQR from a tool with long atom names (an 8-character name, as EXT PSF allows)
    write("long_names.pqr", "ATOM      1 C1AB2CD3 LIG     1       1.000   2.000   3.000  0.1000 1.7000\n"
          "ATOM      2 O1P_LONG LIG     1       2.000   2.000   3.000 -0.1000 1.5200\n")
    # cut while being written: the last line ends inside the charge ("-0.17" cut to "-0.1")
    write("cut_number.pqr", "ATOM      1  N   GLY A   1       1.000   2.000   3.000 -0.3479 1.8240\n"
          "ATOM      2  CA  GLY A   1       2.000   2.000   3.000 -0.1")


def xyzs():
    # cut while being written: the last line ends inside z ("0.17" cut to "0.1")
    write("cut_number.xyz", "2\nwater fragment\nO 1.000 2.000 3.000\nH 1.957 2.000 0.1")


if __name__ == "__main__":
    psf_charmm_standard()
    psf_charmm_ext()
    psf_namd()
    dcds()
    pdbs()
    pqrs()
    xyzs()
