#!/usr/bin/env bash
# Compile and run the drop-in example quoted in README.md (the C block after
# the marker line "<!-- drop-in example -->"), as C11 and as C++17.
set -eu
cd "$(dirname "$0")/.."
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
awk '/<!-- drop-in example -->/{f=1; next} f && /^```c/{g=1; next} g && /^```/{exit} g{print}' README.md > "$t/example.c"
[ -s "$t/example.c" ] || { echo "no drop-in example found in README.md"; exit 1; }
gcc -std=c11 -Wall -Wextra -Werror -pedantic -I. "$t/example.c" -o "$t/c" -lm
g++ -std=c++17 -x c++ -Wall -Wextra -Werror -I. "$t/example.c" -o "$t/cxx" -lm
"$t/c" | tee "$t/c.out"
"$t/cxx" > "$t/cxx.out"
cmp "$t/c.out" "$t/cxx.out"
grep -q "kJ/mol/e" "$t/c.out"
