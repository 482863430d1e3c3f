#!/usr/bin/env bash
# Opt-in: what PyTorch sees on simgpu, bare and under a 1 GiB cap
# (torch.cuda.mem_get_info, torch.empty up to torch.OutOfMemoryError,
# torch.cuda.memory_reserved), for a look by hand; the test command trains
# models with the same PyTorch (tests/simgpu_models.rs). Installs it into
# .deps/torch-venv (pinned, as scripts/setup.sh does), builds gpuslice, and runs
# tests/python/torch_check.py twice on a simulated 16 GiB GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TORCH_VENV:-.deps/torch-venv}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'torch==2.15.0'
fi
cargo build --workspace --quiet
bin=target/debug/gpuslice
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SIMGPU_STATE="$work/simgpu.state" SIMGPU_MEMORY=16GiB
echo "== PyTorch on simgpu, bare (16 GiB)"
"$bin" sim -- "$venv/bin/python" tests/python/torch_check.py
echo
echo "== PyTorch under gpuslice, capped at 1 GiB"
"$bin" run --sim --memory 1GiB --tenant torch --dir "$work/ledger" -- "$venv/bin/python" tests/python/torch_check.py
