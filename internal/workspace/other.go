//go:build !linux

package workspace

import (
	"context"
	"errors"
	"os"
)

// Workspace filesystems need Linux (loop devices, mount); elsewhere only
// Plain managers work.

type fsMaker struct{}

var errNotLinux = errors.New("workspace filesystems need Linux")

func newFSMaker(string) (*fsMaker, error) { return nil, errNotLinux }

func (*fsMaker) make(context.Context, string, Limits) error { return errNotLinux }

func readOnlyBind(string, string) error { return errNotLinux }

// Bind needs Linux.
func Bind(string, string, bool) error { return errNotLinux }

// Unbind needs Linux.
func Unbind(string) error { return errNotLinux }

func unmountAndRemove(dir string) error { return os.Remove(dir) }

// Cleanup does nothing: nothing is ever mounted.
func (m *Manager) Cleanup() (int, error) { return 0, nil }
