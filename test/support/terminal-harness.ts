/**
 * The terminal tool's test harness (test/tools-terminal*.test.ts): one tool on plain processes with
 * short timeouts, made before a file's tests and closed after them (`useTerminalTool`), a workspace
 * per context, and the process checks the tests judge from the host.
 */
import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox } from '../../src/sandbox/launcher.js';
import { createTerminalTool, type TerminalTool } from '../../src/tools/terminal/tool.js';
import type { ToolContext } from '../../src/tools/types.js';
import type { TerminalObservation as ToolObservation } from '../../src/tools/terminal/tool.js';
import { waitFor } from './daemon.js';

export const SECRET = 'sk-test-5ecr3t-value';
export let root: string;
export let tool: TerminalTool;
let convSeq = 0;

export function textOf(obs: ToolObservation): string {
  const c = obs.content[0];
  assert.ok(c && c.type === 'text');
  return c.text;
}

export function makeCtx(over: Partial<ToolContext> = {}): ToolContext {
  const ws = fs.mkdtempSync(path.join(root, 'ws-'));
  return {
    conversationId: `conv-${++convSeq}`,
    workspaceDir: ws,
    signal: new AbortController().signal,
    env: {},
    redact: (t) => t.split(SECRET).join('<secret_hidden>'),
    ...over,
  };
}

export type Call = { command: string; is_input?: boolean; timeout?: number | null; reset?: boolean };
export const shellPids = new Set<number>();
export const runWith = (ctx: ToolContext, call: Call, t: TerminalTool) => run(ctx, call, t);
export async function run(ctx: ToolContext, call: Call, t: TerminalTool = tool): Promise<ToolObservation> {
  const obs = await t.execute(tool.parameters.parse(call), ctx);
  const pid = t.pool.session(ctx.conversationId)?.pid;
  if (pid) shellPids.add(pid);
  return obs;
}

/**
 * Sends C-c, then waits with "" until the tool reports the command's end (on a busy machine the shell
 * may report it after the call's no-output wait). Returns the last observation and every text seen.
 */
export async function interrupt(ctx: ToolContext, t: TerminalTool = tool): Promise<{ last: ToolObservation; text: string }> {
  let last = await run(ctx, { command: 'C-c', is_input: true }, t);
  let text = textOf(last);
  const deadline = Date.now() + 30_000;
  while (last.exit_code === -1 && Date.now() < deadline) {
    last = await run(ctx, { command: '' }, t);
    text += textOf(last);
  }
  return { last, text };
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function procState(pid: number): string | null {
  try {
    const raw = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return raw.slice(raw.lastIndexOf(')') + 2).split(' ')[0] ?? null;
  } catch {
    return null;
  }
}

/** True once `cond` holds (false when it still does not after `ms`: the caller asserts). */
export const waitUntil = (cond: () => boolean, ms = 15_000): Promise<boolean> =>
  waitFor(cond, 'a condition', ms).then(
    () => true,
    () => false,
  );

export function pgrep(pattern: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', pattern], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

export function pidFrom(text: string): number {
  const m = /PID=(\d+)/.exec(text);
  assert.ok(m, `no PID in: ${text}`);
  return Number(m[1]);
}

/** The file's tool: made before its tests, closed (and its directory removed) after them. */
export function useTerminalTool(): void {
  before(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-term-test-'));
    tool = createTerminalTool({
      sandbox: Sandbox.none(),
      noOutputTimeoutMs: 800,
      inputWaitMs: 400,
      maxOutputChars: 2000,
      outputDir: (id) => path.join(root, 'outputs', id),
    });
  });

  after(async () => {
    await tool.closeAll();
    fs.rmSync(root, { recursive: true, force: true });
  });
}
