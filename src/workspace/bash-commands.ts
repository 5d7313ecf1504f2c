/**
 * The `/api/bash` side channel: commands a client runs in a conversation's workspace outside the
 * agent loop (OpenHands' BashCommand / BashOutput events). Each command is its own `bash -c` in a
 * new process group, started through the conversation's launcher (its sandbox when the sandbox
 * is on), with bounded capture and a timeout that kills the whole group. The events are kept in
 * memory (the newest MAX_EVENTS), like the agent server does: they are a log of the channel, not
 * part of any conversation.
 */
import type { ChildProcess, StdioOptions } from 'node:child_process';
import crypto from 'node:crypto';
import { signalGroup } from '../process-group.js';
import { isoTime } from '../iso-time.js';

export interface CommandLauncher {
  spawn(argv: string[], opts: { cwd: string; env: Record<string, string>; stdio?: StdioOptions }): ChildProcess;
}

export interface BashCommand {
  kind: 'BashCommand';
  id: string;
  timestamp: string;
  command: string;
  cwd: string | null;
  timeout: number;
  conversation_id: string;
}
export interface BashOutput {
  kind: 'BashOutput';
  id: string;
  timestamp: string;
  command_id: string;
  order: number;
  exit_code: number | null;
  stdout: string | null;
  stderr: string | null;
  timeout_occurred: boolean;
  conversation_id: string;
}
type BashEvent = BashCommand | BashOutput;

export interface BashSearch {
  kind__eq?: 'BashCommand' | 'BashOutput' | null;
  command_id__eq?: string | null;
  timestamp__gte?: string | null;
  timestamp__lt?: string | null;
  order__gt?: number | null;
  sort_order: 'TIMESTAMP' | 'TIMESTAMP_DESC';
  page_id?: string | null;
  limit: number;
}

const MAX_EVENTS = 5000;
const MAX_CAPTURE = 1024 * 1024;

export class BashCommands {
  private events: BashEvent[] = [];

  constructor(private readonly redact: (text: string) => string) {}

  private record<E extends BashEvent>(e: E): E {
    this.events.push(e);
    if (this.events.length > MAX_EVENTS) this.events.splice(0, this.events.length - MAX_EVENTS);
    return e;
  }

  /** Starts the command; `done` resolves with its output once it exits or times out. */
  start(
    launcher: CommandLauncher,
    req: { conversationId: string; command: string; hostCwd: string; shownCwd: string | null; timeoutS: number; env: Record<string, string> },
  ): { command: BashCommand; done: Promise<BashOutput> } {
    const command = this.record<BashCommand>({
      kind: 'BashCommand',
      id: crypto.randomUUID(),
      timestamp: isoTime(),
      command: req.command,
      cwd: req.shownCwd,
      timeout: req.timeoutS,
      conversation_id: req.conversationId,
    });
    const done = new Promise<BashOutput>((resolve) => {
      let stdout = '';
      let stderr = '';
      let timedOut = false;
      let timer: NodeJS.Timeout | undefined;
      let settled = false;
      const finish = (exitCode: number | null, error?: string) => {
        clearTimeout(timer);
        if (settled) return;
        settled = true;
        resolve(
          this.record<BashOutput>({
            kind: 'BashOutput',
            id: crypto.randomUUID(),
            timestamp: isoTime(),
            command_id: command.id,
            order: 0,
            exit_code: timedOut ? -1 : exitCode,
            stdout: this.redact(stdout),
            stderr: this.redact(error ? `${stderr}${error}` : stderr),
            timeout_occurred: timedOut,
            conversation_id: req.conversationId,
          }),
        );
      };
      let child: ChildProcess;
      try {
        child = launcher.spawn(['bash', '-c', req.command], { cwd: req.hostCwd, env: req.env, stdio: ['ignore', 'pipe', 'pipe'] });
      } catch (err) {
        finish(null, `cannot start the command: ${(err as Error).message}`);
        return;
      }
      timer = setTimeout(() => {
        timedOut = true;
        signalGroup(child.pid);
      }, req.timeoutS * 1000);
      child.stdout!.setEncoding('utf8').on('data', (d: string) => {
        if (stdout.length < MAX_CAPTURE) stdout += d;
      });
      child.stderr!.setEncoding('utf8').on('data', (d: string) => {
        if (stderr.length < MAX_CAPTURE) stderr += d;
      });
      child.on('error', (err) => finish(null, `cannot start the command: ${err.message}`));
      child.on('close', (code) => finish(code));
    });
    return { command, done };
  }

  get(id: string): BashEvent | null {
    return this.events.find((e) => e.id === id) ?? null;
  }

  search(q: BashSearch): { items: BashEvent[]; next_page_id: string | null } {
    const gte = q.timestamp__gte ? Date.parse(q.timestamp__gte) : null;
    const lt = q.timestamp__lt ? Date.parse(q.timestamp__lt) : null;
    let items = this.events.filter((e) => {
      if (q.kind__eq && e.kind !== q.kind__eq) return false;
      if (q.command_id__eq && (e.kind === 'BashCommand' ? e.id : e.command_id) !== q.command_id__eq) return false;
      if (q.order__gt !== null && q.order__gt !== undefined && (e.kind !== 'BashOutput' || e.order <= q.order__gt)) return false;
      const t = Date.parse(e.timestamp);
      if (gte !== null && t < gte) return false;
      if (lt !== null && t >= lt) return false;
      return true;
    });
    if (q.sort_order === 'TIMESTAMP_DESC') items = items.reverse();
    const start = q.page_id && /^\d+$/.test(q.page_id) ? Number(q.page_id) : 0;
    const page = items.slice(start, start + q.limit);
    return { items: page, next_page_id: start + q.limit < items.length ? String(start + q.limit) : null };
  }

  clear(): { cleared_count: number } {
    const n = this.events.length;
    this.events = [];
    return { cleared_count: n };
  }
}
