#!/usr/bin/env bash
# The one command for a GPU machine: `make gpu-check` (everything) or `make bench`
# (--bench-only: ceilings and chapter benchmarks only; --tests-only: build, GPU tests and
# compute-sanitizer only, so a machine with a 10-minute limit per command can run the two halves
# one after the other, the build kept between them; --no-sanitize leaves compute-sanitizer out
# and --sanitize-only runs only it, on the GPU tests already built, for a limit too short for
# build, tests and sanitizer in one command: on a fresh H100 machine the build takes ~4 minutes
# and the sanitizer ~5). Results go to ${OUT:-build/gpu-check},
# at most 8 files:
#   build.log       the device (nvidia-smi, nvidia-smi -q), then make -k -j16 all
#   tests.log       every build/tests/gpu_* with MD_REQUIRE_GPU=1
#   ceilings.json   build/bench/ceilings: one md_ceilings/1 JSON line
#   chapters.log    the ceilings table and every GPU chapter program's output
#   bench.jsonl     one md_bench/1 JSON line per chapter rung (--json), and the peers' md_peer/1 lines
#                   (freud's RDF of chapter 05's frame, bench/peers.py)
#   profile.txt     Nsight Compute: the warp stall reasons of chapter 03's gpu_gather and gpu_const
#                   (tests/gpu_profile.sh), then ncu's section text of both kernels
#   sanitizer.log   every GPU test under compute-sanitizer memcheck and racecheck (MD_SANITIZE=1),
#                   with each run's peak host memory (GNU time; racecheck's grows with the steps a
#                   test runs: 62.6 GB for gpu_replicas on an H200 machine of 128 GB, 2026-11-28)
#   summary.txt     per step PASS/FAIL/SKIP, the ceilings, the stall table, the condensed bench
#                   lines (also printed last)
# Order: device, build, tests, ceilings, chapters, profile, sanitizer (slowest last, so the
# numbers arrive even if the time budget runs out). No step stops the others; every step has a
# timeout, and the whole run keeps to MD_GPU_CHECK_BUDGET seconds (default 470). A step that
# fails, times out or is not reached for lack of time makes the exit status 1; SKIP (the
# profile, when ncu is missing or may not read the counters) does not.
# MD_SANITIZE_TESTS="gpu_pme gpu_step ..." limits the sanitizer step to those test programs (the
# tests of the code a change touched, when the device time left does not cover all of them).
# MD_SANITIZE=1 tells a GPU test it runs under compute-sanitizer: it must shrink its problem
# sizes and drop timing checks (tests/gpu_core.cu shows how); MD_SANITIZE_TOOL names the tool
# (under racecheck tests/gpu_step.cu leaves out one graph replay and tests/gpu_replicas.cu keeps
# its graphs' list build device-gated: racecheck's process dies on IF-node graphs; both say so).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-check}
BENCH_ONLY=0; TESTS_ONLY=0; SANITIZE=1; SANITIZE_ONLY=0
for a in "$@"; do
  case "$a" in
    --bench-only) BENCH_ONLY=1 ;;
    --tests-only) TESTS_ONLY=1 ;;
    --no-sanitize) SANITIZE=0 ;;
    --sanitize-only) SANITIZE_ONLY=1; TESTS_ONLY=1 ;;
    *) echo "usage: $0 [--bench-only | --tests-only [--no-sanitize] | --sanitize-only]   (results in \${OUT:-build/gpu-check})" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
BUDGET=${MD_GPU_CHECK_BUDGET:-470}
START=$SECONDS
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
  [ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH

STEPS=()      # "RESULT<TAB>name<TAB>seconds<TAB>note"
NFAIL=0
STEP_RC=0; STEP_T=0; STEP_NOTE=""; DEVICE=""
record() { # result name seconds note
  STEPS+=("$1	$2	$3	$4")
  [ "$1" = PASS ] || [ "$1" = SKIP ] || NFAIL=$((NFAIL + 1))
  printf '%-5s %-44s %4ss  %s\n' "$1" "$2" "$3" "$4"
}

# run_step name limit log cmd... : run with a timeout, output to $TMPD/step.out (appended to
# log); sets STEP_RC. Returns 1 (and records TIME) when no budget is left.
run_step() {
  local name=$1 limit=$2 log=$3 left t0
  shift 3
  left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -lt 15 ]; then record TIME "$name" 0 "not run: time budget of ${BUDGET}s spent"; STEP_RC=124; return 1; fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "$TMPD/step.out" 2>&1
  STEP_RC=$?
  STEP_T=$((SECONDS - t0))
  { echo "=== $name (limit ${limit}s, ${STEP_T}s, exit $STEP_RC): $*"; cat "$TMPD/step.out"; echo; } >> "$log"
  [ "$STEP_RC" -eq 124 ] || [ "$STEP_RC" -eq 137 ] && STEP_NOTE="timed out after ${limit}s" || STEP_NOTE="exit $STEP_RC"
  return 0
}

