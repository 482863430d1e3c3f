#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=), run by slurmstepd as the job's
# user before each task: what it prints as `export NAME=VALUE` goes into the
# task's environment. A task of a job the Prolog admitted starts under the
# shim, as the job's tenant.
#
# A task with GPUs whose job the Prolog did not admit here (its note in
# state_dir, which only root writes, does not say `admitted`) does not
# start: this script fails, and slurmstepd then ends the task with exit
# code 1 (`TaskProlog failed status=1` in its log). That happens when the
# Prolog cancelled the job for want of a monitor and the task was launched
# before the cancellation reached slurmd.
#
# Nothing here is a security boundary: the task may unset all of it. What
# holds the job to its slice is the monitor (its caps in the ledger, and in
# kill mode the end of any process on a GPU outside every ledger).
# readlink only for a link (a fork saved on every job otherwise).
self=$0
if [ -L "$0" ]; then self=$(readlink -f "$0" 2>/dev/null) || self=$0; fi
case $self in */*) here=${self%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"

job=${SLURM_JOB_ID:-}
state=
case $job in
'' | *[!0-9]*) ;;
*)
    record="${state_dir:-/run/gpuslice-slurm}/job-$job"
    if [ -r "$record" ]; then read -r state <"$record"; fi
    ;;
esac
if [ "$state" = admitted ]; then
    echo "export GPUSLICE_TENANT=slurm-$job"
    echo "export GPUSLICE_DIR=$ledger_dir"
    echo "export LD_PRELOAD=$shim_lib${LD_PRELOAD:+ $LD_PRELOAD}"
elif [ -n "${SLURM_STEP_GPUS:-}${SLURM_JOB_GPUS:-}" ]; then
    echo "gpuslice: job $job has GPUs on this node but no slice (its Prolog did not admit it): the task does not start" >&2
    exit 1
fi
