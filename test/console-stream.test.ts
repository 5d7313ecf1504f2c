/**
 * The web console's conversation page under a live run, in headless Chromium against a real daemon
 * and the scripted LLM: interrupt a long command, reload and drop the socket in the middle of a run
 * (the page resumes with after_seq: every event rendered once, none missing, read back from the
 * list), and confirmation (accept and reject). (test/console.test.ts and console-10k.test.ts have
 * the rest: three files to stay within the per-file time limit.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { screenshot } from './support/browser.js';
import { assertEveryEventOnce, ConsoleBrowser, statusShown } from './support/console-page.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';
import { tcpProxy } from './support/tcp-proxy.js';

const KEY = 'console-stream-key-0123456789';

let d: DaemonHandle;
let llm: ScriptedLlm;
let browser: ConsoleBrowser;

const api = (method: string, p: string, body?: unknown) => d.req(method, p, body, { 'x-session-api-key': KEY });
const info = async (id: string) => (await api('GET', `/api/conversations/${id}`)).body;
const terminal = (command: string) => ({ toolCalls: [{ name: 'terminal', arguments: { command } }] });
const finish = (message: string) => ({ toolCalls: [{ name: 'finish', arguments: { message } }] });
const signedInPage = (origin = d.url) => browser.signedInPage(origin, KEY);
/** The `after_seq` of a page of history the console asked for (`/trpc/searchEvents?input=<the input as JSON>`). */
const afterSeq = (url: string) => Number(JSON.parse(new URL(url).searchParams.get('input') ?? '{}').after_seq);
/** Every event of the conversation on the page once, read once its run has ended: the page may show its last step before the log has its last events. */
const everyEventOnce = async (page: Page, id: string) => {
  await waitFor(async () => (await info(id)).execution_status !== 'running', 'the run ended', 60_000);
  await assertEveryEventOnce(page, (await info(id)).last_seq);
};

before(async () => {
  llm = await startScriptedLlm();
  d = await startDaemon({ SESSION_API_KEY: KEY, LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'sk-stream', MAX_ITERATIONS: '30' });
  browser = await ConsoleBrowser.launch();
});
after(async () => {
  await browser?.close();
  await d?.stop();
  await llm?.close();
});

