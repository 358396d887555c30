// The writer's trace context (issue 48): with @opentelemetry/api installed and a real tracer (the
// SDK's BasicTracerProvider, AsyncLocalStorage context manager), an append inside the active span
// stores the span's W3C context with the event, through a pg client and a Kysely transaction.
// (Without the package, nothing is added: test/package-smoke/smoke.mjs, whose application does
// not install it, checks that.)
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { context, createTraceState, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { AlwaysOffSampler, BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { Kysely, PostgresDialect } from 'kysely';
import { append, appendPosition } from '@highwater/client';
import { newPool, uid } from './harness.js';

const pool = newPool(2);
const provider = new BasicTracerProvider();
const tracer = provider.getTracer('orders');
const unsampled = new BasicTracerProvider({ sampler: new AlwaysOffSampler() }).getTracer('orders');

before(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
after(async () => {
  context.disable();
  await pool.end();
});

async function metadata(streamId: string): Promise<Record<string, unknown>[]> {
  const { rows } = await pool.query('SELECT metadata FROM highwater.events WHERE stream_id = $1 ORDER BY id', [
    streamId,
  ]);
  return rows.map((r) => r.metadata);
}

function traceparent(sc: { traceId: string; spanId: string }, flags: string): string {
  return `00-${sc.traceId}-${sc.spanId}-${flags}`;
}

describe('trace context', () => {
  test("an append inside a span stores the span's traceparent and tracestate", async () => {
    const id = uid('order');
    const client = await pool.connect();
    let sc;
    try {
      await tracer.startActiveSpan('POST /orders', async (span) => {
        sc = span.spanContext();
        await client.query('BEGIN');
        // Metadata of its own is kept beside the trace context.
        await append(client, { streamType: 'order', streamId: id, type: 'Pinged', payload: {}, metadata: { source: 'web' } });
        // The caller's own traceparent wins.
        const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
        await append(client, { streamType: 'order', streamId: id, type: 'Pinged', payload: {}, metadata: { traceparent: own } });
        await client.query('COMMIT');
        span.end();
      });
      // Outside the span: nothing added.
      await append(client, { streamType: 'order', streamId: id, type: 'Pinged', payload: {} });
    } finally {
      client.release();
    }
    const rows = await metadata(id);
    assert.equal(rows.length, 3);
    assert.equal(rows[0]!.traceparent, traceparent(sc!, '01'));
    assert.equal(rows[0]!.source, 'web');
    assert.equal(rows[1]!.traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    assert.ok(!('traceparent' in rows[2]!), JSON.stringify(rows[2]));
  });

  test('a Kysely transaction in a span with tracestate, and an unsampled span keeps its flags', async () => {
    const id = uid('order');
    const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: newPool(1) }) });
    try {
      const parent = tracer.startSpan('POST /orders');
      const withState = trace.setSpanContext(context.active(), {
        ...parent.spanContext(),
        traceState: createTraceState('congo=t61rcWkgMzE'),
      });
      const pos = await context.with(withState, () =>
        db.transaction().execute((trx) => appendPosition(trx, { streamType: 'order', streamId: id, type: 'Pinged', payload: {} })),
      );
      parent.end();
      let off;
      await unsampled.startActiveSpan('GET /health', async (span) => {
        off = span.spanContext();
        await db.transaction().execute((trx) => append(trx, { streamType: 'order', streamId: id, type: 'Pinged', payload: {} }));
        span.end();
      });
      const rows = await metadata(id);
      assert.ok(pos.id);
      assert.equal(rows[0]!.traceparent, traceparent(parent.spanContext(), '01'));
      assert.equal(rows[0]!.tracestate, 'congo=t61rcWkgMzE');
      assert.equal(rows[1]!.traceparent, traceparent(off!, '00'), 'the writer\'s "not sampled" goes with the event');
      assert.ok(!('tracestate' in rows[1]!));
    } finally {
      await db.destroy();
    }
  });
});
