#!/usr/bin/env node
// highwater-codegen: the registered JSON Schemas (highwater.event_types) turned into types by a
// maintained generator per language: json-schema-to-typescript (ts), datamodel-code-generator
// (python, the `datamodel-codegen` executable), github.com/atombender/go-jsonschema (go, through
// `go run`). This file only reads the registry, names the modules and writes the index; the
// types themselves are the generators'.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The Go generator, pinned: `go run` fetches exactly this version from the module proxy. */
export const GO_GENERATOR = 'github.com/atombender/go-jsonschema@v0.24.1';

const USAGE = `usage: highwater-codegen --lang ts|python|go --out DIR [--database-url URL]
                         [--python-generator PATH] [--go-package NAME] [--client-import SPEC]

Reads the event types registered in highwater.event_types and writes one module per event type
plus an index into DIR, generated from their JSON Schemas:
  ts      json-schema-to-typescript: <Type>.ts and index.ts (HighwaterEvent, a typed append)
  python  datamodel-code-generator (datamodel-codegen on PATH, or --python-generator): pydantic
          v2 models, <type>.py and __init__.py (PAYLOADS, validate_payload)
  go      ${GO_GENERATOR} through \`go run\`: <type>.go and
          event_types.go in package --go-package (default: the last element of DIR)

  --database-url URL        the database (default: $DATABASE_URL)
  --client-import SPEC      ts: where the index imports append from (default @highwater/client)
  --no-timestamp            leave the generation time out of the headers`;

interface Options {
  lang: 'ts' | 'python' | 'go';
  out: string;
  databaseUrl: string;
  pythonGenerator: string;
  goPackage: string | undefined;
  clientImport: string;
  timestamp: boolean;
}

export interface RegisteredType {
  eventType: string;
  schema: Record<string, unknown> | boolean | null;
  description: string | null;
}

class UsageError extends Error {}

function parseArgs(argv: string[]): Options {
  const o: Partial<Options> = {
    databaseUrl: process.env.DATABASE_URL ?? '',
    pythonGenerator: 'datamodel-codegen',
    clientImport: '@highwater/client',
    timestamp: true,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [flag, inline] = a.startsWith('--') && a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = () => {
      if (inline !== undefined) return inline;
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case '--lang': {
        const v = value();
        if (v !== 'ts' && v !== 'python' && v !== 'go') throw new UsageError(`--lang must be ts, python or go, not ${v}`);
        o.lang = v;
        break;
      }
      case '--out':
        o.out = value();
        break;
      case '--database-url':
        o.databaseUrl = value();
        break;
      case '--python-generator':
        o.pythonGenerator = value();
        break;
      case '--go-package':
        o.goPackage = value();
        break;
      case '--client-import':
        o.clientImport = value();
        break;
      case '--no-timestamp':
        o.timestamp = false;
        break;
      case '-h':
      case '--help':
        console.log(USAGE);
        process.exit(0);
      // falls through (never reached)
      default:
        throw new UsageError(`unknown argument ${a}`);
    }
  }
  if (!o.lang) throw new UsageError('--lang is required');
  if (!o.out) throw new UsageError('--out is required');
  if (!o.databaseUrl) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  return o as Options;
}

/** The database as the header names it: no password, no query string. */
export function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    u.password = '';
    u.search = '';
    return u.toString();
  } catch {
    return '(a connection string given in DATABASE_URL)';
  }
}

export async function readRegistry(databaseUrl: string): Promise<RegisteredType[]> {
  let pg;
  try {
    pg = (await import('pg')).default;
  } catch {
    throw new Error('highwater-codegen needs node-postgres: npm install pg');
  }
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ event_type: string; json_schema: RegisteredType['schema']; description: string | null }>(
      'SELECT event_type, json_schema, description FROM highwater.event_types ORDER BY event_type COLLATE "C"',
    );
    return rows.map((r) => ({ eventType: r.event_type, schema: r.json_schema, description: r.description }));
  } finally {
    await client.end();
  }
}