describe('web console: a conversation live', { timeout: 420_000 }, () => {
  test('interrupt a long command: the run stops at once, the conversation is paused', async () => {
    llm.clear();
    llm.push(terminal('sleep 120'));
    const id = (await api('POST', '/api/conversations', { initial_user_msg: 'Wait two minutes.' })).body.conversation_id;
    const { page } = await signedInPage();
    await page.goto(`${d.url}/conversations/${id}`);
    const term = page.locator('.term', { hasText: 'sleep 120' });
    await term.locator('.badge.run').waitFor();
    await statusShown(page, 'running');
    const t0 = Date.now();
    await page.locator('.controls button', { hasText: 'Interrupt' }).click();
    await statusShown(page, 'paused');
    const took = Date.now() - t0;
    assert.ok(took < 60_000, `paused ${took} ms after the click, before the command's end`);
    await page.locator('.divider', { hasText: 'interrupted' }).waitFor();
    // the controls offer Run again
    await page.locator('.controls button', { hasText: 'Run' }).waitFor();
    await screenshot(page, 'console-interrupted');
    await everyEventOnce(page, id);
  });

  test('reload in the middle of a run: the page keeps what it had, resumes with after_seq; every event once, none missing', async () => {
    llm.clear();
    for (let i = 1; i <= 12; i++) llm.push({ ...terminal(`echo step-${i}`), delayMs: 250 });
    llm.push(finish('All twelve steps done.'));
    const id = (await api('POST', '/api/conversations', { initial_user_msg: 'Run the twelve steps.' })).body.conversation_id;
    const { page, w } = await signedInPage();
    const sockets: string[] = [];
    const reads: string[] = [];
    page.on('websocket', (ws) => sockets.push(ws.url()));
    page.on('request', (r) => r.url().includes('/trpc/searchEvents') && reads.push(r.url()));
    await page.goto(`${d.url}/conversations/${id}`);
    await page.locator('.term', { hasText: 'echo step-3' }).locator('.badge.ok').waitFor();
    const shownBefore = Math.max(...(await page.locator('.events [data-seq]').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))))));
    reads.length = 0;
    await page.reload();
    await page.locator('.tool-done', { hasText: 'All twelve steps done.' }).waitFor();
    await statusShown(page, 'finished');
    await everyEventOnce(page, id);
    assert.equal(sockets.length, 2, sockets.join('\n'));
    const resumedAt = Number(/after_seq=(\d+)$/.exec(sockets[1]!)?.[1]);
    assert.ok(resumedAt >= shownBefore, `after the reload the socket resumes after what was shown (${shownBefore}): ${sockets[1]}`);
    // what the tab had is not read again
    for (const r of reads) assert.ok(afterSeq(r) >= shownBefore, `read again from the start: ${r}`);
    assert.ok(!sockets.some((u) => u.includes(KEY)), 'the key is not in a socket URL');
    assert.deepEqual(w.errors, []);
  });

  test('a dropped socket mid-run: the page reconnects with after_seq; every event once, none missing', async () => {
    const proxy = await tcpProxy(d.port);
    try {
      llm.clear();
      for (let i = 1; i <= 10; i++) llm.push({ ...terminal(`echo drop-${i}`), delayMs: 300 });
      llm.push(finish('Done despite the dropped connection.'));
      const origin = `http://127.0.0.1:${proxy.port}`;
      const { page } = await signedInPage(origin);
      const sockets: string[] = [];
      page.on('websocket', (ws) => sockets.push(ws.url()));
      const id = (await api('POST', '/api/conversations', { initial_user_msg: 'Run ten steps.' })).body.conversation_id;
      await page.goto(`${origin}/conversations/${id}`);
      await page.locator('.term', { hasText: 'echo drop-2' }).waitFor();
      proxy.cut();
      await page.locator('.warn-text', { hasText: 'reconnecting' }).waitFor();
      await waitFor(async () => (await info(id)).last_seq > 0 && llm.requests.length > 5, 'the run goes on meanwhile', 60_000);
      proxy.restore();
      await page.locator('.tool-done', { hasText: 'Done despite the dropped connection.' }).waitFor();
      await everyEventOnce(page, id);
      assert.ok(sockets.length >= 2, sockets.join('\n'));
      assert.ok(Number(/after_seq=(\d+)$/.exec(sockets.at(-1)!)?.[1]) > 0, `the last socket resumed (${sockets.at(-1)})`);
    } finally {
      await proxy.close();
    }
  });

  test('older pages that fail are asked again until they come; a page the daemon refuses is said, not loaded forever', async () => {
    const items = Array.from({ length: 350 }, (_, i) => ({
      kind: 'MessageEvent',
      source: i % 2 ? 'agent' : 'user',
      llm_message: { role: i % 2 ? 'assistant' : 'user', content: [{ type: 'text', text: `history ${i + 1}` }] },
    }));
    const id = (await api('POST', '/api/conversations', { replay_json: JSON.stringify(items) })).body.conversation_id as string;
    await waitFor(async () => (await info(id)).last_seq >= 350, 'the replay');
    const last = (await info(id)).last_seq as number;

    // each older page: first the connection fails, then the daemon answers 503, then it is read
    const asked = new Map<number, number>();
    const { page } = await signedInPage();
    await page.route(/\/trpc\/searchEvents\?/, async (route) => {
      const after = afterSeq(route.request().url());
      if (after >= last - 100) return route.continue();
      const n = (asked.get(after) ?? 0) + 1;
      asked.set(after, n);
      if (n === 1) return route.abort('failed');
      if (n === 2) return route.fulfill({ status: 503, contentType: 'application/json', body: '{"detail":"Service Unavailable"}' });
      return route.continue();
    });
    await page.goto(`${d.url}/conversations/${id}`);
    await everyEventOnce(page, id);
    assert.ok(asked.size >= 2 && [...asked.values()].every((n) => n === 3), `every older page asked three times: ${JSON.stringify([...asked])}`);
    assert.equal(await page.locator('.older-error').count(), 0);

    // refused (a 400 is not a blip): the page says which events are missing and stops loading
    const refused = await signedInPage();
    await refused.page.route(/\/trpc\/searchEvents\?/, (route) =>
      afterSeq(route.request().url()) >= last - 100
        ? route.continue()
        : route.fulfill({
            status: 400,
            contentType: 'application/json',
            body: JSON.stringify({ error: { message: 'refused by the test', code: -32600, data: { code: 'BAD_REQUEST', httpStatus: 400 } } }),
          }),
    );
    await refused.page.goto(`${d.url}/conversations/${id}`);
    const note = refused.page.locator('.older-error');
    await note.waitFor();
    assert.match(await note.innerText(), /Events before #\d+ could not be read: refused by the test\. Reload the page to try again\./);
    assert.equal(await refused.page.locator('.loading-older').count(), 0, 'no endless loading note');
    await refused.page.locator(`.events [data-seq="${last}"]`).waitFor();
  });

  test('confirmation: created with "ask me", an action waits; accept runs it, reject answers it with the reason', async () => {
    llm.clear();
    llm.push(terminal('echo accepted > accepted.txt && cat accepted.txt'), terminal('echo nope > rejected.txt'));
    const { page } = await signedInPage();
    await page.locator('button', { hasText: 'New conversation' }).click();
    await page.locator('textarea[name="task"]').fill('Write two files.');
    await page.locator('input[name="confirm"]').check();
    await page.locator('form.new-conversation button[type="submit"]').click();
    await page.waitForURL(/\/conversations\/[0-9a-f-]{36}$/);
    const id = page.url().split('/').pop()!;
    await statusShown(page, 'waiting_for_confirmation');
    const bar = page.locator('.confirm-bar');
    await bar.locator('text=The agent asks to run an action').waitFor();
    await page.locator('.term', { hasText: 'accepted.txt' }).locator('.badge.warn', { hasText: 'waiting for confirmation' }).waitFor();
    assert.equal((await info(id)).confirmation_policy.kind, 'AlwaysConfirm');
    await screenshot(page, 'console-confirmation');
    await bar.locator('button', { hasText: 'Accept' }).click();
    await page.locator('.term', { hasText: 'echo accepted' }).locator('.term-out', { hasText: 'accepted' }).waitFor();

    await statusShown(page, 'waiting_for_confirmation');
    await page.locator('.term', { hasText: 'rejected.txt' }).locator('.badge.warn', { hasText: 'waiting for confirmation' }).waitFor();
    await bar.locator('input').fill('Not this one.');
    await bar.locator('button', { hasText: 'Reject' }).click();
    await page.locator('.term', { hasText: 'rejected.txt' }).locator('.badge.bad', { hasText: 'rejected' }).waitFor();
    await statusShown(page, 'idle');
    const events = (await api('GET', `/api/conversations/${id}/events/search?kind=UserRejectObservation`)).body.items;
    assert.equal(events.length, 1);
    assert.equal(events[0].rejection_reason, 'Not this one.');
    await everyEventOnce(page, id);
  });
});
