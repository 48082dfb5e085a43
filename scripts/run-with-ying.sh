#!/usr/bin/env bash
# Runs a program under the Ying LD_PRELOAD shim and sums up the reports it wrote: a thin
# wrapper over `ying run` (cli/src/run.rs and cli/src/summary.rs do all of it, once).
#
#   scripts/run-with-ying.sh <program> [args...]
#
# Runs this checkout's release `ying` (target/release/ying, or under $CARGO_TARGET_DIR), building
# it and libying.so beside it first, in one cargo command with its progress on stderr, if either
# is missing (YING_LIB names another shim). `ying run` prepends the shim to any existing
# LD_PRELOAD, passes every YING_* variable through (YING_LIB itself is not passed on: it is no
# setting of the shim), and exits with the program's own status.
#
# At the end it lists, on stderr, the report sets written by this run only (a set that was in
# the reporting directory before the run started is never named): one line per process with
# its executable, pid, peak (when the report has a peak section) and retained bytes at exit,
# and the path of the text report of the largest. When nothing was written it says why it
# thinks so: profiling or reporting switched off, a static executable (which ignores
# LD_PRELOAD), a reporting directory that cannot be written, or a program that allocated too
# little to take a sample.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 <program> [args...]   (configure with YING_* variables, see README.md)" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where cargo puts the build: $CARGO_TARGET_DIR when set (relative to the checkout, where cargo
# runs below), else the checkout's target/.
target="${CARGO_TARGET_DIR:-target}"
case "$target" in
    /*) ;;
    *) target="$root/$target" ;;
esac
ying="$target/release/ying"
if [ ! -x "$ying" ] || { [ -z "${YING_LIB:-}" ] && [ ! -f "$target/release/libying.so" ]; }; then
    echo "ying: first run: building $ying and libying.so (about two minutes on two cores; cargo's progress follows)..." >&2
    (cd "$root" && cargo build --release -p ying-cli -p ying-preload) >&2
fi

exec "$ying" run -- "$@"
