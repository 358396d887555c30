// A write that fails after its append stores neither the order nor the event: the credit check
// runs inside the transaction, after highwater.append, and its refusal rolls both back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { APPS, CREDIT_LIMIT_CENTS, customer, newPool, placeOrder, request } from './helpers.mjs';

let pool;
before(() => {
  pool = newPool();
});
after(() => pool.end());

/** How many event ids were ever handed out: an append that rolls back still uses one up. */
async function eventIdsUsed() {
  const { rows } = await pool.query(
    `SELECT pg_sequence_last_value(pg_get_serial_sequence('highwater.events', 'id')::regclass)::text AS v`,
  );
  return BigInt(rows[0].v ?? 0);
}

async function stored(customerId) {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM orders WHERE customer_id = $1) AS orders,
            (SELECT count(*)::int FROM highwater.events WHERE payload->>'customer_id' = $1) AS events,
            (SELECT array_agg(stream_id ORDER BY id) FROM highwater.events WHERE payload->>'customer_id' = $1) AS streams`,
    [customerId],
  );
  return rows[0];
}

test('an order refused after its append (credit limit) stores neither the order nor the event', async () => {
  const c = customer('credit');
  const half = CREDIT_LIMIT_CENTS / 2 + 100;
  const first = await placeOrder(APPS.sql, c, { unitPriceCents: half });
  assert.equal(first.status, 201, first.text);

  const usedBefore = await eventIdsUsed();
  const refused = await placeOrder(APPS.sql, c, { unitPriceCents: half });
  assert.equal(refused.status, 422, refused.text);
  assert.match(refused.json.error, /above the limit/);
  // The token of a transaction that rolled back is not handed out.
  assert.equal(refused.headers.get('highwater-token'), null);
  // The refused request did append (it used up an event id) before the check threw ...
  assert.equal(await eventIdsUsed(), usedBefore + 1n, 'the refused order appended its event before the check');
  // ... and the rollback took the event and the order row with it.
  assert.deepEqual(await stored(c), { orders: 1, events: 1, streams: [first.json.id] });
  const again = await request(APPS.sql, 'GET', `/orders/${first.json.id}`);
  assert.equal(again.status, 200);
});

test('an invalid body is refused with 400 before any transaction: nothing stored', async () => {
  const c = customer('invalid');
  const usedBefore = await eventIdsUsed();
  const r = await request(APPS.sql, 'POST', '/orders', { body: { customer_id: c, lines: [{ sku: 'S', quantity: 0, unit_price_cents: 5 }] } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /quantity/);
  assert.equal(await eventIdsUsed(), usedBefore);
  assert.deepEqual(await stored(c), { orders: 0, events: 0, streams: null });
});
