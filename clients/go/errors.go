package highwater

// Typed errors for the SQLSTATEs highwater's SQL functions raise (docs/events.md,
// migrations/definitions/*.sql): HW001 unknown event type, HW002 invalid payload, HW003 stream
// version mismatch, HW010 unknown consumer, HW011 token ahead of the database, HW012 bad
// argument, HW030 a value over its size limit; and for the dispatcher's HTTP refusals.

// Error is a refusal by highwater: the server's code, message and hint. The typed errors below
// wrap one, so errors.As(err, &e) with e of type *Error finds it whatever the kind; any other
// HW code (HW011, HW012, …) and every HTTP refusal but 404 is an *Error on its own.
type Error struct {
	// Code is the SQLSTATE the server raised ("HW001"…); "" for an HTTP refusal.
	Code string
	// Message is the server's message, e.g. `unknown event type "NoSuchType"`.
	Message string
	// Hint is the server's fix, when it gave one.
	Hint string
	// Status is the HTTP status, for a refusal of the dispatcher's HTTP endpoint.
	Status int
	// Err is the driver's error (a *pgconn.PgError), nil for HTTP.
	Err error

	sentinel bool
}

func (e *Error) Error() string {
	if e.Hint != "" {
		return "highwater: " + e.Message + " (fix: " + e.Hint + ")"
	}
	return "highwater: " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrVersionConflict) and the other sentinels match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Code != "" && t.Code == e.Code
}

func sentinel(code, message string) *Error {
	return &Error{Code: code, Message: message, sentinel: true}
}

// Sentinels for errors.Is, one per code the SQL functions raise.
var (
	ErrUnknownEventType = sentinel("HW001", "unknown event type")
	ErrInvalidPayload   = sentinel("HW002", "invalid payload")
	ErrVersionConflict  = sentinel("HW003", "stream version conflict")
	ErrUnknownConsumer  = sentinel("HW010", "unknown consumer")
	ErrTokenAhead       = sentinel("HW011", "token ahead of the database")
	ErrBadArgument      = sentinel("HW012", "bad argument")
	ErrLimitExceeded    = sentinel("HW030", "value over its size limit")
)

// UnknownEventType (HW001): the event type is not registered
// (`highwater event-types register NAME`).
type UnknownEventType struct {
	EventType string
	Err       *Error
}

func (e *UnknownEventType) Error() string { return e.Err.Error() }
func (e *UnknownEventType) Unwrap() error { return e.Err }

// InvalidPayload (HW002): the payload fails the event type's JSON Schema (Path says where), or
// the event is otherwise not valid: empty stream type or id, NULL payload, metadata not a JSON
// object (then Path and Reason are "").
type InvalidPayload struct {
	EventType string
	// Path is where the payload fails its schema, as the server names it: "$", "$.total",
	// "$.items[1]".
	Path string
	// Reason is what is wrong there, e.g. `expected type "string", got number`.
	Reason string
	Err    *Error
}

func (e *InvalidPayload) Error() string { return e.Err.Error() }
func (e *InvalidPayload) Unwrap() error { return e.Err }

// VersionConflict (HW003): the stream is not at the expected version; another writer appended
// first. Reload the stream and retry the transaction.
type VersionConflict struct {
	StreamType string
	StreamID   string
	// ExpectedVersion is the event's Event.ExpectedVersion (-1 if it had none).
	ExpectedVersion int64
	// ActualVersion is the stream's version as the server reported it, -1 if it named none.
	ActualVersion int64
	Err           *Error
}

func (e *VersionConflict) Error() string { return e.Err.Error() }
func (e *VersionConflict) Unwrap() error { return e.Err }

// LimitExceeded (HW030): the event type, stream type, stream id or payload is over its size limit
// (docs/events.md "Limits"; sizes in bytes of UTF-8). Err.Message names the field, its size and
// the limit, Err.Hint the fix (e.g. a shorter id). Nothing was stored.
type LimitExceeded struct {
	// Field is "event type", "stream type", "stream id" or "payload"; "" if the server's message
	// named none.
	Field string
	// Size is the value's size in bytes as the server measured it, -1 if it named none.
	Size int64
	// Limit is the limit in bytes (200, 1024, or 67108864 for the payload), -1 if it named none.
	Limit int64
	Err   *Error
}

func (e *LimitExceeded) Error() string { return e.Err.Error() }
func (e *LimitExceeded) Unwrap() error { return e.Err }

// UnknownConsumer (HW010 over SQL, 404 over HTTP): no consumer of that name.
type UnknownConsumer struct {
	Consumer string
	Err      *Error
}

func (e *UnknownConsumer) Error() string { return e.Err.Error() }
func (e *UnknownConsumer) Unwrap() error { return e.Err }

// Is also matches ErrUnknownConsumer for the HTTP 404, which carries no SQLSTATE.
func (e *UnknownConsumer) Is(target error) bool { return target == ErrUnknownConsumer }
