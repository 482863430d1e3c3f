#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, from upstream at the versions
# pinned in scripts/k8s/versions.env: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler on the host; per node a
# containerd, a kubelet and a kube-proxy, each node a host of its own:
#   - a network namespace (gsk8s-<node>), a veth on the host's bridge gsk8s0
#     (10.201.0.0/24; the API server listens on 10.201.0.1:6443), its pods on
#     a bridge of their own (10.244.<n>.0/24);
#   - a mount namespace in which the node's own directories are mounted at
#     the usual paths (/var/lib/kubelet, /var/lib/containerd, /run/containerd,
#     /etc/cni/net.d, /etc/cdi, /var/run/cdi, /run/gpuslice, /var/log/pods,
#     ...), so that a DaemonSet's hostPaths mean that node's files, as on a
#     real one, and two nodes never share a file;
#   - a v1 cgroup root /<node> (two kubelets may not both own /kubepods);
#   - a simulated GPU: simgpu's state in /var/lib/simgpu, and a CDI spec
#     (/etc/cdi/simgpu.yaml) that gives containers of NVIDIA's CDI devices
#     nvidia.com/gpu=<uuid> simgpu as libcuda.so.1 and libnvidia-ml.so.1,
#     as NVIDIA's CDI spec gives them the real driver.
# On the host beside the control plane, the metrics pipeline that a
# HorizontalPodAutoscaler reads: Prometheus (Debian's package) scraping
# every node's gpuslice monitor, and prometheus-adapter serving its
# recorded series as the custom metrics API (custom.metrics.k8s.io), with
# the rules, RBAC and APIServices of deploy/kubernetes/autoscaling.
#
#   scripts/k8s-cluster.sh up [--nodes N]     build what is missing, start, wait until every node is Ready
#   scripts/k8s-cluster.sh down               stop everything, remove what `up` made on the host
#   scripts/k8s-cluster.sh status             what runs
#   scripts/k8s-cluster.sh kubectl ARGS...    the pinned kubectl with the cluster's kubeconfig
#   scripts/k8s-cluster.sh on NODE CMD...     run CMD in NODE's namespaces (its files, its network)
#   scripts/k8s-cluster.sh restart kubelet|containerd NODE
#
# The kubeconfig is .deps/k8s/cluster/kubeconfig (GPUSLICE_K8S_DIR moves
# the cluster's directory): `export KUBECONFIG=$PWD/.deps/k8s/cluster/kubeconfig`
# and .deps/k8s/bin/kubectl reach it. The cluster stays up until `down`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source scripts/k8s/versions.env
deps=$root/.deps/k8s
bin=$deps/bin
cluster=${GPUSLICE_K8S_DIR:-$deps/cluster}
pki=$cluster/pki
logs=$cluster/logs
pids=$cluster/pids
export PATH=$bin:$PATH

bridge=gsk8s0
host_ip=10.201.0.1
api_port=6443
etcd_port=12379
service_cidr=10.96.0.0/16
service_ip=10.96.0.1
cluster_cidr=10.244.0.0/16
feature_gates=DRAConsumableCapacity=true
# Simulated GPUs per node: SIMGPU_DEVICES of SIMGPU_MEMORY each.
simgpu_devices=${GPUSLICE_K8S_GPUS:-1}
simgpu_memory=${GPUSLICE_K8S_GPU_MEMORY:-40GiB}

