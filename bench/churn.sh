#!/usr/bin/env bash
# What process churn costs under the shim: a fork storm, `make -j2` of small files and one cc1
# compile, each beside the plain run (and beside another build of the shim, to show a change).
# Prints a Markdown section for BENCHMARKS.md on stdout, progress on stderr.
#
#   bench/churn.sh LIBYING [BEFORE_LIBYING] [ROUNDS]
#
# - fork storm: preload-tests/programs/fork_storm.c forking for 3 s (each child allocates
#   128 KiB and exits, the parent keeps 16 MiB): forks a second, median of ROUNDS (3);
# - make -j2 of 20 one-function C files (every make, sh, gcc, cc1, as, ld preloaded): the CPU
#   seconds (user + system) of the whole tree, median of ROUNDS;
# - cc1 on a generated file of 60 functions: instructions (callgrind), the process's whole life
#   with its exit output (`YING_SHORT_PROCESS_SECS` raised under callgrind, which slows cc1 past
#   the 5 s it ends within natively).
# Reports go to a fresh directory per run (tmpfs-like costs of the filesystem included).
set -euo pipefail
NEW=$1
OLD=${2:-}
ROUNDS=${3:-3}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ying-churn.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "== $*" >&2; }

gcc -O1 -o "$WORK/fork_storm" preload-tests/programs/fork_storm.c
mkdir -p "$WORK/make"
for i in $(seq 1 20); do
    printf 'int f%d(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * %d; return s; }\n' \
        "$i" "$i" >"$WORK/make/f$i.c"
done
{
    printf 'OBJS = %s\n' "$(seq -f 'f%g.o' 1 20 | tr '\n' ' ')"
    printf 'all: $(OBJS)\n%%.o: %%.c\n\tgcc -O1 -c $< -o $@\nclean:\n\trm -f *.o\n'
} >"$WORK/make/Makefile"
{
    echo 'unsigned long strlen(const char *);'
    for i in $(seq 0 59); do
        cat <<C
struct rec_$i { int a[16]; double d; char name[32]; };
int f_$i(struct rec_$i *r, int n, const char *s) {
    int acc = $i;
    for (int i = 0; i < n; i++) {
        switch ((i + $i) % 4) {
        case 0: acc += r->a[i & 15] * 3; break;
        case 1: acc ^= s[i % 32] << (i % 7); break;
        case 2: acc += (int)(r->d * i) % 1000; break;
        default: acc += (int)strlen(r->name) + i; break;
        }
    }
    return acc;
}
C
    done
} >"$WORK/cc1.c"
CC1=$(gcc -print-prog-name=cc1)

# variant_env NAME: the environment of a variant (a reporting directory of its own).
variant_env() {
    local out="$WORK/reports-$1-$RANDOM"
    case "$1" in
        plain) ;;
        new) echo "LD_PRELOAD=$NEW YING_REPORTING_PATH=$out" ;;
        old) echo "LD_PRELOAD=$OLD YING_REPORTING_PATH=$out" ;;
    esac
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

VARIANTS=(plain new)
[ -n "$OLD" ] && VARIANTS=(plain old new)
declare -A FORKS MAKE CC1I
for ((r = 1; r <= ROUNDS; r++)); do
    for v in "${VARIANTS[@]}"; do
        say "round $r: fork storm, $v"
        # shellcheck disable=SC2046
        line=$(env $(variant_env "$v") "$WORK/fork_storm" 0 3)
        FORKS[$v]+="$(echo "$line" | awk '{ print $6 }') "
        say "round $r: make -j2, $v"
        make -s -C "$WORK/make" clean
        # shellcheck disable=SC2046
        cpu=$( { /usr/bin/time -f '%U %S' env $(variant_env "$v") make -s -j2 -C "$WORK/make" >/dev/null; } 2>&1 | tail -n 1 | awk '{ print $1 + $2 }')
        MAKE[$v]+="$cpu "
    done
done
for v in "${VARIANTS[@]}"; do
    say "cc1 under callgrind, $v"
    # shellcheck disable=SC2046
    # Under callgrind cc1 runs ~50 times slower: YING_SHORT_PROCESS_SECS is raised so that it
    # is the short process it is natively (a few hundred milliseconds).
    ins=$(env $(variant_env "$v") YING_SHORT_PROCESS_SECS=600 valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$v" \
        "$CC1" -quiet -O2 "$WORK/cc1.c" -o "$WORK/cc1.$v.s" 2>&1 | awk '/Collected/ { print $NF }')
    CC1I[$v]=$ins
done

plain_forks=$(echo "${FORKS[plain]}" | tr ' ' '\n' | grep . | median)
plain_make=$(echo "${MAKE[plain]}" | tr ' ' '\n' | grep . | median)
echo "## Process churn"
echo
echo "Short-lived processes under the shim, beside the plain run: \`fork_storm\` (preload-tests/programs/fork_storm.c) forking for 3 s, each child allocating 128 KiB and exiting (forks a second, median of $ROUNDS); \`make -j2\` of 20 one-function C files, every process preloaded (CPU seconds of the tree, user + system, median of $ROUNDS); \`cc1 -O2\` of a 60-function file (instructions, callgrind, with its exit output; \`YING_SHORT_PROCESS_SECS\` raised, as callgrind slows cc1 past the 5 s it ends within natively). \`bench/churn.sh\`."
echo
echo "| variant | fork storm forks/s | vs plain | make -j2 CPU s | vs plain | cc1 instructions | vs plain |"
echo "|---|---|---|---|---|---|---|"
for v in "${VARIANTS[@]}"; do
    f=$(echo "${FORKS[$v]}" | tr ' ' '\n' | grep . | median)
    m=$(echo "${MAKE[$v]}" | tr ' ' '\n' | grep . | median)
    c=${CC1I[$v]}
    pc=${CC1I[plain]}
    printf '| %s | %s | %.3fx | %s | %.3fx | %s | %.4fx |\n' "$v" "$f" \
        "$(echo "$f / $plain_forks" | bc -l)" "$m" "$(echo "$m / $plain_make" | bc -l)" \
        "$c" "$(echo "${c//,/} / ${pc//,/}" | bc -l)"
done
