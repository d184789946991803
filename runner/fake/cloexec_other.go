//go:build !linux

package fake

func markInheritedCloexec() {}
