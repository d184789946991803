#!/usr/bin/env bash
# Builds sandboxd's sandbox images offline (no Docker Hub):
#   sandboxd/debian:bookworm  debootstrap --variant=minbase, docker import
#   sandboxd/base:latest      images/base   (+ tag :<content hash>)
#   sandboxd/python:latest    images/python (+ tag :<content hash>)
# Idempotent: the debootstrap rootfs tarball is cached under $CACHE_DIR, the
# import is skipped when the image exists, and a build is skipped when the
# content-hash tag already exists (docker's build cache covers the rest).
#
# Usage: scripts/build-images.sh [--oci DIR] [--no-cache] [--print-mirror]
#   --oci DIR   also `docker save` each image to DIR/sandboxd-<name>.tar
#               (docker archive; `ctr images import` reads it). Skipped when
#               DIR/sandboxd-<name>.id already holds the same image id.
#   --no-cache  rebuild base and python without docker's build cache
#               (the debootstrap tarball is still reused; delete it to redo).
#   --print-mirror  print the mirror and the security mirror it would use
#               (one per line, the second possibly empty) and exit.
# Env: CACHE_DIR (default /var/cache/sandboxd), DEBIAN_MIRROR (default: the
#      mirror apt uses on this machine: the first enabled deb source for the
#      suite in APT_DIR's sources.list, sources.list.d/*.list and deb822
#      sources.list.d/*.sources; no mirror is written into this script),
#      DEBIAN_SUITE (default bookworm), APT_DIR (default /etc/apt).
# Needs a running dockerd: run scripts/docker-setup.sh first.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${CACHE_DIR:-/var/cache/sandboxd}
suite=${DEBIAN_SUITE:-bookworm}
apt_dir=${APT_DIR:-/etc/apt}
oci_dir=""
no_cache=()
print_mirror=""
while [ $# -gt 0 ]; do
	case "$1" in
	--oci) oci_dir=${2:?--oci needs a directory}; shift 2 ;;
	--oci=*) oci_dir=${1#--oci=}; shift ;;
	--no-cache) no_cache=(--no-cache); shift ;;
	--print-mirror) print_mirror=1; shift ;;
	-h | --help) sed -n '2,24p' "$0"; exit 0 ;;
	*) echo "build-images: unknown argument $1" >&2; exit 2 ;;
	esac
done

# Debian's client; a newer /usr/local/bin/docker may shadow it and insist on
# buildx. The classic builder is what we rely on (cache keyed on parent id).
if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=$(command -v docker); fi
export DOCKER_BUILDKIT=0
if [ -z "$print_mirror" ] && ! "$DOCKER" info >/dev/null 2>&1; then
	echo "build-images: docker daemon not reachable (run scripts/docker-setup.sh)" >&2
	exit 1
fi

t0=$(date +%s)
say() { echo "build-images: [$(($(date +%s) - t0))s] $*"; }
image_id() { "$DOCKER" image inspect -f '{{.Id}}' "$1" 2>/dev/null; }

# apt_uri SUITE: the first deb URI this machine's apt uses for SUITE
# (deb822 *.sources and one-line *.list; disabled files are ignored like apt does).
apt_uri() {
	local want=$1 f
	for f in "$apt_dir/sources.list" "$apt_dir"/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v s="$want" '
			$1 == "deb" {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i + 1) == s) { print $i; exit }
			}' "$f"
	done
	for f in "$apt_dir"/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v s="$want" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && enabled !~ /^no$/ && (" " suites " ") ~ (" " s " ") && uri != "") { print uri; found = 1 }
				types = ""; suites = ""; uri = ""; enabled = ""
			}
			/^[ \t]*$/ { flush(); if (found) exit; next }
			/^#/ { next }
			tolower($1) == "types:" { $1 = ""; types = $0 }
			tolower($1) == "suites:" { $1 = ""; suites = $0 }
			tolower($1) == "uris:" { uri = $2 }
			tolower($1) == "enabled:" { enabled = tolower($2) }
			END { if (!found) flush() }' "$f"
	done
}

mirror() { echo "${DEBIAN_MIRROR:-$(apt_uri "$suite" | head -1)}"; }
if [ -n "$print_mirror" ]; then
	mirror
	apt_uri "$suite-security" | head -1
	exit 0
