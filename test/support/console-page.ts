/**
 * The web console's pages in Chromium, for test/console*.test.ts: a build that matches the
 * sources, tabs signed in with a key, the status chip, and the seqs the virtualised event list
 * renders (read by scrolling it from top to bottom).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { launchChromium, watch, type Watched } from './browser.js';
import { ensureBuilt, ROOT } from './daemon.js';

export const CONSOLE_DIR = path.join(ROOT, 'dist', 'console');

/** A browser and the tabs a test file opened, all closed by `close()`. */
export class ConsoleBrowser {
  private readonly pages: Page[] = [];
  private constructor(readonly browser: Browser) {}

  static async launch(): Promise<ConsoleBrowser> {
    await ensureBuilt(); // the console's sources are among the build's
    return new ConsoleBrowser(await launchChromium());
  }

  async newPage(origin: string): Promise<{ page: Page; w: Watched }> {
    const page = await this.browser.newPage({ viewport: { width: 1360, height: 900 }, acceptDownloads: true });
    // every wait of a page scales with a busy machine (five test files, Chromium among them, at load 10+); the tests' own timeouts bound them
    page.setDefaultTimeout(90_000);
    this.pages.push(page);
    return { page, w: watch(page, origin) };
  }

  /** A new tab signed in through the sign-in form, on the conversation list. */
  async signedInPage(origin: string, key: string): Promise<{ page: Page; w: Watched }> {
    const p = await this.newPage(origin);
    await p.page.goto(`${origin}/`);
    await p.page.locator('input[name="key"]').fill(key);
    await p.page.locator('form button[type="submit"]').click();
    await p.page.locator('h1', { hasText: 'Conversations' }).waitFor();
    return p;
  }

  async close(): Promise<void> {
    for (const p of this.pages) await p.close().catch(() => {});
    await this.browser.close();
  }
}

/** Waits until the conversation page's status chip shows `status`. */
export const statusShown = (page: Page, status: string) => page.locator(`.conv-head .chip[data-status="${status}"]`).waitFor();

/**
 * Every seq the event list renders: the list is scrolled from top to bottom and each row (by its
 * index) read with the seqs in it (an action's own and its result's).
 */
export async function renderedSeqs(page: Page): Promise<{ indexes: number[]; seqs: number[] }> {
  // a string, not a function: tsx compiles functions with name helpers the page does not have
  return page.evaluate(`(async () => {
    const box = document.querySelector('.events');
    const rows = new Map();
    const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const collect = () => {
      for (const slot of box.querySelectorAll('[data-index]')) {
        rows.set(Number(slot.getAttribute('data-index')), [...slot.querySelectorAll('[data-seq]')].map((e) => Number(e.getAttribute('data-seq'))));
      }
    };
    box.scrollTop = 0;
    await frames();
    for (let guard = 0; guard < 10000; guard++) {
      collect();
      if (box.scrollTop + box.clientHeight >= box.scrollHeight - 2) break;
      box.scrollTop += Math.max(50, box.clientHeight * 0.7);
      await frames();
    }
    await frames();
    collect();
    const indexes = [...rows.keys()].sort((a, b) => a - b);
    return { indexes, seqs: indexes.flatMap((i) => rows.get(i)) };
  })()`);
}

/** The page shows each event of a conversation whose last seq is `lastSeq` exactly once: 1..lastSeq, no gap, no duplicate. */
export async function assertEveryEventOnce(page: Page, lastSeq: number): Promise<void> {
  await page.locator(`.events [data-seq="${lastSeq}"]`).waitFor({ state: 'attached' });
  await page.locator('.loading-older').waitFor({ state: 'detached' });
  const { indexes, seqs } = await renderedSeqs(page);
  assert.deepEqual(
    indexes,
    indexes.map((_, i) => i),
    'every row was seen while scrolling',
  );
  assert.equal(new Set(seqs).size, seqs.length, `no seq twice: ${seqs.join(',')}`);
  assert.deepEqual(
    [...seqs].sort((a, b) => a - b),
    Array.from({ length: lastSeq }, (_, i) => i + 1),
    'every seq from 1 to last_seq',
  );
}
