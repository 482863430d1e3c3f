#!/usr/bin/env bash
# Mutation testing of the ledger crate: cargo-mutants changes the crate's
# code one small way at a time (a `<` for a `<=`, a function body for a
# constant) and runs the ledger's own tests on each change; a change no
# test fails on ("missed") is behaviour the tests do not pin down. A
# report, not a test: it takes far longer than the test command and is
# not part of it.
#
#   scripts/mutants.sh                     # every mutant of the ledger crate
#   scripts/mutants.sh -f ledger/src/slots.rs -f ledger/src/audit.rs
#   scripts/mutants.sh --list              # what would run
#
# Further arguments go to cargo-mutants. Results are in
# target/mutants/mutants.out (missed.txt, timeout.txt, caught.txt,
# unviable.txt, outcomes.json). Installs the pinned cargo-mutants when
# another version, or none, is on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

version=27.1.0
if [ "$(cargo mutants --version 2>/dev/null)" != "cargo-mutants $version" ]; then
    cargo install --locked cargo-mutants --version "$version"
fi
# Only the ledger's tests judge its mutants (--test-workspace=false): the
# end-to-end tests need built binaries of each mutant and take minutes.
exec cargo mutants \
    --package gpuslice-ledger \
    --test-workspace=false \
    --output target/mutants \
    "$@"
