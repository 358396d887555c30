// highwater-codegen against the real registry test.sh prepared (fixtures/event-types): the
// generated TypeScript type-checks a good payload and makes `tsc --noEmit` fail on payloads that
// violate the schema, and the server refuses those same payloads (InvalidPayload); the generated
// pydantic models accept the good payload and reject the bad ones; the generated Go package
// vets and builds, and a program assigning a wrong type does not compile.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { InvalidPayload, append } from '@highwater/client';
import { DATABASE_URL, newPool, uid } from './harness.js';

const PKG = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(PKG, 'dist', 'codegen.js');
const TMP = process.env.HW_TEST_TMP!;

function sh(cmd: string, args: string[], cwd?: string, env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', env: { ...process.env, ...env }, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function ok(cmd: string, args: string[], cwd?: string, env: NodeJS.ProcessEnv = {}): string {
  const r = sh(cmd, args, cwd, env);
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} failed:\n${r.out}`);
  return r.out;
}

function codegen(lang: string, out: string, ...extra: string[]): string {
  return ok(process.execPath, [CLI, '--lang', lang, '--out', out, '--database-url', DATABASE_URL, ...extra]);
}

// The payloads, shared by every language's checks and the server's.
const GOOD_ORDER = { order_id: 'o-1', total: 12.5, items: ['book'] };
const GOOD_SHIPMENT = { shipment_id: 's-1', carrier: 'dhl', parcels: 2, address: { city: 'Berlin' } };
/** A required field of the wrong type. */
const BAD_TYPE = { order_id: 'o-2', total: '12.50' };
/** A required field missing. */
const BAD_MISSING = { shipment_id: 's-2', carrier: 'ups' };

const has = (cmd: string) => !spawnSync(cmd, ['version'], { encoding: 'utf8' }).error;

describe('highwater-codegen', () => {
  let pool: pg.Pool;
  before(() => {
    pool = newPool(2);
  });
  after(async () => {
    await pool.end();
  });

  test('refuses bad usage and names the missing generator', () => {
    const r = sh(process.execPath, [CLI, '--lang', 'rust', '--out', join(TMP, 'x')]);
    assert.equal(r.status, 2);
    assert.match(r.out, /--lang must be ts, python or go/);
    const p = sh(process.execPath, [CLI, '--lang', 'python', '--out', join(TMP, 'x'), '--database-url', DATABASE_URL, '--python-generator', join(TMP, 'no-such-datamodel-codegen')]);
    assert.equal(p.status, 1);
    assert.match(p.out, /pip install 'datamodel-code-generator==/);
  });

  describe('ts', () => {
    const dir = join(TMP, 'codegen-ts');
    before(() => {
      mkdirSync(join(dir, 'node_modules', '@highwater'), { recursive: true });
      // An application with this package and pg installed: links into this package's tree.
      symlinkSync(PKG, join(dir, 'node_modules', '@highwater', 'client'));
      symlinkSync(join(PKG, 'node_modules', 'pg'), join(dir, 'node_modules', 'pg'));
      symlinkSync(join(PKG, 'node_modules', '@types'), join(dir, 'node_modules', '@types'));
      const out = codegen('ts', join(dir, 'events'));
      assert.match(out, /wrote \d+ files to .*: .*OrderPlaced\.ts, .*ShipmentDispatched\.ts, .*index\.ts$/m);
      const compilerOptions = {
        target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true,
        exactOptionalPropertyTypes: true, skipLibCheck: true, types: ['node'], outDir: 'out',
      };
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
      writeFileSync(join(dir, 'tsconfig.good.json'), JSON.stringify({ compilerOptions, files: ['good.ts'] }));
      writeFileSync(join(dir, 'tsconfig.bad.json'), JSON.stringify({ compilerOptions, files: ['bad-type.ts', 'bad-missing.ts'] }));
      const program = (event: string) =>
        [
          "import pg from 'pg';",
          "import { append, type HighwaterEvent } from './events/index.js';",
          `const events: HighwaterEvent[] = ${event};`,
          'const client = new pg.Client({ connectionString: process.env.DATABASE_URL });',
          'await client.connect();',
          'for (const e of events) console.log(await append(client, e));',
          'await client.end();',
          '',
        ].join('\n');
      const ev = (type: string, payload: unknown) =>
        `{ streamType: 'order', streamId: ${JSON.stringify(uid('cg'))}, type: ${JSON.stringify(type)}, payload: ${JSON.stringify(payload)} }`;
      writeFileSync(join(dir, 'good.ts'), program(`[${ev('OrderPlaced', GOOD_ORDER)}, ${ev('ShipmentDispatched', GOOD_SHIPMENT)}, ${ev('Pinged', { any: 1 })}]`));
      writeFileSync(join(dir, 'bad-type.ts'), program(`[${ev('OrderPlaced', BAD_TYPE)}]`));
      writeFileSync(join(dir, 'bad-missing.ts'), program(`[${ev('ShipmentDispatched', BAD_MISSING)}]`));
    });

    test('the generated modules say where they come from and not to edit them', () => {
      const index = readFileSync(join(dir, 'events', 'index.ts'), 'utf8');
      assert.match(index, /Generated by highwater-codegen --lang ts from the event types registered in\n \* postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres/);
      assert.match(index, /DO NOT EDIT/);
      assert.match(index, /export type HighwaterEvent = \{/);
      assert.match(readFileSync(join(dir, 'events', 'OrderPlaced.ts'), 'utf8'), /export interface OrderPlaced \{/);
    });

    test('a correct payload type-checks, and the typed append stores it', async () => {
      ok(join(PKG, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.good.json'], dir);
      const ids = ok(process.execPath, [join('out', 'good.js')], dir, { DATABASE_URL }).trim().split('\n');
      assert.equal(ids.length, 3);
      const { rows } = await pool.query('SELECT event_type, payload FROM highwater.events WHERE id = ANY($1::bigint[]) ORDER BY id', [ids]);
      assert.deepEqual(rows.map((r) => r.event_type), ['OrderPlaced', 'ShipmentDispatched', 'Pinged']);
      assert.deepEqual(rows[0].payload, GOOD_ORDER);
    });

    test('payloads violating the schema fail tsc --noEmit', () => {
      const r = sh(join(PKG, 'node_modules', '.bin', 'tsc'), ['--noEmit', '-p', 'tsconfig.bad.json'], dir);
      assert.notEqual(r.status, 0, `tsc accepted the bad payloads:\n${r.out}`);
      // The wrong type of a required field, and the missing required field, each named.
      assert.match(r.out, /bad-type\.ts\(\d+,\d+\): error TS2322: [^\n]*type: "OrderPlaced"[^\n]*is not assignable to type 'HighwaterEvent'\.\n {2}The types of 'payload\.total' are incompatible between these types\.\n {4}Type 'string' is not assignable to type 'number'\./);
      assert.match(r.out, /bad-missing\.ts\(\d+,\d+\): error TS2322: [^\n]*type: "ShipmentDispatched"[^\n]*\n {2}Types of property 'payload' are incompatible\.\n {4}Property 'parcels' is missing in type .* but required in type 'ShipmentDispatched'\./);
      assert.equal(r.out.match(/error TS/g)?.length, 2, r.out);
    });

    test('the server refuses the same payloads (InvalidPayload)', async () => {
      for (const [type, payload, path] of [
        ['OrderPlaced', BAD_TYPE, '$.total'],
        ['ShipmentDispatched', BAD_MISSING, '$'],
      ] as const) {
        await assert.rejects(append(pool, { streamType: 'order', streamId: uid('cg'), type, payload }), (e) => {
          assert.ok(e instanceof InvalidPayload, String(e));
          assert.equal(e.eventType, type);
          assert.equal(e.path, path);
          return true;
        });
      }
    });
  });

  const venvGenerator = process.env.HW_CODEGEN_PYTHON_GENERATOR;
  describe('python', { skip: venvGenerator ? false : 'HW_CODEGEN_PYTHON_GENERATOR is not set (test.sh sets it)' }, () => {
    const dir = join(TMP, 'codegen-python');
    test('the generated pydantic models accept the good payload and reject the bad ones', () => {
      const out = codegen('python', join(dir, 'hw_events'), '--python-generator', venvGenerator!);
      assert.match(out, /: .*order_placed\.py, .*shipment_dispatched\.py, .*__init__\.py$/m);
      assert.match(readFileSync(join(dir, 'hw_events', 'order_placed.py'), 'utf8'), /^# Generated by highwater-codegen --lang python[\s\S]*DO NOT EDIT[\s\S]*class OrderPlaced\(BaseModel\)/);
      const script = [
        'import json, sys',
        'import pydantic',
        'from hw_events import OrderPlaced, ShipmentDispatched, PAYLOADS, validate_payload',
        'good_order, good_shipment, bad_type, bad_missing = json.loads(sys.argv[1])',
        'assert validate_payload("OrderPlaced", good_order) == good_order',
        'ShipmentDispatched.model_validate(good_shipment)',
        'assert PAYLOADS["Pinged"] is None and validate_payload("Pinged", {"x": 1}) == {"x": 1}',
        'for model, bad, field in [(OrderPlaced, bad_type, "total"), (ShipmentDispatched, bad_missing, "parcels")]:',
        '    try:',
        '        model.model_validate(bad)',
        '    except pydantic.ValidationError as e:',
        '        print(field, [err["type"] for err in e.errors() if err["loc"] == (field,)])',
        '    else:',
        '        raise SystemExit(f"{model.__name__} accepted {bad}")',
      ].join('\n');
      const python = join(venvGenerator!, '..', 'python');
      const printed = ok(python, ['-c', script, JSON.stringify([GOOD_ORDER, GOOD_SHIPMENT, BAD_TYPE, BAD_MISSING])], dir);
      assert.match(printed, /^total \['float_type'\]$/m);
      assert.match(printed, /^parcels \['missing'\]$/m);
    });
  });

  describe('go', { skip: has('go') ? false : 'no go command on PATH' }, () => {
    const dir = join(TMP, 'codegen-go');
    const env = { GOFLAGS: '-mod=mod', GOTOOLCHAIN: 'local' };
    before(() => {
      mkdirSync(join(dir, 'bad'), { recursive: true });
      const out = codegen('go', join(dir, 'hwevents'));
      assert.match(out, /: .*order_placed\.go, .*shipment_dispatched\.go, .*event_types\.go$/m);
      writeFileSync(join(dir, 'go.mod'), 'module example.com/app\n\ngo 1.22\n');
      writeFileSync(
        join(dir, 'main.go'),
        [
          'package main',
          '',
          'import (',
          '\t"encoding/json"',
          '\t"fmt"',
          '\t"os"',
          '',
          '\t"example.com/app/hwevents"',
          ')',
          '',
          'func main() {',
          '\tgood, _ := json.Marshal(hwevents.OrderPlaced{OrderId: "o-1", Total: 12.5, Items: []string{"book"}})',
          '\tfmt.Println(string(good))',
          '\tfor _, bad := range os.Args[1:] {',
          '\t\tvar s hwevents.ShipmentDispatched',
          '\t\tvar o hwevents.OrderPlaced',
          '\t\tfmt.Println(json.Unmarshal([]byte(bad), &s), "|", json.Unmarshal([]byte(bad), &o))',
          '\t}',
          '\tfmt.Println(hwevents.OrderPlaced{}.EventType(), hwevents.ShipmentDispatchedCarrierDhl)',
          '}',
          '',
        ].join('\n'),
      );
      writeFileSync(
        join(dir, 'bad', 'main.go'),
        ['package main', '', 'import "example.com/app/hwevents"', '', 'var _ = hwevents.OrderPlaced{OrderId: "o-2", Total: "12.50"}', '', 'func main() {}', ''].join('\n'),
      );
    });

    test('the generated package vets and builds, and decodes with the schema\'s checks', () => {
      assert.match(readFileSync(join(dir, 'hwevents', 'order_placed.go'), 'utf8'), /^\/\/ Generated by highwater-codegen --lang go[\s\S]*DO NOT EDIT[\s\S]*type OrderPlaced struct/);
      ok('go', ['vet', '.', './hwevents'], dir, env);
      ok('go', ['build', '-o', join(dir, 'app'), '.'], dir, env);
      const printed = ok(join(dir, 'app'), [JSON.stringify(BAD_MISSING), JSON.stringify(BAD_TYPE)], dir);
      assert.match(printed, /"order_id":"o-1"/);
      assert.match(printed, /field parcels in ShipmentDispatched: required/);
      assert.match(printed, /cannot unmarshal string into Go struct field .*total of type float64/);
      assert.match(printed, /^OrderPlaced dhl$/m);
    });

    test('a program assigning a wrong type does not compile', () => {
      const r = sh('go', ['build', '-o', join(dir, 'bad-app'), './bad'], dir, env);
      assert.notEqual(r.status, 0, `go build accepted the wrong type:\n${r.out}`);
      assert.match(r.out, /cannot use "12\.50" \(untyped string constant\) as float64 value in struct literal/);
    });
  });
});
