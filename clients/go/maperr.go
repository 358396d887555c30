package highwater

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// `unknown event type "T"`, `no consumer named "C"`.
	quotedName = regexp.MustCompile(`"(.*)"`)
	// `payload of event type "T" fails its JSON Schema: <path>: <reason>`
	schemaFailure = regexp.MustCompile(`(?s)fails its JSON Schema: (\$.*?): (.*)$`)
	// `stream S/I is at version A, expected E` or `stream S/I already has version V (it is at
	// version A)`.
	actualVersion = regexp.MustCompile(`is at version (\d+)(?:, expected \d+|\))$`)
	// `stream id "I…" of stream type "S" is 1025 bytes long; the limit is 1024 bytes (UTF-8)`,
	// `payload of event type "T" is N bytes (as jsonb); the limit is 67108864 bytes (64 MiB)`: the
	// field leads, the sizes end it (read from the end: the quoted value may hold anything).
	limitField = regexp.MustCompile(`^(event type|stream type|stream id|payload) `)
	limitSizes = regexp.MustCompile(`is (\d+) bytes(?: long| \(as jsonb\)); the limit is (\d+) bytes(?: \([^()]*\))?$`)
)

// mapError turns a highwater refusal (an HW SQLSTATE) into its typed error and returns any other
// error unchanged, so that the application sees its driver's errors as it always does. ev is the
// event being appended (nil for waits), consumer the consumer waited for.
func mapError(err error, ev *Event, consumer string) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || !strings.HasPrefix(pg.Code, "HW") {
		return err
	}
	base := &Error{Code: pg.Code, Message: pg.Message, Hint: pg.Hint, Err: err}
	switch pg.Code {
	case "HW001":
		name := quoted(pg.Message)
		if ev != nil {
			name = ev.Type
		}
		return &UnknownEventType{EventType: name, Err: base}
	case "HW002":
		e := &InvalidPayload{Err: base}
		if ev != nil {
			e.EventType = ev.Type
		}
		if m := schemaFailure.FindStringSubmatch(pg.Message); m != nil {
			e.Path, e.Reason = m[1], m[2]
		}
		return e
	case "HW003":
		e := &VersionConflict{ExpectedVersion: -1, ActualVersion: -1, Err: base}
		if ev != nil {
			e.StreamType, e.StreamID = ev.StreamType, ev.StreamID
			if ev.ExpectedVersion != nil {
				e.ExpectedVersion = *ev.ExpectedVersion
			}
		}
		if m := actualVersion.FindStringSubmatch(pg.Message); m != nil {
			e.ActualVersion, _ = strconv.ParseInt(m[1], 10, 64)
		}
		return e
	case "HW030":
		e := &LimitExceeded{Size: -1, Limit: -1, Err: base}
		if m := limitField.FindStringSubmatch(pg.Message); m != nil {
			e.Field = m[1]
		}
		if m := limitSizes.FindStringSubmatch(pg.Message); m != nil {
			e.Size, _ = strconv.ParseInt(m[1], 10, 64)
			e.Limit, _ = strconv.ParseInt(m[2], 10, 64)
		}
		return e
	case "HW010":
		if consumer == "" {
			consumer = quoted(pg.Message)
		}
		return &UnknownConsumer{Consumer: consumer, Err: base}
	default:
		return base
	}
}

func quoted(message string) string {
	if m := quotedName.FindStringSubmatch(message); m != nil {
		return m[1]
	}
	return ""
}
