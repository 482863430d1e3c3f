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
# tasks only), so the controller does. First, for this job alone, what it
# asked per node and per job (`squeue -j <job> -O JobID,tres-per-node,...`,
# fields the controller writes: `gres:shard:2`, `gres:gpu:h100:1`, `N/A`):
# shards only, on one GPU here, or GPUs only, is the whole answer (a
# `--gres` count is per node, and Slurm 22.05 refuses a job asking for
# both). Anything else (shards on several GPUs here, a field that does not
# read so) asks the controller for the allocation itself, as JSON:
# `squeue --json` lists each job with its GRES per node
# (`"gres_detail": ["shard:2(IDX:0)"]`, or `gpu:h100:1(IDX:1)`) beside its
# nodes' names. Never the text of `scontrol show job -d`: it also carries
# what the job's user wrote (its name, comment, work directory), and a
# newline there can forge a GRES line.
#
# A job without GPUs here gets no tenant. Any failure, and anything
# unexpected in what the controller says or the monitor answers, exits 1:
# the job does not start here and Slurm drains the node, rather than run a
# job whose slice nothing enforces or one it is not sure of.
#
# A monitor that does not answer (down, or restarting) is not the node's
# fault: the Prolog asks again for up to monitor_wait_s seconds, then
# cancels this job alone, with the reason in its AdminComment (`scontrol
# show job` shows it), and exits 0, so the node stays up. The TaskProlog
# starts no task of a job with GPUs that this Prolog did not admit.
set -u
# The files beside the script, also when slurm.conf's Prolog is a directory
# of links to scripts (Prolog=/etc/slurm/prolog.d/*).
# readlink only for a link (a fork saved on every job otherwise).
self=$0
if [ -L "$0" ]; then self=$(readlink -f "$0" 2>/dev/null) || self=$0; fi
case $self in */*) here=${self%/*} ;; *) here=. ;; esac
# shellcheck source=gpuslice-slurm.conf
. "$here/gpuslice-slurm.conf"
squeue=${squeue:-squeue}
scontrol=${scontrol:-scontrol}
scancel=${scancel:-scancel}
state_dir=${state_dir:-/run/gpuslice-slurm}
# mawk where it is (Debian's default awk): it reads the controller's JSON
# three times faster than gawk (2.5 against 8.5 ms for two jobs here);
# slices.awk is plain POSIX awk and runs in either.
if [ -z "${awk:-}" ]; then
    if [ -x /usr/bin/mawk ]; then awk=/usr/bin/mawk; else awk=awk; fi
fi

job=${SLURM_JOB_ID:-}
node=${SLURMD_NODENAME:-$(hostname -s)}
tenant="slurm-$job"

log() {
    line="gpuslice prolog: job $job on $node: $*"
    echo "$line" >&2
    if [ -n "${log_file:-}" ]; then
        # The time taken beside the controller's answer (a fork saved), else now.
        echo "${stamp:-$(date -u +%Y-%m-%dT%H:%M:%SZ)} $line" >>"$log_file" 2>/dev/null || true
    fi
}
fail() {
    log "error: $*"
    exit 1
}

case $job in
'' | *[!0-9]*) fail "SLURM_JOB_ID is ${job:-unset}; expected a job id (is this script slurm.conf's Prolog?)" ;;
esac
case ${monitor_wait_s:-10} in
'' | *[!0-9]*) fail "monitor_wait_s in $here/gpuslice-slurm.conf is $monitor_wait_s; expected whole seconds, like 10" ;;
esac
monitor_wait_s=${monitor_wait_s:-10}
case ${shards_per_gpu:-} in
'' | *[!0-9]* | 0) fail "shards_per_gpu in $here/gpuslice-slurm.conf is ${shards_per_gpu:-unset}; expected a whole number of shards per GPU, like 8" ;;
esac
gpus=${SLURM_JOB_GPUS:-}
if [ -z "$gpus" ]; then
    exit 0
fi

# What slices.awk reads first: each GPU's memory (`gpuslice devices`) and
# the time for the log.
# shellcheck disable=SC2086 # devices_args is a list of arguments
print_inventory() {
    inventory=$("$gpuslice_bin" devices --json --dir "$ledger_dir" $devices_args 2>&1) ||
        inventory="@failed $(printf '%s' "$inventory" | tr '\n' ' ')"
    printf '%s\n@time %s\n' "$inventory" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
slices() {
    "$awk" -v job="$job" -v node="$node" -v bound="$gpus" -v per_gpu="$shards_per_gpu" -f "$here/slices.awk"
}
# The inventory and what the job asked (`squeue -j`) at once, into awk,
# which starts and reads the inventory meanwhile. Should the request not
# settle the slices, slices.awk prints `@exact`, and the allocation comes
# from `squeue --json` (Slurm 22.05's prints every job, whatever -j says).
# squeue failing fails the Prolog, as before.
plan=$(
    {
        print_inventory &
        # Its messages are no line of the job's (slices.awk keeps only
        # those); should it fail, they say why, and it is not run again
        # (a controller that does not answer would be waited for twice).
        request=$("$squeue" -h -j "$job" -O 'JobID:|,tres-per-node:|,tres-per-job:|,tres-per-task:|,tres-per-socket:|' 2>&1) ||
            request="@failed exit $?: $(printf '%s' "$request" | tr '\n' ' ')"
        wait
        printf '@request\n%s\n' "$request"
    } | slices
) || fail "${plan#error: }"
if [ "$plan" = @exact ]; then
    plan=$(
        {
            print_inventory &
            # Its messages kept out of the JSON; should it fail, run again for them.
            detail=$("$squeue" --json 2>/dev/null) ||
                detail="@failed exit $?: $("$squeue" --json 2>&1 >/dev/null | tr '\n' ' ')"
            wait
            printf '@detail\n%s\n' "$detail"
        } | slices
    ) || fail "${plan#error: }"
fi
{
    read -r devices
    read -r memory
    read -r shares
    read -r stamp
} <<EOF
$plan
EOF

# The note the TaskProlog and the Epilog read: written before the monitor
# is asked (should the Prolog die after the monitor admitted, the Epilog
# still releases), and says `admitted` only once the monitor answered so.
# (0755 and 0644: the TaskProlog reads it as the job's user.)
# A release of this same job left pending (a requeued job keeps its id) is
# void: the admission below replaces what the job had.
record="$state_dir/job-$job"
umask 022
{ [ -d "$state_dir" ] || mkdir -p "$state_dir"; } && { [ ! -e "$state_dir/release-$job" ] || rm -f "$state_dir/release-$job"; } &&
    echo admitting >"$record" || fail "cannot write $record"

set -- tenant admit "$tenant" --device "$devices" --share "$shares" --owner-uid "${SLURM_JOB_UID:?}" \
    --label origin=slurm --label "job=$job" --dir "$ledger_dir" --json
# Whose the job is, for `gpuslice report --by user` and accounting: from
# slurmd's environment for the Prolog (the job's credential), never from
# anything the job's user set.
if [ -n "${SLURM_JOB_USER:-}" ]; then
    set -- "$@" --label "user=$SLURM_JOB_USER"
fi
if [ -n "${SLURM_JOB_ACCOUNT:-}" ]; then
    set -- "$@" --label "account=$SLURM_JOB_ACCOUNT"
fi
if [ -n "$memory" ]; then
    set -- "$@" --memory "$memory"
fi

# Ends this job, and only it, without draining the node: the reason goes
# where `scontrol show job` shows it (AdminComment, which only an
# administrator can write). The monitor may have admitted it in the
# meantime: its release waits for the next Prolog the monitor answers.
cancel_job() {
    mv -f "$record" "$state_dir/release-$job" 2>/dev/null
    reason="gpuslice: not started on $node: $1"
    "$scontrol" update "jobid=$job" "admincomment=$reason" >/dev/null 2>&1 ||
        log "warning: could not set job $job's AdminComment"
    # Should the job not be cancelled, fail: the node drains, but no task
    # starts without its slice.
    answer=$("$scancel" "$job" 2>&1) || fail "$1; and scancel $job failed: $answer"
    log "cancelled job $job: $1"
    exit 0
}

# Releases what an earlier Epilog (or a cancelled Prolog) could not, now
# that the monitor answers; what fails waits for the next time.
release_pending() {
    for pending in "$state_dir"/release-*; do
        [ -e "$pending" ] || continue
        id=${pending##*/release-}
        case $id in '' | *[!0-9]*) continue ;; esac
        if "$gpuslice_bin" tenant release "slurm-$id" --dir "$ledger_dir" --timeout 2s >/dev/null 2>&1; then
            rm -f "$pending"
            log "released slurm-$id, which job $id's Epilog could not"
        fi
    done
}

