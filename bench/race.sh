#!/usr/bin/env bash
# The race of chapter 08: md.h's GPU step against OpenMM's on the same TIP3P boxes, on the same
# GPU, in one run.
#   bench/race.sh               the 23,568- and 95,766-atom boxes: each code's time per step, the
#                               ratio (the goal: md.h <= 0.67 x OpenMM), and the potential
#                               energy of the same configuration from both (the same physics),
#                               and OpenMM's reciprocal force group alone (chapter 07's peer)
#   bench/race.sh --drift PS    also the NVE energy drift over PS ps on the 23,568-atom box
#                               (20 ps of Langevin first), md.h vs OpenMM's VerletIntegrator
#   bench/race.sh --drift PS --seeds K
#                               the drift from K starting points (seeds 2026 .. 2026+K-1 draw the
#                               velocities and the Langevin noise of both codes; default 1): one
#                               slope moves a lot from start to start, so the comparison is of the
#                               means over the seeds, with their standard errors
#   bench/race.sh --drift-only  the drift alone (no step timings)
#   bench/race.sh --drift PS --ewald-tolerance T
#                               the drift of both codes at Ewald tolerance T instead of 5e-4 (the
#                               step timings keep 5e-4); tutorial 08's drift table has why
#   bench/race.sh --steps N     timed steps per code and box (default 2000)
#   bench/race.sh --quick       the 23,568-atom box only, 500 steps
# Settings (both codes): TIP3P (OpenMM's tip3p.xml values), rigid water, PME with Ewald
# tolerance 5e-4 and cutoff 0.9 nm (LJ cut there with the dispersion correction, OpenMM's
# NonbondedForce), 2 fs, LangevinMiddle 300 K at 1/ps; OpenMM on its CUDA platform in mixed
# precision. The boxes are md.h's builder's, written as PDB files both codes read
# (build/chapters/08_md_step --write-pdb). Needs nvcc, a GPU and OpenMM importable by python3 (on
# a device machine: wheels carried in .whl/, installed here into a temporary folder; see
# bench/README.md). Every measurement is one JSON line in ${OUT:-build/race}/race.jsonl; the
# table at the end compares only numbers of this run.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/race}
STEPS=2000; DRIFT=0; QUICK=0; SEEDS=1; DRIFT_ONLY=0; DRIFT_TOL=
while [ $# -gt 0 ]; do
  case "$1" in
    --drift) DRIFT=$2; shift ;;
    --seeds) SEEDS=$2; shift ;;
    --drift-only) DRIFT_ONLY=1 ;;
    --ewald-tolerance) DRIFT_TOL=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --quick) QUICK=1; STEPS=500 ;;
    *) echo "usage: $0 [--quick] [--steps N] [--drift PS [--seeds K] [--drift-only] [--ewald-tolerance T]]" >&2; exit 2 ;;
  esac
  shift
done
case "$SEEDS" in ''|*[!0-9]*|0) echo "$0: --seeds wants a positive integer (got '$SEEDS')" >&2; exit 2 ;; esac
if [ "$DRIFT" = 0 ] && { [ "$DRIFT_ONLY" -eq 1 ] || [ -n "$DRIFT_TOL" ]; }; then
  echo "$0: --drift-only and --ewald-tolerance want --drift PS" >&2; exit 2
fi
mkdir -p "$OUT"
J=$OUT/race.jsonl
: > "$J"
for d in /usr/local/cuda/bin; do [ -d "$d" ] && PATH="$PATH:$d"; done
make -s build/chapters/08_md_step || { echo "FAIL race: build/chapters/08_md_step did not build"; exit 1; }
if ! python3 -c 'import openmm' 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  SITE=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl &&
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! python3 -c 'import openmm' 2>/dev/null; then
  echo "FAIL race: OpenMM is not importable by python3 (carry its wheels in .whl/, see bench/README.md)"
  exit 1
fi
build/chapters/08_md_step --write-pdb "$OUT/water" || exit 1
BOXES="23568 95766"
[ "$QUICK" -eq 1 ] && BOXES=23568
[ "$DRIFT_ONLY" -eq 1 ] && BOXES=
rc=0
for n in $BOXES; do
  pdb=$OUT/water_$n.pdb
  echo "== $n atoms"
  build/chapters/08_md_step --race "$pdb" --steps "$STEPS" | tee -a "$OUT/race.log" | grep '"md_race/1"' >> "$J" || rc=1
  python3 bench/peers.py openmm-energy --pdb "$pdb" | grep '"md_peer/1"' >> "$J" || rc=1
  python3 bench/peers.py openmm-step --pdb "$pdb" --steps "$STEPS" | grep '"md_peer/1"' >> "$J" || rc=1
  # OpenMM's reciprocal force group alone (chapter 07's goal compares md.h's PME with it)
  python3 bench/peers.py openmm-recip --pdb "$pdb" --steps "$STEPS" | grep '"md_peer/1"' >> "$J" || rc=1
