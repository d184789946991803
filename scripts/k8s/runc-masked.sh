#!/bin/sh
# The test cluster's runc (scripts/k8s-setup.sh installs it as the CRI
# runtime's BinaryName, with paths.json beside it): on create, it adds the
# policy's masked and read-only paths (runner/kubernetes/cmd/k8s-seccomp
# writes paths.json) to the container's config.json, then runs the real
# runc. Kubernetes masks only its own default list, which leaves
# /proc/config.gz, /proc/kmsg and more readable. It also adds nosuid and
# nodev to the pods' volumes (bind mounts from the kubelet's pods
# directory): runc's read-only remount of a volume (the read-only
# workspace) would drop the flags the kubelet's root mount gives them.
real=@RUNC@
pods=@PODS@
paths=$(dirname "$0")/paths.json
bundle="" create="" prev=""
for a in "$@"; do
	case "$prev" in --bundle | -b) bundle=$a ;; esac
	case "$a" in --bundle=*) bundle=${a#--bundle=} ;; create) create=1 ;; esac
	prev=$a
done
if [ -n "$create" ] && [ -f "$bundle/config.json" ]; then
	jq -c --slurpfile p "$paths" \
		'.linux.maskedPaths = ((.linux.maskedPaths // []) + $p[0].masked | unique) | .linux.readonlyPaths = ((.linux.readonlyPaths // []) + $p[0].readonly | unique) | .mounts = [.mounts[]? | if ((.source // "") | startswith($pods)) then .options = ((.options // []) + (["nosuid", "nodev"] - (.options // []))) else . end]' --arg pods "$pods" \
		"$bundle/config.json" >"$bundle/config.json.sandboxd" || exit 1
	mv "$bundle/config.json.sandboxd" "$bundle/config.json" || exit 1
fi
exec "$real" "$@"
