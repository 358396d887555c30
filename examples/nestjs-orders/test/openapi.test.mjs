// The OpenAPI description the application serves: the committed openapi.json (test.sh also
// checks that file against the code), declaring the summary eventually consistent.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { APPS, request } from './helpers.mjs';

const committed = JSON.parse(readFileSync(new URL('../openapi.json', import.meta.url), 'utf8'));

test('the served /openapi.json is the committed openapi.json', async () => {
  const r = await request(APPS.sql, 'GET', '/openapi.json');
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, committed);
});

test('GET /orders/{id}/summary is declared eventually consistent, with the token header in and the consistency out', () => {
  const op = committed.paths['/orders/{id}/summary'].get;
  assert.equal(op['x-consistency'], 'eventual');
  assert.match(op.summary, /eventually consistent/);
  assert.ok(op.parameters.some((p) => p.in === 'header' && p.name === 'Highwater-Token' && p.required === false));
  assert.ok(op.responses['200'].headers['Highwater-Consistency']);
  const schema = committed.components.schemas.OrderSummaryDto.properties.consistency;
  assert.deepEqual(schema.enum, ['applied', 'stale', 'eventual']);
  assert.equal(committed.paths['/orders/{id}'].get['x-consistency'], 'strong');
  assert.ok(committed.paths['/orders'].post.responses['201'].headers['Highwater-Token']);
});
