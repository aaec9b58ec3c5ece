"""float64 numpy reference for md.h's rdf section: pair counts, g(r), n(r), and a DCD
reader written from the format description (not from md.h's code).

Conventions (the same as md.h, stated independently here):
  * bins cover r in [0, rmax) with width rmax / nbins; a pair with r < rmax lands in bin
    floor(r / width), clamped to nbins - 1;
  * minimum image in an orthorhombic box: d -= L * round(d / L);
  * A = B: each unordered pair i < j once, pairs = na (na - 1) / 2, centres = na / 2;
    A != B: ordered pairs (a, b), a != b, pairs = na nb - |A & B|, centres = na;
  * g_k = counts_k / (V_k * frames-summed pairs / V), V_k the shell volume;
    n_k = cumulative counts / summed centres.
"""
import struct

import numpy as np


def pair_distances(pos, box, sel_a, sel_b=None):
    """Distances (float64) of the counted pairs: i < j within sel_a when sel_b is None,
    else every (a, b) with a != b."""
    pos = np.asarray(pos, dtype=np.float64)
    box = np.asarray(box, dtype=np.float64)
    a = pos[sel_a]
    b = a if sel_b is None else pos[sel_b]
    d = b[None, :, :] - a[:, None, :]
    d -= box * np.round(d / box)
    r = np.sqrt((d * d).sum(axis=2))
    if sel_b is None:
        iu = np.triu_indices(len(sel_a), k=1)
        return r[iu]
    keep = np.asarray(sel_a)[:, None] != np.asarray(sel_b)[None, :]
    return r[keep]


def rdf_counts(pos, box, sel_a, sel_b, rmax, nbins):
    """Integer counts per bin (float64 distances)."""
    r = pair_distances(pos, box, sel_a, sel_b)
    r = r[r < rmax]
    k = np.minimum((r / (rmax / nbins)).astype(np.int64), nbins - 1)
    return np.bincount(k, minlength=nbins).astype(np.int64)


def normalize(counts, rmax, sum_pair_density, sum_centers):
    """g(r) and n(r) from counts and the summed normalization."""
    nbins = len(counts)
    edges = np.arange(nbins + 1) * (rmax / nbins)
    shell = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
    g = counts / (shell * sum_pair_density)
    n = np.cumsum(counts) / sum_centers
    return g, n


def selection_norm(sel_a, sel_b, box):
    """(pairs / volume, centres) one frame adds."""
    vol = float(np.prod(box))
    if sel_b is None:
        na = len(sel_a)
        return na * (na - 1) / 2.0 / vol, na / 2.0
    common = len(set(map(int, sel_a)) & set(map(int, sel_b)))
    return (len(sel_a) * len(sel_b) - common) / vol, float(len(sel_a))


def read_dcd(path):
    """Frames of a DCD file as a list of (xyz in nm, box in nm or None).

    Fortran records with 4-byte markers; byte order from the first marker (84);
    header 'CORD' + 20 int32 (ICNTRL[10]: unit cell per frame, ICNTRL[19]: CHARMM version);
    title record; NATOM record; per frame [cell: 6 float64 A, gamma, B, beta, alpha, C]
    then X, Y, Z float32 records in Angstrom."""
    data = open(path, "rb").read()
    if struct.unpack("<i", data[:4])[0] == 84:
        e = "<"
    elif struct.unpack(">i", data[:4])[0] == 84:
        e = ">"
    else:
        raise ValueError("not a DCD file")
    off = 0

    def record():
        nonlocal off
        (n,) = struct.unpack(e + "i", data[off:off + 4])
        body = data[off + 4:off + 4 + n]
        (m,) = struct.unpack(e + "i", data[off + 4 + n:off + 8 + n])
        if m != n or len(body) != n:
            raise ValueError("bad record at byte %d" % off)
        off += 8 + n
        return body

    head = record()
    assert head[:4] == b"CORD"
    icntrl = struct.unpack(e + "20i", head[4:84])
    record()  # title
    (natom,) = struct.unpack(e + "i", record())
    has_cell = icntrl[19] != 0 and icntrl[10] != 0
    frames = []
    while off < len(data):
        box = None
        if has_cell:
            c = struct.unpack(e + "6d", record())
            box = 0.1 * np.array([c[0], c[2], c[5]])
        xyz = [np.frombuffer(record(), dtype=e + "f4").astype(np.float64) for _ in range(3)]
        frames.append((0.1 * np.stack(xyz, axis=1), box))
    assert all(len(f[0]) == natom for f in frames)
    return frames
