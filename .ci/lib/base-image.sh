#!/usr/bin/env bash
# Build a Debian bookworm image with python3 (3.11), venv and pip, without any
# container registry: debootstrap from the Debian mirror apt already uses, then
# `docker import`. Prints the image name on stdout.
#
# Usage: base-image.sh [IMAGE]      (default local/python:bookworm)
#
# Needs a running engine (DOCKER_HOST, or the one docker-engine.sh starts).
# Skips all work when IMAGE exists. The trimmed root filesystem is kept as a tar
# in $OPENENV_WS_CACHE (default /var/cache/openenv-ws), so a new engine imports it
# in seconds instead of bootstrapping again; delete the tar to refresh it.
# OPENENV_WS_DEBIAN_MIRROR overrides the mirror taken from apt's sources.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

IMAGE=${1:-local/python:bookworm}
SUITE=bookworm
TARBALL=$OPENENV_WS_CACHE/debian-$SUITE-python3-rootfs.tar
WORK=

cleanup() {
    if [[ -n $WORK ]]; then
        unmount_under "$WORK"
        rm -rf --one-file-system "$WORK"
    fi
}
trap cleanup EXIT

# The mirror apt fetches SUITE/main from, read off apt's own configuration.
debian_mirror() {
    local mirror
    mirror=$(apt-cache policy | awk -v s="$SUITE/main" '$3 == s { print $2; exit }')
    if [[ -z $mirror ]]; then
        apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null 2>&1 || true
        mirror=$(apt-cache policy | awk -v s="$SUITE/main" '$3 == s { print $2; exit }')
    fi
    [[ -n $mirror ]] || die "apt has no source for $SUITE/main; set OPENENV_WS_DEBIAN_MIRROR"
    printf '%s\n' "$mirror"
}

build_rootfs_tarball() {
    local mirror t0 rootfs
    command -v debootstrap >/dev/null || apt_install debootstrap
    mirror=${OPENENV_WS_DEBIAN_MIRROR:-$(debian_mirror)}
    mkdir -p "$OPENENV_WS_CACHE"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/openenv-ws-rootfs.XXXXXX")
    rootfs=$WORK/rootfs
    t0=$(now)
    log "debootstrap $SUITE from $mirror"
    run_logged "$WORK/debootstrap.log" debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip "$SUITE" "$rootfs" "$mirror"
    log_elapsed "debootstrap" "$t0"
    # Package caches and lists, docs and translations are of no use in a test image.
    rm -rf "${rootfs:?}"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
        "$rootfs"/usr/share/info/*
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    # Docker provides /dev; the device nodes debootstrap made are not needed.
    tar --numeric-owner --exclude='./dev/*' -C "$rootfs" -cf "$TARBALL.partial" .
    mv "$TARBALL.partial" "$TARBALL"
    log "cached the root filesystem in $TARBALL ($(du -h "$TARBALL" | cut -f1))"
}

docker_host_default
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
    || die "no Docker engine at $DOCKER_HOST; run .ci/lib/docker-engine.sh start first"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE already exists"
    printf '%s\n' "$IMAGE"
    exit 0
fi

[[ -s $TARBALL ]] || build_rootfs_tarball
t0=$(now)
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$TARBALL" "$IMAGE" >/dev/null
log_elapsed "docker import" "$t0"
docker run --rm "$IMAGE" python3 -c 'import ensurepip, ssl, venv' 2>/dev/null \
    || die "$IMAGE was imported but its python3 lacks venv/ensurepip/ssl"
printf '%s\n' "$IMAGE"
