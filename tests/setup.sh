#!/usr/bin/env bash
# Set-up: install what `make test` needs and this machine lacks. `make test` runs it first,
# and so does .ci/run; it is idempotent (with everything there it installs nothing and
# takes about a second).
#
#   bash tests/setup.sh           install what is missing
#   bash tests/setup.sh --check   install nothing: list every need (ok / missing / optional),
#                                 exit 1 if a required one is missing
#   MD_NO_INSTALL=1 make test     the set-up only checks (silently); a missing need stops the
#                                 run with the one line below
#
# Required (Debian package, or PyPI name from reference/requirements.txt):
#   gcc, g++, make (build-essential), pkg-config, git
#   clang and clang++ (clang), and libFuzzer for the installed clang's major version N
#     (libclang-rt-N-dev; checked by building a fuzz target, as `make fuzz` does)
#   doxygen (doxygen)
#   python3 with pip (python3, python3-pip) and the packages of reference/requirements.txt
# Optional (reported by --check, never installed): nvcc, the CUDA toolkit (without it the
# GPU code is not built and its tests SKIP); valgrind (tutorials/scripts/cachegrind_dcs.sh).
#
# How it installs: Debian packages with apt-get (as root, or through `sudo -n` when that
# needs no password); Python packages with `python3 -m pip install` into the python3 on
# PATH (a pyenv, conda or virtual environment, or pip's user site). Where that python3 is
# "externally managed" (PEP 668: Debian's /usr/bin/python3), it makes a virtual environment
# .venv (--system-site-packages, so Debian's own packages count) and installs there;
# tests/run.sh puts .venv/bin first on PATH.
# Where it cannot install (not root and no sudo, no apt-get, no registry, pip fails) it
# prints ONE line on stderr naming what to install and how, and exits 1. Installer output
# goes to build/test-logs/setup.log.
set -u
cd "$(dirname "$0")/.."
CHECK_ONLY=0 LIST=0
[ "${MD_NO_INSTALL:-0}" = 1 ] && CHECK_ONLY=1
for a in "$@"; do
  case "$a" in
    --check) CHECK_ONLY=1 LIST=1 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument '$a' (try --help)" >&2; exit 2 ;;
  esac
done
[ -x .venv/bin/python3 ] && export PATH="$PWD/.venv/bin:$PATH"
mkdir -p build/test-logs
LOG=build/test-logs/setup.log
: > "$LOG"

have() { command -v "$1" >/dev/null 2>&1; }
# PEP 668: pip may not install into this python3 (Debian's own), outside a virtual environment
externally_managed() {
  python3 -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) and sys.prefix == sys.base_prefix else 1)'
}
say() { [ "$LIST" = 1 ] && printf '  %-9s %s\n' "$1" "$2"; }
join() { local IFS=' '; echo "$*"; }

# ---- how to install -----------------------------------------------------------------------
SUDO=; APT_WHY=
if ! have apt-get; then APT_WHY="no apt-get here: install them with this system's package manager"
elif [ "$(id -u)" != 0 ]; then
  if have sudo && sudo -n true 2>/dev/null; then SUDO="sudo -n"
  else APT_WHY="not root and no password-less sudo: run 'sudo apt-get install PKGS' or 'sudo bash tests/setup.sh'"; fi
fi
APT_UPDATED=0
apt_install() { # packages...; 0 if all installed
  [ -z "$APT_WHY" ] || return 1
  echo "setup: installing $(join "$@") (apt-get)"
  if [ "$APT_UPDATED" = 0 ]; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >> "$LOG" 2>&1 || true
    APT_UPDATED=1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >> "$LOG" 2>&1
}

apt_missing=() py_missing=()
need_cmd() { # command package
  if have "$1"; then say ok "$1"; else say missing "$1 (Debian package $2)"; apt_missing+=("$2"); fi
}

# ---- commands ----------------------------------------------------------------------------------
need_cmd gcc build-essential
need_cmd g++ build-essential
need_cmd make build-essential
need_cmd pkg-config pkg-config
need_cmd git git
need_cmd clang clang
need_cmd clang++ clang
need_cmd doxygen doxygen
if have python3; then say ok python3; else say missing "python3 (Debian packages python3 python3-pip python3-venv)"; apt_missing+=(python3 python3-pip python3-venv); fi
if have python3 && ! python3 -c 'import pip' >/dev/null 2>&1 && ! externally_managed; then
  say missing "pip for $(command -v python3) (Debian package python3-pip)"; apt_missing+=(python3-pip)
