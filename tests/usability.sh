#!/usr/bin/env bash
# What a new user meets first: `make help`, the set-up's message when something is missing,
# --help and bad arguments of every example and of chapter 08's own options, `make ceilings` /
# `make test-gpu` without a GPU, chapter 05's CPU rungs without nvcc, the no-GPU SKIP reason,
# and check_quotes' contiguity rule. Each check prints PASS/FAIL/SKIP (tests/run.sh counts them). "No GPU" is made on any
# machine with CUDA_VISIBLE_DEVICES= (the runtime then reports cudaErrorNoDevice), "no nvcc"
# with NVCC=/nonexistent/nvcc, and "no doxygen, no numpy" with a PATH that lacks doxygen and
# a python3 (a bare virtual environment) that lacks the packages.
set -u
cd "$(dirname "$0")/.."
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1: $2"; }
NONVCC=/nonexistent/nvcc

# ---- make help: the target list and nothing else ---------------------------------------------
make -s help > "$t/help" 2>&1
if [ -s "$t/help" ] && ! grep -v -E '^(make [a-z-]+|  +[a-z(])' "$t/help" | grep -q . && grep -q '^make test ' "$t/help"; then
  ok "make help lists only the targets"
else bad "make help" "stray lines: $(grep -v -E '^(make [a-z-]+|  +[a-z(])' "$t/help" | head -n 3)"; fi

# ---- set-up: one line naming what is missing --------------------------------------------------
mkdir -p "$t/bin"
for f in /usr/bin/* /bin/*; do
  n=$(basename "$f")
  case "$n" in doxygen|python3*|pip3*) continue ;; esac
  [ -e "$t/bin/$n" ] || ln -s "$f" "$t/bin/$n"
done
if python3 -m venv --without-pip "$t/venv" > "$t/venv.log" 2>&1; then
  PATH="$t/venv/bin:$t/bin" bash tests/setup.sh --check > "$t/out" 2> "$t/err"; rc=$?
  if [ "$rc" -eq 1 ] && [ "$(wc -l < "$t/err")" -eq 1 ] && grep -q 'doxygen' "$t/err" && grep -q 'numpy' "$t/err" &&
     grep -q 'openmm' "$t/err" && grep -q 'missing   doxygen' "$t/out"; then
    ok "setup.sh --check: one line names doxygen, numpy, openmm"
  else bad "setup.sh --check" "exit $rc, stderr: $(head -n 3 "$t/err")"; fi
  # the test command stops at once on that line, before building anything
  rm -f "$t/run.out"
  PATH="$t/venv/bin:$t/bin" MD_NO_INSTALL=1 bash tests/run.sh > "$t/run.out" 2> "$t/run.err"; rc=$?
  if [ "$rc" -ne 0 ] && ! grep -q '^== build' "$t/run.out" && [ "$(wc -l < "$t/run.err")" -eq 1 ] &&
     grep -q '^setup: missing .*doxygen.*numpy' "$t/run.err"; then
    ok "make test without doxygen and numpy stops at once, naming them"
  else bad "make test without doxygen and numpy" "exit $rc, $(tail -n 2 "$t/run.out" "$t/run.err" | tr '\n' ' ')"; fi
else
  echo "SKIP setup.sh --check: cannot make a virtual environment ($(tail -n 1 "$t/venv.log"))"
fi
# every Python package the set-up promises imports
if python3 -c "import $(sed -e 's/#.*//' reference/requirements.txt | awk NF | paste -sd, -)" 2> "$t/err"; then
  ok "the packages of reference/requirements.txt import"
else bad "reference/requirements.txt" "$(tail -n 1 "$t/err")"; fi

# ---- examples: --help exits 0, a bad argument is named with its value -------------------------
make -s build/examples/potential_map build/examples/rdf > "$t/build.log" 2>&1 || bad "examples build" "$(tail -n 3 "$t/build.log")"
helps() { # program...
  "$@" --help > "$t/out" 2>&1 && grep -q -i 'usage' "$t/out"
}
names() { # text-that-must-appear program args... : exit 2 and the text in the message
  local text=$1 rc; shift
  "$@" > "$t/out" 2>&1; rc=$?
  [ "$rc" -eq 2 ] && grep -q -F -- "$text" "$t/out" && return 0
  echo "    $*: exit $rc, '$(head -n 1 "$t/out")' (want exit 2 naming \"$text\")"; return 1
}
progs=(build/examples/potential_map build/examples/rdf)
[ -x build/examples/potential_map_gpu ] && progs+=(build/examples/potential_map_gpu)
for p in "${progs[@]}"; do
  if helps "$p" && names "'--frobnicate'" "$p" --frobnicate; then ok "$(basename "$p"): --help exits 0; an unknown option is named"
  else bad "$(basename "$p")" "--help or an unknown option"; fi
