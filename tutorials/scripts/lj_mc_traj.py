"""A Lennard-Jones liquid by Metropolis Monte Carlo, written as a DCD trajectory.

This is the trajectory behind the g(r) figure of tutorials/05_histograms.md. md.h has no
integrator yet, so the liquid is sampled here by Metropolis Monte Carlo (single-particle
moves) instead of molecular dynamics; the configurations sample the same canonical ensemble.

Model: 256 atoms, Lennard-Jones argon (sigma 0.3405 nm, epsilon/kB 119.8 K) truncated
(not shifted) at 2.5 sigma, minimum image in a cubic box. State point rho* = 0.8442,
T* = 0.722 (the classic liquid state point near the triple point; box 2.29 nm, 86.5 K).
Start: FCC lattice (4 x 4 x 4 cells), melted for 150 sweeps at T* = 2.0, equilibrated
150 sweeps at T* = 0.722, then 400 production sweeps with a frame every 10 (40 frames).
The step size is tuned to about 40% acceptance during the melt and equilibration only.
Seed 2026. Runs in about 30 s on a 2-core VM.

    python3 tutorials/scripts/lj_mc_traj.py OUT.dcd
"""
import struct
import sys

import numpy as np

SIGMA, EPS_K = 0.3405, 119.8
RHO, T_STAR = 0.8442, 0.722
CELLS = 4


def fcc(cells):
    base = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    g = np.array([[i, j, k] for i in range(cells) for j in range(cells) for k in range(cells)], dtype=float)
    return ((g[:, None, :] + base[None, :, :]).reshape(-1, 3) + 0.25) / cells  # fractional


def energy_one(pos, i, xi, L, rc2):
    d = pos - xi
    d -= L * np.round(d / L)
    r2 = (d * d).sum(axis=1)
    r2[i] = np.inf
    r2 = r2[r2 < rc2]
    s6 = 1.0 / r2 ** 3
    return 4.0 * (s6 * s6 - s6).sum()


def sweep(pos, L, T, step, rng, rc2):
    n = len(pos)
    acc = 0
    for i in rng.integers(0, n, size=n):
        new = pos[i] + step * rng.uniform(-1, 1, size=3)
        de = energy_one(pos, i, new, L, rc2) - energy_one(pos, i, pos[i], L, rc2)
        if de <= 0 or rng.random() < np.exp(-de / T):
            pos[i] = new % L
            acc += 1
    return acc / n


def write_dcd(path, frames_nm, box_nm):
    e = "<"
    rec = lambda p: struct.pack(e + "i", len(p)) + p + struct.pack(e + "i", len(p))  # noqa: E731
    icntrl = [0] * 20
    icntrl[0], icntrl[2], icntrl[3], icntrl[10], icntrl[19] = len(frames_nm), 1, len(frames_nm), 1, 24
    out = rec(b"CORD" + struct.pack(e + "20i", *icntrl))
    out += rec(struct.pack(e + "i", 1) + b"REMARKS Lennard-Jones argon, Metropolis Monte Carlo".ljust(80))
    out += rec(struct.pack(e + "i", frames_nm[0].shape[0]))
    a = 10.0 * box_nm
    for x in frames_nm:
        out += rec(struct.pack(e + "6d", a, 0.0, a, 0.0, 0.0, a))
        for k in range(3):
            out += rec((10.0 * x[:, k]).astype(e + "f4").tobytes())
    with open(path + ".tmp", "wb") as f:
        f.write(out)
    import os
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rng = np.random.default_rng(2026)
    n = 4 * CELLS ** 3
    L = (n / RHO) ** (1.0 / 3.0)  # reduced units
    pos = fcc(CELLS) * L
    rc2, step, frames = 2.5 ** 2, 0.15, []
    for phase, T, nsw in (("melt", 2.0, 150), ("equilibrate", T_STAR, 150), ("produce", T_STAR, 400)):
        for s in range(nsw):
            a = sweep(pos, L, T, step, rng, rc2)
            if phase != "produce":
                step *= 1.05 if a > 0.4 else 0.95
            elif (s + 1) % 10 == 0:
                frames.append(pos * SIGMA)
        print("%s: T* = %.3f, %d sweeps, last acceptance %.2f, step %.3f sigma" % (phase, T, nsw, a, step))
    write_dcd(sys.argv[1], frames, L * SIGMA)
    print("wrote %s: %d frames of %d atoms, box %.4f nm, T = %.1f K" % (sys.argv[1], len(frames), n, L * SIGMA,
                                                                         T_STAR * EPS_K))


if __name__ == "__main__":
    main()
