#!/usr/bin/env bash
# Clippy over every crate, its tests and benchmarks, warnings as errors
# (CI runs it after the test command, .ci/run). The shim also denies
# unwrap/expect/indexing: a panic in a preloaded library takes the user's
# job down, and clippy is what enforces that.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
start=$SECONDS
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
    echo "lint: installing clippy (rustup component add clippy)" >&2
    rustup component add clippy >&2 || true
fi
if ! cargo clippy --version >/dev/null 2>&1; then
    echo "lint: clippy is not installed (rustup component add clippy); the shim's unwrap/expect/indexing lints cannot be checked" >&2
    exit 1
fi
cargo clippy --quiet --workspace --all-targets -- -D warnings
echo "lint: clippy took $((SECONDS - start)) s" >&2
