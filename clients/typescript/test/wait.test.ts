// token + waitApplied (SQL) and waitAppliedHttp against real dispatchers delivering to a SQL
// sink: after the wait returns, the read model holds the write.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  HighwaterError,
  UnknownConsumer,
  append,
  closeWaits,
  token,
  waitApplied,
  waitAppliedHttp,
  type Executor,
} from '@highwater/client';
import knexFactory from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './prisma/generated/client.js';
import { AUTH_TOKEN, DATABASE_URL, type Dispatcher, newPool, sleep, startDispatcher, uid } from './harness.js';

const pool = newPool(6);
const knex = knexFactory({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
const kysely = new Kysely<object>({ dialect: new PostgresDialect({ pool: newPool(2) }) });
const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: DATABASE_URL, max: 2 }) });
let dispatcher: Dispatcher;

before(async () => {
  dispatcher = await startDispatcher('default');
});

after(async () => {
  await dispatcher?.stop();
  await Promise.all([pool.end(), knex.destroy(), kysely.destroy(), prisma.$disconnect()]);
});

/** Commits one OrderPlaced for a new order and returns the order id, event id and token. */
async function placeOrder(total: number) {
  const orderId = uid('order');
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const eventId = await append(client, {
      streamType: 'order',
      streamId: orderId,
      type: 'OrderPlaced',
      payload: { order_id: orderId, total },
    });
    const t = await token(client);
    await client.query('COMMIT');
    return { orderId, eventId, token: t };
  } catch (e) {
    await client.query('ROLLBACK');
    throw e;
  } finally {
    client.release();
  }
}

async function projected(table: 'order_totals' | 'late_totals', orderId: string) {
  const { rows } = await pool.query(`SELECT total::int AS total FROM ${table} WHERE order_id = $1`, [orderId]);
  return rows[0]?.total as number | undefined;
}

describe('waitApplied over SQL', () => {
  const dbs: [string, () => Executor][] = [
    ['pg.Pool (LISTEN highwater_applied)', () => pool],
    ['Knex instance (polled)', () => knex],
    ['Kysely instance (polled)', () => kysely],
    ['PrismaClient, @prisma/adapter-pg (polled)', () => prisma],
  ];
  for (const [name, db] of dbs) {
    test(`returns applied once the projection holds the write: ${name}`, async () => {
      // Several rounds: a wait that returned early would sooner or later find no row.
      for (let i = 0; i < 5; i++) {
        const order = await placeOrder(100 + i);
        const r = await waitApplied(db(), 'order-projection', order.token, { timeout: 10_000 });
        assert.deepEqual(r, { applied: true });
        assert.equal(await projected('order_totals', order.orderId), 100 + i);
      }
    });
  }

  test('holds until a dispatcher started later has applied the write', async () => {
    const order = await placeOrder(7);
    const started = Date.now();
    let settled = false;
    const waiting = waitApplied(pool, 'late-projection', order.token, { timeout: 30_000 }).finally(() => {
      settled = true;
    });
    await sleep(500);
    assert.equal(settled, false, 'no dispatcher runs the group `late` yet: the wait must hold');
    assert.equal(await projected('late_totals', order.orderId), undefined);
    const late = await startDispatcher('late');
    try {
      assert.deepEqual(await waiting, { applied: true });
      assert.ok(Date.now() - started >= 500);
      assert.equal(await projected('late_totals', order.orderId), 7);
    } finally {
      await late.stop();
    }
  });

  for (const [name, db] of dbs.slice(0, 2)) {
    test(`times out for a consumer no dispatcher runs: ${name}`, async () => {
      const order = await placeOrder(1);
      const started = Date.now();
      const r = await waitApplied(db(), 'stalled', order.token, { timeout: 300 });
      const took = Date.now() - started;
      assert.deepEqual(r, { applied: false });
      assert.ok(took >= 300, `returned after ${took} ms, before its timeout`);
      assert.ok(took < 3000, `returned after ${took} ms`);
    });
  }

  test('an abort signal stops the wait', async () => {
    const order = await placeOrder(1);
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('client went away')), 100);
    await assert.rejects(waitApplied(pool, 'stalled', order.token, { timeout: 10_000, signal: ac.signal }), /client went away/);
  });

  test('an unknown consumer raises UnknownConsumer (HW010)', async () => {
    const order = await placeOrder(1);
    await assert.rejects(waitApplied(pool, 'no-such-consumer', order.token, { timeout: 1000 }), (e) => {
      assert.ok(e instanceof UnknownConsumer, `got ${String(e)}`);
      assert.equal(e.code, 'HW010');
      assert.equal(e.consumer, 'no-such-consumer');
      return true;
    });
  });

  test('a token ahead of the database raises HighwaterError HW011', async () => {
    await assert.rejects(waitApplied(knex, 'order-projection', '999999999999', { timeout: 1000 }), (e) => {
      assert.ok(e instanceof HighwaterError, `got ${String(e)}`);
      assert.equal(e.code, 'HW011');
      assert.match(e.message, /ahead of this database/);
      return true;
    });
  });

  test('the pool gets its client back, not listening any more, once the last wait is over', async () => {
    // One client only: the one the waits LISTENed on is the one the pool hands out afterwards.
    const one = newPool(1);
    try {
      const order = await placeOrder(3);
      await waitApplied(one, 'order-projection', order.token, { timeout: 10_000 });
      await waitApplied(one, 'stalled', order.token, { timeout: 50 });
      // The hub keeps its client 100 ms after the last wait (waits that follow share it).
      await sleep(300);
      assert.equal(one.totalCount, 1);
      assert.equal(one.idleCount, 1, 'the LISTEN client is back in the pool');
      const client = await one.connect();
      try {
        const { rows } = await client.query('SELECT count(*)::int AS n FROM pg_listening_channels()');
        assert.equal(rows[0].n, 0);
      } finally {
        client.release();
      }
    } finally {
      await one.end();
    }
  });
});

