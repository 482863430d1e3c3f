#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=), run by slurmd as root on each node of
# a job once the job is over there and its processes are killed: releases
# the job's tenant, `slurm-<jobid>`, if the Prolog admitted one here (its
# note `job-<id>` in state_dir says so; a job without GPUs has none, and
# its Epilog asks the monitor nothing). The monitor removes the ledger once
# no process of it lives, and returns whatever a killed process held.
#
# A monitor that does not answer (down, restarting) is asked again for up
# to monitor_wait_s seconds; past that the release waits, as
# `release-<id>` in state_dir, for the next Prolog the monitor answers,
# and the node stays up. A monitor that answers and refuses exits
# 1, which drains the node: an allocation the monitor still counts would
# refuse the next job's.
set -u
self=$(readlink -f "$0" 2>/dev/null) || self=$0
case $self in */*) here=${self%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"
state_dir=${state_dir:-/run/gpuslice-slurm}

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
case ${monitor_wait_s:-10} in
'' | *[!0-9]*)
    log "error: monitor_wait_s in $here/gpuslice-slurm.conf is $monitor_wait_s; expected whole seconds, like 10"
    exit 1
    ;;
esac
record="$state_dir/job-$job"
[ -e "$record" ] || exit 0

deadline=$(($(date +%s) + ${monitor_wait_s:-10}))
while :; do
    left=$((deadline - $(date +%s)))
    [ "$left" -ge 1 ] || left=1
    answer=$("$gpuslice_bin" tenant release "$tenant" --dir "$ledger_dir" --json --timeout "${left}s" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then
        rm -f "$record"
        log "released $tenant: $(echo "$answer" | tr '\n' ' ')"
        exit 0
    fi
    case $rc:$answer in
    1:{*) ;;
    1:*)
        if [ "$(date +%s)" -ge "$deadline" ]; then
            mv -f "$record" "$state_dir/release-$job"
            log "warning: no gpuslice monitor answered within ${monitor_wait_s:-10} s; $tenant is released when one does: $(printf '%s' "$answer" | tr '\n' ' ')"
            exit 0
        fi
        sleep 1
        continue
        ;;
    esac
    log "error: gpuslice tenant release $tenant: $answer"
    exit 1
done
