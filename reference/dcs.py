"""Direct Coulomb sum potential map in float64 numpy: the independent reference
for md.h's dcs rungs.

    V(p) = MD_COULOMB * sum_i q_i / |p - r_i|      (kJ mol^-1 e^-1)

over every grid point p = origin + (i, j, k) * spacing; an atom closer than
sqrt(MD_DCS_MIN_R2) = 1e-5 nm to a point adds nothing to that point (md.h's rule).
The result has shape (nz, ny, nx): the same memory order as md_grid::data
(x fastest)."""
import numpy as np

COULOMB = 138.935458                   # kJ mol^-1 nm e^-2, md.h's MD_COULOMB
MIN_R2 = float(np.float32(1e-10))      # md.h's MD_DCS_MIN_R2 (a float constant)


def grid_axes(n, origin, spacing):
    """Coordinates of the grid points along x, y, z (float64)."""
    return [origin[d] + spacing[d] * np.arange(n[d], dtype=np.float64) for d in range(3)]


def dcs(xyzq, n, origin, spacing, chunk=64):
    """Potential map of charges xyzq (natoms x 4: x, y, z, q) on an
    n = (nx, ny, nz) grid. Vectorised over the points, atoms in chunks."""
    xyzq = np.asarray(xyzq, dtype=np.float64)
    x, y, z = grid_axes(n, origin, spacing)
    Z, Y, X = np.meshgrid(z, y, x, indexing="ij")       # shape (nz, ny, nx)
    pts = np.stack([X.ravel(), Y.ravel(), Z.ravel()], axis=1)
    v = np.zeros(len(pts))
    for a in range(0, len(xyzq), chunk):
        at = xyzq[a:a + chunk]
        d = pts[:, None, :] - at[None, :, :3]          # (points, atoms, 3)
        r2 = np.einsum("pad,pad->pa", d, d)
        keep = r2 >= MIN_R2
        inv = np.zeros_like(r2)
        inv[keep] = 1.0 / np.sqrt(r2[keep])
        v += inv @ at[:, 3]
    return (COULOMB * v).reshape(n[2], n[1], n[0])


def max_rel_error(out, ref):
    """md.h's md_max_rel_error: max |out - ref| / max |ref|; any NaN gives inf."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if np.isnan(out).any():
        return float("inf")
    scale = np.abs(ref).max() or 1.0
    return float(np.abs(out - ref).max() / scale)


def read_dx(path):
    """Read an OpenDX scalar field as md_write_dx writes it (Angstrom in the
    file). Returns (values, origin, spacing, items): values with shape
    (nx, ny, nz) (DX order: x slowest, z fastest), origin and spacing in nm
    (axis-aligned deltas), and the item count the header declares."""
    counts = origin = items = None
    deltas, vals, reading = [], [], False
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            if reading:
                if w[0] in ("attribute", "object", "component"):
                    reading = False
                else:
                    vals.extend(float(x) for x in w)
                    continue
            if w[:4] == ["object", "1", "class", "gridpositions"]:
                counts = [int(x) for x in w[-3:]]
            elif w[0] == "origin":
                origin = np.array([float(x) for x in w[1:4]]) * 0.1
            elif w[0] == "delta":
                deltas.append([float(x) * 0.1 for x in w[1:4]])
            elif w[0] == "object" and "follows" in w:
                items = int(w[w.index("items") + 1])
                reading = True
    if counts is None or origin is None or len(deltas) != 3 or len(vals) != np.prod(counts):
        raise ValueError("%s: not a complete OpenDX scalar field" % path)
    deltas = np.array(deltas)
    if np.abs(deltas - np.diag(np.diag(deltas))).max() > 0:
        raise ValueError("%s: deltas are not axis-aligned" % path)
    return np.array(vals).reshape(counts), origin, np.diag(deltas).copy(), items
