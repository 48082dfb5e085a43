#!/usr/bin/env bash
# Peak RSS of bench/churn.c at 2, 32 and 64 threads, plain and under the shim, with glibc's
# default arenas and with MALLOC_ARENA_MAX=1 (the control: one arena takes the thread-to-arena
# assignment, which depends on timing, out of the comparison). Mean and standard deviation of
# alternating runs; markdown rows for BENCHMARKS.md.
# Usage: bench/threads_rss.sh [runs] [steps per thread]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${1:-8}
STEPS=${2:-300000}
LIB=$PWD/target/release/libying.so
[ -f "$LIB" ] || cargo build --release -p ying-preload >/dev/null
OUT=$(mktemp -d)
for t in 2 32 64; do
    sed "s/#define THREADS 2/#define THREADS $t/" bench/churn.c > "$OUT/churn$t.c"
    gcc -O2 -pthread "$OUT/churn$t.c" -o "$OUT/churn$t"
done
echo "| threads | arenas | plain MiB (mean ± sd) | shim MiB (mean ± sd) | shim - plain (± se) |"
echo "|---|---|---|---|---|"
for arenas in default 1; do
    for t in 2 32 64; do
        for _ in $(seq "$RUNS"); do
            for v in plain shim; do
                env_args=(YING_REPORT_AT_EXIT=false YING_CHECK_INTERVAL_SECS=0)
                [ "$arenas" = default ] || env_args+=("MALLOC_ARENA_MAX=$arenas")
                [ "$v" = shim ] && env_args+=("LD_PRELOAD=$LIB")
                kb=$(env "${env_args[@]}" /usr/bin/time -f "%M" "$OUT/churn$t" "$STEPS" 2>&1 >/dev/null | tail -1)
                echo "$v $kb"
            done
        done | awk -v t="$t" -v a="$arenas" '
            { s[$1] += $2 / 1024; ss[$1] += ($2 / 1024) ^ 2; c[$1]++ }
            END {
                for (k in s) { m[k] = s[k] / c[k]; sd[k] = sqrt(ss[k] / c[k] - m[k] ^ 2) }
                se = sqrt(sd["plain"] ^ 2 / c["plain"] + sd["shim"] ^ 2 / c["shim"])
                printf "| %d | %s | %.1f ± %.1f | %.1f ± %.1f | %+.1f ± %.1f |\n", t, a, m["plain"], sd["plain"], m["shim"], sd["shim"], m["shim"] - m["plain"], se
            }'
    done
done
rm -rf "$OUT"
