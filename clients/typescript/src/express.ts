// Express (or any connect-style) middleware for read-your-writes over HTTP:
// - highwaterTokens(): the response of a request that wrote carries `Highwater-Token`;
// - readYourWrites(): a request that carries `Highwater-Token` waits until the consumer applied
//   it before the handler reads, and says how that went in `Highwater-Consistency`.
// Typed structurally, so the package needs neither express nor @types/express at run time.
import { tokenSink } from './context.js';
import { type Token, isToken } from './events.js';
import type { Executor } from './executor.js';
import { type WaitResult, waitApplied, waitAppliedHttp } from './wait.js';

export const TOKEN_HEADER = 'Highwater-Token';
export const CONSISTENCY_HEADER = 'Highwater-Consistency';

export interface RequestLike {
  headers: Record<string, string | string[] | undefined>;
}

export interface ResponseLike {
  headersSent: boolean;
  statusCode: number;
  locals?: Record<string, unknown>;
  getHeader(name: string): number | string | string[] | undefined;
  setHeader(name: string, value: number | string | readonly string[]): unknown;
  end(chunk?: unknown): unknown;
  once?(event: 'close', listener: () => void): unknown;
}

export type NextFunction = (err?: unknown) => void;
export type Middleware = (req: RequestLike, res: ResponseLike, next: NextFunction) => void | Promise<void>;

/** Puts `token` into the response's token header, unless a larger one is there already (the
 * larger token covers the smaller). Call it before the response is sent; later calls are ignored. */
export function recordToken(res: ResponseLike, token: Token, header: string = TOKEN_HEADER): void {
  if (!isToken(token)) throw new TypeError(`@highwater/client: ${JSON.stringify(token)} is not a token`);
  const current = res.getHeader(header);
  if (typeof current === 'string' && isToken(current) && BigInt(current) >= BigInt(token)) return;
  if (res.headersSent) return;
  res.setHeader(header, token);
  if (res.locals) res.locals.highwaterToken = token;
}

export interface TokenOptions {
  /** The response header (default `Highwater-Token`). */
  header?: string;
}

/** Middleware: every `append`, `appendPosition` and `token` call made while the request is
 * handled (in its async context) records its token, and the response carries the largest one in
 * `Highwater-Token` (also `res.locals.highwaterToken`). Writes made with other SQL: call
 * `recordToken(res, await token(tx))` after the last one. */
export function highwaterTokens(options: TokenOptions = {}): Middleware {
  const header = options.header ?? TOKEN_HEADER;
  return (_req, res, next) => {
    tokenSink.run((t) => recordToken(res, t, header), () => next());
  };
}

export interface ReadYourWritesOptions {
  /** The consumer (or consumers, all waited for) whose read model the handler reads. */
  consumer: string | readonly string[];
  /** Wait over SQL on this database (a `pg.Pool` is best: it LISTENs). */
  db?: Executor;
  /** Or wait through the dispatcher's HTTP endpoint. */
  http?: { baseUrl: string | URL; authToken: string; fetch?: typeof fetch };
  /** How long a request may wait, in milliseconds (default 2000). */
  timeout?: number;
  /** A PerInstance consumer's instance. */
  instance?: string;
  /** The request header carrying the token (default `Highwater-Token`). */
  header?: string;
  /** The response header telling how the wait went (default `Highwater-Consistency`). */
  consistencyHeader?: string;
}

export type Consistency = 'applied' | 'stale';

function vary(res: ResponseLike, header: string): void {
  const current = res.getHeader('Vary');
  const list = (Array.isArray(current) ? current.join(',') : String(current ?? ''))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (list.includes('*') || list.some((h) => h.toLowerCase() === header.toLowerCase())) return;
  res.setHeader('Vary', [...list, header].join(', '));
}

/** Middleware (a guard) for handlers that read a read model. Without the token header it does
 * nothing. With it (one token, or several separated by commas: the largest counts) it waits until
 * every named consumer applied the token, then calls the handler with `Highwater-Consistency:
 * applied`; if the timeout runs out first it calls the handler anyway with `Highwater-Consistency:
 * stale` (the handler answers with what it has; `res.locals.highwaterConsistency` tells it too).
 * A malformed token is answered 400; a refusal of the wait (unknown consumer, token of another
 * database, database down) goes to Express' error handling (`next(err)`). */
export function readYourWrites(options: ReadYourWritesOptions): Middleware {
  const header = (options.header ?? TOKEN_HEADER).toLowerCase();
  const consistencyHeader = options.consistencyHeader ?? CONSISTENCY_HEADER;
  const consumers = typeof options.consumer === 'string' ? [options.consumer] : [...options.consumer];
  const timeout = options.timeout ?? 2000;
  if (consumers.length === 0) throw new TypeError('@highwater/client: readYourWrites needs a consumer');
  if (!options.db === !options.http) throw new TypeError('@highwater/client: readYourWrites needs exactly one of db and http');

  return async (req, res, next) => {
    vary(res, options.header ?? TOKEN_HEADER);
    const raw = req.headers[header];
    if (raw === undefined || raw === '') return next();
    const given = (Array.isArray(raw) ? raw.join(',') : raw).split(',').map((s) => s.trim());
    if (!given.every(isToken)) {
      res.statusCode = 400;
      res.setHeader('Content-Type', 'application/json; charset=utf-8');
      res.end(
        JSON.stringify({
          error: `the ${options.header ?? TOKEN_HEADER} header must be a highwater token (decimal digits), as a response's ${TOKEN_HEADER} header gave it`,
        }),
      );
      return;
    }
    const token = given.reduce((a, b) => (BigInt(a) >= BigInt(b) ? a : b));

    // A client that goes away stops the wait.
    const gone = new AbortController();
    res.once?.('close', () => gone.abort());
    let results: WaitResult[];
    try {
      results = await Promise.all(
        consumers.map((consumer) =>
          options.db
            ? waitApplied(options.db, consumer, token, { timeout, instance: options.instance, signal: gone.signal })
            : waitAppliedHttp(options.http!.baseUrl, consumer, token, {
                timeout,
                instance: options.instance,
                authToken: options.http!.authToken,
                signal: gone.signal,
                ...(options.http!.fetch ? { fetch: options.http!.fetch } : {}),
              }),
        ),
      );
    } catch (e) {
      if (gone.signal.aborted) return;
      return next(e);
    }
    const consistency: Consistency = results.every((r) => r.applied) ? 'applied' : 'stale';
    res.setHeader(consistencyHeader, consistency);
    if (res.locals) res.locals.highwaterConsistency = consistency;
    next();
  };
}
