#!/usr/bin/env python3
"""Writes BENCHMARKS.md from the raw measurements of scripts/bench.sh.

    report.py RAW.tsv META.tsv OUT.md [SERVICE.tsv]

RAW.tsv has one line per run: workload, group (the variant compared in this series of pairs),
variant (the one that ran: the group's or the baseline), pair number, wall seconds, peak RSS kB,
profile output bytes, exit status. SERVICE.tsv has one line per service run: mode (closed or
rate), group, variant, pair number, requests per second, server CPU microseconds per request,
server peak RSS kB, exit status. META.tsv has `key<TAB>value` lines: the machine, the
settings, and the single-number measurements (callgrind, report set). A key may repeat (`note`).
"""

import statistics
import sys

WORKLOADS = [
    (
        "churn",
        "glibc",
        ["ying", "heaptrack", "jemalloc", "jemalloc+prof"],
        "C, 2 threads, malloc/free churn (99 % 16..512 B, 1 % 4 KiB..1 MiB, ring of live blocks)",
    ),
    (
        "cc1",
        "glibc",
        ["ying", "heaptrack", "jemalloc", "jemalloc+prof"],
        "`gcc -O2 -c` of a generated C file with 300 functions (time dominated by cc1)",
    ),
    (
        "python",
        "glibc",
        ["ying", "heaptrack", "jemalloc", "jemalloc+prof"],
        "python3 building 1.5 M small objects (dicts, tuples, strings) and dropping them",
    ),
    (
        "rust-example",
        "system",
        ["ying-rust", "ying-0.3.0"],
        "Rust cache workload, 2 threads (one per core), `#[global_allocator]` front end (no LD_PRELOAD)",
    ),
    (
        "rust-alloc",
        "mimalloc",
        ["ying-mimalloc", "jemalloc-rust+prof", "jemalloc-rust"],
        "Rust cache workload, 2 threads, keeping the program's allocator: `YingProfiler<MiMalloc>`, "
        "and tikv-jemallocator with and without jemalloc's profiler, against mimalloc alone",
    ),
    (
        "rust-spans",
        "spans-off",
        ["spans-on"],
        "the Rust cache workload with one `tracing` span per operation: Ying without and with "
        "`profile_spans` (YingSpanLayer installed)",
    ),
]

# Profiler memory rows: (workload, baseline variant, ying variant).
MEMORY_ROWS = [
    ("churn", "glibc", "ying"),
    ("cc1", "glibc", "ying"),
    ("python", "glibc", "ying"),
    ("rust-example", "system", "ying-rust"),
]

LABELS = {
    "glibc": "glibc",
    "system": "System",
    "ying": "ying",
    "ying-rust": "ying (this repo)",
    "ying-0.3.0": "ying 0.3.0",
    "spans-off": "ying, spans off",
    "spans-on": "ying, profile_spans on",
    "heaptrack": "heaptrack",
    "jemalloc": "jemalloc",
    "jemalloc+prof": "jemalloc+prof",
    "mimalloc": "mimalloc",
    "ying-mimalloc": "YingProfiler<MiMalloc>",
    "ying-system": "YingProfiler<System>",
    "jemalloc-rust": "jemalloc (tikv-jemallocator)",
    "jemalloc-rust+prof": "jemalloc, prof:true,lg_prof_sample:19",
}

SERVICE_VARIANTS = [
    ("mimalloc", ["ying-mimalloc", "jemalloc-rust+prof", "jemalloc-rust"]),
    ("system", ["ying-system"]),
]


def read_service(path):
    runs = []
    if not path:
        return runs
    try:
        f = open(path)
    except OSError:
        return runs
    with f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 8:
                continue
            mode, group, variant, pair, rps, cpu, rss, rc = parts
            runs.append(
                {
                    "mode": mode,
                    "group": group,
                    "variant": variant,
                    "pair": int(pair),
                    "rps": float(rps),
                    "cpu": float(cpu),
                    "rss": int(rss),
                    "rc": int(rc),
                }
            )
    return runs


