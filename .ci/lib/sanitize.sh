#!/usr/bin/env bash
# The C speedups under AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Usage: sanitize.sh [PYTEST-ARGS...]
#
# Compiles the C extensions of pyproject.toml (and the canary of tests/wire/native/) with
# -fsanitize=address,undefined into a scratch folder, never the source tree,
# then runs tests/wire/native/ (the mutation fuzz of every C reader, at its long
# setting) and the tests that compare the C codecs with the Python ones
# against that build: the tests/wire/native/sanitized.py plugin makes
# `openenv_ws._wire` and `openenv_ws._expand` the scratch modules, and the
# sanitizer runtime is preloaded into the (uninstrumented) interpreter.
# A sanitizer report aborts the run; so does a run that collects no tests
# (pytest exit 5) or that did not load the scratch modules.
#
# Settings (environment, all optional):
#   OPENENV_WS_FUZZ_SECONDS  time given to each fuzz target (default 15)
#   OPENENV_WS_FUZZ_SEED     the fuzz's random seed (default: the clock; logged)
#   PYTHON                   the interpreter with the project installed (default .venv/bin/python)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"

PYTHON=${PYTHON:-.venv/bin/python}
SANITIZE=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)

# gcc and its sanitizer runtimes (libasan8 and libubsan1 come with gcc-12 on Debian).
runtime() { gcc -print-file-name="$1"; }
if ! command -v gcc >/dev/null || [[ $(runtime libasan.so) != /* ]] || [[ $(runtime libubsan.so) != /* ]]; then
    apt_install gcc libasan8 libubsan1
fi
asan=$(runtime libasan.so)
ubsan=$(runtime libubsan.so)
[[ -e $asan && -e $ubsan ]] || die "gcc has no sanitizer runtimes ($asan, $ubsan)"

build=$(mktemp -d "${TMPDIR:-/tmp}/openenv-ws-sanitize.XXXXXX")
trap 'rm -rf "$build"' EXIT
read -r include suffix < <("$PYTHON" -c \
    'import sysconfig as s; print(s.get_paths()["include"], s.get_config_var("EXT_SUFFIX"))')

t0=$(now)
# Each C extension of pyproject.toml from its sources, and the canary.
while read -r name sources; do
    # shellcheck disable=SC2086 # the extension's sources, one word each
    gcc -shared -fPIC -O1 -g -Wall "${SANITIZE[@]}" -I"$include" $sources -o "$build/$name$suffix"
done < <("$PYTHON" -c '
import tomllib
with open("pyproject.toml", "rb") as f:
    for ext in tomllib.load(f)["tool"]["setuptools"]["ext-modules"]:
        print(ext["name"].rpartition(".")[2], *ext["sources"])
print("canary tests/wire/native/canary.c")')
log_elapsed "sanitized build of the C extensions in $build" "$t0"

seed=${OPENENV_WS_FUZZ_SEED:-$(date +%s)}
log "fuzz seed $seed (OPENENV_WS_FUZZ_SEED=$seed replays it)"
t0=$(now)
# PYTHONMALLOC=malloc: every object its own allocation, so that a read past a
# buffer's end lands outside it. detect_leaks=0: CPython keeps memory until exit.
# --capture=sys: a sanitizer's report goes to file descriptor 2, which stays the log's.
env LD_PRELOAD="$asan $ubsan" PYTHONMALLOC=malloc \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:print_summary=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    OPENENV_WS_NATIVE_BUILD="$build" \
    OPENENV_WS_FUZZ_SECONDS="${OPENENV_WS_FUZZ_SECONDS:-15}" \
    OPENENV_WS_FUZZ_SEED="$seed" \
    "$PYTHON" -m pytest -p tests.wire.native.sanitized -q -p no:cacheprovider --capture=sys \
    tests/wire/native \
    tests/wire/protocol/test_native_codec.py \
    tests/client/test_native_wire.py \
    tests/client/palette/test_expand.py \
    "$@"
log_elapsed "tests against the sanitized build" "$t0"
