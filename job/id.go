package job

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"time"
)

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// newID returns "job_" and 26 characters: a 48-bit millisecond timestamp
// then 80 random bits (ULID layout), so IDs sort roughly by creation.
func newID(now time.Time) string { return newPrefixedID("job_", now) }

// newPrefixedID is newID with another prefix ("ses_", "pool_").
func newPrefixedID(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	rand.Read(b[6:])
	return prefix + idEncoding.EncodeToString(b[:])
}
