#!/usr/bin/env bash
# What reading Python frames costs (`src/engine/python/`): bench/objects.py and a CPython
# test-suite run, plain, under the shim with YING_PYTHON_FRAMES=false and with it on (the
# default): instructions (callgrind, deterministic)
# and wall time (median of alternating runs). Prints markdown rows for BENCHMARKS.md.
# (Instructions come from callgrind: `perf stat` has no instruction counter on this VM.)
# Usage: bench/python_frames.sh [python] [runs] [python with CPython's test package]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${1:-/usr/bin/python3.11}
RUNS=${2:-5}
TPY=${3:-$(python3 -c "import os, sys; print(os.path.realpath(sys.executable))")}
LIB=$PWD/target/release/libying.so
[ -f "$LIB" ] || cargo build --release -p ying-preload >/dev/null
OUT=$(mktemp -d)
COMMON=(YING_SEED=1 YING_CHECK_INTERVAL_SECS=0 YING_REPORT_AT_EXIT=false "YING_REPORTING_PATH=$OUT")
variant_env() {
    case $1 in
        plain) echo "" ;;
        off) echo "LD_PRELOAD=$LIB ${COMMON[*]} YING_PYTHON_FRAMES=false" ;;
        on) echo "LD_PRELOAD=$LIB ${COMMON[*]} YING_PYTHON_FRAMES=true" ;;
    esac
}
wall() { # variant, command...
    local v=$1; shift
    local s e
    s=$(date +%s.%N)
    env $(variant_env "$v") "$@" >/dev/null 2>&1
    e=$(date +%s.%N)
    echo "$e - $s" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "python: $PY ($("$PY" -V 2>&1)); $RUNS alternating runs per variant"
echo
echo "| workload | variant | instructions | vs plain | wall s (median) | vs plain |"
echo "|---|---|---|---|---|---|"
declare -A IR WALL
# objects.py under callgrind (instructions), then wall time.
for v in plain off on; do
    rm -f "$OUT"/cg.*
    env $(variant_env "$v") YING_ONLY_EXE="$(basename "$(readlink -f "$PY")")" \
        valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" "$PY" bench/objects.py 500000 1 >/dev/null 2>"$OUT/vg.err"
    IR[obj-$v]=$(grep -h "^summary:" "$OUT"/cg.* | awk '{s+=$2} END {printf "%.0f", s}')
done
for v in plain off on; do : > "$OUT/w-obj-$v"; done
for _ in $(seq "$RUNS"); do
    for v in plain off on; do wall "$v" "$PY" bench/objects.py 500000 2 >> "$OUT/w-obj-$v"; done
done
for v in plain off on; do WALL[obj-$v]=$(median < "$OUT/w-obj-$v"); done
# A CPython test-suite run: instructions under callgrind (one suite, in-process), wall time of
# three suites.
ONE=(-m test test_generators -q)
SUITE=(-m test test_generators test_traceback test_sys_setprofile -q)
if "$TPY" -c "import test.test_generators" 2>/dev/null; then
    echo "suite python: $TPY ($("$TPY" -V 2>&1))"
    for v in plain off on; do
        rm -f "$OUT"/cg.*
        (cd "$OUT" && env $(variant_env "$v") YING_ONLY_EXE="$(basename "$TPY")" \
            valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" "$TPY" "${ONE[@]}" >/dev/null 2>"$OUT/vg.err") || true
        IR[suite-$v]=$(grep -h "^summary:" "$OUT"/cg.* | awk '{s+=$2} END {printf "%.0f", s}')
        : > "$OUT/w-suite-$v"
    done
    for _ in $(seq "$RUNS"); do
        for v in plain off on; do
            s=$(date +%s.%N)
            (cd "$OUT" && env $(variant_env "$v") "$TPY" "${SUITE[@]}" >/dev/null 2>&1) || true
            e=$(date +%s.%N)
            echo "$e - $s" | bc >> "$OUT/w-suite-$v"
        done
    done
    for v in plain off on; do WALL[suite-$v]=$(median < "$OUT/w-suite-$v"); done
fi
row() { # workload key, label
    for v in plain off on; do
        local ir=${IR[$1-$v]:-} w=${WALL[$1-$v]:-}
        [ -n "$ir" ] || continue
        local irr wr
        irr=$(echo "scale=4; $ir / ${IR[$1-plain]}" | bc)
        wr=$(echo "scale=3; $w / ${WALL[$1-plain]}" | bc)
        local name=$v
        [ "$v" = off ] && name="shim, YING_PYTHON_FRAMES=false"
        [ "$v" = on ] && name="shim, Python frames (default)"
        echo "| $2 | $name | $ir | ${irr}x | $w | ${wr}x |"
    done
}
row obj "objects.py 500000 (instructions: 1 round under callgrind; wall: 2 rounds)"
row suite "CPython tests (instructions: test_generators under callgrind; wall: test_generators, test_traceback, test_sys_setprofile)"
rm -rf "$OUT"