def service_rows(runs, mode, base, variants):
    """Per variant: throughput ratios (variant / base, same pair), CPU per request ratios,
    and the raw figures; the baseline's figures over all its pairs."""
    rows = {v: {"ratio": [], "cpu_ratio": [], "rps": [], "cpu": [], "rss": [], "failed": []}
            for v in [base] + variants}
    by_pair = {}
    for r in runs:
        if r["mode"] == mode and r["group"] in variants:
            by_pair.setdefault((r["group"], r["pair"]), {})[r["variant"]] = r
    for (group, _), pair in sorted(by_pair.items()):
        if base not in pair or group not in pair:
            continue
        b, v = pair[base], pair[group]
        if b["rc"] or v["rc"] or not b["rps"] or not b["cpu"]:
            rows[group]["failed"].append(max(b["rc"], v["rc"]))
            continue
        for name, r in ((base, b), (group, v)):
            rows[name]["rps"].append(r["rps"])
            rows[name]["cpu"].append(r["cpu"])
            rows[name]["rss"].append(r["rss"])
        rows[group]["ratio"].append(v["rps"] / b["rps"])
        rows[group]["cpu_ratio"].append(v["cpu"] / b["cpu"])
    return rows


def service_section(runs, meta):
    """The service tables, and the medians the budget needs: {(mode, variant): ratio}."""
    md, ratios = [], {}
    if not runs:
        return md, ratios
    md.append("## service")
    md.append("")
    md.append(
        "An axum HTTP/1.1 service (a sharded cache of items built on a miss, a formatted "
        "answer per request; 2 Tokio workers) built once per global allocator, driven over "
        "loopback by `svc_load` (a process of its own, `System`). `%s`. Closed loop: each "
        "connection sends its next request when the answer arrives (throughput). Fixed rate: "
        "the same total rate for every variant (CPU per request at equal load). Server CPU and "
        "peak RSS are the server's own `getrusage`, read before and after the load (start-up "
        "and exit excluded). Ratios are per pair against the baseline of the same pair, in "
        "alternating order; ranges are min-max. Ying variants run with default settings (512 "
        "KiB mean interval) and no reporting thread; `jemalloc, prof` is tikv-jemallocator "
        "built with `profiling`, run with `_RJEM_MALLOC_CONF=%s,prof_final:true`."
        % (meta.get("params_service", ""), meta.get("je_prof", "prof:true,lg_prof_sample:19"))
    )
    md.append("")
    for mode, title in (("closed", "Closed loop"), ("rate", "Fixed rate")):
        body = []
        for base, variants in SERVICE_VARIANTS:
            rows = service_rows(runs, mode, base, variants)
            for v in [base] + variants:
                r = rows[v]
                if not r["rps"]:
                    state = "failed (exit %s)" % ",".join(map(str, sorted(set(r["failed"])))) \
                        if r["failed"] else "not run"
                    body.append([LABELS[v], state, "", "", "", "", "", ""])
                    continue
                if v == base:
                    ratio, rng, cratio = "1.000 (baseline)", "", ""
                else:
                    med = statistics.median(r["ratio"])
                    ratios[(mode, v)] = med
                    ratios[(mode, v, "cpu")] = statistics.median(r["cpu_ratio"])
                    ratio = fnum(med) + "x"
                    rng = "%s-%s" % (fnum(min(r["ratio"])), fnum(max(r["ratio"])))
                    cratio = fnum(statistics.median(r["cpu_ratio"])) + "x"
                body.append(
                    [
                        LABELS[v] + (" (vs %s)" % LABELS[base] if v != base else ""),
                        ratio,
                        rng,
                        fnum(statistics.median(r["rps"]), 0),
                        fnum(statistics.median(r["cpu"]), 1),
                        cratio,
                        fnum(statistics.median(r["rss"]) / 1024, 1),
                        str(len(r["rps"])),
                    ]
                )
        md.append("%s:" % title)
        md.append("")
        md.append(
            table(
                ["variant", "median throughput ratio", "range", "median req/s",
                 "server CPU us/request", "CPU/request ratio", "server peak RSS MB", "runs"],
                body,
            )
        )
        md.append("")
    cg_md, cg_ratios = service_instructions(meta)
    md.extend(cg_md)
    ratios.update(cg_ratios)
    return md, ratios


