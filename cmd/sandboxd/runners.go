package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/containerd"
	"github.com/sandboxd/sandboxd/runner/docker"
	"github.com/sandboxd/sandboxd/runner/kubernetes"
	"github.com/sandboxd/sandboxd/runner/local"
)

// newRunner creates the configured sandbox backend with limits as the
// runner's Config.Defaults (see serve). closeRunner releases it; call it
// after the job service has shut down.
func newRunner(ctx context.Context, cfg *config.Config, defaults runner.Limits, log *slog.Logger) (r runner.Runner, closeRunner func(), err error) {
	switch cfg.Runner.Name {
	case "docker":
		d := cfg.Runner.Docker
		dr, err := docker.New(ctx, docker.Config{
			Host: d.Host, Image: d.Image, AgentPath: d.AgentPath, Runtime: d.Runtime,
			StateDir: filepath.Join(cfg.DataDir, "docker"),
			Defaults: defaults,
			Logger:   log,
		})
		if err != nil {
			return nil, nil, err
		}
		return dr, func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := dr.Close(cctx); err != nil {
				log.Warn("close docker runner", "err", err)
			}
		}, nil
	case "containerd":
		c := cfg.Runner.Containerd
		cr, err := containerd.New(ctx, containerd.Config{
			Address: strings.TrimPrefix(c.Address, "unix://"), Namespace: c.Namespace, Image: c.Image,
			AgentPath: c.AgentPath, Runtime: c.Runtime,
			StateDir: filepath.Join(cfg.DataDir, "containerd"),
			Defaults: defaults,
			Logger:   log,
		})
		if err != nil {
			return nil, nil, err
		}
		return cr, func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := cr.Close(cctx); err != nil {
				log.Warn("close containerd runner", "err", err)
			}
		}, nil
	case "kubernetes":
		k := cfg.Runner.Kubernetes
		kr, err := kubernetes.New(ctx, kubernetes.Config{
			Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, Image: k.Image, RuntimeClass: k.RuntimeClass,
			SeccompFallback: k.SeccompFallback, SandboxdCIDR: k.SandboxdCIDR, CPURequestPercent: k.CPURequestPercent,
			WorkspaceDriver: k.WorkspaceDriver,
			OwnerPod:        kubernetes.OwnerPod{Namespace: k.PodNamespace, Name: k.PodName, UID: k.PodUID},
			StateDir:        filepath.Join(cfg.DataDir, "kubernetes"),
			Defaults:        defaults,
			Logger:          log,
		})
		if err != nil {
			return nil, nil, err
		}
		return kr, func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := kr.Close(cctx); err != nil {
				log.Warn("close kubernetes runner", "err", err)
			}
		}, nil
	case "local", "":
		l := cfg.Runner.Local
		for key, path := range map[string]string{"agent_path": l.AgentPath, "launcher_path": l.LauncherPath} {
			if path == "" {
				return nil, nil, fmt.Errorf("runner.local.%s: the local runner needs the static sandbox-agent and sandbox-launch binaries, none found next to sandboxd or on PATH (build them with CGO_ENABLED=0 go build -o /usr/local/bin/ ./cmd/sandbox-agent ./cmd/sandbox-launch)", key)
			}
		}
		lr, err := local.New(local.Config{
			StateDir:     filepath.Join(cfg.DataDir, "run"),
			Rootfs:       l.Rootfs,
			AllowWeak:    l.AllowWeak,
			AgentPath:    l.AgentPath,
			LauncherPath: l.LauncherPath,
			Defaults:     defaults,
			Logger:       log,
		})
		if err != nil {
			return nil, nil, err
		}
		return lr, func() {}, nil
	default:
		return nil, nil, fmt.Errorf("unknown runner %q", cfg.Runner.Name)
	}
}
