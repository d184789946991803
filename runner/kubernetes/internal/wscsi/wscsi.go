// Package wscsi is the node side of a CSI driver that gives every sandbox
// pod's workspace its own filesystem, bounded in bytes and in inodes: the
// same workspace filesystem (internal/workspace) the other runners bind
// into their sandboxes, so that a full workspace is ENOSPC inside the pod,
// never a full node disk, and neither set-user-ID bits nor device nodes in
// it are honoured. An emptyDir's sizeLimit is only checked by the kubelet's
// eviction after the fact and Kubernetes has no inode limit, which is why
// the Kubernetes runner asks for this driver's volumes when it is
// configured with one (runner.kubernetes.workspace_driver).
//
// The driver serves CSI ephemeral inline volumes only (a pod's
// `csi: {driver, volumeAttributes}` volume, created with the pod and gone
// with it): the kubelet calls NodePublishVolume with the pod's target
// directory, and the driver makes a workspace filesystem, binds it there
// and releases its own mount of it at once, so the pod's mount is the
// filesystem's only one: NodeUnpublishVolume unmounts it and the loop
// device and its image go with it. Nothing is kept between calls, so the
// driver may restart at any time without losing a volume.
//
// Registration with the kubelet is the kubelet's plugin watcher protocol
// (a socket in <kubelet root>/plugins_registry), no sidecar needed.
package wscsi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wsvol"
)

// version is what GetPluginInfo reports.
const version = "1"

// Options configure a Driver.
type Options struct {
	// Name is the driver's name. Default wsvol.DefaultDriver.
	Name string
	// NodeID is the node's name as the kubelet knows it. Required.
	NodeID string
	// Root holds the workspaces while they are made (a workspace.Manager's
	// Root, this driver's alone). Required.
	Root string
	// MaxBytes caps a volume's size (0: no cap). Every pod that may use
	// the driver can ask for up to it; its image file is sparse, so the
	// node's disk is spent only by what the pod writes.
	MaxBytes int64
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Driver is the CSI Identity and Node service.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer

	o        Options
	ws       *workspace.Manager
	endpoint string // the CSI socket (Serve)
	// mu serializes publish and unpublish: the kubelet retries a call
	// that timed out while the first may still run.
	mu sync.Mutex
}

// New checks that this process can make workspace filesystems and
// removes what a previous run of it left under Root.
func New(o Options) (*Driver, error) {
	if o.Name == "" {
		o.Name = wsvol.DefaultDriver
	}
	if o.NodeID == "" || o.Root == "" {
		return nil, errors.New("wscsi: NodeID and Root are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ws, err := workspace.New(workspace.Options{Root: o.Root, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	if n, err := ws.Cleanup(); err != nil {
		o.Logger.Warn("clean up a previous run's workspaces", "err", err)
	} else if n > 0 {
		o.Logger.Info("cleaned up a previous run's workspaces", "n", n)
	}
	return &Driver{o: o, ws: ws}, nil
}

// GetPluginInfo implements csi.IdentityServer.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.o.Name, VendorVersion: version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer: none (no
// controller service: inline volumes need none).
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe implements csi.IdentityServer.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// NodeGetInfo implements csi.NodeServer.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.o.NodeID}, nil
}

// NodeGetCapabilities implements csi.NodeServer: none (no staging, no
// stats, no expansion).
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

