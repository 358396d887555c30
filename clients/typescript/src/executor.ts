// Runs one parameterised statement on whatever the application holds: a node-postgres client, or
// the transaction object of Drizzle, Kysely, Knex, TypeORM or Prisma. No statement of its own is
// added (no BEGIN, no savepoint): the statement runs inside the caller's transaction, as written.

/** Anything with node-postgres' `query(text, values)`: `pg.Client`, `pg.PoolClient`, `pg.Pool`,
 * and TypeORM's `QueryRunner`, `EntityManager` (the one `dataSource.transaction()` hands you) or
 * `DataSource`. The result may be node-postgres' `{ rows }` or TypeORM's array of rows. */
export interface Queryable {
  query(text: string, values?: unknown[]): unknown;
}

/** A Knex instance or transaction (`knex.transaction(async (trx) => …)`), `pg` client. */
export interface KnexLike {
  (...args: never[]): unknown;
  raw(sql: string, bindings?: never): PromiseLike<unknown>;
}

/** A Kysely instance or transaction (`db.transaction().execute(async (trx) => …)`), PostgresDialect. */
export interface KyselyLike {
  executeQuery(query: never): Promise<unknown>;
}

/** A Drizzle database or transaction (`db.transaction(async (tx) => …)`), node-postgres driver. */
export interface DrizzleLike {
  execute(query: never): PromiseLike<unknown>;
}

/** A Prisma client or the `tx` of an interactive transaction (`prisma.$transaction(async (tx) => …)`),
 * with a driver adapter such as `@prisma/adapter-pg`. The statement goes through `$queryRawUnsafe`
 * with its `$n` parameters bound by the adapter (never interpolated). */
export interface PrismaLike {
  $queryRawUnsafe(query: string, ...values: never[]): PromiseLike<unknown>;
}

/** What `append`, `appendPosition` and `token` take: the connection or ORM transaction that the
 * event must be written in. */
export type Executor = Queryable | KnexLike | KyselyLike | DrizzleLike | PrismaLike;

export type Row = Record<string, unknown>;

/** Appended to every statement: lets the error mapping find the server's message inside Knex's
 * "<query> - <message>" wrapping. */
export const MARKER = '/* highwater-client */';

export interface Runner {
  kind: 'pg' | 'knex' | 'kysely' | 'drizzle' | 'prisma';
  run(text: string, values: unknown[]): Promise<Row[]>;
}

/** Calls a method of the ORM object with itself as `this`. */
function call(target: object, method: string, ...args: unknown[]): Promise<unknown> {
  const fn = (target as Record<string, (...a: unknown[]) => unknown>)[method]!;
  return Promise.resolve(fn.apply(target, args));
}

function rowsOf(result: unknown): Row[] {
  if (Array.isArray(result)) return result as Row[];
  if (result && typeof result === 'object' && Array.isArray((result as { rows?: unknown }).rows)) {
    return (result as { rows: Row[] }).rows;
  }
  throw new TypeError('@highwater/client: the query returned no rows array (is this a PostgreSQL connection?)');
}

/** Splits "a $1 b $2 c" into the text between placeholders and the placeholders' indexes. */
function split(text: string): { parts: string[]; indexes: number[] } {
  const parts: string[] = [];
  const indexes: number[] = [];
  let last = 0;
  for (const m of text.matchAll(/\$(\d+)/g)) {
    parts.push(text.slice(last, m.index));
    indexes.push(Number(m[1]) - 1);
    last = (m.index ?? 0) + m[0].length;
  }
  parts.push(text.slice(last));
  return { parts, indexes };
}

interface Template {
  /** The text between the placeholders, as the strings of a tagged template (Drizzle). */
  strings: TemplateStringsArray;
  /** The value each placeholder takes, in order of appearance. */
  indexes: number[];
  /** The text with `?` placeholders (Knex). */
  qmarks: string;
}

/** `split` of one of the client's statement texts (a handful, all constants); kept, so that a
 * statement is split once per process. */
