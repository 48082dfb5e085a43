#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Go's pprof tool,
# the allocators tests/chained.rs chains the shim to...), then runs formatting, lints, docs, the
# library tests, the LD_PRELOAD tests and compiles the benchmarks. The same script is what CI
# runs (.ci/run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each stage with the time it started, so that a slow stage shows in the log.
stage() { echo "== [$(date +%T)] $*"; }

# apt_install WHY PACKAGE...: installs the Debian packages (as root, or through sudo), saying
# which and WHY.
apt_install() {
    local why=$1
    shift
    local packages="$*"
    local -a sudo=()
    stage "installing ${packages// / and } ($why)"
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# install_missing WHY "COMMAND..." PACKAGE...: when one of the commands is missing, installs the
# Debian packages, saying which and WHY.
install_missing() {
    local why=$1 commands=$2 cmd
    shift 2
    for cmd in $commands; do
        if ! command -v "$cmd" >/dev/null 2>&1; then
            apt_install "$why" "$@"
            return
        fi
    done
}

# install_missing_files WHY "FILE..." PACKAGE...: the same for packages that install no command
# (shared libraries): when one of the files is missing, installs the packages.
install_missing_files() {
    local why=$1 files=$2 file
    shift 2
    for file in $files; do
        if [ ! -e "$file" ]; then
            apt_install "$why" "$@"
            return
        fi
    done
}

install_missing "tests read pprof files with go tool pprof" go golang-go
install_missing "the peak test runs an in-memory table under the shim" sqlite3 sqlite3
install_missing "tests/html_report.rs opens the HTML report in headless Chromium and its summary in lynx" \
    "chromium lynx" chromium lynx
install_missing "the endpoint tests ask the profiled programs with curl" curl curl
lib=/usr/lib/x86_64-linux-gnu
install_missing_files "tests/chained.rs chains the shim to jemalloc, tcmalloc and mimalloc" \
    "$lib/libjemalloc.so.2 $lib/libtcmalloc.so.4 $lib/libtcmalloc_minimal.so.4 $lib/libmimalloc.so.2" \
    libjemalloc2 libgoogle-perftools4 libtcmalloc-minimal4 libmimalloc2.0

stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy (default features, then all features)"
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --all-features -- -D warnings
stage "cargo doc (the manual: ying_profiler's crate docs, every feature, no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features
stage "build libying.so and the ying command"
cargo build --release -p ying-preload -p ying-cli
stage "library, integration and doc tests"
cargo test --workspace --exclude preload-tests
stage "the 10k-stack, 100-dump HTML page (optimized: minutes unoptimized)"
cargo test --release --test html_report ten_thousand
stage "profile_spans feature"
cargo test --features profile_spans --lib --test spans_attribution --test spans_teardown --test example_service
stage "LD_PRELOAD tests"
YING_TEST_PRELOAD="$PWD/target/release/libying.so" cargo test -p preload-tests -- --skip cpython_suite_
stage "CPython's own suites under the shim (one at a time: they start hundreds of interpreters)"
YING_TEST_PRELOAD="$PWD/target/release/libying.so" cargo test -p preload-tests --test cpython_suites -- --test-threads=1
stage "benchmarks compile"
cargo bench --no-run --quiet
stage "all tests passed"
