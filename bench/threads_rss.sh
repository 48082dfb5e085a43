#!/usr/bin/env bash
# Peak RSS of bench/churn.c at 2, 32 and 64 threads, plain and under the shim, with glibc's
# default arenas and with MALLOC_ARENA_MAX=1 (the control: one arena takes the thread-to-arena
# assignment, which depends on timing, out of the comparison). Mean and standard deviation of
# alternating runs; markdown rows for BENCHMARKS.md. A second table splits resident memory at
# the end of the churn (CHURN_MEMINFO=1, default arenas) into glibc's heaps and everything else,
# so the profiler's own share is told from where glibc happened to place blocks.
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
echo
echo "| threads | heap resident MiB plain | heap resident MiB shim | other resident MiB plain | other resident MiB shim | shim - plain, other (± se) |"
echo "|---|---|---|---|---|---|"
for t in 2 32 64; do
    for _ in $(seq "$RUNS"); do
        for v in plain shim; do
            env_args=(YING_REPORT_AT_EXIT=false YING_CHECK_INTERVAL_SECS=0 CHURN_MEMINFO=1)
            [ "$v" = shim ] && env_args+=("LD_PRELOAD=$LIB")
            env "${env_args[@]}" "$OUT/churn$t" "$STEPS" | awk -v v="$v" '/^meminfo:/ { print v, $3, $5 }'
        done
    done | awk -v t="$t" '
        function sd(sum, sq, n) { return sqrt(sq / n - (sum / n) ^ 2) }
        { h[$1] += $2 / 1024; hh[$1] += ($2 / 1024) ^ 2; o[$1] += $3 / 1024; oo[$1] += ($3 / 1024) ^ 2; c[$1]++ }
        END {
            n = c["plain"]
            se = sqrt(sd(o["plain"], oo["plain"], n) ^ 2 / n + sd(o["shim"], oo["shim"], n) ^ 2 / n)
            printf "| %d | %.1f ± %.1f | %.1f ± %.1f | %.2f ± %.2f | %.2f ± %.2f | %+.2f ± %.2f |\n", t,
                h["plain"] / n, sd(h["plain"], hh["plain"], n), h["shim"] / n, sd(h["shim"], hh["shim"], n),
                o["plain"] / n, sd(o["plain"], oo["plain"], n), o["shim"] / n, sd(o["shim"], oo["shim"], n),
                (o["shim"] - o["plain"]) / n, se
        }'
done
rm -rf "$OUT"
