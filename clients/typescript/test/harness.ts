// Shared by the tests: the database test.sh prepared (DATABASE_URL), real dispatchers started
// from $HIGHWATER_BIN, and small helpers. No mocks: everything talks to real processes.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';

export const DATABASE_URL = required('DATABASE_URL');
export const HIGHWATER_BIN = required('HIGHWATER_BIN');
/** test.sh's temporary directory: pid files of the dispatchers, which it kills if a test dies. */
const TMP = required('HW_TEST_TMP');

function required(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the tests with clients/typescript/test.sh`);
  return v;
}

/** A pool; `applicationName` tells its connections apart in pg_stat_activity. */
export function newPool(max = 4, applicationName?: string): pg.Pool {
  return new pg.Pool({
    connectionString: DATABASE_URL,
    max,
    ...(applicationName ? { application_name: applicationName } : {}),
  });
}

/** A fresh id, so that tests running side by side never share a stream. */
export function uid(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The bearer token every dispatcher started here accepts on its HTTP endpoints. */
export const AUTH_TOKEN = 'test-token-' + randomUUID();

export interface Dispatcher {
  url: string;
  stop(): Promise<void>;
}

/** Starts `highwater dispatch --group GROUP` and waits until /readyz answers 200. */
export async function startDispatcher(group: string): Promise<Dispatcher> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    HIGHWATER_BIN,
    ['dispatch', '--group', group, '--listen', `127.0.0.1:${port}`, '--shutdown-grace', '1s', '--metrics-interval', '1s'],
    {
      env: { ...process.env, DATABASE_URL, HIGHWATER_SSE_TOKENS: AUTH_TOKEN, HIGHWATER_INSTANCE_ID: uid(group) },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let log = '';
  child.stderr!.on('data', (d: Buffer) => {
    log = (log + d.toString()).slice(-4000);
  });
  const pidDir = join(TMP, 'pids');
  mkdirSync(pidDir, { recursive: true });
  const pidFile = join(pidDir, String(child.pid));
  writeFileSync(pidFile, '');
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(killer);
    }
    rmSync(pidFile, { force: true });
  };

  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`dispatcher exited with ${child.exitCode}:\n${log}`);
    try {
      const r = await fetch(`${url}/readyz`);
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`dispatcher not ready after 20 s:\n${log}`);
    }
    await sleep(50);
  }
  return { url, stop };
}

/** Waits until `probe` returns true (polls every 20 ms), or fails after `ms`. */
export async function eventually(probe: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await sleep(20);
  }
}
