#!/usr/bin/env bash
# What an idle program pays for Ying's threads: a program that allocates 16 MiB (so that it is
# sampled and keeps a live file) and then sleeps, run SECS seconds plain, under the shim with
# every setting at its default, and with the endpoint on too. Per run: the context switches of
# all its threads (voluntary + involuntary, /proc/<pid>/task/*/status: each is a wake-up of a
# thread) per second over the last SECS-2 seconds (the first two, start-up and the live file's
# first looks, left out), and the CPU time of the whole run. Prints a Markdown table.
#
#   bench/idle_wakeups.sh LIBYING [SECS]
set -euo pipefail
LIBYING=$(realpath "$1")
SECS=${2:-12}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/idle.c" <<'C'
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (int i = 0; i < 64; i++) memset(malloc(256 << 10), 1, 256 << 10);
    sleep(atoi(argv[1]));
    return 0;
}
C
gcc -O1 -o "$WORK/idle" "$WORK/idle.c"
switches() {
    local pid=$1 n=0 t
    for t in /proc/"$pid"/task/*/status; do
        n=$((n + $(awk '/ctxt_switches/ { s += $2 } END { print s + 0 }' "$t" 2>/dev/null || echo 0)))
    done
    echo "$n"
}
run() {
    local name=$1; shift
    (cd "$WORK" && env "$@" ./idle "$SECS") &
    local pid=$!
    sleep 2
    local a; a=$(switches "$pid")
    sleep $((SECS - 3))
    local b; b=$(switches "$pid")
    local ticks; ticks=$(awk '{ print $14 + $15 }' /proc/"$pid"/stat)
    local threads; threads=$(ls /proc/"$pid"/task | wc -l)
    wait "$pid"
    local hz; hz=$(getconf CLK_TCK)
    printf '| %s | %s | %.1f | %.0f |\n' "$name" "$threads" \
        "$(echo "($b - $a) / ($SECS - 3)" | bc -l)" "$(echo "$ticks * 1000 / $hz" | bc -l)"
}
echo "| run | threads | wake-ups/s (idle) | CPU ms (whole run) |"
echo "|---|---|---|---|"
run plain X=1
run "shim, defaults" LD_PRELOAD="$LIBYING" YING_REPORTING_PATH="$WORK/r1"
run "shim, endpoint on" LD_PRELOAD="$LIBYING" YING_REPORTING_PATH="$WORK/r2" YING_HTTP_ADDR=127.0.0.1:0
run "shim, control file off" LD_PRELOAD="$LIBYING" YING_REPORTING_PATH="$WORK/r3" YING_DUMP_CONTROL_FILE=off
run "shim, a memory limit watched" LD_PRELOAD="$LIBYING" YING_REPORTING_PATH="$WORK/r4" YING_MEMORY_LIMIT_BYTES=64GiB
