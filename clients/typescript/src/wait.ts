// Read-your-writes waits: over SQL (highwater.applied, woken by NOTIFY highwater_applied when the
// database connection allows it) and over the dispatcher's HTTP endpoint
// (GET /v1/consumers/NAME/applied?after=TOKEN&timeout=…).
import { type Executor, MARKER, runner } from './executor.js';
import { HighwaterError, UnknownConsumer, driverError, mapError } from './errors.js';
import type { Token } from './events.js';

export interface WaitOptions {
  /** How long to wait, in milliseconds (default 5000). */
  timeout?: number;
  /** A PerInstance consumer's instance; leave it out for a Shared consumer, or to wait for all. */
  instance?: string | null | undefined;
  /** Stops the wait early: it then rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

export interface WaitResult {
  /** True: the consumer applied everything the token covers. False: the timeout ran out first. */
  applied: boolean;
  /** On an HTTP timeout: the shards that held the wait, as the dispatcher reports them. */
  pending?: unknown;
}

/** A node-postgres pool: the wait checks out one client, LISTENs on it and gives it back. */
interface PoolLike {
  connect(): Promise<ListenClient>;
  query(text: string, values?: unknown[]): unknown;
  totalCount: number;
}

interface ListenClient {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
  on(event: 'notification', listener: (msg: { channel: string; payload?: string }) => void): unknown;
  removeListener(event: 'notification', listener: (msg: { channel: string; payload?: string }) => void): unknown;
  release(err?: Error | boolean): void;
}

function isPool(db: unknown): db is PoolLike {
  const o = db as Record<string, unknown>;
  return typeof o?.connect === 'function' && typeof o.query === 'function' && typeof o.totalCount === 'number';
}

const APPLIED = `SELECT highwater.applied($1::text, $2::text::xid8, $3::text) AS applied ${MARKER}`;
const FIRST_DELAY_MS = 10;
const MAX_DELAY_MS = 250;

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('The wait was aborted', 'AbortError');
}

/** Waits until `consumer` applied everything `token` covers (for a SQL sink: committed in its
 * tables), or the timeout runs out. `db` must see committed data: a `pg.Pool` (best: the wait
 * LISTENs on `highwater_applied` on one of its clients and polls as a safety net), a client not
 * inside a transaction, or an ORM database object (polled with a short backoff, 10 ms to 250 ms).
 * Raises `UnknownConsumer` (HW010) and `HighwaterError` (HW011 token ahead of the database,
 * HW012 bad argument); resolves `{ applied: false }` on timeout. */
export async function waitApplied(
  db: Executor,
  consumer: string,
  token: Token,
  options: WaitOptions = {},
): Promise<WaitResult> {
  const timeout = options.timeout ?? 5000;
  const deadline = Date.now() + timeout;
  const signal = options.signal;
  signal?.throwIfAborted();
  const values = [consumer, token, options.instance ?? null];

  let client: ListenClient | undefined;
  let check: () => Promise<boolean>;
  let wake: (() => void) | undefined;
  // A notification that arrives while a check runs: the next check follows at once.
  let notified = false;
  const onNotification = (msg: { channel: string; payload?: string }) => {
    if (msg.channel !== 'highwater_applied' || msg.payload !== consumer) return;
    notified = true;
    wake?.();
  };
  if (isPool(db)) {
    client = await db.connect();
    try {
      client.on('notification', onNotification);
      await client.query('LISTEN highwater_applied');
    } catch (e) {
      client.removeListener('notification', onNotification);
      client.release(e as Error);
      throw e;
    }
    const c = client;
    check = async () => (await c.query(APPLIED, values)).rows[0]!.applied === true;
  } else {
    const run = runner(db);
    check = async () => (await run.run(APPLIED, values))[0]!.applied === true;
  }

  let broken: Error | undefined;
  try {
    let delay = FIRST_DELAY_MS;
    for (;;) {
      let applied: boolean;
      notified = false;
      try {
        applied = await check();
      } catch (e) {
        // A refusal by the server leaves the connection usable; anything else may not have.
        if (!driverError(e)) broken = e as Error;
        throw mapError(e, undefined, consumer);
      }
      if (applied) return { applied: true };
      const remaining = deadline - Date.now();
      if (remaining <= 0) return { applied: false };
      if (notified) continue;
      await new Promise<void>((resolve, reject) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', aborted);
          wake = undefined;
          resolve();
        };
        const aborted = () => {
          clearTimeout(timer);
          wake = undefined;
          reject(abortError(signal!));
        };
        if (signal?.aborted) return reject(abortError(signal));
        const timer = setTimeout(done, Math.min(delay, remaining));
        wake = done;
        signal?.addEventListener('abort', aborted, { once: true });
      });
      delay = Math.min(delay * 2, MAX_DELAY_MS);
    }
  } finally {
    if (client) {
      client.removeListener('notification', onNotification);
      if (broken) {
        client.release(broken);
      } else {
        try {
          await client.query('UNLISTEN highwater_applied');
          client.release();
        } catch (e) {
          client.release(e as Error);
        }
      }
    }
  }
}

export interface HttpWaitOptions extends WaitOptions {
  /** A bearer token the dispatcher accepts (its `--sse-tokens-file` / `HIGHWATER_SSE_TOKENS`). */
  authToken: string;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

/** The same wait through the dispatcher's HTTP endpoint `GET {baseUrl}/v1/consumers/{consumer}/applied`
 * (a long poll). 200 → `{ applied: true }`, 408 → `{ applied: false, pending }`; 404 raises
 * `UnknownConsumer`, 400 / 401 / 503 raise `HighwaterError` with the dispatcher's reason and
 * `status`. The dispatcher accepts timeouts up to 5 minutes. */
export async function waitAppliedHttp(
  baseUrl: string | URL,
  consumer: string,
  token: Token,
  options: HttpWaitOptions,
): Promise<WaitResult> {
  const timeout = options.timeout ?? 5000;
  const url = new URL(`v1/consumers/${encodeURIComponent(consumer)}/applied`, String(baseUrl).replace(/\/?$/, '/'));
  url.searchParams.set('after', token);
  url.searchParams.set('timeout', `${Math.max(0, Math.round(timeout))}ms`);
  if (options.instance != null) url.searchParams.set('instance', options.instance);
  // The server answers by its own deadline; ours is a net in case it never does.
  const net = AbortSignal.timeout(timeout + 10_000);
  const signal = options.signal ? AbortSignal.any([options.signal, net]) : net;
  const res = await (options.fetch ?? fetch)(url, {
    headers: { authorization: `Bearer ${options.authToken}`, accept: 'application/json' },
    signal,
  });
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // 401 answers in plain text
  }
  const reason = typeof body.error === 'string' ? body.error : text.trim() || res.statusText;
  switch (res.status) {
    case 200:
      return { applied: body.applied === true };
    case 408:
      return { applied: false, pending: body.pending };
    case 404:
      return Promise.reject(new UnknownConsumer(consumer, reason, { status: 404 }));
    default:
      return Promise.reject(new HighwaterError(`dispatcher answered ${res.status}: ${reason}`, { status: res.status }));
  }
}
