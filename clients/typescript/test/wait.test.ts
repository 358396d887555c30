// token + waitApplied (SQL) and waitAppliedHttp against real dispatchers delivering to a SQL
// sink: after the wait returns, the read model holds the write.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  HighwaterError,
  UnknownConsumer,
  append,
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

  test('the pool gets its client back, not listening any more', async () => {
    const order = await placeOrder(3);
    await waitApplied(pool, 'order-projection', order.token, { timeout: 10_000 });
    await waitApplied(pool, 'stalled', order.token, { timeout: 50 });
    const client = await pool.connect();
    try {
      const { rows } = await client.query('SELECT count(*)::int AS n FROM pg_listening_channels()');
      assert.equal(rows[0].n, 0);
    } finally {
      client.release();
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
