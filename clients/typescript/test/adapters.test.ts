// append / appendPosition / token through every supported way of holding a transaction, each a
// real ORM transaction that also writes the application's own row with the ORM's query builder.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  type Executor,
  HighwaterError,
  InvalidPayload,
  LimitExceeded,
  UnknownEventType,
  VersionConflict,
  append,
  appendPosition,
  token,
} from '@highwater/client';
import { numeric, pgTable, text } from 'drizzle-orm/pg-core';
import { drizzle } from 'drizzle-orm/node-postgres';
import { CamelCasePlugin, Kysely, PostgresDialect } from 'kysely';
import knexFactory from 'knex';
import { DataSource, EntitySchema } from 'typeorm';
import pg from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { Prisma, PrismaClient } from './prisma/generated/client.js';
import { DATABASE_URL, newPool, uid } from './harness.js';

interface Adapter {
  name: string;
  /** One transaction: the application's row (id, total) written through the ORM, then `work`;
   * rolled back when `work` throws (the error comes out as the ORM let it through). */
  transaction<T>(orderId: string, work: (tx: Executor) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

const check = newPool(2);

const appOrders = pgTable('app_orders', {
  id: text('id').primaryKey(),
  total: numeric('total').notNull(),
  writer: text('writer').notNull(),
});

interface KyselyDb {
  appOrders: { id: string; total: string; writer: string };
}

const AppOrder = new EntitySchema<{ id: string; total: string; writer: string }>({
  name: 'AppOrder',
  tableName: 'app_orders',
  columns: {
    id: { type: 'text', primary: true },
    total: { type: 'numeric' },
    writer: { type: 'text' },
  },
});

function pgAdapter(): Adapter {
  const pool = newPool(2);
  return {
    name: 'pg PoolClient',
    async transaction(orderId, work) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('INSERT INTO app_orders (id, total, writer) VALUES ($1, $2, $3)', [orderId, 10, 'pg']);
        const out = await work(client);
        await client.query('COMMIT');
        return out;
      } catch (e) {
        await client.query('ROLLBACK');
        throw e;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}

function drizzleAdapter(): Adapter {
  const pool = newPool(2);
  const db = drizzle(pool);
  return {
    name: 'Drizzle (node-postgres)',
    transaction: (orderId, work) =>
      db.transaction(async (tx) => {
        await tx.insert(appOrders).values({ id: orderId, total: '10', writer: 'drizzle' });
        return work(tx);
      }),
    close: () => pool.end(),
  };
}

function kyselyAdapter(): Adapter {
  const pool = newPool(2);
  // CamelCasePlugin on purpose: it rewrites result columns, which the client must survive.
  const db = new Kysely<KyselyDb>({ dialect: new PostgresDialect({ pool }), plugins: [new CamelCasePlugin()] });
  return {
    name: 'Kysely (PostgresDialect, CamelCasePlugin)',
    transaction: (orderId, work) =>
      db
        .transaction()
        .execute(async (trx) => {
          await trx.insertInto('appOrders').values({ id: orderId, total: '10', writer: 'kysely' }).execute();
          return work(trx);
        }),
    close: () => db.destroy(),
  };
}

function knexAdapter(): Adapter {
  const knex = knexFactory({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 2 } });
  return {
    name: 'Knex (pg)',
    transaction: (orderId, work) =>
      knex.transaction(async (trx) => {
        await trx('app_orders').insert({ id: orderId, total: 10, writer: 'knex' });
        return work(trx);
      }),
    close: () => knex.destroy(),
  };
}

function typeormDataSource(): DataSource {
  return new DataSource({ type: 'postgres', url: DATABASE_URL, entities: [AppOrder], poolSize: 2, logging: false });
}

function typeormQueryRunnerAdapter(): Adapter {
  const ds = typeormDataSource();
  return {
    name: 'TypeORM QueryRunner',
    async transaction(orderId, work) {
      if (!ds.isInitialized) await ds.initialize();
      const qr = ds.createQueryRunner();
      await qr.connect();
      await qr.startTransaction();
      try {
        await qr.manager.insert(AppOrder, { id: orderId, total: '10', writer: 'typeorm-qr' });
        const out = await work(qr);
        await qr.commitTransaction();
        return out;
      } catch (e) {
        await qr.rollbackTransaction();
        throw e;
      } finally {
        await qr.release();
      }
    },
    close: async () => {
      if (ds.isInitialized) await ds.destroy();
    },
  };
}

function typeormEntityManagerAdapter(): Adapter {
  const ds = typeormDataSource();
  return {
    name: 'TypeORM EntityManager (dataSource.transaction)',
    async transaction(orderId, work) {
      if (!ds.isInitialized) await ds.initialize();
      return ds.transaction(async (em) => {
        await em.insert(AppOrder, { id: orderId, total: '10', writer: 'typeorm-em' });
        return work(em);
      });
    },
    close: async () => {
      if (ds.isInitialized) await ds.destroy();
    },
  };
}

function prismaAdapter(): Adapter {
  // The client generated by test.sh (prisma-client generator, query compiler as wasm) over
  // @prisma/adapter-pg: no Prisma engine binary anywhere.
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: DATABASE_URL, max: 2 }) });
  return {
    name: 'Prisma ($transaction, @prisma/adapter-pg)',
    transaction: (orderId, work) =>
      prisma.$transaction(async (tx) => {
        await tx.appOrder.create({ data: { id: orderId, total: '10', writer: 'prisma' } });
        return work(tx);
      }),
    close: () => prisma.$disconnect(),
  };
}