const templates = new Map<string, Template>();
function template(text: string): Template {
  let t = templates.get(text);
  if (!t) {
    const { parts, indexes } = split(text);
    const strings = Object.assign([...parts], { raw: [...parts] }) as unknown as TemplateStringsArray;
    t = { strings, indexes, qmarks: parts.join('?') };
    templates.set(text, t);
  }
  return t;
}

// The ORM modules are loaded from the application's own dependencies, only when one of their
// transactions is passed in (optional peer dependencies).
let kyselyModule: Promise<typeof import('kysely')> | undefined;
let drizzleModule: Promise<typeof import('drizzle-orm')> | undefined;

function load<T>(name: string, importer: () => Promise<T>): Promise<T> {
  return importer().catch((e: unknown) => {
    throw new Error(
      `@highwater/client: a ${name} transaction was passed but the package "${name}" cannot be loaded ` +
        `from @highwater/client's location (${(e as Error).message}); install ${name} in the application`,
      { cause: e },
    );
  });
}

export function runner(tx: Executor): Runner {
  const any = tx as unknown as Record<string, unknown>;
  if (tx == null || (typeof tx !== 'object' && typeof tx !== 'function')) {
    throw new TypeError('@highwater/client: expected a pg client or an ORM transaction, got ' + String(tx));
  }
  if (typeof any.$queryRawUnsafe === 'function') {
    // Prisma (first: its model delegates are properties, and a model may be named `query`).
    // PostgreSQL's own `$n` placeholders, the values as separate arguments.
    const prisma = tx as PrismaLike;
    return {
      kind: 'prisma',
      async run(text, values) {
        return rowsOf(await call(prisma, '$queryRawUnsafe', text, ...values.map((v) => v ?? null)));
      },
    };
  }
  if (typeof tx === 'function' && typeof any.raw === 'function') {
    // Knex: `?` placeholders, bindings in order.
    const knex = tx as KnexLike;
    return {
      kind: 'knex',
      async run(text, values) {
        const { qmarks, indexes } = template(text);
        const bindings = indexes.map((i) => values[i] ?? null);
        return rowsOf(await call(knex, 'raw', qmarks, bindings));
      },
    };
  }
  if (typeof any.executeQuery === 'function') {
    const kysely = tx as KyselyLike;
    return {
      kind: 'kysely',
      async run(text, values) {
        kyselyModule ??= load('kysely', () => import('kysely'));
        const { CompiledQuery } = await kyselyModule;
        const q = CompiledQuery.raw(text, values.map((v) => v ?? null));
        return rowsOf(await call(kysely, 'executeQuery', q));
      },
    };
  }
  if (typeof any.query === 'function') {
    const q = tx as Queryable;
    return {
      kind: 'pg',
      async run(text, values) {
        return rowsOf(await call(q, 'query', text, values.map((v) => v ?? null)));
      },
    };
  }
  if (typeof any.execute === 'function') {
    const drizzle = tx as DrizzleLike;
    return {
      kind: 'drizzle',
      async run(text, values) {
        drizzleModule ??= load('drizzle-orm', () => import('drizzle-orm'));
        const { sql } = await drizzleModule;
        // As the tagged template `sql\`…${v}…\`` builds it: the text between placeholders as its
        // strings, the values (strings or null) as plain parameters. sql.raw/sql.param/sql.join
        // built the same query at about 50 µs more per statement (Drizzle checks each Param
        // object's class against a dozen entity kinds when it renders the query).
        const { strings, indexes } = template(text);
        // (Anything but a string would be read by Drizzle as SQL, a column or a list: wrapped.)
        const params = indexes.map((i) => {
          const v = values[i] ?? null;
          return v === null || typeof v === 'string' ? v : sql.param(v);
        });
        return rowsOf(await call(drizzle, 'execute', sql(strings, ...params)));
      },
    };
  }
  throw new TypeError(
    '@highwater/client: expected a pg Client/PoolClient/Pool, a TypeORM QueryRunner/EntityManager, ' +
      'or a Drizzle, Kysely, Knex or Prisma database or transaction',
  );
}
