/**
 * The web console on a conversation of 10,000 events, in headless Chromium: the event list is
 * virtualised (a few dozen rows in the DOM), and the time to first paint (navigation until the
 * last event is on screen) and to scroll (wheel-like steps, then jumps from the end to the top,
 * frame times from requestAnimationFrame) are measured and printed. Not a timed test: the bounds
 * asserted are the virtualisation, that every part of the list is reached, and that the list is
 * at its end by itself and stays there (or where the user scrolled to) while the older pages are
 * put in front.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { screenshot } from './support/browser.js';
import { ConsoleBrowser } from './support/console-page.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';

const KEY = 'console-10k-key-0123456789';
const EVENTS = 10_000;

let d: DaemonHandle;
let browser: ConsoleBrowser;
const api = (method: string, p: string, body?: unknown) => d.req(method, p, body, { 'x-session-api-key': KEY });
const signedInPage = () => browser.signedInPage(d.url, KEY);
/** The `after_seq` of a page of history the console asked for (`/trpc/searchEvents?input=<the input as JSON>`). */
const afterSeq = (url: string) => Number(JSON.parse(new URL(url).searchParams.get('input') ?? '{}').after_seq);

before(async () => {
  d = await startDaemon({ SESSION_API_KEY: KEY });
  browser = await ConsoleBrowser.launch();
});
after(async () => {
  await browser?.close();
  await d?.stop();
});

/**
 * A recorded trajectory replayed into a new conversation (one request, no LLM): messages of one to
 * twelve lines from both sides and `think` calls (an action and its observation each).
 */
function trajectory(): unknown[] {
  const items: unknown[] = [];
  const text = (i: number) =>
    Array.from({ length: 1 + (i % 12) }, (_, l) => `message ${i + 1}, line ${l + 1}: ${'lorem ipsum '.repeat(1 + ((i * 7 + l) % 9))}`).join('\n');
  for (let i = 0, events = 0; events < EVENTS; i++) {
    if (i % 5 === 4) {
      items.push({
        kind: 'ActionEvent',
        tool_name: 'think',
        action: { kind: 'ThinkAction', thought: `thought ${i}: ${'weighing the options '.repeat(1 + (i % 6))}` },
      });
      events += 2;
    } else {
      const agent = i % 5 !== 0;
      items.push({
        kind: 'MessageEvent',
        source: agent ? 'agent' : 'user',
        llm_message: { role: agent ? 'assistant' : 'user', content: [{ type: 'text', text: text(i) }] },
      });
      events += 1;
    }
  }
  return items;
}

/** The conversation of 10,000 events (replayed once, for every test that asks). */
let tenThousand: Promise<{ id: string; last: number }> | undefined;
const conversation = () =>
  (tenThousand ??= (async () => {
    const created = await api('POST', '/api/conversations', { replay_json: JSON.stringify(trajectory()) });
    assert.equal(created.status, 200, created.text);
    const id = created.body.conversation_id as string;
    const info = async () => (await api('GET', `/api/conversations/${id}`)).body;
    await waitFor(
      async () => {
        const c = await info();
        return c.last_seq >= EVENTS && !['running', 'starting'].includes(c.execution_status);
      },
      'the replay',
      120_000,
    );
    return { id, last: (await info()).last_seq as number };
  })());

/** How far the event list is from its end, in px, two frames after it is asked (a string: tsx compiles functions with name helpers the page does not have). */
const distanceFromEnd = (page: Page) =>
  page.evaluate(`(async () => {
    const box = document.querySelector('.events');
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    return box.scrollHeight - box.clientHeight - box.scrollTop;
  })()`) as Promise<number>;

/** The first row whose top is in the list's view: its seq and how far below the view's top it is. */
const firstRowInView = (page: Page) =>
  page.evaluate(`(() => {
    const box = document.querySelector('.events').getBoundingClientRect();
    for (const el of document.querySelectorAll('.events .ev')) {
      const r = el.getBoundingClientRect();
      if (r.top >= box.top) return { seq: Number(el.getAttribute('data-seq')), top: Math.round(r.top - box.top) };
    }
    return null;
  })()`) as Promise<{ seq: number; top: number } | null>;

/**
 * Until the note "Loading earlier events… n of m" is gone: its count may move slowly on a loaded
 * machine, but a count that stays a minute is a page that stopped reading (the test's timeout
 * bounds the rest).
 */
