#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=), run by slurmd as root on each node of
# a job once the job is over there and its processes are killed: releases
# the job's tenant, `slurm-<jobid>`. The monitor removes its ledger once no
# process of it lives, and returns whatever a killed process held.
# Releasing a tenant never admitted (a job without GPUs) succeeds.
#
# A failure exits 1, which drains the node: an allocation the monitor
# still counts would refuse the next job's.
set -u
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"

job=${SLURM_JOB_ID:-}
tenant="slurm-$job"
log() {
    line="gpuslice epilog: job $job on ${SLURMD_NODENAME:-$(hostname -s)}: $*"
    echo "$line" >&2
    if [ -n "${log_file:-}" ]; then
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $line" >>"$log_file" 2>/dev/null || true
    fi
}
case $job in
'' | *[!0-9]*)
    log "error: SLURM_JOB_ID is ${job:-unset}; expected a job id (is this script slurm.conf's Epilog?)"
    exit 1
    ;;
esac
if answer=$("$gpuslice_bin" tenant release "$tenant" --dir "$ledger_dir" 2>&1); then
    log "released $tenant: $(echo "$answer" | tr '\n' ' ')"
else
    log "error: gpuslice tenant release $tenant: $answer"
    exit 1
fi
