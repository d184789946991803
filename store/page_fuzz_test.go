package store

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/job"
)

var dollarRE = regexp.MustCompile(`\$(\d+)`)

// A listing's query, from any cursor, filters, tags and metadata a
// client sends: refused
// as ErrInvalid, or with exactly one argument per placeholder (both
// dialects), the values never in the SQL text.
func FuzzPageSQL(f *testing.F) {
	f.Add("", "calc", "", int64(0), int64(0), 0, "", "", "")
	f.Add(encodeCursor(5, "j1"), "", "ses'; DROP TABLE jobs; --", int64(1), int64(9), 600, "t'1", "k?", "$1")
	f.Add("bad cursor", "x", "y", int64(-1), int64(0), -3, "a", "b", "c")
	f.Fuzz(func(t *testing.T, cursor, tool, session string, since, until int64, limit int, tag, mkey, mval string) {
		p := page{what: "jobs", table: "jobs", columns: jobColumns, tenant: "acme",
			eq:    [][2]string{{"tool", tool}, {"session_id", session}},
			limit: limit, cursor: cursor}
		if tag != "" {
			p.labels.Tags = []string{tag, tag + "2"}
		}
		if mkey != "" {
			p.labels.Metadata = map[string]string{mkey: mval, mkey + "x": mval}
		}
		if since != 0 {
			p.since = time.Unix(0, since)
		}
		if until != 0 {
			p.until = time.Unix(0, until)
		}
		for _, dollar := range []bool{false, true} {
			q, args, lim, err := p.sql(dollar)
			if err != nil {
				if !errors.Is(err, job.ErrInvalid) {
					t.Fatalf("error %v is not ErrInvalid", err)
				}
				continue
			}
			if lim < 1 || lim > 500 {
				t.Fatalf("limit %d", lim)
			}
			n := strings.Count(q, "?")
			if dollar {
				n = len(dollarRE.FindAllString(q, -1))
				for i, m := range dollarRE.FindAllStringSubmatch(q, -1) {
					if m[1] != strconv.Itoa(i+1) {
						t.Fatalf("placeholder %s at position %d: %s", m[0], i+1, q)
					}
				}
			}
			if n != len(args) {
				t.Fatalf("%d placeholders, %d args: %s", n, len(args), q)
			}
			// The builder writes no literal: a quote can only be a value.
			if strings.ContainsAny(q, "'\"") {
				t.Fatalf("a value is in the SQL text: %s", q)
			}
		}
	})
}