# The closing "N passed, N failed, N skipped" of a test program, else its last line.
last_count() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$TMPD/step.out" | tail -n 1 || true; }
fail_lines() { grep -E '^(FAIL|  [^ ].*:[0-9]+: )' "$TMPD/step.out" | head -n 4 | cut -c1-200 | sed 's/^/        /'; }

# ---- device --------------------------------------------------------------------------------
if [ "$BENCH_ONLY" -eq 0 ] && [ "$SANITIZE_ONLY" -eq 0 ]; then
  rm -f "$OUT/nvidia-smi.txt" # folded into build.log
  : > "$OUT/build.log"
  if command -v nvidia-smi > /dev/null 2>&1; then
    if ! run_step "nvidia-smi" 60 "$OUT/build.log" bash -c 'nvidia-smi; nvidia-smi -q'; then :
    elif [ "$STEP_RC" -eq 0 ]; then record PASS "nvidia-smi" "$STEP_T" ""
    else record FAIL "nvidia-smi" "$STEP_T" "$STEP_NOTE"; fi
  else
    echo "nvidia-smi not found" >> "$OUT/build.log"; record FAIL "nvidia-smi" 0 "not found"
  fi
  DEVICE=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n 1)

  # ---- build -------------------------------------------------------------------------------
  if ! command -v nvcc > /dev/null 2>&1; then record FAIL "nvcc" 0 "nvcc not found: GPU programs will not be built"; fi
  if ! run_step "build (make -k -j16 all)" 360 "$OUT/build.log" make -k -j16 all; then :
  elif [ "$STEP_RC" -eq 0 ]; then record PASS "build (make -k -j16 all)" "$STEP_T" ""
  else record FAIL "build (make -k -j16 all)" "$STEP_T" "$STEP_NOTE; first error: $(grep -m1 -E 'error|Error' "$TMPD/step.out" | cut -c1-150)"; fi

  # ---- GPU tests -----------------------------------------------------------------------------
  : > "$OUT/tests.log"
  GPU_TESTS=$(ls build/tests/gpu_* 2>/dev/null)
  [ -n "$GPU_TESTS" ] || record FAIL "GPU tests" 0 "none built"
  for t in $GPU_TESTS; do
    [ -x "$t" ] || continue
    n="test $(basename "$t")"
    run_step "$n" 120 "$OUT/tests.log" env MD_REQUIRE_GPU=1 "$t" || continue
    if [ "$STEP_RC" -eq 0 ]; then record PASS "$n" "$STEP_T" "$(last_count)"
    else record FAIL "$n" "$STEP_T" "$STEP_NOTE; $(last_count)"; fail_lines; fi
  done
else
  DEVICE=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n 1)
fi

if [ "$TESTS_ONLY" -eq 0 ]; then # ceilings, benchmarks, chapters, peers, profile, example
# ---- ceilings ------------------------------------------------------------------------------
: > "$OUT/chapters.log"
rm -f "$OUT/bench.jsonl" "$OUT/ceilings.json"
if [ -x build/bench/ceilings ]; then
  if run_step "ceilings" 120 "$OUT/chapters.log" bash -c 'build/bench/ceilings > "$1"' _ "$OUT/ceilings.json"; then
    if [ "$STEP_RC" -ne 0 ]; then record FAIL "ceilings" "$STEP_T" "$STEP_NOTE; $(tail -n 1 "$TMPD/step.out" | cut -c1-150)"
    elif [ ! -s "$OUT/ceilings.json" ]; then record FAIL "ceilings" "$STEP_T" "no JSON: $(grep -m1 SKIP "$TMPD/step.out" | cut -c1-150)"
    else record PASS "ceilings" "$STEP_T" ""; fi
  fi
else
  record FAIL "ceilings" 0 "build/bench/ceilings was not built"
fi

