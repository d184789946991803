package config

import (
	"errors"
	"path/filepath"
)

// Complete fills the defaults that depend on the host or on other keys:
// the data directory (by user) and the pool size. getenv
// reads HOME and XDG_DATA_HOME.
func (c *Config) Complete(getenv func(string) string, euid int) error {
	if c.DataDir == "" {
		dir, err := defaultDataDir(getenv, euid)
		if err != nil {
			return err
		}
		c.DataDir = dir
	}
	if c.Pool.Size == nil {
		// Creating a container costs ~200 ms, a local sandbox (launcher,
		// mounts, agent start) ~17 ms: a one-shot call takes a ready one.
		size := 2
		c.Pool.Size = &size
	}
	return nil
}

// defaultDataDir is /var/lib/sandboxd for root, else
// $XDG_DATA_HOME/sandboxd, else $HOME/.local/share/sandboxd.
func defaultDataDir(getenv func(string) string, euid int) (string, error) {
	if euid == 0 {
		return "/var/lib/sandboxd", nil
	}
	if x := getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "sandboxd"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "sandboxd"), nil
	}
	return "", errors.New("no data directory: set --data-dir, SANDBOXD_DATA_DIR or data_dir (HOME is not set)")
}

// Ready is pool.size, 0 when unset (a library caller that did not
// Complete its configuration gets no pool).
func (p Pool) Ready() int {
	if p.Size == nil {
		return 0
	}
	return *p.Size
}
