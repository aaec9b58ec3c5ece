"""Nonbonded LJ + Coulomb in float64 numpy: the independent reference for md.h's
nb section (md_nb_compute, md_topology_build_exclusions, md_lj_table_create,
md_nb_dispersion_correction).

Written from the physics, not from md.h: every pair i < j of an orthorhombic
periodic box with the minimum image, all at once (n x n arrays), so it suits a
few thousand atoms.

    LJ        E = c12/r^12 - c6/r^6, c6 = 4 eps sigma^6, c12 = 4 eps sigma^12
              truncate: E for r < rc; shift: E(r) - E(rc); force switch: the force
              of each r^-a term is a r^-(a+1) + A (r-r1)^2 + B (r-r1)^3 on [r1, rc)
              with A, B solved here from F(rc) = F'(rc) = 0 (a 2 x 2 linear
              system), and the potential is the integral of the force from r to rc
    Coulomb   k qi qj times: 1/r (cutoff), 1/r + krf r^2 - crf (reaction field),
              erfc(beta r)/r (Ewald real space); excluded pairs add
              -k qi qj erf(beta r)/r (Ewald only); self -k beta/sqrt(pi) sum q^2
    1-4       pairs three bonds apart: fudge_lj * LJ + fudge_qq * k qq / r, no cutoff
    disp      2 pi N^2/V (<c12>/(9 rc^9) - <c6>/(3 rc^3)), means over the
              N (N+1)/2 pairs i <= j; virial diagonal 2 pi N^2/V (4<c12>/(9 rc^9)
              - 2<c6>/(3 rc^3))
    virial    W_ab = sum over pairs (r_i - r_j)_a F_ij,b
Energies in kJ/mol, forces in kJ/mol/nm."""
import math
import os
import subprocess

import numpy as np

COULOMB = 138.935458  # kJ mol^-1 nm e^-2

try:  # scipy's vectorised erfc when present, else the standard library's, element by element
    from scipy.special import erfc as _erfc

    def erfc(x):
        return _erfc(x)
except ImportError:  # pragma: no cover
    _verfc = np.frompyfunc(math.erfc, 1, 1)

    def erfc(x):
        return np.asarray(_verfc(x), dtype=np.float64)


def lj_table(sigma, epsilon, rule, overrides=()):
    """c6, c12 (ntypes x ntypes) from per-type sigma, epsilon; rule 'lb' or 'geometric';
    overrides: (a, b, sigma_ab, eps_ab) NBFIX pairs."""
    s = np.asarray(sigma, dtype=np.float64)
    e = np.asarray(epsilon, dtype=np.float64)
    sig = 0.5 * (s[:, None] + s[None, :]) if rule == "lb" else np.sqrt(s[:, None] * s[None, :])
    eps = np.sqrt(e[:, None] * e[None, :])
    for a, b, sab, eab in overrides:
        sig[a, b] = sig[b, a] = sab
        eps[a, b] = eps[b, a] = eab
    return 4 * eps * sig ** 6, 4 * eps * sig ** 12


def bond_distances(n, bonds, depth=3):
    """{(i, j): bond distance} for i < j up to `depth` bonds apart (shortest path)."""
    adj = [[] for _ in range(n)]
    for a, b in bonds:
        adj[a].append(b)
        adj[b].append(a)
    out = {}
    for i in range(n):
        dist = {i: 0}
        frontier = [i]
        for d in range(1, depth + 1):
            nxt = []
            for a in frontier:
                for b in adj[a]:
                    if b not in dist:
                        dist[b] = d
                        nxt.append(b)
            frontier = nxt
        for j, d in dist.items():
            if j > i:
                out[(i, j)] = d
    return out


def exclusions(n, bonds, pair14="scale"):
    """(excluded set of (i, j), i < j; sorted list of scaled 1-4 pairs). pair14: 'scale'
    (excluded and listed), 'exclude', 'keep' (1-4 pairs interact normally)."""
    dist = bond_distances(n, bonds)
    excl = {p for p, d in dist.items() if d <= 2 or (d == 3 and pair14 != "keep")}
    p14 = sorted(p for p, d in dist.items() if d == 3 and pair14 == "scale")
    return excl, p14


def switch_coefficients(alpha, r1, rc):
    """A, B with F(r) = alpha r^-(alpha+1) + A (r-r1)^2 + B (r-r1)^3 and F(rc) = F'(rc) = 0."""
    w = rc - r1
    m = np.array([[w ** 2, w ** 3], [2 * w, 3 * w ** 2]])
    rhs = np.array([-alpha * rc ** (-alpha - 1), alpha * (alpha + 1) * rc ** (-alpha - 2)])
    return np.linalg.solve(m, rhs)


