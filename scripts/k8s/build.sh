#!/usr/bin/env bash
# Builds the Kubernetes test cluster's components at the versions pinned in
# scripts/k8s/versions.env, into .deps/k8s/bin:
#   kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
#   kubectl (k8s.io/kubernetes), containerd containerd-shim-runc-v2 ctr
#   (github.com/containerd/containerd/v2), helm (helm.sh/helm/v4),
#   prometheus-adapter (sigs.k8s.io/prometheus-adapter, the custom metrics
#   API server of the autoscaling test), etcd etcdctl runc and the CNI
#   plugins (Debian 12's packages, unpacked).
#
# Each component is rebuilt only when its pinned version changes (a stamp
# beside it names the version it was built from). A cold build on a 2-core
# machine takes most of half an hour; the Go build cache is removed at the
# end (it is several GB and only a version change needs it again) unless
# --keep-go-cache is given.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
# shellcheck source=versions.env
source scripts/k8s/versions.env
deps=$root/.deps/k8s
bin=$deps/bin
mkdir -p "$bin" "$deps/src"
keep_cache=0
for arg in "$@"; do
    case "$arg" in
        --keep-go-cache) keep_cache=1 ;;
        *) echo "build: unknown argument $arg (accepted: --keep-go-cache)" >&2; exit 2 ;;
    esac
done

export GOMODCACHE=$deps/gomod GOCACHE=$deps/gocache GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
export GONOSUMDB=${GONOSUMDB:-} GOTELEMETRY=off

say() { echo "k8s-build: $*" >&2; }
started=$SECONDS
took() { echo "$((SECONDS - started)) s"; }

# up_to_date NAME VERSION: the stamp of NAME says VERSION and its files exist.
up_to_date() {
    local name=$1 version=$2
    shift 2
    [ "$(cat "$bin/.$name.version" 2>/dev/null)" = "$version" ] || return 1
    for file in "$@"; do [ -x "$bin/$file" ] || return 1; done
}
stamp() { echo "$2" >"$bin/.$1.version"; }

# --- Debian packages: etcd, runc, CNI plugins --------------------------------
debian_packages() {
    local want="etcd-server=$ETCD_DEBIAN_VERSION etcd-client=$ETCD_DEBIAN_VERSION runc=$RUNC_DEBIAN_VERSION containernetworking-plugins=$CNI_PLUGINS_DEBIAN_VERSION"
    if up_to_date debian "$want" etcd etcdctl runc cni/bridge; then return; fi
    say "fetching etcd, runc and the CNI plugins from Debian ($want)"
    local work
    work=$(mktemp -d)
    # shellcheck disable=SC2086
    if ! (cd "$work" && apt-get download -qq $want 2>/dev/null); then
        apt-get update -qq
        # shellcheck disable=SC2086
        (cd "$work" && apt-get download -qq $want) || {
            say "cannot download $want from Debian's archive; pin what 'apt-cache policy etcd-server runc containernetworking-plugins' offers in scripts/k8s/versions.env"
            exit 1
        }
    fi
    for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
    install -m 755 "$work/root/usr/bin/etcd" "$work/root/usr/bin/etcdctl" "$bin/"
    install -m 755 "$work/root/usr/sbin/runc" "$bin/"
    rm -rf "$bin/cni" && mkdir -p "$bin/cni"
    cp -a "$work/root/usr/lib/cni/." "$bin/cni/"
    rm -rf "$work"
    stamp debian "$want"
}

