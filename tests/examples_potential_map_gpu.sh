#!/usr/bin/env bash
# examples/potential_map_gpu on 3,000 random charges, 20^3 points, 3 progress chunks: it must
# pass its own check (64 points vs md_dcs_simple) and write a readable .dx. SKIP without a GPU.
set -u
cd "$(dirname "$0")/.."
bin=build/examples/potential_map_gpu
if [ ! -x "$bin" ]; then echo "SKIP potential_map_gpu: not built (nvcc missing?)"; exit 0; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
"$bin" --random 3000 --grid 20 --chunks 3 --out "$t/map.dx" > "$t/log" 2>&1; rc=$?
if grep -q '^SKIP: ' "$t/log"; then echo "SKIP potential_map_gpu: $(sed -n 's/^SKIP: //p' "$t/log" | head -n 1)"; exit 0; fi
cat "$t/log"
if [ "$rc" -eq 0 ] && grep -q '^check: .*(ok' "$t/log" && [ "$(grep -c '^  chunk ' "$t/log")" -eq 3 ] &&
   grep -q 'object 1 class gridpositions counts 20 20 20' "$t/map.dx"; then
  echo "PASS potential_map_gpu"
else
  echo "FAIL potential_map_gpu: exit $rc, or no ok check, 3 chunk lines and a 20^3 .dx"
  exit 1
fi