var safeID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$`)

// workDir is where volume id's workspace is made: the id itself when it
// is a plain name (the kubelet's are csi-<hex>), else its hash.
func (d *Driver) workDir(id string) string {
	if !safeID.MatchString(id) {
		h := sha256.Sum256([]byte(id))
		id = "h-" + hex.EncodeToString(h[:16])
	}
	return filepath.Join(d.ws.Root(), id)
}

// NodePublishVolume implements csi.NodeServer: a new workspace
// filesystem of the volume's limits, mounted (nosuid, nodev, read-only if
// asked) at the target path. Publishing a target that is already mounted
// succeeds and changes nothing (the kubelet's retry).
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case target == "" || !filepath.IsAbs(target) || filepath.Clean(target) != target:
		return nil, status.Errorf(codes.InvalidArgument, "target_path %q: want a clean absolute path", target)
	case req.GetVolumeCapability().GetMount() == nil:
		return nil, status.Error(codes.InvalidArgument, "only mount volumes are served (no block access)")
	case req.GetVolumeContext()[wsvol.AttrEphemeral] != "true":
		return nil, status.Errorf(codes.InvalidArgument, "only ephemeral inline volumes are served (the pod's csi volume source), not persistent volumes")
	}
	if fs := req.GetVolumeCapability().GetMount().GetFsType(); fs != "" && fs != "ext4" {
		return nil, status.Errorf(codes.InvalidArgument, "fs_type %q: the workspace filesystem is ext4", fs)
	}
	l, err := wsvol.Parse(req.GetVolumeContext(), d.o.MaxBytes)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if mounted, err := mountinfo.Mounted(target); err == nil && mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "target_path: %v", err)
	}
	dir := d.workDir(req.GetVolumeId())
	w, err := d.ws.Create(ctx, dir, l, false)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "make the workspace filesystem: %v", err)
	}
	// The target's mount is the filesystem's only one once w is
	// released: unpublish (or a crash of the driver) leaves nothing.
	berr := workspace.Bind(w.Dir, target, req.GetReadonly())
	if err := w.Release(); err != nil {
		d.o.Logger.Warn("release the driver's own mount of a workspace", "dir", dir, "err", err)
	}
	if berr != nil {
		return nil, status.Errorf(codes.Internal, "mount the workspace: %v", berr)
	}
	d.o.Logger.Info("published", "volume", req.GetVolumeId(), "target", target, "bytes", w.Limits.Bytes, "inodes", w.Limits.Inodes)
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume implements csi.NodeServer: unmount the target and
// remove it; its filesystem goes with its last mount. A target already
// gone succeeds.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" || !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return nil, status.Errorf(codes.InvalidArgument, "volume_id and a clean absolute target_path are required (target %q)", target)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := workspace.Unbind(target); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target: %v", err)
	}
	d.o.Logger.Info("unpublished", "volume", req.GetVolumeId(), "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// GetInfo implements the kubelet's plugin registration: a CSI plugin
// named Name at endpoint (Serve sets it).
func (d *Driver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: d.o.Name, Endpoint: d.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

// NotifyRegistrationStatus implements the kubelet's plugin registration.
func (d *Driver) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.GetPluginRegistered() {
		d.o.Logger.Info("registered with the kubelet")
	} else {
		d.o.Logger.Error("the kubelet refused the registration", "err", s.GetError())
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Sockets are where a driver named name serves under the kubelet's root
// directory: the CSI endpoint and the registration socket the kubelet's
// plugin watcher finds.
func Sockets(kubeletDir, name string) (csiSock, regSock string) {
	return filepath.Join(kubeletDir, "plugins", name, "csi.sock"), filepath.Join(kubeletDir, "plugins_registry", name+"-reg.sock")
}

// Serve serves the CSI services on csiSock and the registration on
// regSock until ctx ends, then removes both sockets.
func (d *Driver) Serve(ctx context.Context, csiSock, regSock string) error {
	d.endpoint = csiSock
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	listen := func(p string) (net.Listener, error) {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return nil, err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		l, err := net.Listen("unix", p)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		return l, nil
	}
	cl, err := listen(csiSock)
	if err != nil {
		return err
	}
	rl, err := listen(regSock)
	if err != nil {
		return err
	}
	cs, rs := grpc.NewServer(), grpc.NewServer()
	csi.RegisterIdentityServer(cs, d)
	csi.RegisterNodeServer(cs, d)
	registerapi.RegisterRegistrationServer(rs, d)
	errc := make(chan error, 2)
	go func() { errc <- cs.Serve(cl) }()
	go func() { errc <- rs.Serve(rl) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	rs.Stop()
	cs.GracefulStop()
	os.Remove(regSock)
	os.Remove(csiSock)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
