#!/usr/bin/env bash
# Instructions per malloc+free pair (callgrind) of the shim chained over another allocator
# (LD_PRELOAD=libying.so:<allocator>), beside that allocator alone, glibc, the shim over glibc,
# and the peers' own samplers (jemalloc with prof:true, tcmalloc with a sampling period).
# Each figure is (Ir at 1,000,000 pairs - Ir at 0 pairs) / 1,000,000: start-up excluded.
#
#   bench/chained.sh            (needs valgrind and the Debian allocator packages)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -q -p ying-preload
lib=$PWD/target/release/libying.so
dir=$(mktemp -d)
gcc -O2 -o "$dir/churn1" bench/churn1.c
g++ -O2 -o "$dir/cxx_churn" bench/cxx_churn.cpp
L=/usr/lib/x86_64-linux-gnu
ying=(YING_REPORT_AT_EXIT=false YING_CHECK_INTERVAL_SECS=0 YING_SEED=1 YING_ONLY_EXE=churn1)

# ir PAIRS ENV...: callgrind's instruction count of $prog (churn1 or cxx_churn) PAIRS under ENV.
prog=churn1
ir() {
    local pairs=$1
    shift
    env "$@" valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$dir/$prog" "$pairs" \
        >/dev/null 2>"$dir/cg.err"
    grep -m1 -o 'Collected : [0-9]*' "$dir/cg.err" | grep -o '[0-9]*'
}

row() {
    local name=$1
    shift
    local a b
    a=$(ir 1000000 "$@")
    b=$(ir 0 "$@")
    printf '| %s | %s | %.1f |\n' "$name" "$a" "$(echo "($a - $b) / 1000000" | bc -l)"
}

echo "| run | Ir at 1M pairs | instructions per pair |"
echo "|---|---|---|"
row "glibc" X=1
row "Ying over glibc" LD_PRELOAD="$lib" "${ying[@]}"
row "Ying over glibc, never sampling (1 TiB)" LD_PRELOAD="$lib" "${ying[@]}" YING_SAMPLE_INTERVAL_BYTES=1099511627776
for a in jemalloc.so.2 tcmalloc.so.4 tcmalloc_minimal.so.4 mimalloc.so.2; do
    row "lib$a" LD_PRELOAD="$L/lib$a"
    row "Ying over lib$a" LD_PRELOAD="$lib:$L/lib$a" "${ying[@]}"
    row "Ying over lib$a, never sampling" LD_PRELOAD="$lib:$L/lib$a" "${ying[@]}" YING_SAMPLE_INTERVAL_BYTES=1099511627776
done
row "jemalloc, prof:true,lg_prof_sample:19" LD_PRELOAD="$L/libjemalloc.so.2" MALLOC_CONF=prof:true,lg_prof_sample:19
row "tcmalloc, TCMALLOC_SAMPLE_PARAMETER=524288" LD_PRELOAD="$L/libtcmalloc.so.4" TCMALLOC_SAMPLE_PARAMETER=524288
echo
echo "C++ new[] + delete[] pairs (bench/cxx_churn.cpp), over glibc:"
prog=cxx_churn
ying=(YING_REPORT_AT_EXIT=false YING_CHECK_INTERVAL_SECS=0 YING_SEED=1 YING_ONLY_EXE=cxx_churn)
echo "| run | Ir at 1M pairs | instructions per pair |"
echo "|---|---|---|"
row "plain" X=1
row "Ying" LD_PRELOAD="$lib" "${ying[@]}"
rm -rf "$dir"
