/**
 * `/api/git/changes` and `/api/git/diff`: what changed in a directory of a conversation's workspace
 * (OpenHands' GitChange / GitDiff). git runs like every other git of the conversation (runGit: an
 * argument array, its own process group, bounded capture, a built environment).
 */
import path from 'node:path';
import { runGit, type GitRunOptions } from './git-process.js';

type GitChangeStatus = 'ADDED' | 'UPDATED' | 'DELETED' | 'MOVED';

const TIMEOUT_MS = 30_000;

function statusOf(xy: string): GitChangeStatus {
  if (xy.includes('R') || xy.includes('C')) return 'MOVED';
  if (xy === '??' || xy.includes('A')) return 'ADDED';
  if (xy.includes('D')) return 'DELETED';
  return 'UPDATED';
}

/** Changed files under `dir` (paths relative to the repository root), or an error message when `dir` is not in a repository. */
export async function gitChanges(dir: string, run: Omit<GitRunOptions, 'cwd'>): Promise<{ path: string; status: GitChangeStatus }[] | { error: string }> {
  // (a submodule's worktree is not looked into: that runs git in it, which the daemon's git may not)
  const res = await runGit(['status', '--porcelain=v1', '-z', '--untracked-files=all', '--ignore-submodules=dirty', '--', '.'], {
    ...run,
    cwd: dir,
    timeoutMs: TIMEOUT_MS,
  });
  if (res.code !== 0) return { error: res.stderr.trim() || `git status failed (exit ${res.code})` };
  const out: { path: string; status: GitChangeStatus }[] = [];
  const parts = res.stdout.split('\0');
  for (let i = 0; i < parts.length; i++) {
    const entry = parts[i]!;
    if (entry.length < 4) continue;
    const xy = entry.slice(0, 2);
    out.push({ path: entry.slice(3), status: statusOf(xy) });
    if (xy.includes('R') || xy.includes('C')) i++; // the original path follows a rename
  }
  return out;
}

/** The most of a file's current side /api/git/diff reads (its committed side is bounded by runGit's capture). */
const MAX_DIFF_BYTES = 1024 * 1024;

/**
 * A file's committed (HEAD) and current text; null for a side that does not exist. `read` reads the
 * current side through the conversation's file service (never on the host); git runs in its sandbox.
 */
export async function gitDiff(
  file: string,
  run: Omit<GitRunOptions, 'cwd'>,
  ref: string,
  read: (p: string, maxBytes: number) => Promise<Buffer>,
): Promise<{ original: string | null; modified: string | null }> {
  const res = await runGit(['show', '--no-textconv', '--no-ext-diff', `${ref}:./${path.basename(file)}`], {
    ...run,
    cwd: path.dirname(file),
    timeoutMs: TIMEOUT_MS,
  });
  const original = res.code === 0 ? res.stdout : null;
  const modified = await read(file, MAX_DIFF_BYTES).then(
    (b) => b.toString('utf8'),
    () => null,
  );
  return { original, modified };
}
