#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Go's pprof tool,
# the allocators tests/chained.rs chains the shim to...), then runs formatting, lints (which
# type-check the benchmarks), docs, the library tests and the LD_PRELOAD tests. The same script
# is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each stage with the time it started, so that a slow stage shows in the log.
stage() { echo "== [$(date +%T)] $*"; }

# What is missing, gathered first so that a fresh machine pays for one `apt-get update` and one
# install (each was its own update before, about 10 s apiece).
missing=()
reasons=()

# need_commands WHY "COMMAND..." PACKAGE...: when one of the commands is missing, the packages
# are installed, for WHY.
need_commands() {
    local why=$1 commands=$2 cmd
    shift 2
    for cmd in $commands; do
        if ! command -v "$cmd" >/dev/null 2>&1; then
            missing+=("$@")
            reasons+=("$why")
            return
        fi
    done
}

# need_files WHY "FILE..." PACKAGE...: the same for packages that install no command (shared
# libraries): when one of the files is missing, the packages are installed.
need_files() {
    local why=$1 files=$2 file
    shift 2
    for file in $files; do
        if [ ! -e "$file" ]; then
            missing+=("$@")
            reasons+=("$why")
            return
        fi
    done
}

need_commands "tests read pprof files with go tool pprof" go golang-go
need_commands "the peak test runs an in-memory table under the shim" sqlite3 sqlite3
need_commands "tests/html_report.rs opens the HTML report in headless Chromium and its summary in lynx" \
    "chromium lynx" chromium lynx
need_commands "the endpoint tests ask the profiled programs with curl" curl curl
need_commands "preload-tests/tests/push.rs decodes pushed profiles with npm's pprof-format" \
    "node npm" nodejs npm
need_commands "tests/debugger.rs stops gdb inside glibc's allocator under the shim" gdb gdb
need_commands "cli/tests/debuginfo.rs fetches a debug file from a local debuginfod server" \
    "debuginfod debuginfod-find" debuginfod
lib=/usr/lib/x86_64-linux-gnu
need_files "tests/chained.rs chains the shim to jemalloc, tcmalloc and mimalloc" \
    "$lib/libjemalloc.so.2 $lib/libtcmalloc.so.4 $lib/libtcmalloc_minimal.so.4 $lib/libmimalloc.so.2" \
    libjemalloc2 libgoogle-perftools4 libtcmalloc-minimal4 libmimalloc2.0
need_files "tests/other_preloads.rs preloads libfaketime beside the shim" \
    "$lib/faketime/libfaketime.so.1" libfaketime

if ! python3 -m pip --version >/dev/null 2>&1; then
    missing+=(python3-pip)
    reasons+=("preload-tests/tests/otlp.rs installs the OpenTelemetry protos for Python with pip")
fi

if [ ${#missing[@]} -gt 0 ]; then
    stage "installing ${missing[*]}"
    for why in "${reasons[@]}"; do
        echo "   ($why)"
    done
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# preload-tests/tests/otlp.rs decodes the shim's OTLP pushes with the OpenTelemetry project's
# own Python package (its official .proto files compiled by protobuf) and serves its gRPC
# service with grpcio, kept under target/.
otlp_python=target/otlp-python
if [ ! -d "$otlp_python/opentelemetry/proto/profiles" ] || [ ! -d "$otlp_python/grpc" ]; then
    stage "installing opentelemetry-proto and grpcio for Python into $otlp_python"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        --upgrade --target "$otlp_python" opentelemetry-proto==1.45.2 grpcio==1.85.4
fi

# preload-tests/tests/push.rs decodes pushed profiles with npm's pprof-format too.
npm_pprof=target/npm-pprof
if [ ! -d "$npm_pprof/node_modules/pprof-format" ]; then
    stage "installing pprof-format (npm) into $npm_pprof"
    npm install --silent --no-audit --no-fund --prefix "$npm_pprof" pprof-format@2.3.2
fi

# Every stage runs even when one before it failed (a flake in one test binary must not hide the
# rest: each test stage also runs every test binary, --no-fail-fast), and the end says which
# stages failed; the script fails if any did.
failed=()
run() {
    if ! "$@"; then
        failed+=("$current: $*")
        echo "== [$(date +%T)] FAILED: $*"
    fi
}
begin() {
    current=$1
    stage "$1"
}
preload=(env YING_TEST_PRELOAD="$PWD/target/release/libying.so")

begin "cargo fmt --check"
run cargo fmt --all -- --check
# --all-targets type-checks the benchmarks too (benches/, preload/benches): a separate
# `cargo bench --no-run` compiled them optimized again for 70 s and checked nothing more.
begin "cargo clippy (default features, then all features; benchmarks included)"
run cargo clippy --workspace --all-targets -- -D warnings
run cargo clippy --workspace --all-targets --all-features -- -D warnings
begin "cargo doc (the manual: ying_profiler's crate docs, every feature, no warnings)"
run env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features
begin "build libying.so and the ying command"
run cargo build --release -p ying-preload -p ying-cli
begin "library, integration and doc tests"
run cargo test --no-fail-fast --workspace --exclude preload-tests
begin "the 10k-stack, 100-dump HTML page and 400 report sets' memory (optimized: minutes unoptimized)"
run cargo test --release --test html_report ten_thousand
run cargo test --release --test report_soak
begin "profile_spans feature"
run cargo test --no-fail-fast --features profile_spans --lib --test spans_attribution \
    --test spans_teardown --test example_service
begin "otlp-grpc feature (OTLP/gRPC pushes of the Rust front end)"
run cargo test --no-fail-fast --features otlp-grpc --test otlp_grpc
begin "LD_PRELOAD tests"
run "${preload[@]}" cargo test --no-fail-fast -p preload-tests -- --skip cpython_suite_
begin "CPython's own suites under the shim (one at a time: they start hundreds of interpreters)"
run "${preload[@]}" cargo test -p preload-tests --test cpython_suites -- --test-threads=1
if [ "${#failed[@]}" -gt 0 ]; then
    stage "FAILED: ${#failed[@]} step(s) (every stage ran)"
    for f in "${failed[@]}"; do
        echo "   $f"
    done
    exit 1
fi
stage "all tests passed"