/** `OrderPlaced` → `OrderPlaced`, `order.placed-v2` → `OrderPlacedV2`: a type name in every language. */
export function typeName(eventType: string): string {
  const parts = eventType.split(/[^A-Za-z0-9]+/).filter(Boolean);
  let name = parts.map((p) => p[0]!.toUpperCase() + p.slice(1)).join('');
  if (name === '' || /^[0-9]/.test(name)) name = 'E' + name;
  return name;
}

/** `OrderPlaced` → `order_placed`: a Python module or Go file name. */
export function snakeName(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .toLowerCase();
}

function named(types: RegisteredType[]): Array<RegisteredType & { name: string }> {
  const seen = new Map<string, string>();
  return types.map((t) => {
    const name = typeName(t.eventType);
    const other = seen.get(name.toLowerCase());
    if (other !== undefined) {
      throw new Error(`event types ${JSON.stringify(other)} and ${JSON.stringify(t.eventType)} both become the type name ${name}`);
    }
    seen.set(name.toLowerCase(), t.eventType);
    return { ...t, name };
  });
}

/** The schema the generators get: the registry's description as the root's when it has none. */
function schemaFor(t: RegisteredType): Record<string, unknown> | null {
  if (t.schema === null || typeof t.schema !== 'object') return null;
  const s = structuredClone(t.schema);
  if (t.description && s.description === undefined) s.description = t.description;
  return s;
}

function headerLines(o: Options, what: string): string[] {
  return [
    `Generated by highwater-codegen --lang ${o.lang} from the event types registered in`,
    `${describeDatabase(o.databaseUrl)} (highwater.event_types)${o.timestamp ? ` at ${new Date().toISOString()}` : ''}.`,
    what,
    'DO NOT EDIT: change the schema with `highwater event-types register` and run the generator again.',
  ];
}

