// Read-your-writes waits: over SQL (highwater.applied, woken by NOTIFY highwater_applied when the
// database connection allows it) and over the dispatcher's HTTP endpoint
// (GET /v1/consumers/NAME/applied?after=TOKEN&timeout=…).
import { type Executor, MARKER, runner } from './executor.js';
import { HighwaterError, UnknownConsumer, driverError, mapError } from './errors.js';
import { type Token, isToken } from './events.js';

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

/** A node-postgres pool. Its waits share one hub: one client checked out for `LISTEN`. */
interface PoolLike {
  connect(): Promise<ListenClient>;
  query(text: string, values?: unknown[]): unknown;
  totalCount: number;
  /** pg-pool sets it in `end()`: the hub then gives its client back without lingering. */
  ending?: boolean;
}

type Listener = (...args: never[]) => void;

interface ListenClient {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
  on(event: 'notification' | 'error' | 'end', listener: Listener): unknown;
  removeListener(event: 'notification' | 'error' | 'end', listener: Listener): unknown;
  release(err?: Error | boolean): void;
}

function isPool(db: unknown): db is PoolLike {
  const o = db as Record<string, unknown>;
  return typeof o?.connect === 'function' && typeof o.query === 'function' && typeof o.totalCount === 'number';
}

const APPLIED = `SELECT highwater.applied($1::text, $2::text::xid8, $3::text) AS applied ${MARKER}`;
const FIRST_DELAY_MS = 10;
const MAX_DELAY_MS = 250;

// One statement for every pending waiter of the hub: per (consumer, instance), its distinct
// pending tokens in ascending order, checked with highwater.applied (the only wait function an
// application role is granted, README "GRANT") from the smallest up, stopping at the first that
// is not applied: `applied` is monotonic in the token (token < bound, one snapshot), so each
// call past the first false would be false too. The cost is one call per released waiter plus
// one per consumer, in one round trip, however many waiters there are.
const APPLIED_BATCH = `WITH RECURSIVE k AS (
  SELECT n::int AS n, consumer, instance, tokens::xid8[] AS tokens
    FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(consumer, instance, tokens, n)
), r AS (
  SELECT n, 1 AS i, highwater.applied(consumer, tokens[1], instance) AS ok FROM k
  UNION ALL
  SELECT k.n, r.i + 1, highwater.applied(k.consumer, k.tokens[r.i + 1], k.instance)
    FROM r JOIN k ON k.n = r.n
   WHERE r.ok AND r.i < cardinality(k.tokens)
)
SELECT n, (count(*) FILTER (WHERE ok))::int AS applied FROM r GROUP BY n ${MARKER}`;
/** Re-checks every waiter this often without a notification: notifications are hints (the
 * fence can pass a token while no cursor of the consumer moves, e.g. a write of a type it does
 * not select). */
const POLL_MS = 250;
/** Keeps the LISTEN client this long after the last waiter left: waits that follow one another
 * (one request after the other) then share it instead of paying LISTEN / UNLISTEN each. */
const LINGER_MS = 100;
/** A LISTEN client that breaks within a second of opening is re-opened after this pause, so a
 * server that keeps dropping it is not hammered (the waiters' timers bound the wait anyway). */
const RECONNECT_DELAY_MS = 100;

/** SQLSTATE classes of a broken or ended connection (08 connection exception, 57 operator
 * intervention such as pg_terminate_backend): the hub re-opens its client and checks again.
 * Any other SQLSTATE is an answer to the statement (HW010, HW011, HW012, 42501 no grant…). */
function connectionLost(e: unknown): boolean {
  const code = driverError(e)?.code;
  return code === undefined || code.startsWith('08') || code.startsWith('57');
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('The wait was aborted', 'AbortError');
}

interface Waiter {
  key: Key;
  token: bigint;
  settle(outcome: { result: WaitResult } | { error: unknown }): void;
}

/** The waiters of one (consumer, instance) and what the last check said of them. */
interface Key {
  id: string;
  consumer: string;
  instance: string | null;
  waiters: Set<Waiter>;
  /** Check at the next round. */
  dirty: boolean;
  /** The last check's answer, good while no notification for the consumer arrived since it
   * began (`gen`) and the LISTEN client was up all along: tokens up to `applied` are applied,
   * from `pending` up are not (a waiter for one waits for the next notification or poll). */
  cache?: { gen: number; applied: bigint | null; pending: bigint | null };
}

