#!/usr/bin/env bash
# The test command: installs the test dependencies, builds every crate (the
# end-to-end tests run the built libraries and binary as real processes),
# then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's time goes to stderr at its end (the one-time installs of
# the first run are most of "setup").
phase_start=$SECONDS
phase_done() {
    echo "test: $1 took $((SECONDS - phase_start)) s" >&2
    phase_start=$SECONDS
}
bash scripts/setup.sh
phase_done setup
# One build from scratch has no use for incremental caches (2 GB or more of
# target/ on a full run); a developer's own cargo commands keep them.
export CARGO_INCREMENTAL=0
# One format for the whole tree (rustfmt.toml): a difference fails here,
# before anything is built.
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all -- --check
else
    echo "test: rustfmt is not installed; the format was not checked" >&2
fi
phase_done "format check"
cargo build --workspace
phase_done build
# The shim as images and installs get it: linked against glibc 2.17's
# symbols (tests/shim_glibc_floor.rs checks it loads and caps, here and on
# Debian 11's glibc 2.31, with a simgpu built the same way).
bash scripts/build-shim-portable.sh --with-simgpu
phase_done "glibc-2.17 build"
# Every crate, its tests and benchmarks are kept clippy-clean (warnings are
# errors); the shim also denies unwrap/expect/indexing (a panic in a
# preloaded library takes the user's job down), and clippy enforces that.
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --quiet --workspace --all-targets -- -D warnings
else
    echo "test: clippy is not installed; the shim's unwrap/expect/indexing lints were not checked" >&2
fi
phase_done clippy
# cargo prints one result line per test binary, the last often a crate's
# empty doc-test run; close with the totals of all of them.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
phase_done tests
awk '/^test result:/ { passed += $4; failed += $6 } END { printf "%d passed, %d failed\n", passed, failed }' "$log"
exit "$status"
