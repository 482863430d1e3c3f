# The slices of one job on one node, for prolog.sh. Reads the output of
# `gpuslice devices --json` (each GPU's memory), a line `@time STAMP`
# (passed through for the log), and then either
#
# - a line `@request` and the output of `squeue -h -j JOB -O
#   'JobID:|,tres-per-node:|,tres-per-job:|,tres-per-task:|,tres-per-socket:|'`:
#   what the job asked, in fields the controller writes; or
# - a line `@detail` and the output of `squeue --json` (the controller's
#   jobs, with each one's GRES per node).
#
# A section that failed is one line `@failed MESSAGE` (for the request
# and the JSON, an error). Prints four lines, the values of `gpuslice
# tenant admit`'s --device, --memory and --share and the stamp, or one
# line `error: ...` and exits 1; or, for a request that does not settle
# the slices, the line `@exact`: run again on `squeue --json`.
#
#   awk -v job="$SLURM_JOB_ID" -v node="$SLURMD_NODENAME" \
#       -v bound="$SLURM_JOB_GPUS" -v per_gpu=8 -f slices.awk
#
# The request settles it in two cases, the common ones: shards only
# (tres-per-node `gres:shard:N`, nothing else naming a GPU or a shard) on
# one GPU here, which then holds the N shards (a --gres count is per
# node); or GPUs only (`gres:gpu[:TYPE]:N` in any of the four fields, no
# shard), each GPU of `bound` whole. Slurm 22.05 refuses a job asking for
# both. Anything else (shards on several GPUs here, the job listed other
# than once, a field that does not read so) is `@exact`.
#
# The allocation is read only from the JSON's structure: in the job whose
# "job_id" is `job` (there must be exactly one), "gres_detail"[i] is the
# GRES of the node "job_resources"."allocated_nodes"[i]."nodename" (both
# lists in the order of the job's nodes, of one length, `node` in it once).
# Whatever the job's user writes (its name, comment, work directory...) is
# a JSON string, whose newlines are `\n`, so it cannot be read as anything
# else. Anything unexpected (a document that is not JSON, a field named
# twice, the job missing or listed twice, a GRES that does not read as
# below) is an error: the Prolog fails and the node drains, rather than
# admit a slice it is not sure of.
#
# GRES items look like gpu:1(IDX:0), gpu:h100:2(IDX:0-1), shard:3(IDX:1),
# joined by commas (as the indices are: IDX:0,2); GRES other than gpu and
# shard are passed over. bound: the GPU indices slurmd bound to the job
# (SLURM_JOB_GPUS); both must name the same GPUs. per_gpu: shards per GPU.
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
        if (last < first) return -1
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

# --- JSON ------------------------------------------------------------------
# A JSON string holds no raw control character, so no token spans lines:
# each line is cut into tokens, and a state machine over them keeps the path
# to the current value (keys and indices joined by SUBSEP, a control
# character no key can hold). Only the scalars whose paths `wanted` names
# are kept, in value[doc, path] (strings as written, escapes and all).

function json_fail(why) {
    fail(doc_name[doc] ": not the JSON expected: " why " (its line " (NR - doc_start) ")")
}

function json_path(    p, d) {
    p = ""
    for (d = 1; d <= json_depth; d++) p = p (d > 1 ? SUBSEP : "") (json_kind[d] == "{" ? json_key[d] : json_idx[d])
    return p
}

# A path as messages show it: jobs.0.gres_detail.0
function json_shown(p) {
    gsub(SUBSEP, ".", p)
    return p
}

function json_after_value() {
    json_expect = json_depth == 0 ? "end" : "comma_or_close"
}

function json_scalar(type, text,    p) {
    if (!wanted()) return
    p = json_path()
    if ((doc, p) in value) json_fail("it names " json_shown(p) " twice")
    value[doc, p] = text
    value_type[doc, p] = type
}

function json_token(t, text) {
    if (json_expect == "end") json_fail("more after the end of the document")
    if (t == "}" || t == "]") {
        if (json_depth == 0 || json_kind[json_depth] != (t == "}" ? "{" : "[")) json_fail("an unmatched " t)
        if (json_expect != "comma_or_close" && json_expect != "key_or_close" && json_expect != "value_or_close")
            json_fail("a " t " where a " (json_expect == "colon" ? ":" : json_expect) " belongs")
        json_depth--
        json_after_value()
        return
    }
    if (json_expect == "key" || json_expect == "key_or_close") {
        if (t != "s") json_fail("a key that is not a string")
        json_key[json_depth] = text
        json_expect = "colon"
        return
    }
    if (json_expect == "colon") {
        if (t != ":") json_fail("no : after a key")
        json_expect = "value"
        return
    }
    if (json_expect == "comma_or_close") {
        if (t != ",") json_fail("two values without a , between them")
        if (json_kind[json_depth] == "{") json_expect = "key"
        else {
            json_idx[json_depth]++
            json_expect = "value"
        }
        return
    }
    # A value.
    if (t == ":" || t == ",") json_fail("a " t " where a value belongs")
    if (t == "{" || t == "[") {
        json_depth++
        json_kind[json_depth] = t
        json_idx[json_depth] = 0
        json_expect = t == "{" ? "key_or_close" : "value_or_close"
        return
    }
    json_scalar(t, text)
    json_after_value()
}

