#!/usr/bin/env bash
# Side by side: the working tree's md.h / md_cuda.cu.h against another version of the two
# headers, on the same GPU in one run, so a change to a kernel is measured against the code
# before it (tutorials 06-08 quote such runs as "side by side").
#   bench/ab.sh BASE_DIR [BASE_DIR ...] [--rounds N] [--steps N] [--no-race] [--no-kernel]
#               [--chapters NN,NN ...]
#     each BASE_DIR holds md.h and md_cuda.cu.h of another version (labelled by the folder's
#     name; the working tree is "new"), e.g. the last commit's:
#       mkdir -p .ab/base && git show HEAD:md.h > .ab/base/md.h && git show HEAD:md_cuda.cu.h > .ab/base/md_cuda.cu.h
#     (on a device machine, carry .ab: it is not tracked). Programs are built from the same
#     sources for each version, with -I BASE_DIR ahead of the tree (quoted includes of
#     md_cuda.cu.h and md.h then find BASE_DIR's), and once as the Makefile builds them. Each
#     round runs every version in the order given, the working tree last:
#       bench/nb_cluster, 23,568 and 95,766 atoms, with energies and forces only (median of 50
#       evaluations of the pair kernel each, CUDA events)
#       chapter 08's --race step on both race boxes (--steps steps, default 1000)
#       with --chapters, e.g. 09,10: each named chapter's program as it runs in the bench (its
#       --json lines: one per rung and system, µs per step or per replica-step), so a change to
#       chapter 09's graphs or chapter 10's replica exchange is measured against the code before
#     and the table at the end gives each measurement's rounds side by side, so the spread
#     between rounds is seen beside the difference. Default 2 rounds. Results: one JSON line per
#     measurement in ${OUT:-build/ab}/ab.jsonl, labelled by version; the ratio column is each
#     version's median over the first BASE_DIR's.
set -u
cd "$(dirname "$0")/.."
USAGE="usage: $0 BASE_DIR [BASE_DIR ...] [--rounds N] [--steps N] [--no-race] [--no-kernel] [--chapters NN,NN]"
ROUNDS=2; STEPS=1000; RACE=1; KERNEL=1; DIRS=(); CHAPTERS=(); declare -A CHDIR
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --no-race) RACE=0 ;;
    --no-kernel) KERNEL=0 ;;
    --chapters)
      for c in ${2//,/ }; do
        m=$(ls -d chapters/"$c"_*/ 2>/dev/null | head -n 1)
        [ -n "$m" ] && [ -f "$m/main.cu" ] || { echo "$0: --chapters: no chapters/${c}_*/main.cu" >&2; exit 2; }
        CHAPTERS+=("$c"); CHDIR[$c]=$m
      done
      shift ;;
    -*) echo "$USAGE" >&2; exit 2 ;;
    *) DIRS+=("$1") ;;
  esac
  shift
