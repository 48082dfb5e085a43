#!/usr/bin/env bash
# Per-process cost of a preloaded profiler: programs that start, allocate a little and exit, many
# times over. Prints a Markdown section (for BENCHMARKS.md) on stdout, progress on stderr.
#
#   bench/process_cost.sh LIBYING [ROUNDS]
#
# Workloads: 200 runs of /bin/true (per-run wall time and the peak RSS of one run), `make -j2`
# of 50 small C files (every make, sh, gcc, cc1, as and ld process preloaded), and a bash loop
# of 1,000 subshells `(true)` (forks, no exec). Variants: no preload; Ying with default settings
# and with YING_ENABLED=false; heaptrack's preload library writing its trace to /dev/null (the
# cost of tracing, without heaptrack_interpret); jemalloc's, with and without its profiler
# (prof_final, so each process writes a profile at exit as Ying does). Rounds alternate the
# variants; the table gives the median over rounds.
set -euo pipefail
LIBYING=$1
ROUNDS=${2:-5}
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
JEMALLOC=/usr/lib/$MULTIARCH/libjemalloc.so.2
HEAPTRACK=/usr/lib/heaptrack/libheaptrack_preload.so
[ -f "$HEAPTRACK" ] || HEAPTRACK=$(find /usr/lib -name libheaptrack_preload.so 2>/dev/null | head -n 1)
TRUE=$(command -v true)
[ -x /bin/true ] && TRUE=/bin/true
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ying-proc.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "== $*" >&2; }

# The make workload: 50 small files, one Makefile.
mkdir -p "$WORK/make"
for i in $(seq 1 50); do
    printf 'int f%d(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * %d; return s; }\n' \
        "$i" "$i" >"$WORK/make/f$i.c"
done
{
    printf 'OBJS = %s\n' "$(seq -f 'f%g.o' 1 50 | tr '\n' ' ')"
    printf 'all: $(OBJS)\n%%.o: %%.c\n\tgcc -O1 -c $< -o $@\nclean:\n\trm -f *.o\n'
} >"$WORK/make/Makefile"

VARIANTS=(glibc ying ying-off heaptrack jemalloc jemalloc+prof)
# env_for VARIANT OUT: the environment of one variant (output under OUT).
env_for() {
    case "$1" in
        glibc) ;;
        ying) echo "LD_PRELOAD=$LIBYING YING_REPORTING_PATH=$2" ;;
        ying-off) echo "LD_PRELOAD=$LIBYING YING_ENABLED=false" ;;
        heaptrack) echo "LD_PRELOAD=$HEAPTRACK DUMP_HEAPTRACK_OUTPUT=/dev/null" ;;
        jemalloc) echo "LD_PRELOAD=$JEMALLOC" ;;
        jemalloc+prof)
            echo "LD_PRELOAD=$JEMALLOC MALLOC_CONF=prof:true,lg_prof_sample:19,prof_final:true,prof_prefix:$2/jeprof"
            ;;
    esac
}

now() { date +%s%N; }
# run_workload NAME VARIANT: prints "wall_ms files" for one round.
run_workload() {
    local name=$1 v=$2 out="$WORK/out" t0 t1 n
    rm -rf "$out"
    mkdir -p "$out"
    # shellcheck disable=SC2046
    local -a e=($(env_for "$v" "$out"))
    case "$name" in
        true)
            t0=$(now)
            for ((n = 0; n < 200; n++)); do env "${e[@]}" "$TRUE"; done
            t1=$(now)
            t1=$(((t1 - t0) / 200))
            ;;
        make)
            make -s -C "$WORK/make" clean
            t0=$(now)
            env "${e[@]}" make -s -j2 -C "$WORK/make" >/dev/null
            t1=$(now)
            t1=$((t1 - t0))
            ;;
        bash)
            t0=$(now)
            env "${e[@]}" bash -c 'for ((i = 0; i < 1000; i++)); do (true); done'
            t1=$(now)
            t1=$((t1 - t0))
            ;;
    esac
    echo "$(awk -v t="$t1" 'BEGIN { printf "%.3f", t / 1e6 }') $(find "$out" -type f | wc -l)"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# The /bin/true row also gets the peak RSS of one run (median of 5).
rss_true() {
    local v=$1 i
    # shellcheck disable=SC2046
    local -a e=($(env_for "$v" "$WORK/out"))
    for i in 1 2 3 4 5; do
        /usr/bin/time -f %M env "${e[@]}" "$TRUE" 2>&1 >/dev/null | tail -n 1
    done | median
}

declare -A RES FILES
for w in true make bash; do
    for ((r = 1; r <= ROUNDS; r++)); do
        for v in "${VARIANTS[@]}"; do
            read -r ms files < <(run_workload "$w" "$v")
            RES[$w/$v]+="$ms "
            FILES[$w/$v]=$files
        done
        say "$w round $r/$ROUNDS done"
    done
done

echo "## Per-process cost"
echo
echo "Programs that start, allocate a little and exit, many times over: \`$TRUE\` 200 times in a row (wall time per run; peak RSS of one run, \`/usr/bin/time -f %M\`, median of 5), \`make -j2\` of 50 one-function C files (every make, sh, gcc, cc1, as and ld process preloaded) and \`bash -c 'for ((i = 0; i < 1000; i++)); do (true); done'\` (1,000 forked subshells, no exec). Median of $ROUNDS rounds, the variants alternating within each round. \`heaptrack\` is its preload library writing its trace to /dev/null (heaptrack's wrapper would add heaptrack_interpret per traced process, and it traces only the process it starts). \`files\` = report or profile files written by the last round. \`bench/process_cost.sh\`."
echo
echo "| variant | /bin/true ms per run | +ms vs glibc | /bin/true peak RSS kB | make -j2 s | bash loop s | files (true / make / bash) |"
echo "|---|---|---|---|---|---|---|"
base_true=$(echo "${RES[true/glibc]}" | tr ' ' '\n' | grep . | median)
for v in "${VARIANTS[@]}"; do
    t=$(echo "${RES[true/$v]}" | tr ' ' '\n' | grep . | median)
    m=$(echo "${RES[make/$v]}" | tr ' ' '\n' | grep . | median)
    b=$(echo "${RES[bash/$v]}" | tr ' ' '\n' | grep . | median)
    printf '| %s | %.2f | %+.2f | %s | %.2f | %.2f | %s / %s / %s |\n' "$v" "$t" \
        "$(awk -v a="$t" -v b="$base_true" 'BEGIN { print a - b }')" "$(rss_true "$v")" \
        "$(awk -v x="$m" 'BEGIN { print x / 1000 }')" "$(awk -v x="$b" 'BEGIN { print x / 1000 }')" \
        "${FILES[true/$v]}" "${FILES[make/$v]}" "${FILES[bash/$v]}"
done
