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
# A job without GPUs here gets no tenant. Any failure exits 1: Slurm then
# requeues the job and drains the node, rather than run a job whose slice
# nothing enforces.
set -u
here=$(dirname "$0")
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

# "0-2,5" -> "0 1 2 5"
expand_indices() {
    echo "$1" | tr ',' '\n' | while IFS=- read -r first last; do
        case $first$last in *[!0-9]*) return 1 ;; esac
        [ -n "$first" ] || return 1
        seq "$first" "${last:-$first}"
    done | tr '\n' ' '
}

# This node's GRES from the job's detail: the GRES= of the `Nodes=` line
# whose host list holds this node.
detail=$(scontrol show job -d "$job") || fail "scontrol show job -d $job failed"
gres=$(echo "$detail" | while read -r line; do
    case $line in Nodes=*) ;; *) continue ;; esac
    hosts=${line#Nodes=}
    hosts=${hosts%% *}
    case $line in *GRES=*) ;; *) continue ;; esac
    if [ "$hosts" = "$node" ] || scontrol show hostnames "$hosts" 2>/dev/null | grep -qx "$node"; then
        echo "${line##*GRES=}"
    fi
done)
[ -n "$gres" ] || fail "SLURM_JOB_GPUS=$gpus, but the job's detail names no GRES on $node"

# Per GPU index: "whole" or its shard count. Items look like
# gpu:1(IDX:0), gpu:a100:2(IDX:0-1), shard:3(IDX:1); lists are joined by "),".
plan=$(echo "$gres" | sed 's/),/)\n/g' | while read -r item; do
    name=${item%%:*}
    head=${item%%(*}
    count=${head##*:}
    case $item in *"(IDX:"*")") ;; *) continue ;; esac
    idx=${item#*(IDX:}
    idx=${idx%)}
    indices=$(expand_indices "$idx") || { echo "bad $item"; continue; }
    set -- $indices
    case $name in
    gpu) for i in "$@"; do echo "$i whole"; done ;;
    shard)
        # Slurm 22.05 serves a shard request of one task from one GPU; should
        # a request span several, each gets an even part.
        n=$#
        for i in "$@"; do
            echo "$i $((count / n))"
        done
        ;;
    esac
done | sort -n -k1,1)
case $plan in *bad*) fail "cannot read the GPU indices in GRES=$gres" ;; esac
[ -n "$plan" ] || fail "no gpu or shard in GRES=$gres"

# The GPUs in the detail must be the ones slurmd bound to the job.
planned=$(echo "$plan" | awk '{ print $1 }' | sort -un | tr '\n' ',' | sed 's/,$//')
bound=$(expand_indices "$gpus" | tr ' ' '\n' | sed '/^$/d' | sort -un | tr '\n' ',' | sed 's/,$//')
[ "$planned" = "$bound" ] || fail "SLURM_JOB_GPUS=$gpus but GRES=$gres names GPUs $planned"

# Each GPU's memory, by index, from `gpuslice devices --json`.
# shellcheck disable=SC2086 # devices_args is a list of arguments
inventory=$("$gpuslice_bin" devices --json --dir "$ledger_dir" $devices_args) || fail "gpuslice devices failed"
memory_of() {
    echo "$inventory" | awk -v want="$1" '
        /^      "index": / { gsub(/[^0-9]/, "", $2); index_now = $2 }
        /^      "memory_total_bytes": / { gsub(/[^0-9]/, "", $2); if (index_now == want) { print $2; exit } }'
}

devices=
memory=
shares=
for entry in $(echo "$plan" | tr ' ' ':'); do
    index=${entry%%:*}
    what=${entry#*:}
    devices="$devices${devices:+,}$index"
    if [ "$what" = whole ]; then
        shares="$shares${shares:+,}$index=100"
        continue
    fi
    [ "$what" -ge 1 ] && [ "$what" -le "$shards_per_gpu" ] ||
        fail "GPU $index: $what shards, but shards_per_gpu is $shards_per_gpu (gres.conf and gpuslice-slurm.conf disagree)"
    total=$(memory_of "$index")
    [ -n "$total" ] || fail "gpuslice devices lists no GPU $index"
    cap=$(awk -v t="$total" -v s="$what" -v p="$shards_per_gpu" 'BEGIN { printf "%.0f", int(t / p) * s }')
    share=$(awk -v s="$what" -v p="$shards_per_gpu" 'BEGIN { printf "%.2f", s * 100 / p }' | sed -e 's/0*$//' -e 's/\.$//')
    memory="$memory${memory:+,}$index=${cap}B"
    shares="$shares${shares:+,}$index=$share"
done

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