done
if helps python3 examples/potential_map/make_water_pqr.py && names "'x'" python3 examples/potential_map/make_water_pqr.py --cells x
then ok "make_water_pqr.py: --help exits 0; a bad --cells is named"; else bad "make_water_pqr.py" "--help or --cells x"; fi
if names "--bins: not a number ('12x')" build/examples/rdf a.dcd o.csv --bins 12x &&
   names "--rmax: must be a positive number of nm ('-1')" build/examples/rdf a.dcd o.csv --rmax -1 &&
   names "missing value after '--a'" build/examples/rdf a.dcd o.csv --a &&
   names "would overwrite an input: 'a.dcd'" build/examples/rdf a.dcd a.dcd
then ok "rdf: bad values are named with the option"; else bad "rdf" "a bad value was not named"; fi
if [ -x build/examples/potential_map_gpu ]; then
  g=build/examples/potential_map_gpu
  if names "--grid: expected a whole number from 2 to 1024, got '0'" $g --random 10 --grid 0 &&
     names "--random: expected a whole number from 1 to 100000000, got '1e3'" $g --random 1e3 &&
     names "--variant: 'cpu_rows' is not a GPU rung" $g --random 10 --variant cpu_rows
  then ok "potential_map_gpu: bad values are named with the option"; else bad "potential_map_gpu" "a bad value was not named"; fi
  # a missing input is reported before the GPU is looked for: same answer with and without one
  CUDA_VISIBLE_DEVICES= $g --pqr "$t/missing.pqr" > "$t/out" 2>&1; rc=$?
  if [ "$rc" -eq 1 ] && grep -q "missing.pqr" "$t/out" && ! grep -q SKIP "$t/out"; then
    ok "potential_map_gpu: a missing input file is reported before looking for a GPU"
  else bad "potential_map_gpu missing file" "exit $rc: $(head -n 1 "$t/out")"; fi
  # no GPU: the SKIP reason says so in words
  CUDA_VISIBLE_DEVICES= $g --random 100 --grid 4 > "$t/out" 2>&1; rc=$?
  if [ "$rc" -eq 0 ] && grep -q '^SKIP: .*no NVIDIA driver / no GPU' "$t/out"; then ok "no GPU: SKIP says 'no NVIDIA driver / no GPU'"
  else bad "no-GPU SKIP reason" "exit $rc: $(head -n 1 "$t/out")"; fi
else
  echo "SKIP potential_map_gpu checks: not built (nvcc not found)"
fi

# ---- chapter 08: its own options' bad values are named (with or without nvcc) ----------------
if make -s build/chapters/08_md_step > "$t/build8.log" 2>&1; then
  c=build/chapters/08_md_step
  if names "--seed wants a non-negative integer (got 'abc')" $c --drift 1 --seed abc &&
     names "--seed wants a non-negative integer (got '-3')" $c --drift 1 --seed -3 &&
     names "--water-lanes wants a number (got 'x')" $c --race a.pdb --water-lanes x &&
     names "--dt wants a positive number (got '0')" $c --drift 1 --dt 0 &&
     names "--energy-every wants a positive whole number up to 10^6 (got '2.5')" $c --drift 1 --energy-every 2.5 &&
     names "--pme-grid wants a positive whole number up to 10^6 (got '2.5')" $c --drift 1 --pme-grid 2.5 &&
     names "go with --drift PS" $c --buffer 0.2 && names "go with --drift PS" $c --no-com-removal
  then ok "chapter 08: a bad --seed, --water-lanes or drift setting is named with its value"; else bad "chapter 08 options" "a bad value was not named"; fi
else bad "chapter 08 build" "$(tail -n 3 "$t/build8.log")"; fi

