#!/usr/bin/env bash
# Chapter 08's race step kernel by kernel (the table of tutorial 08, section 6): Nsight Compute's
# duration of each of 200 launches (401-600) of `08_md_step --race --steps 60 --reps 5` on the
# 23,568- and 95,766-atom boxes, each kernel alone under the profiler's locked clocks, tabulated by
# bench/step_kernels.py (steps with a list build apart from steps without one).
#   bash bench/step_kernels.sh        needs a GPU, ncu (CUDA's Nsight Compute) and
#                                     build/chapters/08_md_step (built here if missing)
# Results: ${OUT:-build/step-kernels}/ncu_<atoms>.csv, the table on stdout.
set -u
case "${1:-}" in
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--help]   (results in \${OUT:-build/step-kernels})" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
OUT=${OUT:-build/step-kernels}
B=build/chapters/08_md_step
mkdir -p "$OUT"
[ -x "$B" ] || make "$B" || exit 1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "SKIP step_kernels: ncu (Nsight Compute) not found"; exit 0; }
"$B" --write-pdb "$OUT/water" > /dev/null || { echo "FAIL step_kernels: $B --write-pdb"; exit 1; }
for n in 23568 95766; do
  if ! timeout 300 "$NCU" --csv --metrics gpu__time_duration.sum --launch-skip 400 --launch-count 200 \
      "$B" --race "$OUT/water_$n.pdb" --steps 60 --reps 5 > "$OUT/ncu_$n.csv" 2> "$OUT/ncu_$n.err"; then
    echo "FAIL step_kernels: ncu on $n atoms (see $OUT/ncu_$n.err)"
    exit 1
  fi
done
python3 bench/step_kernels.py "$OUT/ncu_23568.csv" "$OUT/ncu_95766.csv"