# --- Kubernetes ---------------------------------------------------------------
kubernetes() {
    local programs=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
    if up_to_date kubernetes "$KUBERNETES_VERSION" "${programs[@]}"; then return; fi
    local src=$deps/src/kubernetes staging=v0.${KUBERNETES_VERSION#v1.}
    say "building Kubernetes $KUBERNETES_VERSION (${programs[*]}); cold, this takes 10 to 20 minutes on 2 cores"
    rm -rf "$src" && mkdir -p "$src"
    # k8s.io/kubernetes replaces its staging modules with local paths, so it
    # cannot be built with `go install`: a module of our own requires it and
    # points each staging module at its published version.
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -f "$gomod" ] || { say "go mod download k8s.io/kubernetes@$KUBERNETES_VERSION gave no go.mod"; exit 1; }
    {
        echo "module gpuslice.dev/k8s-build"
        echo
        sed -n 's/^go \([0-9.]*\)$/go \1/p' "$gomod" | head -1
        echo
        echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
        echo
        echo "replace ("
        # Every `k8s.io/<m> => ./staging/src/k8s.io/<m>` line; the sample
        # modules are examples, not needed (and not all published).
        sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod" | grep -v '^k8s.io/sample-' |
            while read -r module; do echo "	$module => $module $staging"; done
        echo ")"
    } >"$src/go.mod"
    cat >"$src/tools.go" <<'EOF'
//go:build tools

package tools
EOF
    local packages=()
    for program in "${programs[@]}"; do packages+=("k8s.io/kubernetes/cmd/$program"); done
    (cd "$src" && go get "${packages[@]}")
    local minor=${KUBERNETES_VERSION#v1.}
    minor=${minor%%.*}
    local v=k8s.io/component-base/version
    local ldflags="-s -w -X $v.gitVersion=$KUBERNETES_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    ldflags+=" -X $v.buildDate=1970-01-01T00:00:00Z"
    ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/" "${packages[@]}")
    stamp kubernetes "$KUBERNETES_VERSION"
    say "Kubernetes built ($(took) so far)"
}

# --- containerd -----------------------------------------------------------------
containerd() {
    local programs=(containerd containerd-shim-runc-v2 ctr)
    if up_to_date containerd "$CONTAINERD_VERSION" "${programs[@]}"; then return; fi
    local src=$deps/src/containerd module=github.com/containerd/containerd/v2
    say "building containerd $CONTAINERD_VERSION"
    rm -rf "$src" && mkdir -p "$src"
    printf 'module gpuslice.dev/containerd-build\n\ngo 1.24\n' >"$src/go.mod"
    # The command packages, not the module root: go.sum then holds what
    # they import.
    (cd "$src" && go get "$module/cmd/containerd@$CONTAINERD_VERSION" "$module/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$module/cmd/ctr@$CONTAINERD_VERSION")
    local ldflags="-s -w -X $module/version.Version=$CONTAINERD_VERSION -X $module/version.Package=$module"
    (cd "$src" && go build -trimpath -tags no_btrfs -ldflags "$ldflags" -o "$bin/" "$module/cmd/containerd" "$module/cmd/ctr")
    # The shim is static, as containerd's own release builds it: it runs in
    # every sandbox's context.
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/" "$module/cmd/containerd-shim-runc-v2")
    stamp containerd "$CONTAINERD_VERSION"
    say "containerd built ($(took) so far)"
}

# --- Helm -------------------------------------------------------------------------
helm() {
    if up_to_date helm "$HELM_VERSION" helm; then return; fi
    local src=$deps/src/helm module=helm.sh/helm/v4
    say "building helm $HELM_VERSION"
    rm -rf "$src" && mkdir -p "$src"
    printf 'module gpuslice.dev/helm-build\n\ngo 1.24\n' >"$src/go.mod"
    (cd "$src" && go get "$module/cmd/helm@$HELM_VERSION")
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $module/internal/version.version=$HELM_VERSION" -o "$bin/" "$module/cmd/helm")
    stamp helm "$HELM_VERSION"
    say "helm built ($(took) so far)"
}

# --- prometheus-adapter ------------------------------------------------------------
# The custom metrics API (custom.metrics.k8s.io) from Prometheus queries,
# which the HorizontalPodAutoscaler reads. Its module has no replace
# directives: a module of our own requires its command package.
prometheus_adapter() {
    if up_to_date prometheus-adapter "$PROMETHEUS_ADAPTER_VERSION" prometheus-adapter; then return; fi
    local src=$deps/src/prometheus-adapter module=sigs.k8s.io/prometheus-adapter
    say "building prometheus-adapter $PROMETHEUS_ADAPTER_VERSION"
    rm -rf "$src" && mkdir -p "$src"
    printf 'module gpuslice.dev/prometheus-adapter-build\n\ngo 1.22\n' >"$src/go.mod"
    (cd "$src" && go get "$module/cmd/adapter@$PROMETHEUS_ADAPTER_VERSION")
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/prometheus-adapter" "$module/cmd/adapter")
    stamp prometheus-adapter "$PROMETHEUS_ADAPTER_VERSION"
    say "prometheus-adapter built ($(took) so far)"
}

# The pause program of the pinned release, for the pause image
# (scripts/k8s/images.sh packs it).
pause() {
    if up_to_date pause "$KUBERNETES_VERSION" pause; then return; fi
    local dir
    dir=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    gcc -Os -static -o "$bin/pause" "$dir/build/pause/linux/pause.c" -DVERSION="${PAUSE_IMAGE##*:}"
    strip "$bin/pause"
    stamp pause "$KUBERNETES_VERSION"
}

command -v go >/dev/null || { say "Go is not installed (the polyglot machines have it; https://go.dev/dl/)"; exit 1; }
debian_packages
kubernetes
containerd
helm
prometheus_adapter
pause
if [ "$keep_cache" = 0 ] && [ -d "$GOCACHE" ]; then
    go clean -cache
    rm -rf "$GOCACHE"
fi
say "components in $bin ($(took))"
