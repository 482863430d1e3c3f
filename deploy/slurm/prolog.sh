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
# tasks only), so the controller does, as JSON: `squeue --json` lists each
# job with its GRES per node (`"gres_detail": ["shard:2(IDX:0)"]`, or
# `gpu:h100:1(IDX:1)`) beside its nodes' names. Only JSON: the text of
# `scontrol show job -d` also carries what the job's user wrote (its name,
# comment, work directory), and a newline there can forge a GRES line.
#
# A job without GPUs here gets no tenant. Any failure, and anything
# unexpected in what the controller says, exits 1: the job does not start
# here and Slurm drains the node, rather than run a job whose slice nothing
# enforces or one it is not sure of.
set -u
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"
squeue=${squeue:-squeue}

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

# Each GPU's memory (`gpuslice devices`) and the jobs' GRES from the
# controller (`squeue --json`; Slurm 22.05's prints every job, whatever
# -j says), both at once.
# shellcheck disable=SC2086 # devices_args is a list of arguments
input=$(
    {
        inventory=$("$gpuslice_bin" devices --json --dir "$ledger_dir" $devices_args 2>&1) ||
            inventory="@failed $(printf '%s' "$inventory" | tr '\n' ' ')"
        printf '%s\n' "$inventory"
    } &
    # Its messages kept out of the JSON; should it fail, run again for them.
    detail=$("$squeue" --json 2>/dev/null) ||
        detail="@failed exit $?: $("$squeue" --json 2>&1 >/dev/null | tr '\n' ' ')"
    wait
    printf '@detail\n%s\n' "$detail"
)
plan=$(printf '%s\n' "$input" | awk -v job="$job" -v node="$node" -v bound="$gpus" -v per_gpu="$shards_per_gpu" -f "$here/slices.awk") ||
    fail "${plan#error: }"
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
