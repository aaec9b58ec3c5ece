#!/usr/bin/env bash
# examples/water_pme on the water and salt-water PDB files reference/dump_ewald writes: with
# --ewald it checks itself (exit 0 only if PME's RMS relative force error against the classic
# Ewald sum is within the tolerance, 5e-4), the forces CSV has one line per atom, and the
# energy it prints equals reference/dump_ewald's own md.h numbers for the same file (the same
# functions on the same PDB: 1e-6 relative); bad input (a missing file, an unknown residue, no
# CRYST1 box, order 7, a malformed number) exits non-zero with a message naming the fault.
set -u
cd "$(dirname "$0")/.."
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; }
make -s build/examples/water_pme build/reference/dump_ewald >/dev/null || { bad "examples/water_pme build" "make failed"; exit 1; }
build/reference/dump_ewald "$t" > /dev/null || { bad "dump_ewald" "failed"; exit 1; }
for box in water salt; do
  n=$(awk '/^n /{print $2}' "$t/${box}_meta.txt")
  if build/examples/water_pme "$t/$box.pdb" --ewald --forces "$t/f.csv" > "$t/log" 2>&1 &&
     [ "$(wc -l < "$t/f.csv")" -eq $((n + 1)) ] && grep -q "RMS relative force error" "$t/log" &&
     python3 - "$t/log" "$t/${box}_energy.f64" <<'PY'
import sys, numpy as np
log = {}
for line in open(sys.argv[1]):
    w = line.split()
    if w and w[0] in ("real", "exclusions", "self", "reciprocal") and "kJ/mol" in w:
        log[w[0]] = float(w[w.index("kJ/mol") - 1])
ref = np.fromfile(sys.argv[2], dtype="<f8")  # coul_real, coul_excl, coul_self, coul_recip
got = np.array([log["real"], log["exclusions"], log["self"], log["reciprocal"]])
sys.exit(0 if np.all(np.abs(got - ref) <= 1e-6 * np.abs(ref) + 1e-6) else 1)
PY
  then ok "examples/water_pme $box.pdb: energies, forces CSV, PME within the tolerance of Ewald"
  else bad "examples/water_pme $box.pdb" "$(cat "$t/log")"; fi
done
if ! build/examples/water_pme "$t/none.pdb" > "$t/log" 2>&1 && grep -q "none.pdb" "$t/log"
then ok "examples/water_pme names a missing file"; else bad "examples/water_pme missing" "$(cat "$t/log")"; fi
sed 's/ HOH / LIG /' "$t/water.pdb" > "$t/lig.pdb"
if ! build/examples/water_pme "$t/lig.pdb" > "$t/log" 2>&1 && grep -q "LIG" "$t/log"
then ok "examples/water_pme refuses an unknown residue"; else bad "examples/water_pme residue" "$(cat "$t/log")"; fi
grep -v CRYST1 "$t/water.pdb" > "$t/nobox.pdb"
if ! build/examples/water_pme "$t/nobox.pdb" > "$t/log" 2>&1 && grep -q "box" "$t/log"
then ok "examples/water_pme refuses a file without a box"; else bad "examples/water_pme box" "$(cat "$t/log")"; fi
if ! build/examples/water_pme "$t/water.pdb" --order 7 > "$t/log" 2>&1 && grep -q "order" "$t/log" &&
   ! build/examples/water_pme "$t/water.pdb" --cutoff 0.9x > "$t/log" 2>&1 && grep -q -- "--cutoff: not a number" "$t/log"
then ok "examples/water_pme refuses a bad --order or --cutoff"; else bad "examples/water_pme options" "$(cat "$t/log")"; fi