def switch_potential(alpha, r1, rc, r):
    """(potential, force) of one force-switched r^-alpha term at distances r < rc. The
    potential is the integral of the force from r to rc, so it is 0 at rc:
    G(x) = -x^-alpha + A u^3/3 + B u^4/4 (u = max(x - r1, 0)) is an antiderivative of the
    force, and the potential is G(rc) - G(r)."""
    A, B = switch_coefficients(alpha, r1, rc)
    r = np.asarray(r, dtype=np.float64)
    u = np.maximum(r - r1, 0.0)
    g_rc = -rc ** (-alpha) + A * (rc - r1) ** 3 / 3 + B * (rc - r1) ** 4 / 4
    pot = g_rc - (-r ** (-alpha) + A * u ** 3 / 3 + B * u ** 4 / 4)
    force = alpha * r ** (-alpha - 1) + A * u ** 2 + B * u ** 3
    return pot, force


def min_image(d, box):
    return d - box * np.rint(d / box)


def nonbonded(xyzq, types, c6, c12, box, excl, p14, fudge_lj, fudge_qq, p):
    """Energies, forces (n x 3), virial (3 x 3) and per-atom sums of |pair force| of every
    term. p: dict cutoff, lj ('shift', 'truncate', 'switch', 'none'), rsw, coul ('ewald',
    'cutoff', 'rf', 'none'), beta, eps_rf (0 = infinity), disp (bool)."""
    xyzq = np.asarray(xyzq, dtype=np.float64)
    box = np.asarray(box, dtype=np.float64)
    n = len(xyzq)
    pos, q = xyzq[:, :3], xyzq[:, 3]
    types = np.asarray(types)
    rc = p["cutoff"]
    out = {k: 0.0 for k in ("lj", "lj_dispersion", "lj14", "coul_real", "coul14", "coul_excl", "coul_self")}
    F = np.zeros((n, 3))
    W = np.zeros((3, 3))
    fabs = np.zeros(n)  # sum over a's pairs of |F_ij|, for float tolerances
    eabs = 0.0          # sum of |pair energies|
    wabs = 0.0          # sum over pairs of fr_abs (the scale of the virial's rounding)

    def add_pairs(i, j, d, fs, e_terms, fr_abs):
        """fr_abs: per pair, the sum of the magnitudes of the terms of F r (the scale of its
        float rounding: LJ's repulsion and dispersion nearly cancel near the minimum)."""
        nonlocal W, eabs, wabs
        f = fs[:, None] * d
        np.add.at(F, i, f)
        np.add.at(F, j, -f)
        W += d.T @ f
        mag = fr_abs / np.sqrt((d * d).sum(axis=1))
        wabs += fr_abs.sum()
        np.add.at(fabs, i, mag)
        np.add.at(fabs, j, mag)
        for key, e in e_terms:
            out[key] += e.sum()
            eabs += np.abs(e).sum()

    def geometry(i, j):
        d = min_image(pos[i] - pos[j], box)
        r2 = d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1] + d[:, 2] * d[:, 2]
        return d, r2

    i, j = np.triu_indices(n, 1)
    ex = np.zeros(len(i), dtype=bool)
    if excl:
        key = i.astype(np.int64) * n + j
        ekeys = np.array(sorted(a * n + b for a, b in excl), dtype=np.int64)
        ex = np.isin(key, ekeys)
    d, r2 = geometry(i, j)
    keep = (~ex) & (r2 < rc * rc)
    i, j, d, r2 = i[keep], j[keep], d[keep], r2[keep]
    r = np.sqrt(r2)
    a6, a12 = c6[types[i], types[j]], c12[types[i], types[j]]
    elj = np.zeros(len(r))
    fr = np.zeros(len(r))  # F * r
    fr_abs = np.zeros(len(r))
    if p["lj"] != "none":
        elj = a12 / r ** 12 - a6 / r ** 6
        fr = 12 * a12 / r ** 12 - 6 * a6 / r ** 6
        fr_abs = 12 * a12 / r ** 12 + 6 * a6 / r ** 6
        if p["lj"] == "shift":
            elj = elj - (a12 / rc ** 12 - a6 / rc ** 6)
        elif p["lj"] == "switch":
            p12, f12 = switch_potential(12, p["rsw"], rc, r)
            p6, f6 = switch_potential(6, p["rsw"], rc, r)
            elj = a12 * p12 - a6 * p6
            fr = (a12 * f12 - a6 * f6) * r
            fr_abs = (np.abs(a12 * f12) + np.abs(a6 * f6)) * r + 12 * a12 / r ** 12 + 6 * a6 / r ** 6
    qq = COULOMB * q[i] * q[j]
    ec = np.zeros(len(r))
    if p["coul"] == "cutoff":
        ec = qq / r
        fr = fr + qq / r
        fr_abs = fr_abs + np.abs(qq / r)
    elif p["coul"] == "rf":
        eps = p["eps_rf"]
        krf = 1 / (2 * rc ** 3) if eps == 0 else (eps - 1) / ((2 * eps + 1) * rc ** 3)
        crf = 1 / rc + krf * rc ** 2
        ec = qq * (1 / r + krf * r2 - crf)
        fr = fr + qq * (1 / r - 2 * krf * r2)
        fr_abs = fr_abs + np.abs(qq) * (1 / r + 2 * krf * r2)
    elif p["coul"] == "ewald":
        b = p["beta"]
        ec = qq * erfc(b * r) / r
        fr = fr + qq * (erfc(b * r) / r + 2 * b / math.sqrt(math.pi) * np.exp(-(b * r) ** 2))
        fr_abs = fr_abs + np.abs(qq) * (erfc(b * r) / r + 2 * b / math.sqrt(math.pi) * np.exp(-(b * r) ** 2))
    add_pairs(i, j, d, fr / r2, [("lj", elj), ("coul_real", ec)], fr_abs)

    if p["coul"] == "ewald" and excl:
        ei = np.array([a for a, b in sorted(excl)])
        ej = np.array([b for a, b in sorted(excl)])
        d, r2 = geometry(ei, ej)
        r = np.sqrt(r2)
        b = p["beta"]
        qq = COULOMB * q[ei] * q[ej]
        erf = 1 - erfc(b * r)
        e = -qq * erf / r
        fr = qq * (2 * b / math.sqrt(math.pi) * np.exp(-(b * r) ** 2) - erf / r)
        add_pairs(ei, ej, d, fr / r2, [("coul_excl", e)],
                  np.abs(qq) * (2 * b / math.sqrt(math.pi) * np.exp(-(b * r) ** 2) + erf / r))
        out["coul_self"] = -COULOMB * b / math.sqrt(math.pi) * (q * q).sum()
    elif p["coul"] == "ewald":
        out["coul_self"] = -COULOMB * p["beta"] / math.sqrt(math.pi) * (q * q).sum()

    if p14:
        pi_ = np.array([a for a, b in p14])
        pj = np.array([b for a, b in p14])
        d, r2 = geometry(pi_, pj)
        r = np.sqrt(r2)
        s6 = fudge_lj * c6[types[pi_], types[pj]] if p["lj"] != "none" else 0 * r
        s12 = fudge_lj * c12[types[pi_], types[pj]] if p["lj"] != "none" else 0 * r
        sqq = fudge_qq * COULOMB * q[pi_] * q[pj] if p["coul"] != "none" else 0 * r
        elj = s12 / r ** 12 - s6 / r ** 6
        ec = sqq / r
        fr = 12 * s12 / r ** 12 - 6 * s6 / r ** 6 + ec
        add_pairs(pi_, pj, d, fr / r2, [("lj14", elj), ("coul14", ec)],
                  12 * s12 / r ** 12 + 6 * s6 / r ** 6 + np.abs(ec))

    if p["disp"] and p["lj"] != "none":
        e, w = dispersion(types, c6, c12, box, rc)
        out["lj_dispersion"] = e
        W += w * np.eye(3)
    out["force"] = F
    out["virial"] = W
    out["fabs"] = fabs
    out["eabs"] = eabs
    out["wabs"] = wabs
    return out


