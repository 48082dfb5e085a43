#!/usr/bin/env bash
# What a profile of many stacks costs: bench/stacks.c with every allocation sampled (one
# distinct stack each, ~46 frames), exit report only. For each count, the median of RUNS runs
# of the exit report's write time (from the program's `main_done_ns` to its exit), with the
# profiler memory before the report (its tables: stacks and live blocks) and its peak, and the
# process's peak RSS. Prints one Markdown row per count.
#
#   bench/stack_table.sh [LIB [COUNTS [RUNS]]]   (defaults: target/release/libying.so,
#                                                 "100000 1000000", 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
lib=$(realpath "${1:-target/release/libying.so}")
counts=${2:-100000 1000000}
runs=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fno-optimize-sibling-calls -fno-ipa-icf -o "$work/stacks" bench/stacks.c

echo "| allocations | stacks | write time s (median of $runs) | profiler memory before MiB | profiler peak MiB | report's own MiB | peak RSS MiB | .pb.gz MB |"
echo "|---|---|---|---|---|---|---|---|"
for n in $counts; do
    times=()
    for _ in $(seq "$runs"); do
        rm -rf "$work/out" && mkdir "$work/out"
        out=$( { /usr/bin/time -f "rss_kb %M" env LD_PRELOAD="$lib" YING_SAMPLE_INTERVAL_BYTES=1 \
            YING_TOP_K=20 YING_CHECK_INTERVAL_SECS=0 YING_MAX_STACKS=2000000 \
            YING_REPORTING_PATH="$work/out" "$work/stacks" "$n"; date +%s%N; } 2>&1 )
        done_ns=$(awk '/main_done_ns/ {print $2}' <<<"$out")
        end_ns=$(tail -1 <<<"$out")
        times+=("$(python3 -c "print(f'{($end_ns - $done_ns) / 1e9:.2f}')")")
    done
    median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p")
    txt=$(ls "$work"/out/*.txt | grep -v '\.peak\.' | head -1)
    bytes() { grep -E "^$1:" "$txt" | sed -E 's/.*\(([0-9]+) bytes\).*/\1/'; }
    before=$(bytes "profiler memory")
    peak=$(bytes "profiler peak")
    stacks=$(grep -E '^stacks:' "$txt" | awk '{print $2}')
    rss=$(awk '/rss_kb/ {print $2}' <<<"$out")
    gz=$(stat -c %s "$(ls "$work"/out/*.pb.gz | grep -v '\.peak\.' | head -1)")
    python3 -c "
mib = 1 << 20
print(f'| {$n:,} | {$stacks:,} | $median | {$before / mib:.1f} | {$peak / mib:.1f} | {($peak - $before) / mib:.1f} | {$rss / 1024:.1f} | {$gz / 1e6:.1f} |')"
done
