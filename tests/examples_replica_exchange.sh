#!/usr/bin/env bash
# examples/replica_exchange on 4 replicas of 300 TIP3P molecules, its default 5 ps of
# equilibration, 10 exchanges of 20 steps: must exit 0 and print the acceptance of the 3 neighbour
# pairs (each in [0, 1], 5 attempts each), 4 round-trip counts and 4 mean potential energies per
# molecule between -50 and -30 kJ/mol (TIP3P near 300 K: about -41; the built box, before it has
# settled, is near -27 after 0.4 ps: the range fails a run without equilibration). SKIP without a GPU.
set -u
cd "$(dirname "$0")/.."
bin=build/examples/replica_exchange
if [ ! -x "$bin" ]; then echo "SKIP replica_exchange: not built (nvcc missing?)"; exit 0; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
"$bin" --replicas 4 --molecules 300 --exchanges 10 --steps 20 > "$t/log" 2>&1; rc=$?
if grep -q '^SKIP: ' "$t/log"; then echo "SKIP replica_exchange: $(sed -n 's/^SKIP: //p' "$t/log" | head -n 1)"; exit 0; fi
cat "$t/log"
pairs=$(grep -cE '^ +[0-9.]+ K <-> +[0-9.]+ K: +[01]\.[0-9]+ \([0-9]+ of 5\)' "$t/log")
trips=$(grep -E '^round trips' "$t/log" | awk -F: '{print (NF > 1 ? split($2, a, " ") : 0)}')
energies=$(awk '/^mean potential/{f=1; next} f && /K:/{e=$3; if (e > -50 && e < -30) n++} END{print n+0}' "$t/log")
if [ "$rc" -eq 0 ] && [ "$pairs" -eq 3 ] && [ "$trips" = "4" ] && [ "$energies" -eq 4 ]; then
  echo "PASS replica_exchange"
else
  echo "FAIL replica_exchange: exit $rc, $pairs pair lines (want 3), $trips round-trip counts (want 4), $energies energies in range (want 4)"
  exit 1
fi
