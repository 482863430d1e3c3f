#!/usr/bin/env bash
# The Kubernetes tests on a real cluster (tests/kubernetes.rs), CI's second
# step: builds the pinned components (scripts/k8s/build.sh; cold, most of
# half an hour on 2 cores, then cached in .deps/k8s) and the images
# (scripts/k8s/images.sh), starts a fresh two-node cluster
# (scripts/k8s-cluster.sh), installs gpuslice with its Helm chart, runs the
# tests one at a time, then the start-up benchmark (benches/k8s_startup.rs),
# and takes the cluster down again.
#
#   scripts/test-kubernetes.sh [--keep]     --keep leaves the cluster running
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
for arg in "$@"; do
    case "$arg" in
        --keep) keep=1 ;;
        *) echo "test-kubernetes: unknown argument ${arg@Q} (accepted: --keep)" >&2; exit 2 ;;
    esac
done
phase_start=$SECONDS
phase_done() {
    echo "test-kubernetes: $1 took $((SECONDS - phase_start)) s" >&2
    phase_start=$SECONDS
}
# What the images need: gcc, NVIDIA's headers, zig (in .deps/venv), podman.
bash scripts/setup.sh --kubernetes
phase_done setup
bash scripts/k8s/build.sh
phase_done "Kubernetes, containerd, helm, prometheus-adapter (build)"
bash scripts/k8s/images.sh
phase_done images
# A fresh cluster: nothing of an earlier run's pods or tenants.
bash scripts/k8s-cluster.sh down
if [ "$keep" = 0 ]; then
    trap 'bash scripts/k8s-cluster.sh down' EXIT
fi
bash scripts/k8s-cluster.sh up --nodes 2
phase_done "cluster up"
export CARGO_INCREMENTAL=0
status=0
test_log=$(mktemp)
cargo test --test kubernetes -- --ignored --test-threads=1 --nocapture 2>&1 | tee "$test_log" || status=$?
# A test that failed by its assertions runs again, alone, once, as
# scripts/test.sh does for the tests that time the device: the shares these
# tests measure over 10 s move in the hypervisor's slow spells on a 2-core
# machine that runs the whole cluster beside them (a 30 / 50 split measured
# 35.5 / 64.5 against 37.5 / 62.5 in one run of a build that passed the run
# before). What failed first is printed in full above and named again.
if [ "$status" -ne 0 ] &&
    [ "$(grep -c '^error: test failed' "$test_log")" -eq "$(grep -c '^test result: FAILED' "$test_log")" ]; then
    mapfile -t failed < <(awk '/^failures:$/ { n++; next } n == 2 && /^    [A-Za-z0-9_:]+$/ { print $1 }' "$test_log" | sort -u)
    if [ "${#failed[@]}" -gt 0 ]; then
        echo "test-kubernetes: ${#failed[@]} failed; they run again, once: ${failed[*]}" >&2
        status=0
        cargo test --test kubernetes -- --ignored --test-threads=1 --nocapture --exact "${failed[@]}" || status=$?
        [ "$status" -ne 0 ] || echo "test-kubernetes: failed in their first run and passed when run again: ${failed[*]}" >&2
    fi
fi
rm -f "$test_log"
phase_done tests
if [ "$status" = 0 ]; then
    cargo bench --bench k8s_startup || status=$?
    phase_done "start-up benchmark"
fi
exit "$status"
