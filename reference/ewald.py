"""float64 numpy reference for md.h's ewald section: the classic Ewald sum, written from the
textbook formulas (Allen & Tildesley, Computer Simulation of Liquids, 2nd ed., section 6.2;
Essmann et al., J. Chem. Phys. 103, 8577 (1995) for the virial), not from md.h's code.

Conventions (the same as md.h, stated independently here):
  * units nm, e, kJ/mol; k = 138.935458 kJ mol^-1 nm e^-2;
  * real space: every pair (i, j) and periodic image n with |r_ij + n L| < rc, i = j included
    for n != 0, k qi qj erfc(alpha r) / r, halved over ordered pairs; the minimum image of an
    excluded pair is left out there and gets -k qi qj erf(alpha r) / r instead;
  * reciprocal space: the FULL sum over k = 2 pi m / L, m != 0, |m_d| <= kmax_d and
    mx^2 + my^2 + mz^2 <= k2max (when k2max > 0) of k 2 pi / V exp(-k^2 / 4 alpha^2) / k^2 |S|^2;
    forces from F_j = k 4 pi / V q_j sum_k f(k) k Im(conj(S) exp(i k.r_j));
  * self -k alpha / sqrt(pi) sum q^2; a net charge Q adds -k pi Q^2 / (2 V alpha^2) to recip;
  * virial W_ab = sum over pair terms of r_a F_b, plus sum_k E_k (delta_ab - 2 (1/k^2 +
    1/(4 alpha^2)) k_a k_b), plus the background energy on the diagonal.
"""
import math

import numpy as np

KC = 138.935458


def _erf(x):
    return np.vectorize(math.erf)(x)


def _erfc(x):
    return np.vectorize(math.erfc)(x)


def ewald(pos, q, box, alpha, rc, kmax, k2max=0.0, excluded=()):
    """Energies (real, recip, self, excl), forces (n x 3) and virial (3 x 3) of the classic
    Ewald sum. excluded: iterable of (i, j) pairs."""
    pos = np.asarray(pos, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    box = np.asarray(box, dtype=np.float64)
    n = len(q)
    excl = np.zeros((n, n), dtype=bool)
    for i, j in excluded:
        excl[i, j] = excl[j, i] = True
    forces = np.zeros((n, 3))
    W = np.zeros((3, 3))
    # ---- real space and exclusions, one atom i against all j at a time
    d0 = pos[:, None, :] - pos[None, :, :]
    d0 -= box * np.round(d0 / box)
    nmax = [max(0, int(math.ceil(rc / L + 0.5)) - 1) for L in box]
    e_real = 0.0
    e_excl = 0.0
    qq = KC * q[:, None] * q[None, :]
    for a in range(-nmax[0], nmax[0] + 1):
        for b in range(-nmax[1], nmax[1] + 1):
            for c in range(-nmax[2], nmax[2] + 1):
                shift = np.array([a, b, c]) * box
                d = d0 + shift
                r2 = (d * d).sum(axis=2)
                zero = (a, b, c) == (0, 0, 0)
                use = r2 < rc * rc
                if zero:
                    use &= ~np.eye(n, dtype=bool) & ~excl
                r = np.sqrt(np.where(use, r2, 1.0))
                e = np.where(use, qq * _erfc(alpha * r) / r, 0.0)
                fr = np.where(use, (qq * 2 * alpha / math.sqrt(math.pi) * np.exp(-alpha**2 * r * r) + e) / (r * r), 0.0)
                e_real += 0.5 * e.sum()
                forces += (fr[:, :, None] * d).sum(axis=1)
                W += 0.5 * np.einsum("ij,ija,ijb->ab", fr, d, d)
    if excl.any():
        r2 = (d0 * d0).sum(axis=2)
        on_spot = excl & (r2 == 0.0)
        use = excl & (r2 > 0.0)
        r = np.sqrt(np.where(use, r2, 1.0))
        e = np.where(use, -qq * _erf(alpha * r) / r, 0.0)
        e = np.where(on_spot, -qq * 2 * alpha / math.sqrt(math.pi), e)
        fr = np.where(use, (qq * 2 * alpha / math.sqrt(math.pi) * np.exp(-alpha**2 * r * r) + e) / (r * r), 0.0)
        e_excl = 0.5 * e.sum()
        forces += (fr[:, :, None] * d0).sum(axis=1)
        W += 0.5 * np.einsum("ij,ija,ijb->ab", fr, d0, d0)
    # ---- reciprocal space: the full sum over +-m
    V = box.prod()
    m = np.array(np.meshgrid(*[np.arange(-k, k + 1) for k in kmax], indexing="ij")).reshape(3, -1).T
    m = m[(m != 0).any(axis=1)]
    if k2max > 0:
        m = m[(m * m).sum(axis=1) <= k2max]
    kv = 2 * math.pi * m / box
    k2 = (kv * kv).sum(axis=1)
    f = np.exp(-k2 / (4 * alpha**2)) / k2
    phase = np.exp(1j * pos @ kv.T)  # n x K
    S = q @ phase
    ek = KC * 2 * math.pi / V * f * np.abs(S) ** 2
    e_recip = ek.sum()
    g = 2 * (1 / k2 + 1 / (4 * alpha**2))
    W += np.eye(3) * e_recip - np.einsum("k,k,ka,kb->ab", ek, g, kv, kv)
    forces += KC * 4 * math.pi / V * q[:, None] * ((np.imag(np.conj(S)[None, :] * phase) * f) @ kv)
    Q = q.sum()
    ebg = -KC * math.pi * Q * Q / (2 * V * alpha**2)
    e_recip += ebg
    W += np.eye(3) * ebg
    e_self = -KC * alpha / math.sqrt(math.pi) * (q * q).sum()
    return {"real": e_real, "recip": e_recip, "self": e_self, "excl": e_excl}, forces, W


def read_meta(path):
    """A dump program's key-value text file: {key: [values as strings]}."""
    out = {}
    for line in open(path):
        k, *v = line.split()
        out[k] = v
    return out


class Report:
    """PASS/FAIL lines and a failure count for the check scripts."""

    def __init__(self):
        self.failed = 0

    def __call__(self, name, ok, why=""):
        print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
        self.failed += 0 if ok else 1
