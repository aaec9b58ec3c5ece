"""Compare md.h's replica exchange (md_remd_exchange, md_remd_probability) with reference/remd.py.
Seeds: 1, 77, 2**40 + 3. Decisions, slots and statistics must match exactly (the same uniform
stream and the same comparison; a decision could only differ if a uniform fell within one ulp
of its probability). Velocity factors and probabilities to 1e-15 relative (libm's exp and
sqrt against Python's, which call the same functions on one machine but need not elsewhere)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remd import Ladder, probability  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.join(ROOT, "build", "reference", "dump_remd")
failed = 0


def report(name, ok, why=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failed += 0 if ok else 1


def close(a, b, rel=1e-15):
    return abs(a - b) <= rel * max(1.0, abs(b))


for seed in (1, 77, 2**40 + 3):
    out = subprocess.run([EXE, str(seed)], capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [line.split() for line in out if line]
    temps = [float(v) for v in rows[0][1:]]
    n = len(temps)
    lad = Ladder(temps, seed)
    rounds = [r for r in rows if r[0] == "round"]
    bad = []
    naccepted = 0
    for r in rounds:
        e = [float(v) for v in r[2:2 + n]]
        a = r.index("acc")
        s = r.index("slot")
        f = r.index("scale")
        acc_c = [int(v) for v in r[a + 1:s]]
        slot_c = [int(v) for v in r[s + 1:f]]
        scale_c = [float(v) for v in r[f + 1:]]
        acc, scale = lad.exchange(e)
        naccepted += sum(1 for v in acc if v == 1)
        if acc != acc_c or lad.slot_of() != slot_c or not all(close(x, y) for x, y in zip(scale_c, scale)):
            bad.append(r[1])
    # 400 rounds of 8 replicas: the counts are checked so that an empty dump cannot pass
    report(f"exchange decisions, slots, velocity factors seed {seed}",
           len(rounds) == 400 and not bad and 0 < naccepted < 400 * 4,
           f"{len(rounds)} rounds, {naccepted} accepted, first differing round {bad[:1]}")
    stats = [[int(v) for v in r[1:]] for r in rows if r[0] == "stats"]
    report(f"attempts and accepts per pair seed {seed}",
           stats == [[lad.attempts[k], lad.accepts[k]] for k in range(n - 1)], f"{stats} vs {lad.attempts} {lad.accepts}")
    probs = [[float(v) for v in r[1:]] for r in rows if r[0] == "prob"]
    ok = len(probs) == 50 and all(close(p[4], probability(*p[:4])) for p in probs)
    ok = ok and any(0.0 < p[4] < 1.0 for p in probs) and any(p[4] == 1.0 for p in probs)
    report(f"acceptance probability seed {seed}", ok, f"{probs[:1]}")

sys.exit(1 if failed else 0)
