// Append through each adapter vs the same driver's hand-written `SELECT highwater.append(...)`
// vs its plain outbox INSERT: one event per transaction, `connections` concurrent loops per
// statement. The (driver, variant) pairs take turns in short slices, `rounds` times,
// each round in a shifted order, so a machine whose speed drifts (it is shared) moves them alike:
// the ratios, taken within one driver, are the figures that count.
//
//   node bench/append.mjs [--connections 1,4] [--slice 1.5] [--rounds 5]   (DATABASE_URL set)
import { parseArgs } from 'node:util';
import pg from 'pg';
import { cpuSince, cpuSnapshot } from './cpu.mjs';
import { DRIVERS, VARIANTS } from './drivers.mjs';
import { rate, summary, table, us } from './stats.mjs';

const { values: opts } = parseArgs({
  options: {
    connections: { type: 'string', default: '1,4' },
    slice: { type: 'string', default: '1.5' },
    rounds: { type: 'string', default: '5' },
  },
});
const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is not set');
const sliceMs = Number(opts.slice) * 1000;
const rounds = Number(opts.rounds);
const monitor = new pg.Client({ connectionString: url });
await monitor.connect();

/** Runs `op` in `connections` loops for `ms`; returns the transactions done and their latencies. */
async function slice(op, connections, ms) {
  const latencies = [];
  const end = performance.now() + ms;
  let i = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        const s = performance.now();
        await op(i++);
        latencies.push(performance.now() - s);
      }
    }),
  );
  return { done: latencies.length, seconds: (performance.now() - t0) / 1000, latencies };
}

const results = [];
for (const connections of opts.connections.split(',').map(Number)) {
  const drivers = {};
  for (const [name, make] of Object.entries(DRIVERS)) drivers[name] = await make(url, connections);
  const pairs = Object.keys(drivers).flatMap((d) => VARIANTS.map((v) => [d, v]));
  // Warm-up: connections opened, statements planned, JIT-compiled paths, before any slice counts.
  for (const [d, v] of pairs) await slice(drivers[d][v], connections, 300);
  const acc = new Map(pairs.map(([d, v]) => [`${d}/${v}`, { done: 0, seconds: 0, latencies: [], client: 0, server: 0 }]));
  for (let r = 0; r < rounds; r++) {
    const shift = (r * 5) % pairs.length;
    for (const [d, v] of [...pairs.slice(shift), ...pairs.slice(0, shift)]) {
      const before = await cpuSnapshot(monitor);
      const s = await slice(drivers[d][v], connections, sliceMs);
      const cpu = await cpuSince(monitor, before);
      const a = acc.get(`${d}/${v}`);
      a.client += cpu.client;
      a.server += cpu.server;
      a.done += s.done;
      a.seconds += s.seconds;
      for (const l of s.latencies) a.latencies.push(l);
    }
    process.stderr.write(`append: ${connections} connection(s), round ${r + 1} of ${rounds} done\n`);
  }
  for (const d of Object.values(drivers)) await d.close();
  for (const name of Object.keys(drivers)) {
    const row = { connections, driver: name };
    for (const v of VARIANTS) {
      const a = acc.get(`${name}/${v}`);
      row[v] = {
        perSecond: a.done / a.seconds,
        latency: summary(a.latencies),
        // CPU per transaction, in milliseconds
        client: a.client / a.done,
        server: a.server / a.done,
      };
    }
    results.push(row);
  }
}

await monitor.end();

// Time per event of `other` relative to the adapter's: above 1× the adapter is slower.
const x = (adapter, other) => `${(other.perSecond / adapter.perSecond).toFixed(2)}×`;
console.log(
  table([
    [
      'driver',
      'connections',
      'adapter tx/s',
      'adapter in a request tx/s',
      'direct SELECT tx/s',
      'outbox INSERT tx/s',
      'adapter vs direct (goal ≤ 1.1×)',
      'in a request vs direct',
      'adapter vs outbox (goal ≤ 1.6×)',
      'in a request vs outbox',
    ],
    ...results.map((r) => [
      r.driver,
      r.connections,
      rate(r.adapter.perSecond),
      rate(r.adapterInRequest.perSecond),
      rate(r.direct.perSecond),
      rate(r.outbox.perSecond),
      x(r.adapter, r.direct),
      x(r.adapterInRequest, r.direct),
      x(r.adapter, r.outbox),
      x(r.adapterInRequest, r.outbox),
    ]),
  ]),
);
console.log(
  `\n${rounds} rounds × ${opts.slice} s slices per (driver, statement), taking turns; one event per transaction.\n` +
    `\nWhere a transaction's time goes (µs per transaction: wall p50 / p99, then CPU of this process and of the server's backends):\n`,
);
const names = { adapter: 'adapter', adapterInRequest: 'in a request', direct: 'direct SELECT', outbox: 'outbox INSERT' };
console.log(
  table([
    ['driver', 'connections', 'statement', 'wall p50 / p99', 'client CPU', 'server CPU'],
    ...results.flatMap((r) =>
      VARIANTS.map((v) => [
        r.driver,
        r.connections,
        names[v],
        `${us(r[v].latency.p50)} / ${us(r[v].latency.p99)}`,
        us(r[v].client),
        us(r[v].server),
      ]),
    ),
  ]),
);