describe('waitApplied on a pg.Pool: concurrent waits share one LISTEN connection', () => {
  /** A pool whose connections pg_stat_activity names, counting the wait's check statements. */
  function countedPool(max: number) {
    const name = uid('hw-wait-test');
    const p = newPool(max, name);
    const counts = { checks: 0 };
    p.on('connect', (client) => {
      const query = client.query.bind(client) as (...a: unknown[]) => unknown;
      (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
        const text = a[0] as { text?: string } | string;
        if (String((text as { text?: string })?.text ?? text).includes('highwater.applied')) counts.checks++;
        return query(...a);
      };
    });
    const backends = async () =>
      (
        await pool.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid', [name])
      ).rows.map((r) => r.pid as number);
    return { pool: p, counts, backends };
  }

  /** Starts a wait for each order and records, the moment each resolves, whether the
   * projection already holds its write (read right then, on another connection). */
  function waitAll(db: Executor, orders: { orderId: string; token: string }[], timeout: number) {
    const settled: string[] = [];
    const all = Promise.all(
      orders.map(async (o) => {
        const r = await waitApplied(db, 'late-projection', o.token, { timeout });
        settled.push(o.orderId);
        return { ...o, r, total: r.applied ? await projected('late_totals', o.orderId) : undefined };
      }),
    );
    return { settled, all };
  }

  test('many waits: one connection, a few checks, none released before its write is applied', async () => {
    const { pool: p, counts, backends } = countedPool(10);
    try {
      const orders = await Promise.all(Array.from({ length: 30 }, (_, i) => placeOrder(1000 + i)));
      const { settled, all } = waitAll(p, orders, 30_000);
      // A refusal for one consumer rejects only its waiter, not the others sharing the check.
      const unknown = assert.rejects(
        waitApplied(p, 'no-such-consumer', orders[0]!.token, { timeout: 10_000 }),
        (e) => e instanceof UnknownConsumer && e.code === 'HW010',
      );
      await sleep(600);
      assert.equal(p.totalCount, 1, 'the pool opened one connection for 31 waits');
      assert.equal((await backends()).length, 1, 'one connection in pg_stat_activity');
      await unknown;
      assert.deepEqual(settled, [], 'no dispatcher runs the group `late`: no wait may return yet');
      const late = await startDispatcher('late');
      try {
        for (const [i, o] of (await all).entries()) {
          assert.deepEqual(o.r, { applied: true });
          assert.equal(o.total, 1000 + i, `${o.orderId}: projected when its wait returned`);
        }
      } finally {
        await late.stop();
      }
      assert.equal(p.totalCount, 1);
      // One per wake-up for all the waiters (the first, the polls every 250 ms, the
      // notifications), where one check per waiter and notification would be 30 at least.
      assert.ok(counts.checks < 20, `${counts.checks} checks for 30 waits`);
    } finally {
      await p.end();
    }
  });

  test('a waiter times out at its own timeout while the others go on', async () => {
    const { pool: p, backends } = countedPool(4);
    try {
      const order = await placeOrder(5);
      const started = Date.now();
      const stalled = waitApplied(p, 'stalled', order.token, { timeout: 300 }).then((r) => ({
        r,
        took: Date.now() - started,
      }));
      const applied = waitApplied(p, 'order-projection', order.token, { timeout: 10_000 });
      const long = waitApplied(p, 'stalled', order.token, { timeout: 1_500 });
      assert.deepEqual(await applied, { applied: true });
      const s = await stalled;
      assert.deepEqual(s.r, { applied: false });
      assert.ok(s.took >= 300 && s.took < 1_500, `timed out after ${s.took} ms`);
      assert.equal((await backends()).length, 1);
      assert.deepEqual(await long, { applied: false });
      // The last waiter gone, the connection goes back to the pool after its short linger.
      await sleep(300);
      assert.equal(p.idleCount, p.totalCount);
    } finally {
      await p.end();
    }
  });

  test('a dropped LISTEN connection (pg_terminate_backend) loses no waiter', async () => {
    const { pool: p, backends } = countedPool(4);
    try {
      const orders = await Promise.all(Array.from({ length: 10 }, (_, i) => placeOrder(2000 + i)));
      const { settled, all } = waitAll(p, orders, 30_000);
      await sleep(300);
      const [pid] = await backends();
      assert.ok(pid, 'the LISTEN connection is up');
      await pool.query('SELECT pg_terminate_backend($1)', [pid]);
      // Re-opened: a new backend listens in its place, the waiters still wait.
      await sleep(300);
      const now = await backends();
      assert.equal(now.length, 1);
      assert.notEqual(now[0], pid);
      assert.deepEqual(settled, []);
      const late = await startDispatcher('late');
      try {
        for (const [i, o] of (await all).entries()) {
          assert.deepEqual(o.r, { applied: true });
          assert.equal(o.total, 2000 + i, `${o.orderId}: projected when its wait returned`);
        }
      } finally {
        await late.stop();
      }
    } finally {
      await p.end();
    }
  });

  test('closeWaits rejects the pending waits and gives the connection back', async () => {
    const { pool: p } = countedPool(2);
    try {
      const order = await placeOrder(1);
      const w = waitApplied(p, 'stalled', order.token, { timeout: 10_000 });
      const rejected = assert.rejects(w, /shutting down/);
      await sleep(100);
      await closeWaits(p, new Error('shutting down'));
      await rejected;
      await sleep(50);
      assert.equal(p.idleCount, p.totalCount);
    } finally {
      await p.end();
    }
  });
});