async function eventsOf(streamId: string) {
  const { rows } = await check.query(
    `SELECT e.id::text AS id, e.tx_id::text AS tx_id, e.stream_type, e.stream_version, e.event_type, e.tenant_id,
            e.payload, e.metadata
       FROM highwater.events e WHERE e.stream_id = $1 ORDER BY e.id`,
    [streamId],
  );
  return rows;
}

async function appRow(id: string) {
  const { rows } = await check.query('SELECT id, total::int AS total, writer FROM app_orders WHERE id = $1', [id]);
  return rows[0];
}

const adapters = [
  pgAdapter(),
  drizzleAdapter(),
  kyselyAdapter(),
  knexAdapter(),
  typeormQueryRunnerAdapter(),
  typeormEntityManagerAdapter(),
  prismaAdapter(),
];

after(async () => {
  await Promise.all(adapters.map((a) => a.close()));
  await check.end();
});

for (const adapter of adapters) {
  describe(adapter.name, () => {
    test('append and appendPosition commit together with the ORM write', async () => {
      const id = uid('order');
      const out = await adapter.transaction(id, async (tx) => {
        const first = await append(tx, {
          streamType: 'order',
          streamId: id,
          type: 'OrderPlaced',
          payload: { order_id: id, total: 10, items: ['a', 'b'] },
          metadata: { source: adapter.name },
          tenantId: 'acme',
          expectedVersion: 0,
        });
        // An array payload: JSON, not a PostgreSQL array.
        const second = await appendPosition(tx, {
          streamType: 'order',
          streamId: id,
          type: 'Tagged',
          payload: ['x', 1, null],
          expectedVersion: 1,
        });
        const last = await token(tx);
        return { first, second, last };
      });

      assert.match(out.first, /^\d+$/);
      assert.match(out.second.id, /^\d+$/);
      assert.match(out.second.txId, /^\d+$/);
      assert.match(out.second.token, /^\d+$/);
      const rows = await eventsOf(id);
      assert.equal(rows.length, 2);
      const [e1, e2] = rows;
      assert.equal(e1.id, out.first);
      assert.equal(e1.event_type, 'OrderPlaced');
      assert.equal(e1.stream_type, 'order');
      assert.equal(Number(e1.stream_version), 1);
      assert.equal(e1.tenant_id, 'acme');
      assert.deepEqual(e1.payload, { order_id: id, total: 10, items: ['a', 'b'] });
      assert.equal(e1.metadata.source, adapter.name);
      assert.equal(typeof e1.metadata.correlation_id, 'string');
      assert.equal(e2.id, out.second.id);
      assert.equal(e2.tx_id, out.second.txId);
      assert.equal(Number(e2.stream_version), 2);
      assert.equal(e2.tenant_id, null);
      assert.deepEqual(e2.payload, ['x', 1, null]);
      // The token covers both events, and the transaction's last token is the one appendPosition gave.
      assert.equal(out.last, out.second.token);
      for (const e of rows) assert.ok(BigInt(out.last) >= BigInt(e.tx_id), `token ${out.last} < tx_id ${e.tx_id}`);
      // The ORM's own write is there too: same transaction.
      const row = await appRow(id);
      assert.equal(row?.total, 10);
    });

    test('a rollback stores nothing', async () => {
      const id = uid('order');
      const boom = new Error('business rule failed after the append');
      await assert.rejects(
        adapter.transaction(id, async (tx) => {
          await append(tx, { streamType: 'order', streamId: id, type: 'Pinged', payload: {} });
          await appendPosition(tx, { streamType: 'order', streamId: id, type: 'Pinged', payload: { n: 2 } });
          throw boom;
        }),
        (e) => e === boom,
      );
      assert.deepEqual(await eventsOf(id), []);
      assert.equal(await appRow(id), undefined);
    });

    test('unknown event type raises UnknownEventType', async () => {
      const id = uid('order');
      await assert.rejects(
        adapter.transaction(id, (tx) => append(tx, { streamType: 'order', streamId: id, type: 'NoSuchType', payload: {} })),
        (e) => {
          assert.ok(e instanceof UnknownEventType, `got ${String(e)}`);
          assert.ok(e instanceof HighwaterError);
          assert.equal(e.code, 'HW001');
          assert.equal(e.eventType, 'NoSuchType');
          assert.equal(e.message, 'unknown event type "NoSuchType"');
          assert.match(e.hint ?? '', /event-types register NoSuchType/);
          assert.ok(e.cause, 'keeps the driver error as cause');
          return true;
        },
      );
      assert.deepEqual(await eventsOf(id), []);
    });

    test('a payload violating the schema raises InvalidPayload with its path', async () => {
      const id = uid('order');
      await assert.rejects(
        adapter.transaction(id, (tx) =>
          appendPosition(tx, {
            streamType: 'order',
            streamId: id,
            type: 'OrderPlaced',
            payload: { order_id: id, total: 5, items: ['ok', 7] },
          }),
        ),
        (e) => {
          assert.ok(e instanceof InvalidPayload, `got ${String(e)}`);
          assert.equal(e.code, 'HW002');
          assert.equal(e.eventType, 'OrderPlaced');
          assert.equal(e.path, '$.items[1]');
          assert.equal(e.reason, 'expected type "string", got number');
          assert.equal(
            e.message,
            'payload of event type "OrderPlaced" fails its JSON Schema: $.items[1]: expected type "string", got number',
          );
          return true;
        },
      );
    });

    test('an expected-version mismatch raises VersionConflict', async () => {
      const id = uid('order');
      await adapter.transaction(id, (tx) =>
        append(tx, { streamType: 'order', streamId: id, type: 'Pinged', payload: {}, expectedVersion: 0 }),
      );
      await assert.rejects(
        adapter.transaction(uid('other'), (tx) =>
          append(tx, { streamType: 'order', streamId: id, type: 'Pinged', payload: {}, expectedVersion: 0 }),
        ),
        (e) => {
          assert.ok(e instanceof VersionConflict, `got ${String(e)}`);
          assert.equal(e.code, 'HW003');
          assert.equal(e.streamType, 'order');
          assert.equal(e.streamId, id);
          assert.equal(e.expectedVersion, 0);
          assert.equal(e.actualVersion, 1);
          assert.equal(e.message, `stream order/${id} is at version 1, expected 0`);
          return true;
        },
      );
      assert.equal((await eventsOf(id)).length, 1);
    });

    test('a stream id over 1024 bytes raises LimitExceeded; 1024 bytes is appended', async () => {
      const id = uid('order');
      const atLimit = id.padEnd(1024, 'x');
      const over = id.padEnd(1025, 'y');
      await assert.rejects(
        adapter.transaction(id, (tx) => append(tx, { streamType: 'order', streamId: over, type: 'Pinged', payload: {} })),
        (e) => {
          assert.ok(e instanceof LimitExceeded, `got ${String(e)}`);
          assert.ok(e instanceof HighwaterError);
          assert.equal(e.code, 'HW030');
          assert.equal(e.field, 'stream id');
          assert.equal(e.size, 1025);
          assert.equal(e.limit, 1024);
          assert.equal(
            e.message,
            `stream id "${over.slice(0, 40)}…" of stream type "order" is 1025 bytes long; the limit is 1024 bytes (UTF-8)`,
          );
          assert.match(e.hint ?? '', /use a shorter id/);
          assert.ok(e.cause, 'keeps the driver error as cause');
          return true;
        },
      );
      assert.deepEqual(await eventsOf(over), []);
      assert.equal(await appRow(id), undefined, 'the refusal rolled the application write back too');
      await adapter.transaction(id, (tx) =>
        append(tx, { streamType: 'order', streamId: atLimit, type: 'Pinged', payload: {} }),
      );
      assert.equal((await eventsOf(atLimit)).length, 1);
    });
  });
}

