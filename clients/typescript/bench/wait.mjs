// The wait helpers' added latency at a steady write rate: writes of one event each (their own
// transaction, through the pg adapter's appendPosition, which returns the token), each followed
// at once by a wait for the projection consumer `bench-applied` with `waitApplied` (a pg.Pool:
// LISTEN highwater_applied) or `waitAppliedHttp` (the dispatcher's long poll).
//
// The dispatcher's own applied time of an event is the commit of the cursor transaction that
// applied it: the commit timestamp (track_commit_timestamp = on) of its row in the consumer's
// table. The helper's added latency is the wait's return (this process's wall clock) minus that
// commit (the server's wall clock, on the same machine): the notification or the dispatcher's
// long-poll wake-up, the helper's check, and this process's event loop.
//
//   node bench/wait.mjs [--rate 1000] [--seconds 20] [--mode none,sql,http]
//   (DATABASE_URL; DISPATCHER_URL and AUTH_TOKEN for http)
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { appendPosition, waitApplied, waitAppliedHttp } from '../dist/index.js';
import { PAYLOAD } from './drivers.mjs';
import { ms, rate, summary, table } from './stats.mjs';

const { values: opts } = parseArgs({
  options: {
    rate: { type: 'string', default: '1000' },
    seconds: { type: 'string', default: '20' },
    mode: { type: 'string', default: 'none,sql,http' },
    writers: { type: 'string', default: '8' },
  },
});
const url = process.env.DATABASE_URL;
const CONSUMER = 'bench-applied';
const LOOP_RESOLUTION_MS = 2;
const wallNow = () => performance.timeOrigin + performance.now();

async function run(mode) {
  const writePool = new pg.Pool({ connectionString: url, max: Number(opts.writers) });
  // The SQL waits share one LISTEN connection of this pool (the helper's hub); 64 is room to spare.
  const waitPool = new pg.Pool({ connectionString: url, max: 64 });
  // Counted on the wait pool's connections: the helper's checks and the notifications they get.
  let checks = 0;
  let notifications = 0;
  waitPool.on('connect', (client) => {
    const query = client.query.bind(client);
    client.query = (...a) => {
      if (String(a[0]?.text ?? a[0]).includes('highwater.applied')) checks++;
      return query(...a);
    };
    client.on('notification', () => notifications++);
  });
  // The histogram records whole timer intervals: the delay is what exceeds the resolution.
  const loop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  loop.enable();
  // `none`: the same writes without waits, the baseline of this process's own load.
  const wait = (token) =>
    mode === 'none'
      ? Promise.resolve({ applied: true })
      : mode === 'sql'
      ? waitApplied(waitPool, CONSUMER, token, { timeout: 10_000 })
      : waitAppliedHttp(process.env.DISPATCHER_URL, CONSUMER, token, { timeout: 10_000, authToken: process.env.AUTH_TOKEN });
  const samples = [];
  let timedOut = 0;
  let late = 0;
  const one = async (i) => {
    const c = await writePool.connect();
    let pos;
    try {
      await c.query('BEGIN');
      pos = await appendPosition(c, { streamType: 'order', streamId: `w-${i % 64}`, type: 'OrderPaid', payload: PAYLOAD });
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    const committed = wallNow();
    const r = await wait(pos.token);
    const returned = wallNow();
    if (!r.applied) timedOut++;
    samples.push({ id: pos.id, committed, returned });
  };

  // Writes on a fixed schedule (not one after another): a slow wait never slows the rate asked.
  const total = Number(opts.rate) * Number(opts.seconds);
  const interval = 1000 / Number(opts.rate);
  const inFlight = new Set();
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < total; i++) {
    const due = t0 + i * interval;
    const ahead = due - performance.now();
    if (ahead > 1) await new Promise((r) => setTimeout(r, ahead));
    else if (ahead < -50) late++;
    const p = one(i).finally(() => inFlight.delete(p));
    inFlight.add(p);
  }
  const issued = (performance.now() - t0) / 1000;
  await Promise.all(inFlight);
  loop.disable();
  const cpu = process.cpuUsage(cpu0);
  const cpuShare = (cpu.user + cpu.system) / 1000 / (performance.now() - t0);

  // The dispatcher's applied time of each event, from the read model.
  const { rows } = await writePool.query(
    `SELECT event_id::text AS id, extract(epoch FROM created_at) * 1000 AS created,
            extract(epoch FROM applied_at) * 1000 AS stamped,
            extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000 AS applied
       FROM bench_applied WHERE event_id = ANY($1::bigint[])`,
    [samples.map((s) => s.id)],
  );
  const byId = new Map(rows.map((r) => [r.id, r]));
  const added = [];
  const dispatcher = [];
  const stampToCommit = [];
  const commitToReturn = [];
  for (const s of samples) {
    const r = byId.get(s.id);
    if (!r) continue;
    added.push(s.returned - Number(r.applied));
    dispatcher.push(Number(r.applied) - Number(r.created));
    stampToCommit.push(Number(r.applied) - Number(r.stamped));
    commitToReturn.push(s.returned - s.committed);
  }
  await writePool.end();
  await waitPool.end();
  return {
    mode,
    writes: samples.length,
    perSecond: samples.length / issued,
    timedOut,
    late,
    added: summary(added),
    dispatcher: summary(dispatcher),
    stampToCommit: summary(stampToCommit),
    commitToReturn: summary(commitToReturn),
    checksPerWait: checks / samples.length,
    notificationsPerWait: notifications / samples.length,
    loopDelayP50: Math.max(0, loop.percentile(50) / 1e6 - LOOP_RESOLUTION_MS),
    loopDelayP99: Math.max(0, loop.percentile(99) / 1e6 - LOOP_RESOLUTION_MS),
    cpuShare,
  };
}