def service_instructions(meta):
    """The service's instructions per request under callgrind (bench.sh: two runs of the
    same length at two fixed rates per variant, "IR REQUESTS" each; the difference cancels
    start-up, exit and idle wake-ups). Returns the table and {("cg", variant): ratio to the
    baseline of its row group}."""
    md, ratios = [], {}
    per_req = {}
    for v in ["system", "ying-system", "mimalloc", "ying-mimalloc", "jemalloc-rust",
              "jemalloc-rust+prof"]:
        parts = meta.get("svc_cg_" + v, "").split()
        if len(parts) != 4:
            continue
        ir_lo, n_lo, ir_hi, n_hi = (int(x) for x in parts)
        if n_hi > n_lo:
            per_req[v] = ((ir_hi - ir_lo) / (n_hi - n_lo), n_lo, n_hi)
    if not per_req:
        return md, ratios
    md.append("Instructions per request (callgrind, deterministic):")
    md.append("")
    md.append(
        "Each server runs under `valgrind --tool=callgrind` twice for %s s, at 100 and at 500 "
        "requests/s (4 connections): (instructions of the second run - of the first) / "
        "(requests of the second - of the first) is one request's cost, start-up, exit and the "
        "runtime's idle wake-ups cancelled. Unlike wall-clock throughput on two shared cores, "
        "this does not move with the neighbours; it leaves out cache and memory effects."
        % meta.get("svc_cg_secs", "8")
    )
    md.append("")
    body = []
    for base, variants in SERVICE_VARIANTS:
        if base not in per_req:
            continue
        b = per_req[base][0]
        body.append([LABELS[base], fnum(b, 0), "1.000 (baseline)", "%d / %d" % per_req[base][1:]])
        for v in variants:
            if v not in per_req:
                body.append([LABELS[v], "not measured", "", ""])
                continue
            r = per_req[v][0] / b
            ratios[("cg", v)] = r
            body.append(
                [LABELS[v] + " (vs %s)" % LABELS[base], fnum(per_req[v][0], 0), fnum(r) + "x",
                 "%d / %d" % per_req[v][1:]]
            )
    md.append(table(["variant", "instructions per request", "ratio", "requests (runs)"], body))
    md.append("")
    return md, ratios


MIB = 1024 * 1024


def read_raw(path):
    runs = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 8:
                continue
            w, group, variant, pair, wall, rss, out_bytes, rc = parts
            runs.append(
                {
                    "workload": w,
                    "group": group,
                    "variant": variant,
                    "pair": int(pair),
                    "wall": float(wall),
                    "rss": int(rss),
                    "bytes": int(out_bytes),
                    "rc": int(rc),
                }
            )
    return runs


