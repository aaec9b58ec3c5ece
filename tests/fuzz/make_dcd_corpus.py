"""Write the seed corpus of tests/fuzz/fuzz_dcd.c into tests/fuzz/corpus/dcd/: tiny DCD
files (3 atoms, 2 frames) in both byte orders, with and without unit cells, written
here with struct from the format description (not by md.h).
    python3 tests/fuzz/make_dcd_corpus.py"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "dcd")


def record(e, payload):
    return struct.pack(e + "i", len(payload)) + payload + struct.pack(e + "i", len(payload))


def dcd(e, cell, natoms=3, nframes=2):
    icntrl = [0] * 20
    icntrl[0], icntrl[2], icntrl[3], icntrl[10], icntrl[19] = nframes, 1, nframes, int(cell), 24
    head = b"CORD" + struct.pack(e + "20i", *icntrl)
    title = struct.pack(e + "i", 1) + b"REMARKS fuzz seed".ljust(80)
    out = record(e, head) + record(e, title) + record(e, struct.pack(e + "i", natoms))
    for f in range(nframes):
        if cell:
            out += record(e, struct.pack(e + "6d", 20.0, 0.0, 21.0, 0.0, 0.0, 22.0 + f))
        for axis in range(3):
            out += record(e, struct.pack(e + "%df" % natoms, *[1.5 * i + axis + 0.25 * f for i in range(natoms)]))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for e, tag in (("<", "le"), (">", "be")):
        for cell in (True, False):
            with open(os.path.join(OUT, "%s_%s.dcd" % (tag, "cell" if cell else "nocell")), "wb") as f:
                f.write(dcd(e, cell))


if __name__ == "__main__":
    main()