/** One (consumer, instance) in a check: its distinct tokens, ascending, and the waiters then. */
interface Batch {
  key: Key;
  gen: number;
  tokens: bigint[];
  waiters: Waiter[];
}

/** A pool's waits, sharing one LISTEN client and one check per wake-up (like the dispatcher's
 * wait hub, engine/src/wait.rs). */
class WaitHub {
  private readonly keys = new Map<string, Key>();
  /** Per consumer: bumped by each notification, and for all on every (re)connect. */
  private readonly gens = new Map<string, number>();
  private epoch = 0;
  private waiting = 0;
  private client: ListenClient | undefined;
  private connecting = false;
  private checking = false;
  private again = false;
  private poll: NodeJS.Timeout | undefined;
  private linger: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  private opened = 0;
  /** Detaches the current client's listeners: set while it is up. */
  private detach: (() => void) | undefined;

  constructor(private readonly pool: PoolLike) {}

  wait(consumer: string, token: bigint, instance: string | null, timeout: number, signal?: AbortSignal) {
    return new Promise<WaitResult>((resolve, reject) => {
      const id = JSON.stringify([consumer, instance]);
      let key = this.keys.get(id);
      if (!key) {
        key = { id, consumer, instance, waiters: new Set(), dirty: false };
        this.keys.set(id, key);
      }
      const cache = this.client && key.cache?.gen === this.gen(consumer) ? key.cache : undefined;
      if (cache?.applied != null && token <= cache.applied) return resolve({ applied: true });
      const k = key;
      const aborted = () => w.settle({ error: abortError(signal!) });
      // setTimeout fires at once for more than 2^31 - 1 ms.
      const timer = setTimeout(() => w.settle({ result: { applied: false } }), Math.min(timeout, 2 ** 31 - 1));
      const w: Waiter = {
        key: k,
        token,
        settle: (outcome) => {
          if (!k.waiters.delete(w)) return;
          clearTimeout(timer);
          signal?.removeEventListener('abort', aborted);
          if ('error' in outcome) reject(outcome.error);
          else resolve(outcome.result);
          if (k.waiters.size === 0 && !k.cache) this.keys.delete(k.id);
          if (--this.waiting === 0) this.idle();
        },
      };
      k.waiters.add(w);
      this.waiting++;
      signal?.addEventListener('abort', aborted, { once: true });
      clearTimeout(this.linger);
      this.linger = undefined;
      // A token the last check found pending waits for the consumer's next notification (or the
      // poll): no statement per new waiter while its consumer is quiet.
      if (!(cache?.pending != null && token >= cache.pending)) k.dirty = true;
      this.start();
      this.round();
    });
  }

  /** Rejects the waiters and gives the client back to the pool. */
  async close(reason: unknown) {
    for (const k of [...this.keys.values()]) for (const w of [...k.waiters]) w.settle({ error: reason });
    await this.release();
  }

  private gen(consumer: string) {
    return this.epoch + (this.gens.get(consumer) ?? 0);
  }

  /** Opens the LISTEN client unless it is up or on its way. */
  private start() {
    if (this.client || this.connecting || this.retry || this.waiting === 0) return;
    this.connecting = true;
    void this.open().finally(() => {
      this.connecting = false;
    });
  }