describe('errors that are not highwater refusals', () => {
  let pool: ReturnType<typeof newPool>;
  before(() => {
    pool = newPool(1);
  });
  after(() => pool.end());

  test('are rethrown as the driver threw them (permission denied, 42501)', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL ROLE no_grants');
      const err = await append(client, { streamType: 'order', streamId: uid('o'), type: 'Pinged', payload: {} }).then(
        () => assert.fail('append should have been refused'),
        (e: unknown) => e,
      );
      assert.ok(!(err instanceof HighwaterError));
      assert.ok(err instanceof pg.DatabaseError, `got ${String(err)}`);
      assert.equal(err.code, '42501');
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  test('through Prisma too: its own error, untouched (P2010 around the 42501)', async () => {
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: DATABASE_URL, max: 1 }) });
    try {
      const err = await prisma
        .$transaction(async (tx) => {
          await tx.$executeRawUnsafe('SET LOCAL ROLE no_grants');
          await append(tx, { streamType: 'order', streamId: uid('o'), type: 'Pinged', payload: {} });
        })
        .then(
          () => assert.fail('append should have been refused'),
          (e: unknown) => e,
        );
      assert.ok(!(err instanceof HighwaterError));
      assert.ok(err instanceof Prisma.PrismaClientKnownRequestError, `got ${String(err)}`);
      assert.equal(err.code, 'P2010');
      assert.match(err.message, /42501/);
    } finally {
      await prisma.$disconnect();
    }
  });

  test('an empty stream id is the server’s InvalidPayload without a path', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await assert.rejects(append(client, { streamType: 'order', streamId: '', type: 'Pinged', payload: {} }), (e) => {
        assert.ok(e instanceof InvalidPayload);
        assert.equal(e.path, undefined);
        assert.equal(e.message, 'stream type and stream id must not be empty');
        return true;
      });
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});

