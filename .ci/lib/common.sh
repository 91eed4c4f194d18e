# shellcheck shell=bash
# Helpers shared by the .ci/lib scripts. Source it; do not run it.
#
# Settings (environment, all optional):
#   OPENENV_WS_DOCKER_ROOT  folder for the private Docker engine
#                           (default /tmp/openenv-ws-docker)
#   OPENENV_WS_CACHE        folder kept between runs on the same machine
#                           (default /var/cache/openenv-ws)

OPENENV_WS_DOCKER_ROOT=${OPENENV_WS_DOCKER_ROOT:-/tmp/openenv-ws-docker}
OPENENV_WS_CACHE=${OPENENV_WS_CACHE:-/var/cache/openenv-ws}
CI_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034 # used by the scripts that source this file
REPO_ROOT=$(cd "$CI_LIB_DIR/../.." && pwd)

# Messages go to stderr so that stdout carries only each script's result.
log() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# now: seconds since the epoch with sub-second precision, for step timings.
now() { date +%s.%N; }
# log_elapsed LABEL START: log how long a step took.
log_elapsed() { log "$1 took $(awk -v a="$2" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"; }

_apt_updated=0
# apt_install PACKAGE...: install Debian packages (no recommends), quietly,
# refreshing the package lists once per script run. Output is shown only on failure.
apt_install() {
    local t0 logfile
    t0=$(now)
    logfile=$(mktemp)
    if [[ $_apt_updated == 0 ]]; then
        run_logged "$logfile" apt-get update -qq -o DPkg::Lock::Timeout=300
        _apt_updated=1
    fi
    run_logged "$logfile" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends -o DPkg::Lock::Timeout=300 "$@"
    rm -f "$logfile"
    log_elapsed "apt-get install $*" "$t0"
}

# unmount_under DIR: undo every mount at or below DIR, deepest first (what a
# killed engine or an interrupted debootstrap leaves behind).
unmount_under() {
    local dir target
    dir=$(realpath -m "$1")
    awk -v dir="$dir" '$5 == dir || index($5, dir "/") == 1 { print $5 }' /proc/self/mountinfo \
        | sort -r | while read -r target; do
            umount -l "$target" 2>/dev/null || log "could not unmount $target"
        done
}

# Point the docker client at the private engine unless the caller chose one.
docker_host_default() {
    export DOCKER_HOST=${DOCKER_HOST:-unix://$OPENENV_WS_DOCKER_ROOT/docker.sock}
}

# run_logged LOGFILE CMD...: run CMD with its output in LOGFILE; show the tail on failure.
run_logged() {
    local logfile=$1
    shift
    if ! "$@" >"$logfile" 2>&1; then
        tail -n 40 "$logfile" >&2
        die "'$*' failed (full log: $logfile)"
    fi
}
