// Package ids makes every identifier sandboxd hands out: one generator, a
// prefix per kind of thing. It imports only the standard library, so every
// package (the runners included) may use it.
//
//	New("job_")   job_06h2njaxk0q3snnvxsm0gdye88   jobs, sessions (ses_), approvals (apr_),
//	                                             pooled sandboxes (pool_), tool calls (call_),
//	                                             requests (req_)
//	Short("sbx-") sbx-9b1f124ee68ff43b           sandbox and runner instance IDs
//
// New is time-ordered (a 48-bit millisecond timestamp, then 80 random bits:
// the ULID layout in lower-case Crockford base32), so IDs sort by creation
// in lists, logs and store indexes. Short is 64 random bits in hex: sandbox
// and instance IDs become parts of unix socket paths (at most 108 bytes)
// and container names, where every byte counts.
package ids

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"time"
)

var encoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// New returns prefix followed by 26 characters: the time now in
// milliseconds, then 80 random bits.
func New(prefix string) string { return At(prefix, time.Now()) }

// At is New for the given time (a record's creation time, so that its ID
// and its timestamp agree).
func At(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return prefix + encoding.EncodeToString(b[:])
}

// Short returns prefix followed by 16 hex digits (64 random bits).
func Short(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
