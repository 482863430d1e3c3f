#!/usr/bin/env bash
# The test command: installs the test dependencies, builds every crate (the
# end-to-end tests run the built libraries and binary as real processes),
# then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace
# The shim denies unwrap/expect/indexing (a panic in a preloaded library
# takes the user's job down); clippy is what enforces that.
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --quiet -p gpuslice-shim
else
    echo "test: clippy is not installed; the shim's unwrap/expect/indexing lints were not checked" >&2
fi
cargo test --workspace "$@"
