// Everything the application reads from its environment, checked once at start.

export interface Config {
  databaseUrl: string;
  host: string;
  port: number;
  /** The consumer whose read model GET /orders/:id/summary reads. */
  summaryConsumer: string;
  /** How long GET /orders/:id/summary waits for a token before answering stale. */
  summaryWaitMs: number;
  /** Waits through the dispatcher (GET /v1/consumers/…/applied) instead of the database. */
  dispatcher?: { baseUrl: string; authToken: string };
  /** Connections of the pool the SQL waits use (each waiting request holds one). */
  waitPoolMax: number;
  /** A customer's placed orders may not add up to more than this (cents). */
  creditLimitCents: number;
}

function int(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return n;
}

export function loadConfig(): Config {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is not set (postgres://USER:PASSWORD@HOST:PORT/DATABASE)');
  const dispatcherUrl = process.env.HIGHWATER_DISPATCHER_URL;
  const authToken = process.env.HIGHWATER_TOKEN;
  if (dispatcherUrl && !authToken) {
    throw new Error('HIGHWATER_DISPATCHER_URL is set but HIGHWATER_TOKEN is not (one of the dispatcher\'s SSE tokens)');
  }
  return {
    databaseUrl,
    host: process.env.HOST ?? '127.0.0.1',
    port: int('PORT', 3000),
    summaryConsumer: process.env.SUMMARY_CONSUMER ?? 'order-summary',
    summaryWaitMs: int('SUMMARY_WAIT_MS', 2000),
    ...(dispatcherUrl ? { dispatcher: { baseUrl: dispatcherUrl, authToken: authToken! } } : {}),
    waitPoolMax: int('WAIT_POOL_MAX', 10),
    creditLimitCents: int('CREDIT_LIMIT_CENTS', 1_000_000),
  };
}

/** The Nest injection token of the Config. */
export const CONFIG = Symbol('Config');
