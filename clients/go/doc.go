// Package highwater appends highwater events from Go inside the application's own PostgreSQL
// transaction (pgx v5 or database/sql with the pgx stdlib driver) and waits until a consumer has
// applied them (read-your-writes).
//
// It only calls highwater's SQL functions (highwater.append, highwater.append_position,
// highwater.token, highwater.applied) and the dispatcher's HTTP wait endpoint: payload schemas,
// stream versions and every other check stay in the database, so a Go writer gets exactly the
// checks every other writer gets. The server's refusals (SQLSTATE HW001…HW030) come back as typed
// errors: UnknownEventType, InvalidPayload, VersionConflict, UnknownConsumer, LimitExceeded, or
// *Error.
//
// Nothing is stored unless the caller's transaction commits: no function here begins, commits or
// rolls back anything.
package highwater
