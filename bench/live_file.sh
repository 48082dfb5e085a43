#!/usr/bin/env bash
# What the live file (`src/report/live/`, the heap at death) costs: for the churn workload
# (bench/churn.c, killed after SECS seconds), the example service (examples/ying_example, SECS
# seconds of requests) and a profile of many stacks (bench/stacks.c, every allocation sampled,
# held SECS seconds), with the live file on (the default, in a reporting directory on the
# checkout's file system) and off (YING_LIVE_FILE=off). Prints a Markdown section (for
# BENCHMARKS.md) on stdout, progress on stderr.
#
#   bench/live_file.sh LIBYING EXAMPLE_BIN [SECS]
#
# Per run, sampled every 200 ms until it ends: /proc/<pid>/io (wchar: bytes given to write;
# write_bytes minus cancelled_write_bytes: bytes the kernel will write back to disk, the pages
# of a version renamed over before write-back being cancelled), the report thread's CPU time
# (/proc/<pid>/task/<tid>/stat of the thread named ying-report), VmHWM, and the live file's
# size.
set -euo pipefail
LIBYING=$1
EXAMPLE=$2
SECS=${3:-30}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$ROOT/target"
WORK=$(mktemp -d "$ROOT/target/ying-live-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "== $*" >&2; }
HZ=$(getconf CLK_TCK)
FS=$(df -T "$WORK" | awk 'NR == 2 { print $2 }')

gcc -O2 -pthread -o "$WORK/churn" "$ROOT/bench/churn.c"
gcc -O1 -g -fno-optimize-sibling-calls -fno-ipa-icf -o "$WORK/stacks" "$ROOT/bench/stacks.c"

# measure NAME LIVE(on|off) KILL_AFTER(0: let it end) ENV... -- CMD...: prints one Markdown row.
measure() {
    local name=$1 live=$2 kill_after=$3
    shift 3
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local out="$WORK/out-$name-$live"
    rm -rf "$out"
    mkdir -p "$out"
    local livevar=on
    [ "$live" = off ] && livevar=off
    env "${envs[@]}" LD_PRELOAD="$LIBYING" YING_REPORTING_PATH="$out" \
        YING_EXAMPLE_REPORTING_PATH="$out" YING_LIVE_FILE="$livevar" "$@" >/dev/null 2>&1 &
    local pid=$! start end
    start=$(date +%s.%N)
    local wchar=0 wb=0 cancelled=0 hwm=0 cpu=0 size=0 line t
    while kill -0 "$pid" 2>/dev/null; do
        if [ -r "/proc/$pid/io" ]; then
            line=$(cat "/proc/$pid/io" 2>/dev/null || true)
            t=$(awk '/^wchar/ { print $2 }' <<<"$line"); [ -n "$t" ] && wchar=$t
            t=$(awk '/^write_bytes/ { print $2 }' <<<"$line"); [ -n "$t" ] && wb=$t
            t=$(awk '/^cancelled_write_bytes/ { print $2 }' <<<"$line"); [ -n "$t" ] && cancelled=$t
            t=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true); [ -n "$t" ] && hwm=$t
            for task in /proc/"$pid"/task/*; do
                if [ "$(cat "$task/comm" 2>/dev/null)" = ying-report ]; then
                    t=$(awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "$task/stat" 2>/dev/null || true)
                    [ -n "$t" ] && cpu=$t
                fi
            done
            t=$(find "$out" -maxdepth 1 -name '*.live' -printf '%s\n' 2>/dev/null | head -n 1)
            [ -n "$t" ] && size=$t
        fi
        if [ "$kill_after" != 0 ] && awk -v s="$start" -v n="$(date +%s.%N)" -v k="$kill_after" 'BEGIN { exit !(n - s >= k) }'; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
        sleep 0.2
    done
    wait "$pid" 2>/dev/null || true
    end=$(date +%s.%N)
    awk -v name="$name" -v live="$live" -v s="$start" -v e="$end" -v wchar="$wchar" -v wb="$wb" \
        -v c="$cancelled" -v hwm="$hwm" -v cpu="$cpu" -v hz="$HZ" -v size="$size" 'BEGIN {
        secs = e - s; per_min = 60 / secs
        printf "| %s | %s | %.1f | %.0f | %.0f | %.0f | %.2f | %.1f |\n", name, live, secs,
            size, wchar * per_min / 1024, (wb - c) * per_min / 1024, cpu / hz, hwm / 1024
    }'
}

say "live file: churn, service, 10,000 and 92,000 stacks; $SECS s each, on and off"
echo "## The live file"
echo
echo "What keeping the heap at death costs (\`bench/live_file.sh\`, ${SECS} s per run, reporting directory on $FS): the churn workload (bench/churn.c, ended by SIGTERM), the example service (examples/ying_example, ended by SIGTERM after ${SECS} s of requests) and a profile of 10,000 and 92,000 stacks (bench/stacks.c, every allocation sampled, then held). \`written KiB/min\`: bytes given to \`write\` (wchar); \`disk KiB/min\`: bytes the kernel writes back (write_bytes minus cancelled_write_bytes: a version renamed over before write-back costs the disk nothing); \`report thread s\`: the CPU time of the thread that writes the versions (and the periodic checks). Both byte columns count every write of the process (its report sets too): the live file's share is the difference between on and off. The allocation paths are the same code with the file on or off (callgrind's instructions per pair above)."
echo
echo "| workload | live file | run s | file bytes | written KiB/min | disk KiB/min | report thread s | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|"
for live in on off; do
    measure churn "$live" "$SECS" -- "$WORK/churn" 4000000000
done
for live in on off; do
    measure service "$live" "$SECS" YING_EXAMPLE_RUNTIME_SECS=3600 YING_EXAMPLE_INTERVAL_SECS=60 -- "$EXAMPLE"
done
for n in 10000 92000; do
    for live in on off; do
        measure "stacks $n" "$live" 0 YING_SAMPLE_INTERVAL_BYTES=1 -- "$WORK/stacks" "$n" "$SECS"
    done
done

# YING_SYMBOLIZE=offline: the example service's profiler memory with and without debug info read.
say "YING_SYMBOLIZE: the example service, in-process and offline"
echo
echo "\`YING_SYMBOLIZE=offline\` (no debug info or symbol table read in the process; \`ying report\` names the frames from the live file or a set's \`.live\`): the example service run ${SECS} s, its final report set's figures (the profiler's memory as of that set, and its peak since start, from the manifest) and the process's peak RSS."
echo
echo "| YING_SYMBOLIZE | profiler memory KiB | profiler peak KiB | peak RSS MiB |"
echo "|---|---|---|---|"
for sym in in-process offline; do
    out="$WORK/sym-$sym"
    mkdir -p "$out"
    # /usr/bin/time's %M (KiB) is the last line of the run's stderr.
    /usr/bin/time -f '%M' env YING_SYMBOLIZE="$sym" YING_EXAMPLE_RUNTIME_SECS="$SECS" \
        YING_EXAMPLE_INTERVAL_SECS=60 YING_EXAMPLE_REPORTING_PATH="$out" "$EXAMPLE" \
        >/dev/null 2>"$out.err"
    json=$(ls -t "$out"/*.json 2>/dev/null | head -n 1)
    python3 - "$json" "$sym" "$(tail -n 1 "$out.err")" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
t = m["totals"]
print(f"| {sys.argv[2]} | {t['profiler_bytes'] / 1024:.0f} | {t['profiler_peak_bytes'] / 1024:.0f} | {int(sys.argv[3]) / 1024:.1f} |")
PY
done
