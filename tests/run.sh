#!/usr/bin/env bash
# The test command: `make test` (everything that runs without a GPU; GPU tests
# print SKIP) and `make test-gpu` (--gpu-only, with MD_REQUIRE_GPU=1 so a
# missing device fails). Every step prints PASS/FAIL/SKIP lines; this script
# adds them up and ends with "N passed, N failed, N skipped".
# First it runs tests/setup.sh, which installs what is missing or stops the run
# with one line naming it (MD_NO_INSTALL=1: check only, install nothing).
# Options: --gpu-only   only the GPU tests (no set-up: they need only the build)
#          --quick      shorter fuzz runs
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then PATH="$PATH:/usr/local/cuda/bin"; fi
LOG=build/test-logs
mkdir -p "$LOG"
GPU_ONLY=0; FUZZ_SECONDS=${MD_FUZZ_SECONDS:-20}
for a in "$@"; do
  case "$a" in
    --gpu-only) GPU_ONLY=1 ;;
    --quick) FUZZ_SECONDS=3 ;;
  esac
done
passed=0; failed=0; skipped=0
JOBS=$(nproc 2>/dev/null || echo 2)

if [ "$GPU_ONLY" -eq 0 ]; then
  echo "== set-up (tests/setup.sh)"
  bash tests/setup.sh || exit 1
fi
# the virtual environment tests/setup.sh makes where python3 is externally managed
if [ -x .venv/bin/python3 ]; then export PATH="$PWD/.venv/bin:$PATH"; fi

# Count the PASS/FAIL/SKIP lines of a finished step's log; a step that exits
# non-zero without printing a FAIL line counts as one failure.
tally() { # name log rc
  local name=$1 log=$2 rc=$3 p f s
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with $rc"; tail -n 20 "$log" | sed 's/^/    /'; f=1
  fi
  grep -E '^(FAIL|SKIP) ' "$log" | sed 's/^/  /'
  grep -A3 '^  [^ ].*:[0-9]*: ' "$log" | head -n 20 | sed 's/^/  /'
  printf '%-44s %3d passed, %d failed, %d skipped\n' "$name" "$p" "$f" "$s"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}

# A step that is one check: run the command, PASS if it exits 0. The
# command's own output goes to the log and is not counted.
check() { # name command...
  local name=$1; shift
  local log="$LOG/${name//[^A-Za-z0-9_.-]/_}.log" res
  res="$log.result"
  if "$@" > "$log" 2>&1; then echo "PASS $name" > "$res"; tally "$name" "$res" 0
  else local rc=$?; echo "FAIL $name (exit $rc, log $log)" > "$res"; tail -n 30 "$log" | sed 's/^/    /'; tally "$name" "$res" "$rc"; fi
}

# A step that is a test program printing its own PASS/FAIL/SKIP lines.
program() { # name command...
  local name=$1; shift
  local log="$LOG/${name//[^A-Za-z0-9_.-]/_}.log"
  "$@" > "$log" 2>&1; tally "$name" "$log" $?
}

echo "== build"
if ! make -j"$JOBS" all > "$LOG/build.log" 2>&1; then
  cat "$LOG/build.log" | tail -n 40
  echo "FAIL build (log $LOG/build.log)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi

