#!/usr/bin/env bash
# Builds the container images of the Kubernetes test cluster, with no
# registry at hand, as OCI image archives in .deps/k8s/images/:
#   pause.tar     registry.k8s.io/pause (scripts/k8s/versions.env): the
#                 release's own pause.c, the only file of its image
#   gpuslice.tar  localhost/gpuslice:dev, from deploy/Dockerfile: the
#                 monitor, gpuslice-dra and the shim linked against glibc
#                 2.17's symbols (release build)
#   client.tar    localhost/gpuslice-client:dev, from tests/k8s/client.Dockerfile:
#                 Debian 11 (glibc 2.31, older than the shim's build host)
#                 with the C clients memctl, compute_load and skip_gate; the
#                 driver comes from a node's CDI spec, as NVIDIA's mounts the
#                 real one (a copy of simgpu off the loader's path serves
#                 pods without a claim)
# and simgpu for the nodes, in .deps/k8s/simgpu/libsimgpu.so (glibc 2.17).
#
# podman builds them (Debian's; no Docker engine is needed) from base
# file systems that debootstrap makes from Debian's archive, cached in
# .deps/k8s/rootfs/. scripts/k8s-cluster.sh imports the archives into each
# node's containerd.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
source scripts/k8s/versions.env
deps=$root/.deps/k8s
out=$deps/images
mkdir -p "$out" "$deps/rootfs" "$deps/simgpu"
say() { echo "k8s-images: $*" >&2; }
started=$SECONDS

for tool in podman debootstrap; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        say "installing $tool"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
    fi
done
[ -x "$deps/bin/pause" ] || { say "$deps/bin/pause is missing: run scripts/k8s/build.sh first"; exit 1; }
# runc: crun refuses this machine's hybrid cgroup hierarchy.
podman=(podman --runtime runc)

# base SUITE: a minimal Debian SUITE root file system as podman image
# localhost/gpuslice-base:SUITE (debootstrap once, cached as a tar).
base() {
    local suite=$1 tar=$deps/rootfs/$1.tar
    if [ ! -s "$tar" ]; then
        say "debootstrap $suite (a minimal Debian root file system, about 30 s)"
        local dir
        dir=$(mktemp -d "$deps/rootfs/$suite.XXXX")
        debootstrap --variant=minbase "$suite" "$dir" http://deb.debian.org/debian >"$deps/rootfs/$suite.log" 2>&1 || {
            say "debootstrap $suite failed; its log: $deps/rootfs/$suite.log"
            tail -5 "$deps/rootfs/$suite.log" >&2
            exit 1
        }
        # No package caches or lists in an image.
        rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
        tar -C "$dir" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
        rm -rf "$dir"
    fi
    if ! "${podman[@]}" image exists "localhost/gpuslice-base:$suite"; then
        "${podman[@]}" import --quiet "$tar" "localhost/gpuslice-base:$suite" >/dev/null
    fi
}

# save IMAGE FILE: an archive containerd's `ctr images import` reads, with
# the image's full name.
save() {
    rm -f "$2.tmp"
    "${podman[@]}" save --quiet --format docker-archive -o "$2.tmp" "$1"
    mv "$2.tmp" "$2"
}

# The pause image: one static program.
say "pause image ($PAUSE_IMAGE)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pause"
cp "$deps/bin/pause" "$work/pause/pause"
tar -C "$work/pause" -cf "$work/pause.tar" pause
"${podman[@]}" import --quiet --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535' "$work/pause.tar" "$PAUSE_IMAGE" >/dev/null
save "$PAUSE_IMAGE" "$out/pause.tar"

# gpuslice: the release build installed under a prefix, then the
# Dockerfile's prebuilt path (deploy/Dockerfile).
say "building gpuslice (release, and the shim and simgpu for glibc 2.17)"
cargo build --quiet --release -p gpuslice-monitor -p gpuslice-shim -p simgpu -p gpuslice-dra
bash scripts/build-shim-portable.sh --release --with-simgpu
target=${CARGO_TARGET_DIR:-target}
portable=$target/glibc-floor/x86_64-unknown-linux-gnu/release
context=$work/gpuslice
mkdir -p "$context/prebuilt"
bash scripts/install.sh --no-build --prefix "$context/prebuilt/usr/local" >/dev/null
# The node's simulated driver, for glibc 2.17 and later (the client image
# has 2.31).
install -m 0755 "$portable/libsimgpu.so" "$deps/simgpu/libsimgpu.so"
base "$IMAGE_BASE_SUITE"
say "image localhost/gpuslice:dev (deploy/Dockerfile)"
"${podman[@]}" build --quiet --pull=never -f deploy/Dockerfile --build-arg ARTIFACTS=prebuilt \
    --build-arg "BASE_IMAGE=localhost/gpuslice-base:$IMAGE_BASE_SUITE" -t localhost/gpuslice:dev "$context" >/dev/null
save localhost/gpuslice:dev "$out/gpuslice.tar"

# The client: C programs linked for glibc 2.17 (zig), against simgpu's
# soname libcuda.so.1 and NVML's libnvidia-ml.so.1.
say "image localhost/gpuslice-client:dev (tests/k8s/client.Dockerfile)"
client=$work/client
mkdir -p "$client/bin" "$client/stubs"
ln -s "$root/$portable/libsimgpu.so" "$client/stubs/libcuda.so"
ln -s "$root/$portable/libsimgpu.so" "$client/stubs/libnvidia-ml.so"
# (--allow-shlib-undefined: simgpu names symbols newer than 2.17, weakly;
# the programs never load it on such a glibc, the node mounts it.)
for program in memctl compute_load skip_gate; do
    scripts/zig-cc.sh -O2 -Wall -I "$root/.deps/include" -I "$root/tests/c" -o "$client/bin/$program" "tests/c/$program.c" \
        -L "$client/stubs" -lcuda -lnvidia-ml -lpthread -ldl -lm -Wl,--allow-shlib-undefined
done
# simgpu too, off the loader's path: a pod with no claim (and so no
# driver from the node) points LD_LIBRARY_PATH at it, as the baseline of
# benches/k8s_startup.rs.
mkdir -p "$client/lib"
install -m 0755 "$portable/libsimgpu.so" "$client/lib/libcuda.so.1"
ln -sf libcuda.so.1 "$client/lib/libnvidia-ml.so.1"
cp tests/k8s/client.Dockerfile "$client/Dockerfile"
base "$CLIENT_BASE_SUITE"
"${podman[@]}" build --quiet --pull=never --build-arg "BASE_IMAGE=localhost/gpuslice-base:$CLIENT_BASE_SUITE" \
    -t localhost/gpuslice-client:dev "$client" >/dev/null
save localhost/gpuslice-client:dev "$out/client.tar"
say "images in $out ($((SECONDS - started)) s)"
