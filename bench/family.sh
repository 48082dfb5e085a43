#!/usr/bin/env bash
# Instructions per call of the shim's unsampled `calloc`, `realloc` and `aligned_alloc` (and the
# `malloc` + `free` pair beside them), counted inside libying.so only (callgrind, per function):
# glibc's own instructions are left out because the realloc mode's heap layout, and with it
# glibc's work, differs with and without the shim. `bench/churn1.c` runs 1,000,000 rounds of
# each kind at a 1 TiB interval (never samples); a round of `calloc` or `aligned` is that call
# and a `free`, a round of `realloc` a `malloc`, a `realloc` growing the block and a `free`,
# so the table subtracts the `free` (and the `malloc`) measured in the `malloc` round.
#
#   bench/family.sh            (needs valgrind)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -q -p ying-preload
lib=$PWD/target/release/libying.so
dir=$(mktemp -d)
gcc -O2 -g -o "$dir/churn1" bench/churn1.c
rounds=1000000

# ours KIND: instructions per round inside libying.so (its functions, by object or source).
ours() {
    LD_PRELOAD="$lib" YING_REPORT_AT_EXIT=false YING_CHECK_INTERVAL_SECS=0 YING_SEED=1 \
        YING_SAMPLE_INTERVAL_BYTES=1099511627776 \
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg.$1" "$dir/churn1" "$rounds" "$1" \
        >/dev/null 2>&1
    callgrind_annotate --threshold=100 --auto=no "$dir/cg.$1" 2>/dev/null |
        grep -E 'libying\.so\]|preload/src/|\)  (/[^ ]*/)?src/|/rustc/|cargo/registry' |
        awk -v n="$rounds" '/^ *[0-9,]+ \(/ { x = $1; gsub(",", "", x); s += x }
            END { printf "%.2f\n", s / n }'
}

m=$(ours malloc)
c=$(ours calloc)
r=$(ours realloc)
a=$(ours aligned)
# The free alone: the pair's free is the part of the malloc round that is not malloc's; malloc's
# unsampled path is the 13 instructions of its assembly, so free = pair - 13.
f=$(echo "$m - 13" | bc -l)
echo "| call | instructions per call in libying.so |"
echo "|---|---|"
printf '| `malloc` + `free` (the pair) | %.1f |\n' "$m"
printf '| `calloc` | %.1f |\n' "$(echo "$c - $f" | bc -l)"
printf '| `realloc` (growing) | %.1f |\n' "$(echo "$r - $m" | bc -l)"
printf '| `aligned_alloc` | %.1f |\n' "$(echo "$a - $f" | bc -l)"
rm -rf "$dir"