fi

# ---- 1. sandboxd/debian:<suite> from debootstrap -------------------------
debian_img=sandboxd/debian:$suite
tarball=$cache/debian-$suite-minbase.tar
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
	mirror=$(mirror)
	if [ -z "$mirror" ]; then
		echo "build-images: no apt source for $suite found; set DEBIAN_MIRROR" >&2
		exit 1
	fi
	security=$(apt_uri "$suite-security" | head -1)
	command -v debootstrap >/dev/null || { echo "build-images: debootstrap missing (run scripts/docker-setup.sh)" >&2; exit 1; }
	rootfs=$cache/rootfs.tmp
	rm -rf "$rootfs"
	say "debootstrap --variant=minbase $suite from $mirror (~1-2 min)"
	if ! debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
		tail -n 30 "$cache/debootstrap.log" >&2
		[ -f "$rootfs/debootstrap/debootstrap.log" ] && tail -n 30 "$rootfs/debootstrap/debootstrap.log" >&2
		exit 1
	fi
	# The same sources as the host (updates, security) so apt inside builds
	# gets fixed packages; then trim what a container image does not need.
	{
		echo "deb $mirror $suite main"
		echo "deb $mirror $suite-updates main"
		[ -n "$security" ] && echo "deb $security $suite-security main"
	} >"$rootfs/etc/apt/sources.list"
	printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$rootfs/etc/apt/apt.conf.d/90sandboxd"
	rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
		"$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/debootstrap
	: >"$rootfs/etc/resolv.conf"
	: >"$rootfs/etc/hostname"
	tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
	rm -rf "$rootfs"
	say "cached rootfs $tarball ($(du -h "$tarball" | cut -f1))"
fi
if [ -z "$(image_id "$debian_img")" ]; then
	say "docker import $tarball -> $debian_img"
	"$DOCKER" import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/bash"]' \
		--message "debootstrap --variant=minbase $suite" \
		"$tarball" "$debian_img" >/dev/null
fi

# ---- 2. base and python -------------------------------------------------
# content hash: the build context files plus the parent image id, so a
# re-imported or rebuilt parent gives a new tag.
dir_hash() {
	local dir=$1 parent=$2
	{
		(cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
		echo "parent $parent"
	} | sha256sum | cut -c1-12
}

build() {
	local name=$1 parent=$2 dir=$root/images/$1 hash img
	hash=$(dir_hash "$dir" "$(image_id "$parent")")
	img=sandboxd/$name
	if [ "${#no_cache[@]}" -eq 0 ] && [ -n "$(image_id "$img:$hash")" ]; then
		if [ "$(image_id "$img:$hash")" != "$(image_id "$img:latest")" ]; then
			"$DOCKER" tag "$img:$hash" "$img:latest"
		fi
		say "$img:$hash up to date"
		return
	fi
	say "docker build $img ($hash)"
	if ! "$DOCKER" build "${no_cache[@]}" -t "$img:latest" -t "$img:$hash" "$dir" >"$cache/build-$name.log" 2>&1; then
		tail -n 40 "$cache/build-$name.log" >&2
		echo "build-images: docker build $img failed (full log $cache/build-$name.log)" >&2
		exit 1
	fi
}
build base "$debian_img"
build python sandboxd/base:latest

# ---- 3. optional archives for the containerd runner ---------------------
if [ -n "$oci_dir" ]; then
	mkdir -p "$oci_dir"
	for name in base python; do
		id=$(image_id "sandboxd/$name:latest")
		out=$oci_dir/sandboxd-$name.tar
		if [ -s "$out" ] && [ "$(cat "$oci_dir/sandboxd-$name.id" 2>/dev/null)" = "$id" ]; then
			continue
		fi
		say "docker save sandboxd/$name:latest -> $out"
		"$DOCKER" save -o "$out.tmp" "sandboxd/$name:latest"
		chmod 0644 "$out.tmp"
		mv "$out.tmp" "$out"
		echo "$id" >"$oci_dir/sandboxd-$name.id"
	done
fi

sizes=$("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}={{.Size}}' | grep -E '^sandboxd/(debian:|base:latest|python:latest)' | sort | tr '\n' ' ')
say "ok: ${sizes% }"
