package highwater

import (
	"fmt"
	"strconv"
)

// A token (read-your-writes position) is a transaction id, an xid8: it covers every event whose
// tx_id is at most the token. It is a plain uint64 here (Go has no trouble with 64 bits); its
// text form (FormatToken, ParseToken) is what the HTTP endpoint and a Highwater-Token header
// carry.

// FormatToken is the token in decimal digits, e.g. "7421".
func FormatToken(t uint64) string { return strconv.FormatUint(t, 10) }

// ParseToken reads a token as the server accepts one: 1 to 20 decimal digits, not 0, at most
// 2^64-1.
func ParseToken(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 || len(s) > 20 {
		return 0, fmt.Errorf("highwater: %q is not a token (1 to 20 decimal digits, not 0, at most 2^64-1)", s)
	}
	return v, nil
}

// parseXid8 reads an xid8 the server returned as text.
func parseXid8(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("highwater: the server returned %q, not a transaction id: %w", s, err)
	}
	return v, nil
}