async function olderAllIn(page: Page): Promise<void> {
  const note = page.locator('.loading-older, .older-error');
  let shown = '';
  let since = Date.now();
  for (;;) {
    const now = (await note.allTextContents()).join(' ');
    if (!now) return;
    assert.ok(!now.includes('could not be read'), now);
    if (now !== shown) [shown, since] = [now, Date.now()];
    assert.ok(Date.now() - since < 60_000, `no older events read for a minute: "${shown}"`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Holds the page's animation-frame callbacks while `__frames.hold` is true and runs them in the frame
 * after `__frames.release()`: what a busy machine does to them, so a test can have data arrive
 * between two frames of something the page is doing.
 */
const FRAME_HOLD = `(() => {
  const raf = window.requestAnimationFrame.bind(window), cancel = window.cancelAnimationFrame.bind(window);
  const held = new Map(), real = new Map();
  let next = 0;
  const schedule = (id, cb) => real.set(id, raf((t) => (real.delete(id), cb(t))));
  window.__frames = { hold: false, release() { this.hold = false; for (const [id, cb] of held) schedule(id, cb); held.clear(); } };
  window.requestAnimationFrame = (cb) => { const id = ++next; if (window.__frames.hold) held.set(id, cb); else schedule(id, cb); return id; };
  window.cancelAnimationFrame = (id) => { held.delete(id); if (real.has(id)) cancel(real.get(id)); real.delete(id); };
})()`;

describe('web console: 10,000 events', { timeout: 420_000 }, () => {
  test('the list is virtualised; first paint and scroll are measured', async () => {
    const { id, last } = await conversation();
    const { page, w } = await signedInPage();
    // the floor, same run: the page of a conversation of one message
    const small = (await api('POST', '/api/conversations', { replay_json: JSON.stringify(trajectory().slice(0, 1)) })).body.conversation_id as string;
    await waitFor(async () => (await api('GET', `/api/conversations/${small}`)).body.last_seq >= 1, 'the small one');
    const t1 = Date.now();
    await page.goto(`${d.url}/conversations/${small}`);
    await page.locator('.events .msg-user').waitFor();
    const smallPaint = Date.now() - t1;

    // the Changes panel looks at the workspace when the page opens and after tool calls that come while
    // it is open, not once per page of older events (this workspace is no git repository: 422 each time)
    let changesAsked = 0;
    page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/trpc/gitChanges') changesAsked += 1;
    });
    const t0 = Date.now();
    await page.goto(`${d.url}/conversations/${id}`);
    // the list places itself at its end (a generous bound: the machine may be busy)
    const lastRow = page.locator(`.events [data-seq="${last}"]`);
    await lastRow.waitFor({ timeout: 45_000 });
    const firstPaint = Date.now() - t0;
    await olderAllIn(page);
    const allLoaded = Date.now() - t0;
    // the older pages were put in front without moving the view: it is still at the end
    assert.ok(await lastRow.isVisible(), 'the newest event is still shown once every older one is in');
    assert.ok((await distanceFromEnd(page)) <= 2, 'the list is still at its end once every older event is in');
    assert.ok(changesAsked <= 2, `the Changes panel asked ${changesAsked} times while the history loaded`);
    await screenshot(page, 'console-10k');
    const inDom = await page.locator('.events [data-seq]').count();
    assert.ok(inDom < 80, `${inDom} rows in the DOM: the list is virtualised`);

    // a string, not a function: tsx compiles functions with name helpers the page does not have
    const scroll = (await page.evaluate(`(async () => {
      const box = document.querySelector('.events');
      const frame = () => new Promise((r) => requestAnimationFrame(r));
      const times = [];
      const run = async (steps, to, el = box) => {
        let prev = await frame();
        const start = prev;
        for (let i = 1; i <= steps; i++) {
          el.scrollTop = to(i);
          const now = await frame();
          times.push(now - prev);
          prev = now;
        }
        return prev - start;
      };
      const sorted = (a) => [...a].sort((x, y) => x - y);
      const pct = (a, p) => sorted(a)[Math.min(a.length - 1, Math.floor(a.length * p))];
      // wheel-like: 300 steps of 120 px upwards from the end
      const wheelStart = box.scrollTop;
      const wheelMs = await run(300, (i) => Math.max(0, wheelStart - i * 120));
      const wheel = times.splice(0);
      // jumps: from the end to the top in 100 steps (about 100 rows each)
      box.scrollTop = box.scrollHeight;
      await frame();
      const top = box.scrollHeight - box.clientHeight;
      const jumpMs = await run(100, (i) => Math.max(0, top * (1 - i / 100)));
      // sizes measured on the way correct the offsets: at the top, the top is shown
      const jumps = times.splice(0);
      box.scrollTop = 0;
      for (let i = 0; i < 5; i++) await frame();
      const firstRow = document.querySelector('.events [data-index="0"]') ? '0' : null;
      // the floor, same run: the same wheel steps over a static page as tall (what this machine's load costs a frame anyway)
      const floor = document.createElement('div');
      floor.style.cssText = 'position:fixed;inset:0;overflow:auto;z-index:99;background:#fff';
      // through the CSSOM: the page's Content-Security-Policy refuses style attributes in markup
      const tall = document.createElement('div');
      tall.style.height = box.scrollHeight + 'px';
      tall.style.background = 'linear-gradient(#eee, #999)';
      floor.append(tall);
      document.body.append(floor);
      floor.scrollTop = floor.scrollHeight;
      await frame();
      const floorStart = floor.scrollTop;
      const staticMs = await run(300, (i) => Math.max(0, floorStart - i * 120), floor);
      floor.remove();
      return {
        staticMs, staticMedian: pct(times, 0.5), staticP95: pct(times, 0.95),
        wheelMs, wheelMedian: pct(wheel, 0.5), wheelP95: pct(wheel, 0.95), wheelMax: Math.max(...wheel),
        jumpMs, jumpMedian: pct(jumps, 0.5), jumpP95: pct(jumps, 0.95), jumpMax: Math.max(...jumps),
        firstRow,
      };
    })()`)) as Record<string, number> & { firstRow: string | null };
    assert.equal(scroll.firstRow, '0', 'scrolled to the first event');
    await page.locator('.events [data-seq="1"]').waitFor({ state: 'attached' });
    console.log(
      `${last}-event conversation: first paint ${firstPaint} ms (navigation to the last event shown; ${smallPaint} ms for a conversation of one ` +
        `message, same run), all ${last} events in ${allLoaded} ms; ` +
        `wheel scroll 300 × 120 px: ${scroll.wheelMs.toFixed(0)} ms, frame median ${scroll.wheelMedian.toFixed(1)} / p95 ` +
        `${scroll.wheelP95.toFixed(1)} / max ${scroll.wheelMax.toFixed(1)} ms ` +
        `(a static page as tall, same run: ${scroll.staticMs.toFixed(0)} ms, median ${scroll.staticMedian.toFixed(1)} / p95 ` +
        `${scroll.staticP95.toFixed(1)} ms; ratio ${(scroll.wheelMs / scroll.staticMs).toFixed(2)}); ` +
        `jump end → top in 100 steps: ${scroll.jumpMs.toFixed(0)} ms, frame median ${scroll.jumpMedian.toFixed(1)} / p95 ` +
        `${scroll.jumpP95.toFixed(1)} / max ${scroll.jumpMax.toFixed(1)} ms; ${inDom} rows in the DOM`,
    );
    assert.deepEqual(w.errors, []);
  });

  test('while older events are put in front: the view stays where the user scrolled to, and "↓ Latest" reaches the end and stays there', async () => {
    const { id, last } = await conversation();
    const { page, w } = await signedInPage();
    // the newest page (after_seq = last - 100) passes; each older one is read at once but handed to
    // the page only when the test opens the gate, so the test decides when they are put in front
    let open!: () => void;
    let gate = new Promise<void>((r) => (open = r));
    let handed = 0;
    await page.route(/\/trpc\/searchEvents\?/, async (route) => {
      if (afterSeq(route.request().url()) >= last - 100) return route.continue();
      const opened = gate; // the gate as it was when the page asked
      // no timeout (the default 30 s is the context's, not the page's, and a loaded machine has
      // taken longer); a failed read is a failed request for the page, which asks again
      const response = await route.fetch({ timeout: 0, maxRetries: 3 }).catch((err: Error) => err);
      await opened;
      if (response instanceof Error) return route.abort('failed');
      await route.fulfill({ response });
      handed += 1;
    });
    await page.addInitScript(FRAME_HOLD);
    await page.goto(`${d.url}/conversations/${id}`);
    const lastRow = page.locator(`.events [data-seq="${last}"]`);
    await lastRow.waitFor();
    const loading = page.locator('.loading-older');
    await loading.waitFor();

    // the user scrolls up: the pages that come meanwhile do not move what they read
    await page.locator('.events').hover();
    await page.mouse.wheel(0, -2500);
    await page.locator('.to-end').waitFor();
    let read = await firstRowInView(page);
    for (let same = 0; same < 3; ) {
      await page.evaluate('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))');
      const now = await firstRowInView(page);
      same = JSON.stringify(now) === JSON.stringify(read) ? same + 1 : 0;
      read = now;
    }
    assert.ok(read, 'a row in view');
    const release = open;
    gate = new Promise<void>((r) => (open = r));
    release(); // the five pages read so far; the next ones wait again
    await loading.filter({ hasText: /… 600 of / }).waitFor();
    await page.evaluate('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))');
    const still = await firstRowInView(page);
    assert.ok(still?.seq === read.seq && Math.abs(still.top - read.top) <= 2, `the row the user read stays where it was: ${JSON.stringify({ read, still })}`);
    assert.ok(await page.locator('.to-end').isVisible(), 'not taken to the end');

    // "↓ Latest", and the next pages come before the list has settled at its end (the page's frames
    // held meanwhile): it goes to the end and stays there while every other page comes
    await page.evaluate('window.__frames.hold = true');
    await page.locator('.to-end').click();
    const handedBefore = handed;
    gate = Promise.resolve();
    open();
    await waitFor(() => handed >= handedBefore + 5, 'five more pages handed to the page', 60_000);
    // a moment to read them in (nothing is drawn meanwhile); the check does not depend on it
    await page.evaluate('new Promise((r) => setTimeout(r, 200))');
    await page.evaluate('window.__frames.release()');
    await olderAllIn(page);
    assert.ok((await distanceFromEnd(page)) <= 2, 'the list is at its end once every older event is in');
    await lastRow.waitFor();
    await page.locator('.to-end').waitFor({ state: 'detached' });
    assert.deepEqual(w.errors, []);
  });
});
