#!/usr/bin/env bash
# A private Docker engine for tests, reachable only through a unix socket.
#
# Usage: docker-engine.sh start|stop|purge|status|env
#   start   install Debian's docker.io if dockerd is missing, start dockerd (if not
#           already running) and print `export DOCKER_HOST=...` on stdout, so
#           `eval "$(.ci/lib/docker-engine.sh start)"` points the client at it.
#   stop    remove every container of this engine, stop dockerd and its containerd,
#           undo leftover mounts. Images stay in the data root for the next start.
#   purge   stop, then delete the whole engine folder (images included).
#   status  exit 0 if the engine answers, printing its version.
#   env     print the `export DOCKER_HOST=...` line.
#
# The engine never touches the host firewall or forwarding: containers get no route
# out, and published ports (`-p 127.0.0.1::8000`) are served by docker-proxy on
# loopback. Ports published without an address bind 127.0.0.1 too. Image pulls
# fail at once (the engine's HTTP client goes to a closed loopback port), so
# images come only from builds and imports.
#
# Settings: OPENENV_WS_DOCKER_ROOT (default /tmp/openenv-ws-docker),
# OPENENV_WS_DOCKER_STORAGE (storage drivers to try in order; default "overlay2 vfs").
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ROOT=$OPENENV_WS_DOCKER_ROOT
SOCK=$ROOT/docker.sock
PIDFILE=$ROOT/dockerd.pid
LOGFILE=$ROOT/dockerd.log
EXEC_ROOT=$ROOT/exec
STORAGE_DRIVERS=${OPENENV_WS_DOCKER_STORAGE:-overlay2 vfs}

dk() { docker --host "unix://$SOCK" "$@"; }
engine_ready() { [[ -S $SOCK ]] && dk version --format '{{.Server.Version}}' >/dev/null 2>&1; }
pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
read_pid() { cat "$1" 2>/dev/null || true; }
print_env() { printf 'export DOCKER_HOST=unix://%s\n' "$SOCK"; }

lock() {
    mkdir -p "$(dirname "$ROOT")"
    exec 9>"$ROOT.lock"
    flock -w 120 9 || die "another docker-engine.sh holds $ROOT.lock"
}

# stop_pid PIDFILE NAME: SIGTERM the process recorded in PIDFILE, SIGKILL after 30 s.
stop_pid() {
    local pid i
    pid=$(read_pid "$1")
    pid_alive "$pid" || return 0
    kill -TERM "$pid"
    for ((i = 0; i < 300; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    log "$2 (pid $pid) ignored SIGTERM for 30 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

# Containers of an engine that was killed keep running under their shims. Each
# shim names this engine's containerd socket on its command line; killing a
# container's init (pid 1 of its namespace) ends everything in the container.
kill_orphan_containers() {
    local shim init
    for shim in $(pgrep -f -- "-address $EXEC_ROOT/containerd/containerd.sock" || true); do
        for init in $(pgrep -P "$shim" || true); do
            kill -KILL "$init" 2>/dev/null || true
        done
        kill -KILL "$shim" 2>/dev/null || true
        log "killed the orphaned container shim $shim"
    done
}

# Leftovers of an engine that was killed instead of stopped.
clear_stale_state() {
    stop_pid "$EXEC_ROOT/containerd/containerd.pid" containerd
    kill_orphan_containers
    unmount_under "$ROOT"
    rm -rf --one-file-system "$EXEC_ROOT"
    rm -f "$SOCK" "$PIDFILE"
}

# start_dockerd DRIVER: start dockerd with DRIVER and wait until it answers.
start_dockerd() {
    local driver=$1 pid i
    mkdir -p "$ROOT/data" "$EXEC_ROOT"
    printf '\n--- %s: starting with storage driver %s\n' "$(date -Is)" "$driver" >>"$LOGFILE"
    # No registry is reachable from here: point the engine's own HTTP client at a
    # closed loopback port so an accidental pull fails at once, without a DNS look-up.
    env -u http_proxy -u https_proxy -u no_proxy -u NO_PROXY \
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
        setsid dockerd \
        --storage-driver="$driver" \
        --iptables=false --ip-masq=false --ip-forward=false --ip6tables=false \
        --ip=127.0.0.1 \
        --data-root="$ROOT/data" --exec-root="$EXEC_ROOT" \
        --pidfile="$PIDFILE" --host="unix://$SOCK" \
        --log-level=warn \
        </dev/null >>"$LOGFILE" 2>&1 9>&- &
    pid=$!
    for ((i = 0; i < 600; i++)); do
        if engine_ready; then return 0; fi
        pid_alive "$pid" || break
        sleep 0.1
    done
    if pid_alive "$pid"; then
        log "dockerd ($driver) did not answer within 60 s; stopping it"
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    log "dockerd failed with storage driver $driver; last lines of $LOGFILE:"
    tail -n 15 "$LOGFILE" >&2
    clear_stale_state
    return 1
}

cmd_start() {
    local t0 driver
    lock
    if engine_ready; then
        log "engine already running ($(dk version --format '{{.Server.Version}}'))"
        print_env
        return 0
    fi
    if ! command -v dockerd >/dev/null; then
        apt_install docker.io
    fi
    command -v docker >/dev/null || die "docker client missing after installing docker.io"
    clear_stale_state
    t0=$(now)
    for driver in $STORAGE_DRIVERS; do
        if start_dockerd "$driver"; then
            log_elapsed "dockerd start ($driver)" "$t0"
            print_env
            return 0
        fi
    done
    die "dockerd did not start with any of: $STORAGE_DRIVERS"
}

cmd_stop() {
    local t0 ids
    lock
    t0=$(now)
    if engine_ready; then
        ids=$(dk ps -aq)
        if [[ -n $ids ]]; then
            # shellcheck disable=SC2086 # one id per word
            dk rm -f --volumes $ids >/dev/null
        fi
    fi
    stop_pid "$PIDFILE" dockerd
    clear_stale_state
    # dockerd leaves its bridge behind; drop it when no other engine uses it.
    if ip link show docker0 >/dev/null 2>&1 && ! pgrep -x dockerd >/dev/null; then
        ip link delete docker0 2>/dev/null || true
    fi
    log_elapsed "engine stop" "$t0"
}

cmd_purge() {
    cmd_stop
    rm -rf --one-file-system "$ROOT"
    rm -f "$ROOT.lock"
    log "removed $ROOT"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
purge) cmd_purge ;;
status) engine_ready && dk version --format 'docker engine {{.Server.Version}}' ;;
env) print_env ;;
*)
    echo "usage: $0 start|stop|purge|status|env" >&2
    exit 2
    ;;
esac
