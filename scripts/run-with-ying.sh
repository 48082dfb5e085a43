#!/usr/bin/env bash
# Runs a program under the Ying LD_PRELOAD shim and sums up the reports it wrote.
#
#   scripts/run-with-ying.sh <program> [args...]
#
# Builds target/release/libying.so first if it is missing (YING_LIB names another build),
# prepends it to any existing LD_PRELOAD, passes every YING_* variable through, and exits with
# the program's own status.
#
# At the end it lists, on stderr, the report sets written by this run only (a set that was in
# the reporting directory before the run started is never named): one line per process with
# its executable, pid, peak (when the report has a peak section) and retained bytes at exit,
# and the path of the text report of the largest. When nothing was written it says why it
# thinks so: profiling or reporting switched off, a static executable (which ignores
# LD_PRELOAD), a reporting directory that cannot be written, or a program that allocated too
# little to take a sample. The summary needs python3; without it, one line says where the
# reports are.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 <program> [args...]   (configure with YING_* variables, see README.md)" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="${YING_LIB:-$root/target/release/libying.so}"
# Not a setting of the shim (which warns about unknown YING_* variables): not passed on.
unset YING_LIB
if [ ! -f "$lib" ]; then
    echo "ying: building $lib (first run)..." >&2
    (cd "$root" && cargo build --release -p ying-preload --quiet) >&2
fi