function run(cmd: string, args: string[], opts: { cwd?: string; input?: string } = {}): string {
  const r = spawnSync(cmd, args, { cwd: opts.cwd, input: opts.input, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (exit ${r.status}):\n${r.stderr || r.stdout}`);
  }
  return r.stdout;
}

// ---------------------------------------------------------------------------------------- ts

async function generateTs(o: Options, types: Array<RegisteredType & { name: string }>): Promise<string[]> {
  let compile;
  try {
    ({ compile } = await import('json-schema-to-typescript'));
  } catch {
    throw new Error('highwater-codegen --lang ts needs json-schema-to-typescript: npm install --save-dev json-schema-to-typescript@16.0.0');
  }
  const banner = (what: string) => ['/*', ...headerLines(o, what).map((l) => ` * ${l}`), ' */'].join('\n');
  const written: string[] = [];
  for (const t of types) {
    const schema = schemaFor(t);
    let body: string;
    if (schema) {
      // The root is named after the event type, whatever title the schema gives it.
      body = await compile({ ...schema, title: t.name } as never, t.name, {
        bannerComment: banner(`The payload of ${JSON.stringify(t.eventType)}, by json-schema-to-typescript.`),
        strictIndexSignatures: true,
      });
    } else {
      body =
        banner(`${JSON.stringify(t.eventType)} has no JSON Schema: its payload is any JSON value.`) +
        `\n\nexport type ${t.name} = unknown;\n`;
    }
    body += `\n/** The registered event type whose payload ${t.name} is. */\nexport const ${t.name}EventType = ${JSON.stringify(t.eventType)};\n`;
    writeFileSync(join(o.out, `${t.name}.ts`), body);
    written.push(`${t.name}.ts`);
  }
  const imp = JSON.stringify(o.clientImport);
  const lines = [
    banner('The union of the registered event types, and append/appendPosition typed by it.'),
    '',
    `import { append as untypedAppend, appendPosition as untypedAppendPosition } from ${imp};`,
    `import type { Appended, Executor, NewEvent } from ${imp};`,
    ...types.map((t) => `import type { ${t.name} } from './${t.name}.js';`),
    '',
    ...types.map((t) => `export * from './${t.name}.js';`),
    '',
    '/** Each registered event type and the type of its payload. */',
    'export interface HighwaterEventPayloads {',
    ...types.map((t) => `  ${JSON.stringify(t.eventType)}: ${t.name};`),
    '}',
    '',
    'export type HighwaterEventType = keyof HighwaterEventPayloads;',
    '',
    '/** An event to append: discriminated by `type`, whose `payload` must match that type\'s schema. */',
    'export type HighwaterEvent = {',
    "  [K in HighwaterEventType]: Omit<NewEvent, 'type' | 'payload'> & { type: K; payload: HighwaterEventPayloads[K] };",
    '}[HighwaterEventType];',
    '',
    '/** The event types the registry held when this was generated. */',
    `export const HIGHWATER_EVENT_TYPES = ${JSON.stringify(types.map((t) => t.eventType))} as const;`,
    '',
    '/** `append` of @highwater/client, accepting only registered types with matching payloads. */',
    'export function append(tx: Executor, event: HighwaterEvent): Promise<string> {',
    '  return untypedAppend(tx, event);',
    '}',
    '',
    '/** `appendPosition` of @highwater/client, accepting only registered types with matching payloads. */',
    'export function appendPosition(tx: Executor, event: HighwaterEvent): Promise<Appended> {',
    '  return untypedAppendPosition(tx, event);',
    '}',
    '',
  ];
  writeFileSync(join(o.out, 'index.ts'), lines.join('\n'));
  written.push('index.ts');
  return written;
}

// ------------------------------------------------------------------------------------ python

function generatePython(o: Options, types: Array<RegisteredType & { name: string }>): string[] {
  const probe = spawnSync(o.pythonGenerator, ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new Error(
      `highwater-codegen --lang python runs datamodel-codegen (datamodel-code-generator, PyPI), and ` +
        `${JSON.stringify(o.pythonGenerator)} did not run${probe.error ? ` (${probe.error.message})` : ''}. Install it with\n` +
        `  pip install 'datamodel-code-generator==0.97.0'\n` +
        `(or, hash-pinned: pip install --require-hashes -r codegen/requirements-python.txt from this package)\n` +
        `and put it on PATH or pass --python-generator PATH/TO/datamodel-codegen.`,
    );
  }
  const header = (what: string) => headerLines(o, what).map((l) => `# ${l}`).join('\n');
  const work = mkdtempSync(join(tmpdir(), 'highwater-codegen-'));
  const written: string[] = [];
  try {
    for (const t of types) {
      const schema = schemaFor(t);
      if (!schema) continue;
      const input = join(work, `${t.name}.json`);
      writeFileSync(input, JSON.stringify(schema));
      const file = `${snakeName(t.name)}.py`;
      run(o.pythonGenerator, [
        '--input', input,
        '--input-file-type', 'jsonschema',
        '--output', join(o.out, file),
        '--output-model-type', 'pydantic_v2.BaseModel',
        '--class-name', t.name,
        '--target-python-version', '3.10',
        '--use-annotated',
        // JSON types, not coerced: "12" is not a number, as the server's schema check says.
        '--strict-types', 'str', 'bytes', 'int', 'float', 'bool',
        '--field-constraints',
        '--use-standard-collections',
        '--use-union-operator',
        '--disable-timestamp',
        '--custom-file-header', header(`The payload of ${JSON.stringify(t.eventType)}, by datamodel-code-generator.`),
      ]);
      written.push(file);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const withSchema = types.filter((t) => schemaFor(t));
  const lines = [
    header('The registered event types and their payload models.'),
    '',
    'from __future__ import annotations',
    '',
    'from typing import Any',
    '',
    'from pydantic import BaseModel',
    '',
    ...withSchema.map((t) => `from .${snakeName(t.name)} import ${t.name}`),
    '',
    '#: Each registered event type and the model of its payload (None: it has no schema).',
    'PAYLOADS: dict[str, type[BaseModel] | None] = {',
    ...types.map((t) => `    ${JSON.stringify(t.eventType)}: ${schemaFor(t) ? t.name : 'None'},`),
    '}',
    '',
    '',
    'def validate_payload(event_type: str, payload: Any) -> Any:',
    '    """The payload checked against its event type\'s model (pydantic.ValidationError if it',
    '    does not match; KeyError for a type that was not registered), as JSON-ready data."""',
    '    model = PAYLOADS[event_type]',
    '    if model is None:',
    '        return payload',
    '    return model.model_validate(payload).model_dump(mode="json", exclude_unset=True, by_alias=True)',
    '',
    '',
    `__all__ = ["PAYLOADS", "validate_payload"${withSchema.map((t) => `, ${JSON.stringify(t.name)}`).join('')}]`,
    '',
  ];
  writeFileSync(join(o.out, '__init__.py'), lines.join('\n'));
  written.push('__init__.py');
  return written;
}

// ---------------------------------------------------------------------------------------- go

function goPackageName(o: Options): string {
  if (o.goPackage) return o.goPackage;
  const base = o.out.replace(/[\\/]+$/, '').split(/[\\/]/).pop() ?? '';
  const name = base.toLowerCase().replace(/[^a-z0-9_]/g, '');
  return /^[a-z_]/.test(name) ? name : 'events';
}

function generateGo(o: Options, types: Array<RegisteredType & { name: string }>): string[] {
  const pkg = goPackageName(o);
  const probe = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new Error(`highwater-codegen --lang go runs \`go run ${GO_GENERATOR}\` and needs the go command on PATH (https://go.dev/dl/)`);
  }
  const header = (what: string) => headerLines(o, what).map((l) => `// ${l}`).join('\n');
  const work = mkdtempSync(join(tmpdir(), 'highwater-codegen-'));
  const written: string[] = [];
  try {
    for (const t of types) {
      const schema = schemaFor(t);
      if (!schema) continue;
      // The struct is named after the event type (--struct-name-from-title on the root's title).
      const input = join(work, `${t.name}.json`);
      writeFileSync(input, JSON.stringify({ ...schema, title: t.name }));
      const file = `${snakeName(t.name)}.go`;
      // Run outside any module so that `go run pkg@version` resolves the pinned version alone.
      const code = run('go', ['run', GO_GENERATOR, '--package', pkg, '--struct-name-from-title', '--output', '-', input], { cwd: work });
      writeFileSync(join(o.out, file), `${header(`The payload of ${JSON.stringify(t.eventType)}, by go-jsonschema.`)}\n\n${code}`);
      written.push(file);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const lines = [
    `${header('The registered event types.')}`,
    '',
    `package ${pkg}`,
    '',
    '// The registered event types, as the server names them.',
    'const (',
    ...types.map((t) => `\tEventType${t.name} = ${JSON.stringify(t.eventType)}`),
    ')',
    '',
    ...types
      .filter((t) => schemaFor(t))
      .flatMap((t) => [`// EventType is the registered event type whose payload ${t.name} is.`, `func (${t.name}) EventType() string { return EventType${t.name} }`, '']),
  ];
  writeFileSync(join(o.out, 'event_types.go'), lines.join('\n'));
  written.push('event_types.go');
  // go-jsonschema's output is gofmt'ed already; the index is made so here.
  spawnSync('gofmt', ['-w', join(o.out, 'event_types.go')]);
  return written;
}

export async function main(argv: string[]): Promise<number> {
  let o: Options;
  try {
    o = parseArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`highwater-codegen: ${e.message}\n\n${USAGE}`);
      return 2;
    }
    throw e;
  }
  try {
    const types = named(await readRegistry(o.databaseUrl));
    if (types.length === 0) throw new Error('no event types are registered (highwater event-types register NAME --schema FILE)');
    mkdirSync(o.out, { recursive: true });
    const written =
      o.lang === 'ts' ? await generateTs(o, types) : o.lang === 'python' ? generatePython(o, types) : generateGo(o, types);
    console.log(`highwater-codegen: ${types.length} event types, wrote ${written.length} files to ${o.out}: ${written.join(', ')}`);
    return 0;
  } catch (e) {
    console.error(`highwater-codegen: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

// Run as the bin (not when imported).
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
