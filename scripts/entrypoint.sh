#!/usr/bin/env bash
# Container entrypoint: runs the command under the gpuslice shim.
#
#   ENTRYPOINT ["/usr/local/bin/gpuslice-entrypoint"]    (scripts/install.sh installs it there)
#   CMD ["python", "train.py"]
#
# Preloads the shim GPUSLICE_LIB names when it is set (the variable is then
# removed from the command's environment), else the libgpuslice.so installed
# beside this script (PREFIX/lib/gpuslice/ for PREFIX/bin/), ahead of any
# LD_PRELOAD the image already sets, then execs the command, which keeps
# its pid (signals reach it directly). The caps come from the environment
# (GPUSLICE_MEMORY_LIMIT, GPUSLICE_TENANT, … or HAMi's CUDA_DEVICE_MEMORY_LIMIT).
# A missing library, or one the loader cannot preload here, is refused
# rather than run without the shim: a process that silently skipped it would
# run without its cap.
set -euo pipefail

if [ $# -eq 0 ]; then
    echo "gpuslice-entrypoint: no command given; usage: gpuslice-entrypoint CMD [ARGS...]" >&2
    exit 2
fi

if [ -n "${GPUSLICE_LIB:-}" ]; then
    lib=$GPUSLICE_LIB
    source="GPUSLICE_LIB"
else
    here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
    lib=$here/../lib/gpuslice/libgpuslice.so
    source="the install prefix (set GPUSLICE_LIB to name it)"
fi
if [ ! -f "$lib" ]; then
    echo "gpuslice-entrypoint: the gpuslice shim $lib (from $source) is missing; refusing to run ${1@Q} without it" >&2
    exit 1
fi
lib=$(readlink -f "$lib")
# The loader splits LD_PRELOAD at colons and spaces.
case "$lib" in
    *[:\ ]*)
        echo "gpuslice-entrypoint: the shim's path ${lib@Q} contains a colon or a space, which LD_PRELOAD cannot hold" >&2
        exit 1
        ;;
esac

# A library the loader cannot preload (a glibc older than it needs,
# another architecture) is skipped with one line on stderr, and the command
# would run uncapped: check that it loads, as the command will load it.
# With gpuslice beside this script, positively (the shim's own symbol is
# there); else by the loader's word.
probe_gpuslice=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/gpuslice
if [ -x "$probe_gpuslice" ]; then
    if ! said=$(LD_PRELOAD="$lib" "$probe_gpuslice" shim-probe 2>&1); then
        echo "gpuslice-entrypoint: the shim $lib is not loaded into programs here${said:+ ($said)}; refusing to run ${1@Q} without its cap" >&2
        exit 1
    fi
elif said=$(LD_PRELOAD="$lib" /bin/sh -c : 2>&1 >/dev/null) && [ -n "$said" ] && [[ "$said" == *"cannot be preloaded"* ]]; then
    echo "gpuslice-entrypoint: the shim $lib is not loaded into programs here ($said); refusing to run ${1@Q} without its cap" >&2
    exit 1
fi

export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
# The shim refuses GPUSLICE_ variables it does not read (a misspelt one must
# not mean no cap), and GPUSLICE_LIB is this script's alone.
unset GPUSLICE_LIB
exec "$@"
