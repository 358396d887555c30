// Shared by the e2e tests: the two running applications (test.sh started them), real HTTP
// requests to them, the database for checks behind the API, and small statistics.
import { randomUUID } from 'node:crypto';
import pg from 'pg';

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the tests with examples/nestjs-orders/test.sh`);
  return v;
}

export const DATABASE_URL = required('DATABASE_URL');
/** The application waiting for tokens over SQL, and the one waiting through the dispatcher. */
export const APPS = { sql: required('APP_SQL_URL'), http: required('APP_HTTP_URL') };
export const SUMMARY_WAIT_MS = Number(required('SUMMARY_WAIT_MS'));
export const CREDIT_LIMIT_CENTS = Number(required('CREDIT_LIMIT_CENTS'));
export const ORDERS = Number(process.env.E2E_ORDERS ?? 200);

export const newPool = () => new pg.Pool({ connectionString: DATABASE_URL, max: 2 });

export const customer = (prefix) => `${prefix}-${randomUUID().slice(0, 8)}`;

/** One HTTP request; the body parsed as JSON; `ms` the time it took. */
export async function request(base, method, path, { body, headers = {} } = {}) {
  const t0 = performance.now();
  const res = await fetch(base + path, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const ms = performance.now() - t0;
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, json, text, ms };
}

/** POST /orders of one line; asserts nothing, returns the raw answer. */
export function placeOrder(base, customerId, { quantity = 1, unitPriceCents = 1000, sku = 'SKU-1' } = {}) {
  return request(base, 'POST', '/orders', {
    body: { customer_id: customerId, lines: [{ sku, quantity, unit_price_cents: unitPriceCents }] },
  });
}

export function readSummary(base, id, token) {
  return request(base, 'GET', `/orders/${id}/summary`, token === undefined ? {} : { headers: { 'highwater-token': token } });
}

export function percentile(values, p) {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

export const fmt = (ms) => `${ms.toFixed(1)} ms`;
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
