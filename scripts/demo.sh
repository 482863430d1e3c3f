#!/usr/bin/env bash
# The quick-start demo: builds gpuslice, runs examples/cap_demo.c on the
# simulated GPU (a 16 GiB simgpu), first bare and then under a 1 GiB cap,
# then `gpuslice demo`: tenants sharing one simulated GPU under a monitor
# (a training job with a share, an inference service at a higher priority,
# a capped notebook, two queued jobs), live for about 20 s, with a summary
# and a chart in ./gpuslice-demo.svg.
# On a host with an NVIDIA GPU, drop --sim / `gpuslice sim` to use the real one.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo needs (gcc, NVIDIA's headers), not the test suite's
# frameworks; each step says what it does, since the first build takes
# minutes.
#
# DEMO_BIN=DIR runs the demo with what is already built in DIR (no setup,
# no build), and DEMO_LIVE=0 leaves out `gpuslice demo`: the test of the
# README's demo block runs this script so.
if [ -n "${DEMO_BIN:-}" ]; then
    bin=$DEMO_BIN
else
    echo "demo: fetching gcc and NVIDIA's CUDA headers if missing (first run only)" >&2
    bash scripts/setup.sh --demo >/dev/null
    echo "demo: building gpuslice, its shim and the simulated GPU (release; a few minutes the first time)" >&2
    cargo build --release --quiet -p gpuslice-monitor -p gpuslice-shim -p simgpu
    echo "demo: built; starting" >&2
    bin=target/release
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The ledger directory the capped run uses (the shim refuses one that does
# not exist: a misspelt GPUSLICE_DIR must not scatter ledgers).
mkdir "$work/ledger"
"$bin/gpuslice" sim -- true # lays out $bin/simgpu-libs (libcuda.so -> libsimgpu.so) to link against
gcc -O2 -I .deps/include examples/cap_demo.c -o "$work/cap_demo" -L "$bin/simgpu-libs" -lcuda
export SIMGPU_STATE="$work/simgpu.state" SIMGPU_MEMORY=16GiB
echo "== without gpuslice: the whole simulated GPU"
"$bin/gpuslice" sim -- "$work/cap_demo"
echo
echo "== under gpuslice, tenant 'demo' capped at 1 GiB"
"$bin/gpuslice" run --sim --memory 1GiB --tenant demo --dir "$work/ledger" -- "$work/cap_demo"
echo
if [ "${DEMO_LIVE:-1}" != 0 ]; then
    echo "== gpuslice demo: tenants sharing one simulated GPU"
    "$bin/gpuslice" demo
fi