def read_meta(path):
    meta, notes = {}, []
    with open(path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("\t")
            if key == "note":
                notes.append(value)
            else:
                meta[key] = value
    return meta, notes


MIB = 1024 * 1024
# Mean frames kept per stack of bench/stacks.c (depth 1..100 plus main and libc's start-up,
# at most 64).
RMEM_FRAMES = 46
# The same measurement before reports were written from a compact snapshot (commit a27f717, which
# added the peak to the header; same machine, load average about 5): kept here because a run of
# this script measures only the code it builds.
RMEM_BEFORE = (
    "Before the compact snapshot (commit a27f717, same machine): 9,563 stacks peaked at 108.5 "
    "MiB of profiler memory (peak RSS 116.3 MiB, write time 0.765 s) and 92,137 stacks at "
    "1,061.1 MiB (peak RSS 1,103.7 MiB, write time 8.652 s); the tables held the same 7.8 and "
    "70.3 MiB, so the reports' own memory was 100.7 and 990.8 MiB."
)


def fnum(x, digits=3):
    return "%.*f" % (digits, x)


def fbytes(n):
    return "{:,}".format(int(n))


class Row:
    """The numbers of one variant of one workload."""

    def __init__(self, label):
        self.label = label
        self.ratios = []
        self.walls = []
        self.rss = []
        self.bytes = []
        self.failed = []

    def ratio(self):
        return statistics.median(self.ratios) if self.ratios else None

    def cells(self, baseline):
        if not self.walls:
            if self.failed:
                codes = ",".join(map(str, sorted(set(self.failed))))
                return [self.label, "failed (exit %s)" % codes, "", "", "", ""]
            return [self.label, "not run", "", "", "", ""]
        if baseline:
            ratio, rng = "1.000 (baseline)", ""
        else:
            ratio = fnum(self.ratio()) + "x"
            rng = "%s-%s" % (fnum(min(self.ratios)), fnum(max(self.ratios)))
        return [
            self.label,
            ratio,
            rng,
            fnum(statistics.median(self.walls)),
            fnum(statistics.median(self.rss) / 1024, 1),
            fbytes(statistics.median(self.bytes)),
        ]


def workload_rows(runs, workload, base, variants):
    """Rows for the baseline and each variant; ratios come from runs of the same pair."""
    rows = {v: Row(LABELS[v]) for v in [base] + variants}
    by_pair = {}
    for r in runs:
        if r["workload"] != workload:
            continue
        by_pair.setdefault((r["group"], r["pair"]), {})[r["variant"]] = r
    for (group, _), pair in sorted(by_pair.items()):
        if group not in rows:
            continue
        ok = True
        for variant, r in pair.items():
            if r["rc"] != 0:
                rows[variant].failed.append(r["rc"])
                ok = False
        if not ok or base not in pair or group not in pair:
            continue
        b, v = pair[base], pair[group]
        rows[base].walls.append(b["wall"])
        rows[base].rss.append(b["rss"])
        rows[base].bytes.append(b["bytes"])
        rows[group].walls.append(v["wall"])
        rows[group].rss.append(v["rss"])
        rows[group].bytes.append(v["bytes"])
        rows[group].ratios.append(v["wall"] / b["wall"])
    return rows


def paired_rss(runs, workload, base, group):
    """Median peak RSS (kB) of the baseline and of `group`, from the pairs of that group only."""
    b, v = [], []
    for r in runs:
        if r["workload"] != workload or r["group"] != group or r["rc"] != 0:
            continue
        (b if r["variant"] == base else v).append(r["rss"])
    if not b or not v:
        return None
    return statistics.median(b), statistics.median(v)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def verdict(ok):
    return "PASS" if ok else "MISS"


def main():
    raw_path, meta_path, out_path = sys.argv[1:4]
    svc_runs = read_service(sys.argv[4] if len(sys.argv) > 4 else None)
    runs = read_raw(raw_path)
    meta, notes = read_meta(meta_path)
    m = meta.get
    md = []
    md.append("# Benchmarks")
    md.append("")
    md.append(
        "Generated by `scripts/bench.sh`, which rewrites its own sections and keeps the others "
        "(measured by the scripts they name, e.g. `bench/family.sh`, `bench/stack_table.sh`). "
        "Timings on a shared 2-core machine are noisy: compare ratios from the same run, not "
        "absolute times across runs."
    )
    md.append("")
    md.append("- date: %s" % m("date", "?"))
    md.append("- command: `%s`%s" % (m("command", "?"), " (quick mode)" if m("quick") == "1" else ""))
    md.append(
        "- machine: %s CPUs (`nproc`), %s, %s memory, kernel %s"
        % (m("nproc", "?"), m("cpu", "?"), m("mem", "?"), m("kernel", "?"))
    )
    md.append("- software: %s; %s; %s" % (m("glibc", "?"), m("rustc", "?"), m("gcc", "?")))
    md.append(
        "- tools: %s; heaptrack %s; libjemalloc2 %s; valgrind %s"
        % (m("python", "?"), m("heaptrack", "?"), m("jemalloc", "?"), m("valgrind", "?"))
    )
    md.append(
        "- load average at start / end: %s / %s" % (m("load_start", "?"), m("load_end", "?"))
    )
    md.append(
        "- method: for each variant, %s pairs of (baseline run, variant run) (%s pairs for the "
        "rows that decide a budget: `ying`, `ying (this repo)`, `profile_spans on`, `YingProfiler<MiMalloc>` and `jemalloc, prof`), the "
        "order alternating between pairs (A B, B A, ...); ratio = variant wall time / baseline "
        "wall time of the same pair; the table gives the median ratio and its min-max range, "
        "and medians of wall time, peak RSS (max RSS of the process tree's largest process, %s) "
        "and profile output bytes. The baseline row is over all its runs."
        % (m("pairs", "?"), m("budget_pairs", m("pairs", "?")), m("rss_tool", "?"))
    )
    md.append("")
    md.append("Variants (C and Python workloads):")
    md.append("")
    md.append("- `glibc`: no profiler.")
    md.append(
        "- `ying`: `LD_PRELOAD=target/release/libying.so`, default settings (512 KiB mean "
        "sampling interval, report at exit on, flamegraphs on), `YING_REPORTING_PATH` a fresh "
        "temporary directory per run; output bytes = everything written there."
    )
    md.append(
        "- `heaptrack`: `heaptrack -o <tmp>/heaptrack <cmd>` (heaptrack %s); for `cc1` also "
        "`-wrapper` so that cc1 and as are traced too (heaptrack does not follow exec'd "
        "children). Its wall time includes heaptrack_interpret and compression finishing; its "
        "peak RSS is the largest process of the tree, which may be heaptrack_interpret."
        % m("heaptrack", "?")
    )
    md.append("- `jemalloc`: `LD_PRELOAD=%s`." % m("jemalloc_path", "libjemalloc.so.2"))
    md.append(
        "- `jemalloc+prof`: the same with `MALLOC_CONF=prof:true,lg_prof_sample:19,"
        "prof_final:true,prof_prefix:<tmp>/jeprof` (`prof_final` so that a profile is written at "
        "exit, as Ying does; without it jemalloc writes nothing)."
    )
    md.append("")

    ratios = {}
    for workload, base, variants, desc in WORKLOADS:
        rows = workload_rows(runs, workload, base, variants)
        params = m("params_" + workload, "")
        md.append("## %s" % workload)
        md.append("")
        md.append("%s. `%s`" % (desc, params) if params else desc + ".")
        md.append("")
        body = [rows[base].cells(True)] + [rows[v].cells(False) for v in variants]
        md.append(
            table(
                [
                    "variant",
                    "median ratio vs %s" % LABELS[base],
                    "range",
                    "median wall s",
                    "peak RSS MB",
                    "profile output bytes",
                ],
                body,
            )
        )
        md.append("")
        for v in variants:
            ratios[(workload, v)] = rows[v].ratio()
    if m("rust_v03") and m("rust_v03") != "built":
        md.append("ying 0.3.0: %s" % m("rust_v03"))
        md.append("")
    svc_md, svc_ratios = service_section(svc_runs, meta)
    md.extend(svc_md)
    md.append(
        "The Rust rows run with no reporting thread (pure allocator overhead) and call "
        "`top_k_stacks_by_retained(5)` once at the end. ying 0.3.0 samples one allocation in "
        "500; this repository's ying samples one per 512 KiB on average. MB = MiB (1,048,576 "
        "bytes)."
    )
    md.append("")

    # Instruction counts.
    md.append("## Instructions per malloc+free pair (callgrind)")
    md.append("")
    cg_n = int(m("cg_pairs", "0") or 0)
    cg = {}
    for key in ["cg_glibc", "cg_ying", "cg_glibc0", "cg_ying0", "cg_ying_off"]:
        if m(key, "").isdigit():
            cg[key] = int(m(key))
    per_pair = None
    if cg_n and {"cg_glibc", "cg_ying"} <= cg.keys():
        per_pair = (cg["cg_ying"] - cg["cg_glibc"]) / cg_n
        md.append(
            "`bench/churn1.c`: %s pairs of malloc(64..120) + free, single-threaded, under "
            "`valgrind --tool=callgrind`, with and without `LD_PRELOAD=libying.so "
            "YING_REPORT_AT_EXIT=false YING_CHECK_INTERVAL_SECS=0 YING_SEED=1` "
            "(`YING_ONLY_EXE=churn1` keeps the valgrind launcher unprofiled)." % fbytes(cg_n)
        )
        md.append("")
        crow = [
            ["glibc", fbytes(cg["cg_glibc"]), ""],
            [
                "ying, default interval (512 KiB)",
                fbytes(cg["cg_ying"]),
                "**%s**" % fnum(per_pair, 1),
            ],
        ]
        if {"cg_glibc0", "cg_ying0"} <= cg.keys():
            startup = cg["cg_ying0"] - cg["cg_glibc0"]
            crow.append(
                [
                    "ying, default interval, start-up excluded (runs with 0 pairs subtracted)",
                    "",
                    fnum((cg["cg_ying"] - cg["cg_glibc"] - startup) / cg_n, 1),
                ]
            )
            crow.append(["start-up cost of the shim (0 pairs)", fbytes(startup), ""])
        if "cg_ying_off" in cg:
            crow.append(
                [
                    "ying, `YING_SAMPLE_INTERVAL_BYTES=1TiB` (never samples: the unsampled path "
                    "alone)",
                    fbytes(cg["cg_ying_off"]),
                    fnum((cg["cg_ying_off"] - cg["cg_glibc"]) / cg_n, 1),
                ]
            )
        md.append(table(["run", "instructions (Ir)", "extra instructions per pair"], crow))
    else:
        md.append("not measured: %s" % m("cg_error", "callgrind failed"))
    md.append("")

    # Profiler memory.
    md.append("## Profiler memory")
    md.append("")
    md.append(
        "Median peak RSS with ying minus median peak RSS without a profiler (from the ying pairs), "
        "against the budget 2 % of the host's peak RSS + 8 MiB. For rust-example the baseline is "
        "`System` and the Ying binary symbolizes its top stacks once at the end, which parses "
        "the binary's DWARF debug info."
    )
    md.append("")
    mem_ok = {}
    mrows = []
    for workload, base, group in MEMORY_ROWS:
        pr = paired_rss(runs, workload, base, group)
        if pr is None:
            mrows.append([workload, "", "", "", "", "not measured"])
            mem_ok[workload] = None
            continue
        host, with_ying = pr
        extra = with_ying - host
        budget = 0.02 * host + 8 * 1024
        mem_ok[workload] = (extra <= budget, extra / 1024, budget / 1024)
        mrows.append(
            [
                workload,
                fnum(host / 1024, 1),
                fnum(with_ying / 1024, 1),
                fnum(extra / 1024, 1),
                fnum(budget / 1024, 1),
                verdict(extra <= budget),
            ]
        )
    md.append(
        table(
            [
                "workload",
                "no-profiler peak RSS MiB",
                "ying peak RSS MiB",
                "ying extra MiB",
                "budget MiB",
                "verdict",
            ],
            mrows,
        )
    )
    md.append("")

    # Report set.
    md.append("## Report set for ~10,000 stacks")
    md.append("")
    rs_ok = None
    if m("stacks_total_bytes", "").isdigit():
        total = int(m("stacks_total_bytes"))
        secs = float(m("stacks_write_s"))
        md.append(
            "`bench/stacks.c`: %s allocations of 64 B, each at the bottom of a recursion of depth "
            "1..100 through two functions chosen by the bits of a hash, all kept alive; under "
            "the shim with `YING_SAMPLE_INTERVAL_BYTES=1 YING_TOP_K=20 "
            "YING_CHECK_INTERVAL_SECS=0`. Write time = from a timestamp printed just before "
            "`main` returns to the process having exited (median of %s runs; the same interval "
            "is %s s with `YING_REPORT_AT_EXIT=false`)."
            % (m("stacks_allocs", "?"), m("stacks_reps", "?"), m("stacks_noreport_s", "?"))
        )
        md.append("")
        md.append(
            table(
                ["stacks in the report", ".txt", ".svg", ".folded", ".pb.gz", "total bytes",
                 "write time s"],
                [
                    [
                        m("stacks_count", "?"),
                        fbytes(m("stacks_txt", 0)),
                        fbytes(m("stacks_svg", 0)),
                        fbytes(m("stacks_folded", 0)),
                        fbytes(m("stacks_pbgz", 0)),
                        fbytes(total),
                        fnum(secs),
                    ]
                ],
            )
        )
        rs_ok = (total < 2_000_000 and secs < 1.0, total, secs)
        if m("stacks_profiler_memory"):
            md.append("")
            md.append(
                "Profiler memory in that report's header (held when the report began): %s bytes."
                % fbytes(m("stacks_profiler_memory"))
            )
    else:
        md.append("not measured: %s" % m("stacks_error", "the run failed"))
    md.append("")

    # One request at the built-in endpoint.
    md.append("## One endpoint request for ~10,000 stacks")
    md.append("")
    ep_ok = None
    if m("endpoint_heap_ms"):
        md.append(
            "`bench/endpoint.py`: `bench/stacks.c` as above (%s live samples), holding its "
            "profile under the shim with `YING_HTTP_ADDR` set; each route asked once (the first "
            "request, which symbolizes what none did before) and 5 more times (median). The "
            "request's own memory is the profiler's peak bytes after it minus its bytes before "
            "(from `/debug/ying/status`), when it set a new peak (`<=`: it stayed under an "
            "earlier request's). Peak RSS grew by %s MiB over all the requests."
            % (m("endpoint_stacks", "?"), m("endpoint_hwm_mib", "?"))
        )
        md.append("")
        rows = []
        for key, route in (("heap", "/debug/pprof/heap"), ("allocs", "/debug/pprof/allocs"),
                           ("peak", "/debug/pprof/heap/peak"),
                           ("flamegraph", "/debug/ying/flamegraph.svg"),
                           ("report", "/debug/ying/report.txt")):
            rows.append([route, fbytes(m("endpoint_%s_bytes" % key, 0)),
                         m("endpoint_%s_first_ms" % key, "?"), m("endpoint_%s_ms" % key, "?"),
                         m("endpoint_%s_mib" % key, "?")])
        md.append(table(["route", "bytes", "first request ms", "median ms",
                         "request's own profiler MiB"], rows))
        try:
            ms, mib = float(m("endpoint_heap_ms")), float(m("endpoint_heap_mib").lstrip("<= "))
            ep_ok = (ms < 200 and mib < 5, ms, mib)
        except ValueError:
            pass
    else:
        md.append("not measured: %s" % m("endpoint_error", "the run failed"))
    md.append("")

    # What a report costs the profiler.
    md.append("## Profiler memory of a report")
    md.append("")
    md.append(
        "`bench/stacks.c` with 10,000 and 100,000 allocations (as above: one stack each, "
        "recursion depth 1..100, at most 64 frames kept), every allocation sampled, exit report "
        "only. From the report's header: `profiler memory` (what the profiler held when the "
        "report began: its tables) and `profiler peak` (the high-water mark of the profiler's "
        "own bytes, which the report set reaches before its text is written). The report's own "
        "memory is their difference; the formula is the README's `S * (200 + 2 * F)` bytes + "
        "8 MiB for S stacks of F = %d frames on average. Peak RSS (median of %s runs) without "
        "a profiler, under Ying without the exit report, and with it; write time as above."
        % (RMEM_FRAMES, m("stacks_reps", "?"))
    )
    md.append("")
    rmem_rows = []
    rmem_ok = None
    for n in ("10000", "100000"):
        if not m("rmem%s_peak" % n, "").isdigit():
            rmem_rows.append([n, "not measured: %s" % m("rmem%s_error" % n, "the run failed")]
                             + [""] * 6)
            continue
        stacks = int(m("rmem%s_stacks" % n))
        before = int(m("rmem%s_before" % n))
        peak = int(m("rmem%s_peak" % n))
        own = peak - before
        bound = stacks * (200 + 2 * RMEM_FRAMES) + 8 * MIB
        if n == "100000":
            rmem_ok = (own < 64 * MIB, own / MIB)
        rmem_rows.append(
            [
                fbytes(stacks),
                fnum(before / MIB, 1),
                fnum(peak / MIB, 1),
                fnum(own / MIB, 1),
                fnum(bound / MIB, 1),
                " / ".join(
                    fnum(int(m("rmem%s_%s" % (n, k), 0)) / 1024, 1)
                    for k in ("rss_plain", "rss_noreport", "rss")
                ),
                fnum(float(m("rmem%s_write_s" % n, "nan"))),
            ]
        )
    md.append(
        table(
            ["stacks in the report", "profiler memory before MiB", "profiler peak MiB",
             "report's own MiB", "formula MiB", "peak RSS MiB (none / no report / report)",
             "write time s"],
            rmem_rows,
        )
    )
    md.append("")
    md.append(RMEM_BEFORE)
    md.append("")

    # Budget.
    md.append("## Budget")
    md.append("")
    brows = []

    def ratio_row(target, workload, variant, limit):
        r = ratios.get((workload, variant))
        if r is None:
            brows.append([target, "not measured", "MISS"])
        else:
            brows.append([target, fnum(r) + "x", verdict(r <= limit)])

    ratio_row("churn (LD_PRELOAD) <= 1.10x", "churn", "ying", 1.10)
    ratio_row("cc1 (LD_PRELOAD) <= 1.03x", "cc1", "ying", 1.03)
    ratio_row("python (LD_PRELOAD) <= 1.03x", "python", "ying", 1.03)
    if per_pair is None:
        brows.append(["unsampled path <= +25 instructions per malloc+free", "not measured", "MISS"])
    else:
        extra = ""
        if "cg_ying_off" in cg:
            extra = " (%s with sampling never firing)" % fnum(
                (cg["cg_ying_off"] - cg["cg_glibc"]) / cg_n, 1
            )
        brows.append(
            [
                "unsampled path <= +25 instructions per malloc+free",
                "+%s instructions/pair at the default interval%s" % (fnum(per_pair, 1), extra),
                verdict(per_pair <= 25),
            ]
        )
    ours, old = ratios.get(("rust-example", "ying-rust")), ratios.get(("rust-example", "ying-0.3.0"))
    if ours is None:
        brows.append(["Rust front end <= 1.05x of System, cheaper than 0.3.0", "not measured", "MISS"])
    else:
        ok = ours <= 1.05 and (old is None or ours < old)
        value = "%sx of System; 0.3.0: %s" % (
            fnum(ours),
            (fnum(old) + "x") if old is not None else "not measured",
        )
        brows.append(["Rust front end <= 1.05x of System, cheaper than 0.3.0", value, verdict(ok)])
    ratio_row("profile_spans on <= 1.05x of off (Rust cache workload)", "rust-spans", "spans-on", 1.05)
    # Keeping the program's allocator: YingProfiler<MiMalloc> at least 0.95x of mimalloc's
    # throughput (wall time at most 1/0.95 of it) and not below jemalloc with its profiler.
    yi, jp = ratios.get(("rust-alloc", "ying-mimalloc")), ratios.get(("rust-alloc", "jemalloc-rust+prof"))
    target = "Rust cache: YingProfiler<MiMalloc> >= 0.95x of mimalloc's throughput, not below jemalloc+prof's"
    if yi is None or jp is None:
        brows.append([target, "not measured", "MISS"])
    else:
        brows.append(
            [
                target,
                "%sx of mimalloc's throughput; jemalloc+prof %sx" % (fnum(1 / yi), fnum(1 / jp)),
                verdict(1 / yi >= 0.95 and yi <= jp),
            ]
        )
    yi, jp = svc_ratios.get(("closed", "ying-mimalloc")), svc_ratios.get(("closed", "jemalloc-rust+prof"))
    target = "service: YingProfiler<MiMalloc> >= 0.95x of mimalloc's throughput, not below jemalloc+prof's"
    if yi is None or jp is None:
        brows.append([target, "not measured", "MISS"])
    else:
        brows.append(
            [
                target,
                "%sx of mimalloc's throughput; jemalloc+prof %sx" % (fnum(yi), fnum(jp)),
                verdict(yi >= 0.95 and yi >= jp),
            ]
        )
    yi, jp = svc_ratios.get(("cg", "ying-mimalloc")), svc_ratios.get(("cg", "jemalloc-rust+prof"))
    target = ("service, instructions per request (callgrind): YingProfiler<MiMalloc> <= 1/0.95x "
              "of mimalloc's, not above jemalloc+prof's")
    if yi is None or jp is None:
        brows.append([target, "not measured", "MISS"])
    else:
        brows.append(
            [
                target,
                "%sx of mimalloc's instructions; jemalloc+prof %sx" % (fnum(yi), fnum(jp)),
                verdict(yi <= 1 / 0.95 and yi <= jp),
            ]
        )
    for workload, _, _ in MEMORY_ROWS:
        r = mem_ok.get(workload)
        target = "profiler memory <= 2 %% of peak RSS + 8 MiB (%s)" % workload
        if r is None:
            brows.append([target, "not measured", "MISS"])
        else:
            brows.append(
                [target, "%s MiB extra, budget %s MiB" % (fnum(r[1], 1), fnum(r[2], 1)),
                 verdict(r[0])]
            )
    if rs_ok is None:
        brows.append(["report set for 10k stacks < 2 MB and < 1 s", "not measured", "MISS"])
    else:
        brows.append(
            [
                "report set for 10k stacks < 2 MB and < 1 s",
                "%s bytes, %s s" % (fbytes(rs_ok[1]), fnum(rs_ok[2])),
                verdict(rs_ok[0]),
            ]
        )
    if ep_ok is None:
        brows.append(["one /debug/pprof/heap for 10k stacks < 200 ms and < 5 MiB", "not measured",
                      "MISS"])
    else:
        brows.append(
            [
                "one /debug/pprof/heap for 10k stacks < 200 ms and < 5 MiB",
                "%s ms, %s MiB" % (fnum(ep_ok[1], 1), fnum(ep_ok[2], 2)),
                verdict(ep_ok[0]),
            ]
        )
    if rmem_ok is None:
        brows.append(["report of ~100k stacks: its own profiler memory < 64 MiB", "not measured",
                      "MISS"])
    else:
        brows.append(
            [
                "report of ~100k stacks: its own profiler memory < 64 MiB",
                "%s MiB" % fnum(rmem_ok[1], 1),
                verdict(rmem_ok[0]),
            ]
        )
    md.append(table(["target", "measured", "verdict"], brows))
    md.append("")
    if m("quick") == "1":
        md.append(
            "Quick mode: %s pairs per variant and shorter workloads; the verdicts above are "
            "indicative only. Run the full command below for numbers to quote." % m("pairs", "?")
        )
        md.append("")
    if notes:
        md.append("## Notes")
        md.append("")
        for n in notes:
            md.append("- " + n)
        md.append("")

    md.append("## How to reproduce")
    md.append("")
    md.append("```sh")
    md.append("scripts/bench.sh           # full run: 11 pairs per variant (21 for budget rows), about 25-30 minutes on 2 cores")
    md.append("scripts/bench.sh --quick   # 3 pairs per variant, shorter workloads, a few minutes")
    md.append("```")
    md.append("")
    md.append(
        "The script installs `heaptrack`, `libjemalloc2` and `valgrind` from Debian if they are "
        "missing, builds `target/release/libying.so`, the C workloads (`bench/*.c`, into "
        "`target/bench/`), the Rust workload (`bench/rust-cache`, its own workspace, into "
        "`target/bench-rust-cache/`) and the service (`bench/rust-service`, into "
        "`target/bench-rust-service/`), runs everything and rewrites this file. The raw "
        "measurements stay in `target/bench/results.tsv`, `target/bench/service.tsv` and "
        "`target/bench/meta.tsv`. "
        "`cargo bench --bench micro` runs the micro-benchmarks of the hot-path pieces "
        "(`benches/micro.rs`) by hand."
    )
    md.append("")
    with open(out_path, "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    main()
