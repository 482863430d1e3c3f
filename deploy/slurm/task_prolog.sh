#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=), run by slurmstepd as the job's
# user before each task: what it prints as `export NAME=VALUE` goes into the
# task's environment. A task of a job the Prolog admitted starts under the
# shim, as the job's tenant.
#
# Nothing here is a security boundary: the task may unset all of it. What
# holds the job to its slice is the monitor (its caps in the ledger, and in
# kill mode the end of any process on a GPU outside every ledger).
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"

tenant="slurm-${SLURM_JOB_ID:-}"
if [ -e "$ledger_dir/$tenant.ledger" ]; then
    echo "export GPUSLICE_TENANT=$tenant"
    echo "export GPUSLICE_DIR=$ledger_dir"
    echo "export LD_PRELOAD=$shim_lib${LD_PRELOAD:+ $LD_PRELOAD}"
fi