def dispersion(types, c6, c12, box, rc):
    """(energy, virial diagonal entry) of the long-range dispersion correction."""
    types = np.asarray(types)
    n = len(types)
    counts = np.bincount(types, minlength=c6.shape[0]).astype(np.float64)
    pairs = np.outer(counts, counts)
    pairs[np.diag_indices_from(pairs)] = counts * (counts + 1) / 2
    upper = np.triu(np.ones_like(pairs))
    m6 = (pairs * c6 * upper).sum() / (n * (n + 1) / 2)
    m12 = (pairs * c12 * upper).sum() / (n * (n + 1) / 2)
    pre = 2 * math.pi * n * n / float(np.prod(box))
    return pre * (m12 / (9 * rc ** 9) - m6 / (3 * rc ** 3)), pre * (4 * m12 / (9 * rc ** 9) - 2 * m6 / (3 * rc ** 3))


def run_dump(root, outdir, name="dump_nb"):
    """Build (if needed) and run build/reference/NAME (dump_nb unless named) into outdir; returns
    the byte-order prefix for numpy ('<' or '>') and meta.txt's other lines split into fields."""
    exe = os.path.join(root, "build", "reference", name)
    if not os.path.exists(exe):
        subprocess.check_call(["make", "-s", "build/reference/" + name], cwd=root)
    subprocess.check_call([exe, outdir])
    endian, lines = "<", []
    for line in open(os.path.join(outdir, "meta.txt")):
        f = line.split()
        if f[0] == "endian":
            endian = "<" if f[1] == "little" else ">"
        else:
            lines.append(f)
    return endian, lines
