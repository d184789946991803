// Command k8s-workspace is the node plugin of the workspace CSI driver
// (runner/kubernetes/internal/wscsi): every sandbox pod's workspace its
// own filesystem, bounded in bytes and inodes. It runs on each node as
// root (it makes loop devices and mounts): the project's test cluster
// (scripts/k8s-setup.sh) starts it next to the kubelet;
// deploy/kubernetes/workspace-csi/ runs it as a DaemonSet. The
// cluster needs the driver's CSIDriver object (in the same file), and
// sandboxd runner.kubernetes.workspace_driver set to its name.
//
//	k8s-workspace --root DIR [--kubelet-dir DIR] [--name NAME] [--node-id NODE] [--max-bytes N]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wscsi"
	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wsvol"
)

func main() {
	root := flag.String("root", "", "where the workspaces are made, this driver's alone (required)")
	kubelet := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory (its plugins and plugins_registry)")
	name := flag.String("name", wsvol.DefaultDriver, "the driver's name, its CSIDriver object's")
	node := flag.String("node-id", "", "the node's name as the kubelet knows it (default: the host name)")
	maxBytes := flag.Int64("max-bytes", 64<<30, "the largest volume a pod may ask for, in bytes (0: no cap)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *node == "" {
		h, err := os.Hostname()
		if err != nil {
			fail(err)
		}
		*node = h
	}
	if *root == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: k8s-workspace --root DIR [--kubelet-dir DIR] [--name NAME] [--node-id NODE] [--max-bytes N]")
		os.Exit(2)
	}
	d, err := wscsi.New(wscsi.Options{Name: *name, NodeID: *node, Root: *root, MaxBytes: *maxBytes, Logger: log})
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	csiSock, regSock := wscsi.Sockets(*kubelet, *name)
	log.Info("serving", "name", *name, "node", *node, "csi", csiSock, "registration", regSock)
	if err := d.Serve(ctx, csiSock, regSock); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "k8s-workspace:", err)
	os.Exit(1)
}
