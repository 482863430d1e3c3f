#!/usr/bin/env bash
# Fetches an older distribution's C library, for the test that runs the
# portable shim on it (tests/shim_glibc_floor.rs): Debian 11's libc6,
# glibc 2.31, the same as Ubuntu 20.04's and older than the 2.34 the
# shim built on this host needs. It lands in .deps/glibc-2.31/ (idempotent).
#
# apt fetches it with lists and a cache of its own, so the host's package
# state is untouched; apt checks the archive's signature with the Debian
# keyring the host already has.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=bullseye
version=2.31
dest=.deps/glibc-$version
loader="$dest/lib/x86_64-linux-gnu/ld-$version.so"
if [ -x "$loader" ]; then
    exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
    echo "old-glibc: only x86_64 is fetched; the test that needs it is skipped here" >&2
    exit 0
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ ! -f "$keyring" ]; then
    echo "old-glibc: $keyring is missing (install debian-archive-keyring)" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main" >"$work/sources.list"
apt_options=(
    -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Dir::State::status=/dev/null
    -o APT::Architecture=amd64 -o APT::Architectures=amd64 -o APT::Sandbox::User=root
)
apt-get "${apt_options[@]}" -qq update
package=$(apt-cache "${apt_options[@]}" madison libc6 | awk -F'|' 'NR == 1 { gsub(/ /, "", $2); print $2 }')
case "$package" in
    "$version"-*) ;;
    *) echo "old-glibc: $suite offers libc6 '${package}', not glibc $version" >&2; exit 1 ;;
esac
(cd "$work" && apt-get "${apt_options[@]}" -qq download "libc6=$package")
rm -rf "$dest.partial"
dpkg-deb -x "$work"/libc6_*.deb "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "old-glibc: $dest holds Debian $suite's libc6 $package" >&2
