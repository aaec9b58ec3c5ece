#!/usr/bin/env bash
# examples/potential_map on the sample water box: the program runs, the .dx it
# writes has the right header and value count, and its values agree with the
# float64 numpy direct Coulomb sum (reference/dcs.py) of the same PQR, parsed
# independently here. Prints PASS/FAIL lines (tests/run.sh counts them).
set -u
cd "$(dirname "$0")/.."
exe=build/examples/potential_map
pqr=examples/potential_map/water.pqr
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
[ -x "$exe" ] || make -s "$exe" || { echo "FAIL potential_map: cannot build"; exit 1; }

# the sample input is what its script makes (a failure names its cause: the script's error)
if ! python3 examples/potential_map/make_water_pqr.py > "$t/water.pqr" 2> "$t/gen.err"; then
  echo "FAIL water.pqr: make_water_pqr.py failed: $(tail -n 1 "$t/gen.err")"
elif cmp -s "$t/water.pqr" "$pqr"; then
  echo "PASS water.pqr: make_water_pqr.py reproduces it"
else
  echo "FAIL water.pqr: make_water_pqr.py output differs from the committed file ($(cmp "$t/water.pqr" "$pqr" 2>&1 | head -n 1))"
fi

# bad arguments: exit status 2 (1 for a missing file), a message naming the argument and
# its value, nothing written
rejects() { # expected-status expected-text args...
  local want=$1 text=$2 rc; shift 2
  "$exe" "$@" > "$t/bad.log" 2>&1; rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$text" "$t/bad.log"; then return 0; fi
  echo "    $exe $*: exit $rc (want $want), message: $(head -n 1 "$t/bad.log") (want '$text')"; return 1
}
if rejects 2 "missing out.dx" "$pqr" && rejects 2 "--spacing: expected a positive number of nm, got '-1'" "$pqr" "$t/x.dx" --spacing -1 &&
   rejects 2 "--margin: expected a non-negative number of nm, got '1x'" "$pqr" "$t/x.dx" --margin 1x &&
   rejects 2 "missing value after '--spacing'" "$pqr" "$t/x.dx" --spacing &&
   rejects 2 "--variant: 'nope' is not a CPU rung" "$pqr" "$t/x.dx" --variant nope &&
   rejects 2 "unknown option '--colour'" "$pqr" "$t/x.dx" --colour red &&
   rejects 2 "would overwrite the input '$t/y.pqr'" "$t/y.pqr" "$t/y.pqr" &&
   rejects 1 "$t/missing.pqr" "$t/missing.pqr" "$t/x.dx" && [ ! -e "$t/x.dx" ] && [ ! -e "$t/y.pqr" ]; then
  echo "PASS potential_map: bad arguments rejected, naming the argument and value; nothing written"
else
  echo "FAIL potential_map: a bad argument was accepted, not named, or a file was written"
fi

for v in cpu_rows_omp cpu_simple; do
  if ! "$exe" "$pqr" "$t/$v.dx" --spacing 0.1 --margin 0.3 --variant "$v" > "$t/$v.log" 2>&1; then
    echo "FAIL potential_map --variant $v: exit status $?"; sed 's/^/    /' "$t/$v.log"; continue
  fi
  # Tolerance, max |dx - numpy| / max |numpy| over 300 random points (seed 7) and
  # the 8 corners: 1e-4 for cpu_rows_omp (float): the grid point coordinate
  # formed in float (~2 ulps of |x| <= 3 nm, 2.4e-7 nm) over the smallest
  # atom-point distance (~0.005 nm on this grid) bounds it by ~5e-5; 1e-6 for
  # cpu_simple (double sums; md.h stores positions as float, which this
  # script mimics, and the map as float: 6e-8).
  tol=1e-4; [ "$v" = cpu_simple ] && tol=1e-6
  python3 - "$t/$v.dx" "$pqr" "$tol" "$v" 2> "$t/py.err" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "reference")
import dcs
dxpath, pqr, tol, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
xyzq = []
for line in open(pqr):
    if line.startswith(("ATOM", "HETATM")):
        f = line.split()
        xyzq.append([float(f[-5]) * 0.1, float(f[-4]) * 0.1, float(f[-3]) * 0.1, float(f[-2])])
xyzq = np.array(xyzq, dtype=np.float32).astype(np.float64)    # md.h holds float positions
try:
    v, origin, spacing, items = dcs.read_dx(dxpath)
except ValueError as e:
    print("FAIL %s: %s" % (name, e))
    sys.exit(1)
counts = list(v.shape)
lo = xyzq[:, :3].min(axis=0); hi = xyzq[:, :3].max(axis=0)
want = [int(np.ceil((hi[d] - lo[d] + 0.6) / 0.1 - 1e-9)) + 1 for d in range(3)]
ok = (counts == want and items == v.size and np.allclose(origin, lo - 0.3, atol=1e-6)
      and np.allclose(spacing, 0.1, atol=1e-9))
if ok:
    print("PASS %s: .dx header %s, origin, deltas, %d values" % (name, counts, v.size))
else:
    print("FAIL %s: .dx header: counts %s (want %s), items %s, values %d, origin %s, spacing %s"
          % (name, counts, want, items, v.size, origin, spacing))
    sys.exit(1)
rng = np.random.default_rng(7)
idx = [tuple(rng.integers(0, counts[d]) for d in range(3)) for _ in range(300)]
idx += [(i, j, k) for i in (0, counts[0] - 1) for j in (0, counts[1] - 1) for k in (0, counts[2] - 1)]
pts = np.array([[origin[d] + spacing[d] * p[d] for d in range(3)] for p in idx])
r = np.linalg.norm(pts[:, None, :] - xyzq[None, :, :3], axis=2)
inv = np.where(r * r >= dcs.MIN_R2, 1.0 / np.maximum(r, 1e-30), 0.0)
ref = dcs.COULOMB * inv @ xyzq[:, 3]
got = np.array([v[p] for p in idx])
err = np.abs(got - ref).max() / np.abs(ref).max()
print("%s %s: %d points vs numpy, max rel error %.2e (tolerance %.0e)"
      % ("PASS" if err <= tol else "FAIL", name, len(idx), err, tol))
PY
  # an exception (a missing module, an unreadable file) is the cause: name it
  [ $? -eq 0 ] || [ ! -s "$t/py.err" ] || echo "FAIL $v: the .dx check did not complete: $(tail -n 1 "$t/py.err")"
done
