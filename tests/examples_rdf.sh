#!/usr/bin/env bash
# examples/rdf on a DCD made by reference/dump_rdf: the CSV has a header and one line per
# bin, and g(r) of this uniform random frame averages 1 within 0.1 over 0.5..1.5 nm
# (1500 atoms: each bin's g has a Poisson error of a few percent, 40 bins averaged);
# bad input (box below 2 rmax, empty selection, missing file) exits 1 with a clear message;
# a malformed --bins or --rmax exits 2 naming the option.
set -u
cd "$(dirname "$0")/.."
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; }
make -s build/examples/rdf build/reference/dump_rdf >/dev/null || { bad "examples/rdf build" "make failed"; exit 1; }
build/reference/dump_rdf "$t" || { bad "dump_rdf" "failed"; exit 1; }
if build/examples/rdf "$t/traj_le.dcd" "$t/g.csv" --rmax 1.5 --bins 60 > "$t/log" 2>&1 &&
   [ "$(head -1 "$t/g.csv")" = "r_nm,g,n" ] && [ "$(wc -l < "$t/g.csv")" -eq 61 ] &&
   python3 - "$t/g.csv" <<'PY'
import sys, numpy as np
d = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1)
m = d[(d[:, 0] > 0.5)][:, 1].mean()
sys.exit(0 if abs(m - 1) < 0.1 else 1)
PY
then ok "examples/rdf writes g(r) of a DCD"; else bad "examples/rdf writes g(r) of a DCD" "$(cat "$t/log")"; fi
if build/examples/rdf "$t/traj_be.dcd" "$t/h.csv" --a "index 0-499" --b "index 500-1499" --rmax 1.5 > "$t/log" 2>&1 &&
   [ "$(wc -l < "$t/h.csv")" -eq 201 ]; then ok "examples/rdf A != B, big-endian DCD"; else bad "examples/rdf A != B" "$(cat "$t/log")"; fi
if ! build/examples/rdf "$t/traj_le.dcd" "$t/x.csv" --rmax 1.6 > "$t/log" 2>&1 && grep -q "field box" "$t/log" && [ ! -e "$t/x.csv" ]
then ok "examples/rdf refuses a box below 2 rmax"; else bad "examples/rdf box" "$(cat "$t/log")"; fi
if ! build/examples/rdf "$t/traj_le.dcd" "$t/x.csv" --a "name OW" > "$t/log" 2>&1 && grep -q "matches no atom" "$t/log"
then ok "examples/rdf refuses an empty selection"; else bad "examples/rdf selection" "$(cat "$t/log")"; fi
if ! build/examples/rdf "$t/none.dcd" "$t/x.csv" > "$t/log" 2>&1 && grep -q "none.dcd" "$t/log"
then ok "examples/rdf names a missing file"; else bad "examples/rdf missing" "$(cat "$t/log")"; fi
if ! build/examples/rdf "$t/traj_le.dcd" "$t/x.csv" --bins 12x > "$t/log" 2>&1 && grep -q -- "--bins: not a number ('12x')" "$t/log" &&
   ! build/examples/rdf "$t/traj_le.dcd" "$t/x.csv" --bins 0 > "$t/log" 2>&1 && grep -q -- "--bins: must be a whole number" "$t/log" &&
   ! build/examples/rdf "$t/traj_le.dcd" "$t/x.csv" --rmax 1.2.3 > "$t/log" 2>&1 && grep -q -- "--rmax: not a number" "$t/log" &&
   [ ! -e "$t/x.csv" ]
then ok "examples/rdf refuses a malformed --bins or --rmax"; else bad "examples/rdf options" "$(cat "$t/log")"; fi