# The monitor answered when its JSON answer is on stdout (an `ok: false`
# answer is a refusal: the allocation and the node disagree, which drains
# it); it did not when there is only gpuslice's own message (no socket,
# nothing listening, no answer in time): ask again until the deadline.
# Seconds are the kernel's uptime (`/proc/uptime`, read without a fork).
uptime_s() {
    read -r up _ </proc/uptime && up=${up%%.*} && case $up in '' | *[!0-9]*) false ;; esac ||
        fail "cannot read the uptime from /proc/uptime"
}
uptime_s
started=$up
deadline=$((up + monitor_wait_s))
left=$monitor_wait_s
while :; do
    [ "$left" -ge 1 ] || left=1
    answer=$("$gpuslice_bin" "$@" --timeout "${left}s" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then
        # The stamp is from before the admission: if that took seconds, now.
        uptime_s
        [ $((up - started)) -lt 2 ] || stamp=
        echo admitted >"$record" || fail "cannot write $record"
        log "admitted $tenant: devices $devices, memory ${memory:-whole}, shares $shares"
        release_pending
        exit 0
    fi
    case $rc:$answer in
    1:\{*) fail "the monitor refused gpuslice $*: $answer" ;;
    1:*) ;;
    *) fail "gpuslice $*: $answer" ;;
    esac
    # Later lines of the log take their own time.
    stamp=
    uptime_s
    if [ "$up" -ge "$deadline" ]; then
        cancel_job "no gpuslice monitor answered within ${monitor_wait_s} s ($(printf '%s' "$answer" | tr '\n' ' '))"
    fi
    sleep 1
    uptime_s
    left=$((deadline - up))
done