const results = [];
for (const mode of opts.mode.split(',')) {
  results.push(await run(mode));
  process.stderr.write(`wait: ${mode} done\n`);
}
const label = { none: 'none (writes only, the baseline)', sql: 'waitApplied (pg.Pool, LISTEN)', http: 'waitAppliedHttp (dispatcher long poll)' };
console.log(
  table([
    [
      'helper',
      'writes (rate reached)',
      'dispatcher applied after write p50 / p99',
      'sink stamp to cursor commit p50 / p99',
      'added by the helper p50 / p99 / max (goal p99 ≤ 20 ms)',
      'commit to wait return p50 / p99',
      'timed out',
      'checks / notifications per wait',
      'event-loop delay p50 / p99',
      'this process CPU',
    ],
    ...results.map((r) => [
      label[r.mode],
      `${r.writes} (${rate(r.perSecond)}/s)`,
      `${ms(r.dispatcher.p50)} / ${ms(r.dispatcher.p99)}`,
      `${ms(r.stampToCommit.p50)} / ${ms(r.stampToCommit.p99)}`,
      r.mode === 'none' ? '—' : `${ms(r.added.p50)} / ${ms(r.added.p99)} / ${ms(r.added.max)}`,
      r.mode === 'none' ? '—' : `${ms(r.commitToReturn.p50)} / ${ms(r.commitToReturn.p99)}`,
      r.mode === 'none' ? '—' : String(r.timedOut),
      r.mode === 'none' ? '—' : r.mode === 'sql' ? `${r.checksPerWait.toFixed(1)} / ${r.notificationsPerWait.toFixed(1)}` : 'n/a (one request)',
      `${ms(r.loopDelayP50)} / ${ms(r.loopDelayP99)}`,
      `${(100 * r.cpuShare).toFixed(0)} % of a core`,
    ]),
  ]),
);
const lateTotal = results.reduce((a, r) => a + r.late, 0);
console.log(
  `\n${opts.rate} writes/s asked for ${opts.seconds} s per helper, each its own transaction, each waited for at once` +
    (lateTotal ? `; ${lateTotal} writes were issued more than 50 ms behind schedule (the process was saturated)` : ''),
);
