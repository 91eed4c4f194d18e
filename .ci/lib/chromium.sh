#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for browser tests.
#
# Usage: chromium.sh [install|check|flags]
#   install  (default) install the chromium and chromium-driver packages if missing
#            and print the browser's path on stdout
#   check    install, then render a page served on 127.0.0.1 headless into a PNG;
#            fails if no image comes out
#   flags    print the flags browser tests should pass, one per line (without
#            --user-data-dir, which each launch needs fresh)
#
# The flags keep Chromium off the network (this machine reaches no other host)
# and let it run as root without a display or GPU.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CHROMIUM=/usr/bin/chromium
FLAGS=(
    --headless
    --no-sandbox
    --disable-gpu
    --disable-dev-shm-usage
    --no-first-run
    --disable-background-networking
    --disable-component-update
    --disable-sync
    --disable-quic
)

ensure_installed() {
    if [[ ! -x $CHROMIUM || ! -x /usr/bin/chromedriver ]]; then
        apt_install chromium chromium-driver
    fi
    [[ -x $CHROMIUM ]] || die "$CHROMIUM missing after installing chromium"
}

cmd_check() {
    local port server t0 i
    ensure_installed
    work=$(mktemp -d "${TMPDIR:-/tmp}/openenv-ws-chromium.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    mkdir "$work/site" "$work/profile"
    printf '<!doctype html><title>ok</title><body style="background:#2a6">rendered</body>\n' \
        >"$work/site/index.html"
    python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/site" >"$work/server.log" 2>&1 &
    server=$!
    port=
    for ((i = 0; i < 100; i++)); do
        sleep 0.1
        port=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$work/server.log" | head -n 1)
        [[ -z $port ]] || break
    done
    if [[ -z $port ]]; then
        kill "$server" 2>/dev/null || true
        die "the test page server did not start"
    fi
    t0=$(now)
    timeout 60 "$CHROMIUM" "${FLAGS[@]}" --user-data-dir="$work/profile" \
        --window-size=320,240 --screenshot="$work/page.png" "http://127.0.0.1:$port/" \
        >"$work/chromium.log" 2>&1 || true
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    if [[ ! -s $work/page.png ]] || [[ $(head -c 4 "$work/page.png" | od -An -c | tr -d ' ') != *PNG* ]]; then
        tail -n 20 "$work/chromium.log" >&2
        die "headless Chromium produced no screenshot"
    fi
    log_elapsed "headless screenshot ($("$CHROMIUM" --version))" "$t0"
    printf '%s\n' "$CHROMIUM"
}

case ${1:-install} in
install)
    ensure_installed
    printf '%s\n' "$CHROMIUM"
    ;;
check) cmd_check ;;
flags) printf '%s\n' "${FLAGS[@]}" ;;
*)
    echo "usage: $0 [install|check|flags]" >&2
    exit 2
    ;;
esac
