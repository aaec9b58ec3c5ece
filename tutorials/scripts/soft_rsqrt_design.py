#!/usr/bin/env python3
"""Derive the constants of md_soft_rsqrtf (md_cuda.cu.h): the magic constant M, the centre tc
and the degree-4 minimax polynomial of the one correction step.

    pip install numpy scipy
    python3 tutorials/scripts/soft_rsqrt_design.py        # about half a minute

The initial guess is y0 = bits(M - ceil(bits(x) / 2)). Then t = x y0^2 depends only on the
mantissa and the parity of the exponent, so every float is covered by the 2^24 floats of
[1, 4). For each M the script finds the range [tmin, tmax] of t; the best M makes the range
narrowest (in log). The step is 1/sqrt(x) = y0 t^(-1/2) ~ y0 (1 + P(t - tc)), with tc the
float nearest the middle of the range and P of degree 4 minimising the largest relative error
|(1 + P(u)) sqrt(u + tc) - 1| over the range (a linear program on 3000 Chebyshev points).
The coefficients are rounded to float one at a time, the remaining ones refitted after each.
The exhaustive check of the float code is tests/gpu_dcs.cu (soft_rsqrt_every_float).
"""
import numpy as np
from scipy.optimize import linprog


def t_range(M, step=1):
    """min and max of t = x y0^2 over the floats of [1, 4) (every step-th one)."""
    b = np.arange(0x3F800000, 0x40800000, step, dtype=np.int64)
    y0 = (M - ((b + 1) >> 1)).astype(np.uint32).view(np.float32).astype(np.float64)
    x = b.astype(np.uint32).view(np.float32).astype(np.float64)
    t = x * y0 * y0
    return t.min(), t.max()


def narrowest(lo, hi, stride, step):
    best = None
    for M in range(lo, hi, stride):
        tmin, tmax = t_range(M, step)
        w = np.log(tmax / tmin)
        if best is None or w < best[0]:
            best = (w, M)
    return best[1]


def fit(tmin, tmax, tc, fixed, deg=4, n=3000, scale=1e7):
    """Minimax P (coefficients c0..c_deg of u = t - tc, those in `fixed` held) of
    (1 + P(u)) sqrt(u + tc) - 1; returns (coefficients, max error)."""
    u = (tmin - tc) + (tmax - tmin) * (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, n)))
    s = np.sqrt(u + tc)
    A = np.vstack([s * u**k for k in range(deg + 1)]).T
    rhs = 1.0 - s
    free = [k for k in range(deg + 1) if k not in fixed]
    for k, v in fixed.items():
        rhs = rhs - A[:, k] * v
    Af, rhs = A[:, free] * scale, rhs * scale
    ones = np.ones((n, 1))
    res = linprog(np.r_[np.zeros(len(free)), 1.0], A_ub=np.vstack([np.hstack([Af, -ones]), np.hstack([-Af, -ones])]),
                  b_ub=np.r_[rhs, -rhs], bounds=[(None, None)] * (len(free) + 1), method="highs")
    c = dict(fixed)
    c.update({k: res.x[i] for i, k in enumerate(free)})
    return c, res.x[-1] / scale


def main():
    M = narrowest(0x5F300000, 0x5F400000, 0x1000, 64)
    M = narrowest(M - 0x1000, M + 0x1000, 0x20, 8)
    tmin, tmax = t_range(M)
    tc = float(np.float32((tmin + tmax) / 2))
    fixed = {}
    for k in range(5):
        c, err = fit(tmin, tmax, tc, fixed)
        fixed[k] = float(np.float32(c[k]))
    print("M  = 0x%08X   t in [%.10f, %.10f]   tc = %.9e" % (M, tmin, tmax, tc))
    print("P(u) = " + " + ".join("%.9e u^%d" % (fixed[k], k) for k in range(5)))
    print("approximation error of the float coefficients: %.3e" % err)


if __name__ == "__main__":
    main()
