// The console in Debian's Chromium through playwright-core (test.sh starts everything it uses).
// One browser context: the steps run in order and share the login, as a person on call would.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.HW_CONSOLE_URL;
const shots = process.env.HW_CONSOLE_SCREENSHOTS;
const HOSTILE = '<img src=x onerror=alert(1)>';
// axe-core as package-lock.json pins it, from node_modules: nothing fetched at run time.
const AXE = readFileSync(new URL('./node_modules/axe-core/axe.min.js', import.meta.url), 'utf8');

const sql = (q) =>
  execFileSync(process.env.PSQL, [process.env.DATABASE_URL, '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-c', q], {
    encoding: 'utf8',
  }).trim();

let browser, context, page;
const dialogs = [];
const cspViolations = [];
let hostileId;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  // An alert is the hostile payload running; a CSP report is a script or style the policy blocked.
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  page.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text()); });
  hostileId = Number(sql("SELECT event_id FROM highwater.dead_letters"));
});

after(async () => {
  await browser?.close();
});

test('the overview lists the consumer and refreshes itself live (htmx runs under the CSP)', async () => {
  await page.goto(`${base}/`);
  await assert.doesNotReject(page.getByRole('link', { name: 'orders-projection' }).first().waitFor());
  assert.match(await page.locator('#overview').innerText(), /The fence holds nothing back/);
  // htmx polls the table every 5 s: its request is the proof the embedded script loaded and runs.
  const refresh = await page.waitForResponse((r) => r.url().includes('/overview/table'), { timeout: 8000 });
  assert.equal(refresh.status(), 200);
  await page.screenshot({ path: join(shots, 'overview.png'), fullPage: true });
});

test('the dead-letters page shows the hostile payload as text and runs nothing', async () => {
  await page.goto(`${base}/dead-letters`);
  const payload = page.locator('pre.payload').filter({ hasText: HOSTILE });
  await payload.waitFor();
  assert.equal(await payload.innerText(), JSON.stringify(HOSTILE), 'the payload, pretty JSON, as text');
  assert.equal(await page.locator('main img').count(), 0, 'no <img> element was made of it');
  assert.equal(await page.getByRole('checkbox').count(), 0, 'nothing to select without a login');
  await page.screenshot({ path: join(shots, 'dead-letters.png'), fullPage: true });
});

test('an action without a login is refused (401), nothing changed', async () => {
  const csrf = await page.locator('input[name=csrf]').first().getAttribute('value');
  const r = await page.request.post(`${base}/dead-letters/execute`, {
    form: { csrf, do: 'redrive-selection', key: JSON.stringify(['orders-projection', '__shared__', hostileId]), confirm: 'yes' },
  });
  assert.equal(r.status(), 401);
  assert.equal(sql('SELECT count(*) FROM highwater.dead_letters WHERE redrive_requested_at IS NOT NULL'), '0');
});

test('a login with an ops token acts as console:ops-token-1', async () => {
  await page.goto(`${base}/login`);
  await page.getByLabel('Ops token').fill(process.env.HW_CONSOLE_TOKEN);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL(`${base}/`);
  assert.match(await page.locator('header').innerText(), /Acting as console:ops-token-1/);
  const cookie = (await context.cookies()).find((c) => c.name === 'hw_console');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
});

test('a forged CSRF token is refused (403), nothing changed', async () => {
  const r = await page.request.post(`${base}/dead-letters/execute`, {
    form: { csrf: 'f'.repeat(64), do: 'redrive-selection', key: JSON.stringify(['orders-projection', '__shared__', hostileId]), confirm: 'yes' },
  });
  assert.equal(r.status(), 403);
  assert.equal(sql('SELECT count(*) FROM highwater.dead_letters WHERE redrive_requested_at IS NOT NULL'), '0');
});

