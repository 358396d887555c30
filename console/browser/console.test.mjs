// The console in Debian's Chromium through playwright-core (test.sh starts everything it uses).
// One browser context: the steps run in order and share the login, as a person on call would.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.HW_CONSOLE_URL;
const shots = process.env.HW_CONSOLE_SCREENSHOTS;
const HOSTILE = '<img src=x onerror=alert(1)>';

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

test('no dialog opened and no Content-Security-Policy violation on any page', () => {
  assert.deepEqual(dialogs, []);
  assert.deepEqual(cspViolations, []);
});