  private async open() {
    let client: ListenClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      return this.failed(e);
    }
    const onNotification = (msg: { channel: string; payload?: string }) => {
      if (msg.channel !== 'highwater_applied' || msg.payload === undefined) return;
      this.gens.set(msg.payload, (this.gens.get(msg.payload) ?? 0) + 1);
      this.mark((k) => k.consumer === msg.payload);
    };
    // node-postgres emits 'error' on a checked-out client whose connection breaks (e.g.
    // pg_terminate_backend): without a listener that would crash the process.
    const onError = (e: Error) => this.dropped(client, e);
    const onEnd = () => this.dropped(client, new Error('the LISTEN connection ended'));
    client.on('notification', onNotification as Listener);
    client.on('error', onError as Listener);
    client.on('end', onEnd);
    const detach = () => {
      client.removeListener('notification', onNotification as Listener);
      client.removeListener('error', onError as Listener);
      client.removeListener('end', onEnd);
    };
    try {
      await client.query('LISTEN highwater_applied');
    } catch (e) {
      detach();
      client.release(e as Error);
      return this.failed(e);
    }
    this.client = client;
    this.detach = detach;
    this.opened = Date.now();
    // Notifications sent before LISTEN are lost: whatever the hub knew is checked again.
    this.epoch++;
    this.mark(() => true);
    this.poll ??= setInterval(() => this.mark(() => true), POLL_MS).unref();
    if (this.waiting === 0) this.idle();
  }

  /** The pool could not give a client, or LISTEN failed: the waiters reject with the error (as a
   * wait that could not check a connection out did before). */
  private failed(e: unknown) {
    for (const k of [...this.keys.values()]) for (const w of [...k.waiters]) w.settle({ error: mapError(e) });
  }

  /** The LISTEN client broke: its notifications since are lost, so everything is checked again
   * on a new one; a round in flight on it fails and marks its keys. */
  private dropped(client: ListenClient, e: Error) {
    if (this.client !== client) return;
    this.detach?.();
    this.detach = undefined;
    this.client = undefined;
    client.release(e);
    for (const k of this.keys.values()) k.dirty = k.waiters.size > 0;
    this.epoch++;
    if (Date.now() - this.opened < 1000) {
      this.retry ??= setTimeout(() => {
        this.retry = undefined;
        this.start();
      }, RECONNECT_DELAY_MS).unref();
    } else {
      this.start();
    }
  }

  /** Marks the keys `which` selects for a check (those with waiters) and runs a round. */
  private mark(which: (k: Key) => boolean) {
    for (const k of this.keys.values()) if (k.waiters.size > 0 && which(k)) k.dirty = true;
    this.round();
  }

  /** One statement for every dirty key; notifications and waiters that arrive meanwhile are
   * gathered into the next. */
  private round() {
    if (this.checking) {
      this.again = true;
      return;
    }
    const client = this.client;
    if (!client) return;
    const batch: Batch[] = [];
    for (const k of this.keys.values()) {
      if (!k.dirty) continue;
      k.dirty = false;
      if (k.waiters.size === 0) continue;
      const waiters = [...k.waiters];
      const tokens = [...new Set(waiters.map((w) => w.token))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      batch.push({ key: k, gen: this.gen(k.consumer), tokens, waiters });
    }
    if (batch.length === 0) return;
    this.checking = true;
    this.again = false;
    void this.check(client, batch).finally(() => {
      this.checking = false;
      if (this.again) this.round();
      else if (this.waiting === 0) this.idle();
    });
  }

  private async check(client: ListenClient, batch: Batch[]) {
    try {
      this.settle(client, batch, await this.query(client, batch));
    } catch (e) {
      if (connectionLost(e)) return this.lost(client, batch, e);
      // A refusal (unknown consumer, instance of a Shared consumer, token ahead of the
      // database) stops the whole statement: each consumer is checked on its own, and the
      // waiters of one that is refused one by one, so that only the waiters concerned get the
      // error.
      for (const b of batch) {
        try {
          this.settle(client, [b], await this.query(client, [b]));
          continue;
        } catch (e) {
          if (connectionLost(e)) return this.lost(client, batch, e);
        }
        for (const w of b.waiters) {
          if (!b.key.waiters.has(w)) continue;
          try {
            const { rows } = await client.query(APPLIED, [b.key.consumer, String(w.token), b.key.instance]);
            if (rows[0]!.applied === true) w.settle({ result: { applied: true } });
          } catch (e) {
            if (connectionLost(e)) return this.lost(client, batch, e);
            w.settle({ error: mapError(e, undefined, b.key.consumer) });
          }
        }
      }
    }
  }

  private async query(client: ListenClient, batch: Batch[]) {
    const { rows } = await client.query(APPLIED_BATCH, [
      batch.map((b) => b.key.consumer),
      batch.map((b) => b.key.instance),
      batch.map((b) => `{${b.tokens.join(',')}}`),
    ]);
    return rows;
  }

  /** Releases the waiters whose token the check found applied, and caches its answer. */
  private settle(client: ListenClient, batch: Batch[], rows: Record<string, unknown>[]) {
    for (const row of rows) {
      const b = batch[Number(row.n) - 1]!;
      const applied = Number(row.applied);
      const last = applied > 0 ? b.tokens[applied - 1]! : null;
      const pending = applied < b.tokens.length ? b.tokens[applied]! : null;
      // Only when no notification came while the statement ran: otherwise it may be out of date.
      if (this.client === client && this.gen(b.key.consumer) === b.gen) {
        b.key.cache = { gen: b.gen, applied: last, pending };
      }
      if (last !== null) for (const w of b.waiters) if (w.token <= last) w.settle({ result: { applied: true } });
    }
  }

  /** The connection broke during a check (its 'error' event may come later): the batch is
   * checked again on a new one. */
  private lost(client: ListenClient, batch: Batch[], e: unknown) {
    for (const b of batch) b.key.dirty = true;
    this.dropped(client, e as Error);
  }

  /** No waiter left: the client goes back to the pool after LINGER_MS (at once when the pool is
   * ending, so that `pool.end()` is not held up). */
  private idle() {
    if (this.waiting > 0 || this.linger) return;
    if (this.pool.ending) {
      void this.release();
      return;
    }
    this.linger = setTimeout(() => {
      this.linger = undefined;
      if (this.waiting === 0) void this.release();
    }, LINGER_MS).unref();
  }

  private async release() {
    clearTimeout(this.linger);
    clearInterval(this.poll);
    clearTimeout(this.retry);
    this.linger = this.poll = this.retry = undefined;
    this.keys.clear();
    this.gens.clear();
    const client = this.client;
    if (!client || this.checking) return;
    this.detach?.();
    this.detach = undefined;
    this.client = undefined;
    try {
      await client.query('UNLISTEN highwater_applied');
      client.release();
    } catch (e) {
      client.release(e as Error);
    }
  }
}

