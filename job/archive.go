package job

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"strings"
)

// Archive uploads (PutArchive) are checked whole before anything is
// written: one bad entry refuses the request. Accepted are regular files
// and directories with relative names inside the target; refused are
// absolute names, ".." components, every symlink (a link that points
// inside today can be retargeted by the sandbox tomorrow, so none are
// accepted), hardlinks, devices, FIFOs, setuid/setgid/sticky bits, and
// archives past the entry count or total unpacked size.

// checkArchiveEntry validates one tar header and returns its cleaned name
// relative to the target directory ("" for the target itself). It is the
// parser of untrusted input that FuzzCheckArchiveEntry exercises.
func checkArchiveEntry(h *tar.Header) (string, error) {
	name := h.Name
	switch {
	case name == "":
		return "", fmt.Errorf("%w: archive entry with an empty name", ErrInvalid)
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("%w: archive entry %q: NUL in the name", ErrInvalid, name)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("%w: archive entry %q: absolute names are not allowed", ErrInvalid, name)
	case len(name) > 4096:
		return "", fmt.Errorf("%w: archive entry name longer than 4096 bytes", ErrInvalid)
	}
	for _, part := range strings.Split(strings.ReplaceAll(name, "\\", "/"), "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: archive entry %q: \"..\" is not allowed", ErrInvalid, name)
		}
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink:
		return "", fmt.Errorf("%w: archive entry %q: symlinks are not allowed", ErrInvalid, name)
	case tar.TypeLink:
		return "", fmt.Errorf("%w: archive entry %q: hardlinks are not allowed", ErrInvalid, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return "", fmt.Errorf("%w: archive entry %q: devices and FIFOs are not allowed", ErrInvalid, name)
	default:
		return "", fmt.Errorf("%w: archive entry %q: unsupported type %q", ErrInvalid, name, h.Typeflag)
	}
	if h.Mode&(0o4000|0o2000|0o1000) != 0 {
		return "", fmt.Errorf("%w: archive entry %q: setuid, setgid and sticky bits are not allowed", ErrInvalid, name)
	}
	if h.Size < 0 {
		return "", fmt.Errorf("%w: archive entry %q: negative size", ErrInvalid, name)
	}
	clean := path.Clean(name)
	if clean == "." {
		if h.Typeflag != tar.TypeDir {
			return "", fmt.Errorf("%w: archive entry %q: a file must have a name", ErrInvalid, name)
		}
		clean = ""
	}
	return clean, nil
}

// archiveReader returns a tar reader of r, gunzipping when r starts with
// the gzip magic.
func archiveReader(r io.Reader) (*tar.Reader, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(2)
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip stream: %v", ErrInvalid, err)
		}
		return tar.NewReader(zr), nil
	}
	return tar.NewReader(br), nil
}

// archiveNeeds is what unpacking an archive takes at most.
type archiveNeeds struct {
	inodes int64   // entries (each a file or a directory)
	sizes  []int64 // of the regular files
}

// blockBytes is the space the entries take in blocks of bsize: every file
// rounded up to whole blocks, every directory one block.
func (n archiveNeeds) blockBytes(bsize int64) int64 {
	total := (n.inodes - int64(len(n.sizes))) * bsize
	for _, sz := range n.sizes {
		total += (sz + bsize - 1) / bsize * bsize
	}
	return total
}

// checkArchive reads a whole archive and validates every entry, the entry
// count and the total unpacked size, without writing anything. It returns
// what unpacking it needs.
func checkArchive(r io.Reader, maxEntries int, maxBytes int64) (archiveNeeds, error) {
	var need archiveNeeds
	tr, err := archiveReader(r)
	if err != nil {
		return need, err
	}
	var n int
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return need, nil
		}
		if err != nil {
			return need, fmt.Errorf("%w: reading the archive: %v", ErrInvalid, err)
		}
		if n++; n > maxEntries {
			return need, fmt.Errorf("%w: the archive has more than %d entries", ErrTooLarge, maxEntries)
		}
		if _, err := checkArchiveEntry(h); err != nil {
			return need, err
		}
		if total += h.Size; total > maxBytes || total < 0 {
			return need, fmt.Errorf("%w: the archive unpacks to more than %d bytes", ErrTooLarge, maxBytes)
		}
		need.inodes++
		if h.Typeflag == tar.TypeReg {
			need.sizes = append(need.sizes, h.Size)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return need, fmt.Errorf("%w: reading the archive: %v", ErrInvalid, err)
		}
	}
}
