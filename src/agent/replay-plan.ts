/**
 * A replay plan: the steps of a recorded trajectory that the agent runs again in a new workspace
 * (src/agent/replay-run.ts), as src/conversation/replay.ts parses them from `replay_json`, and the
 * mapping of the recording's directories to the new workspace.
 */
import path from 'node:path';
import type { BuiltinToolName } from '../events/tool-catalog.js';

/** A replayed message's content. */
export type ReplayContent = ({ type: 'text'; text: string; cache_prompt: boolean } | { type: 'image'; image_urls: string[]; cache_prompt: boolean })[];

export type ReplayToolName = BuiltinToolName;

export type ReplayStep =
  | { type: 'message'; index: number; role: 'user' | 'assistant'; content: ReplayContent }
  | { type: 'tool'; index: number; tool: ReplayToolName; args: Record<string, unknown>; thought: string | null }
  /** Whole-file content (range null) or lines start..end (1-based, end -1 = last line) replaced. */
  | { type: 'write'; index: number; path: string; content: string; range: { start: number; end: number } | null; thought: string | null };

/** A checked `replay_json`: what the agent runs again in the new workspace. */
export interface ReplayPlan {
  /** The trajectory's first user message: it becomes the conversation's first message. */
  firstMessage: ReplayContent | null;
  /** Everything after it, in order. */
  steps: ReplayStep[];
  /** Directories the recording worked in, longest first (mapped to the new workspace). */
  roots: string[];
}

/** A recorded path in the new workspace (the recording's directories, longest first, become the workspace; a relative path is taken in it). */
export function mapReplayPath(p: string, roots: string[], workspaceDir: string): string {
  if (!path.isAbsolute(p)) return path.resolve(workspaceDir, p);
  for (const r of roots) if (p === r || p.startsWith(`${r}/`)) return workspaceDir + p.slice(r.length);
  return p;
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A recorded command with the recording's directories replaced by the new workspace. */
export function mapReplayCommand(command: string, roots: string[], workspaceDir: string): string {
  let out = command;
  for (const r of roots) {
    out = out.replace(new RegExp(`(^|[\\s'"=(:])${escapeRe(r)}(?=$|[\\s/'";&|)<>])`, 'g'), (_m, pre: string) => pre + workspaceDir);
  }
  return out;
}
