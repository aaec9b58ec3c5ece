#!/usr/bin/env bash
# examples/potential_map_multi on 3,000 random charges, 20^3 points, 3 workers (sharing the GPU
# on a one-GPU machine), 3 planes a slab (7 slabs): it must pass its own check (64 points vs
# md_dcs_simple, no point unwritten), print the last progress line and write a readable .dx.
# SKIP without a GPU.
set -u
cd "$(dirname "$0")/.."
bin=build/examples/potential_map_multi
if [ ! -x "$bin" ]; then echo "SKIP potential_map_multi: not built (nvcc missing?)"; exit 0; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
"$bin" --random 3000 --grid 20 --workers 3 --planes 3 --out "$t/map.dx" > "$t/log" 2>&1; rc=$?
if grep -q '^SKIP: ' "$t/log"; then echo "SKIP potential_map_multi: $(sed -n 's/^SKIP: //p' "$t/log" | head -n 1)"; exit 0; fi
cat "$t/log"
if [ "$rc" -eq 0 ] && grep -q '^check: .*(ok' "$t/log" && grep -q '^ *7/7 slabs  100%' "$t/log" &&
   grep -q 'object 1 class gridpositions counts 20 20 20' "$t/map.dx"; then
  echo "PASS potential_map_multi"
else
  echo "FAIL potential_map_multi: exit $rc, or no ok check, no 7/7 progress line or no 20^3 .dx"
  exit 1
fi