test('the sink fixed, the dead letter is redriven from the page after its dry run and delivered exactly once', async () => {
  sql('DELETE FROM verdict');
  await page.goto(`${base}/dead-letters`);
  await page.getByLabel(`select event ${hostileId} of orders-projection (__shared__)`).check();
  await page.getByLabel('Reason').fill('sink accepts strings now');
  await page.getByRole('button', { name: 'Redrive selected' }).click();
  await page.waitForURL(`${base}/dead-letters/preview`);
  assert.match(await page.locator('#dry-run-count').innerText(), /This would redrive 1 dead letters/);
  assert.equal(sql('SELECT count(*) FROM highwater.dead_letters WHERE redrive_requested_at IS NOT NULL'), '0', 'a dry run changes nothing');
  await page.screenshot({ path: join(shots, 'dry-run.png'), fullPage: true });
  await page.getByRole('button', { name: 'redrive 1' }).click();
  await page.waitForURL(`${base}/dead-letters/execute`);
  assert.match(await page.locator('#outcome').innerText(), /Requested the redrive of 1 dead letters/);
  const deadline = Date.now() + 20000;
  while (sql(`SELECT count(*) FROM seen WHERE event_id = ${hostileId}`) !== '1' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(sql(`SELECT count(*) FROM seen WHERE event_id = ${hostileId}`), '1', 'delivered');
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(sql(`SELECT count(*) FROM seen WHERE event_id = ${hostileId}`), '1', 'exactly once');
  assert.equal(sql('SELECT redrive_by || \'|\' || redrive_reason FROM highwater.dead_letters'), 'console:ops-token-1|sink accepts strings now');
  await page.goto(`${base}/dead-letters?state=any`);
  await page.locator('.state-redriven').first().waitFor();
  await page.screenshot({ path: join(shots, 'redriven.png'), fullPage: true });
  await page.goto(`${base}/consumers/orders-projection`);
  await page.screenshot({ path: join(shots, 'consumer.png'), fullPage: true });
});

test('a disabled consumer enabled from its page: its lag falls on the overview while the dispatcher drains it', async () => {
  await page.goto(`${base}/?q=ticks-drain`);
  const row = page.locator('#overview tbody tr').filter({ hasText: 'ticks-drain' });
  const cell = (i) => row.locator('td').nth(i).innerText();
  assert.equal(await cell(2), 'disabled');
  assert.equal(await cell(3), '300', 'the backlog waits on the disabled shard');
  // The page stays; only htmx swaps the table (a reload would lose this mark).
  await page.evaluate(() => { window.hwNotReloaded = true; });
  const other = await context.newPage();
  await other.goto(`${base}/consumers/ticks-drain`);
  await other.getByLabel('Reason').fill('backlog drained on purpose');
  await other.getByRole('button', { name: 'Enable', exact: true }).click();
  await other.waitForURL(`${base}/consumers/ticks-drain/act`);
  assert.match(await other.locator('#outcome').innerText(), /eventconsumer\/ticks-drain enabled/);
  await other.close();
  const seen = [300];
  const deadline = Date.now() + 30000;
  while (seen.at(-1) !== 0 && Date.now() < deadline) {
    const lag = Number(await cell(3));
    if (lag !== seen.at(-1)) seen.push(lag);
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(seen.at(-1), 0, `drained: ${seen}`);
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i] < seen[i - 1], `the lag only falls: ${seen}`);
  assert.equal(await page.evaluate(() => window.hwNotReloaded), true, 'seen through the live refresh, not a reload');
  assert.ok(Number(await cell(7)) > 0, `a delivery rate: ${await cell(7)}`);
  assert.equal(sql('SELECT count(*) FROM drained'), '300');
  await page.goto(`${base}/`);
  await page.screenshot({ path: join(shots, 'overview.png'), fullPage: true });
  await page.goto(`${base}/consumers/ticks-drain`);
  await page.screenshot({ path: join(shots, 'consumer-actions.png'), fullPage: true });
});

test('a stream, as stored and upcast, its payloads as text, its causation and correlation as links; the event types', async () => {
  await page.goto(`${base}/streams?type=order&id=o-2`);
  const payload = page.locator('tr[id^=event-] pre.payload').first();
  assert.equal(await payload.innerText(), JSON.stringify(HOSTILE), 'as text');
  assert.equal(await page.locator('main img').count(), 0);
  await page.goto(`${base}/streams?type=tick&id=t-7`);
  assert.match(await page.locator('pre.upcast').innerText(), /"unit": "tick"/, 'upcast to version 2');
  await page.goto(`${base}/streams?type=order&id=o-1`);
  await page.screenshot({ path: join(shots, 'stream.png'), fullPage: true });
  await page.getByRole('link', { name: 'event 1' }).click();
  await page.waitForURL(`${base}/streams?type=order&id=o-1#event-1`);
  await page.locator('a[href^="/correlations/"]').first().click();
  await page.waitForURL(/\/correlations\//);
  assert.equal(await page.locator('main tbody tr').count(), 2, 'both events of the correlation');
  await page.goto(`${base}/event-types`);
  await page.getByRole('link', { name: 'OrderPlaced' }).click();
  await page.waitForURL(`${base}/event-types/OrderPlaced`);
  assert.match(await page.locator('main table').innerText(), /^1\t4\b/m, 'version 1 holds the 4 events');
  await page.goto(`${base}/event-types/Tick`);
  assert.match(await page.locator('main table').innerText(), /^1\t300\b/m);
  assert.match(await page.locator('main table').innerText(), /^2\t0\b/m);
  await page.screenshot({ path: join(shots, 'event-type.png'), fullPage: true });
});

test('axe-core finds no accessibility violation on any page', async () => {
  const pages = ['/', '/dead-letters', '/dead-letters?state=any', '/consumers/orders-projection',
    '/consumers/ticks-drain', '/streams', '/streams?type=order&id=o-1', '/event-types',
    '/event-types/OrderPlaced', '/event-types/Tick', '/correlations/none', '/login'];
  const found = [];
  for (const p of pages) {
    await page.goto(`${base}${p}`);
    // Evaluated through the DevTools protocol, not a <script>: the page's CSP stays as it is.
    await page.evaluate(AXE);
    const r = await page.evaluate(() => window.axe.run(document));
    for (const v of r.violations) {
      found.push(`${p}: ${v.id} (${v.impact}) ${v.help}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
    }
  }
  assert.deepEqual(found, []);
});

test('no dialog opened and no Content-Security-Policy violation on any page', () => {
  assert.deepEqual(dialogs, []);
  assert.deepEqual(cspViolations, []);
});