# ---- the other micro-benchmarks (bench/*.cu): MUFU issue cost, hybrid-rsqrt shapes ------------
for b in build/bench/*; do
  [ -x "$b" ] && [ "$(basename "$b")" != ceilings ] || continue
  n="bench $(basename "$b")"
  run_step "$n" 120 "$OUT/chapters.log" "$b" || continue
  if [ "$STEP_RC" -ne 0 ]; then record FAIL "$n" "$STEP_T" "$STEP_NOTE; $(grep -m1 FAIL "$TMPD/step.out" | cut -c1-150)"
  else record PASS "$n" "$STEP_T" "$(tail -n 1 "$TMPD/step.out" | cut -c1-120)"; fi
done

# ---- chapters ------------------------------------------------------------------------------
: > "$OUT/bench.jsonl"
for c in build/chapters/*; do
  [ -x "$c" ] && [ -f "chapters/$(basename "$c")/main.cu" ] || continue
  n="chapter $(basename "$c")"
  run_step "$n" 120 "$OUT/chapters.log" "$c" --json "$OUT/bench.jsonl" || continue
  if [ "$STEP_RC" -ne 0 ]; then record FAIL "$n" "$STEP_T" "$STEP_NOTE; $(grep -m1 -E 'FAIL|rror' "$TMPD/step.out" | cut -c1-150)"
  elif grep -q '^SKIP' "$TMPD/step.out"; then record FAIL "$n" "$STEP_T" "skipped: $(grep -m1 '^SKIP' "$TMPD/step.out" | cut -c1-150)"
  else record PASS "$n" "$STEP_T" ""; fi
done

# ---- peers: freud's RDF of chapter 05's GPU frame (97,556 atoms, rmax 1.5 nm, 300 bins), same machine ----
# The wheels carried in .whl/ (bench/README.md) go into a temporary folder; freud is then timed by
# bench/peers.py on the frame chapter 05 writes, and its md_peer/1 line joins bench.jsonl, so the
# summary can put gpu_cell's time beside it.
if [ -x build/chapters/05_histograms ]; then
  n="peer freud-rdf (chapter 05 frame)"
  PEERPY="$TMPD/py"
  if ls .whl/*.whl > /dev/null 2>&1; then
    { python3 -m pip install --no-index --find-links .whl --target "$PEERPY" freud-analysis \
        || python3 -m pip install --no-index --find-links .whl --no-deps --target "$PEERPY" freud-analysis rowan parsnip-cif more-itertools; } \
      >> "$OUT/chapters.log" 2>&1
  fi
  if run_step "$n" 150 "$OUT/chapters.log" bash -c '
      set -e
      build/chapters/05_histograms --write-xyz "$1/frame.xyz" > "$1/frame.txt"
      cat "$1/frame.txt"
      box=$(sed -n "s/.*cubic box \([0-9.]*\) nm.*/\1/p" "$1/frame.txt")
      PYTHONPATH="$2${PYTHONPATH:+:$PYTHONPATH}" python3 bench/peers.py freud-rdf --xyz "$1/frame.xyz" --box "$box" \
        --rmax 1.5 --bins 300 --threads "$(nproc)" > "$1/freud.jsonl"
      cat "$1/freud.jsonl"' _ "$TMPD" "$PEERPY"; then
    if [ "$STEP_RC" -eq 0 ] && [ -s "$TMPD/freud.jsonl" ]; then
      cat "$TMPD/freud.jsonl" >> "$OUT/bench.jsonl"
      record PASS "$n" "$STEP_T" "$(tail -n 1 "$TMPD/freud.jsonl" | cut -c1-120)"
    else
      record FAIL "$n" "$STEP_T" "$STEP_NOTE; $(grep -m1 -E 'Error|error|No module' "$TMPD/step.out" | cut -c1-150)"
    fi
  fi
fi

# ---- Nsight Compute: the stall reasons of gpu_gather and gpu_const (tutorial 03) -------------
if [ "$BENCH_ONLY" -eq 0 ]; then
  rm -f "$OUT/profile.txt"
  n="ncu profile (chapter 03 gather vs const)"
  if run_step "$n" 150 "$OUT/chapters.log" env OUT="$OUT" bash tests/gpu_profile.sh "$OUT/profile.txt"; then
    if [ "$STEP_RC" -eq 0 ]; then record PASS "$n" "$STEP_T" "$OUT/profile.txt"
    elif [ "$STEP_RC" -eq 2 ]; then record SKIP "$n" "$STEP_T" "$(grep -m1 '^SKIP' "$TMPD/step.out" | cut -c1-150)"
    else record FAIL "$n" "$STEP_T" "$STEP_NOTE; $(grep -m1 -E 'FAIL|rror' "$TMPD/step.out" | cut -c1-150)"; fi
  fi
fi

