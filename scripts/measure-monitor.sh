#!/usr/bin/env bash
# Measures what the monitor costs on a host, for the DaemonSet's resource
# requests and limits: the release build runs on simgpu (2 devices of 16 GiB)
# with TENANTS tenants each holding memory in one process, one more tenant
# running kernels under a compute limit, NVML read every round, and /metrics
# scraped every 5 s. After 10 s of warm-up it reports the monitor's peak
# resident memory (VmHWM in /proc/PID/status) and its CPU (utime + stime
# from /proc/PID/stat) over SECONDS.
#
# Usage: scripts/measure-monitor.sh [SECONDS] [TENANTS]    (default 60 4)
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/measure-monitor.sh [SECONDS] [TENANTS]"
if [ $# -gt 2 ]; then
    echo "measure-monitor: at most two arguments; $usage" >&2
    exit 2
fi
seconds=${1:-60}
tenants=${2:-4}
case "$seconds,$tenants" in
    *[!0-9,]*|,*|*,|0,*|*,0) echo "measure-monitor: SECONDS and TENANTS are whole numbers above 0; $usage" >&2; exit 2 ;;
esac
bash scripts/setup.sh >/dev/null
cargo build --release --quiet -p gpuslice-monitor -p gpuslice-shim -p simgpu
bin=target/release

work=$(mktemp -d)
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

export SIMGPU_STATE=$work/simgpu.state SIMGPU_MEMORY=16GiB SIMGPU_DEVICES=2
"$bin/gpuslice" sim -- true # lays out $bin/simgpu-libs to link against
for program in memctl compute_load; do
    gcc -O1 -I .deps/include -I tests/c "tests/c/$program.c" -o "$work/$program" \
        -L "$bin/simgpu-libs" -lcuda -lnvidia-ml -lpthread
done
cat >"$work/monitor.toml" <<'TOML'
on_violation = "report"
[tenants.tenant-1]
memory = "2GiB"
[tenants.tenant-2]
memory = { 0 = "2GiB", 1 = "1GiB" }
TOML

"$bin/gpuslice" monitor --dir "$work/ledger" --config "$work/monitor.toml" --listen 127.0.0.1:0 \
    --nvml-lib "$bin/libsimgpu.so" >"$work/monitor.out" 2>"$work/monitor.err" &
monitor=$!
pids+=("$monitor")
for _ in $(seq 100); do
    grep -q '^listen=' "$work/monitor.out" && break
    sleep 0.1
done
addr=$(sed -n 's/^listen=//p' "$work/monitor.out")
[ -n "$addr" ] || { echo "measure-monitor: the monitor did not start: $(cat "$work/monitor.err")" >&2; exit 1; }

# Tenants hold their memory until the fifo closes.
mkfifo "$work/hold"
exec 3<>"$work/hold"
for i in $(seq "$tenants"); do
    "$bin/gpuslice" run --sim --memory 2GiB --tenant "tenant-$i" --dir "$work/ledger" -- \
        "$work/memctl" init ctx alloc:a:512M ctx:1 alloc:b:256M hold <&3 >/dev/null &
    pids+=("$!")
done
"$bin/gpuslice" run --sim --compute-limit 30 --tenant busy --dir "$work/ledger" -- \
    "$work/compute_load" kernel 1000 $((seconds + 20)) >/dev/null &
pids+=("$!")
(while sleep 5; do curl -s "http://$addr/metrics" >/dev/null || true; done) &
pids+=("$!")

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$monitor/stat"; }
sleep 10
start=$(cpu_ticks)
sleep "$seconds"
end=$(cpu_ticks)
hz=$(getconf CLK_TCK)
hwm_kib=$(awk '/^VmHWM:/ { print $2 }' "/proc/$monitor/status")
rss_kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$monitor/status")
tracked=$(curl -s "http://$addr/metrics" | grep -c '^gpuslice_tenant_processes{' || true)
awk -v t="$tenants" -v s="$seconds" -v d="$((end - start))" -v hz="$hz" -v hwm="$hwm_kib" -v rss="$rss_kib" -v series="$tracked" 'BEGIN {
    printf "monitor, %d+1 tenants on 2 simulated devices, %d tenant series in /metrics:\n", t, series
    printf "  peak RSS (VmHWM) %.1f MiB, RSS now %.1f MiB\n", hwm / 1024, rss / 1024
    printf "  CPU %.1f millicores (utime+stime %d ticks over %d s)\n", d / hz / s * 1000, d, s
}'
