#!/usr/bin/env bash
# Regenerates the benchmark tables of docs/benchmarks.md in one command: builds the
# workspace in release, runs the four benchmarks, and prints the table (same
# rows and columns as docs/benchmarks.md's) filled with this run's medians, then
# simgpu's own figures.
#
#   bash scripts/bench.sh                                         # the full run docs/benchmarks.md quotes
#   bash scripts/bench.sh --warm-up-time 1 --measurement-time 2   # a quick look (criterion options)
#
# Arguments go to the criterion benchmarks (simgpu, shim, shim_overhead);
# the start-up benchmark always makes its 60 runs a side. Each run starts
# from an empty target/bench/, so every figure printed was measured by this
# run; the benchmarks' own output is kept there (*.log, criterion/).
#
# Where the rows come from (criterion groups, medians of the time per call):
#   launch, simgpu             launch/{bare,shim}                   (benches/shim.rs)
#   launch, null driver        null_launch/{bare,shim}              (benches/shim_overhead.rs)
#   alloc/free, simgpu         alloc_free/{bare,shim}               (benches/shim.rs)
#   null driver, T threads     null_alloc_free_threads/{bare,shim}/T, the process's CPU
#                              time per pair                        (benches/shim_overhead.rs)
#   process start-up           the table benches/startup.rs prints (medians of 60 runs)
# Then the launch-bound loops' table (benches/launch_path.rs), into its own
# block of docs/benchmarks.md.
# "the shim adds" is shim − bare, or "nothing measurable" when the two
# medians' 95% confidence intervals overlap or the shim side is faster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
cargo build --release --workspace --quiet

out=target/bench
rm -rf "$out"
mkdir -p "$out"

# Replaces the block of docs/benchmarks.md between `<!-- bench.sh NAME: begin -->` and
# its end marker with FILE (a copy of which is kept in benches/).
replace_block() { # NAME FILE
    python3 - "$1" "$2" docs/benchmarks.md <<'PY'
import sys

name, results, page = sys.argv[1:4]
begin, end = f"<!-- bench.sh{name}: begin -->", f"<!-- bench.sh{name}: end -->"
text = open(page, encoding="utf-8").read()
head, found, rest = text.partition(begin)
_, found_end, tail = rest.partition(end)
if not (found and found_end):
    sys.exit(f"bench: {page} lacks the {begin} … {end} markers; its table was not updated")
block = open(results, encoding="utf-8").read().strip("\n")
open(page, "w", encoding="utf-8").write(f"{head}{begin}\n{block}\n{end}{tail}")
print(f"bench: {page}'s table and {results} now hold this run's figures", file=sys.stderr)
PY
}

# The launch-bound loops, bare against governed (benches/launch_path.rs):
# its own table, below the main one. `BENCH_ONLY=launch_path` runs this
# part alone.
launch_path() {
    echo "bench: cargo bench --bench launch_path (log: $out/launch_path.log)" >&2
    cargo bench --quiet --bench launch_path -- --rounds 9 >"$out/launch_path.log" 2>&1 || {
        tail -n 30 "$out/launch_path.log" >&2
        exit 1
    }
    grep -E '^(\||launch-bound|load average)' "$out/launch_path.log" >benches/results-launch-path.md
    cat benches/results-launch-path.md
    replace_block " launch-path" benches/results-launch-path.md
}
if [ "${BENCH_ONLY:-}" = launch_path ]; then
    launch_path
    exit 0
fi

# A Slurm job's start-up with and without deploy/slurm (benches/slurm_startup.rs):
# two private Slurm clusters, as root. Its table goes to benches/results-slurm.md,
# which deploy/slurm/README.md quotes. `BENCH_ONLY=slurm_startup` runs it alone;
# the full run leaves it out (it needs root and Slurm).
slurm_startup() {
    echo "bench: cargo bench --bench slurm_startup (log: $out/slurm_startup.log)" >&2
    cargo bench --quiet --bench slurm_startup >"$out/slurm_startup.log" 2>&1 || {
        tail -n 30 "$out/slurm_startup.log" >&2
        exit 1
    }
    grep -E '^(\||Slurm job start-up|load average)' "$out/slurm_startup.log" >benches/results-slurm.md
    cat benches/results-slurm.md
}
if [ "${BENCH_ONLY:-}" = slurm_startup ]; then
    slurm_startup
    exit 0
fi
export CRITERION_HOME="$PWD/$out/criterion"
# Other work on the machine moves every figure: the caption reports the
# one-minute load average before and after the run.
load_before=$(cut -d' ' -f1 /proc/loadavg)
for bench in simgpu shim shim_overhead; do
    echo "bench: cargo bench --bench $bench (log: $out/$bench.log)" >&2
    cargo bench --quiet --bench "$bench" -- "$@" >"$out/$bench.log" 2>&1 || {
        tail -n 30 "$out/$bench.log" >&2
        exit 1
    }