# ---- the large example: a 107,811-atom TIP3P water PQR on a 128^3 grid, with progress lines -----
if [ -x build/examples/potential_map_gpu ]; then
  n="example potential_map_gpu (107811-atom PQR, 128^3)"
  if python3 examples/potential_map/make_water_pqr.py --cells 33 > "$TMPD/water33.pqr" 2>> "$OUT/chapters.log"; then
    input=(--pqr "$TMPD/water33.pqr")
  else
    n="example potential_map_gpu (100000 random atoms, 128^3)"; input=(--random 100000)
  fi
  if run_step "$n" 150 "$OUT/chapters.log" build/examples/potential_map_gpu "${input[@]}" --grid 128 \
       --out "$TMPD/map128.dx"; then
    if [ "$STEP_RC" -ne 0 ]; then record FAIL "$n" "$STEP_T" "$STEP_NOTE; $(grep -m1 -E 'FAIL|rror' "$TMPD/step.out" | cut -c1-150)"
    else record PASS "$n" "$STEP_T" "$(tail -n 1 "$TMPD/step.out" | cut -c1-120)"; fi
  fi
fi

fi # TESTS_ONLY

# ---- compute-sanitizer ---------------------------------------------------------------------
# --report-api-errors no: the tests force CUDA API errors on purpose (tests/gpu_core.cu) and
# check every call themselves; the sanitizer's job here is memory and race errors in kernels.
if [ "$BENCH_ONLY" -eq 0 ] && [ "$SANITIZE" -eq 1 ]; then
  : > "$OUT/sanitizer.log"
  SAN=$(command -v compute-sanitizer || true)
  if [ -z "$SAN" ]; then record FAIL "compute-sanitizer" 0 "not found"; fi
  if [ "$SANITIZE_ONLY" -eq 1 ] && ! ls build/tests/gpu_* > /dev/null 2>&1; then
    record FAIL "compute-sanitizer" 0 "no GPU tests built (run --tests-only --no-sanitize first, on the same machine)"
  fi
  SAN_API=()
  [ -n "$SAN" ] && "$SAN" --help 2>/dev/null | grep -q -- '--report-api-errors' && SAN_API=(--report-api-errors no)
  # GNU time, where there is one, records each sanitized run's peak host memory: racecheck's grows
  # with the steps a test runs, and a run the host's out-of-memory killer ends exits 9 or 137
  SAN_TIME=()
  [ -x /usr/bin/time ] && /usr/bin/time -f x true > /dev/null 2>&1 && SAN_TIME=(/usr/bin/time -f "gpu-check: peak host memory %M KB")
  SAN_TESTS=$([ -n "$SAN" ] && ls build/tests/gpu_* 2>/dev/null)
  [ -n "${MD_SANITIZE_TESTS:-}" ] && SAN_TESTS=$(for n in $MD_SANITIZE_TESTS; do echo "build/tests/$n"; done)
  for t in $SAN_TESTS; do
    if [ ! -x "$t" ]; then
      [ -n "${MD_SANITIZE_TESTS:-}" ] && record FAIL "compute-sanitizer $(basename "$t")" 0 "not built"
      continue
    fi
    for tool in memcheck racecheck; do
      n="$tool $(basename "$t")"
      run_step "$n" 300 "$OUT/sanitizer.log" ${SAN_TIME[@]+"${SAN_TIME[@]}"} env MD_SANITIZE=1 MD_SANITIZE_TOOL="$tool" \
        MD_REQUIRE_GPU=1 "$SAN" --tool "$tool" --error-exitcode 1 ${SAN_API[@]+"${SAN_API[@]}"} "$t" || continue
      summ=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$TMPD/step.out" | tail -n 1 | sed 's/=* *//')
      kb=$(grep -o 'gpu-check: peak host memory [0-9]* KB' "$TMPD/step.out" | grep -o '[0-9][0-9]*' | tail -n 1)
      [ -n "$kb" ] && summ="$summ; peak host memory $(awk -v k="$kb" 'BEGIN { printf "%.1f GB", k / 1048576 }')"
      case "$STEP_RC" in 9 | 137) STEP_NOTE="$STEP_NOTE (killed: SIGKILL, e.g. the host's out-of-memory killer)" ;; esac
      if [ "$STEP_RC" -eq 0 ]; then record PASS "$n" "$STEP_T" "$summ; $(last_count)"
      else record FAIL "$n" "$STEP_T" "$STEP_NOTE; $summ; $(last_count)"
        grep -m3 -E '^========= (Invalid|Race|Error|.*hazard)' "$TMPD/step.out" | cut -c1-200 | sed 's/^/        /'; fi
    done
  done
fi

