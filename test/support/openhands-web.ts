/**
 * OpenHands' web app build (its frontend, MIT, pinned at commit 156d068) for the tests that serve it
 * with WEB_APP_DIR: unpacked from the vendored tarball next to the checkout (`../shared/vendor/
 * openhands-web/`; for a git worktree, next to its main checkout too) into a temp directory. The
 * build is never copied into the repository. Missing, the tests fail with the paths they looked at:
 * they never skip.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, tempDir } from './daemon.js';

const TARBALL = path.join('vendor', 'openhands-web', 'openhands-frontend-156d068-build.tar.gz');

/** `../shared` of the checkout, and of the main checkout when this one is a git worktree (`.git` is then a file naming it). */
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
