package highwater

import "context"

// Placeholders cast in SQL so that pgx and database/sql send the same text parameters.
const appendArgsSQL = `$1::text, $2::text, $3::text, $4::text::jsonb, $5::text::jsonb, $6::text, $7::bigint`

const (
	appendSQL         = `SELECT highwater.append(` + appendArgsSQL + `)`
	appendPositionSQL = `SELECT p.id, p.tx_id::text, p.token::text FROM highwater.append_position(` + appendArgsSQL + `) p`
	tokenSQL          = `SELECT highwater.token()::text`
)

// Append appends one event inside the transaction tx is in and returns its id. Nothing is stored
// unless that transaction commits. The server's refusals come back as *UnknownEventType,
// *InvalidPayload or *VersionConflict; any other error as the driver returned it. As with any
// failed statement, a refusal aborts the PostgreSQL transaction: roll it back (or use a
// savepoint of your own).
func Append(ctx context.Context, tx Querier, ev Event) (int64, error) {
	args, err := appendArgs(ctx, ev)
	if err != nil {
		return 0, err
	}
	var id int64
	if err := queryRow(ctx, tx, appendSQL, args, &id); err != nil {
		return 0, mapError(err, &ev, "")
	}
	return id, nil
}

// AppendPosition is Append that also returns the event's position and the transaction's token so
// far (highwater.append_position; an application role needs EXECUTE on it).
func AppendPosition(ctx context.Context, tx Querier, ev Event) (Appended, error) {
	args, err := appendArgs(ctx, ev)
	if err != nil {
		return Appended{}, err
	}
	var id int64
	var txID, token string
	if err := queryRow(ctx, tx, appendPositionSQL, args, &id, &txID, &token); err != nil {
		return Appended{}, mapError(err, &ev, "")
	}
	out := Appended{ID: id}
	if out.TxID, err = parseXid8(txID); err != nil {
		return Appended{}, err
	}
	out.Token, err = parseXid8(token)
	return out, err
}

// Token returns the token of the transaction tx is in (highwater.token()): take it after the
// transaction's last append; it covers all its events. Outside a writing transaction it covers
// every transaction committed before the call.
func Token(ctx context.Context, tx Querier) (uint64, error) {
	var s string
	if err := queryRow(ctx, tx, tokenSQL, nil, &s); err != nil {
		return 0, mapError(err, nil, "")
	}
	return parseXid8(s)
}
