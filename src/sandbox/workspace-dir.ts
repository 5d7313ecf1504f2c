/**
 * One directory per conversation: `<root>/<conversation id as 32 lowercase hex>`, mode 0700.
 */
import { chmod, lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';

const UUID_RE = /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$/i;
const HEX32 = /^[0-9a-f]{32}$/;

class InvalidConversationIdError extends Error {
  override name = 'InvalidConversationIdError';
}

/** Dashed or 32-hex UUID → 32 lowercase hex. Throws for anything else (no path tricks possible). */
export function conversationIdHex(conversationId: string): string {
  if (!UUID_RE.test(conversationId)) {
    throw new InvalidConversationIdError('Conversation id must be a UUID');
  }
  return conversationId.replace(/-/g, '').toLowerCase();
}

/** The workspace path of a conversation (nothing is created). */
export function workspacePath(root: string, conversationId: string): string {
  return join(resolve(root), conversationIdHex(conversationId));
}

/** Creates (if needed) and returns `<root>/<conversation id hex>` (absolute). */
export async function createWorkspace(root: string, conversationId: string): Promise<string> {
  const dir = workspacePath(root, conversationId);
  await mkdir(resolve(root), { recursive: true, mode: 0o700 });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  return dir;
}

/**
 * Removes a workspace directory and everything in it. As a guard against a wrong path, the
 * directory's name must be a 32-hex conversation id. A missing directory is not an error.
 */
export async function removeWorkspace(dir: string): Promise<void> {
  const abs = resolve(dir);
  if (!HEX32.test(basename(abs))) {
    throw new Error(`Refusing to remove ${abs}: not a workspace directory`);
  }
  await removeTree(abs);
}

/**
 * `rm -rf` that also removes what an agent made unremovable for a non-root daemon: directories
 * without read, write or search permission (`chmod 0`) are given them back (never following a
 * symlink), then the removal is retried.
 */
export async function removeTree(dir: string): Promise<void> {
  try {
    await rm(dir, { recursive: true, force: true, maxRetries: 3 });
    return;
  } catch {
    /* a directory the daemon's user may not list or change: open them up below */
  }
  const open = async (d: string): Promise<void> => {
    await chmod(d, 0o700).catch(() => {});
    const entries = await readdir(d, { withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isDirectory()) await open(join(d, e.name));
  };
  const st = await lstat(dir).catch(() => null);
  if (st?.isDirectory()) await open(dir);
  await rm(dir, { recursive: true, force: true, maxRetries: 3 });
}

/** The daemon-owned askpass directory (askpass.ts), shown read-only inside sandboxes. */
export const helperDirOf = (dataDir: string) => join(dataDir, 'helpers');
