/**
 * SANDBOX=none: each conversation's file service is a plain process of the daemon's user (the same
 * file-service.pl a holder runs as its pid 2), kept while used and ended after a minute unused.
 *
 * A process's start is a wait a conversation's first file operation would see (a node service's
 * took its first turn's file create to ~60–70 ms). In a daemon, once a conversation has used
 * its service, one more is started ahead without a workspace (`--root-later`): the next
 * conversation takes it, and its first request gives it its workspace, once (the service refuses
 * another). The next is started as soon as one is taken: conversations begun back to back found none
 * every other time when it started 100 ms later.
 */
import type { ChildProcess } from 'node:child_process';
import { childProcess } from '../builtins.js';
import fs from 'node:fs';
import { baseChildEnv } from './child-env.js';
import { FileChannel, FileOpError } from './files.js';
import { exited, killTree } from './processes.js';
import { findProgram } from './programs.js';
import { FILE_SERVICE, serviceProgram } from './view.js';

/** The perl that runs the services (perl-base: every Debian system has it), found at the first start. */
let perl: string | null = null;

/** A conversation's file service process ends after this long unused. */
const PLAIN_FILES_IDLE_MS = 60_000;

/** How long after the spare service was taken the next one starts (the timer's turn: after the taker's request is sent). */
const SPARE_REFILL_MS = 0;

interface Entry {
  /** The conversation it serves ('' while it is the spare). */
  id: string;
  proc: ChildProcess;
  channel: FileChannel;
  timer: NodeJS.Timeout | null;
  /** Resolves once it serves its conversation's workspace (rejects when it cannot). */
  served: Promise<void>;
}

export class PlainFileServices {
  private readonly entries = new Map<string, Entry>();
  /** The service started ahead, without a workspace yet. */
  private spare: Entry | null = null;
  private refillTimer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    /** `onFault`: a service broke the protocol or a deadline (its process is ended already). */
    private readonly onFault: (conversationId: string, reason: string) => void = () => {},
    /** Where a spare service waits (its working directory); null: no spare (a launcher outside a daemon). */
    private readonly spareDir: string | null = null,
  ) {}

  /** The conversation's channel, its process started (or the spare taken) when it has none (or it ended). */
  channel(conversationId: string, workspaceDir: string): Promise<FileChannel> {
    let p = this.entries.get(conversationId);
    if (!p?.channel.usable) {
      fs.mkdirSync(workspaceDir, { recursive: true, mode: 0o700 });
      p = this.takeSpare(workspaceDir) ?? this.start(['--root', workspaceDir], workspaceDir);
      p.id = conversationId;
      this.entries.set(conversationId, p);
      this.refill();
    }
    const entry = p;
    if (entry.timer) clearTimeout(entry.timer);
    entry.timer = setTimeout(() => killTree(entry.proc), PLAIN_FILES_IDLE_MS);
    entry.timer.unref();
    return entry.served.then(
      () => entry.channel,
      (e: Error) => {
        throw new FileOpError('UNAVAILABLE', e.message);
      },
    );
  }

  /** A service process: `args` name its workspace (`--root`) or leave it for later (`--root-later`). */
  private start(args: string[], cwd: string): Entry {
    perl ??= findProgram('perl') ?? 'perl';
    const [program, ...first] = serviceProgram(perl, FILE_SERVICE);
    const proc = childProcess().spawn(program!, [...first, ...args], {
      cwd,
      env: { PATH: baseChildEnv().PATH! },
      stdio: ['pipe', 'pipe', 'ignore'],
      detached: true,
    });
    const channel = new FileChannel(proc.stdin!, proc.stdout!, () => killTree(proc));
    const entry: Entry = { id: '', proc, channel, timer: null, served: channel.ready };
    channel.onFault = (why) => {
      if (entry.id && this.entries.get(entry.id) === entry) this.onFault(entry.id, why);
    };
    proc.once('error', (e: NodeJS.ErrnoException) =>
      channel.break(`the file service could not be started${e.code === 'ENOENT' ? ': perl was not found (apt-get install perl-base)' : ''}`),
    );
    proc.once('exit', () => {
      channel.ended('the file service ended');
      if (this.spare === entry) this.spare = null;
      if (entry.id && this.entries.get(entry.id) === entry) this.entries.delete(entry.id);
    });
    return entry;
  }

  /** The spare, given `workspaceDir` as its workspace by its first request; null when there is none alive. */
  private takeSpare(workspaceDir: string): Entry | null {
    const spare = this.spare;
    if (!spare?.channel.usable) return null;
    this.spare = null;
    spare.served = spare.channel.ready.then(async () => {
      await spare.channel.request({ op: 'root', path: workspaceDir }, null);
    });
    return spare;
  }

  /** Starts the spare SPARE_REFILL_MS from now when there is none; nothing outside a daemon. */
  private refill(): void {
    if (this.spareDir === null || this.stopped || this.refillTimer || this.spare?.channel.usable) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      this.startSpare();
    }, SPARE_REFILL_MS);
    this.refillTimer.unref();
  }

  private startSpare(): void {
    if (this.spareDir === null || this.stopped || this.spare?.channel.usable) return;
    try {
      fs.mkdirSync(this.spareDir, { recursive: true, mode: 0o700 });
    } catch {
      return; // the next use tries again
    }
    this.spare = this.start(['--root-later'], this.spareDir);
  }

  /** Starts the spare now if there is none (a daemon's sandbox warming up); resolves once it is ready. */
  async warm(): Promise<void> {
    this.startSpare();
    await this.spare?.channel.ready.catch(() => {});
  }

  /** The spare service's pid (tests, from the host). */
  get sparePid(): number | null {
    return this.spare?.channel.usable ? (this.spare.proc.pid ?? null) : null;
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

  /** No spare from now on; the one there is ends (the conversations' are closed by `close`). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillTimer = null;
    const spare = this.spare;
    this.spare = null;
    if (!spare) return;
    killTree(spare.proc);
    await exited(spare.proc, 3000);
  }

  ids(): string[] {
    return [...this.entries.keys()];
  }
}
