/**
 * Debian's Chromium (`/usr/bin/chromium`, headless) driven by playwright-core, for the tests of
 * the pages the daemon serves. `watch` records what a page did that a test asserts never happens:
 * requests that leave the daemon, uncaught errors.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { ROOT } from './daemon.js';

const CHROMIUM = '/usr/bin/chromium';
export const ARTIFACTS = path.join(ROOT, 'test', 'artifacts');

export async function launchChromium(): Promise<Browser> {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is required (.ci/run installs it)`);
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    timeout: 60_000,
  });
}

export interface Watched {
  /** Requests to anywhere but `origin` (data: and blob: URLs aside). */
  elsewhere: string[];
  /** Uncaught errors and Content-Security-Policy violations. */
  errors: string[];
}

export function watch(page: Page, origin: string): Watched {
  const w: Watched = { elsewhere: [], errors: [] };
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith(origin) && !u.startsWith('data:') && !u.startsWith('blob:')) w.elsewhere.push(u);
  });
  page.on('pageerror', (e) => w.errors.push(String(e)));
  // what the page's Content-Security-Policy refused: a rule that breaks the page shows here
  page.on('console', (m) => m.type() === 'error' && /Content.Security.Policy/i.test(m.text()) && w.errors.push(m.text()));
  return w;
}

export async function screenshot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
}
