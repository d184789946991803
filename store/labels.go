package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/sandboxd/sandboxd/job"
)

// Tags and metadata (job.LabelFilter) are kept as JSON columns, tags a
// JSON array and metadata a JSON object, NULL when there are none; the
// list filters match them with json_each, so a key needs no quoting in a
// JSON path.

// encodeLabels is the tags and metadata columns of a record.
func encodeLabels(tags []string, md map[string]string) (sql.NullString, sql.NullString, error) {
	var t, m sql.NullString
	if len(tags) > 0 {
		b, err := json.Marshal(tags)
		if err != nil {
			return t, m, fmt.Errorf("encode tags: %w", err)
		}
		t = sql.NullString{String: string(b), Valid: true}
	}
	if len(md) > 0 {
		b, err := json.Marshal(md)
		if err != nil {
			return t, m, fmt.Errorf("encode metadata: %w", err)
		}
		m = sql.NullString{String: string(b), Valid: true}
	}
	return t, m, nil
}

// decodeLabels reads the tags and metadata columns.
func decodeLabels(t, m sql.NullString) ([]string, map[string]string, error) {
	var (
		tags []string
		md   map[string]string
	)
	if t.Valid {
		if err := json.Unmarshal([]byte(t.String), &tags); err != nil {
			return nil, nil, fmt.Errorf("decode tags: %w", err)
		}
	}
	if m.Valid {
		if err := json.Unmarshal([]byte(m.String), &md); err != nil {
			return nil, nil, fmt.Errorf("decode metadata: %w", err)
		}
	}
	return tags, md, nil
}

// labelWhere is f as SQL conditions on the tags and metadata columns,
// every one of them required, with ? placeholders (page.sql numbers them
// for Postgres): SQLite's json_each, or Postgres's jsonb functions.
func labelWhere(f job.LabelFilter, postgres bool) (where []string, args []any) {
	tag := "EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?)"
	meta := "EXISTS (SELECT 1 FROM json_each(metadata) WHERE key = ? AND value = ?)"
	if postgres {
		tag = "EXISTS (SELECT 1 FROM jsonb_array_elements_text(tags::jsonb) AS t(v) WHERE t.v = ?)"
		meta = "EXISTS (SELECT 1 FROM jsonb_each_text(metadata::jsonb) AS m(k, v) WHERE m.k = ? AND m.v = ?)"
	}
	for _, t := range f.Tags {
		where = append(where, tag)
		args = append(args, t)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		where = append(where, meta)
		args = append(args, k, f.Metadata[k])
	}
	return where, args
}
