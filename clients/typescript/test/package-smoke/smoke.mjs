// An application's first use of the packed @highwater/client: import it by name, append through
// pg and through Kysely (loaded from the application's own node_modules), read the token.
import assert from 'node:assert/strict';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import * as hw from '@highwater/client';
import { lstatSync } from 'node:fs';
import { createRequire } from 'node:module';

// @opentelemetry/api is an optional peer dependency: this application does not install it, and
// the package works without it (adding no trace context). Installed as a copy (the tarball), the
// package cannot find it; linked (the directory route), it resolves its own devDependencies.
const pkg = 'node_modules/@highwater/client';
if (!lstatSync(pkg).isSymbolicLink()) {
  const fromPackage = createRequire(new URL(`${pkg}/package.json`, import.meta.url));
  assert.throws(() => fromPackage.resolve('@opentelemetry/api'), /Cannot find module/);
}

for (const name of ['append', 'appendPosition', 'token', 'waitApplied', 'waitAppliedHttp', 'highwaterTokens', 'readYourWrites', 'recordToken']) {
  assert.equal(typeof hw[name], 'function', name);
}
for (const name of ['HighwaterError', 'UnknownEventType', 'InvalidPayload', 'VersionConflict', 'UnknownConsumer']) {
  assert.ok(hw[name].prototype instanceof Error, name);
}

const streamId = `s-${process.pid}-${Date.now()}`;
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
const db = new Kysely({ dialect: new PostgresDialect({ pool }) });
try {
  const client = await pool.connect();
  let id;
  try {
    await client.query('BEGIN');
    id = await hw.append(client, { streamType: 'smoke', streamId, type: 'Pinged', payload: { from: 'pg' } });
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const pos = await db.transaction().execute((trx) =>
    hw.appendPosition(trx, { streamType: 'smoke', streamId, type: 'Pinged', payload: { from: 'kysely' } }),
  );
  const { rows } = await pool.query(
    'SELECT e.id::text AS id, e.payload, e.metadata ? \'traceparent\' AS traced FROM highwater.events e WHERE e.stream_id = $1 ORDER BY e.id',
    [streamId],
  );
  assert.deepEqual(rows, [
    { id, payload: { from: 'pg' }, traced: false },
    { id: pos.id, payload: { from: 'kysely' }, traced: false },
  ]);
  await assert.rejects(
    db.transaction().execute((trx) => hw.append(trx, { streamType: 'smoke', streamId, type: 'Nope', payload: {} })),
    hw.UnknownEventType,
  );
  console.log(`package smoke: ok (events ${id} and ${pos.id}, token ${pos.token})`);
} finally {
  await db.destroy();
}
