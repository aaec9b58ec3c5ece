#!/usr/bin/env bash
# Cache misses of each CPU rung of the direct Coulomb sum, measured with
# valgrind --tool=cachegrind.
#
#   bash tutorials/scripts/cachegrind_dcs.sh [NATOMS] [GRIDS...]     (default: 100 atoms, 32 96)
#
# Needs valgrind (Debian package valgrind; `make setup` does not install it: only this
# script uses it) and a C compiler.
# Each rung runs once in its own process (tutorials/scripts/dcs_rung.c, built
# like the chapter programs); the counts of a setup-only run ("none") are
# subtracted, so the numbers are the rung's own. Simulated caches: D1 = 32 KiB,
# 8-way, 64 B lines (this CPU's L1d) and LL = 512 KiB, 8-way (its per-core L2,
# the last cache private to a core; cachegrind simulates two levels only).
# A 32^3 float grid is 128 KiB (fits LL, not D1); 96^3 is 3.4 MiB (fits neither).
# cpu_rows_omp is left out: valgrind runs threads one at a time, so it would
# count the same accesses as cpu_rows.
set -eu
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null 2>&1 || { echo "cachegrind_dcs.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
NATOMS=${1:-100}; shift || true
GRIDS=${*:-32 96}
CC=${CC:-gcc}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
$CC -O2 -march=native -std=c11 -fopenmp -I. -Ichapters tutorials/scripts/dcs_rung.c -o "$t/dcs_rung" -lm
CG="valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=524288,8,64"
export OMP_NUM_THREADS=1
# summary line of a cachegrind run: Ir Dr Dw D1mr D1mw DLmr DLmw
counts() {
  $CG --cachegrind-out-file="$t/cg.out" "$@" > /dev/null 2> "$t/cg.err" || { cat "$t/cg.err"; exit 1; }
  awk '/^events:/{for(i=2;i<=NF;i++) name[i-1]=$i} /^summary:/{for(i=2;i<=NF;i++) v[name[i-1]]=$i}
       END{print v["Ir"], v["Dr"], v["Dw"], v["D1mr"], v["D1mw"], v["DLmr"], v["DLmw"]}' "$t/cg.out"
}
echo "cachegrind $(valgrind --version | sed 's/valgrind-//'), $($CC --version | head -n1), -O2 -march=native"
echo "D1 32 KiB 8-way, LL 512 KiB 8-way, 64 B lines; counts per atom-eval (one atom at one grid point)"
printf '%-12s %5s %6s %9s %9s %9s %11s %11s %11s\n' rung atoms grid "instr" "D reads" "D writes" \
  "D1 misses" "LL misses" "LL miss MB"
for n in $GRIDS; do
  read -r b_ir b_dr b_dw b_d1r b_d1w b_llr b_llw <<< "$(counts "$t/dcs_rung" none "$NATOMS" "$n")"
  for v in cpu_simple cpu_scatter cpu_rows; do
    read -r ir dr dw d1r d1w llr llw <<< "$(counts "$t/dcs_rung" "$v" "$NATOMS" "$n")"
    awk -v v="$v" -v a="$NATOMS" -v n="$n" -v ir=$((ir - b_ir)) -v dr=$((dr - b_dr)) -v dw=$((dw - b_dw)) \
        -v d1=$((d1r + d1w - b_d1r - b_d1w)) -v ll=$((llr + llw - b_llr - b_llw)) 'BEGIN {
      e = a * n * n * n
      printf "%-12s %5d %5d^3 %9.2f %9.3f %9.3f %11.2e %11.2e %11.1f\n", v, a, n, ir / e, dr / e, dw / e,
             d1 / e, ll / e, ll * 64 / 1e6 }'
  done
done
