package job

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
)

func TestCheckArchiveEntry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    tar.Header
		want string // cleaned name, or "!" for refused
	}{
		{"file", tar.Header{Name: "a/b.txt", Typeflag: tar.TypeReg, Mode: 0o644}, "a/b.txt"},
		{"dir", tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, "a"},
		{"dot", tar.Header{Name: "./", Typeflag: tar.TypeDir}, ""},
		{"dot slash file", tar.Header{Name: "./x", Typeflag: tar.TypeReg}, "x"},
		{"dotdot", tar.Header{Name: "../evil", Typeflag: tar.TypeReg}, "!"},
		{"inner dotdot", tar.Header{Name: "a/../../evil", Typeflag: tar.TypeReg}, "!"},
		{"backslash dotdot", tar.Header{Name: "a\\..\\evil", Typeflag: tar.TypeReg}, "!"},
		{"absolute", tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg}, "!"},
		{"empty", tar.Header{Name: "", Typeflag: tar.TypeReg}, "!"},
		{"nul", tar.Header{Name: "a\x00b", Typeflag: tar.TypeReg}, "!"},
		{"symlink inside", tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a"}, "!"},
		{"symlink outside", tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, "!"},
		{"hardlink", tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "a"}, "!"},
		{"char device", tar.Header{Name: "c", Typeflag: tar.TypeChar}, "!"},
		{"block device", tar.Header{Name: "b", Typeflag: tar.TypeBlock}, "!"},
		{"fifo", tar.Header{Name: "f", Typeflag: tar.TypeFifo}, "!"},
		{"setuid", tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o4755}, "!"},
		{"setgid", tar.Header{Name: "s", Typeflag: tar.TypeReg, Mode: 0o2755}, "!"},
		{"sticky", tar.Header{Name: "s", Typeflag: tar.TypeDir, Mode: 0o1777}, "!"},
		{"negative size", tar.Header{Name: "n", Typeflag: tar.TypeReg, Size: -1}, "!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := checkArchiveEntry(&tc.h)
			if tc.want == "!" {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("accepted %+v as %q (err %v)", tc.h, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func makeTar(t testing.TB, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := strings.Repeat("x", int(h.Size))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestCheckArchive(t *testing.T) {
	t.Parallel()
	ok := makeTar(t, tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(ok)
	zw.Close()
	many := makeTar(t, tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1}, tar.Header{Name: "b", Typeflag: tar.TypeReg, Size: 1},
		tar.Header{Name: "c", Typeflag: tar.TypeReg, Size: 1})
	big := makeTar(t, tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 100})
	evil := makeTar(t, tar.Header{Name: "good", Typeflag: tar.TypeReg, Size: 1}, tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Size: 1})
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"plain", ok, nil},
		{"gzip", gz.Bytes(), nil},
		{"too many entries", many, ErrTooLarge},
		{"bomb", big, ErrTooLarge},
		{"one bad entry", evil, ErrInvalid},
		{"garbage", []byte("not a tar archive at all, clearly............"), ErrInvalid},
		{"bad gzip", []byte{0x1f, 0x8b, 0, 0}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := checkArchive(bytes.NewReader(tc.data), 2, 50)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("checkArchive = %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzCheckArchiveEntry: no header makes the validator panic or accept a
// name that could leave the target directory.
func FuzzCheckArchiveEntry(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "/abs", "a/../b", "./.", "a\\..\\b", ".."} {
		f.Add(s, byte(tar.TypeReg), int64(0o644), int64(1))
	}
	f.Fuzz(func(t *testing.T, name string, typ byte, mode, size int64) {
		h := &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size}
		clean, err := checkArchiveEntry(h)
		if err != nil {
			return
		}
		if strings.HasPrefix(clean, "/") || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(clean, "/../") {
			t.Fatalf("accepted %q as %q", name, clean)
		}
		if typ != tar.TypeReg && typ != tar.TypeDir {
			t.Fatalf("accepted type %q", typ)
		}
		if mode&0o7000 != 0 {
			t.Fatalf("accepted mode %o", mode)
		}
	})
}

// FuzzCheckArchive: any body is refused or accepted without panicking.
func FuzzCheckArchive(f *testing.F) {
	f.Add(makeTar(f, tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1}))
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = checkArchive(bytes.NewReader(data), 100, 1<<20)
	})
}