# ---- summary (printed last: a remote runner may return only the tail) ----------------------
{
  echo
  echo "==================== gpu-check summary ===================="
  echo "device: ${DEVICE:-unknown}   total ${SECONDS}s of budget ${BUDGET}s   results in $OUT"
  printf '%-5s %-44s %5s  %s\n' "" "step" "time" "note"
  for s in "${STEPS[@]}"; do
    IFS=$'\t' read -r r n t note <<< "$s"
    printf '%-5s %-44s %4ss  %s\n' "$r" "$n" "$t" "$note" | cut -c1-220
  done
  echo "-- ceilings ($OUT/ceilings.json)"
  if command -v python3 > /dev/null 2>&1; then
    python3 - "$OUT/ceilings.json" "$OUT/bench.jsonl" <<'PY'
import json, sys
def load(p):
    rows = []
    try:
        for line in open(p):
            line = line.strip()
            if line:
                try: rows.append(json.loads(line))
                except ValueError: rows.append({"unparsed": line[:150]})
    except OSError:
        pass
    return rows
def g(v, fmt="%.4g"):
    return "-" if v is None else (fmt % v if isinstance(v, (int, float)) else str(v))
for c in load(sys.argv[1]):
    if "unparsed" in c: print("   unparsed:", c["unparsed"]); continue
    print("   %s, %s SMs, %s MHz" % (c.get("device"), g(c.get("sm_count")), g(c.get("clock_mhz"))))
    print("   rsqrt %s /s (%s /SM/clk)   FMA %s /s (%s /SM/clk)   smem atomics %s /s (%s /SM/clk)" % (
        g(c.get("rsqrt_per_s")), g(c.get("rsqrt_per_sm_clk"), "%.2f"), g(c.get("fma_per_s")),
        g(c.get("fma_per_sm_clk"), "%.2f"), g(c.get("smem_atomic_per_s")), g(c.get("smem_atomic_per_sm_clk"), "%.2f")))
    print("   DRAM copy %s B/s   cudaMemcpy D2D %s B/s   launch %s s   graph node %s s" % (
        g(c.get("dram_bytes_per_s")), g(c.get("memcpy_bytes_per_s")), g(c.get("launch_s")), g(c.get("graph_node_s"))))
rows = load(sys.argv[2])
peers = [r for r in rows if r.get("schema") == "md_peer/1"]
rows = [r for r in rows if r.get("schema") != "md_peer/1"]
for p in peers:
    print("-- peer %s %s: %s s per %s (%s atoms, %s threads)" % (p.get("peer"), p.get("what"), g(p.get("s_per_frame", p.get("s_per_step"))),
          "frame" if "s_per_frame" in p else "step", g(p.get("atoms")), g(p.get("threads"))))
    if p.get("what") == "rdf":
        cell = [b for b in rows if b.get("chapter") == "05_histograms" and b.get("variant") == "gpu_cell"]
        if cell and cell[0].get("time_s"):
            print("   chapter 05 gpu_cell: %s s per frame = %.1fx %s (same frame, same run)" % (
                g(cell[0]["time_s"]), p["s_per_frame"] / cell[0]["time_s"], p.get("peer")))
print("-- bench (%d lines in %s)" % (len(rows), sys.argv[2]))
if rows:
    print("   %-26s %-26s %11s %-16s %9s %9s" % ("chapter", "variant", "rate", "unit", "ceil_frac", "error"))
for b in rows[:120]:
    if "unparsed" in b: print("   unparsed:", b["unparsed"]); continue
    print("   %-26s %-26s %11s %-16s %9s %9s" % (str(b.get("chapter"))[:26], str(b.get("variant"))[:26],
          g(b.get("rate")), str(b.get("unit"))[:16], g(b.get("ceiling_fraction"), "%.3f"), g(b.get("error"), "%.2g")))
if len(rows) > 120: print("   ... %d more lines" % (len(rows) - 120))
PY
  else
    cut -c1-300 "$OUT/ceilings.json" 2>/dev/null
    echo "-- bench ($OUT/bench.jsonl)"; head -n 60 "$OUT/bench.jsonl" | cut -c1-200
  fi
  if grep -q '^== Warp stall reasons' "$OUT/profile.txt" 2>/dev/null; then
    echo "-- warp stall reasons ($OUT/profile.txt)"
    sed -n '/^== Warp stall reasons/,/^ reasons below/p' "$OUT/profile.txt" | sed 's/^/   /'
  fi
  echo "-- ${#STEPS[@]} steps, $NFAIL not passed"
  [ "$NFAIL" -eq 0 ] && echo "gpu-check: PASS" || echo "gpu-check: FAIL"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
[ "$NFAIL" -eq 0 ]
