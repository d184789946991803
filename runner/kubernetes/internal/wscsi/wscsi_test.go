package wscsi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner/kubernetes/internal/wsvol"
)

func newDriver(t *testing.T) *Driver {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workspace filesystems need root")
	}
	d, err := New(Options{NodeID: "node-1", Root: t.TempDir(), MaxBytes: 1 << 30})
	if err != nil {
		t.Skip(err) // no loop devices or mke2fs: what workspace's own tests need
	}
	return d
}

func publishReq(target string, attrs map[string]string) *csi.NodePublishVolumeRequest {
	ctx := map[string]string{wsvol.AttrEphemeral: "true"}
	for k, v := range attrs {
		ctx[k] = v
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId:         "csi-0123abcd",
		TargetPath:       target,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}},
		VolumeContext:    ctx,
	}
}

// fill writes 1 MiB files into dir until it fails, and then empty files,
// and returns the bytes and files written and the errors that stopped
// each.
func fill(t *testing.T, dir string) (bytes, files int64, berr, ferr error) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("b%d", i)))
		if err != nil {
			berr = err
			break
		}
		n, err := f.Write(buf)
		bytes += int64(n)
		f.Close()
		if err != nil {
			berr = err
			break
		}
	}
	for i := 0; i < 100000; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%d", i)))
		if err != nil {
			ferr = err
			break
		}
		f.Close()
		files++
	}
	return
}

// TestPublish: a published volume is its own filesystem of the asked
// size and inodes (ENOSPC at both, the node's disk untouched beyond it),
// nosuid and nodev, owned by the code's uid; publishing again is a no-op;
// unpublishing leaves no mount, no loop device and no directory, and a
// second unpublish succeeds.
func TestPublish(t *testing.T) {
	d := newDriver(t)
	ctx := t.Context()
	target := filepath.Join(t.TempDir(), "pods", "uid", "volumes", "kubernetes.io~csi", "workspace", "mount")
	req := publishReq(target, map[string]string{wsvol.AttrBytes: fmt.Sprint(32 << 20), wsvol.AttrInodes: "512"})
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { workspace.Unbind(target) })
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("publish again: %v", err)
	}
	mi, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil || len(mi) != 1 {
		t.Fatalf("mounts at the target: %v, %v (want exactly one)", mi, err)
	}
	if m := mi[0]; m.FSType != "ext4" || !strings.Contains(m.Options, "nosuid") || !strings.Contains(m.Options, "nodev") {
		t.Errorf("target mount %+v: want ext4, nosuid, nodev", m)
	}
	// The driver keeps no mount of its own.
	if all, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(d.ws.Root())); len(all) != 0 {
		t.Errorf("mounts left under the driver's root: %v", all)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil || st.Uid != 65534 {
		t.Errorf("the workspace's root: uid %d, %v; want the code's 65534", st.Uid, err)
	}
	bytes, files, berr, ferr := fill(t, target)
	if !errors.Is(berr, syscall.ENOSPC) || bytes > 32<<20 || bytes < 24<<20 {
		t.Errorf("wrote %d bytes (%v); want ENOSPC at about 32 MiB", bytes, berr)
	}
	if !errors.Is(ferr, syscall.ENOSPC) || files > 512 {
		t.Errorf("created %d files (%v); want ENOSPC at about 512", files, ferr)
	}

	un := &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}
	if _, err := d.NodeUnpublishVolume(ctx, un); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountinfo.Mounted(target); m {
		t.Error("target still mounted")
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target left: %v", err)
	}
	if _, err := d.NodeUnpublishVolume(ctx, un); err != nil {
		t.Errorf("unpublish again: %v", err)
	}
	ents, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range ents {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), d.ws.Root()+"/") {
			t.Errorf("loop device left: %s: %s", p, b)
		}
	}
}

// TestPublishReadonly: a read-only publish is EROFS to writes.
func TestPublishReadonly(t *testing.T) {
	d := newDriver(t)
	target := filepath.Join(t.TempDir(), "mount")
	req := publishReq(target, map[string]string{wsvol.AttrBytes: fmt.Sprint(16 << 20)})
	req.Readonly = true
	if _, err := d.NodePublishVolume(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	defer d.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target})
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to a read-only volume: %v; want EROFS", err)
	}
}

// TestPublishRefuses: bad requests are InvalidArgument and leave nothing.
func TestPublishRefuses(t *testing.T) {
	d := newDriver(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "mount")
	for name, mod := range map[string]func(*csi.NodePublishVolumeRequest){
		"no volume id":    func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" },
		"relative target": func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "pods/x" },
		"unclean target":  func(r *csi.NodePublishVolumeRequest) { r.TargetPath = dir + "/../x/mount" },
		"block":           func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{} },
		"persistent":      func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, wsvol.AttrEphemeral) },
		"xfs":             func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().FsType = "xfs" },
		"too big":         func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[wsvol.AttrBytes] = fmt.Sprint(int64(2 << 30)) },
		"typo":            func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["indoes"] = "512" },
	} {
		req := publishReq(target, nil)
		mod(req)
		_, err := d.NodePublishVolume(t.Context(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", name, err)
		}
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused publish left the target: %v", err)
	}
	if _, err := os.Stat(d.workDir("csi-0123abcd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused publish left its workspace directory: %v", err)
	}
}

// TestServe: the kubelet's view: the registration socket names a CSI
// plugin of this name at the CSI socket, which answers Identity and Node
// calls; both sockets are gone after the context ends.
func TestServe(t *testing.T) {
	d := newDriver(t)
	kdir := t.TempDir()
	csiSock, regSock := Sockets(kdir, d.o.Name)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, csiSock, regSock) }()
	dial := func(p string) *grpc.ClientConn {
		c, err := grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Serve listens asynchronously: wait for the socket the kubelet
	// would find.
	for i := 0; ; i++ {
		if _, err := os.Stat(regSock); err == nil {
			break
		}
		if i > 500 {
			t.Fatal("no registration socket")
		}
		select {
		case err := <-done:
			t.Fatal(err)
		default:
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 10e6}, nil)
	}
	info, err := registerapi.NewRegistrationClient(dial(regSock)).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != wsvol.DefaultDriver || info.Endpoint != csiSock {
		t.Errorf("registration info %+v", info)
	}
	cc := dial(csiSock)
	pi, err := csi.NewIdentityClient(cc).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || pi.Name != wsvol.DefaultDriver {
		t.Errorf("GetPluginInfo = %v, %v", pi, err)
	}
	ni, err := csi.NewNodeClient(cc).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || ni.NodeId != "node-1" {
		t.Errorf("NodeGetInfo = %v, %v", ni, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for _, p := range []string{csiSock, regSock} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s left: %v", p, err)
		}
	}
}
