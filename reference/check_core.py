"""Compare md.h's RNG and random-charge builder with reference/core.py.
Seeds: 0, 1234, 2**63 + 5. Integers must match exactly; doubles to 1e-15
relative (the same IEEE operations, libm log/cos may differ in the last ulp);
float32 positions/charges to float32 rounding (1e-6 relative to the box)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from core import Xoshiro256ss, random_charges  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.join(ROOT, "build", "reference", "dump_core")
failed = 0


def report(name, ok, why=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failed += 0 if ok else 1


for seed in (0, 1234, 2**63 + 5):
    out = subprocess.run([EXE, str(seed)], capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [line.split() for line in out if line]
    g = Xoshiro256ss(seed)
    nxt = [int(r[1]) for r in rows if r[0] == "next"]
    ref = [g.next() for _ in nxt]
    # dump_core prints 8 next, 4 uniform, 4 normal and 5 atoms: the counts are checked too, so a
    # dump that printed nothing cannot pass by comparing empty lists
    report(f"xoshiro256** seed {seed}", len(nxt) == 8 and nxt == ref, f"{len(nxt)} values: {nxt[:2]} vs {ref[:2]}")
    uni = [float(r[1]) for r in rows if r[0] == "uniform"]
    ref = [g.uniform() for _ in uni]
    report(f"uniform seed {seed}", len(uni) == 4 and all(abs(a - b) <= 1e-15 * max(1.0, abs(b)) for a, b in zip(uni, ref)),
           f"{uni} vs {ref}")
    nor = [float(r[1]) for r in rows if r[0] == "normal"]
    ref = [g.normal() for _ in nor]
    report(f"normal seed {seed}", len(nor) == 4 and all(abs(a - b) <= 1e-13 * max(1.0, abs(b)) for a, b in zip(nor, ref)),
           f"{nor} vs {ref}")
    atoms = [[float(v) for v in r[1:]] for r in rows if r[0] == "atom"]
    ref = random_charges(len(atoms), (2.5, 3.0, 3.5), 0.8, seed)
    ok = len(atoms) == 5 and all(abs(a - b) <= 1e-6 * 3.5 for A, B in zip(atoms, ref) for a, b in zip(A, B))
    report(f"random charges seed {seed}", ok, f"{atoms[0]} vs {ref[0]}")

sys.exit(1 if failed else 0)