done
[ ${#DIRS[@]} -ge 1 ] || { echo "$USAGE" >&2; exit 2; }
case "$ROUNDS$STEPS" in ''|*[!0-9]*) echo "$0: --rounds and --steps want positive integers" >&2; exit 2 ;; esac
declare -A DIR_OF
VERSIONS=()
for d in "${DIRS[@]}"; do
  for f in md.h md_cuda.cu.h; do
    [ -f "$d/$f" ] || { echo "$0: $d/$f is missing (a BASE_DIR holds another version's md.h and md_cuda.cu.h)" >&2; exit 2; }
  done
  v=$(basename "$d")
  [ "$v" != new ] && [ -z "${DIR_OF[$v]:-}" ] || { echo "$0: two versions named '$v' (the folder's name labels it; 'new' is the tree)" >&2; exit 2; }
  DIR_OF[$v]=$d
  VERSIONS+=("$v")
done
VERSIONS+=(new)
for d in /usr/local/cuda/bin; do [ -d "$d" ] && PATH="$PATH:$d"; done
OUT=${OUT:-build/ab}
B=$OUT/bin
mkdir -p "$B"
J=$OUT/ab.jsonl
: > "$J"
# the Makefile's flags, with BASE_DIR first for the base build
NVFLAGS=$(sed -n 's/^NVFLAGS ?= //p' Makefile | sed "s/\$(MD_ARCH)/${MD_ARCH:-sm_90}/")
[ -n "$NVFLAGS" ] || { echo "$0: no NVFLAGS in the Makefile" >&2; exit 1; }
build() { # version src out (a chapter's program also takes -Ichapters -Ichapters/NAME, as in the Makefile)
  local inc="-Ichapters -I$(dirname "$2")"
  if [ "$1" != new ]; then nvcc -I"${DIR_OF[$1]}" $NVFLAGS $inc "$2" -o "$3" -lcufft -lgomp; else nvcc $NVFLAGS $inc "$2" -o "$3" -lcufft -lgomp; fi
}
pids=
for v in "${VERSIONS[@]}"; do
  [ "$KERNEL" -eq 1 ] && { build $v bench/nb_cluster.cu "$B/nb_cluster_$v" > "$OUT/build_nb_$v.log" 2>&1 & pids="$pids $!"; }
  [ "$RACE" -eq 1 ] && { build $v chapters/08_md_step/main.cu "$B/md_step_$v" > "$OUT/build_08_$v.log" 2>&1 & pids="$pids $!"; }
  for c in ${CHAPTERS[@]+"${CHAPTERS[@]}"}; do
    build $v "${CHDIR[$c]}main.cu" "$B/ch${c}_$v" > "$OUT/build_ch${c}_$v.log" 2>&1 & pids="$pids $!"
  done
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
if [ "$rc" -ne 0 ]; then
  echo "FAIL ab: a build failed:"; tail -n 20 "$OUT"/build_*.log; exit 1
fi
if [ "$RACE" -eq 1 ]; then "$B/md_step_new" --write-pdb "$OUT/water" > /dev/null || exit 1; fi
label() { # label, tag: prefix every JSON line of stdin with the version and the measurement
  python3 -c '
import json, sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        r = json.loads(l); r["ab"] = sys.argv[1]; r["ab_round"] = int(sys.argv[3])
        # a tag ending in "@" names a chapter program: its lines are per system, so the size joins it
        r["ab_what"] = sys.argv[2] + str(r.get("size", "")) if sys.argv[2].endswith("@") else sys.argv[2]
        print(json.dumps(r))' "$@"
}
for k in $(seq 1 "$ROUNDS"); do
  for v in "${VERSIONS[@]}"; do
    if [ "$KERNEL" -eq 1 ]; then
      for box in "7856 6.2" "31922 9.9"; do
        set -- $box
        n=$(( $1 * 3 ))
        "$B/nb_cluster_$v" --molecules "$1" --edge "$2" 2>> "$OUT/nb.log" | label "$v" "kernel_energy_$n" "$k" >> "$J" || rc=1
        "$B/nb_cluster_$v" --molecules "$1" --edge "$2" --forces-only 2>> "$OUT/nb.log" | label "$v" "kernel_forces_$n" "$k" >> "$J" || rc=1
      done
    fi
    if [ "$RACE" -eq 1 ]; then
      for n in 23568 95766; do
        "$B/md_step_$v" --race "$OUT/water_$n.pdb" --steps "$STEPS" | grep '"md_race/1"' | label "$v" "race_$n" "$k" >> "$J" || rc=1
      done
    fi
    for c in ${CHAPTERS[@]+"${CHAPTERS[@]}"}; do
      rm -f "$OUT/ch.jsonl"
      "$B/ch${c}_$v" --json "$OUT/ch.jsonl" >> "$OUT/ch${c}_$v.log" 2>&1 || rc=1
      [ -f "$OUT/ch.jsonl" ] && label "$v" "ch${c}@" "$k" < "$OUT/ch.jsonl" >> "$J"
    done
  done
done
python3 - "$J" "${VERSIONS[@]}" <<'EOF' || rc=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
versions = sys.argv[2:]
def us(r):
    return 1e6 * (r["s_per_step"] if r.get("schema") == "md_race/1" else r["time_s"])
def med(v):
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
table = {}
for r in rows:
    table.setdefault((r["ab_what"], r.get("variant", "")), {}).setdefault(r["ab"], []).append(us(r))
print("\nus per measurement, each version's rounds in order; ratio: median over %s's median" % versions[0])
print("%-20s %-17s " % ("measurement", "rung") + " ".join("%-19s" % v for v in versions) + " " +
      " ".join("%8s" % v[:8] for v in versions[1:]))
for (what, var), d in sorted(table.items()):
    if not all(v in d for v in versions):
        continue
    cells = " ".join("%-19s" % " / ".join("%.1f" % x for x in d[v]) for v in versions)
    ratios = " ".join("%8.3f" % (med(d[v]) / med(d[versions[0]])) for v in versions[1:])
    print("%-20s %-17s %s %s" % (what, var, cells, ratios))
EOF
echo "results: $J"
exit $rc
