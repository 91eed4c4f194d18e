#!/usr/bin/env bash
# Build the Atari server image from the repository's Dockerfile, offline: wheels
# for the package and its dependencies are built on the host (where pip reaches
# the package index) into .tmp/wheelhouse, and the image installs only from them.
# Prints the image tag on stdout.
#
# Usage: build-image.sh [TAG]       (default openenv-ws/atari:ci)
#
# Settings (environment):
#   BASE_IMAGE  base for both stages (default local/python:bookworm, made by
#               base-image.sh when missing)
#   PYTHON      interpreter whose pip builds the wheels (default python3); its
#               major.minor must match the base image's python3
# Needs a running engine (DOCKER_HOST, or the one docker-engine.sh starts).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TAG=${1:-openenv-ws/atari:ci}
BASE_IMAGE=${BASE_IMAGE:-local/python:bookworm}
PYTHON=${PYTHON:-python3}
WHEELHOUSE=$REPO_ROOT/.tmp/wheelhouse
WORK=$(mktemp -d "${TMPDIR:-/tmp}/openenv-ws-build.XXXXXX")

cleanup() {
    rm -rf "$WORK" "$WHEELHOUSE"
    rmdir "$REPO_ROOT/.tmp" 2>/dev/null || true
}
trap cleanup EXIT

py_version='import sys; print("%d.%d" % sys.version_info[:2])'

docker_host_default
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
    || die "no Docker engine at $DOCKER_HOST; run .ci/lib/docker-engine.sh start first"

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    [[ $BASE_IMAGE == local/python:bookworm ]] \
        || die "base image $BASE_IMAGE is missing (this engine reaches no registry)"
    "$CI_LIB_DIR/base-image.sh" "$BASE_IMAGE" >/dev/null
fi

host_py=$("$PYTHON" -c "$py_version")
image_py=$(docker run --rm "$BASE_IMAGE" python3 -c "$py_version" 2>/dev/null)
[[ $host_py == "$image_py" ]] \
    || die "$PYTHON is Python $host_py but $BASE_IMAGE has $image_py; set PYTHON to a $image_py interpreter"

# Build from a copy of the sources: an in-tree build leaves build/ behind, whose
# stale modules would end up in later wheels.
t0=$(now)
mkdir -p "$WORK/src"
for entry in pyproject.toml README.md LICENSE openenv_ws atari; do
    if [[ -e $REPO_ROOT/$entry ]]; then cp -r "$REPO_ROOT/$entry" "$WORK/src/"; fi
done
find "$WORK/src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
rm -rf "$WHEELHOUSE"
mkdir -p "$WHEELHOUSE"
run_logged "$WORK/wheel.log" "$PYTHON" -m pip wheel --quiet --disable-pip-version-check \
    --wheel-dir "$WHEELHOUSE" "$WORK/src"
log_elapsed "pip wheel ($(find "$WHEELHOUSE" -name '*.whl' | wc -l) wheels)" "$t0"

t0=$(now)
# The engine's classic builder: this client has no buildx plugin, so BuildKit
# (if asked for through the environment) would fail before building.
run_logged "$WORK/build.log" env DOCKER_BUILDKIT=0 docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --tag "$TAG" --file "$REPO_ROOT/Dockerfile" "$REPO_ROOT"
log_elapsed "docker build $TAG" "$t0"
# Each build leaves its first stage behind untagged; nothing reuses it (the
# package wheel differs every time), so keep the engine's disk use flat.
docker image prune --force >/dev/null
printf '%s\n' "$TAG"