fi
mapfile -t apt_missing < <(printf '%s\n' "${apt_missing[@]}" | awk 'NF && !seen[$0]++')
if [ ${#apt_missing[@]} -gt 0 ] && [ "$CHECK_ONLY" = 0 ] && apt_install "${apt_missing[@]}"; then apt_missing=(); fi

# ---- libFuzzer for the installed clang ------------------------------------------------------
fuzz_ok() {
  local t rc
  t=$(mktemp -d)
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$t/f.c"
  clang -fsanitize=fuzzer,address,undefined "$t/f.c" -o "$t/f" >> "$LOG" 2>&1; rc=$?
  rm -rf "$t"; return $rc
}
if have clang; then
  CLANG_MAJOR=$(clang --version | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1)
  FUZZ_PKG=libclang-rt-${CLANG_MAJOR:-N}-dev
  [ -n "$CLANG_MAJOR" ] && [ "$CLANG_MAJOR" -lt 14 ] && FUZZ_PKG=libclang-common-$CLANG_MAJOR-dev
  if fuzz_ok; then say ok "libFuzzer (clang $CLANG_MAJOR)"
  elif [ "$CHECK_ONLY" = 0 ] && apt_install "$FUZZ_PKG" && fuzz_ok; then :
  else say missing "libFuzzer for clang $CLANG_MAJOR (Debian package $FUZZ_PKG)"; apt_missing+=("$FUZZ_PKG"); fi
elif [ ${#apt_missing[@]} -gt 0 ]; then
  apt_missing+=("libclang-rt-N-dev (N: the version of clang)")
fi

# ---- Python packages (reference/requirements.txt) ---------------------------------------------
REQS=$(sed -e 's/#.*//' reference/requirements.txt | tr -s ' \t' '\n\n' | awk NF)
py_check() { # prints the missing PyPI names
  python3 - $REQS <<'PY' 2>> "$LOG"
import importlib.metadata, importlib.util, sys
for name in sys.argv[1:]:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        if importlib.util.find_spec(name.replace("-", "_")) is None:
            print(name)
PY
}
PIP_WHY=
if have python3; then
  mapfile -t py_missing < <(py_check)
  for p in $REQS; do
    case " ${py_missing[*]} " in *" $p "*) say missing "$p (PyPI)" ;; *) say ok "$p (python)" ;; esac
  done
  if [ ${#py_missing[@]} -gt 0 ] && [ "$CHECK_ONLY" = 0 ]; then
    PY=python3
    if externally_managed; then
      # PEP 668: pip may not write into this python; a virtual environment that sees its packages
      if [ ! -x .venv/bin/python3 ]; then
        echo "setup: $(command -v python3) is externally managed (PEP 668): making .venv"
        python3 -m venv --system-site-packages .venv >> "$LOG" 2>&1 ||
          { apt_install python3-venv && python3 -m venv --system-site-packages .venv >> "$LOG" 2>&1; } ||
          { rm -rf .venv; PIP_WHY="cannot make a virtual environment (Debian package python3-venv)"; }
      fi
      PY=.venv/bin/python3; export PATH="$PWD/.venv/bin:$PATH"
    fi
    if [ -z "$PIP_WHY" ]; then
      echo "setup: installing $(join "${py_missing[@]}") ($PY -m pip)"
      if ! $PY -m pip install -q "${py_missing[@]}" >> "$LOG" 2>&1; then
        PIP_WHY="pip install failed (no registry? see $LOG)"
      fi
    fi
    mapfile -t py_missing < <(py_check)
  fi
else
  py_missing=($REQS)
fi

# ---- optional -----------------------------------------------------------------------------------
if [ "$LIST" = 1 ]; then
  if have nvcc || [ -x /usr/local/cuda/bin/nvcc ]; then say ok nvcc
  else say optional "nvcc not found: the GPU code is not built, GPU tests SKIP (the CUDA toolkit)"; fi
  if have valgrind; then say ok valgrind
  else say optional "valgrind (Debian package valgrind): tutorials/scripts/cachegrind_dcs.sh"; fi
fi

# ---- verdict: nothing, or one line ------------------------------------------------------------
mapfile -t apt_missing < <(printf '%s\n' "${apt_missing[@]}" | awk 'NF && !seen[$0]++')
if [ ${#apt_missing[@]} -eq 0 ] && [ ${#py_missing[@]} -eq 0 ]; then
  [ "$LIST" = 1 ] && echo "setup: everything make test needs is installed"
  exit 0
fi
msg="setup: missing"
if [ ${#apt_missing[@]} -gt 0 ]; then
  msg="$msg Debian packages $(join "${apt_missing[@]}")"
  if [ -n "$APT_WHY" ]; then msg="$msg (${APT_WHY/PKGS/$(join "${apt_missing[@]}")})"
  elif [ "$CHECK_ONLY" = 1 ]; then msg="$msg (apt-get install them, or run 'bash tests/setup.sh')"
  else msg="$msg (apt-get install failed: no registry? see $LOG)"; fi
fi
if [ ${#py_missing[@]} -gt 0 ]; then
  [ ${#apt_missing[@]} -gt 0 ] && msg="$msg; and"
  msg="$msg Python packages $(join "${py_missing[@]}")"
  if [ "$CHECK_ONLY" = 1 ] && have python3 && externally_managed && [ ! -x .venv/bin/python3 ]; then
    msg="$msg ($(command -v python3) is externally managed: 'bash tests/setup.sh' makes .venv and installs them there)"
  elif [ "$CHECK_ONLY" = 1 ] || [ -z "$PIP_WHY" ]; then msg="$msg (python3 -m pip install -r reference/requirements.txt)"
  else msg="$msg ($PIP_WHY; python3 -m pip install -r reference/requirements.txt)"; fi
fi
echo "$msg" >&2
exit 1
