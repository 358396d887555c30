// The six drivers the client supports, each writing one event per transaction three ways, with
// the driver's own idioms for everything but the statement being measured:
//   adapter: `append(tx, event)` of @highwater/client (outside a request: it reads no token);
//   direct:  `SELECT highwater.append(...)` written by hand with the driver's raw-SQL API;
//   outbox:  a plain INSERT into a seed-style outbox table (id uuid, aggregatetype, aggregateid,
//            type, payload jsonb), as the driver or ORM would write it.
//   adapter in a request: the same `append` inside the highwaterTokens middleware's request
//            context, where it also reads the transaction's token for the response header.
// Every variant pays the same transaction (BEGIN / COMMIT through the driver), so the ratios
// compare the statements and what the client adds around them.
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import { jsonb, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import { sql as drizzleSql } from 'drizzle-orm';
import Knex from 'knex';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import pg from 'pg';
import { DataSource, EntitySchema } from 'typeorm';
import { PrismaPg } from '@prisma/adapter-pg';
// Generated and compiled by bench.sh from bench/prisma/schema.prisma.
import { PrismaClient } from './prisma/build/client.js';
import { append, highwaterTokens } from '../dist/index.js';

export const PAYLOAD = { order_id: 1, amount: 42, currency: 'EUR' };
const event = (i) => ({ streamType: 'order', streamId: `o-${i % 64}`, type: 'OrderPlaced', payload: PAYLOAD });
const outboxRow = (i) => ({
  id: randomUUID(),
  aggregatetype: 'order',
  aggregateid: `o-${i % 64}`,
  type: 'OrderPlaced',
  payload: PAYLOAD,
});
// A request as the middleware sees it: only what highwaterTokens touches.
const tokens = highwaterTokens();
function inRequest(fn) {
  const headers = new Map();
  const res = {
    headersSent: false,
    statusCode: 200,
    locals: {},
    getHeader: (n) => headers.get(n.toLowerCase()),
    setHeader: (n, v) => headers.set(n.toLowerCase(), v),
    end() {},
  };
  return new Promise((resolve, reject) => tokens({ headers: {} }, res, () => fn().then(resolve, reject)));
}

/** Adds the "adapter in a request" variant to a driver's three. */
function withRequestVariant(d) {
  return { ...d, adapterInRequest: (i) => inRequest(() => d.adapter(i)) };
}

const DIRECT_PG = 'SELECT highwater.append($1, $2, $3, $4::jsonb)';
const OUTBOX_PG = 'INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)';

async function pgDriver(url, connections) {
  const pool = new pg.Pool({ connectionString: url, max: connections });
  const tx = async (fn) => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await fn(c);
      await c.query('COMMIT');
    } catch (e) {
      await c.query('ROLLBACK');
      throw e;
    } finally {
      c.release();
    }
  };
  return {
    adapter: (i) => tx((c) => append(c, event(i))),
    direct: (i) => tx((c) => c.query(DIRECT_PG, ['order', `o-${i % 64}`, 'OrderPlaced', JSON.stringify(PAYLOAD)])),
    outbox: (i) => {
      const r = outboxRow(i);
      return tx((c) => c.query(OUTBOX_PG, [r.id, r.aggregatetype, r.aggregateid, r.type, JSON.stringify(r.payload)]));
    },
    close: () => pool.end(),
  };
}

const drizzleOutbox = pgTable('outbox', {
  id: uuid('id').primaryKey(),
  aggregatetype: text('aggregatetype').notNull(),
  aggregateid: text('aggregateid').notNull(),
  type: text('type').notNull(),
  payload: jsonb('payload').notNull(),
});

