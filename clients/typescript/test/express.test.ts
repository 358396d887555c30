// The Express middleware over real HTTP: a write's response carries Highwater-Token; a read that
// sends it back waits for the consumer (Highwater-Consistency: applied) or gives up after its
// timeout (Highwater-Consistency: stale).
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import knexFactory from 'knex';
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './prisma/generated/client.js';
import { CONSISTENCY_HEADER, TOKEN_HEADER, append, highwaterTokens, readYourWrites } from '@highwater/client';
import { AUTH_TOKEN, DATABASE_URL, type Dispatcher, newPool, startDispatcher, uid } from './harness.js';

const pool = newPool(6);
const knex = knexFactory({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 4 } });
const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: DATABASE_URL, max: 2 }) });
let dispatcher: Dispatcher;
let server: Server;
let base: string;
let handlerRuns = 0;

function app(d: Dispatcher) {
  const a = express();
  a.use(express.json());
  a.use(highwaterTokens());

  // A write: the application's row and its event in one Knex transaction.
  a.post('/orders', async (req, res) => {
    const id = uid('order');
    await knex.transaction(async (trx) => {
      await trx('app_orders').insert({ id, total: req.body.total, writer: 'express' });
      await append(trx, { streamType: 'order', streamId: id, type: 'OrderPlaced', payload: { order_id: id, total: req.body.total } });
    });
    res.status(201).json({ id });
  });

  // The same write in a Prisma interactive transaction: the token is recorded from inside it.
  a.post('/prisma/orders', async (req, res) => {
    const id = uid('order');
    await prisma.$transaction(async (tx) => {
      await tx.appOrder.create({ data: { id, total: String(req.body.total), writer: 'express-prisma' } });
      await append(tx, { streamType: 'order', streamId: id, type: 'OrderPlaced', payload: { order_id: id, total: req.body.total } });
    });
    res.status(201).json({ id });
  });

  // Two transactions in one request: the header carries the token that covers both.
  a.post('/orders/pair', async (_req, res) => {
    const ids = [uid('order'), uid('order')];
    for (const id of ids) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await append(client, { streamType: 'order', streamId: id, type: 'OrderPlaced', payload: { order_id: id, total: 1 } });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    }
    res.status(201).json({ ids });
  });

  const read = async (req: express.Request, res: express.Response) => {
    handlerRuns++;
    const { rows } = await pool.query('SELECT total::int AS total FROM order_totals WHERE order_id = $1', [req.params.id]);
    if (rows.length === 0) return void res.status(404).json({ id: req.params.id, found: false });
    res.json({ id: req.params.id, total: rows[0].total, consistency: res.locals.highwaterConsistency ?? null });
  };
  a.get('/orders/:id', readYourWrites({ consumer: 'order-projection', db: pool, timeout: 10_000 }), read);
  a.get(
    '/http/orders/:id',
    readYourWrites({ consumer: 'order-projection', http: { baseUrl: d.url, authToken: AUTH_TOKEN }, timeout: 10_000 }),
    read,
  );
  a.get('/stale/orders/:id', readYourWrites({ consumer: ['order-projection', 'stalled'], db: pool, timeout: 250 }), read);
  a.get('/broken/orders/:id', readYourWrites({ consumer: 'no-such-consumer', db: pool }), read);
  a.use((err: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(500).json({ error: err.name, message: err.message });
  });
  return a;
}

before(async () => {
  dispatcher = await startDispatcher('default');
  server = app(dispatcher).listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  await new Promise((r) => server.close(r));
  await dispatcher?.stop();
  await Promise.all([pool.end(), knex.destroy(), prisma.$disconnect()]);
});

async function placeOrder(total: number, path = '/orders') {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ total }),
  });
  assert.equal(res.status, 201);
  const { id } = (await res.json()) as { id: string };
  return { id, token: res.headers.get(TOKEN_HEADER) };
}

