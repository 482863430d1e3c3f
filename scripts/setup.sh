#!/usr/bin/env bash
# Installs what the tests need (idempotent): gcc and unshare when missing,
# and into .deps/:
#   .deps/include/{cuda.h,cudaTypedefs.h,nvml.h}  the authoritative headers,
#       from NVIDIA's nvidia-cuda-runtime and nvidia-nvml-dev wheels;
#   .deps/lib/libcudart.so.13  NVIDIA's CUDA runtime 13.5, from the same
#       nvidia-cuda-runtime wheel (tests/frameworks.rs drives it on simgpu);
#   .deps/venv  a Python virtualenv with NVIDIA's own clients, cuda-bindings
#       and nvidia-ml-py, and the frameworks CuPy, numba-cuda and cuda.core,
#       which the end-to-end tests drive against simgpu;
#   .deps/torch-venv and .deps/jax-venv  PyTorch and JAX, each with the
#       NVIDIA libraries it pins.
# Versions are pinned: the tests hold the shim's cuGetProcAddress table to
# this cudaTypedefs.h, and a newer header may add variants.
#
# `setup.sh --demo` installs only what scripts/demo.sh needs: gcc and the
# headers (and the small venv that fetches them).
set -euo pipefail
cd "$(dirname "$0")/.."
deps=.deps
mkdir -p "$deps/include" "$deps/wheels"
# The wheels below come to some 12 GB installed (PyTorch and JAX each carry
# their own NVIDIA libraries); a copy of each download in pip's cache would
# take several GB more, for a set-up that runs once per checkout.
export PIP_NO_CACHE_DIR=1
# pip unpacks each wheel in a temporary directory before installing it; the
# largest (PyTorch's and JAX's NVIDIA libraries) need GBs there at once, so
# it is kept beside the installs, on their filesystem, rather than in /tmp,
# which may be a small tmpfs.
mkdir -p "$deps/tmp"
TMPDIR=$PWD/$deps/tmp
export TMPDIR

# free_gib DIR: the GiB free on DIR's filesystem.
free_gib() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'; }

# The end-to-end tests build C programs (gcc) and start processes in their
# own PID namespaces (unshare, from util-linux).
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A Python virtualenv in .deps/venv (pip fetches the wheels below).
ensure_venv() {
    python=${PYTHON:-python3}
    if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
        echo "setup: $python lacks venv/ensurepip; installing python3-venv" >&2
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    fi
    if [ ! -x "$deps/venv/bin/python" ]; then
        "$python" -m venv "$deps/venv"
    fi
}