function json_line(line,    c, len) {
    if (line ~ /[\001-\010\013-\037]/) json_fail("a control character")
    while (1) {
        sub(/^[ \t\r]+/, "", line)
        if (line == "") return
        c = substr(line, 1, 1)
        if (c == "\"") {
            if (!match(line, /^"([^"\\]|\\(["\\\/bfnrt]|u[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]))*"/))
                json_fail("a string that does not end on its line")
            len = RLENGTH
            json_token("s", substr(line, 2, len - 2))
        } else if (index("{}[]:,", c)) {
            len = 1
            json_token(c, "")
        } else if (match(line, /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
            len = RLENGTH
            json_token("n", substr(line, 1, len))
        } else if (match(line, /^(true|false|null)/)) {
            len = RLENGTH
            json_token("l", substr(line, 1, len))
        } else {
            json_fail("cannot read " substr(line, 1, 40))
        }
        line = substr(line, len + 1)
    }
}

function json_start(name) {
    doc++
    doc_name[doc] = name
    doc_start = NR - 1
    json_depth = 0
    json_expect = "value"
}

function json_end() {
    if (json_expect != "end") json_fail("it ends before its value does")
}

# The scalars kept: each GPU's index and memory; each job's id, GRES per
# node and node names; the errors squeue reports. Told by the keys at each
# depth, before any path is joined: a long job list has many scalars, and
# few are kept.
function keyed(d, k) {
    return json_kind[d] == "{" && json_key[d] == k
}
function wanted() {
    if (doc == 1)
        return json_depth == 3 && keyed(1, "devices") && json_kind[2] == "[" && (keyed(3, "index") || keyed(3, "memory_total_bytes"))
    if (keyed(1, "errors")) return 1
    if (!keyed(1, "jobs") || json_kind[2] != "[") return 0
    if (json_depth == 3) return keyed(3, "job_id")
    if (json_depth == 4) return keyed(3, "gres_detail") && json_kind[4] == "["
    return json_depth == 6 && keyed(3, "job_resources") && keyed(4, "allocated_nodes") && json_kind[5] == "[" && keyed(6, "nodename")
}

# --- the request -----------------------------------------------------------

# Sets kind[] for each GPU of `bound` from the job's request (the lines
# after `@request`) and returns 1, or returns 0 where the request does not
# settle it.
function request_kinds(    i, f, n, found, line, m, j, items, item, shards, gpus, count, k) {
    found = 0
    for (i = 1; i <= requests; i++) {
        split(request[i], f, "|")
        if (f[1] != job) continue
        found++
        line = request[i]
    }
    if (found != 1) return 0
    n = split(line, f, "|")
    if (n != 6 || f[6] != "") return 0
    shards = 0
    gpus = 0
    for (i = 2; i <= 5; i++) {
        if (f[i] == "N/A") continue
        m = split(f[i], items, ",")
        for (j = 1; j <= m; j++) {
            item = items[j]
            if (item ~ /^gres:gpu(:[A-Za-z0-9_.-]+)?:[0-9]+$/) gpus++
            else if (i == 2 && item ~ /^gres:shard:[0-9]+$/) {
                shards++
                count = item
                sub(/.*:/, "", count)
            } else if (item ~ /gpu|shard/) return 0
        }
    }
    k = expand(bound, slurm)
    if (k < 1) return 0
    gres = "tres-per-node=" f[2] " tres-per-job=" f[3] " tres-per-task=" f[4] " tres-per-socket=" f[5]
    if (shards == 1 && gpus == 0 && k == 1) {
        kind[slurm[1]] = count + 0
        return 1
    }
    if (shards == 0 && gpus > 0) {
        for (j = 1; j <= k; j++) kind[slurm[j]] = "whole"
        return 1
    }
    return 0
}

# --- the input -------------------------------------------------------------

# The end of `gpuslice devices --json`, once.
function devices_end() {
    if (devices_done) return
    devices_done = 1
    if (devices_failed == "") json_end()
}

BEGIN {
    doc_name[1] = "gpuslice devices --json"
    doc_name[2] = "squeue --json"
    json_start(doc_name[1])
}
failed { exit 1 }
in_request {
    if (/^@failed /) request_failed = substr($0, 9)
    else if ($0 != "") request[++requests] = $0
    next
}
/^@time / && !in_detail {
    devices_end()
    stamp = substr($0, 7)
    if (stamp !~ /^[0-9][0-9T:Z-]*$/) stamp = ""
    next
}
$0 == "@request" && !in_detail {
    devices_end()
    in_request = 1
    next
}
$0 == "@detail" {
    devices_end()
    json_start(doc_name[2])
    in_detail = 1
    next
}
/^@failed / {
    if (in_detail) detail_failed = substr($0, 9)
    else devices_failed = substr($0, 9)
    next
}
in_detail && detail_failed != "" { next }
!in_detail && devices_failed != "" { next }
{ json_line($0) }

END {
    if (failed) exit 1
    if (in_request) {
        if (request_failed != "") fail("squeue -j " job " -O ...: " request_failed)
        if (!request_kinds()) {
            print "@exact"
            exit 0
        }
    } else
        detail_kinds()
    plan()
}

# Sets kind[] for each GPU the job's GRES on this node names, from the
# JSON after `@detail`.
function detail_kinds(    at, p, part, details, nodes, n, m, i, found, items, item, name, head, count, idx_list, k, j) {
    if (!in_detail) fail("no @detail line in the input")
    if (detail_failed != "") fail("squeue --json: " detail_failed)
    json_end()

    # The job: exactly one entry whose job_id is the Prolog's job.
    at = ""
    for (p in value) {
        split(p, part, SUBSEP)
        if (part[1] != 2) continue
        if (part[2] == "errors") fail("squeue --json reports an error: " value[p])
        if (part[4] != "job_id" || value_type[p] != "n" || value[p] != job) continue
        if (at != "") fail("squeue --json lists job " job " twice")
        at = part[3]
    }
    if (at == "") fail("squeue --json does not list job " job)

    # This node's GRES: gres_detail[i] where allocated_nodes[i] is this node.
    details = "jobs" SUBSEP at SUBSEP "gres_detail"
    nodes = "jobs" SUBSEP at SUBSEP "job_resources" SUBSEP "allocated_nodes"
    for (n = 0; (2, details SUBSEP n) in value; n++) ;
    for (m = 0; (2, nodes SUBSEP m SUBSEP "nodename") in value; m++) ;
    if (m == 0) fail("squeue --json lists no nodes for job " job)
    if (n != m) fail("squeue --json lists " n " GRES details for job " job "'s " m " nodes")
    gres = ""
    for (i = 0; i < m; i++) {
        if (value[2, nodes SUBSEP i SUBSEP "nodename"] != node) continue
        if (found) fail("squeue --json lists node " node " twice for job " job)
        found = 1
        if (value_type[2, details SUBSEP i] != "s") fail("job " job "'s GRES on " node " is not a string")
        gres = value[2, details SUBSEP i]
    }
    if (!found) fail("squeue --json does not list node " node " for job " job)
    if (gres == "") fail("SLURM_JOB_GPUS=" bound ", but squeue --json names no GRES for job " job " on " node)

    items = gres
    gsub(/\),/, ")\n", items)
    n = split(items, item, "\n")
    for (i = 1; i <= n; i++) {
        name = item[i]; sub(/:.*/, "", name)
        if (name != "gpu" && name != "shard") continue
        if (item[i] !~ /^(gpu|shard)(:[A-Za-z0-9_.-]+)?:[0-9]+\(IDX:[0-9,-]+\)$/) fail("cannot read " item[i] " in GRES=" gres)
        head = item[i]; sub(/\(.*/, "", head)
        count = head; sub(/.*:/, "", count)
        idx_list = item[i]; sub(/.*\(IDX:/, "", idx_list); sub(/\)$/, "", idx_list)
        k = expand(idx_list, gpu)
        if (k < 1) fail("cannot read " item[i] " in GRES=" gres)
        for (j = 1; j <= k; j++) {
            if (gpu[j] in kind) fail("GRES=" gres " names GPU " gpu[j] " twice")
            if (name == "gpu") kind[gpu[j]] = "whole"
            # Slurm 22.05 serves a one-task shard request from one GPU;
            # should one span several, each gets an even part.
            else kind[gpu[j]] = int(count / k)
        }
    }
}

# The three values of the admission, and the stamp, from kind[].
function plan(    k, j, g, in_env, i, cap, share, devices, shares, memory_spec) {
    k = expand(bound, slurm)
    if (k < 1) fail("cannot read SLURM_JOB_GPUS=" bound)
    for (j = 1; j <= k; j++) in_env[slurm[j]] = 1
    for (g in kind) if (!(g in in_env)) fail("SLURM_JOB_GPUS=" bound " but GRES=" gres " names GPU " g)

    # Each GPU's memory, by index.
    for (i = 0; (1, "devices" SUBSEP i SUBSEP "index") in value; i++) {
        g = value[1, "devices" SUBSEP i SUBSEP "index"]
        if (value_type[1, "devices" SUBSEP i SUBSEP "memory_total_bytes"] == "n")
            memory[g] = value[1, "devices" SUBSEP i SUBSEP "memory_total_bytes"]
    }

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
        if (!(g in memory) || memory[g] !~ /^[0-9]+$/) fail("gpuslice devices lists no memory for GPU " g)
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
    print stamp
}