done
if [ "$DRIFT" != 0 ]; then
  pdb=$OUT/water_23568.pdb
  for k in $(seq 0 $((SEEDS - 1))); do
    seed=$((2026 + k))
    echo "== NVE drift, $DRIFT ps, seed $seed${DRIFT_TOL:+, Ewald tolerance $DRIFT_TOL}"
    build/chapters/08_md_step --drift "$DRIFT" --seed "$seed" --race "$pdb" ${DRIFT_TOL:+--ewald-tolerance "$DRIFT_TOL"} |
      grep '"md_race/1"' >> "$J" || rc=1
    python3 bench/peers.py openmm-drift --pdb "$pdb" --ps "$DRIFT" --seed "$seed" ${DRIFT_TOL:+--tolerance "$DRIFT_TOL"} |
      grep '"md_peer/1"' >> "$J" || rc=1
  done
fi
python3 - "$J" <<'EOF' || rc=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def pick(code, what, atoms):
    for r in rows:
        c = "md.h" if r.get("schema") == "md_race/1" else "openmm"
        if c == code and r.get("what") == what and r.get("atoms") == atoms:
            return r
    return None
bad = 0
if any(r.get("what") == "step" for r in rows):
    print("\n%-8s %14s %14s %8s %6s %18s %18s %10s" % ("atoms", "md.h us/step", "OpenMM us/step", "ratio", "goal",
                                                     "E md.h (kJ/mol)", "E OpenMM (kJ/mol)", "rel diff"))
for atoms in sorted({r["atoms"] for r in rows}):
    m, o, e = pick("md.h", "step", atoms), pick("openmm", "step", atoms), pick("openmm", "energy", atoms)
    if not (m and o and e):
        continue
    ratio = m["s_per_step"] / o["s_per_step"]
    de = abs(m["potential_kj_mol"] - e["potential_kj_mol"]) / abs(e["potential_kj_mol"])
    ok = ratio <= 0.67
    bad += not ok
    print("%-8d %14.1f %14.1f %8.3f %6s %18.2f %18.2f %10.2e" % (atoms, 1e6 * m["s_per_step"], 1e6 * o["s_per_step"],
          ratio, "ok" if ok else "MISS", m["potential_kj_mol"], e["potential_kj_mol"], de))
    print("         md.h %.0f ns/day, OpenMM %.0f ns/day; PME grid md.h %s, OpenMM %s" % (
          m["ns_per_day"], o["ns_per_day"], m["pme_grid"], o["pme_grid"]))
    r = pick("openmm", "recip", atoms)
    if r:
        print("         OpenMM reciprocal force group alone (with its integrator): %.1f us/step" % (1e6 * r["s_per_step"]))
def drifts(code):
    return [r for r in rows if r.get("what") == "drift" and r.get("atoms") == 23568 and
            ("md.h" if r.get("schema") == "md_race/1" else "openmm") == code]
def stats(v):  # mean, standard error of the mean (0 for one value)
    m = sum(v) / len(v)
    return m, ((sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v)) ** 0.5 if len(v) > 1 else 0.0)
dm, do = drifts("md.h"), drifts("openmm")
if dm and do:
    print("\nNVE drift, 23568 atoms, kJ/mol/ns per degree of freedom (%s ps after 20 ps of Langevin, Ewald "
          "tolerance md.h %g, OpenMM %g):" % (dm[0]["ps"], dm[0].get("ewald_tolerance", 5e-4), do[0].get("ewald_tolerance", 5e-4)))
    print("  %-6s %12s %12s" % ("seed", "md.h", "OpenMM"))
    by = {}
    for code, rs in ((0, dm), (1, do)):
        for r in rs:
            by.setdefault(r.get("seed", 2026), ["-", "-"])[code] = "%.5f" % r["drift_kj_mol_ns_per_dof"]
    for seed in sorted(by):
        print("  %-6s %12s %12s" % (seed, by[seed][0], by[seed][1]))
    (mm_, sm), (mo, so) = stats([r["drift_kj_mol_ns_per_dof"] for r in dm]), stats([r["drift_kj_mol_ns_per_dof"] for r in do])
    (am, _), (ao, _) = stats([abs(r["drift_kj_mol_ns_per_dof"]) for r in dm]), stats([abs(r["drift_kj_mol_ns_per_dof"]) for r in do])
    print("  mean   %12.5f %12.5f  (standard error %.5f, %.5f; %d and %d seeds)" % (mm_, mo, sm, so, len(dm), len(do)))
    print("  mean |slope| %6.5f %12.5f" % (am, ao))
    se = (sm * sm + so * so) ** 0.5
    if se > 0:  # the goal: md.h's mean drift no worse than OpenMM's, beyond two standard errors
        print("  md.h - OpenMM = %.5f, %.1f standard errors: %s" % (mm_ - mo, (mm_ - mo) / se,
              "WORSE" if mm_ - mo > 2 * se else "no worse (within two standard errors)"))
    else:
        print("  one seed each: %s by |slope|, which says little (bench/race.sh --seeds K)" % (
              "no worse" if am <= ao else "worse"))
sys.exit(0)
EOF
echo "results: $J"
exit $rc
