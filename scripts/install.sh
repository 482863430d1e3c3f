#!/usr/bin/env bash
# Builds gpuslice and installs it under a prefix (default /usr/local):
#   PREFIX/bin/gpuslice                   the command (run, sim, monitor, status)
#   PREFIX/bin/gpuslice-entrypoint        the container entrypoint (scripts/entrypoint.sh)
#   PREFIX/bin/gpuslice-dra               the Kubernetes DRA kubelet plugin (deploy/kubernetes/)
#   PREFIX/lib/gpuslice/libgpuslice.so    the shim
#   PREFIX/lib/gpuslice/libsimgpu.so      the simulated GPU, for `gpuslice run --sim` and `gpuslice sim`
#   PREFIX/lib/gpuslice/simgpu-libs/      libcuda.so.1 and libnvidia-ml.so.1 linked to it
#   PREFIX/share/doc/gpuslice/            the README, its guides (docs/) and the deployment guides
# The installed gpuslice finds its libraries in ../lib/gpuslice beside itself:
# no environment variable is needed. The simgpu-libs links are made here, so
# that `--sim` works for users who cannot write to the prefix.
#
# Usage: scripts/install.sh [--prefix DIR] [--profile release|debug] [--no-build]
#   --profile debug   install cargo's debug build (quick to build; for tests)
#   --no-build        install what is already built in the target directory
#                     (CARGO_TARGET_DIR, default target/) instead of building
set -euo pipefail

prefix=/usr/local
profile=release
build=1
usage="usage: scripts/install.sh [--prefix DIR] [--profile release|debug] [--no-build]"
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix)
            [ $# -ge 2 ] && [ -n "$2" ] || { echo "install: --prefix needs a directory; $usage" >&2; exit 2; }
            prefix=$2
            shift 2
            ;;
        --prefix=*)
            prefix=${1#--prefix=}
            [ -n "$prefix" ] || { echo "install: --prefix needs a directory; $usage" >&2; exit 2; }
            shift
            ;;
        --profile)
            [ $# -ge 2 ] || { echo "install: --profile needs release or debug; $usage" >&2; exit 2; }
            profile=$2
            shift 2
            ;;
        --profile=*)
            profile=${1#--profile=}
            shift
            ;;
        --no-build)
            build=0
            shift
            ;;
        -h|--help)
            echo "$usage"
            exit 0
            ;;
        *)
            echo "install: unknown option ${1@Q}; $usage" >&2
            exit 2
            ;;
    esac
done
case "$profile" in
    release|debug) ;;
    *) echo "install: --profile ${profile@Q}: expected release or debug" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
repo=$(pwd)
target=${CARGO_TARGET_DIR:-target}
case "$target" in /*) ;; *) target=$repo/$target ;; esac
built=$target/$profile

if [ "$build" = 1 ]; then
    flags=()
    [ "$profile" = release ] && flags+=(--release)
    cargo build "${flags[@]}" -p gpuslice-monitor -p gpuslice-shim -p simgpu -p gpuslice-dra
    # The shim that loads on glibc 2.17 and later, where zig can link it.
    bash scripts/build-shim-portable.sh "${flags[@]}" ||
        echo "install: the shim is linked against this host's glibc only; images with an older glibc will not load it" >&2
fi
case "$(uname -m)" in
    aarch64|arm64) triple=aarch64-unknown-linux-gnu ;;
    *) triple=x86_64-unknown-linux-gnu ;;
esac
shim=$built/libgpuslice.so
portable=$target/glibc-floor/$triple/$profile/libgpuslice.so
[ -f "$portable" ] && shim=$portable
for artefact in gpuslice gpuslice-dra libgpuslice.so libsimgpu.so; do
    if [ ! -f "$built/$artefact" ]; then
        echo "install: $built/$artefact is missing; build it (drop --no-build) or set CARGO_TARGET_DIR" >&2
        exit 1
    fi
done

lib=$prefix/lib/gpuslice
install -d "$prefix/bin" "$lib" "$lib/simgpu-libs"
install -m 0755 "$built/gpuslice" "$prefix/bin/gpuslice"
install -m 0755 scripts/entrypoint.sh "$prefix/bin/gpuslice-entrypoint"
install -m 0755 "$built/gpuslice-dra" "$prefix/bin/gpuslice-dra"
install -m 0755 "$shim" "$lib/libgpuslice.so"
# What the systemd unit's Documentation= names, and the guides beside it.
doc=$prefix/share/doc/gpuslice
install -d "$doc"
install -m 0644 README.md "$doc/README.md"
# The README links its guides as docs/*.md: the same place here.
install -d "$doc/docs"
install -m 0644 docs/*.md docs/*.svg "$doc/docs/"
for guide in deploy/*.md deploy/kubernetes/README.md deploy/slurm/README.md; do
    [ -f "$guide" ] || continue
    install -m 0644 "$guide" "$doc/$(echo "${guide#deploy/}" | tr / -)"
done
install -m 0755 "$built/libsimgpu.so" "$lib/libsimgpu.so"
# gpuslice accepts these links only when they point at the canonical path of
# libsimgpu.so (and otherwise rewrites them, which needs a writable prefix).
simgpu=$(readlink -f "$lib/libsimgpu.so")
for name in libcuda.so.1 libcuda.so libnvidia-ml.so.1 libnvidia-ml.so; do
    ln -sfn "$simgpu" "$lib/simgpu-libs/$name"
done
echo "install: gpuslice ($profile) in $prefix/bin, its libraries in $lib (the shim from $shim)"
