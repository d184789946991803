package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A data dir is held by one lock at a time (flock locks belong to the open
// file, so two in one process conflict as two processes do); the refusal
// names the holder's pid and leaves the dir as it was; the lock is free
// again once released.
func TestLockDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sandboxd.db"), []byte("live"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	if !errors.Is(err, errDataDirLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want errDataDirLocked naming pid %d", err, os.Getpid())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("data dir after a refused lock: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sandboxd.db")); string(b) != "live" {
		t.Fatalf("data dir changed: %q", b)
	}
	release()
	release, err = lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release()
}

// A lock file left by a dead holder (its pid still in it) holds nothing.
func TestLockDataDirStaleFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, lockFileName), []byte("999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b, _ := os.ReadFile(filepath.Join(dir, lockFileName))
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this pid", b)
	}
}
