#!/usr/bin/env bash
# The test command: installs the test dependencies, builds every crate (the
# end-to-end tests run the built libraries and binary as real processes),
# then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace
cargo test --workspace "$@"