# ---- make ceilings / make test-gpu without a GPU: fail, and leave no JSON ---------------------
mkdir -p "$t/b1/bench"
make -s NVCC=$NONVCC BUILD="$t/b1" ceilings > "$t/out" 2>&1; rc=$?
if [ "$rc" -ne 0 ] && grep -q 'nvcc not found' "$t/out" && [ -z "$(ls "$t/b1/bench")" ]; then ok "make ceilings without nvcc: fails naming nvcc, no JSON"
else bad "make ceilings without nvcc" "exit $rc, $(ls "$t/b1/bench") $(tail -n 1 "$t/out")"; fi
if [ -x build/bench/ceilings ]; then
  mkdir -p "$t/b2/bench" && cp -p build/bench/ceilings "$t/b2/bench/"
  touch -r build/bench/ceilings "$t/b2/bench/ceilings"
  CUDA_VISIBLE_DEVICES= make -s BUILD="$t/b2" ceilings -o "$t/b2/bench/ceilings" > "$t/out" 2>&1; rc=$?
  if [ "$rc" -ne 0 ] && [ ! -e "$t/b2/bench/ceilings.json" ] && [ ! -e "$t/b2/bench/ceilings.json.tmp" ] &&
     grep -q 'nothing measured' "$t/out"; then ok "make ceilings without a GPU: fails, leaves no JSON"
  else bad "make ceilings without a GPU" "exit $rc, files: $(ls "$t/b2/bench" | tr '\n' ' ') $(tail -n 1 "$t/out")"; fi
  env -u MD_REQUIRE_GPU CUDA_VISIBLE_DEVICES= make -s test-gpu > "$t/out" 2>&1; rc=$?
  if [ "$rc" -ne 0 ] && grep -q 'FAIL' "$t/out" && grep -q 'no NVIDIA driver / no GPU' "$t/out"; then
    ok "make test-gpu without a GPU fails, saying 'no NVIDIA driver / no GPU'"
  else bad "make test-gpu without a GPU" "exit $rc: $(grep -m1 -E 'FAIL|SKIP' "$t/out")"; fi
else
  echo "SKIP make ceilings/test-gpu without a GPU: build/bench/ceilings not built (nvcc not found)"
fi
make -s NVCC=$NONVCC test-gpu > "$t/out" 2>&1; rc=$?
if [ "$rc" -ne 0 ] && grep -q 'nvcc not found' "$t/out"; then ok "make test-gpu without nvcc fails, naming nvcc"
else bad "make test-gpu without nvcc" "exit $rc: $(tail -n 1 "$t/out")"; fi

# ---- no nvcc: chapter 05's CPU rungs are built with the C compiler and run --------------------
if make -s NVCC=$NONVCC BUILD="$t/b3" "$t/b3/chapters/05_histograms" > "$t/out" 2>&1 &&
   "$t/b3/chapters/05_histograms" --quick > "$t/out" 2>&1 && grep -q 'agree with the reference' "$t/out" &&
   grep -q '^cpu_private ' "$t/out" && grep -q '^SKIP: nvcc not found' "$t/out" &&
   make -s -n NVCC=$NONVCC demo 2>/dev/null | grep -q 'build/chapters/05_histograms'
then ok "no nvcc: chapter 05's CPU rungs build and run (make demo runs them)"
else bad "no nvcc: chapter 05" "$(tail -n 3 "$t/out" | tr '\n' ' ')"; fi

# ---- check_quotes: a quote must be contiguous in its file, or mark its gaps with ... ---------
a=$(sed -n '/^#define MD_COULOMB /p' md.h); b=$(sed -n '/^#define MD_KB /p' md.h)
quote() { printf '# t\n\n%s```c%s\n%s\n```\n' "$1" "$2" "$3" > "$t/q.md"; python3 tutorials/scripts/check_quotes.py "$t/q.md" > "$t/out" 2>&1; }
if quote "" "" "$a" && quote "" "" "$a
...
$b" && quote "" " md.h" "$a
...
$b" && quote "<!-- quote: md.h -->
" "" "$a"; then
  if ! quote "" "" "$a
$b" && grep -q 'not contiguous' "$t/out" &&
     ! quote "" "" "$b
...
$a" && grep -q 'not in one file in the order quoted' "$t/out" &&
     ! quote "" "" "$a
int md_no_such_line;" && grep -q 'not in the sources: int md_no_such_line;' "$t/out" &&
     ! quote "" " md_cuda.cu.h" "$a" && ! quote "<!-- quote: nofile.h -->
" "" "$a" && grep -q 'nofile.h, which does not exist' "$t/out"; then
    ok "check_quotes rejects a gap without '...', the wrong order, a missing line, the wrong file"
  else bad "check_quotes" "accepted a bad quote: $(cat "$t/out")"; fi
else bad "check_quotes" "rejected a good quote: $(cat "$t/out")"; fi
