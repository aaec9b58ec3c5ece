"""float64 numpy reference for chapter 08's constraints and bonded terms (md.h sections
constraints and bonded), written independently of md.h's code:

  shake_water     the constrained positions of a rigid water as the exact solution of the SHAKE
                  equations: x_i = u_i + sum_k g_k s_ik r_k / m_i with r_k the reference bond
                  vectors (O-H1, O-H2, H1-H2) and s_ik = +1 / -1 for the bond's two atoms, the
                  three multipliers g found by Newton's method until every |x_a - x_b| equals its
                  length to 1e-15 relative. SETTLE (Miyamoto and Kollman 1992) solves the same
                  equations in closed form, so the two must agree to rounding.
  rigid_velocity  the velocity constraint: impulses along the three bonds of the positions that
                  make every relative velocity along a bond zero, one 3 x 3 linear solve.
  bonded_energy   harmonic bonds k/2 (r - r0)^2 and angles k/2 (theta - theta0)^2, theta from
                  arccos of the normalised dot product (md.h uses atan2), vectors as minimum
                  images; written with numpy operations that accept complex numbers, so forces
                  and the virial come from complex-step derivatives (Squire and Trapp 1998):
                  dE/dx = Im E(x + i h) / h with h = 1e-30, exact to rounding, no differencing
                  error and no shared formula with md.h's analytic gradients.
"""
import numpy as np


def shake_water(ref, unc, m, doh, dhh):
    """ref, unc: (3, 3) arrays (O, H1, H2); m: 3 masses. Returns the constrained (3, 3)."""
    pairs = ((0, 1, doh), (0, 2, doh), (1, 2, dhh))
    r = np.array([ref[a] - ref[b] for a, b, _ in pairs])
    g = np.zeros(3)

    def positions(g):
        x = unc.astype(np.float64).copy()
        for k, (a, b, _) in enumerate(pairs):
            x[a] += g[k] * r[k] / m[a]
            x[b] -= g[k] * r[k] / m[b]
        return x

    for _ in range(100):
        x = positions(g)
        f = np.array([np.dot(x[a] - x[b], x[a] - x[b]) - d * d for a, b, d in pairs])
        if np.max(np.abs(f) / np.array([d * d for _, _, d in pairs])) < 1e-15:
            break
        jac = np.zeros((3, 3))
        for k, (a, b, _) in enumerate(pairs):
            dk = x[a] - x[b]
            for q, (c, e, _) in enumerate(pairs):
                # d(x_a - x_b)/dg_q = r_q (delta_ac / m_a - delta_ae / m_a - delta_bc / m_b + delta_be / m_b)
                coef = ((a == c) - (a == e)) / m[a] - ((b == c) - (b == e)) / m[b]
                jac[k, q] = 2.0 * np.dot(dk, r[q]) * coef
        g = g - np.linalg.solve(jac, f)
    return positions(g)


def rigid_velocity(x, v, m):
    """x, v: (3, 3); m: 3 masses. Velocities with no relative motion along the three bonds."""
    pairs = ((0, 1), (0, 2), (1, 2))
    e = np.array([(x[b] - x[a]) / np.linalg.norm(x[b] - x[a]) for a, b in pairs])
    A = np.zeros((3, 3))
    rhs = np.zeros(3)
    for k, (a, b) in enumerate(pairs):
        rhs[k] = -np.dot(v[b] - v[a], e[k])
        for q, (c, d) in enumerate(pairs):
            # impulse lam_q: atom c gets -lam e_q / m_c, atom d gets +lam e_q / m_d
            A[k, q] = np.dot(e[k], e[q]) * (((b == d) - (b == c)) / m[b] - ((a == d) - (a == c)) / m[a])
    lam = np.linalg.solve(A, rhs)
    out = v.astype(np.float64).copy()
    for q, (c, d) in enumerate(pairs):
        out[c] -= lam[q] * e[q] / m[c]
        out[d] += lam[q] * e[q] / m[d]
    return out


def _image(d, box):
    return d - box * np.rint(d.real / box)


def bonded_energy(x, box, bonds, bp, angles, ap, deform=None):
    """Energy of positions x (n, 3), possibly complex; deform (3, 3) applied to every term's
    minimum-image vectors (d -> d + d @ deform: d_b += sum_a d_a deform[a, b]) for the virial."""
    def vec(i, j):
        d = _image(x[i] - x[j], box)
        return d if deform is None else d + d @ deform
    d = vec(bonds[:, 0], bonds[:, 1])
    r = np.sqrt(np.sum(d * d, axis=1))
    e = np.sum(0.5 * bp[:, 1] * (r - bp[:, 0]) ** 2)
    a = vec(angles[:, 0], angles[:, 1])
    c = vec(angles[:, 2], angles[:, 1])
    cos = np.sum(a * c, axis=1) / np.sqrt(np.sum(a * a, axis=1) * np.sum(c * c, axis=1))
    th = np.arccos(cos)
    return e + np.sum(0.5 * ap[:, 1] * (th - ap[:, 0]) ** 2)


def bonded_forces_virial(x, box, bonds, bp, angles, ap, h=1e-30):
    """Energy, forces (n, 3) = -dE/dx and virial W_ab = -dE/d(deform[a, b]) by complex steps."""
    e = bonded_energy(x, box, bonds, bp, angles, ap).real
    f = np.zeros(x.shape)
    for i in range(x.shape[0]):
        for k in range(3):
            y = x.astype(np.complex128)
            y[i, k] += 1j * h
            f[i, k] = -bonded_energy(y, box, bonds, bp, angles, ap).imag / h
    w = np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            dm = np.zeros((3, 3), dtype=np.complex128)
            dm[a, b] = 1j * h
            w[a, b] = -bonded_energy(x.astype(np.complex128), box, bonds, bp, angles, ap, dm).imag / h
    return e, f, w
