package store

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/job"
)

// A cursor is the keyset position (created_at, id) of the last job of a
// page, base64url encoded so clients treat it as opaque.

func encodeCursor(createdAt int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(createdAt, 10) + ":" + id))
}

func decodeCursor(s string) (createdAt int64, id string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, "", fmt.Errorf("%w: malformed cursor", job.ErrInvalid)
	}
	ts, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return 0, "", fmt.Errorf("%w: malformed cursor", job.ErrInvalid)
	}
	createdAt, err = strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: malformed cursor", job.ErrInvalid)
	}
	return createdAt, id, nil
}