if [ "$GPU_ONLY" -eq 0 ]; then
  echo "== md.h compiles as C11 and C++17 with -Wall -Wextra -Werror -pedantic"
  t=$(mktemp -d)
  printf '#define MD_IMPLEMENTATION\n#include "md.h"\nint main(void){ md_rng r; md_rng_seed(&r, 1); return md_rng_uniform(&r) < 0.0; }\n' > "$t/drop.c"
  for cc in "gcc -std=c11" "clang -std=c11" "g++ -std=c++17 -x c++" "clang++ -std=c++17 -x c++" \
            "gcc -std=c11 -DMD_STATIC" "gcc -std=c11 -fopenmp" "g++ -std=c++17 -x c++ -fopenmp"; do
    check "header: $cc" $cc -Wall -Wextra -Werror -pedantic -I. "$t/drop.c" -o "$t/a.out" -lm
  done
  rm -rf "$t"

  echo "== C tests"
  for b in build/tests/test_*; do [ -x "$b" ] && program "$(basename "$b")" "$b"; done

  echo "== C tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  mkdir -p build/asan
  for src in tests/test_*.c; do
    n=$(basename "$src" .c)
    check "asan+ubsan: $n" bash -c "gcc -std=c11 -g -O1 -Wall -Wextra -Werror -pedantic -fopenmp -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -I. $src -o build/asan/$n -lm && ASAN_OPTIONS=detect_leaks=1 build/asan/$n"
  done

  echo "== coroutines (md_co) on AArch64 under qemu, where a cross compiler is installed"
  if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then
    for n in test_co test_co_ucontext; do
      program "aarch64: $n" bash -c "aarch64-linux-gnu-gcc -std=c11 -O2 -mbranch-protection=standard -Wall -Wextra -Werror -pedantic -I. tests/$n.c -o build/asan/$n.aarch64 -lm && qemu-aarch64 -L /usr/aarch64-linux-gnu build/asan/$n.aarch64"
    done
  else
    echo "SKIP aarch64 coroutines: no aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install gcc-aarch64-linux-gnu qemu-user)" > "$LOG/aarch64.log"
    tally "aarch64 coroutines" "$LOG/aarch64.log" 0
  fi

  echo "== numpy reference checks"
  for py in reference/check_*.py; do
    [ -f "$py" ] && program "$(basename "$py")" python3 "$py"
  done

  echo "== chapter programs (quick ladder, every rung checked)"
  for c in build/chapters/*; do
    [ -x "$c" ] || continue
    n="chapter $(basename "$c") --quick"; log="$LOG/${n//[^A-Za-z0-9_.-]/_}.log"
    "$c" --quick > "$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q '^SKIP' "$log"; then  # a GPU chapter on a machine without a GPU
      : > "$log.result"
      grep -q 'agree with the reference' "$log" && echo "PASS $n (CPU rungs)" >> "$log.result"
      echo "SKIP $n (GPU rungs): $(grep -m1 '^SKIP' "$log" | cut -c7-200)" >> "$log.result"
    elif [ $rc -eq 0 ]; then echo "PASS $n" > "$log.result"
    else echo "FAIL $n (exit $rc, log $log)" > "$log.result"; tail -n 30 "$log" | sed 's/^/    /'; fi
    tally "$n" "$log.result" $rc
  done
  for e in tests/examples_*.sh; do [ -f "$e" ] && program "$(basename "$e")" bash "$e"; done
  program "usability.sh (help, messages, set-up)" bash tests/usability.sh

  echo "== README drop-in example"
  check "README drop-in example" bash tests/readme_example.sh
  check "make install + pkg-config" bash tests/install_check.sh
  program "tutorial quotes are in the sources, as quoted" python3 tutorials/scripts/check_quotes.py

  echo "== nvcc compile of every .cu file (-arch=sm_90)"
  if command -v "$NVCC" >/dev/null 2>&1; then
    for f in $(git ls-files '*.cu' 2>/dev/null || find . -name '*.cu' -not -path './build/*'); do
      case "$f" in  # the program each file is built into by `make all` (already done above)
        tests/*.cu)              target=build/tests/$(basename "$f" .cu) ;;
        bench/*.cu)              target=build/bench/$(basename "$f" .cu) ;;
        chapters/*/main.cu)      target=build/chapters/$(basename "$(dirname "$f")") ;;
        examples/*/main.cu)      target=build/examples/$(basename "$(dirname "$f")") ;;
        chapters/*/*.cu)         target=build/chapters/$(basename "$(dirname "$f")") ;; # included by main.cu
        *)                       target= ;;
      esac
      if [ -n "$target" ]; then check "nvcc: $f" make -s "$target"
      else check "nvcc: $f" "$NVCC" -std=c++17 -arch=sm_90 -I. -Ichapters -c "$f" -o /dev/null; fi
    done
  else
    echo "SKIP nvcc: not found (the CUDA toolkit): the GPU code was not compiled" > "$LOG/nvcc.log"; tally "nvcc" "$LOG/nvcc.log" 0
  fi

  echo "== Doxygen (warnings are errors)"
  check "make docs (main page: the manuals of md.h and md_cuda.cu.h)" \
    bash -c 'make docs && grep -q "USING IT" build/docs/html/index.html'

  echo "== fuzz targets (${FUZZ_SECONDS} s each)"
  if make -j"$JOBS" fuzz > "$LOG/fuzz-build.log" 2>&1; then
    for f in build/fuzz/fuzz_*; do
      [ -x "$f" ] || continue
      n=$(basename "$f"); corpus=tests/fuzz/corpus/${n#fuzz_}
      mkdir -p "build/fuzz/work-$n"
      check "fuzz: $n" "$f" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        "build/fuzz/work-$n" $( [ -d "$corpus" ] && echo "$corpus" )
    done
  else
    echo "FAIL fuzz build (log $LOG/fuzz-build.log)" > "$LOG/fuzzb.log"; tally "fuzz build" "$LOG/fuzzb.log" 1
  fi
fi

echo "== GPU tests"
if [ "$GPU_ONLY" -eq 1 ] && ! ls build/tests/gpu_* >/dev/null 2>&1; then
  echo "FAIL GPU tests: none were built (nvcc not found: install the CUDA toolkit)" > "$LOG/gpu.log"; tally "GPU tests" "$LOG/gpu.log" 1
fi
for b in build/tests/gpu_*; do [ -x "$b" ] && program "$(basename "$b")" "$b"; done

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
