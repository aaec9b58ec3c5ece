#!/usr/bin/env python3
"""Check that the code the tutorials quote is still in the sources.

    python3 tutorials/scripts/check_quotes.py [tutorials/*.md ...]

For every fenced block marked ```c in a tutorial, each non-empty line (right-stripped) must be
a line of one of the quoted sources (md.h, md_cuda.cu.h, bench/ceilings.cu, tests/*.c,
tests/*.cu, chapters/**), compared after stripping both sides; a line that is only "..." is an
elision. Blocks in ```sh, ``` (SASS, output) and other languages are not checked. Prints one
line per missing line and exits 1 if any is missing.
"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def source_lines():
    files = ["md.h", "md_cuda.cu.h", "bench/ceilings.cu"]
    files += glob.glob(os.path.join(ROOT, "tests", "*.c")) + glob.glob(os.path.join(ROOT, "tests", "*.cu"))
    files += glob.glob(os.path.join(ROOT, "chapters", "**", "*.*"), recursive=True)
    have = set()
    for f in files:
        p = f if os.path.isabs(f) else os.path.join(ROOT, f)
        if os.path.exists(p):
            with open(p, encoding="utf-8", errors="replace") as fh:
                have.update(line.strip() for line in fh)
    return have


def main():
    docs = sys.argv[1:] or sorted(glob.glob(os.path.join(ROOT, "tutorials", "*.md")))
    have = source_lines()
    bad = 0
    for doc in docs:
        with open(doc, encoding="utf-8") as fh:
            text = fh.read().splitlines()
        in_c, start = False, 0
        for n, line in enumerate(text, 1):
            if line.startswith("```"):
                if in_c:
                    in_c = False
                elif re.match(r"```c\s*$", line):
                    in_c, start = True, n
                continue
            if in_c and line.strip() and line.strip() != "..." and line.strip() not in have:
                print(f"{os.path.relpath(doc, ROOT)}:{n} (block at line {start}): not in the sources: {line.strip()}")
                bad += 1
    print(f"{'FAIL' if bad else 'PASS'} check_quotes: {bad} quoted line(s) missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