reports="${YING_REPORTING_PATH:-ying-profiles}"
case "$reports" in
    /*) ;;
    *) reports="$PWD/$reports" ;;
esac

# The report sets already there: whatever this run writes is what is not in this list. (Names
# carry the pid, a sequence number and the time, so a new set never takes an old one's name.)
before="$(mktemp "${TMPDIR:-/tmp}/ying-run.XXXXXX")"
trap 'rm -f "$before"' EXIT
if [ -d "$reports" ]; then
    # Sets of workers that changed user land in uid-<N>/ subdirectories.
    (cd "$reports" 2>/dev/null && find . -mindepth 1 -maxdepth 2 -printf '%P\n') >"$before" 2>/dev/null || true
fi

status=0
LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" "$@" || status=$?

if ! command -v python3 >/dev/null 2>&1; then
    if [ -d "$reports" ] && [ -n "$(ls -A "$reports" 2>/dev/null)" ]; then
        echo "ying: reports in $reports" >&2
    else
        echo "ying: no reports were written to $reports (see any ying: warnings above)" >&2
    fi
    exit "$status"
fi

python3 - "$reports" "$before" "$1" >&2 <<'PYTHON' || true
import os, re, shutil, stat, struct, sys

reports, before_file, program = sys.argv[1], sys.argv[2], sys.argv[3]

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
NAME = re.compile(r"^ying\.(.+)\.(\d+)\.(\d+)\.(\d{8}T\d{6}Z)\.txt$")


def say(line=""):
    print("ying: " + line if line else "ying:")


def human(n):
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n >= UNITS[unit]:
            return "%.1f %s" % (n / UNITS[unit], unit)
    return "%d B" % n


def figure(text):
    """The first size in `text` (`1.5 MiB`), exact when followed by `(N bytes`."""
    m = re.search(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)\b(?: \((\d+) bytes)?", text)
    if not m:
        return None
    return int(m.group(3)) if m.group(3) else int(float(m.group(1)) * UNITS[m.group(2)])


def read_set(path):
    """(executable, retained at this report, peak or None) from a text report's header and
    PEAK section; None when the file is not a Ying text report."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return None
    if not lines or lines[0] != "Ying memory profile":
        return None
    exe, retained, peak = "?", None, None
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "executable":
            exe = value.strip()
        elif key == "retained (exact)":
            retained = figure(value)
        # The peak: the first size on the first `peak ...:` (or `kept peak:`) line, from the
        # header or the PEAK section; the profiler's own peak memory is not the program's.
        elif peak is None and re.match(r"^(kept )?peak\b", key) and not key.startswith("profiler"):
            peak = figure(value)
    return exe, retained, peak


def new_sets():
    try:
        with open(before_file) as f:
            old = set(f.read().split("\n"))
        names = os.listdir(reports)
    except OSError:
        return []
    # Sets of workers that changed user are in uid-<N>/ (prepared by the shim before the change).
    for sub in [n for n in names if re.match(r"^uid-\d+$", n)]:
        try:
            names += [sub + "/" + n for n in os.listdir(os.path.join(reports, sub))]
        except OSError:
            pass
    found = []
    for name in names:
        m = NAME.match(name.rsplit("/", 1)[-1])
        if not m or name in old:
            continue
        path = os.path.join(reports, name)
        if not os.path.isfile(path):
            continue
        info = read_set(path)
        if info is None:
            continue
        found.append((int(m.group(2)), int(m.group(3)), path) + info)
    return found


def summarize(sets):
    by_pid = {}
    for pid, seq, path, exe, retained, peak in sets:
        by_pid.setdefault(pid, []).append((seq, path, exe, retained, peak))
    rows = []
    for pid, group in by_pid.items():
        group.sort()
        seq, path, exe, retained, peak = group[-1]
        peaks = [p for (_, _, _, _, p) in group if p is not None]
        peak = max(peaks) if peaks else None
        size = max(x for x in (peak, retained, 0) if x is not None)
        rows.append((size, pid, exe, retained, peak, len(group), path))
    rows.sort(key=lambda r: (-r[0], r[1]))
    procs = len(rows)
    say("this run wrote %d report set%s (%d process%s) in %s:" % (
        len(sets), "" if len(sets) == 1 else "s", procs, "" if procs == 1 else "es", reports))
    shown = rows[:10]
    width = max(len(os.path.basename(r[2])) for r in shown)
    for size, pid, exe, retained, peak, count, path in shown:
        alive = False
        try:
            os.kill(pid, 0)
            alive = True
        except OSError:
            pass
        parts = []
        if peak is not None:
            parts.append("peak " + human(peak))
        if retained is not None:
            parts.append(("retained at its last report (still running) " if alive
                          else "retained at exit ") + human(retained))
        say("  %-*s  pid %-7d %s  (%d set%s)" % (
            width, os.path.basename(exe), pid, ", ".join(parts), count, "" if count == 1 else "s"))
    if len(rows) > len(shown):
        say("  ... and %d more processes" % (len(rows) - len(shown)))
    say("largest: " + rows[0][6])


# ---- nothing written: why? -----------------------------------------------------------------

def false_value(v):
    return v is not None and v.strip().lower() in ("false", "0", "no", "off")


def resolve(prog):
    if "/" in prog:
        return prog if os.path.isfile(prog) else None
    return shutil.which(prog)


def elf_interp(path):
    """'dynamic', 'static' or None (not ELF / unreadable): a program without a PT_INTERP
    program header is started without the dynamic loader, which alone reads LD_PRELOAD."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF":
                return None
            wide = ident[4] == 2
            end = "<" if ident[5] == 1 else ">"
            if wide:
                phoff, = struct.unpack(end + "Q", ident[32:40])
                phentsize, phnum = struct.unpack(end + "HH", ident[54:58])
            else:
                phoff, = struct.unpack(end + "I", ident[28:32])
                phentsize, phnum = struct.unpack(end + "HH", ident[42:46])
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except (OSError, struct.error):
        return None
    for i in range(phnum):
        entry = table[i * phentsize:i * phentsize + 4]
        if len(entry) == 4 and struct.unpack(end + "I", entry)[0] == 3:  # PT_INTERP
            return "dynamic"
    return "static"


def shebang(path):
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return resolve(words[1])
    return words[0]


def directory_problem(path):
    """Why files cannot be created at `path`, or None when it looks usable. Checks the path
    as the shim opens it: component by component, no symbolic link followed."""
    parts = [p for p in path.split("/") if p]
    cur = "/"
    for i, part in enumerate(parts):
        nxt = os.path.join(cur, part)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            if not os.access(cur, os.W_OK | os.X_OK):
                return "%s does not exist and %s is not writable" % (nxt, cur)
            return None
        except OSError as e:
            return "%s: %s" % (nxt, e.strerror)
        if stat.S_ISLNK(st.st_mode):
            return "%s is a symbolic link (Ying refuses a reporting path through one)" % nxt
        if not stat.S_ISDIR(st.st_mode):
            return "%s is not a directory" % nxt
        cur = nxt
    if not os.access(cur, os.W_OK | os.X_OK):
        return "%s is not writable" % cur
    return None


def explain():
    env = os.environ
    say("no report set was written to %s by this run:" % reports)
    if false_value(env.get("YING_ENABLED")):
        say("  YING_ENABLED=%s switched profiling off." % env["YING_ENABLED"])
        return
    if (false_value(env.get("YING_REPORT_AT_EXIT"))
            and env.get("YING_CHECK_INTERVAL_SECS", "").strip() == "0"):
        say("  YING_REPORT_AT_EXIT=false and YING_CHECK_INTERVAL_SECS=0 switched reports off.")
        return
    exe = resolve(program)
    if exe is None:
        say("  %s was not found." % program)
        return
    interp = shebang(exe)
    target = interp or exe
    if elf_interp(target) == "static":
        what = "%s (the interpreter of %s)" % (target, exe) if interp else exe
        say("  %s is a static executable (its ELF header names no program interpreter," % what)
        say("  PT_INTERP): without the dynamic loader, LD_PRELOAD is ignored and Ying never ran.")
        return
    try:
        if os.stat(target).st_mode & (stat.S_ISUID | stat.S_ISGID) and os.geteuid() != 0:
            say("  %s is setuid/setgid: the loader ignores LD_PRELOAD for it." % target)
            return
    except OSError:
        pass
    only = env.get("YING_ONLY_EXE", "").strip()
    if only and not os.path.isdir(reports):
        say("  YING_ONLY_EXE=%s: no executable of that name ran." % only)
        return
    problem = directory_problem(reports)
    if problem is None and not os.path.isdir(reports):
        problem = "it does not exist after the run, so Ying could not create it"
    if problem:
        say("  the reporting directory is not writable: %s." % problem)
        say("  Set YING_REPORTING_PATH to a directory this program can write to.")
        return
    interval = env.get("YING_SAMPLE_INTERVAL_BYTES", "").strip() or "512KiB"
    say("  no process took a sample, it seems: Ying samples about once per %s allocated" % interval)
    say("  (YING_SAMPLE_INTERVAL_BYTES) and a process that took no sample writes no report.")
    say("  For a small program try YING_SAMPLE_INTERVAL_BYTES=4KiB. (A process that ends by")
    say("  _exit, a signal or the OOM killer writes no exit report either.)")


sets = new_sets()
if sets:
    summarize(sets)
else:
    explain()
PYTHON

exit "$status"