done
echo "bench: cargo bench --bench startup (log: $out/startup.log)" >&2
cargo bench --quiet --bench startup >"$out/startup.log" 2>&1 || {
    tail -n 30 "$out/startup.log" >&2
    exit 1
}

python3 - "$out" "$load_before" "$(cut -d' ' -f1 /proc/loadavg)" >"$out/table.md" <<'PY'
import json, os, re, sys

out, load_before, load_after = sys.argv[1:4]
criterion = os.path.join(out, "criterion")


def median(path):
    """A criterion benchmark's median time per iteration (ns) and its 95% interval."""
    with open(os.path.join(criterion, path, "new", "estimates.json")) as f:
        m = json.load(f)["median"]
    ci = m["confidence_interval"]
    return m["point_estimate"], ci["lower_bound"], ci["upper_bound"]


def startup():
    """benches/startup.rs's medians (ns) by number of other live processes."""
    rows = {}
    with open(os.path.join(out, "startup.log")) as f:
        for line in f:
            m = re.match(r"(\d+) other live processes\s+([\d.]+)ms\s+([\d.]+)ms", line)
            if m:
                rows[int(m[1])] = (float(m[2]) * 1e6, float(m[3]) * 1e6)
    if sorted(rows) != [0, 32]:
        sys.exit(f"bench: {out}/startup.log lacks its two rows (found {sorted(rows)})")
    return rows


def fmt(ns):
    """Three significant digits in ns, µs or ms."""
    for unit, scale in (("ms", 1e6), ("µs", 1e3), ("ns", 1.0)):
        if abs(ns) >= scale or unit == "ns":
            value = ns / scale
            digits = max(0, 2 - len(str(int(abs(value)))) + 1)
            return f"{value:.{digits}f} {unit}"


def ms(ns):
    return f"{ns / 1e6:.2f} ms"


def adds(bare, shim, fmt=fmt):
    """shim − bare, or "nothing measurable" when the intervals overlap or
    the shim side is faster. Each side is (median, low, high) or (median,)."""
    if shim[0] <= bare[0] or (len(bare) == 3 and shim[1] <= bare[2]):
        return "nothing measurable"
    return fmt(shim[0] - bare[0])


def row(what, bare, shim, target, note="", fmt=fmt):
    cells = [what, fmt(bare[0]), fmt(shim[0]), f"{shim[0] / bare[0]:.3g}×", adds(bare, shim, fmt) + note, target]
    print("| " + " | ".join(cells) + " |")


print("| what | bare | under the shim | ratio | the shim adds | target |")
print("|---|---|---|---|---|---|")
side = lambda group: (median(f"{group}/bare"), median(f"{group}/shim"))
row("launch, zero-length kernel, simgpu", *side("launch"), "≤ 20 ns")
row("launch, null driver", *side("null_launch"), "≤ 20 ns")
row("`cuMemAlloc_v2` + `cuMemFree_v2`, 1 MiB, simgpu", *side("alloc_free"), "≤ 300 ns")
one_bare, one_shim = median("null_alloc_free_threads/bare/1"), median("null_alloc_free_threads/shim/1")
row("the same pair, null driver, 1 thread", one_bare, one_shim, "≤ 300 ns")
for t in (4, 16, 64):
    bare, shim = median(f"null_alloc_free_threads/bare/{t}"), median(f"null_alloc_free_threads/shim/{t}")
    note, target = "", ""
    if t == 64:
        note = f" ({(shim[0] - bare[0]) / (one_shim[0] - one_bare[0]):.1f}× one thread)"
        target = "within 2× of one thread"
    row(f"… {t} threads", bare, shim, target, note)
starts = startup()
row("process start-up (init, context, one alloc, exit)", (starts[0][0],), (starts[0][1],), "≤ 5 ms", fmt=ms)
row("… with 32 other live processes of the tenant", (starts[32][0],), (starts[32][1],), "", fmt=ms)
print()
sim = lambda name: fmt(median(f"simgpu/{name}")[0])
print(
    f"simgpu's own figures (`--bench simgpu`): a zero-length launch {sim('launch_zero_length_kernel')}, "
    f"a 1 MiB alloc/free pair {sim('mem_alloc_free_1MiB')}, a 4 KiB pair {sim('mem_alloc_free_4KiB')}"
)
print(
    f"(measured on {os.cpu_count()} cores, {os.uname().machine}, {os.uname().sysname} {os.uname().release}; "
    f"load average {load_before} before the run, {load_after} after)"
)
PY
cat "$out/table.md"
# The table in docs/benchmarks.md is this run's, never typed in: the figures
# go to benches/results.md, and the page's block between its bench.sh markers
# is replaced by them (tests/benchmark_figures.rs checks that the two agree).
cp "$out/table.md" benches/results.md
replace_block "" benches/results.md
launch_path
