/**
 * Which conversation's workspace a side-channel call (bash, file, git) means, and where its path
 * is on the host. OpenHands' client does not name a conversation on these calls: it sends a path
 * (or a cwd) in the terms of the `working_dir` it gave at create. That string is never used as a
 * host path; it only tells the conversations apart:
 *
 * 1. `conversation_id` given: that conversation.
 * 2. A host path under a conversation's own workspace (`WORKSPACE_ROOT/<id hex>/…`, what the info's
 *    `workspace.working_dir` shows): that conversation, the path as is.
 * 3. A path under a `working_dir` some conversation declared: the newest such conversation (the
 *    longest declared prefix wins); the rest of the path is taken inside its workspace.
 * 4. Otherwise (no path, a relative one, or none of the above): the newest conversation.
 *
 * The resulting host path is then confined to that workspace by the caller's resolver (symlinks
 * and `..` included); a path that leaves it is refused with the reason.
 */
import path from 'node:path';
import { NotFoundError } from '../errors.js';
import type { ParsedRecord } from './record-data.js';
import { allRecords } from './agent-server.js';
import { conversationIdHex, workspacePath } from '../sandbox/workspace-dir.js';
import type { Conversations } from './conversations.js';

interface LocatedPath {
  conversationId: string;
  /** The conversation's workspace on the host. */
  workspaceDir: string;
  /** The path asked for, as a path the resolver checks (host path, or a path in the sandbox's view). Null when none was given. */
  target: string | null;
}

const HEX32 = /^[0-9a-f]{32}$/;

function inside(root: string, p: string): string | null {
  if (p === root) return '';
  const rel = path.relative(root, p);
  return rel === '' || rel.startsWith('..') || path.isAbsolute(rel) ? null : rel;
}

export async function locateWorkspacePath(
  conversations: Conversations,
  workspaceRoot: string,
  hint: { conversationId?: string | null; path?: string | null },
): Promise<LocatedPath> {
  const root = path.resolve(workspaceRoot);
  const p = hint.path ? hint.path : null;
  const at = (id: string, target: string | null): LocatedPath => {
    const ws = workspacePath(root, id);
    return { conversationId: id, workspaceDir: ws, target: target === null ? null : path.isAbsolute(target) ? target : path.join(ws, target) };
  };
  if (hint.conversationId) {
    await conversations.require(hint.conversationId);
    return at(hint.conversationId, p);
  }
  const all = await allRecords(conversations); // newest first
  if (p && path.isAbsolute(p)) {
    const abs = path.resolve(p);
    const rel = inside(root, abs);
    const hex = rel?.split(path.sep)[0];
    if (hex && HEX32.test(hex)) {
      const conv = all.find((r) => conversationIdHex(r.id) === hex);
      if (conv) return at(conv.id, abs);
    }
    let best: { rec: ParsedRecord; rel: string; len: number } | null = null;
    for (const rec of all) {
      const declared = rec.data.declared_working_dir;
      if (declared === undefined || !path.isAbsolute(declared)) continue;
      const d = path.resolve(declared);
      const r = inside(d, abs);
      if (r !== null && (!best || d.length > best.len)) best = { rec, rel: r, len: d.length };
    }
    if (best) return at(best.rec.id, path.join(workspacePath(root, best.rec.id), best.rel));
  }
  const newest = all[0];
  if (!newest) throw new NotFoundError('No conversation workspace: create a conversation first');
  return at(newest.id, p);
}
