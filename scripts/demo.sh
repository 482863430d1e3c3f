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
echo "demo: fetching gcc and NVIDIA's CUDA headers if missing (first run only)" >&2
bash scripts/setup.sh --demo >/dev/null
echo "demo: building gpuslice, its shim and the simulated GPU (release; a few minutes the first time)" >&2
cargo build --release --quiet -p gpuslice-monitor -p gpuslice-shim -p simgpu
echo "demo: built; starting" >&2
bin=target/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/gpuslice" sim -- true # lays out $bin/simgpu-libs (libcuda.so -> libsimgpu.so) to link against
gcc -O2 -I .deps/include examples/cap_demo.c -o "$work/cap_demo" -L "$bin/simgpu-libs" -lcuda
export SIMGPU_STATE="$work/simgpu.state" SIMGPU_MEMORY=16GiB
echo "== without gpuslice: the whole simulated GPU"
"$bin/gpuslice" sim -- "$work/cap_demo"
echo
echo "== under gpuslice, tenant 'demo' capped at 1 GiB"
"$bin/gpuslice" run --sim --memory 1GiB --tenant demo --dir "$work/ledger" -- "$work/cap_demo"
echo
echo "== gpuslice demo: tenants sharing one simulated GPU"
"$bin/gpuslice" demo
