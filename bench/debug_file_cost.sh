#!/usr/bin/env bash
# What looking for separate debug files costs a report where there are none (the common case:
# a stripped system library without its debug package): sqlite3 builds a 100,000-row table in
# memory under the shim and writes its whole exit set in the process (every frame of the
# stripped libsqlite3 looked up), with two builds of the shim alternating run by run. Prints
# the median and the fastest run of each, milliseconds, on stdout.
#
#   bench/debug_file_cost.sh LIBYING_BEFORE LIBYING_AFTER [RUNS]
set -euo pipefail
BEFORE=$1
AFTER=$2
RUNS=${3:-20}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ying-debugfile.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 - "$BEFORE" "$AFTER" "$RUNS" "$WORK" <<'PY'
import os, shutil, statistics, subprocess, sys, time
before, after, runs, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sql = ("CREATE TABLE t(a,b); INSERT INTO t SELECT x, printf('%020d', x) FROM (WITH RECURSIVE "
       "c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<100000) SELECT x FROM c); "
       "SELECT count(*) FROM t;")
times = {"before": [], "after": []}
for _ in range(runs):
    for name, lib in (("before", before), ("after", after)):
        out = os.path.join(work, "reports")
        shutil.rmtree(out, ignore_errors=True)
        env = dict(os.environ, LD_PRELOAD=lib, YING_REPORTING_PATH=out,
                   YING_SHORT_PROCESS_SECS="0", YING_SAMPLE_INTERVAL_BYTES="4096")
        t = time.perf_counter()
        subprocess.run(["sqlite3", ":memory:", sql], env=env, stdout=subprocess.DEVNULL,
                       check=True)
        times[name].append((time.perf_counter() - t) * 1000)
for name, v in times.items():
    print(f"{name}: median {statistics.median(v):.1f} ms, fastest {min(v):.1f} ms ({len(v)} runs)")
PY
