#!/usr/bin/env python3
"""Check that the code the tutorials quote is still in the sources, as quoted.

    python3 tutorials/scripts/check_quotes.py [tutorials/*.md ...]

Every fenced block marked ```c in a tutorial is a quote. A line that is only "..." marks a gap:
it splits the block into pieces. Each piece must appear contiguously in one source file (its
lines, compared after stripping leading and trailing white space, are consecutive lines of the
file; blank lines are skipped on both sides), and the pieces of one block must come from the
same file in the order quoted. Code left out inside a piece must be marked with "...", so a
reader never takes two separate places for one.

The file is the one the block names, when it names one: an info string after the language
(```c md_cuda.cu.h) or an HTML comment on the line just before the fence
(<!-- quote: md_cuda.cu.h -->). Otherwise any of the quoted sources: md.h, md_cuda.cu.h,
bench/*.cu, bench/*.h, tests/*.c, tests/*.cu, chapters/** . Blocks in ```sh, ``` (SASS,
output) and other languages are not checked. Prints one line per block that fails and exits 1
if any does.
"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ELLIPSIS = "..."


def source_files():
    files = ["md.h", "md_cuda.cu.h"]
    for pattern in ("bench/*.cu", "bench/*.h", "tests/*.c", "tests/*.cu"):
        files += sorted(glob.glob(os.path.join(ROOT, pattern)))
    files += sorted(f for f in glob.glob(os.path.join(ROOT, "chapters", "**", "*.*"), recursive=True)
                    if os.path.isfile(f))
    return [os.path.relpath(f if os.path.isabs(f) else os.path.join(ROOT, f), ROOT) for f in files]


_cache = {}


def lines_of(rel):
    """The non-blank lines of a file, stripped (None if the file does not exist)."""
    if rel not in _cache:
        p = os.path.join(ROOT, rel)
        if not os.path.isfile(p):
            _cache[rel] = None
        else:
            with open(p, encoding="utf-8", errors="replace") as fh:
                _cache[rel] = [s for s in (line.strip() for line in fh) if s]
    return _cache[rel]


def find(piece, lines, start):
    """First index >= start where piece occurs as consecutive lines, or -1."""
    n = len(piece)
    first = piece[0]
    for i in range(start, len(lines) - n + 1):
        if lines[i] == first and lines[i:i + n] == piece:
            return i
    return -1


def placed(pieces, lines):
    """True if the pieces occur in lines, each contiguously, in order, without overlapping."""
    at = 0
    for piece in pieces:
        i = find(piece, lines, at)
        if i < 0:
            return False
        at = i + len(piece)
    return True


def check_block(pieces, named):
    """None if the block is found; else why not."""
    if not any(pieces):
        return None
    pieces = [p for p in pieces if p]
    files = [named] if named else source_files()
    if named and lines_of(named) is None:
        return "names %s, which does not exist" % named
    for f in files:
        lines = lines_of(f)
        if lines is not None and placed(pieces, lines):
            return None
    # say what is wrong: a line found nowhere, or lines found but not contiguously
    for piece in pieces:
        for line in piece:
            if not any(lines_of(f) is not None and line in lines_of(f) for f in files):
                return "not in %s: %s" % (named or "the sources", line)
    for k, piece in enumerate(pieces):
        if not any(lines_of(f) is not None and find(piece, lines_of(f), 0) >= 0 for f in files):
            return ("piece %d (from '%s') is not contiguous in %s: mark the lines left out with '...'"
                    % (k + 1, piece[0], named or "any source file"))
    return ("its pieces are not in one file in the order quoted (%s)" % (named or "any source file"))


def blocks(text):
    """(line number of the fence, named file or None, [pieces of stripped lines]) per ```c block."""
    out = []
    in_c = False
    for n, line in enumerate(text, 1):
        if line.startswith("```"):
            if in_c:
                out.append((start, named, pieces))
                in_c = False
                continue
            m = re.match(r"```c(?:\s+(\S+))?\s*$", line)
            if m:
                in_c, start, pieces = True, n, [[]]
                named = m.group(1)
                prev = text[n - 2].strip() if n >= 2 else ""
                c = re.match(r"<!--\s*quote:\s*(\S+)\s*-->$", prev)
                if c:
                    named = c.group(1)
            continue
        if in_c:
            s = line.strip()
            if s == ELLIPSIS:
                pieces.append([])
            elif s:
                pieces[-1].append(s)
    return out


def main():
    docs = sys.argv[1:] or sorted(glob.glob(os.path.join(ROOT, "tutorials", "*.md")))
    bad = total = 0
    for doc in docs:
        with open(doc, encoding="utf-8") as fh:
            text = fh.read().splitlines()
        for start, named, pieces in blocks(text):
            total += 1
            why = check_block(pieces, named)
            if why:
                print("%s:%d: quoted block %s" % (os.path.relpath(os.path.abspath(doc), ROOT), start, why))
                bad += 1
    print("%s check_quotes: %d of %d quoted block(s) not found as quoted" % ("FAIL" if bad else "PASS", bad, total))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
