#!/usr/bin/env bash
# Runs a program under the Ying LD_PRELOAD shim and says where its reports went.
#
#   scripts/run-with-ying.sh <program> [args...]
#
# Builds target/release/libying.so first if it is missing, prepends it to any existing
# LD_PRELOAD, passes every YING_* variable through, and exits with the program's own status.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 <program> [args...]   (configure with YING_* variables, see README.md)" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="${YING_LIB:-$root/target/release/libying.so}"
if [ ! -f "$lib" ]; then
    echo "ying: building $lib (first run)..." >&2
    (cd "$root" && cargo build --release -p ying-preload --quiet) >&2
fi

reports="${YING_REPORTING_PATH:-ying-profiles}"
case "$reports" in
    /*) ;;
    *) reports="$PWD/$reports" ;;
esac

status=0
LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" "$@" || status=$?

if [ -d "$reports" ] && [ -n "$(ls -A "$reports" 2>/dev/null)" ]; then
    echo "ying: reports in $reports (newest: $(ls -t "$reports" | head -n 1))" >&2
else
    echo "ying: no reports were written to $reports (see any ying: warnings above)" >&2
fi
exit "$status"
