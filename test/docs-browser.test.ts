/**
 * /docs in a real browser (Debian's headless Chromium driven by playwright-core): Swagger UI loads
 * from the daemon alone (no request leaves it), a request sent from the page without the key gets
 * 401, and after "Authorize" with the session key the same request returns the conversation list.
 * A screenshot is saved under test/artifacts/ (not in git).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { ROOT, startDaemon, type DaemonHandle } from './support/daemon.js';

const KEY = 'docs-browser-key-0123456789';
const CHROMIUM = '/usr/bin/chromium';
let d: DaemonHandle;
let browser: Browser;

before(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is required (.ci/run installs it)`);
  d = await startDaemon({ SESSION_API_KEY: KEY });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox'], timeout: 60_000 });
});
after(async () => {
  await browser?.close();
  await d?.stop();
});

describe('/docs in headless Chromium', { timeout: 300_000 }, () => {
  test('Swagger UI loads offline from the daemon, authorizes with the session key and sends a request from the page', async () => {
    const created = await d.req('POST', '/api/conversations', {}, { 'x-session-api-key': KEY });
    assert.equal(created.status, 200);
    const id = created.body.conversation_id as string;

    const page = await browser.newPage({ viewport: { width: 1280, height: 1600 } });
    page.setDefaultTimeout(30_000);
    const elsewhere: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(d.url) && !r.url().startsWith('data:')) elsewhere.push(r.url());
    });
    const pageErrors: string[] = [];
    page.on('pageerror', (e) => pageErrors.push(String(e)));

    await page.goto(`${d.url}/docs`);
    await page.locator('.swagger-ui .info .title', { hasText: 'Parley' }).waitFor();

    // GET /api/conversations, sent from the page
    const op = page.locator('.opblock-get', { has: page.locator('.opblock-summary-path[data-path="/api/conversations"]') });
    await op.locator('.opblock-summary').first().click();
    const execute = async () => {
      await op.locator('button.execute').click();
      const status = op.locator('.live-responses-table .response .response-col_status').first();
      await status.waitFor();
      const text = (await status.innerText()).trim();
      const body = await op.locator('.live-responses-table .response-col_description pre').first().innerText();
      await op
        .locator('button.btn-clear')
        .click()
        .catch(() => {});
      return { text, body };
    };
    const without = await execute();
    assert.match(without.text, /^401/, `without the key: ${without.text}`);

    await page.locator('.auth-wrapper button.authorize').click();
    const dialog = page.locator('.dialog-ux .modal-ux');
    await dialog.locator('input[type="text"], input[type="password"]').first().fill(KEY);
    await dialog.locator('button.authorize[type="submit"], .auth-btn-wrapper button.authorize').first().click();
    await dialog.locator('button.btn-done, button.close-modal').first().click();

    const authorized = await execute();
    assert.match(authorized.text, /^200/, `with the key: ${authorized.text}`);
    assert.ok(authorized.body.includes(id), 'the page shows the conversation list with the one created');

    // run the request once more and keep the response on screen for the screenshot
    await op.locator('button.execute').click();
    await op.locator('.live-responses-table .response-col_status', { hasText: '200' }).first().waitFor();
    const dir = path.join(ROOT, 'test', 'artifacts');
    fs.mkdirSync(dir, { recursive: true });
    await page.screenshot({ path: path.join(dir, 'docs.png'), fullPage: false });

    assert.deepEqual(elsewhere, [], 'the page loads nothing from outside the daemon');
    assert.deepEqual(pageErrors, []);
    await page.close();
  });
});
