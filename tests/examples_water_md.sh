#!/usr/bin/env bash
# examples/water_md on 300 TIP3P molecules: 1 ps of equilibration and 2 ps of production with a
# frame every 0.5 ps must print 5 + 4 progress lines, write a DCD that md.h reads back (4 frames of
# 900 atoms, with a box), a CSV with a header and 4 rows and a checkpoint; a restart from that
# checkpoint continues (its first line's step is 1500 + 250). SKIP without a GPU.
set -u
cd "$(dirname "$0")/.."
bin=build/examples/water_md
if [ ! -x "$bin" ]; then echo "SKIP water_md: not built (nvcc missing?)"; exit 0; fi
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
"$bin" --molecules 300 --equil 1 --ps 2 --every 0.5 --out "$t/w" > "$t/log" 2>&1; rc=$?
if grep -q '^SKIP: ' "$t/log"; then echo "SKIP water_md: $(sed -n 's/^SKIP: //p' "$t/log" | head -n 1)"; exit 0; fi
cat "$t/log"
lines=$(grep -c '^step [0-9]*/[0-9]* .* ns/day' "$t/log")
rows=$(($(wc -l < "$t/w.csv") - 1))
if [ "$rc" -eq 0 ] && [ "$lines" -eq 9 ] && [ "$rows" -eq 4 ] && [ -s "$t/w.chk" ] &&
   python3 - "$t/w.dcd" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<i", b[0:4])[0]
assert n == 84 and b[4:8] == b"CORD", "not a DCD"
nframes = struct.unpack("<i", b[8:12])[0]
assert nframes == 4, "frames %d" % nframes
PY
then :; else echo "FAIL water_md: exit $rc, $lines progress lines (want 9), $rows CSV rows (want 4), or no DCD/checkpoint"; exit 1; fi
"$bin" --molecules 300 --ps 0.5 --every 0.5 --restart "$t/w.chk" --out "$t/r" > "$t/log2" 2>&1; rc=$?
cat "$t/log2"
if [ "$rc" -eq 0 ] && grep -q '^restarted from .* at step 1500' "$t/log2" && grep -q '^step 1750/' "$t/log2"; then
  echo "PASS water_md"
else
  echo "FAIL water_md: the restart did not continue at step 1500 (exit $rc)"
  exit 1
fi
