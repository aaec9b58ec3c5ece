#!/usr/bin/env bash
# `make install PREFIX=<tmp>` then build the README example against the
# installed headers through pkg-config.
set -eu
cd "$(dirname "$0")/.."
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
make -s install PREFIX="$t/prefix"
test -f "$t/prefix/include/md.h" && test -f "$t/prefix/include/md_cuda.cu.h"
awk '/<!-- drop-in example -->/{f=1; next} f && /^```c/{g=1; next} g && /^```/{exit} g{print}' README.md > "$t/example.c"
export PKG_CONFIG_PATH="$t/prefix/lib/pkgconfig"
pkg-config --modversion md
(cd "$t" && gcc -std=c11 -Wall -Wextra -Werror example.c -o example $(pkg-config --cflags --libs md))
"$t/example"
