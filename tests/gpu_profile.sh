#!/usr/bin/env bash
# Nsight Compute profile of chapter 03's gpu_gather and gpu_const rungs: why is constant memory
# alone ten times slower than gather (tutorials/03_coalesced_unrolled.md)?
#
#   bash tests/gpu_profile.sh [REPORT]     (default ${OUT:-build/gpu-check}/profile.txt)
#
# Runs build/chapters/03_coalesced_unrolled --only gpu_gather,gpu_const --grid 256,256,8 --reps 1
# (4000 atoms on 256 x 256 x 8 points: 4096 blocks of 128 threads, two waves of an H100)
# under ncu twice, once per kernel, profiling the kernel's first launch (for gpu_const: the
# first 3072-atom chunk) with the sections SpeedOfLight, LaunchStats, Occupancy,
# SchedulerStats, WarpStateStats and SourceCounters and the per-reason stall metrics
# smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio. It writes one readable
# report: the two kernels' stall reasons side by side (warps stalled per issued instruction,
# largest first; their sum is the cycles between two instructions of a warp), the SASS lines of
# gpu_const with the most stall samples, then ncu's section text of each kernel.
# Called by tests/gpu_check.sh (step "ncu profile"). Exit status: 0 on success; 2 when ncu is
# not installed or may not read the GPU's performance counters (the report says which); 1 when
# anything else fails.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-check}
REPORT=${1:-$OUT/profile.txt}
mkdir -p "$(dirname "$REPORT")"
PROG=build/chapters/03_coalesced_unrolled
ARGS=(--only gpu_gather,gpu_const --grid 256,256,8 --reps 1)
REASONS="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle
         membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait"
METRICS=$(for r in $REASONS; do printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' "$r"; done)
METRICS=${METRICS%,}
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT

NCU=$(command -v ncu || true)
for c in /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu; do
  [ -z "$NCU" ] && [ -x "$c" ] && NCU=$c
done
{
  echo "Nsight Compute profile of chapter 03's gpu_gather and gpu_const rungs"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "ncu: ${NCU:-not found} $([ -n "$NCU" ] && "$NCU" --version 2>/dev/null | tail -n 1)"
  echo "program: $PROG ${ARGS[*]}"
} > "$REPORT"
if [ -z "$NCU" ]; then
  echo "SKIP: ncu (Nsight Compute) not found in PATH, /usr/local/cuda or /opt/nvidia/nsight-compute" | tee -a "$REPORT"
  exit 2
fi
if ! make -s "$PROG" >> "$TMPD/build.log" 2>&1; then
  echo "FAIL: cannot build $PROG:" | tee -a "$REPORT"; tail -n 20 "$TMPD/build.log" | tee -a "$REPORT"
  exit 1
fi

for k in gather const; do
  "$NCU" --kernel-name "md__dcs_${k}_kernel" --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section SourceCounters --metrics "$METRICS" \
    --export "$TMPD/$k" --force-overwrite "$PROG" "${ARGS[@]}" > "$TMPD/$k.log" 2>&1
  rc=$?
  if grep -q 'ERR_NVGPUCTRPERM' "$TMPD/$k.log"; then
    echo "SKIP: ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as root or allow" \
         "profiling (NVreg_RestrictProfilingToAdminUsers=0)" | tee -a "$REPORT"
    exit 2
  fi
  if [ "$rc" -ne 0 ] || [ ! -s "$TMPD/$k.ncu-rep" ]; then
    echo "FAIL: ncu exited $rc for md__dcs_${k}_kernel:" | tee -a "$REPORT"; tail -n 30 "$TMPD/$k.log" | tee -a "$REPORT"
    exit 1
  fi
  "$NCU" --import "$TMPD/$k.ncu-rep" --page raw --csv > "$TMPD/$k.raw.csv" 2> "$TMPD/$k.raw.err"
  "$NCU" --import "$TMPD/$k.ncu-rep" --page details > "$TMPD/$k.details.txt" 2>&1
  "$NCU" --import "$TMPD/$k.ncu-rep" --page source --csv --print-source sass > "$TMPD/$k.source.csv" 2> "$TMPD/$k.source.err"
done

python3 - "$TMPD" >> "$REPORT" <<'PY'
import csv, os, sys
tmp = sys.argv[1]
PRE, POST = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"

def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None

def stalls(path):
    """reason -> warps stalled per issued instruction, from ncu's raw CSV page (one row a kernel)."""
    try:
        rows = list(csv.reader(open(path, newline="")))
    except OSError:
        return {}
    head = next((r for r in rows if any(c.startswith(PRE) for c in r)), None)
    if not head:
        return {}
    # after the header: a row of units, then one row a profiled launch, its first cell the ID
    data = [r for r in rows[rows.index(head) + 1:] if len(r) == len(head) and num(r[0]) is not None]
    out = {}
    for r in data[-1:]:  # the one profiled launch
        for name, val in zip(head, r):
            if name.startswith(PRE) and name.endswith(POST) and num(val) is not None:
                out[name[len(PRE):-len(POST)]] = num(val)
    return out

g, c = stalls(os.path.join(tmp, "gather.raw.csv")), stalls(os.path.join(tmp, "const.raw.csv"))
print()
print("== Warp stall reasons: warps stalled per issued instruction (" + PRE + "<reason>" + POST + ") ==")
if not g and not c:
    print("(no stall metrics found in ncu's raw page; see the sections below)")
else:
    print("%-22s %12s %12s" % ("reason", "gpu_gather", "gpu_const"))
    for r in sorted(set(g) | set(c), key=lambda r: -max(g.get(r, 0.0), c.get(r, 0.0))):
        if max(g.get(r, 0.0), c.get(r, 0.0)) >= 0.005:
            print("%-22s %12.3f %12.3f" % (r, g.get(r, float("nan")), c.get(r, float("nan"))))
    print("%-22s %12.3f %12.3f" % ("total", sum(g.values()), sum(c.values())))
    print("(total = cycles between two issued instructions of a warp, summed over the reasons;")
    print(" reasons below 0.005 in both kernels are left out)")

# The SASS lines of gpu_const where warps were sampled stalled most often (SourceCounters).
print()
print("== md__dcs_const_kernel: the 12 SASS instructions with the most warp stall samples ==")
try:
    rows = list(csv.reader(open(os.path.join(tmp, "const.source.csv"), newline="")))
    head = next(r for r in rows if any("Sampling" in x and "All" in x for x in r))
    col = next(i for i, x in enumerate(head) if "Sampling" in x and "All" in x)
    src = next((i for i, x in enumerate(head) if x.strip().lower() == "source"), 1)
    body = [r for r in rows[rows.index(head) + 1:] if len(r) == len(head) and num(r[col]) is not None]
    total = sum(num(r[col]) for r in body) or 1.0
    print("%8s %7s  %s" % ("samples", "share", "instruction"))
    for r in sorted(body, key=lambda r: -num(r[col]))[:12]:
        print("%8d %6.1f%%  %s" % (num(r[col]), 100.0 * num(r[col]) / total, r[src].strip()[:90]))
except (OSError, StopIteration, ValueError):
    print("(ncu's source page could not be read; see the SourceCounters section below)")
PY

for k in gather const; do
  { echo; echo "== md__dcs_${k}_kernel: ncu sections (--page details) =="; cat "$TMPD/$k.details.txt"; } >> "$REPORT"
done
sed -n '/^== Warp stall reasons/,/^ reasons below/p' "$REPORT"
echo "report: $REPORT"
exit 0
