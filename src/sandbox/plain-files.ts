/**
 * SANDBOX=none: each conversation's file service is a plain process of the daemon's user (the same
 * file-helper.mjs a holder runs as its pid 2), kept while used and ended after a minute unused.
 */
import type { ChildProcess } from 'node:child_process';
import { childProcess } from '../builtins.js';
import fs from 'node:fs';
import { baseChildEnv } from './child-env.js';
import { FileChannel, FileOpError } from './files.js';
import { exited, killTree } from './processes.js';
import { FILE_HELPER, HELPER_NODE_FLAGS } from './view.js';

/** A conversation's file service process ends after this long unused. */
const PLAIN_FILES_IDLE_MS = 60_000;

interface Entry {
  proc: ChildProcess;
  channel: FileChannel;
  timer: NodeJS.Timeout | null;
}

export class PlainFileServices {
  private readonly entries = new Map<string, Entry>();

  /** `onFault`: a service broke the protocol or a deadline (its process is ended already). */
  constructor(private readonly onFault: (conversationId: string, reason: string) => void = () => {}) {}

  /** The conversation's channel, its process started when it has none (or it ended). */
  channel(conversationId: string, workspaceDir: string): Promise<FileChannel> {
    let p = this.entries.get(conversationId);
    if (!p?.channel.usable) {
      fs.mkdirSync(workspaceDir, { recursive: true, mode: 0o700 });
      const proc = childProcess().spawn(process.execPath, [...HELPER_NODE_FLAGS, FILE_HELPER, '--root', workspaceDir], {
        cwd: workspaceDir,
        env: { PATH: baseChildEnv().PATH! },
        stdio: ['pipe', 'pipe', 'ignore'],
        detached: true,
      });
      const entry: Entry = { proc, channel: new FileChannel(proc.stdin!, proc.stdout!, () => killTree(proc)), timer: null };
      entry.channel.onFault = (why) => {
        if (this.entries.get(conversationId) === entry) this.onFault(conversationId, why);
      };
      proc.once('error', () => entry.channel.break('the file service could not be started'));
      proc.once('exit', () => {
        entry.channel.ended('the file service ended');
        if (this.entries.get(conversationId) === entry) this.entries.delete(conversationId);
      });
      this.entries.set(conversationId, entry);
      p = entry;
    }
    const entry = p;
    if (entry.timer) clearTimeout(entry.timer);
    entry.timer = setTimeout(() => killTree(entry.proc), PLAIN_FILES_IDLE_MS);
    entry.timer.unref();
    return entry.channel.ready.then(
      () => entry.channel,
      (e: Error) => {
        throw new FileOpError('UNAVAILABLE', e.message);
      },
    );
  }

  /** Ends the conversation's file service (if it has one) and waits for it. */
  async close(conversationId: string): Promise<void> {
    const entry = this.entries.get(conversationId);
    if (!entry) return;
    this.entries.delete(conversationId);
    if (entry.timer) clearTimeout(entry.timer);
    killTree(entry.proc);
    await exited(entry.proc, 3000);
  }

  ids(): string[] {
    return [...this.entries.keys()];
  }
}