async function drizzleDriver(url, connections) {
  const pool = new pg.Pool({ connectionString: url, max: connections });
  const db = drizzle(pool);
  return {
    adapter: (i) => db.transaction((tx) => append(tx, event(i))),
    direct: (i) =>
      db.transaction((tx) =>
        tx.execute(drizzleSql`SELECT highwater.append(${'order'}, ${`o-${i % 64}`}, ${'OrderPlaced'}, ${JSON.stringify(PAYLOAD)}::jsonb)`),
      ),
    outbox: (i) => db.transaction((tx) => tx.insert(drizzleOutbox).values(outboxRow(i))),
    close: () => pool.end(),
  };
}

async function kyselyDriver(url, connections) {
  const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: connections }) }) });
  return {
    adapter: (i) => db.transaction().execute((trx) => append(trx, event(i))),
    direct: (i) =>
      db
        .transaction()
        .execute((trx) =>
          kyselySql`SELECT highwater.append(${'order'}, ${`o-${i % 64}`}, ${'OrderPlaced'}, ${JSON.stringify(PAYLOAD)}::jsonb)`.execute(trx),
        ),
    outbox: (i) => {
      const r = outboxRow(i);
      return db.transaction().execute((trx) => trx.insertInto('outbox').values({ ...r, payload: JSON.stringify(r.payload) }).execute());
    },
    close: () => db.destroy(),
  };
}

async function knexDriver(url, connections) {
  const knex = Knex({ client: 'pg', connection: url, pool: { min: connections, max: connections } });
  return {
    adapter: (i) => knex.transaction((trx) => append(trx, event(i))),
    direct: (i) =>
      knex.transaction((trx) =>
        trx.raw('SELECT highwater.append(?, ?, ?, ?::jsonb)', ['order', `o-${i % 64}`, 'OrderPlaced', JSON.stringify(PAYLOAD)]),
      ),
    outbox: (i) => {
      const r = outboxRow(i);
      return knex.transaction((trx) => trx('outbox').insert({ ...r, payload: JSON.stringify(r.payload) }));
    },
    close: () => knex.destroy(),
  };
}

const typeormOutbox = new EntitySchema({
  name: 'outbox',
  tableName: 'outbox',
  columns: {
    id: { type: 'uuid', primary: true },
    aggregatetype: { type: 'text' },
    aggregateid: { type: 'text' },
    type: { type: 'text' },
    payload: { type: 'jsonb' },
  },
});

async function typeormDriver(url, connections) {
  const ds = new DataSource({ type: 'postgres', url, entities: [typeormOutbox], extra: { max: connections } });
  await ds.initialize();
  return {
    adapter: (i) => ds.transaction((em) => append(em, event(i))),
    direct: (i) =>
      ds.transaction((em) => em.query(DIRECT_PG, ['order', `o-${i % 64}`, 'OrderPlaced', JSON.stringify(PAYLOAD)])),
    outbox: (i) => ds.transaction((em) => em.insert('outbox', outboxRow(i))),
    close: () => ds.destroy(),
  };
}

async function prismaDriver(url, connections) {
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: connections }) });
  await prisma.$connect();
  return {
    adapter: (i) => prisma.$transaction((tx) => append(tx, event(i))),
    direct: (i) =>
      prisma.$transaction(
        (tx) => tx.$queryRaw`SELECT highwater.append(${'order'}, ${`o-${i % 64}`}, ${'OrderPlaced'}, ${JSON.stringify(PAYLOAD)}::jsonb)`,
      ),
    outbox: (i) => prisma.$transaction((tx) => tx.outbox.create({ data: outboxRow(i) })),
    close: () => prisma.$disconnect(),
  };
}

const wrap = (make) => async (url, connections) => withRequestVariant(await make(url, connections));
export const DRIVERS = {
  pg: wrap(pgDriver),
  drizzle: wrap(drizzleDriver),
  kysely: wrap(kyselyDriver),
  knex: wrap(knexDriver),
  typeorm: wrap(typeormDriver),
  prisma: wrap(prismaDriver),
};
export const VARIANTS = ['adapter', 'adapterInRequest', 'direct', 'outbox'];