describe('highwaterTokens', () => {
  test('a write answers with the token of its transaction', async () => {
    const { id, token } = await placeOrder(5);
    assert.match(token ?? '', /^\d+$/);
    const { rows } = await pool.query('SELECT tx_id::text FROM highwater.events WHERE stream_id = $1', [id]);
    assert.equal(rows.length, 1);
    assert.equal(token, rows[0].tx_id);
  });

  test('a write in a Prisma interactive transaction answers with its token', async () => {
    const { id, token } = await placeOrder(6, '/prisma/orders');
    assert.match(token ?? '', /^\d+$/);
    const { rows } = await pool.query('SELECT tx_id::text FROM highwater.events WHERE stream_id = $1', [id]);
    assert.equal(rows.length, 1);
    assert.equal(token, rows[0].tx_id);
  });

  test('two writing transactions: the token covering both', async () => {
    const res = await fetch(`${base}/orders/pair`, { method: 'POST' });
    assert.equal(res.status, 201);
    const { ids } = (await res.json()) as { ids: string[] };
    const { rows } = await pool.query('SELECT max(tx_id::text::numeric)::text AS t FROM highwater.events WHERE stream_id = ANY($1)', [ids]);
    assert.equal(res.headers.get(TOKEN_HEADER), rows[0].t);
  });

  test('a request that writes nothing carries no token', async () => {
    const res = await fetch(`${base}/orders/none`);
    assert.equal(res.status, 404);
    assert.equal(res.headers.get(TOKEN_HEADER), null);
  });
});

describe('readYourWrites', () => {
  test('a read sending the token back sees the write (SQL wait)', async () => {
    for (let i = 0; i < 5; i++) {
      const { id, token } = await placeOrder(10 + i);
      const res = await fetch(`${base}/orders/${id}`, { headers: { [TOKEN_HEADER]: token! } });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get(CONSISTENCY_HEADER), 'applied');
      assert.deepEqual(await res.json(), { id, total: 10 + i, consistency: 'applied' });
      assert.match(res.headers.get('vary') ?? '', /Highwater-Token/);
    }
  });

  test('a read sending the token back sees the write (dispatcher HTTP wait)', async () => {
    const { id, token } = await placeOrder(21);
    const res = await fetch(`${base}/http/orders/${id}`, { headers: { [TOKEN_HEADER]: token! } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get(CONSISTENCY_HEADER), 'applied');
    assert.deepEqual(await res.json(), { id, total: 21, consistency: 'applied' });
  });

  test('without the header the handler runs at once and says nothing about consistency', async () => {
    const res = await fetch(`${base}/stale/orders/${uid('order')}`);
    assert.equal(res.status, 404);
    assert.equal(res.headers.get(CONSISTENCY_HEADER), null);
  });

  test('a timeout answers with what the handler has, marked stale', async () => {
    const { id, token } = await placeOrder(3);
    const started = Date.now();
    const res = await fetch(`${base}/stale/orders/${id}`, { headers: { [TOKEN_HEADER]: token! } });
    const took = Date.now() - started;
    assert.equal(res.headers.get(CONSISTENCY_HEADER), 'stale');
    assert.ok(took >= 250, `answered after ${took} ms, before the guard's timeout`);
    const body = (await res.json()) as { consistency?: string };
    // The handler ran: 200 with the row if order-projection was fast, or 404 without it.
    assert.ok(res.status === 200 || res.status === 404);
    if (res.status === 200) assert.equal(body.consistency, 'stale');
  });

  test('a malformed token is answered 400 without running the handler', async () => {
    const before = handlerRuns;
    const res = await fetch(`${base}/orders/x`, { headers: { [TOKEN_HEADER]: 'not-a-token' } });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { error: string }).error, /Highwater-Token/);
    assert.equal(handlerRuns, before);
  });

  test('a refused wait goes to the error handler', async () => {
    const { id, token } = await placeOrder(1);
    const res = await fetch(`${base}/broken/orders/${id}`, { headers: { [TOKEN_HEADER]: token! } });
    assert.equal(res.status, 500);
    assert.equal(((await res.json()) as { error: string }).error, 'UnknownConsumer');
  });
});
