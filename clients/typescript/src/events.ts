// append, appendPosition and token: one statement each, on the caller's connection and inside
// the caller's transaction. Validation, ordering and refusals are the server's (highwater.append).
import { tokenSink } from './context.js';
import { type Executor, MARKER, runner } from './executor.js';
import { mapError } from './errors.js';
import { withTraceContext } from './trace.js';

/** A position token: a transaction id (`xid8`) in decimal digits, e.g. `"7421"`. It covers every
 * event whose `tx_id` is at most the token. Kept as a string: it may exceed 2^53. */
export type Token = string;

export interface NewEvent {
  /** The aggregate's type, e.g. `"order"`. */
  streamType: string;
  /** The aggregate's id, e.g. `"42"`. */
  streamId: string;
  /** A registered event type, e.g. `"OrderPlaced"`. */
  type: string;
  /** Any JSON value; checked by the server against the type's JSON Schema. */
  payload: unknown;
  /** A JSON object; the server adds `correlation_id` (and `causation_id` inside a SQL sink).
   * Inside an OpenTelemetry span, the span's `traceparent`/`tracestate` are added unless it has
   * its own `traceparent` (when `@opentelemetry/api` is installed). */
  metadata?: Record<string, unknown> | null | undefined;
  /** NULL (the default) is the system tenant, or the `highwater.tenant_id` setting. */
  tenantId?: string | null | undefined;
  /** Optimistic concurrency: the version the stream must be at (0: the stream must be empty).
   * The event then gets version `expectedVersion + 1`; a mismatch raises `VersionConflict`. */
  expectedVersion?: number | bigint | string | null | undefined;
}

export interface Appended {
  /** The event's id (a bigint, as a string). */
  id: string;
  /** The event's transaction id as stamped (its position is `(txId, id)`). */
  txId: string;
  /** The writing transaction's token so far: covers this event and every earlier one of it. */
  token: Token;
}

function report(token: unknown): Token {
  const t = String(token);
  tokenSink.getStore()?.(t);
  return t;
}

function args(e: NewEvent): unknown[] {
  const payload = e.payload === undefined ? null : JSON.stringify(e.payload);
  // Inside an OpenTelemetry span: its trace context goes with the event (./trace.ts).
  const metadata = withTraceContext(e.metadata);
  return [
    e.streamType,
    e.streamId,
    e.type,
    payload,
    metadata == null ? null : JSON.stringify(metadata),
    e.tenantId ?? null,
    e.expectedVersion == null ? null : String(e.expectedVersion),
  ];
}

// JSON goes as text cast to jsonb: node-postgres would turn a JS array into a PostgreSQL array.
const ARGS = '$1::text, $2::text, $3::text, $4::text::jsonb, $5::text::jsonb, $6::text, $7::text::bigint';

const APPEND = `SELECT highwater.append(${ARGS})::text AS id ${MARKER}`;
// Inside a request with the highwaterTokens middleware, the token is read after the append, in
// the same statement (OFFSET 0 keeps the subquery, so its row comes first). Only then:
// highwater.token() is a SQL function with a SET clause, planned afresh in every statement, and
// costs about a fifth of an append's round trip (clients/typescript/bench, docs/bench/history.md).
const APPEND_TOKEN =
  `SELECT a.id::text AS id, highwater.token()::text AS token ` +
  `FROM (SELECT highwater.append(${ARGS}) AS id OFFSET 0) a ${MARKER}`;
const APPEND_POSITION =
  `SELECT p.id::text AS id, p.tx_id::text AS txid, p.token::text AS token ` +
  `FROM highwater.append_position(${ARGS}) p ${MARKER}`;
const TOKEN = `SELECT highwater.token()::text AS token ${MARKER}`;

/** Appends one event inside the transaction `tx` is in and returns its id. Nothing is stored
 * unless that transaction commits. Raises `UnknownEventType`, `InvalidPayload`,
 * `VersionConflict` for the server's refusals; any other error as the driver threw it. */
export async function append(tx: Executor, event: NewEvent): Promise<string> {
  const run = runner(tx);
  const sink = tokenSink.getStore();
  let rows;
  try {
    rows = await run.run(sink ? APPEND_TOKEN : APPEND, args(event));
  } catch (e) {
    throw mapError(e, event);
  }
  const row = rows[0]!;
  if (sink) sink(String(row.token));
  return String(row.id);
}

/** `append` that also returns the event's position and the transaction's token so far
 * (`highwater.append_position`; the application's role needs EXECUTE on it). */
export async function appendPosition(tx: Executor, event: NewEvent): Promise<Appended> {
  const run = runner(tx);
  let rows;
  try {
    rows = await run.run(APPEND_POSITION, args(event));
  } catch (e) {
    throw mapError(e, event);
  }
  const row = rows[0]!;
  return { id: String(row.id), txId: String(row.txid), token: report(row.token) };
}

/** The token of the transaction `tx` is in (`highwater.token()`): take it after its last append.
 * Outside a writing transaction it covers every transaction committed before the call. */
export async function token(tx: Executor): Promise<Token> {
  const run = runner(tx);
  let rows;
  try {
    rows = await run.run(TOKEN, []);
  } catch (e) {
    throw mapError(e);
  }
  return report(rows[0]!.token);
}

/** Whether `s` is a token as the server accepts one: 1–20 decimal digits, not 0, at most 2^64-1. */
export function isToken(s: unknown): s is Token {
  return typeof s === 'string' && /^[0-9]{1,20}$/.test(s) && BigInt(s) > 0n && BigInt(s) <= 0xffffffffffffffffn;
}
