# The slices of one job on one node, for prolog.sh. Reads the output of
# `gpuslice devices --json` (each GPU's memory), a line `@detail`, and the
# output of `scontrol show job -d JOB`; a section that failed is one line
# `@failed MESSAGE`. Prints three lines, the values of `gpuslice tenant
# admit`'s --device, --memory and --share, or one line `error: ...` and
# exits 1.
#
#   awk -v node="$SLURMD_NODENAME" -v bound="$SLURM_JOB_GPUS" -v per_gpu=8 -f slices.awk
#
# The detail has a line `Nodes=EXPR ... GRES=...` per group of nodes; the
# one for this node is the one whose EXPR is the node's name, or the only
# one. Where neither holds (a job on several nodes), it prints `@resolve`
# and each `EXPR GRES` and exits 3: the caller finds the node's GRES and
# runs it again with -v gres=... .
#
# GRES items look like gpu:1(IDX:0), gpu:h100:2(IDX:0-1), shard:3(IDX:1),
# joined by commas (as the indices are: IDX:0,2). bound: the GPU indices
# slurmd bound to the job (SLURM_JOB_GPUS); both must name the same GPUs.
# per_gpu: shards per GPU.
#
# A whole GPU gets share 100 and no cap; N shards of a GPU get
# N x (memory / per_gpu) bytes, rounded down per shard, and N / per_gpu of
# its time, in percent with at most two decimals.

# Expands "0-2,5" into out[1..4] = 0 1 2 5; returns the count, or -1.
function expand(list, out,    parts, n, i, range, first, last, j, count) {
    count = 0
    n = split(list, parts, ",")
    for (i = 1; i <= n; i++) {
        if (parts[i] !~ /^[0-9]+(-[0-9]+)?$/) return -1
        split(parts[i], range, "-")
        first = range[1] + 0
        last = (parts[i] ~ /-/) ? range[2] + 0 : first
        for (j = first; j <= last; j++) out[++count] = j
    }
    return count
}

function fail(message) {
    print "error: " message
    failed = 1
    exit 1
}

function join(list, value) {
    return list (list == "" ? "" : ",") value
}

$0 == "@detail" { in_detail = 1; next }
/^@failed / {
    if (in_detail) detail_failed = substr($0, 9)
    else devices_failed = substr($0, 9)
    next
}
# Pretty JSON from `gpuslice devices --json`: each device's fields are
# indented by six spaces, "index" before "memory_total_bytes".
!in_detail && /^      "index": / { gsub(/[^0-9]/, "", $2); at = $2 }
!in_detail && /^      "memory_total_bytes": / { gsub(/[^0-9]/, "", $2); memory[at] = $2 }
in_detail && $1 ~ /^Nodes=/ {
    groups++
    hosts[groups] = substr($1, 7)
    group_gres[groups] = index($0, "GRES=") ? substr($0, index($0, "GRES=") + 5) : ""
}

END {
    if (failed) exit 1
    if (detail_failed != "") fail("scontrol show job -d: " detail_failed)
    if (gres == "") {
        for (i = 1; i <= groups; i++) if (hosts[i] == node) gres = group_gres[i]
        if (gres == "" && groups == 1) gres = group_gres[1]
        if (gres == "" && groups > 1) {
            print "@resolve"
            for (i = 1; i <= groups; i++) print hosts[i] " " group_gres[i]
            exit 3
        }
    }
    if (gres == "") fail("SLURM_JOB_GPUS=" bound ", but the job's detail names no GRES on " node)
    items = gres
    gsub(/\),/, ")\n", items)
    n = split(items, item, "\n")
    for (i = 1; i <= n; i++) {
        if (item[i] !~ /\(IDX:[0-9,-]+\)$/) continue
        name = item[i]; sub(/:.*/, "", name)
        head = item[i]; sub(/\(.*/, "", head)
        count = head; sub(/.*:/, "", count)
        idx = item[i]; sub(/.*\(IDX:/, "", idx); sub(/\)$/, "", idx)
        k = expand(idx, gpu)
        if (k < 0 || count !~ /^[0-9]+$/) fail("cannot read " item[i] " in GRES=" gres)
        for (j = 1; j <= k; j++) {
            if (name == "gpu") kind[gpu[j]] = "whole"
            # Slurm 22.05 serves a one-task shard request from one GPU;
            # should one span several, each gets an even part.
            else if (name == "shard") kind[gpu[j]] = int(count / k)
        }
    }
    k = expand(bound, slurm)
    if (k < 1) fail("cannot read SLURM_JOB_GPUS=" bound)
    for (j = 1; j <= k; j++) in_env[slurm[j]] = 1
    for (g in kind) if (!(g in in_env)) fail("SLURM_JOB_GPUS=" bound " but GRES=" gres " names GPU " g)
    for (j = 1; j <= k; j++) {
        g = slurm[j]
        if (!(g in kind)) fail("SLURM_JOB_GPUS=" bound " but GRES=" gres " does not name GPU " g)
        devices = join(devices, g)
        if (kind[g] == "whole") {
            shares = join(shares, g "=100")
            continue
        }
        if (kind[g] < 1 || kind[g] > per_gpu)
            fail("GPU " g ": " kind[g] " shards, but shards_per_gpu is " per_gpu " (gres.conf and gpuslice-slurm.conf disagree)")
        if (devices_failed != "") fail("gpuslice devices: " devices_failed)
        if (!(g in memory)) fail("gpuslice devices lists no GPU " g)
        cap = sprintf("%.0f", int(memory[g] / per_gpu) * kind[g])
        share = sprintf("%.2f", kind[g] * 100 / per_gpu)
        sub(/0+$/, "", share)
        sub(/\.$/, "", share)
        memory_spec = join(memory_spec, g "=" cap "B")
        shares = join(shares, g "=" share)
    }
    print devices
    print memory_spec
    print shares
}
