#!/usr/bin/env bash
# examples/lj_fluid on 4^3 cells (256 atoms), 400 steps, a line every 100: it must print 4 progress
# lines, conserve energy (its own check) and write a DCD that md.h reads back (5 frames of 256
# atoms, with a box). SKIP without a GPU.
set -u
cd "$(dirname "$0")/.."
bin=build/examples/lj_fluid
if [ ! -x "$bin" ]; then echo "SKIP lj_fluid: not built (nvcc missing?)"; exit 0; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
"$bin" --cells 4 --steps 400 --every 100 --out "$t/run.dcd" > "$t/log" 2>&1; rc=$?
if grep -q '^SKIP: ' "$t/log"; then echo "SKIP lj_fluid: $(sed -n 's/^SKIP: //p' "$t/log" | head -n 1)"; exit 0; fi
cat "$t/log"
lines=$(grep -cE '^ +[0-9]+\.[0-9] +[0-9.]+ +-?[0-9.]+ ' "$t/log")
if [ "$rc" -eq 0 ] && [ "$lines" -eq 4 ] && grep -q '^check: .*(ok' "$t/log" &&
   grep -q 'wrote .*: 5 frames of 256 atoms' "$t/log" && [ -s "$t/run.dcd" ]; then
  echo "PASS lj_fluid"
else
  echo "FAIL lj_fluid: exit $rc, $lines progress lines (want 4), or no ok check / DCD"
  exit 1
fi
