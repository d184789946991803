package job

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/config"
)

// Tags and metadata are a client's labels on a job, a session or a turn
// (a framework's run id, trace ids): stored with the record, returned,
// and matched by the list filters. They mean nothing to sandboxd.
//
// Tags are strings, kept in the order given with duplicates dropped;
// metadata is a small string map. Both are bounded by config.Labels,
// checked by checkLabels (ErrInvalid naming the bound).

// LabelFilter keeps the records that carry every one of Tags and every
// key of Metadata with exactly that value.
type LabelFilter struct {
	Tags     []string
	Metadata map[string]string
}

// Empty reports whether the filter keeps everything.
func (f LabelFilter) Empty() bool { return len(f.Tags) == 0 && len(f.Metadata) == 0 }

// Matches reports whether tags and md pass the filter.
func (f LabelFilter) Matches(tags []string, md map[string]string) bool {
	for _, t := range f.Tags {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	for k, v := range f.Metadata {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// checkLabels validates tags and metadata against the bounds and returns
// the tags without duplicates (nil when none) and the metadata (nil when
// empty), owned by the caller.
func checkLabels(b config.Labels, what string, tags []string, md map[string]string) ([]string, map[string]string, error) {
	var out []string
	for _, t := range tags {
		if err := checkTag(b, t); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
		if len(out) > b.MaxTags {
			return nil, nil, fmt.Errorf("%w: %s has more than %d tags (labels.max_tags)", ErrInvalid, what, b.MaxTags)
		}
	}
	if len(md) > b.MaxMetadataKeys {
		return nil, nil, fmt.Errorf("%w: %s has %d metadata keys; at most %d (labels.max_metadata_keys)", ErrInvalid, what, len(md), b.MaxMetadataKeys)
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if err := checkMetadata(b, k, md[k]); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
		}
	}
	if len(md) == 0 {
		return out, nil, nil
	}
	return out, maps.Clone(md), nil
}

// checkFilter validates a list filter by the same bounds.
func checkFilter(b config.Labels, f LabelFilter) error {
	_, _, err := checkLabels(b, "the filter", f.Tags, f.Metadata)
	return err
}

func checkTag(b config.Labels, t string) error {
	switch {
	case t == "":
		return fmt.Errorf("a tag is empty")
	case len(t) > b.MaxTagBytes:
		return fmt.Errorf("tag %.40q… is %d bytes; at most %d (labels.max_tag_bytes)", t, len(t), b.MaxTagBytes)
	case !printable(t):
		return fmt.Errorf("tag %q has a control character or is not UTF-8", t)
	}
	return nil
}

func checkMetadata(b config.Labels, k, v string) error {
	switch {
	case k == "":
		return fmt.Errorf("a metadata key is empty")
	case len(k) > b.MaxKeyBytes:
		return fmt.Errorf("metadata key %.40q… is %d bytes; at most %d (labels.max_metadata_key_bytes)", k, len(k), b.MaxKeyBytes)
	case strings.IndexFunc(k, badKeyRune) >= 0:
		return fmt.Errorf("metadata key %q: only letters, digits, '_', '-', '.', ':' and '/'", k)
	case len(v) > b.MaxValueBytes:
		return fmt.Errorf("metadata %q is %d bytes; at most %d (labels.max_metadata_value_bytes)", k, len(v), b.MaxValueBytes)
	case !printable(v):
		return fmt.Errorf("metadata %q has a control character or is not UTF-8", k)
	}
	return nil
}

func badKeyRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("_-.:/", r)
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
