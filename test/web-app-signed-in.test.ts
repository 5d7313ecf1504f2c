/**
 * OpenHands' own web app served by a daemon with a session key (WEB_APP_DIR, SESSION_API_KEY), in
 * Debian's Chromium against the scripted LLM: signed in through `/?token=` (a session cookie, no token
 * left in the address bar), a new conversation, a message, the command and the answer, a reload with
 * the history and the terminal's output, the Changes tab, the settings page; and a second browser
 * context that did not sign in being refused. The same rules hold throughout as without a key
 * (web-app.test.ts): nothing leaves the machine but what is listed, no error answer, toast, uncaught
 * error or refused content.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { launchChromium, screenshot } from './support/browser.js';
import { startDaemon, type DaemonHandle } from './support/daemon.js';
import { AppRun, openHandsBuild } from './support/openhands-web.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const KEY = 'web-app-session-key-0123456789';
const LLM_KEY = 'sk-web-app-llm-key-31337';

const terminal = (command: string) => ({ toolCalls: [{ name: 'terminal', arguments: { command } }] });

let browser: Browser;
let build: string;

before(async () => {
  build = openHandsBuild();
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
});

describe("OpenHands' web app on Parley, with a key (signed in through /?token=)", { timeout: 420_000 }, () => {
  let d: DaemonHandle;
  let llm: ScriptedLlm;
  let run: AppRun;

  before(async () => {
    llm = await startScriptedLlm([{ text: 'Checking.', ...terminal('echo signed-in-output') }, { text: 'All done, signed in.' }]);
    d = await startDaemon({ WEB_APP_DIR: build, SESSION_API_KEY: KEY, LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: LLM_KEY });
    run = await AppRun.open(browser, d.url);
  });
  after(async () => {
    await run?.close();
    await d?.stop();
    await llm?.close();
  });

  test('sign in, a turn, a reload with the history and the terminal, the Changes tab, the settings page', async () => {
    const { page } = run;
    await page.goto(`${d.url}/?token=${encodeURIComponent(KEY)}`);
    assert.equal(page.url(), `${d.url}/`, 'no token left in the address bar');
    const cookies = await run.context.cookies();
    assert.ok(cookies.some((c) => c.name === 'parley_session' && c.httpOnly && c.sameSite === 'Strict' && c.value !== KEY));
    const created = run.answer('POST', '/api/conversations');
    await page.getByRole('button', { name: 'New Conversation' }).click();
    const id = (await (await created).json()).conversation_id;
    await page.waitForURL(`${d.url}/conversations/${id}`);
    await run.send('Show me the output');
    await page.getByText('All done, signed in.').waitFor();

    // the Changes tab is open when the page loads: its list is asked for then
    const changes = run.answer('GET', /^\/api\/git\/changes\//);
    await page.reload();
    await page.getByText('Show me the output').waitFor();
    await page.getByText('All done, signed in.').waitFor();
    await run.tab('Terminal (read-only)').click();
    await page.getByText('signed-in-output', { exact: true }).waitFor();
    await run.tab('Changes').click();
    const listed = await changes;
    assert.equal(listed.status(), 200);
    assert.deepEqual(await listed.json(), [], 'a workspace that is not a git repository has no changes');
    await screenshot(page, 'web-app-conversation-signed-in');

    const settings = run.answer('GET', '/api/settings');
    await page.goto(`${d.url}/settings`);
    await page.locator('[data-testid="llm-settings-screen"]').waitFor();
    assert.equal((await settings).status(), 200);
    assert.ok(!(await page.content()).includes(LLM_KEY));
    await run.assertClean('signed in');
  });

  test('a browser context that did not sign in is refused', async () => {
    const stranger = await browser.newContext();
    try {
      const page = await stranger.newPage();
      await page.route(
        (u) => u.origin !== d.url,
        (r) => r.abort('blockedbyclient'),
      );
      const refused = page.waitForResponse((r) => new URL(r.url()).pathname.startsWith('/api/') && r.status() === 401);
      await page.goto(`${d.url}/`);
      await refused;
      const answers: { conversations: number; socket: string } = await page.evaluate(`(async () => {
        const conversations = (await fetch('/api/conversations')).status;
        const socket = await new Promise((resolve) => {
          const ws = new WebSocket(location.origin.replace('http', 'ws') + '/sockets/events/${crypto.randomUUID()}');
          ws.onmessage = () => resolve('a frame');
          ws.onclose = (e) => resolve('closed ' + e.code);
        });
        return { conversations, socket };
      })()`);
      // without a key the upgrade is accepted and waits for an auth frame, which never comes: closed 4001 after 10 s
      assert.deepEqual(answers, { conversations: 401, socket: 'closed 4001' });
    } finally {
      await stranger.close();
    }
  });
});
