#!/usr/bin/env python3
"""The table of tutorial 08, section 6 ("Kernel by kernel at both sizes"), from Nsight Compute's
CSV (`ncu --csv --metrics gpu__time_duration.sum`) of chapter 08's race step: per kernel the
launches, the mean duration and its range; for the list build's kernels (search, bounding boxes)
and the pair kernel, steps with a list build apart from steps without one. A search launch is a
build's when it takes more than twice the shortest search launch; a pair-kernel launch is after a
build (the evaluation that prunes the fresh list) when the search launch before it was a build's.

usage: bench/step_kernels.py NCU_CSV [NCU_CSV ...]   (bench/step_kernels.sh writes them)"""
import csv
import sys


def launches(path):
    """(kernel name, duration in us) per profiled launch, in launch order."""
    rows = [r for r in csv.reader(open(path)) if len(r) > 5 and r[0] != "" and not r[0].startswith("{")]
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"{path}: no Nsight Compute CSV header (was ncu run with --csv?)")
    h = rows[0]
    ki, ui, vi, ii = h.index("Kernel Name"), h.index("Metric Unit"), h.index("Metric Value"), h.index("ID")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    out = []
    for r in rows[1:]:
        if r[ui] not in scale:
            sys.exit(f"{path}: unknown unit {r[ui]!r}")
        out.append((int(r[ii]), r[ki], float(r[vi].replace(",", "")) * scale[r[ui]]))
    out.sort()
    return [(k, v) for _, k, v in out]


def short(name):
    """The kernel's name without its argument list (templates kept)."""
    depth = 0
    for i, c in enumerate(name):
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            return name[:i].replace("void ", "")
    return name


def table(path):
    seq = launches(path)
    def shortest(kernel):
        return min((v for k, v in seq if kernel in k), default=0.0)

    lo, lo_box = shortest("md__nb_search_kernel"), shortest("md__nb_bbox_kernel")
    groups, build = {}, False
    for k, v in seq:
        s = short(k)
        if "md__nb_search_kernel" in k:
            build = v > 2.0 * lo
            s += " (a build)" if build else " (no build)"
        elif "md__nb_bbox_kernel" in k:
            s += " (a build)" if v > 2.0 * lo_box else " (no build)"
        elif "md__nb_cluster_kernel" in k:
            s += " (after a build: prunes)" if build else " (no build)"
        elif "regular_fft" in k or "vector_fft" in k:
            s = "cuFFT kernels (forward and backward)"
        groups.setdefault(s, []).append(v)
    print(path)
    print(f"  {'kernel':64s} {'launches':>8s} {'mean us':>9s} {'min':>8s} {'max':>8s}")
    for s, v in sorted(groups.items(), key=lambda x: -sum(x[1])):
        print(f"  {s[:64]:64s} {len(v):8d} {sum(v) / len(v):9.2f} {min(v):8.2f} {max(v):8.2f}")
    print(f"  {'all launches':64s} {len(seq):8d}   sum {sum(v for _, v in seq):9.1f} us")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        table(p)
