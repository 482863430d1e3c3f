#!/bin/sh
# The linker for a shim that loads on glibc 2.17 and later: zig's C
# compiler, which links against the symbols of the glibc version named in
# its target (here 2.17, the oldest Rust supports), so that every symbol the
# library imports carries a version that glibc has had since then. Used by
# scripts/build-shim-portable.sh through CARGO_TARGET_<TRIPLE>_LINKER.
#
# zig comes from $GPUSLICE_ZIG, else the ziglang wheel in .deps/venv
# (scripts/setup.sh installs it), else `zig` on PATH.
set -eu
floor=${GPUSLICE_GLIBC_FLOOR:-2.17}
case "$(uname -m)" in
    x86_64) arch=x86_64 ;;
    aarch64|arm64) arch=aarch64 ;;
    *) echo "zig-cc: $(uname -m) is not a target this script knows (x86_64, aarch64)" >&2; exit 1 ;;
esac
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${GPUSLICE_ZIG:-}" ]; then
    exec "$GPUSLICE_ZIG" cc -target "$arch-linux-gnu.$floor" "$@"
elif [ -x "$here/.deps/venv/bin/python" ] && "$here/.deps/venv/bin/python" -c 'import ziglang' 2>/dev/null; then
    exec "$here/.deps/venv/bin/python" -m ziglang cc -target "$arch-linux-gnu.$floor" "$@"
else
    exec zig cc -target "$arch-linux-gnu.$floor" "$@"
fi
