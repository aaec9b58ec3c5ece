#!/usr/bin/env python3
"""Seed corpus for tests/fuzz/fuzz_checkpoint.c: valid md.h checkpoints (layout version 1, see
md.h's checkpoint section) of 1, 3 and 7 atoms with and without barostat state, and a damaged
one (wrong hash). Run from the repository root; writes tests/fuzz/corpus/checkpoint/."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "checkpoint")


def fnv1a(b):
    h = 0xcbf29ce484222325
    for c in b:
        h ^= c
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint(n, step, baro):
    head = b"MDCHKPT\n" + struct.pack("<IIqd3dQ4QdIIqq", 1, n, step, 0.002 * step, 2.0, 2.5, 3.0, 12345,
                                      1, 2, 3, 4, 0.08 if baro else 0.0, 7 if baro else 0, 3 if baro else 0,
                                      70 if baro else 0, 31 if baro else 0)
    assert len(head) == 128
    body = b"".join(struct.pack("<d", 0.1 * k) for k in range(3 * n))
    body += b"".join(struct.pack("<d", -0.01 * k) for k in range(3 * n))
    data = head + body
    return data + struct.pack("<Q", fnv1a(data))


def main():
    os.makedirs(OUT, exist_ok=True)
    for n, step, baro in ((1, 0, False), (3, 1000, True), (7, 123456789, False)):
        with open(os.path.join(OUT, "n%d.chk" % n), "wb") as f:
            f.write(checkpoint(n, step, baro))
    bad = bytearray(checkpoint(3, 5, False))
    bad[-1] ^= 0xFF
    with open(os.path.join(OUT, "bad_hash.chk"), "wb") as f:
        f.write(bytes(bad))


if __name__ == "__main__":
    main()
