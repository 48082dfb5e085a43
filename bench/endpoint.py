#!/usr/bin/env python3
"""One request's time and memory at the built-in endpoint for a 10k-stack profile.

Builds bench/stacks.c (10,000 allocations, one call stack each, kept alive) and runs it under
the shim with every allocation sampled and YING_HTTP_ADDR set, holding its profile for the
requests. For each route: the first request's time (it symbolizes what no request did before),
the median of the next REPS, and the request's own profiler memory: the profiler's peak bytes
after the request minus its bytes before (from /debug/ying/status), when the request set a new
peak. Also the process's peak RSS (VmHWM) before the first request and after the last.

    bench/endpoint.py [path/to/libying.so] [stacks] [--meta FILE]
        (defaults: target/release/libying.so, 10000; --meta appends `key<TAB>value` lines for
        bench/report.py, as scripts/bench.sh does)
"""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPS = 5
ROUTES = [
    ("GET", "/debug/pprof/heap"),
    ("GET", "/debug/pprof/allocs"),
    ("GET", "/debug/pprof/heap/peak"),
    ("GET", "/debug/ying/flamegraph.svg"),
    ("GET", "/debug/ying/report.txt"),
    ("GET", "/debug/ying/status"),
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fetch(base, method, path):
    req = urllib.request.Request(base + path, method=method)
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return time.perf_counter() - t, len(body)


def status(base):
    with urllib.request.urlopen(base + "/debug/ying/status", timeout=60) as r:
        return json.loads(r.read())


def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))


def main():
    args = sys.argv[1:]
    meta = None
    if "--meta" in args:
        i = args.index("--meta")
        meta = args[i + 1]
        del args[i:i + 2]
    lib = os.path.abspath(args[0] if args else os.path.join(ROOT, "target/release/libying.so"))
    n = args[1] if len(args) > 1 else "10000"
    results = {}
    tmp = tempfile.mkdtemp(prefix="ying-endpoint-bench-")
    exe = os.path.join(tmp, "stacks")
    subprocess.check_call(["gcc", "-O2", "-g", "-fno-optimize-sibling-calls", "-fno-ipa-icf",
                           "-o", exe, os.path.join(ROOT, "bench/stacks.c")])
    port = free_port()
    env = dict(os.environ, LD_PRELOAD=lib, YING_SAMPLE_INTERVAL_BYTES="1",
               YING_CHECK_INTERVAL_SECS="0", YING_REPORT_AT_EXIT="false",
               YING_REPORTING_PATH=os.path.join(tmp, "reports"),
               YING_HTTP_ADDR="127.0.0.1:%d" % port)
    proc = subprocess.Popen([exe, n, "600"], env=env, stdout=subprocess.PIPE)
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.time() + 30
        while True:
            try:
                s0 = status(base)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    sys.exit("no endpoint")
                time.sleep(0.05)
        hwm0 = hwm_kib(proc.pid)
        print("stacks sampled: %d live samples; profiler memory before any request %.1f MiB"
              % (s0["samples"]["live"], s0["profiler"]["bytes"] / 2**20))
        print("| route | bytes | first request ms | median of next %d ms | request's own profiler memory MiB |" % REPS)
        print("|---|---|---|---|---|")
        for method, path in ROUTES:
            before = status(base)["profiler"]
            first, size = fetch(base, method, path)
            after = status(base)["profiler"]
            if after["peak_bytes"] > before["peak_bytes"]:
                own = "%.2f" % ((after["peak_bytes"] - before["bytes"]) / 2**20)
            else:
                own = "<= %.2f" % ((before["peak_bytes"] - before["bytes"]) / 2**20)
            times = [fetch(base, method, path)[0] for _ in range(REPS)]
            med = statistics.median(times)
            print("| %s | %d | %.1f | %.1f | %s |"
                  % (path, size, first * 1000, med * 1000, own))
            key = "endpoint_" + path.rsplit("/", 1)[-1].split(".")[0]
            results[key + "_bytes"] = size
            results[key + "_first_ms"] = "%.1f" % (first * 1000)
            results[key + "_ms"] = "%.1f" % (med * 1000)
            results[key + "_mib"] = own
        hwm1 = hwm_kib(proc.pid)
        results["endpoint_stacks"] = s0["samples"]["live"]
        results["endpoint_hwm_mib"] = "%.1f" % ((hwm1 - hwm0) / 1024)
        if meta:
            with open(meta, "a") as f:
                for k, v in results.items():
                    f.write("%s\t%s\n" % (k, v))
        print("peak RSS (VmHWM): %.1f MiB before the first request, %.1f MiB after the last (+%.1f MiB)"
              % (hwm0 / 1024, hwm1 / 1024, (hwm1 - hwm0) / 1024))
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
