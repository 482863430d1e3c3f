#!/usr/bin/env bash
# Builds libgpuslice.so so that it loads on glibc 2.17 and later (CentOS 7,
# RHEL 8, Ubuntu 20.04 images, …), not only on the glibc of the build host.
# A shim the loader cannot preload is ignored with one line on stderr, and
# the job runs uncapped: so the shim that goes into images and installs is
# this one.
#
#   scripts/build-shim-portable.sh [--release] [--print-path] [--with-simgpu]
#
# The library lands in target/glibc-floor/<triple>/<profile>/libgpuslice.so
# (CARGO_TARGET_DIR/glibc-floor when that is set). It is linked by zig's C
# compiler against glibc 2.17's symbols (scripts/zig-cc.sh); without zig it
# fails, saying how to get it. --print-path prints the library's path and
# nothing else on stdout. --with-simgpu also builds simgpu's libsimgpu.so
# the same way, beside it: the test that runs the shim on an older glibc
# needs a driver that loads there too.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug
flags=()
print_path=0
packages=(-p gpuslice-shim)
for arg in "$@"; do
    case "$arg" in
        --release) profile=release; flags+=(--release) ;;
        --print-path) print_path=1 ;;
        --with-simgpu) packages+=(-p simgpu) ;;
        *) echo "build-shim-portable: unknown option ${arg@Q}; expected --release, --print-path or --with-simgpu" >&2; exit 2 ;;
    esac
done
case "$(uname -m)" in
    x86_64) triple=x86_64-unknown-linux-gnu ;;
    aarch64|arm64) triple=aarch64-unknown-linux-gnu ;;
    *) echo "build-shim-portable: no glibc-floor build for $(uname -m)" >&2; exit 1 ;;
esac
if ! scripts/zig-cc.sh --version >/dev/null 2>&1; then
    echo "build-shim-portable: zig is needed to link against glibc 2.17 and was not found: run scripts/setup.sh (it installs the ziglang wheel into .deps/venv), install zig, or set GPUSLICE_ZIG" >&2
    exit 1
fi
target=${CARGO_TARGET_DIR:-target}/glibc-floor
linker_var="CARGO_TARGET_$(echo "$triple" | tr 'a-z-' 'A-Z_')_LINKER"
env "$linker_var=$PWD/scripts/zig-cc.sh" CARGO_TARGET_DIR="$target" \
    cargo build --quiet "${flags[@]}" "${packages[@]}" --target "$triple" >&2
lib=$target/$triple/$profile/libgpuslice.so
if [ "$print_path" = 1 ]; then
    echo "$lib"
else
    echo "build-shim-portable: $lib (loads on glibc 2.17 and later)" >&2
fi