describe('waitAppliedHttp (dispatcher GET /v1/consumers/NAME/applied)', () => {
  test('200: applied, and the projection holds the write', async () => {
    for (let i = 0; i < 3; i++) {
      const order = await placeOrder(200 + i);
      const r = await waitAppliedHttp(dispatcher.url, 'order-projection', order.token, {
        timeout: 10_000,
        authToken: AUTH_TOKEN,
      });
      assert.deepEqual(r, { applied: true });
      assert.equal(await projected('order_totals', order.orderId), 200 + i);
    }
  });

  test('408: not applied within the timeout, with the pending shards', async () => {
    const order = await placeOrder(1);
    const started = Date.now();
    const r = await waitAppliedHttp(dispatcher.url, 'stalled', order.token, { timeout: 300, authToken: AUTH_TOKEN });
    assert.equal(r.applied, false);
    // The dispatcher names the shard holding the wait, e.g. "__shared__: idle at 0/0".
    assert.match(String(r.pending), /__shared__/);
    assert.ok(Date.now() - started >= 300);
  });

  test('401: a wrong bearer token', async () => {
    const order = await placeOrder(1);
    await assert.rejects(
      waitAppliedHttp(dispatcher.url, 'order-projection', order.token, { authToken: 'wrong' }),
      (e) => e instanceof HighwaterError && e.status === 401 && /bearer token/.test(e.message),
    );
  });

  test('404: an unknown consumer raises UnknownConsumer', async () => {
    const order = await placeOrder(1);
    await assert.rejects(
      waitAppliedHttp(dispatcher.url, 'no-such-consumer', order.token, { authToken: AUTH_TOKEN }),
      (e) => e instanceof UnknownConsumer && e.status === 404 && e.consumer === 'no-such-consumer',
    );
  });

  test('400: a malformed token', async () => {
    await assert.rejects(
      waitAppliedHttp(dispatcher.url, 'order-projection', 'abc', { authToken: AUTH_TOKEN }),
      (e) => e instanceof HighwaterError && e.status === 400 && /not a highwater token/.test(e.message),
    );
  });
});
