/**
 * The terminal's observations as the agent reads them: the output redacted, cut in the middle past
 * the limit (the whole of it saved to a file the shell can read), the notes, the working directory
 * and the exit code.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { TerminalObservation } from '../../events/tool-catalog.js';
import { VISIBLE_OUTPUTS } from '../../sandbox/settings.js';
import type { ShellSandbox } from '../../sandbox/types.js';
import type { ToolContext } from '../types.js';
import { truncateMiddle } from './output.js';
import { isoTime } from '../../iso-time.js';

/** The call an observation answers. */
export interface CallBase {
  command: string;
  ctx: ToolContext;
}

export interface ObservedResult {
  output: string;
  notes: string[];
  exitCode: number | null;
  cwd: string;
  isError?: boolean;
  timedOut?: boolean;
}

export class Observations {
  private outputSeq = 0;

  constructor(
    private readonly sandbox: ShellSandbox,
    /** Longest output text returned to the LLM. */
    readonly maxOutputChars: number,
    /** Where full outputs go without a sandbox. */
    private readonly outputDirFor: (conversationId: string) => string,
  ) {}

  private saveFullOutput(conversationId: string, text: string): string | null {
    try {
      // sandboxed: the conversation's directory its shell sees (read-only) at /parley/outputs
      const dirs = this.sandbox.enabled ? this.sandbox.dirs(conversationId) : null;
      const dir = dirs ? dirs.outputs.host : this.outputDirFor(conversationId);
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
      const file = path.resolve(dir, `terminal-${isoTime().replace(/[:.]/g, '-')}-${process.pid}-${++this.outputSeq}.txt`);
      // the directory is read-only inside and the daemon's (the sandbox cannot put a link there);
      // the file is readable by the sandbox's uid
      const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
      try {
        if (dirs?.owner) fs.fchownSync(fd, dirs.owner.uid, dirs.owner.gid);
        fs.writeFileSync(fd, text);
      } finally {
        fs.closeSync(fd);
      }
      return file;
    } catch {
      return null;
    }
  }

  /** The saved output file as the shell sees it. */
  private visibleOutputPath(file: string): string {
    return this.sandbox.enabled ? path.posix.join(VISIBLE_OUTPUTS, path.basename(file)) : file;
  }

  result(base: CallBase, r: ObservedResult): TerminalObservation {
    const { ctx } = base;
    let output = ctx.redact(r.output);
    let fullPath: string | null = null;
    if (output.length > this.maxOutputChars) {
      fullPath = this.saveFullOutput(ctx.conversationId, output);
      const shown = fullPath && this.visibleOutputPath(fullPath);
      const where = shown
        ? `The full output (${output.length} characters) was saved to ${shown}; read parts of it with e.g. \`sed -n '100,200p' ${shown}\` or \`grep\`.`
        : 'The full output could not be saved.';
      output = truncateMiddle(
        output,
        this.maxOutputChars,
        (omitted) => `\n\n[... Output truncated: ${omitted} characters were removed from the middle. ${where} ...]\n\n`,
      );
    }
    const lines: string[] = [];
    if (output) lines.push(output.endsWith('\n') ? output.slice(0, -1) : output);
    for (const n of r.notes) lines.push(`[${n}]`);
    lines.push(`[Current working directory: ${r.cwd}]`);
    if (r.exitCode !== null && r.exitCode !== -1) lines.push(`[Command finished with exit code ${r.exitCode}]`);
    const obs: TerminalObservation = {
      kind: 'TerminalObservation',
      content: [{ type: 'text', text: ctx.redact(lines.join('\n')) }],
      is_error: r.isError ?? false,
      command: ctx.redact(base.command),
      exit_code: r.exitCode,
      working_dir: ctx.redact(r.cwd),
      timeout: r.timedOut ?? false,
    };
    if (fullPath) obs.full_output_path = this.visibleOutputPath(fullPath);
    return obs;
  }

  error(base: CallBase, message: string, cwd: string): TerminalObservation {
    const { ctx } = base;
    return {
      kind: 'TerminalObservation',
      content: [{ type: 'text', text: ctx.redact(message) }],
      is_error: true,
      command: ctx.redact(base.command),
      exit_code: null,
      working_dir: ctx.redact(cwd),
      timeout: false,
    };
  }
}