say() { echo "k8s-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

node_ip() { echo "10.201.0.$((10 + ${1#node}))"; }
pod_cidr() { echo "10.244.${1#node}.0/24"; }
node_dir() { echo "$cluster/nodes/$1"; }
netns() { echo "gsk8s-$1"; }
mntns() { echo "$cluster/ns/$1.mnt"; }
# The paths each node has of its own, inside its mount namespace.
node_paths=(/var/lib/kubelet /var/lib/containerd /run/containerd /run/runc /var/log/pods /var/log/containers
    /etc/cni/net.d /var/lib/cni /etc/cdi /var/run/cdi /run/gpuslice /var/lib/simgpu /run/netns)
# on NODE CMD...: CMD in NODE's network and mount namespaces.
on() {
    local node=$1
    shift
    nsenter --net="/run/netns/$(netns "$node")" --mount="$(mntns "$node")" -- "$@"
}
nodes() { ls "$cluster/nodes" 2>/dev/null || true; }
kubectl() { "$bin/kubectl" --kubeconfig "$cluster/kubeconfig" "$@"; }

# start NAME CMD...: CMD in the background, its output in logs/NAME.log.
start() {
    local name=$1
    shift
    setsid "$@" >>"$logs/$name.log" 2>&1 </dev/null &
    echo $! >"$pids/$name"
}
alive() { [ -f "$pids/$1" ] && kill -0 "$(cat "$pids/$1")" 2>/dev/null; }
# stop NAME: SIGTERM, then SIGKILL if it has not exited within 20 s (a
# component that is still shutting down keeps its port).
stop() {
    local pid
    pid=$(cat "$pids/$1" 2>/dev/null) || return 0
    if kill "$pid" 2>/dev/null; then
        local tries=0
        while kill -0 "$pid" 2>/dev/null && [ $tries -lt 100 ]; do
            sleep 0.2
            tries=$((tries + 1))
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pids/$1"
}
# wait_for WHAT SECONDS [--process NAME] CMD...: until CMD succeeds; fails
# at once, with the end of its log, when the process NAME has exited.
wait_for() {
    local what=$1 limit=$2 started=$SECONDS process=
    shift 2
    if [ "${1:-}" = --process ]; then
        process=$2
        shift 2
    fi
    until "$@" >/dev/null 2>&1; do
        if [ -n "$process" ] && ! alive "$process"; then
            say "$what: $process exited; the end of $logs/$process.log:"
            tail -5 "$logs/$process.log" >&2
            return 1
        fi
        if [ $((SECONDS - started)) -ge "$limit" ]; then
            say "$what: not ready after $limit s (logs in $logs)"
            return 1
        fi
        sleep 0.5
    done
    say "$what ready ($((SECONDS - started)) s)"
}

# --- certificates -----------------------------------------------------------------
# cert NAME SUBJECT [SANS]: a key and a certificate signed by the cluster CA.
cert() {
    local name=$1 subject=$2 sans=${3:-}
    [ -f "$pki/$name.crt" ] && return
    openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
    openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr" 2>/dev/null
    local ext=$pki/$name.ext
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "$sans" ]; then
            echo "extendedKeyUsage=serverAuth,clientAuth"
            echo "subjectAltName=$sans"
        else
            echo "extendedKeyUsage=clientAuth"
        fi
    } >"$ext"
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/${4:-ca}.crt" -CAkey "$pki/${4:-ca}.key" -CAcreateserial \
        -days 3650 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
    rm -f "$pki/$name.csr" "$ext"
}
ca() {
    [ -f "$pki/$1.crt" ] && return
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -subj "/CN=$2" -days 3650 -sha256 \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out "$pki/$1.crt" 2>/dev/null
}
# kubeconfig FILE CERT: a kubeconfig that authenticates with CERT.
kubeconfig() {
    local file=$1 name=$2 server=${3:-https://$host_ip:$api_port}
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpuslice-k8s
  cluster:
    certificate-authority: $pki/ca.crt
    server: $server
users:
- name: $name
  user:
    client-certificate: $pki/$name.crt
    client-key: $pki/$name.key
contexts:
- name: gpuslice-k8s
  context: {cluster: gpuslice-k8s, user: $name}
current-context: gpuslice-k8s
EOF
}
certificates() {
    mkdir -p "$pki"
    ca ca gpuslice-k8s-ca
    ca front-proxy-ca gpuslice-k8s-front-proxy-ca
    cert apiserver /CN=kube-apiserver "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:$service_ip,IP:$host_ip,IP:127.0.0.1"
    cert admin "/O=system:masters/CN=kubernetes-admin"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    cert controller-manager /CN=system:kube-controller-manager
    cert scheduler /CN=system:kube-scheduler
    cert kube-proxy /CN=system:kube-proxy
    cert front-proxy-client /CN=front-proxy-client "" front-proxy-ca
    # prometheus-adapter: its serving certificate, for the name the API
    # server checks (its Service's), and a client one whose user is its
    # ServiceAccount's name, so that the RBAC of
    # deploy/kubernetes/autoscaling/custom-metrics-api.yaml is what it has.
    cert prometheus-adapter-serving /CN=prometheus-adapter "DNS:prometheus-adapter.custom-metrics.svc,IP:$host_ip"
    cert prometheus-adapter "/O=system:serviceaccounts/CN=system:serviceaccount:custom-metrics:prometheus-adapter"
    [ -f "$pki/sa.key" ] || { openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null && openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null; }
    kubeconfig "$cluster/kubeconfig" admin
    kubeconfig "$cluster/controller-manager.kubeconfig" controller-manager
    kubeconfig "$cluster/scheduler.kubeconfig" scheduler
    kubeconfig "$cluster/kube-proxy.kubeconfig" kube-proxy
    kubeconfig "$cluster/prometheus-adapter.kubeconfig" prometheus-adapter
}

# --- the control plane --------------------------------------------------------------
control_plane() {
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add "$bridge" type bridge
        ip addr add "$host_ip/24" dev "$bridge"
        ip link set "$bridge" up
    fi
    if ! alive etcd; then
        mkdir -p "$cluster/etcd"
        start etcd "$bin/etcd" --name gpuslice-k8s --data-dir "$cluster/etcd" \
            --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
            --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
            --initial-cluster gpuslice-k8s=http://127.0.0.1:12380
        wait_for etcd 30 --process etcd "$bin/etcdctl" --endpoints "127.0.0.1:$etcd_port" endpoint health
    fi
    if ! alive kube-apiserver; then
        start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
            --bind-address 0.0.0.0 --secure-port "$api_port" --advertise-address "$host_ip" \
            --service-cluster-ip-range "$service_cidr" --allow-privileged=true \
            --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
            --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
            --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
            --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
            --service-account-issuer https://kubernetes.default.svc.cluster.local \
            --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
            --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
            --requestheader-extra-headers-prefix X-Remote-Extra- --requestheader-group-headers X-Remote-Group \
            --requestheader-username-headers X-Remote-User \
            --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
            --enable-aggregator-routing=true \
            --feature-gates "$feature_gates" --profiling=false
        wait_for kube-apiserver 120 --process kube-apiserver kubectl get --raw /readyz
    fi
    if ! alive kube-controller-manager; then
        start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$cluster/controller-manager.kubeconfig" \
            --authentication-kubeconfig "$cluster/controller-manager.kubeconfig" --authorization-kubeconfig "$cluster/controller-manager.kubeconfig" \
            --client-ca-file "$pki/ca.crt" --requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
            --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" --use-service-account-credentials=true \
            --leader-elect=false --bind-address 127.0.0.1 --feature-gates "$feature_gates" --profiling=false \
            --horizontal-pod-autoscaler-sync-period=5s
    fi
    if ! alive kube-scheduler; then
        start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$cluster/scheduler.kubeconfig" \
            --authentication-kubeconfig "$cluster/scheduler.kubeconfig" --authorization-kubeconfig "$cluster/scheduler.kubeconfig" \
            --client-ca-file "$pki/ca.crt" --requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
            --leader-elect=false --bind-address 127.0.0.1 --feature-gates "$feature_gates" --profiling=false
    fi
}

# --- the metrics pipeline -------------------------------------------------------------
prometheus_port=19090
adapter_port=16443
metrics_pipeline() {
    local prometheus=${PROMETHEUS:-/usr/bin/prometheus}
    [ -x "$prometheus" ] || die "no Prometheus at $prometheus (scripts/setup.sh --kubernetes installs Debian's)"
    local rules=$root/deploy/kubernetes/autoscaling
    # The adapter's API: its RBAC and APIServices as the guide gives them,
    # with its serving CA; its Service has no selector, and its endpoint
    # is the adapter on the host.
    sed "s|CA_BUNDLE|$(base64 -w0 "$pki/ca.crt")|" "$rules/custom-metrics-api.yaml" | kubectl apply -f - >/dev/null
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: prometheus-adapter, namespace: custom-metrics}
spec:
  ports: [{name: https, port: 443, targetPort: $adapter_port}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: prometheus-adapter-host
  namespace: custom-metrics
  labels: {kubernetes.io/service-name: prometheus-adapter}
addressType: IPv4
ports: [{name: https, port: $adapter_port, protocol: TCP}]
endpoints: [{addresses: ["$host_ip"], conditions: {ready: true}}]
EOF
    alive prometheus-sd || start prometheus-sd bash "$root/scripts/k8s-cluster.sh" sd-loop
    if ! alive prometheus; then
        mkdir -p "$cluster/prometheus"
        # Every node's monitor, as the chart's metrics Service lists them;
        # the monitor's own namespace and pod labels are kept
        # (honor_labels). Debian's Prometheus is built without Kubernetes
        # service discovery (`kubernetes_sd_configs` is an unknown field),
        # so the Service's endpoints reach it through a file (sd_loop).
        cat >"$cluster/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
rule_files: ["$rules/prometheus-rules.yaml"]
scrape_configs:
  - job_name: gpuslice
    honor_labels: true
    file_sd_configs: [{files: ["$cluster/prometheus-targets.json"], refresh_interval: 2s}]
EOF
        [ -f "$cluster/prometheus-targets.json" ] || echo '[]' >"$cluster/prometheus-targets.json"
        start prometheus "$prometheus" --config.file "$cluster/prometheus.yml" --storage.tsdb.path "$cluster/prometheus" \
            --storage.tsdb.retention.time 1d --web.listen-address "127.0.0.1:$prometheus_port"
        wait_for prometheus 60 --process prometheus curl -sf "http://127.0.0.1:$prometheus_port/-/ready"
    fi
    if ! alive prometheus-adapter; then
        # Series are listed again every 5 s (default 10 min), so that a
        # metric is served as soon as Prometheus records it.
        start prometheus-adapter "$bin/prometheus-adapter" --prometheus-url "http://127.0.0.1:$prometheus_port" \
            --config "$rules/adapter-config.yaml" --metrics-relist-interval 5s --metrics-max-age 1m \
            --lister-kubeconfig "$cluster/prometheus-adapter.kubeconfig" \
            --authentication-kubeconfig "$cluster/prometheus-adapter.kubeconfig" \
            --authorization-kubeconfig "$cluster/prometheus-adapter.kubeconfig" \
            --bind-address "$host_ip" --secure-port "$adapter_port" \
            --tls-cert-file "$pki/prometheus-adapter-serving.crt" --tls-private-key-file "$pki/prometheus-adapter-serving.key"
        wait_for "the custom metrics API" 90 --process prometheus-adapter kubectl get --raw /apis/custom.metrics.k8s.io/v1beta2
    fi
}

# Every 2 s, the ready endpoints of the chart's metrics Service (port 9494,
# the chart's monitor.port) as Prometheus' file_sd targets, each labelled
# with its node: one Python process that asks the API server with the
# admin's certificate (a kubectl started every 2 s cost 3 % of a core).
sd_loop() {
    exec python3 - "$cluster/prometheus-targets.json" "https://$host_ip:$api_port" "$pki" <<'PY'
import json, os, ssl, sys, time, urllib.request
path, server, pki = sys.argv[1:4]
context = ssl.create_default_context(cafile=f"{pki}/ca.crt")
context.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")
url = f"{server}/apis/discovery.k8s.io/v1/namespaces/gpuslice/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dgpuslice-metrics"
while True:
    time.sleep(2)
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            slices = json.load(response)["items"]
    except Exception as error:
        print(f"sd-loop: {error}", file=sys.stderr, flush=True)
        continue
    targets = [
        {"targets": [f"{e['addresses'][0]}:9494"], "labels": {"node": e.get("nodeName", "")}}
        for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")
    ]
    with open(path + ".tmp", "w") as f:
        json.dump(targets, f)
    os.replace(path + ".tmp", path)
PY
}

# --- a node -------------------------------------------------------------------------
# The v1 cgroup hierarchies the kubelet uses (the cgroup2 mount of this
# hybrid machine is left alone).
cgroup_dirs() {
    local mount
    for mount in /sys/fs/cgroup/*; do
        [ -d "$mount" ] && [ "$(basename "$mount")" != unified ] && mountpoint -q "$mount" && echo "$mount"
    done
}

node_namespaces() {
    local node=$1 dir
    dir=$(node_dir "$node")
    local ns
    ns=$(netns "$node")
    # The network: a veth from the host's bridge, the node's routes to the
    # other nodes' pods, and the host's to its pods.
    if ! ip netns list | grep -qw "$ns"; then
        ip netns add "$ns"
        local host_end=gsk8s-${node#node}
        ip link add "$host_end" type veth peer name eth0 netns "$ns"
        ip link set "$host_end" master "$bridge" up
        ip -n "$ns" addr add "$(node_ip "$node")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" route add default via "$host_ip"
        nsenter --net="/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1
        ip route replace "$(pod_cidr "$node")" via "$(node_ip "$node")"
        local other
        for other in $(nodes); do
            [ "$other" = "$node" ] && continue
            ip -n "$ns" route replace "$(pod_cidr "$other")" via "$(node_ip "$other")"
            ip -n "$(netns "$other")" route replace "$(pod_cidr "$node")" via "$(node_ip "$node")" 2>/dev/null || true
        done
    fi
    # The files: a persistent mount namespace (bound to a file on a private
    # mount) in which the node's own directories cover the usual paths.
    mkdir -p "$cluster/ns"
    if ! mountpoint -q "$cluster/ns"; then
        mount --bind "$cluster/ns" "$cluster/ns"
        mount --make-private "$cluster/ns"
    fi
    local handle
    handle=$(mntns "$node")
    if ! mountpoint -q "$handle" 2>/dev/null; then
        touch "$handle"
        unshare --mount="$handle" --propagation private true
        local path
        for path in "${node_paths[@]}"; do
            local source=$dir/fs${path//\//_}
            mkdir -p "$source"
            # The mount point on the host: an empty directory, made once
            # and recorded, so that `down` removes only what it made.
            if [ ! -e "$path" ]; then
                mkdir -p "$path"
                echo "$path" >>"$cluster/made-paths"
            fi
            nsenter --mount="$handle" -- mount --bind "$source" "$path"
        done
    fi
    # The cgroup root of the node's pods.
    local hierarchy
    for hierarchy in $(cgroup_dirs); do
        mkdir -p "$hierarchy/$node"
        if [ -f "$hierarchy/cpuset.cpus" ]; then
            cat "$hierarchy/cpuset.cpus" >"$hierarchy/$node/cpuset.cpus"
            cat "$hierarchy/cpuset.mems" >"$hierarchy/$node/cpuset.mems"
        fi
    done
}

node_simgpu() {
    local node=$1 dir
    dir=$(node_dir "$node")
    local sim=$dir/fs_var_lib_simgpu
    # The library is replaced when it was rebuilt (a new file: processes
    # that mapped the old one keep it); the state, never.
    cmp -s "$deps/simgpu/libsimgpu.so" "$sim/libsimgpu.so" || install -m 0755 "$deps/simgpu/libsimgpu.so" "$sim/libsimgpu.so"
    [ -f "$sim/state" ] && [ -f "$dir/fs_etc_cdi/simgpu.json" ] && return
    ln -sf libsimgpu.so "$sim/libcuda.so.1"
    ln -sf libsimgpu.so "$sim/libnvidia-ml.so.1"
    cat >"$sim/simgpu.env" <<EOF
SIMGPU_STATE=/var/lib/simgpu/state
SIMGPU_DEVICES=$simgpu_devices
SIMGPU_MEMORY=$simgpu_memory
EOF
    # The state file exists before any container maps it, readable and
    # writable by every user, as /dev/nvidia* are.
    local slice
    slice=$(on "$node" env SIMGPU_STATE=/var/lib/simgpu/state SIMGPU_DEVICES="$simgpu_devices" SIMGPU_MEMORY="$simgpu_memory" \
        "$root/target/release/gpuslice-dra" resource-slice --node-name "$node" --nvml-lib /var/lib/simgpu/libnvidia-ml.so.1)
    chmod 0666 "$sim/state"
    # NVIDIA's CDI spec for these GPUs, as `nvidia-ctk cdi generate
    # --device-name-strategy=uuid` writes one for a real driver: a device
    # per GPU UUID, and `all`.
    SLICE=$slice python3 - "$dir/fs_etc_cdi/simgpu.json" "$simgpu_devices" "$simgpu_memory" <<'PY'
import json, os, sys
slice = json.loads(os.environ["SLICE"])
path, devices, memory = sys.argv[1], sys.argv[2], sys.argv[3]
uuids = [d["attributes"]["uuid"]["string"] for d in slice["spec"]["devices"]]
driver = {
    "env": ["SIMGPU_STATE=/var/lib/simgpu/state", f"SIMGPU_DEVICES={devices}", f"SIMGPU_MEMORY={memory}"],
    "mounts": [
        {"hostPath": "/var/lib/simgpu/libsimgpu.so", "containerPath": f"/usr/lib/x86_64-linux-gnu/{name}", "options": ["ro", "nosuid", "nodev", "bind"]}
        for name in ("libcuda.so.1", "libnvidia-ml.so.1")
    ] + [{"hostPath": "/var/lib/simgpu/state", "containerPath": "/var/lib/simgpu/state", "options": ["rw", "nosuid", "nodev", "bind"]}],
}
spec = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": u, "containerEdits": {"env": [f"CUDA_VISIBLE_DEVICES={u}"]}} for u in uuids]
    + [{"name": "all", "containerEdits": {"env": ["CUDA_VISIBLE_DEVICES=" + ",".join(uuids)]}}],
    "containerEdits": driver,
}
with open(path, "w") as f:
    json.dump(spec, f, indent=1)
PY
}

node_config() {
    local node=$1 dir
    dir=$(node_dir "$node")
    local ip
    ip=$(node_ip "$node")
    cert "node-$node" "/O=system:nodes/CN=system:node:$node"
    cert "kubelet-$node" "/CN=$node" "DNS:$node,IP:$ip"
    kubeconfig "$dir/kubelet.kubeconfig" "node-$node"
    cat >"$dir/containerd.toml" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  # runc cannot lower an oom_score_adj on this machine (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$bin/cni"]
    conf_dir = "/etc/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$bin/runc"
        Root = "/run/runc"
        SystemdCgroup = false
[plugins.'io.containerd.nri.v1.nri']
  disable = true
EOF
    cat >"$dir/fs_etc_cni_net.d/10-gsk8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gsk8s",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(pod_cidr "$node")"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1 (kubelets from 1.35 refuse them unless told).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$node
failSwapOn: false
# No host-wide iptables rules from the kubelet.
makeIPTablesUtilChains: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-$node.crt
tlsPrivateKeyFile: $pki/kubelet-$node.key
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
volumePluginDir: /var/lib/kubelet/volume-plugins
resolvConf: ""
serializeImagePulls: false
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
featureGates: {DRAConsumableCapacity: true}
EOF
    cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $cluster/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $cluster_cidr
hostnameOverride: $node
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0}
EOF
}

node_containerd() {
    local node=$1
    alive "containerd-$node" && return
    start "containerd-$node" nsenter --net="/run/netns/$(netns "$node")" --mount="$(mntns "$node")" -- \
        "$bin/containerd" --config "$(node_dir "$node")/containerd.toml"
    wait_for "containerd on $node" 60 --process "containerd-$node" on "$node" "$bin/ctr" -a /run/containerd/containerd.sock version
}

node_images() {
    local node=$1 image
    for image in pause gpuslice client; do
        # (ctr warns that cgroup v1 is deprecated, at every call.)
        on "$node" "$bin/ctr" -a /run/containerd/containerd.sock -n k8s.io images import "$deps/images/$image.tar" 2>&1 >/dev/null |
            grep -v 'support for cgroup v1 is deprecated' >&2 || true
    done
}

node_kubelet() {
    local node=$1 dir
    dir=$(node_dir "$node")
    alive "kubelet-$node" && return
    start "kubelet-$node" nsenter --net="/run/netns/$(netns "$node")" --mount="$(mntns "$node")" -- \
        "$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
        --hostname-override "$node" --node-ip "$(node_ip "$node")" --node-labels nvidia.com/gpu.present=true
}

node_proxy() {
    local node=$1
    alive "kube-proxy-$node" && return
    start "kube-proxy-$node" nsenter --net="/run/netns/$(netns "$node")" --mount="$(mntns "$node")" -- \
        "$bin/kube-proxy" --config "$(node_dir "$node")/kube-proxy.yaml"
}

up() {
    local count=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) [ $# -ge 2 ] || die "--nodes needs a number (1 to 4)"; count=$2; shift 2 ;;
            --nodes=*) count=${1#--nodes=}; shift ;;
            *) die "up: unknown option ${1@Q}; accepted: --nodes N" ;;
        esac
    done
    case "$count" in 1|2|3|4) ;; *) die "--nodes ${count@Q}: expected 1 to 4" ;; esac
    [ "$(id -u)" = 0 ] || die "up needs root (network namespaces, mounts, cgroups)"
    say "building what is missing (scripts/k8s/build.sh; cold, most of half an hour)"
    bash scripts/k8s/build.sh
    if [ ! -s "$deps/images/client.tar" ] || [ -n "$(find deploy/Dockerfile tests/k8s shim simgpu monitor dra ledger abi tests/c -newer "$deps/images/client.tar" -type f -print -quit)" ]; then
        say "building the images (scripts/k8s/images.sh)"
        bash scripts/k8s/images.sh
    fi
    command -v iptables >/dev/null || { say "installing iptables (kube-proxy)"; apt-get update -qq && apt-get install -y -qq iptables >/dev/null; }
    mkdir -p "$cluster" "$logs" "$pids" "$cluster/nodes"
    local n
    for n in $(seq 1 "$count"); do mkdir -p "$(node_dir "node$n")"; done
    certificates
    say "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
    control_plane
    for n in $(seq 1 "$count"); do
        local node=node$n
        say "starting $node ($(node_ip "$node"), pods $(pod_cidr "$node"), $simgpu_devices simulated GPU(s) of $simgpu_memory)"
        node_namespaces "$node"
        node_config "$node"
        node_simgpu "$node"
        node_containerd "$node"
        node_images "$node"
        node_proxy "$node"
        node_kubelet "$node"
    done
    for n in $(seq 1 "$count"); do
        wait_for "node$n Ready" 120 --process "kubelet-node$n" kubectl wait --for=condition=Ready "node/node$n" --timeout=2s
    done
    wait_for "the default ServiceAccount" 60 kubectl get serviceaccount default
    say "starting Prometheus and prometheus-adapter (the custom metrics API)"
    metrics_pipeline
    say "up: export KUBECONFIG=$cluster/kubeconfig; kubectl is $bin/kubectl"
}

# Every process whose mount namespace is NODE's, or whose cgroup is under
# NODE's root.
node_processes() {
    local node=$1 handle target
    handle=$(mntns "$node")
    target=$(stat -L -c %i "$handle" 2>/dev/null || true)
    local p
    for p in /proc/[0-9]*; do
        if [ -n "$target" ] && [ "$(stat -L -c %i "$p/ns/mnt" 2>/dev/null)" = "$target" ]; then
            echo "${p#/proc/}"
        fi
    done
    local hierarchy
    for hierarchy in $(cgroup_dirs); do
        [ -d "$hierarchy/$node" ] && find "$hierarchy/$node" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
}

down() {
    local name node
    for name in $(ls "$pids" 2>/dev/null); do
        case "$name" in kubelet-*|kube-proxy-*) stop "$name" ;; esac
    done
    for node in $(nodes); do
        # The kubelet is gone: nothing restarts the pods.
        local round
        for round in 1 2 3; do
            node_processes "$node" | sort -u | xargs -r kill -9 2>/dev/null || true
            sleep 0.3
        done
    done
    for name in $(ls "$pids" 2>/dev/null); do
        stop "$name"
    done
    for node in $(nodes); do
        local hierarchy
        for hierarchy in $(cgroup_dirs); do
            [ -d "$hierarchy/$node" ] && find "$hierarchy/$node" -depth -type d -exec rmdir {} + 2>/dev/null || true
        done
        umount "$(mntns "$node")" 2>/dev/null || true
        ip netns del "$(netns "$node")" 2>/dev/null || true
        ip route del "$(pod_cidr "$node")" 2>/dev/null || true
    done
    mountpoint -q "$cluster/ns" 2>/dev/null && umount "$cluster/ns"
    ip link del "$bridge" 2>/dev/null || true
    if [ -f "$cluster/made-paths" ]; then
        sort -ru "$cluster/made-paths" | while read -r path; do rmdir "$path" 2>/dev/null || true; done
        rm -f "$cluster/made-paths"
    fi
    # Nothing of the cluster is kept but its certificates' CA and logs:
    # the next `up` starts from an empty etcd and empty nodes.
    rm -rf "$cluster/etcd" "$cluster/nodes" "$cluster/ns" "$cluster/prometheus" "$cluster/prometheus.yml" "$cluster/prometheus-targets.json"
    say "down"
}

status() {
    local name
    for name in $(ls "$pids" 2>/dev/null); do
        if alive "$name"; then echo "$name: running (pid $(cat "$pids/$name"))"; else echo "$name: stopped (log: $logs/$name.log)"; fi
    done
    [ -f "$cluster/kubeconfig" ] && alive kube-apiserver && kubectl get nodes -o wide || true
}

command=${1:-}
[ $# -gt 0 ] && shift
case "$command" in
    up) up "$@" ;;
    down) down ;;
    status) status ;;
    kubectl) kubectl "$@" ;;
    sd-loop) sd_loop ;;
    on)
        [ $# -ge 2 ] || die "usage: on NODE CMD..."
        on "$@"
        ;;
    restart)
        [ $# -eq 2 ] || die "usage: restart kubelet|containerd NODE"
        what=$1 node=$2
        [ -d "$(node_dir "$node")" ] || die "no node ${node@Q}: $(nodes | tr '\n' ' ')"
        case "$what" in
            kubelet)
                stop "kubelet-$node"
                node_kubelet "$node"
                ;;
            containerd)
                stop "containerd-$node"
                node_containerd "$node"
                ;;
            *) die "restart ${what@Q}: expected kubelet or containerd" ;;
        esac
        ;;
    *) die "usage: scripts/k8s-cluster.sh up [--nodes N] | down | status | kubectl ARGS... | on NODE CMD... | restart kubelet|containerd NODE" ;;
esac
