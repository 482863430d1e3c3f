# The client image of the Kubernetes tests (scripts/k8s/images.sh builds
# it): Debian 11, whose glibc (2.31) is older than the 2.34 that a shim
# built on the project's Debian 12 machines would need, and CUDA
# clients linked for glibc 2.17 (tests/c/memctl.c, tests/c/compute_load.c)
# and a hostile one (tests/c/skip_gate.c).
# It holds no shim: the node's CDI specs mount simgpu as libcuda.so.1 (as
# NVIDIA's mount the real driver) and gpuslice-dra's spec mounts the
# gpuslice image's shim with /etc/ld.so.preload. simgpu is also in
# /usr/local/lib/simgpu, off the loader's path, for pods without a claim
# (LD_LIBRARY_PATH=/usr/local/lib/simgpu): the baseline of
# benches/k8s_startup.rs.
ARG BASE_IMAGE=debian:bullseye-slim
FROM ${BASE_IMAGE}
COPY bin/memctl bin/compute_load bin/skip_gate /usr/local/bin/
COPY lib/ /usr/local/lib/simgpu/
USER 1000:1000
