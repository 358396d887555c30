// Read-your-writes through the running application: orders posted, then their summary (the read
// model the order-summary consumer builds after commit) read at once, with and without the
// token of the write; and with the projection held back, the bounded wait answering stale.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  APPS,
  ORDERS,
  SUMMARY_WAIT_MS,
  customer,
  fmt,
  newPool,
  percentile,
  placeOrder,
  readSummary,
  request,
  sleep,
} from './helpers.mjs';

let pool;
before(() => {
  pool = newPool();
});
after(() => pool.end());

/** Posts one order of `quantity` × 1,000 cents and checks the answer of the write. */
async function place(base, customerId, quantity) {
  const res = await placeOrder(base, customerId, { quantity });
  assert.equal(res.status, 201, res.text);
  const token = res.headers.get('highwater-token');
  assert.match(token ?? '', /^[0-9]{1,20}$/, 'POST /orders answers with the Highwater-Token of its write');
  assert.equal(res.json.customer_id, customerId);
  assert.equal(res.json.total_cents, quantity * 1000);
  return { id: res.json.id, token, quantity };
}

for (const [mode, base] of Object.entries(APPS)) {
  test(`with the token (waits ${mode === 'sql' ? 'over SQL' : 'through the dispatcher'}): ${ORDERS} orders read back at once, 0 stale`, async (t) => {
    const c = customer(`rw-${mode}`);
    let stale = 0;
    const readMs = [];
    for (let i = 0; i < ORDERS; i++) {
      const o = await place(base, c, 1 + (i % 5));
      const r = await readSummary(base, o.id, o.token);
      readMs.push(r.ms);
      if (r.status !== 200 || r.json.consistency !== 'applied') {
        stale++;
        continue;
      }
      assert.equal(r.headers.get('highwater-consistency'), 'applied');
      assert.match(r.headers.get('vary') ?? '', /highwater-token/i);
      assert.equal(r.json.order_id, o.id);
      assert.equal(r.json.customer_id, c);
      assert.equal(r.json.item_count, o.quantity);
      assert.equal(r.json.total_cents, o.quantity * 1000);
    }
    t.diagnostic(
      `with the token (${mode}): ${stale} of ${ORDERS} reads stale; read with wait p50 ${fmt(percentile(readMs, 50))}, ` +
        `p99 ${fmt(percentile(readMs, 99))}, max ${fmt(Math.max(...readMs))}`,
    );
    assert.equal(stale, 0, 'a read carrying the token never misses the write');
  });
}

test(`without the token: ${ORDERS} orders read back at once, the stale reads counted`, async (t) => {
  const base = APPS.sql;
  const c = customer('eventual');
  const placed = [];
  let stale = 0;
  for (let i = 0; i < ORDERS; i++) {
    const o = await place(base, c, 1);
    placed.push(o);
    const r = await readSummary(base, o.id);
    // No token, no wait: the guard stays out (no Highwater-Consistency) and the answer is
    // whatever the read model holds at that moment.
    assert.equal(r.headers.get('highwater-consistency'), null);
    assert.equal(r.json.consistency, 'eventual', r.text);
    if (r.status === 404) stale++;
    else assert.equal(r.status, 200, r.text);
  }
  // Every summary arrives in the end; the projection's lag is in the read model itself:
  // applied_at (the sink's clock) minus placed_at (the event's created_at, taken in the write).
  const deadline = Date.now() + 30_000;
  let lag;
  for (;;) {
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n,
              extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY applied_at - placed_at)) * 1000 AS p50,
              extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY applied_at - placed_at)) * 1000 AS p99,
              extract(epoch FROM max(applied_at - placed_at)) * 1000 AS max
         FROM order_summary WHERE customer_id = $1`,
      [c],
    );
    lag = rows[0];
    if (lag.n === ORDERS) break;
    assert.ok(Date.now() < deadline, `only ${lag.n} of ${ORDERS} summaries projected after 30 s`);
    await sleep(50);
  }
  t.diagnostic(
    `without the token: ${stale} of ${ORDERS} reads stale (${((100 * stale) / ORDERS).toFixed(1)} %); projection lag ` +
      `(event written to summary applied) p50 ${fmt(Number(lag.p50))}, p99 ${fmt(Number(lag.p99))}, max ${fmt(Number(lag.max))}`,
  );
  assert.ok(stale >= 0 && stale <= ORDERS);
});

describe('the projection held back (its table locked against writes, reads still allowed)', () => {
  for (const [mode, base] of Object.entries(APPS)) {
    test(`${mode}: without the token every read is stale at once; with it the wait ends stale after the bounded timeout, then applied once released`, async (t) => {
      const lock = await pool.connect();
      const c = customer(`held-${mode}`);
      const placed = [];
      try {
        await lock.query('BEGIN');
        // EXCLUSIVE blocks the sink's INSERT, not the application's SELECT.
        await lock.query('LOCK TABLE order_summary IN EXCLUSIVE MODE');
        for (let i = 0; i < 3; i++) placed.push(await place(base, c, 2));

        let stale = 0;
        for (const o of placed) {
          const r = await readSummary(base, o.id);
          assert.equal(r.json.consistency, 'eventual');
          if (r.status === 404) stale++;
          // the write model has it all along
          const w = await request(base, 'GET', `/orders/${o.id}`);
          assert.equal(w.status, 200, w.text);
          assert.equal(w.json.id, o.id);
        }
        t.diagnostic(`held back (${mode}): ${stale} of ${placed.length} reads without the token stale`);
        assert.equal(stale, placed.length, 'nothing can be projected while the table is locked');

        const o = placed.at(-1);
        const r = await readSummary(base, o.id, o.token);
        assert.equal(r.status, 404, r.text);
        assert.equal(r.headers.get('highwater-consistency'), 'stale');
        assert.equal(r.json.consistency, 'stale');
        assert.ok(r.ms >= SUMMARY_WAIT_MS - 50, `answered after ${fmt(r.ms)}: it should have waited ${SUMMARY_WAIT_MS} ms`);
        assert.ok(r.ms < SUMMARY_WAIT_MS + 3000, `answered after ${fmt(r.ms)}: the wait is bounded by ${SUMMARY_WAIT_MS} ms`);
        t.diagnostic(`held back (${mode}): with the token answered stale after ${fmt(r.ms)} (bound ${SUMMARY_WAIT_MS} ms)`);
      } finally {
        await lock.query('ROLLBACK');
        lock.release();
      }
      for (const o of placed) {
        const r = await readSummary(base, o.id, o.token);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.consistency, 'applied');
        assert.equal(r.headers.get('highwater-consistency'), 'applied');
        assert.equal(r.json.item_count, 2);
      }
    });
  }
});

test('a malformed token is refused with 400, before any read', async () => {
  const o = await place(APPS.sql, customer('bad-token'), 1);
  const r = await readSummary(APPS.sql, o.id, 'not-a-token');
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /Highwater-Token/);
});