# NVIDIA's headers (cuda.h, cudaTypedefs.h, nvml.h) and CUDA runtime, from
# their wheels.
fetch_headers() {
if [ ! -f "$deps/include/cuda.h" ] || [ ! -f "$deps/include/nvml.h" ] || [ ! -f "$deps/lib/libcudart.so.13" ]; then
    "$deps/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform manylinux2014_x86_64 \
        -d "$deps/wheels" 'nvidia-cuda-runtime==13.5.37' 'nvidia-nvml-dev==13.5.37'
    "$deps/venv/bin/python" - "$deps" <<'PY'
import sys, zipfile, glob, os
deps = sys.argv[1]
wanted = {"cuda.h", "cudaTypedefs.h", "nvml.h"}
libraries = {"libcudart.so.13"}
os.makedirs(os.path.join(deps, "lib"), exist_ok=True)
for wheel in glob.glob(os.path.join(deps, "wheels", "*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            base = os.path.basename(name)
            if base in wanted and "/include/" in name:
                with open(os.path.join(deps, "include", base), "wb") as out:
                    out.write(z.read(name))
            if base in libraries and "/lib/" in name:
                with open(os.path.join(deps, "lib", base), "wb") as out:
                    out.write(z.read(name))
missing = [h for h in wanted if not os.path.exists(os.path.join(deps, "include", h))]
missing += [l for l in libraries if not os.path.exists(os.path.join(deps, "lib", l))]
if missing:
    sys.exit(f"setup: not found in the wheels: {missing}")
PY
fi
}

# The quick-start demo (scripts/demo.sh) needs gcc and NVIDIA's headers,
# nothing else: `setup.sh --demo` stops here.
if [ "${1:-}" = "--demo" ]; then
    ensure_venv
    fetch_headers
    exit 0
fi

# zig's C compiler links the shim against glibc 2.17's symbols
# (scripts/build-shim-portable.sh), so that it loads on older distributions
# than the build host's; tests/shim_glibc_floor.rs checks that build, and
# the Kubernetes images carry it.
ensure_zig() {
    if ! "$deps/venv/bin/python" -c 'import ziglang' 2>/dev/null; then
        "$deps/venv/bin/pip" install --quiet --disable-pip-version-check 'ziglang==0.17.1'
    fi
}

# Debian's prometheus package: promtool, with which tests/monitor_alerts.rs
# checks deploy/prometheus/ (`check rules`, and its rule unit tests on
# series scraped from a monitor), and the server, which the Kubernetes test
# cluster runs beside its control plane (scripts/k8s-cluster.sh: the
# metrics a HorizontalPodAutoscaler reads). Where systemd starts the
# server on install it is stopped and disabled again: the tests start
# their own.
ensure_prometheus() {
    if ! command -v promtool >/dev/null 2>&1 || [ ! -x /usr/bin/prometheus ]; then
        echo "setup: installing prometheus" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
        if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled prometheus >/dev/null 2>&1; then
            systemctl disable --now prometheus >/dev/null 2>&1 || true
        fi
    fi
}

# The Kubernetes tests (scripts/test-kubernetes.sh) build images with
# podman (Debian's, under runc: crun refuses hosts with a hybrid cgroup
# hierarchy) from the headers and the glibc-2.17 build: `setup.sh
# --kubernetes` installs only that. Go, which builds the cluster's
# components, is the machine's own.
if [ "${1:-}" = "--kubernetes" ]; then
    if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
        echo "setup: installing podman and runc" >&2
        apt-get update -qq && apt-get install -y -qq podman runc >/dev/null
    fi
    ensure_venv
    fetch_headers
    ensure_zig
    ensure_prometheus
    exit 0
fi

ensure_prometheus
# tests/dra.rs: a real CDI consumer reads the DRA driver's CDI specs.
# podman (Debian's) runs the container with the host's root as its image,
# under runc (crun refuses hosts with a hybrid cgroup hierarchy).
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    echo "setup: installing podman and runc" >&2
    apt-get update -qq && apt-get install -y -qq podman runc >/dev/null
fi

ensure_venv
if ! "$deps/venv/bin/python" -c 'import cuda.bindings.driver, pynvml, nvitop, gpustat' 2>/dev/null; then
    "$deps/venv/bin/pip" install --quiet --disable-pip-version-check 'cuda-bindings==13.5.0' 'nvidia-ml-py==13.615.71' \
        'nvitop==1.7.2' 'gpustat==1.1.1'
fi
# tests/deploy.rs checks deploy/kubernetes/ against the Kubernetes schemas,
# strictly (an unknown field is an error), with kubernetes-validate; its
# dependency PyYAML reads deploy/prometheus/ for tests/monitor_alerts.rs.
if ! "$deps/venv/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
    "$deps/venv/bin/pip" install --quiet --disable-pip-version-check 'kubernetes-validate==1.37.0'
fi
ensure_zig
# ... and runs it on Debian 11's glibc 2.31 (older than the 2.34 a shim
# built here needs), fetched into .deps/glibc-2.31 by apt with its own lists.
bash scripts/old-glibc.sh

# tests/frameworks.rs runs NVIDIA's CUDA runtime and the frameworks on it
# against simgpu: CuPy (its CUDA 13 wheel, to match the runtime pinned
# below), numba-cuda with its CUDA 13 compilers (NVVM, NVRTC, nvJitLink:
# they compile on the CPU) and cuda.core.
if ! "$deps/venv/bin/python" -c 'import cupy, numba.cuda, cuda.core' 2>/dev/null; then
    "$deps/venv/bin/pip" install --quiet --disable-pip-version-check 'cupy-cuda13x==14.2.0' \
        'numba-cuda[cu13]==0.30.4' 'cuda-core==1.2.2'
fi

# What follows is most of the download: say so before it, where the disk
# may not hold it, rather than let pip fail with ENOSPC half-way.
if [ ! -x "$deps/torch-venv/bin/python" ] || [ ! -x "$deps/jax-venv/bin/python" ]; then
    free=$(free_gib "$deps")
    echo "setup: installing PyTorch and JAX into $deps (about 10 GiB; $free GiB free there)" >&2
    if [ "$free" -lt 12 ]; then
        echo "setup: warning: $free GiB free under $deps; PyTorch and JAX need about 10 GiB," \
            "and the build and the Kubernetes tests about 12 GiB more" >&2
    fi
fi

# tests/simgpu_models.rs trains PyTorch models on simgpu, through cuBLAS and
# cuDNN (torch's CUDA 13 wheels pull them in): a virtualenv of its own,
# since it is several GiB and pins its own CUDA libraries.
if [ ! -x "$deps/torch-venv/bin/python" ]; then
    python3 -m venv "$deps/torch-venv"
fi
if ! "$deps/torch-venv/bin/python" -c 'import torch' 2>/dev/null; then
    "$deps/torch-venv/bin/pip" install --quiet --disable-pip-version-check 'torch==2.15.0'
fi

# tests/simgpu_jax.rs runs JAX on simgpu: jax[cuda13] in a virtualenv of its
# own. Its CUDA plugin takes any NVIDIA library at or above the one it was
# built with, where torch's wheel pins each exactly, so in one virtualenv an
# upgrade of either would move the other's libraries; here each stays as
# pinned below (about 2.6 GB of wheels, 4.4 GB installed).
if [ ! -x "$deps/jax-venv/bin/python" ]; then
    python3 -m venv "$deps/jax-venv"
fi
if ! "$deps/jax-venv/bin/python" -c 'import jax, jax_plugins.xla_cuda13' 2>/dev/null; then
    "$deps/jax-venv/bin/pip" install --quiet --disable-pip-version-check 'jax[cuda13]==0.10.2' \
        'jaxlib==0.10.2' 'jax-cuda13-plugin==0.10.2' 'jax-cuda13-pjrt==0.10.2' \
        'nvidia-cublas==13.10.0.20' 'nvidia-cuda-cupti==13.5.25' 'nvidia-cuda-nvcc==13.5.37' \
        'nvidia-cuda-crt==13.5.37' 'nvidia-cuda-nvrtc==13.5.37' 'nvidia-cuda-runtime==13.5.37' \
        'nvidia-cudnn-cu13==9.28.1.4' 'nvidia-cufft==12.5.0.14' 'nvidia-cusolver==12.4.1.2' \
        'nvidia-cusparse==12.9.4.2' 'nvidia-nccl-cu13==2.32.3' 'nvidia-nvjitlink==13.5.37' \
        'nvidia-nvshmem-cu13==3.8.0' 'nvidia-nvvm==13.5.37' 'nvidia-cuda-cccl==13.3.5.0.6'
fi

# --- Slurm (tests/slurm.rs, benches/slurm_startup.rs) -----------------------
# Debian's Slurm and munge, and for accounting slurmdbd and MariaDB: the
# tests start munged, mariadbd, slurmdbd, slurmctld and slurmd themselves,
# each on a private configuration and data directory, so nothing here is
# started or configured. Postinst scripts may try to start the services;
# where there is no init system that fails harmlessly, and a policy-rc.d
# keeps them from starting where there is one.
slurm_missing=()
for program in munged slurmctld slurmd srun slurmdbd sacct mariadbd mariadb-install-db; do
    command -v "$program" >/dev/null 2>&1 || [ -x "/usr/sbin/$program" ] || slurm_missing+=("$program")
done
if [ ${#slurm_missing[@]} -gt 0 ]; then
    echo "setup: installing Slurm and munge (missing: ${slurm_missing[*]})" >&2
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq munge slurmctld slurmd slurm-client slurmdbd mariadb-server >/dev/null
    if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi
fi
# --- end of Slurm ------------------------------------------------------------

fetch_headers
echo "setup: headers in $deps/include, the CUDA runtime in $deps/lib, Python clients in $deps/venv"
