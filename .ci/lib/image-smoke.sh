#!/usr/bin/env bash
# Run the server image the way users do and check its life cycle: the port is
# published on a random 127.0.0.1 port, GET /health answers, Docker's own
# HEALTHCHECK turns healthy, SIGTERM (docker stop) ends it with exit code 0, and
# the container is removed.
#
# Usage: image-smoke.sh [TAG]       (default openenv-ws/atari:ci)
# Needs a running engine (DOCKER_HOST, or the one docker-engine.sh starts).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TAG=${1:-openenv-ws/atari:ci}
CID=

cleanup() {
    if [[ -n $CID ]]; then docker rm -f "$CID" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

fail() {
    docker logs --tail 30 "$CID" >&2 2>&1 || true
    die "$*"
}

docker_host_default
t0=$(now)
# The engine warns on every run that containers have no forwarding; that is intended.
CID=$(docker run --pull never --detach --publish 127.0.0.1::8000 "$TAG" 2> >(grep -v 'IPv4 forwarding' >&2))
hostport=$(docker port "$CID" 8000/tcp | head -n 1)
[[ $hostport == 127.0.0.1:* ]] || fail "port 8000 is published on '$hostport', not on 127.0.0.1"

health=
for ((i = 0; i < 300; i++)); do
    health=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
        "http://$hostport/health" 2>/dev/null) && break
    [[ $(docker inspect --format '{{.State.Running}}' "$CID") == true ]] || fail "the container exited"
    sleep 0.1
done
[[ $health == *'"status":"ok"'* ]] || fail "GET /health on $hostport did not answer ok (got '$health')"
log_elapsed "container answering /health on $hostport" "$t0"

status=
for ((i = 0; i < 120; i++)); do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$CID")
    [[ $status == healthy || $status == unhealthy ]] && break
    sleep 0.5
done
[[ $status == healthy ]] || fail "Docker reports the container '$status', not healthy"
log_elapsed "HEALTHCHECK healthy" "$t0"

t0=$(now)
docker stop --time 20 "$CID" >/dev/null
code=$(docker inspect --format '{{.State.ExitCode}}' "$CID")
[[ $code == 0 ]] || fail "the server exited with code $code after SIGTERM (137 means it was killed)"
log_elapsed "docker stop (exit code 0)" "$t0"
docker rm "$CID" >/dev/null
CID=
printf 'ok %s\n' "$TAG"