const hubs = new WeakMap<PoolLike, WaitHub>();

function hubOf(pool: PoolLike): WaitHub {
  let hub = hubs.get(pool);
  if (!hub) {
    hub = new WaitHub(pool);
    hubs.set(pool, hub);
  }
  return hub;
}

/** Ends the shared waiting of `pool`'s waits now: pending waits reject (with `reason`, or an
 * `AbortError`) and the LISTEN client goes back to the pool. Needed only to give the client back
 * before its 100 ms linger after the last wait (e.g. before `pool.end()`, which would otherwise
 * wait for it). */
export async function closeWaits(pool: unknown, reason?: unknown): Promise<void> {
  if (!isPool(pool)) return;
  await hubs.get(pool)?.close(reason ?? new DOMException('waits of this pool were closed', 'AbortError'));
}

/** Waits until `consumer` applied everything `token` covers (for a SQL sink: committed in its
 * tables), or the timeout runs out. `db` must see committed data: a `pg.Pool` (best: its waits
 * share one client that LISTENs on `highwater_applied`, and one check per notification answers
 * all of them), a client not inside a transaction, or an ORM database object (polled with a short
 * backoff, 10 ms to 250 ms).
 * Raises `UnknownConsumer` (HW010) and `HighwaterError` (HW011 token ahead of the database,
 * HW012 bad argument); resolves `{ applied: false }` on timeout. */
export async function waitApplied(
  db: Executor,
  consumer: string,
  token: Token,
  options: WaitOptions = {},
): Promise<WaitResult> {
  const timeout = options.timeout ?? 5000;
  const signal = options.signal;
  signal?.throwIfAborted();
  // A malformed token, a zero timeout (one look) and a consumer that is no string go the
  // polled way: the server's own answer or refusal, as before, without touching shared waits.
  if (isPool(db) && isToken(token) && timeout > 0 && typeof consumer === 'string') {
    return hubOf(db).wait(consumer, BigInt(token), options.instance ?? null, timeout, signal);
  }
  return poll(db, consumer, token, timeout, options);
}

async function poll(db: Executor, consumer: string, token: Token, timeout: number, options: WaitOptions) {
  const deadline = Date.now() + timeout;
  const signal = options.signal;
  const values = [consumer, token, options.instance ?? null];
  const run = runner(db);
  let delay = FIRST_DELAY_MS;
  for (;;) {
    let applied: boolean;
    try {
      applied = (await run.run(APPLIED, values))[0]!.applied === true;
    } catch (e) {
      throw mapError(e, undefined, consumer);
    }
    if (applied) return { applied: true };
    const remaining = deadline - Date.now();
    if (remaining <= 0) return { applied: false };
    await new Promise<void>((resolve, reject) => {
      const aborted = () => {
        clearTimeout(timer);
        reject(abortError(signal!));
      };
      if (signal?.aborted) return reject(abortError(signal));
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', aborted);
        resolve();
      }, Math.min(delay, remaining));
      signal?.addEventListener('abort', aborted, { once: true });
    });
    delay = Math.min(delay * 2, MAX_DELAY_MS);
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
