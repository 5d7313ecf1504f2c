/**
 * OpenHands' web app build (its frontend, MIT, pinned at commit 156d068) for the tests that serve it
 * with WEB_APP_DIR: unpacked from the vendored tarball kept beside the checkout (in the directory
 * `shared` next to it; for a git worktree, next to its main checkout too) into a temp directory. The
 * build is never copied into the repository. Missing, the tests fail with the paths they looked at:
 * they never skip. `AppRun` is one browser context on the app, and what it saw.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { ROOT, tempDir } from './daemon.js';

const TARBALL = path.join('vendor', 'openhands-web', 'openhands-frontend-156d068-build.tar.gz');

/** The `shared` directory beside the checkout, and beside the main checkout when this one is a git worktree (`.git` is then a file naming it). */
function sharedDirs(): string[] {
  const dirs = [path.resolve(ROOT, '..', 'shared')];
  const dotGit = path.join(ROOT, '.git');
  if (fs.statSync(dotGit, { throwIfNoEntry: false })?.isFile()) {
    const gitdir = /^gitdir:\s*(.+)$/m.exec(fs.readFileSync(dotGit, 'utf8'))?.[1]?.trim();
    // <main>/.git/worktrees/<name>
    if (gitdir) dirs.push(path.resolve(path.dirname(path.dirname(path.dirname(path.resolve(ROOT, gitdir)))), '..', 'shared'));
  }
  return [...new Set(dirs)];
}

/** The vendored tarball's path; an assertion naming where it was looked for when it is not there. */
export function openHandsTarball(): string {
  const tried = sharedDirs().map((d) => path.join(d, TARBALL));
  const found = tried.find((f) => fs.existsSync(f));
  assert.ok(found, `OpenHands' web app build is required and was not found at: ${tried.join(', ')}`);
  return found;
}

let unpacked: string | undefined;

/** The build unpacked (once per test process) into a temp directory: its `build/` (index.html, assets/, locales/). */
export function openHandsBuild(): string {
  if (unpacked) return unpacked;
  const dir = tempDir('parley-ohweb-');
  execFileSync('tar', ['-xzf', openHandsTarball(), '-C', dir]);
  const build = path.join(dir, 'build');
  assert.ok(fs.existsSync(path.join(build, 'index.html')), `${build} has no index.html`);
  unpacked = build;
  return build;
}

/** Where the app reaches beyond the daemon (aborted in the tests): its fonts' stylesheet and files, and its diff viewer (Monaco) on a CDN. */
export const ELSEWHERE = ['https://fonts.googleapis.com/', 'https://fonts.gstatic.com/', 'https://cdn.jsdelivr.net/npm/monaco-editor@'];
/** The app's own success toasts met on the way; any other toast fails a run. */
const SUCCESS_TOASTS = [/^Conversation title updated successfully$/, /^Settings saved\b/, /^Stopping conversation\.\.\.$/, /^Conversation stopped$/];

/** One browser context on the app, and what it saw. */
export class AppRun {
  /** Requests aborted because they would leave the machine. */
  readonly blocked: string[] = [];
  /** `/api` and `/sockets` answers of 400 and more (and sockets that failed). */
  readonly failures: string[] = [];
  readonly pageErrors: string[] = [];
  readonly cspViolations: string[] = [];
  private constructor(
    readonly context: BrowserContext,
    readonly page: Page,
    private readonly origin: string,
  ) {}

  static async open(browser: Browser, origin: string): Promise<AppRun> {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(90_000);
    const run = new AppRun(context, page, origin);
    await context.route(
      (u) => u.origin !== origin,
      (route) => {
        run.blocked.push(route.request().url());
        return route.abort('blockedbyclient');
      },
    );
    page.on('response', (r) => {
      const u = new URL(r.url());
      if (u.origin === origin && /^\/(api|sockets)\//.test(u.pathname) && r.status() >= 400) {
        // the answer's body says why (its place is taken at once, so the order is the answers' order)
        const at = run.failures.push(`${r.status()} ${r.request().method()} ${u.pathname}`) - 1;
        r.text().then(
          (body) => (run.failures[at] += `: ${body.slice(0, 300)}`),
          () => {},
        );
      }
    });
    page.on('websocket', (ws) => ws.on('socketerror', (e) => run.failures.push(`socket ${ws.url()}: ${e}`)));
    page.on('pageerror', (e) => run.pageErrors.push(String(e)));
    page.on('console', (m) => m.type() === 'error' && /Content.Security.Policy/i.test(m.text()) && run.cspViolations.push(m.text()));
    // every toast the app shows, as it appears (they go away after a few seconds); a string: tsx's helpers are not in the page
    await context.addInitScript(`
      window.__toasts = [];
      new MutationObserver(() => {
        for (const t of document.querySelectorAll('[data-rht-toaster] [role="status"]')) {
          const text = (t.textContent || '').trim();
          if (text && !window.__toasts.includes(text)) window.__toasts.push(text);
        }
      }).observe(document, { subtree: true, childList: true, characterData: true });
    `);
    return run;
  }

  /** An answer of the daemon to a request the page makes (to wait on what the app asked for). */
  answer(method: string, pathname: string | RegExp) {
    return this.page.waitForResponse((r) => {
      const u = new URL(r.url());
      return (
        u.origin === this.origin && r.request().method() === method && (typeof pathname === 'string' ? u.pathname === pathname : pathname.test(u.pathname))
      );
    });
  }

  chatInput() {
    return this.page.locator('[data-testid="chat-input"]');
  }

  async send(text: string): Promise<void> {
    await this.chatInput().click();
    await this.chatInput().fill(text);
    await this.page.keyboard.press('Enter');
  }

  tab(label: 'Changes' | 'Terminal (read-only)') {
    return this.page.locator(`button[aria-label="${label}"] > button`);
  }

  /** What a user must never meet: error answers, error toasts, uncaught errors, refused content; and what left the machine, listed. */
  async assertClean(what: string, { diffViewerAsked = false } = {}): Promise<void> {
    assert.deepEqual(this.failures, [], `${what}: /api and /sockets answered errors`);
    const toasts: string[] = await this.page.evaluate('window.__toasts');
    assert.deepEqual(
      toasts.filter((t) => !SUCCESS_TOASTS.some((ok) => ok.test(t))),
      [],
      `${what}: toasts other than the app's success messages`,
    );
    assert.deepEqual(this.cspViolations, [], `${what}: Content-Security-Policy violations`);
    // Monaco's loader rejects with the failed <script>'s Event when its CDN is unreachable: the diff viewer needs the internet
    const expected = (e: string) => diffViewerAsked && e === 'Event';
    assert.deepEqual(
      this.pageErrors.filter((e) => !expected(e)),
      [],
      `${what}: uncaught errors in the page`,
    );
    assert.ok(this.blocked.length > 0, `${what}: the app's fonts are asked for on every page load (and aborted here)`);
    for (const u of this.blocked)
      assert.ok(
        ELSEWHERE.some((e) => u.startsWith(e)),
        `${what}: a request left for ${u}`,
      );
    assert.ok(this.blocked.some((u) => u.startsWith(ELSEWHERE[0]!)));
    if (diffViewerAsked)
      assert.ok(
        this.blocked.some((u) => u.startsWith(ELSEWHERE[2]!)),
        `${what}: the diff viewer's CDN`,
      );
  }

  close(): Promise<void> {
    return this.context.close();
  }
}
