#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=), run by slurmd as root on each node of
# a job before its first task there: makes the job's GPU allocation on this
# node a monitor-owned gpuslice tenant, `slurm-<jobid>`.
#
#   --gres=shard:N on a GPU:  cap N x (device memory / shards_per_gpu),
#                             share N / shards_per_gpu of the device's time;
#   --gres=gpu:N (whole GPUs): no cap, share 100 %.
#
# Which GPUs: SLURM_JOB_GPUS (slurmd sets it for the Prolog: this node's
# GPU indices, as gres.conf numbers them). How many shards: the Prolog's
# environment does not say (Slurm 22.05 sets SLURM_SHARDS_ON_NODE for the
# tasks only), so the job's detail from the controller does:
# `scontrol show job -d` prints, per node, `GRES=shard:2(IDX:0)` or
# `GRES=gpu:1(IDX:1)`.
#
# A job without GPUs here gets no tenant. Any failure exits 1: the job does
# not start here and Slurm drains the node, rather than run a job whose
# slice nothing enforces.
set -u
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"

job=${SLURM_JOB_ID:-}
node=${SLURMD_NODENAME:-$(hostname -s)}
tenant="slurm-$job"

log() {
    line="gpuslice prolog: job $job on $node: $*"
    echo "$line" >&2
    if [ -n "${log_file:-}" ]; then
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $line" >>"$log_file" 2>/dev/null || true
    fi
}
fail() {
    log "error: $*"
    exit 1
}

case $job in
'' | *[!0-9]*) fail "SLURM_JOB_ID is ${job:-unset}; expected a job id (is this script slurm.conf's Prolog?)" ;;
esac
case ${shards_per_gpu:-} in
'' | *[!0-9]* | 0) fail "shards_per_gpu in $here/gpuslice-slurm.conf is ${shards_per_gpu:-unset}; expected a whole number of shards per GPU, like 8" ;;
esac
gpus=${SLURM_JOB_GPUS:-}
if [ -z "$gpus" ]; then
    exit 0
fi

# Each GPU's memory (`gpuslice devices`) and the job's detail from the
# controller (`scontrol show job -d`, for the shard counts), both at once.
# shellcheck disable=SC2086 # devices_args is a list of arguments
input=$(
    {
        inventory=$("$gpuslice_bin" devices --json --dir "$ledger_dir" $devices_args 2>&1) ||
            inventory="@failed $(printf '%s' "$inventory" | tr '\n' ' ')"
        printf '%s\n' "$inventory"
    } &
    detail=$(scontrol show job -d "$job" 2>&1) || detail="@failed $(printf '%s' "$detail" | tr '\n' ' ')"
    wait
    printf '@detail\n%s\n' "$detail"
)
slices() {
    printf '%s\n' "$input" | awk -v node="$node" -v bound="$gpus" -v per_gpu="$shards_per_gpu" -v gres="$1" -f "$here/slices.awk"
}
plan=$(slices "")
case $? in
0) ;;
3)
    # A job on several nodes: which group of nodes is this one.
    gres=$(printf '%s\n' "$plan" | while read -r hosts line_gres; do
        [ "$hosts" = @resolve ] && continue
        if scontrol show hostnames "$hosts" 2>/dev/null | grep -qx "$node"; then
            echo "$line_gres"
        fi
    done)
    [ -n "$gres" ] || fail "the job's detail names no GRES on $node"
    plan=$(slices "$gres") || fail "${plan#error: }"
    ;;
*) fail "${plan#error: }" ;;
esac
{
    read -r devices
    read -r memory
    read -r shares
} <<EOF
$plan
EOF

set -- tenant admit "$tenant" --device "$devices" --share "$shares" --owner-uid "${SLURM_JOB_UID:?}" \
    --label origin=slurm --label "job=$job" --dir "$ledger_dir"
if [ -n "$memory" ]; then
    set -- "$@" --memory "$memory"
fi
if answer=$("$gpuslice_bin" "$@" 2>&1); then
    log "admitted $tenant: devices $devices, memory ${memory:-whole}, shares $shares"
else
    fail "gpuslice $*: $answer"
fi
