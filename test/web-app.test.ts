/**
 * OpenHands' own web app (its frontend build, unpacked from the vendored tarball next to the
 * checkout: test/support/openhands-web.ts) served by a real daemon with WEB_APP_DIR on loopback
 * without a key, driven in Debian's Chromium against the scripted LLM as a user would: the settings
 * page (the LLM saved, its key never shown back), a new conversation, a message, the agent's command
 * and answer, a reload (the history and the terminal's output again), the Changes tab and a file's
 * diff, pause and resume, an upload, rename, stopping the runtime, delete. (With a key, signed in:
 * web-app-signed-in.test.ts.)
 *
 * Throughout, every request that would leave the machine is aborted and listed (the app's fonts and
 * its diff viewer's CDN; nothing else may be there), no `/api` or `/sockets` answer is an error
 * (≥ 400), no toast but the app's success messages appears, and the page reports no uncaught error
 * and no Content-Security-Policy violation (AppRun.assertClean).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { launchChromium, screenshot } from './support/browser.js';
import { startDaemon, tempDir, waitFor, type DaemonHandle } from './support/daemon.js';
import { AppRun, ELSEWHERE, openHandsBuild } from './support/openhands-web.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

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

describe("OpenHands' web app on Parley, without a key (loopback)", { timeout: 420_000 }, () => {
  let d: DaemonHandle;
  let llm: ScriptedLlm;
  let run: AppRun;
  let conversationId: string;
  const api = (method: string, p: string, body?: unknown) => d.req(method, p, body);

  before(async () => {
    llm = await startScriptedLlm([
      { text: 'Let me write the notes.', ...terminal('git init -q . && echo hello-from-the-agent | tee notes.txt') },
      { text: 'I wrote notes.txt for you.' },
      { text: 'Taking my time.', ...terminal('sleep 10; echo slow-done') },
      { text: 'Resumed and done.' },
      { text: 'I see the uploaded file.' },
    ]);
    // no LLM in the environment: the app's settings page provides it
    d = await startDaemon({ WEB_APP_DIR: build });
    run = await AppRun.open(browser, d.url);
  });
  after(async () => {
    if (run) await screenshot(run.page, 'web-app-last');
    await run?.close();
    await d?.stop();
    await llm?.close();
  });

  test('the settings page saves the LLM model, base URL and key; the key is never shown back', async () => {
    const { page } = run;
    await page.goto(`${d.url}/settings`);
    await page.locator('[data-testid="llm-settings-screen"]').waitFor();
    await page.locator('label:has([data-testid="advanced-settings-switch"])').click();
    await page.locator('[data-testid="llm-custom-model-input"]').fill('openai/scripted');
    await page.locator('[data-testid="base-url-input"]').fill(llm.url);
    await page.locator('[data-testid="llm-api-key-input"]').fill(LLM_KEY);
    const saved = run.answer('POST', '/api/settings');
    await page.locator('[data-testid="submit-button"]').click();
    assert.equal((await saved).status(), 200);
    const settings = (await api('GET', '/api/settings')).body;
    assert.equal(settings.llm_model, 'openai/scripted');
    assert.equal(settings.llm_base_url, llm.url);
    assert.equal(settings.llm_api_key_set, true);
    assert.ok(!JSON.stringify(settings).includes(LLM_KEY), 'GET /api/settings never holds the key');
    await page.reload();
    await page.locator('[data-testid="llm-custom-model-input"]').waitFor();
    assert.equal(await page.locator('[data-testid="llm-custom-model-input"]').inputValue(), 'openai/scripted');
    assert.equal(await page.locator('[data-testid="llm-api-key-input"]').inputValue(), '', 'the key field stays empty');
    assert.ok(!(await page.content()).includes(LLM_KEY), 'the key is nowhere in the page');
    await screenshot(page, 'web-app-settings');
    await run.assertClean('settings');
  });

  test('home → new conversation → a message → the command and the answer; a reload shows the history and the terminal output', async () => {
    const { page } = run;
    await page.goto(`${d.url}/`);
    const created = run.answer('POST', '/api/conversations');
    await page.getByRole('button', { name: 'New Conversation' }).click();
    conversationId = (await (await created).json()).conversation_id;
    await page.waitForURL(`${d.url}/conversations/${conversationId}`);
    await page.locator('[data-testid="conversation-name-title"]', { hasText: `Conversation ${conversationId.slice(0, 5)}` }).waitFor();
    await run.send('Please write the notes');
    await page.getByText('I wrote notes.txt for you.').waitFor();
    await page.getByText('git init -q . && echo hello-from-the-agent | tee notes.txt').first().waitFor();

    await page.reload();
    await page.getByText('Please write the notes').waitFor();
    await page.getByText('Let me write the notes.').waitFor();
    await page.getByText('I wrote notes.txt for you.').waitFor();
    await run.tab('Terminal (read-only)').click();
    await page.getByText('hello-from-the-agent', { exact: true }).waitFor();
    await screenshot(page, 'web-app-conversation');
    await run.assertClean('a turn and a reload');
  });

  test("the Changes tab lists the agent's file without an error; a file's diff is the workspace's", async () => {
    const { page } = run;
    // asked for when the page loads (the app keeps the answer for minutes): loaded again, then the tab
    const changes = run.answer('GET', /^\/api\/git\/changes\//);
    await page.reload();
    await page.getByText('I wrote notes.txt for you.').waitFor();
    await run.tab('Changes').click();
    const listed = await changes;
    assert.equal(decodeURIComponent(new URL(listed.url()).pathname), '/api/git/changes//workspace/project');
    await page.locator('[data-testid="file-diff-viewer-outer"]', { hasText: 'notes.txt' }).waitFor();
    const diff = run.answer('GET', /^\/api\/git\/diff\//);
    await page.locator('[data-testid="file-diff-viewer-outer"] [data-testid="collapse"]').first().click();
    const answered = await diff;
    assert.equal(answered.status(), 200);
    assert.deepEqual(await answered.json(), { original: null, modified: 'hello-from-the-agent\n' });
    // the diff is drawn by Monaco, which the app loads from a CDN (aborted here)
    await waitFor(() => run.blocked.some((u) => u.startsWith(ELSEWHERE[2]!)), "the diff viewer's CDN asked for", 60_000);
    await screenshot(page, 'web-app-changes');
    await run.assertClean('the Changes tab', { diffViewerAsked: true });
  });

  test('pause and resume the agent, upload a file, rename, stop the runtime and delete the conversation', async () => {
    const { page } = run;
    await run.send('Take your time');
    await page.getByText('Taking my time.').waitFor();
    const paused = run.answer('POST', `/api/conversations/${conversationId}/pause`);
    await page.locator('[data-testid="stop-button"]').click();
    assert.equal((await paused).status(), 200);
    await waitFor(async () => (await api('GET', `/api/conversations/${conversationId}`)).body.execution_status === 'paused', 'paused', 60_000);
    const resumed = run.answer('POST', `/api/conversations/${conversationId}/run`);
    await page.locator('[data-testid="play-button"]').click();
    assert.equal((await resumed).status(), 200);
    await page.getByText('Resumed and done.').waitFor();

    const file = path.join(tempDir('parley-upload-'), 'upload-me.txt');
    fs.writeFileSync(file, 'uploaded through the app\n');
    const uploaded = run.answer('POST', /^\/api\/file\/upload\//);
    await page.locator('[data-testid="upload-image-input"]').setInputFiles(file);
    await run.send('Read the upload');
    assert.equal((await uploaded).status(), 200);
    await page.getByText('I see the uploaded file.').waitFor();
    const inWorkspace = await fetch(`${d.url}/api/file/download/${encodeURIComponent('/workspace/upload-me.txt')}?conversation_id=${conversationId}`);
    assert.equal(await inWorkspace.text(), 'uploaded through the app\n');

    const menu = page.locator('[data-testid="conversation-name"] [data-testid="ellipsis-button"]');
    await menu.click();
    await page.locator('[data-testid="rename-button"]').click();
    await page.locator('[data-testid="conversation-name-input"]').fill('Renamed in the app');
    // the app shows the new title before its PATCH is answered, so the answer is what is awaited
    const renamed = run.answer('PATCH', `/api/conversations/${conversationId}`);
    await page.keyboard.press('Enter');
    assert.equal((await renamed).status(), 200);
    await page.locator('[data-testid="conversation-name-title"]', { hasText: 'Renamed in the app' }).waitFor();
    assert.equal((await api('GET', `/api/conversations/${conversationId}`)).body.title, 'Renamed in the app');

    await menu.click();
    await page.locator('[data-testid="conversation-name-context-menu"] [data-testid="stop-button"]').click();
    const stopped = run.answer('POST', `/api/v1/sandboxes/${conversationId}/pause`);
    await page.getByRole('button', { name: 'Confirm Close' }).click();
    assert.equal((await stopped).status(), 200);
    // the app goes home after stopping the conversation it shows; opened again, its runtime starts on demand
    await page.waitForURL(`${d.url}/`);
    await page.goto(`${d.url}/conversations/${conversationId}`);
    await page.getByText('I see the uploaded file.').waitFor();

    await menu.click();
    await page.locator('[data-testid="delete-button"]').click();
    const deleted = run.answer('DELETE', `/api/conversations/${conversationId}`);
    await page.getByRole('button', { name: 'Confirm Delete' }).click();
    assert.equal((await deleted).status(), 200);
    await page.waitForURL(`${d.url}/`);
    assert.equal((await api('GET', `/api/conversations/${conversationId}`)).status, 404);
    await run.assertClean('the buttons', { diffViewerAsked: true });
  });
});
