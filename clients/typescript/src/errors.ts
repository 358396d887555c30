// Typed errors for the SQLSTATEs the highwater SQL functions raise (migrations/*.sql,
// docs/events.md): HW001 unknown event type, HW002 invalid payload, HW003 expected version
// mismatch, HW010 unknown consumer, HW011 token ahead of the database, HW012 bad argument,
// HW030 a value over its size limit.
import { MARKER } from './executor.js';

export interface HighwaterErrorOptions {
  /** The SQLSTATE the server raised (`HW001`…), when the error came from SQL. */
  code?: string | undefined;
  /** The server's hint (how to fix it), when it gave one. */
  hint?: string | undefined;
  /** The HTTP status, when the error came from the dispatcher's HTTP endpoint. */
  status?: number | undefined;
  /** The driver's (or ORM's) original error. */
  cause?: unknown;
}

/** Base class of every error this package raises for a highwater refusal. */
export class HighwaterError extends Error {
  readonly code: string | undefined;
  readonly hint: string | undefined;
  readonly status: number | undefined;
  constructor(message: string, options: HighwaterErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code;
    this.hint = options.hint;
    this.status = options.status;
  }
}

/** HW001: the event type is not registered (`highwater event-types register NAME`). */
export class UnknownEventType extends HighwaterError {
  constructor(
    readonly eventType: string,
    message: string,
    options: HighwaterErrorOptions,
  ) {
    super(message, options);
  }
}

/** HW002: the payload fails the event type's JSON Schema (`path` names where, e.g. `$.total`),
 * or the event is otherwise not valid (empty stream, NULL payload, metadata not an object: then
 * `path` is undefined). */
export class InvalidPayload extends HighwaterError {
  constructor(
    readonly eventType: string,
    /** Where the payload fails its schema, as the server names it: `$`, `$.total`, `$.items[1]`. */
    readonly path: string | undefined,
    /** What is wrong there, e.g. `expected type "number", got string`. */
    readonly reason: string | undefined,
    message: string,
    options: HighwaterErrorOptions,
  ) {
    super(message, options);
  }
}

/** HW003: the stream is not at the expected version (another writer appended first). */
export class VersionConflict extends HighwaterError {
  constructor(
    readonly streamType: string,
    readonly streamId: string,
    readonly expectedVersion: number,
    /** The stream's version as the server reported it, when it did. */
    readonly actualVersion: number | undefined,
    message: string,
    options: HighwaterErrorOptions,
  ) {
    super(message, options);
  }
}

/** HW030: the event type, stream type, stream id or payload is over its size limit (docs/events.md
 * "Limits"; sizes in bytes of UTF-8). The message names the field, its size and the limit, the
 * hint the fix (e.g. a shorter id). Nothing was stored. */
export class LimitExceeded extends HighwaterError {
  constructor(
    /** Which value: `'event type'`, `'stream type'`, `'stream id'` or `'payload'`. */
    readonly field: string | undefined,
    /** Its size in bytes, as the server measured it. */
    readonly size: number | undefined,
    /** The limit in bytes (200, 1024, or 67108864 for the payload). */
    readonly limit: number | undefined,
    message: string,
    options: HighwaterErrorOptions,
  ) {
    super(message, options);
  }
}

/** HW010 (SQL) or 404 (HTTP): no consumer of that name. */
export class UnknownConsumer extends HighwaterError {
  constructor(
    readonly consumer: string,
    message: string,
    options: HighwaterErrorOptions,
  ) {
    super(message, options);
  }
}

interface DriverError {
  code: string;
  message: string;
  hint?: string;
}

/** The PostgreSQL error inside what the driver or ORM threw: node-postgres' error itself (Knex,
 * Kysely), `cause` (Drizzle's DrizzleQueryError), `driverError` (TypeORM's QueryFailedError),
 * `meta.driverAdapterError.cause` (Prisma's P2010 "Raw query failed", whose own `code` is
 * Prisma's, not the server's: the driver adapter's `{ kind: 'postgres', code, message, hint }`). */
export function driverError(err: unknown): DriverError | undefined {
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0) {
    const e = queue.shift();
    if (!e || typeof e !== 'object' || seen.has(e)) continue;
    seen.add(e);
    const o = e as Record<string, unknown>;
    const adapterError = (o.meta as Record<string, unknown> | undefined)?.driverAdapterError;
    if (adapterError && typeof adapterError === 'object') {
      queue.unshift(adapterError);
      continue;
    }
    if (typeof o.code === 'string' && /^[0-9A-Z]{5}$/.test(o.code) && typeof o.message === 'string') {
      // TypeORM copies `code` onto its own error; prefer the driver's, which has the pure message.
      if (o.driverError && typeof o.driverError === 'object') {
        queue.unshift(o.driverError);
        continue;
      }
      return { code: o.code, message: o.message, ...(typeof o.hint === 'string' ? { hint: o.hint } : {}) };
    }
    queue.push(o.driverError, o.cause, o.originalError);
  }
  return undefined;
}

/** The server's message: Knex prefixes the query ("<query> - <message>"). */
function serverMessage(message: string): string {
  const at = message.lastIndexOf(MARKER + ' - ');
  return at < 0 ? message : message.slice(at + MARKER.length + 3);
}

export interface AppendContext {
  streamType: string;
  streamId: string;
  type: string;
  expectedVersion?: number | bigint | string | null | undefined;
}

/** Maps a highwater refusal to its typed error; returns anything else unchanged. */
export function mapError(err: unknown, ctx?: AppendContext, consumer?: string): unknown {
  const d = driverError(err);
  if (!d || !d.code.startsWith('HW')) return err;
  const message = serverMessage(d.message);
  const options = { code: d.code, hint: d.hint, cause: err };
  switch (d.code) {
    case 'HW001':
      return new UnknownEventType(ctx?.type ?? /"(.*)"/.exec(message)?.[1] ?? '', message, options);
    case 'HW002': {
      // "payload of event type "T" fails its JSON Schema: <path>: <reason>"
      const m = /fails its JSON Schema: (\$.*?): (.*)$/s.exec(message);
      return new InvalidPayload(ctx?.type ?? '', m?.[1], m?.[2], message, options);
    }
    case 'HW003': {
      // "stream S/I is at version A, expected E" or "stream S/I already has version V (it is at version A)"
      const m = /is at version (\d+)(?:, expected \d+|\))$/.exec(message);
      return new VersionConflict(
        ctx?.streamType ?? '',
        ctx?.streamId ?? '',
        ctx?.expectedVersion == null ? NaN : Number(ctx.expectedVersion),
        m ? Number(m[1]) : undefined,
        message,
        options,
      );
    }
    case 'HW030': {
      // "stream id "I…" of stream type "S" is 1025 bytes long; the limit is 1024 bytes (UTF-8)",
      // "payload of event type "T" is N bytes (as jsonb); the limit is 67108864 bytes (64 MiB)":
      // the field leads, the sizes end it (read from the end: the quoted value may hold anything).
      const field = /^(event type|stream type|stream id|payload) /.exec(message)?.[1];
      const m = /is (\d+) bytes(?: long| \(as jsonb\)); the limit is (\d+) bytes(?: \([^()]*\))?$/.exec(message);
      return new LimitExceeded(field, m ? Number(m[1]) : undefined, m ? Number(m[2]) : undefined, message, options);
    }
    case 'HW010':
      return new UnknownConsumer(consumer ?? /"(.*)"/.exec(message)?.[1] ?? '', message, options);
    default:
      return new HighwaterError(message, options);
  }
}
