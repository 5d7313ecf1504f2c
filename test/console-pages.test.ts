/**
 * The web console's pages at work, in headless Chromium against a real daemon, a real git server
 * and the scripted LLM: settings (the LLM, a provider token and default MCP servers entered in the
 * page are what the conversations then use), a conversation created with a repository whose shell
 * and edit events arrive live, the diff and download of the file the agent changed, the MCP status,
 * a follow-up with and without a run, and the conversation list (newest first, paged, delete).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { screenshot } from './support/browser.js';
import { assertEveryEventOnce, ConsoleBrowser, statusShown } from './support/console-page.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startGitServer, type GitHttpServer } from './support/git-server.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const KEY = 'console-pages-key-0123456789';
const TOKEN = 'ghp_CONSOLETEST0123456789abcdefTOKEN';
const LLM_KEY = 'sk-console-llm-key-4242';

let d: DaemonHandle;
let llm: ScriptedLlm;
let git: GitHttpServer;
let browser: ConsoleBrowser;

const api = (method: string, p: string, body?: unknown) => d.req(method, p, body, { 'x-session-api-key': KEY });
const info = async (id: string) => (await api('GET', `/api/conversations/${id}`)).body;
const terminal = (command: string) => ({ toolCalls: [{ name: 'terminal', arguments: { command } }] });
const finish = (message: string) => ({ toolCalls: [{ name: 'finish', arguments: { message } }] });
const signedInPage = () => browser.signedInPage(d.url, KEY);
const everyEventOnce = async (page: Page, id: string) => assertEveryEventOnce(page, (await info(id)).last_seq);

before(async () => {
  llm = await startScriptedLlm();
  git = await startGitServer({ token: TOKEN });
  await git.createRepo('acme/app', { 'README.md': '# app\n\nA tiny app.\n', 'src/greet.py': 'print("hi")\n' }, { private: true });
  // no LLM in the environment: the settings page provides it
  d = await startDaemon({ SESSION_API_KEY: KEY, MAX_ITERATIONS: '30' });
  browser = await ConsoleBrowser.launch();
});
after(async () => {
  await browser?.close();
  await d?.stop();
  await llm?.close();
  await git?.close();
});

describe('web console: the pages at work', { timeout: 420_000 }, () => {
  test('settings: LLM model, base URL and key (never shown back), git-provider tokens, default MCP servers, secrets', async () => {
    const { page, w } = await signedInPage();
    const read = page.waitForResponse((r) => r.request().method() === 'GET' && new URL(r.url()).pathname === '/trpc/getSettings');
    await page.locator('nav a', { hasText: 'Settings' }).click();
    const llmForm = page.locator('form', { has: page.locator('h2', { hasText: 'Language model' }) });
    // the form shows the stored settings once read (Save is disabled meanwhile): typed before, the model was overwritten (seen at load 14)
    await (await read).finished();
    await llmForm.locator('button[type="submit"]:enabled').waitFor();
    await llmForm.locator('input[name="llm_model"]').fill('openai/scripted');
    await llmForm.locator('input[name="llm_base_url"]').fill(llm.url);
    await llmForm.locator('input[name="llm_api_key"]').fill(LLM_KEY);
    await llmForm.locator('button[type="submit"]').click();
    await llmForm.locator('.ok-text', { hasText: 'Saved' }).waitFor();
    const { llm_model, llm_base_url, llm_api_key_set } = (await api('GET', '/api/settings')).body;
    assert.deepEqual({ llm_model, llm_base_url, llm_api_key_set }, { llm_model: 'openai/scripted', llm_base_url: llm.url, llm_api_key_set: true });

    const providers = page.locator('form', { has: page.locator('h2', { hasText: 'Git providers' }) });
    await providers.locator('input[name="github-enabled"]').check();
    await providers.locator('input[name="github-token"]').fill(TOKEN);
    await providers.locator('input[name="github-host"]').fill(git.url);
    await providers.locator('textarea[name="mcp_config"]').fill(JSON.stringify({ shttp_servers: [{ url: 'http://127.0.0.1:9/mcp' }] }));
    await providers.locator('button[type="submit"]').click();
    await providers.locator('.ok-text', { hasText: 'Saved' }).waitFor();
    assert.equal(await providers.locator('input[name="github-token"]').inputValue(), '', 'the token field is emptied once stored');

    const secrets = page.locator('.card', { has: page.locator('h2', { hasText: 'Secrets' }) });
    await secrets.locator('input[name="secret-name"]').fill('CONSOLE_SECRET');
    await secrets.locator('input[name="secret-value"]').fill('console-secret-value-77');
    await secrets.locator('button', { hasText: 'Add' }).click();
    await secrets.locator('li code', { hasText: 'CONSOLE_SECRET' }).waitFor();

    // shown again: the key and the token are not in the page, only that a key is stored
    await page.reload();
    await waitFor(async () => (await llmForm.locator('input[name="llm_model"]').inputValue()) === 'openai/scripted', 'the stored model shown');
    assert.equal(await llmForm.locator('input[name="llm_api_key"]').inputValue(), '');
    assert.match((await llmForm.locator('input[name="llm_api_key"]').getAttribute('placeholder'))!, /A key is stored/);
    const content = await page.content();
    for (const secret of [LLM_KEY, TOKEN, 'console-secret-value-77']) assert.ok(!content.includes(secret), 'a stored secret is never shown back');
    await page.setViewportSize({ width: 1360, height: 1500 });
    await screenshot(page, 'console-settings');
    assert.deepEqual(w.elsewhere, []);
    assert.deepEqual(w.errors, []);
  });

  let repoConversation = '';

  test('create a conversation with a repository; the shell and edit events arrive live; the diff of the changed file and its download', async () => {
    llm.clear();
    let shellShown!: () => void;
    let editShown!: () => void;
    const shell = new Promise<void>((r) => (shellShown = r));
    const edit = new Promise<void>((r) => (editShown = r));
    // each step waits until the page has shown the one before it: what the page shows came live
    llm.push(
      { text: 'Reading the README first.', ...terminal('cat README.md') },
      async () => (
        await shell,
        {
          toolCalls: [
            {
              name: 'file_editor',
              arguments: { command: 'str_replace', path: '/workspace/README.md', old_str: '# app\n', new_str: '# app\n\nGreets people politely.\n' },
            },
          ],
        }
      ),
      async () => (await edit, terminal('git status --short')),
      finish('Updated the README: it now says the app **greets people politely**.'),
    );
    const { page, w } = await signedInPage();
    await page.locator('button', { hasText: 'New conversation' }).click();
    await page.locator('textarea[name="task"]').fill('Describe what the app does in its README.');
    await page.locator('input[name="repository"]').fill('acme/app');
    await page.locator('input[name="branch"]').fill('main');
    await page.locator('textarea[name="instructions"]').fill('Keep the README short.');
    await screenshot(page, 'console-new-conversation');
    await page.locator('form.new-conversation button[type="submit"]').click();
    await page.waitForURL(/\/conversations\/[0-9a-f-]{36}$/);
    repoConversation = page.url().split('/').pop()!;
    const created = await info(repoConversation);
    assert.equal(created.selected_repository, 'acme/app');
    assert.equal(created.selected_branch, 'main');

    const term = page.locator('.term', { hasText: 'cat README.md' });
    await term.locator('.term-out', { hasText: 'A tiny app.' }).waitFor();
    await term.locator('.badge.ok', { hasText: 'exit 0' }).waitFor();
    shellShown();
    const diff = page.locator('.tool-file', { hasText: 'README.md' });
    await diff.locator('.diff tr.add', { hasText: 'Greets people politely.' }).waitFor();
    editShown();
    await page.locator('.term', { hasText: 'git status --short' }).locator('.term-out', { hasText: 'M README.md' }).waitFor();
    await page.locator('.tool-done .final', { hasText: 'greets people politely' }).waitFor();
    await statusShown(page, 'finished');
    const firstStep = llm.requests.find((r) => JSON.stringify(r.body.messages).includes('Describe what the app does'))!;
    assert.match(JSON.stringify(firstStep.body.messages[0]), /Keep the README short\./, 'the instructions reached the agent');
    // the files the agent changed (the panel looks again after each tool call), the diff, the download
    await page.locator('button.change', { hasText: 'README.md' }).locator('.c-UPDATED').waitFor();
    await screenshot(page, 'console-conversation');
    await page.locator('button.change', { hasText: 'README.md' }).click();
    const dialog = page.locator('[role="dialog"]');
    await dialog.locator('.diff tr.add', { hasText: 'Greets people politely.' }).waitFor();
    await dialog.locator('.diff tr:not(.add):not(.del)', { hasText: 'A tiny app.' }).first().waitFor();
    await screenshot(page, 'console-diff');
    const [download] = await Promise.all([page.waitForEvent('download'), dialog.locator('button', { hasText: 'Download' }).click()]);
    assert.equal(download.suggestedFilename(), 'README.md');
    assert.equal(fs.readFileSync((await download.path())!, 'utf8'), '# app\n\nGreets people politely.\n\nA tiny app.\n');
    await dialog.locator('button', { hasText: 'Close' }).click();

    // the MCP server from the settings' default configuration, with its state
    await page.locator('.tabs button', { hasText: 'MCP' }).click();
    await page.locator('ul.mcp li', { hasText: 'shttp' }).locator('.badge').waitFor();
    await page.locator('.tabs button', { hasText: 'Details' }).click();
    await page.locator('dl.details', { hasText: 'acme/app @ main' }).waitFor();
    await everyEventOnce(page, repoConversation);
    assert.deepEqual(w.elsewhere, []);
    assert.deepEqual(w.errors, []);
  });

  test('send a follow-up (with run), and a message without running the agent', async () => {
    llm.clear();
    llm.push({ text: 'It says the app greets people politely.' });
    const { page } = await signedInPage();
    await page.goto(`${d.url}/conversations/${repoConversation}`);
    await statusShown(page, 'finished');
    const before = llm.requests.length;
    await page.locator('textarea[name="message"]').fill('What does the README say now?');
    await page.locator('textarea[name="message"]').press('Enter');
    await page.locator('.msg-user', { hasText: 'What does the README say now?' }).waitFor();
    await page.locator('.msg-assistant', { hasText: 'It says the app greets people politely.' }).waitFor();
    await statusShown(page, 'finished');
    assert.equal(llm.requests.length, before + 1);
    assert.match(JSON.stringify(llm.requests[before]!.body.messages.at(-1)), /What does the README say now\?/);

    await page.locator('input[name="run"]').uncheck();
    await page.locator('textarea[name="message"]').fill('A note for later, no run.');
    await page.locator('form.composer button[type="submit"]').click();
    await page.locator('.msg-user', { hasText: 'A note for later, no run.' }).waitFor();
    // the composer is cleared once the POST is answered, which can come after the event's echo
    await waitFor(async () => (await page.locator('textarea[name="message"]').inputValue()) === '', 'the composer cleared after the send');
    // a message to a finished conversation makes it idle again (it is not run); no step is taken
    await statusShown(page, 'idle');
    assert.equal(llm.requests.length, before + 1, 'no run without "Run the agent"');
  });

  test('the list: newest first, paged; delete from the list', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 21; i++) ids.push((await api('POST', '/api/conversations', {})).body.conversation_id);
    await api('PATCH', `/api/conversations/${ids.at(-1)}`, { title: 'The newest one' });
    const { page } = await signedInPage();
    const rows = page.locator('table.list tbody tr');
    await rows.first().locator('text=The newest one').waitFor();
    assert.equal(await rows.count(), 20);
    await screenshot(page, 'console-conversations');
    await page.locator('button', { hasText: 'Older →' }).click();
    await page.locator('text=Page 2').waitFor();
    await waitFor(async () => (await rows.count()) > 0 && (await rows.first().getAttribute('data-id')) !== ids.at(-1), 'the second page');
    await page.locator('button', { hasText: '← Newer' }).click();
    const newest = rows.filter({ hasText: 'The newest one' });
    await newest.locator('button', { hasText: 'Delete' }).click();
    await newest.locator('button.danger', { hasText: 'Delete' }).click();
    await waitFor(async () => (await api('GET', `/api/conversations/${ids.at(-1)}`)).status === 404, 'deleted');
    await page.locator('text=The newest one').waitFor({ state: 'detached' });
  });
});
