// One trace from the writer's request to the receiver (issue 48), with real parts only: this
// process is an order service (`POST /orders`, service `order-service`) that appends OrderPlaced
// with @highwater/client inside its span, and an email service (service `email-service`) whose
// webhook endpoint continues the trace from the request's `traceparent`; test.sh runs PostgreSQL,
// `highwater dispatch` exporting its spans, and Jaeger. Jaeger's query API must return one trace
// of four spans, each the child of the one before: the request → its append → `process
// order-emails` → the receiver.
// The trace is then drawn as a waterfall in Debian's Chromium for docs/observability.md.
import assert from 'node:assert/strict';
import http from 'node:http';
import test from 'node:test';

import { ROOT_CONTEXT, SpanKind, context, propagation } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { append } from '@highwater/client';
import pg from 'pg';
import { chromium } from 'playwright-core';

const { DATABASE_URL, RX_PORT, JAEGER_OTLP, JAEGER_QUERY, CHROMIUM, HW_TRACE_SCREENSHOT, JAEGER_UI_ASSETS } = process.env;

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const service = (name) =>
  new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': name }),
    spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${JAEGER_OTLP}/v1/traces` }))],
  });
const shop = service('order-service');
const mail = service('email-service');

async function eventually(what, seconds, probe) {
  const until = Date.now() + seconds * 1000;
  for (;;) {
    const got = await probe();
    if (got) return got;
    if (Date.now() > until) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The email service: continues the trace of each webhook request. */
function receiver(received) {
  const tracer = mail.getTracer('email-service');
  return http.createServer((req, res) => {
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const span = tracer.startSpan('POST /hooks/order-placed', { kind: SpanKind.SERVER }, parent);
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      received.push({ traceparent: req.headers.traceparent, event: JSON.parse(body).event });
      span.setAttribute('email.to', 'customer@example.com');
      span.end();
      res.writeHead(204).end();
    });
  });
}

/** The trace's spans as Jaeger returns them, with each span's service and parent. */
async function jaegerTrace(traceId) {
  const r = await fetch(`${JAEGER_QUERY}/api/traces/${traceId}`);
  if (!r.ok) return [];
  const data = (await r.json()).data?.[0];
  if (!data) return [];
  return data.spans.map((s) => ({
    spanID: s.spanID,
    name: s.operationName,
    service: data.processes[s.processID].serviceName,
    parent: s.references.find((x) => x.refType === 'CHILD_OF')?.spanID ?? null,
    start: s.startTime,
    duration: s.duration,
  }));
}

/** A waterfall of `spans` (parents first), as Jaeger's timeline draws one. */
function waterfall(traceId, spans) {
  const t0 = Math.min(...spans.map((s) => s.start));
  const end = Math.max(...spans.map((s) => s.start + s.duration));
  const total = Math.max(end - t0, 1);
  const depth = (s) => (s.parent ? 1 + depth(spans.find((p) => p.spanID === s.parent)) : 0);
  const colors = { 'order-service': '#0b7285', 'highwater-dispatcher': '#e8590c', 'email-service': '#5f3dc4' };
  const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
  const rows = [...spans]
    .sort((a, b) => a.start - b.start)
    .map((s) => {
      const left = ((s.start - t0) / total) * 100;
      const width = Math.max((s.duration / total) * 100, 0.4);
      const color = colors[s.service] ?? '#495057';
      return `<tr><td style="padding-left:${8 + depth(s) * 22}px"><b style="color:${color}">${esc(s.service)}</b><br>${esc(s.name)}
        <span class="ms">${(s.duration / 1000).toFixed(2)} ms</span></td>
        <td class="lane"><div class="bar" style="left:${left}%;width:${width}%;background:${color}"></div></td></tr>`;
    })
    .join('');
  return `<!doctype html><meta charset="utf-8"><style>
    body{font:14px system-ui,sans-serif;margin:24px;color:#212529}
    h1{font-size:18px;margin:0 0 4px} p{margin:0 0 16px;color:#495057}
    table{border-collapse:collapse;width:960px} td{border-top:1px solid #dee2e6;padding:8px;vertical-align:middle}
    td:first-child{width:300px} .lane{position:relative;height:36px}
    .bar{position:absolute;top:12px;height:14px;border-radius:3px}
    .ms{font-size:12px;color:#495057;margin-left:6px} .axis td{border:0;font-size:12px;color:#495057;padding-top:2px}</style>
    <h1>Trace ${esc(traceId)}</h1>
    <p>${spans.length} spans from Jaeger's query API: the writer's request and its append, highwater's delivery, the receiver.</p>
    <table>${rows}<tr class="axis"><td></td><td><span>0 ms</span><span style="float:right">${(total / 1000).toFixed(1)} ms after the request began</span></td></tr></table>`;
}

test('one trace runs from the writer through the dispatcher to the receiver', async (t) => {
  const received = [];
  const server = receiver(received);
  await new Promise((r) => server.listen(Number(RX_PORT), '127.0.0.1', r));
  t.after(() => server.close());

  // The order service's request: the append inside its span stores the span's context.
  let traceId;
  let writerSpan;
  const tracer = shop.getTracer('order-service');
  await tracer.startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
    traceId = span.spanContext().traceId;
    const db = new pg.Client({ connectionString: DATABASE_URL });
    await db.connect();
    await db.query('BEGIN');
    // The application's own span around the append: the event carries this span's context.
    await tracer.startActiveSpan('append OrderPlaced', { kind: SpanKind.CLIENT }, async (a) => {
      writerSpan = a.spanContext().spanId;
      await append(db, { streamType: 'order', streamId: 'o-42', type: 'OrderPlaced', payload: { total: 99.5 } });
      a.end();
    });
    await db.query('COMMIT');
    await db.end();
    span.end();
  });

  const [delivery] = await eventually('the webhook request', 30, async () => received.length > 0 && received);
  assert.equal(delivery.event.event_type, 'OrderPlaced');
  assert.match(delivery.traceparent, new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  assert.notEqual(delivery.traceparent.slice(36, 52), writerSpan, "the receiver's parent is highwater's span");
  await Promise.all([shop.forceFlush(), mail.forceFlush()]);

  const spans = await eventually('four spans of the trace in Jaeger', 30, async () => {
    const s = await jaegerTrace(traceId);
    return s.length >= 4 && s;
  });
  const by = (name) => spans.find((s) => s.name === name) ?? assert.fail(`no span ${name}: ${JSON.stringify(spans)}`);
  const request = by('POST /orders');
  const writer = by('append OrderPlaced');
  const processing = by('process order-emails');
  const email = by('POST /hooks/order-placed');
  assert.deepEqual(
    [request, writer, processing, email].map((s) => [s.service, s.parent]),
    [
      ['order-service', null],
      ['order-service', request.spanID],
      ['highwater-dispatcher', writer.spanID],
      ['email-service', processing.spanID],
    ],
  );
  assert.equal(delivery.traceparent.slice(36, 52), processing.spanID);

  if (HW_TRACE_SCREENSHOT) {
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    try {
      if (JAEGER_UI_ASSETS) {
        // The trace in Jaeger's own UI, served by the Jaeger above.
        const page = await browser.newPage({ viewport: { width: 1400, height: 380 } });
        await page.goto(`${JAEGER_QUERY}/trace/${traceId}`);
        const delivery = page.getByText('process order-emails').first();
        await delivery.waitFor({ timeout: 30_000 });
        await page.screenshot({ path: HW_TRACE_SCREENSHOT });
        // Beside it (NAME-span.png), highwater's span opened: its attributes.
        await page.setViewportSize({ width: 1400, height: 900 });
        await delivery.click();
        await page.getByText('Tags:').first().click();
        await page.getByText('messaging.consumer.group.name').first().waitFor({ timeout: 10_000 });
        await page.screenshot({ path: HW_TRACE_SCREENSHOT.replace(/(\.png)?$/, '-span.png') });
      } else {
        const page = await browser.newPage({ viewport: { width: 1010, height: 300 } });
        await page.setContent(waterfall(traceId, [request, writer, processing, email]));
        await page.screenshot({ path: HW_TRACE_SCREENSHOT, fullPage: true });
      }
    } finally {
      await browser.close();
    }
  }
});
