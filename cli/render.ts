/**
 * How a conversation's events look in a terminal: messages, each command with its output, file
 * edits as short diffs, errors, status changes, and a spinner while the LLM thinks. Colours and
 * the spinner only on a TTY (and colours only where the terminal has them: NO_COLOR, TERM=dumb);
 * redirected to a file or a pipe, the same lines come plain and streamed text is left out (the
 * finished message follows anyway). `--json` bypasses this: one event per line, as received.
 */
import type { EventOf, ParleyEvent } from '../src/client.js';

export interface EventSink {
  event(e: ParleyEvent): void;
  /** Bytes written but not yet taken by the reader of the output (a pipe to a slow program). */
  backlog(): number;
  /** Resolves when the backlog has been taken. */
  drained(): Promise<void>;
  /** Stops the spinner and ends a half-written line. */
  close(): void;
}

type Output = NodeJS.WriteStream | NodeJS.WritableStream;

const backlogOf = (out: Output) => (out as { writableLength?: number }).writableLength ?? 0;
const drainOf = (out: Output) => (backlogOf(out) === 0 ? Promise.resolve() : new Promise<void>((r) => out.once('drain', () => r())));

/** NDJSON: every event as the daemon sent it, one per line (live-only ones without `seq`). */
export function jsonSink(out: Output): EventSink {
  return {
    event: (e) => void out.write(`${JSON.stringify(e)}\n`),
    backlog: () => backlogOf(out),
    drained: () => drainOf(out),
    close() {},
  };
}

const SGR = { bold: [1, 22], dim: [2, 22], red: [31, 39], green: [32, 39], yellow: [33, 39], cyan: [36, 39], magenta: [35, 39] } as const;
type Style = keyof typeof SGR;

/** Output lines of a command shown at most (the first and last half of them). */
const MAX_OUTPUT_LINES = 16;
/** Lines of each side of an edit shown at most. */
const MAX_DIFF_LINES = 10;
/** How a task list shows each task's status. */
const TASK_MARK: Record<string, string> = { done: '[x]', in_progress: '[~]' };
const taskLine = (t: { status: string; title: string }) => `${TASK_MARK[t.status] ?? '[ ]'} ${t.title}`;
const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/**
 * The sink for people: each event as a line or a block, colored on a TTY, the answer streamed, a
 * spinner while the agent works. Long: one closure over the sink's state (the spinner, the streamed
 * text), with a branch per event kind; split, each part would take that state as arguments.
 */
export function textSink(out: Output): EventSink {
  const tty = (out as NodeJS.WriteStream).isTTY === true;
  const colors = tty && (out as NodeJS.WriteStream).hasColors?.() === true;
  const paint = (style: Style, s: string) => (colors ? `\x1b[${SGR[style][0]}m${s}\x1b[${SGR[style][1]}m` : s);
  /** Text of the answer being streamed (TTY only), so the finished message is not printed twice. */
  let streamed = '';
  let spinner: NodeJS.Timeout | null = null;
  let frame = 0;

  const stopSpinner = () => {
    if (!spinner) return;
    clearInterval(spinner);
    spinner = null;
    out.write('\r\x1b[2K');
  };
  const startSpinner = () => {
    if (!tty || spinner) return;
    const draw = () => void out.write(`\r\x1b[2K${paint('cyan', SPINNER[frame++ % SPINNER.length]!)} ${paint('dim', 'thinking…')}`);
    draw();
    spinner = setInterval(draw, 100);
    spinner.unref();
  };
  /** The cursor is not at the start of a line (after streamed text or setup output). */
  let open = false;
  const raw = (text: string, style?: Style) => {
    if (!text) return;
    stopSpinner();
    out.write(style ? paint(style, text) : text);
    open = !text.endsWith('\n');
  };
  const endStream = () => {
    if (open) out.write('\n');
    open = false;
    const s = streamed;
    streamed = '';
    return s;
  };
  const line = (s: string) => {
    stopSpinner();
    endStream();
    out.write(`${s}\n`);
  };
  const indent = (s: string, style?: Style) =>
    s
      .split('\n')
      .map((l) => `  ${style ? paint(style, l) : l}`)
      .join('\n');
  /** Prints the agent's text unless it is what was just streamed. */
  const said = (text: string) => {
    stopSpinner();
    const s = endStream();
    if (s && s.trim() === text.trim()) return;
    if (text.trim()) out.write(`${text}\n`);
  };

  const action = (e: EventOf<'ActionEvent'>) => {
    const thought = e.thought.map((t) => t.text).join('\n');
    if (thought) said(thought);
    const a = e.action;
    if (!a) return line(`${paint('yellow', '?')} ${e.tool_name} ${paint('dim', clip(e.tool_call.arguments, 200))}`);
    switch (a.kind) {
      case 'TerminalAction':
        return line(`${paint('bold', '$')} ${paint('bold', a.is_input ? `(input) ${a.command}` : a.command)}`);
      case 'FileEditorAction':
        return line(fileEdit(a));
      case 'TaskTrackerAction':
        return line(`${paint('magenta', '☰')} tasks ${a.command}${a.task_list ? `\n${indent(a.task_list.map(taskLine).join('\n'))}` : ''}`);
      case 'ThinkAction':
        return line(paint('dim', `… ${a.thought}`));
      case 'FinishAction':
        return line(`${paint('green', '✓')} ${paint('bold', a.message)}`);
      case 'MCPToolAction':
        return line(`${paint('magenta', '⚙')} ${e.tool_name} ${paint('dim', clip(JSON.stringify(a.data), 200))}`);
    }
  };

  const fileEdit = (a: Extract<NonNullable<EventOf<'ActionEvent'>['action']>, { kind: 'FileEditorAction' }>) => {
    const head = `${paint('cyan', '✎')} ${a.command} ${a.path}`;
    const minus = (ls: string[]) => ls.map((l) => `  ${paint('red', `- ${l}`)}`);
    const plus = (ls: string[]) => ls.map((l) => `  ${paint('green', `+ ${l}`)}`);
    switch (a.command) {
      case 'create':
        return [head, ...cap(plus(lines(a.file_text ?? '')), MAX_DIFF_LINES, paint)].join('\n');
      case 'insert':
        return [`${head} ${paint('dim', `after line ${a.insert_line ?? 0}`)}`, ...cap(plus(lines(a.new_str ?? '')), MAX_DIFF_LINES, paint)].join('\n');
      case 'str_replace': {
        const { removed, added } = changedLines(a.old_str ?? '', a.new_str ?? '');
        return [head, ...cap(minus(removed), MAX_DIFF_LINES, paint), ...cap(plus(added), MAX_DIFF_LINES, paint)].join('\n');
      }
      default:
        return head;
    }
  };

  const observation = (e: EventOf<'ObservationEvent'>) => {
    const o = e.observation;
    const text = o.content.map((c) => (c.type === 'text' ? c.text : `[${c.image_urls.length} image(s)]`)).join('\n');
    switch (o.kind) {
      case 'TerminalObservation': {
        const body = text.replace(/\n+$/, '');
        if (body)
          line(
            cap(
              lines(body).map((l) => `  ${l}`),
              MAX_OUTPUT_LINES,
              paint,
            ).join('\n'),
          );
        if (o.exit_code !== 0 && o.exit_code !== null)
          line(
            paint(o.exit_code === -1 ? 'dim' : 'red', `  [${o.exit_code === -1 ? 'still running' : `exit ${o.exit_code}`}${o.timeout ? ', timed out' : ''}]`),
          );
        return;
      }
      case 'FileEditorObservation':
        // the action showed the change; a view shows its text, a failed edit its reason
        if (o.is_error || o.command === 'view')
          line(
            cap(
              lines(text).map((l) => `  ${o.is_error ? paint('red', l) : paint('dim', l)}`),
              MAX_OUTPUT_LINES,
              paint,
            ).join('\n'),
          );
        return;
      case 'FinishObservation':
      case 'ThinkObservation':
      case 'TaskTrackerObservation':
        if (o.is_error) line(indent(text, 'red'));
        return;
      case 'MCPObservation':
        line(
          cap(
            lines(text).map((l) => `  ${o.is_error ? paint('red', l) : l}`),
            MAX_OUTPUT_LINES,
            paint,
          ).join('\n'),
        );
        return;
    }
  };

  const stateUpdate = (e: EventOf<'ConversationStateUpdateEvent'>) => {
    const v = e.value as Record<string, unknown> | string | null;
    if (e.key === 'execution_status') {
      line(paint('dim', `· ${String(v)}`));
      if (v === 'running') startSpinner();
      return;
    }
    if (e.key === 'setup' && v && typeof v === 'object') return line(paint('dim', `· setup: ${v.phase}${v.detail ? ` ${v.detail}` : ''}`));
    if (e.key === 'llm_retry' && v && typeof v === 'object')
      return line(paint('yellow', `· LLM retry ${v.attempt} in ${Math.round(Number(v.delay_ms) / 1000)} s (${v.code})`));
    if (e.key === 'setup_script' && v && typeof v === 'object')
      return line(paint(v.exit_code === 0 ? 'dim' : 'yellow', `· setup.sh exited ${v.exit_code}${v.timed_out ? ' (timed out)' : ''}`));
    line(paint('dim', `· ${e.key}: ${clip(JSON.stringify(v), 160)}`));
  };

  const event = (e: ParleyEvent): void => {
    switch (e.kind) {
      case 'MessageEvent': {
        const text = e.llm_message.content.map((c) => (c.type === 'text' ? c.text : `[${c.image_urls.length} image(s)]`)).join('\n');
        if (e.source === 'user') {
          line(`${paint('cyan', '>')} ${paint('bold', text)}`);
          startSpinner();
        } else said(text);
        return;
      }
      case 'StreamingDeltaEvent':
        if (!tty) return;
        streamed += e.content;
        raw(e.content);
        return;
      case 'ActionEvent':
        action(e);
        return;
      case 'ObservationEvent':
        observation(e);
        startSpinner();
        return;
      case 'AgentErrorEvent':
        line(paint('yellow', `! ${e.error}`));
        startSpinner();
        return;
      case 'ConversationErrorEvent':
        line(paint('red', `✗ ${e.code}: ${e.detail}`));
        return;
      case 'ConversationStateUpdateEvent':
        stateUpdate(e);
        return;
      case 'UserRejectObservation':
        line(paint('yellow', `✗ rejected ${e.tool_name}: ${e.rejection_reason}`));
        return;
      case 'PauseEvent':
        line(paint('dim', '· pause requested'));
        return;
      case 'InterruptEvent':
        line(paint('yellow', '· interrupted'));
        return;
      case 'Condensation':
        line(paint('dim', `· history condensed (${e.forgotten_event_ids.length} events summarised)`));
        return;
      case 'SetupOutputEvent':
        raw(e.output, 'dim');
        return;
      case 'ServerErrorEvent':
        line(paint('red', `✗ ${e.code}: ${e.detail}`));
        return;
      case 'SystemPromptEvent':
        return; // the tools and instructions: in --json, not worth a screen here
    }
  };

  return {
    event,
    backlog: () => backlogOf(out),
    drained: () => drainOf(out),
    close() {
      stopSpinner();
      endStream();
    },
  };
}

const lines = (s: string) => s.replace(/\n$/, '').split('\n');

/** At most `max` lines: the first and the last half, and how many were left out. */
function cap(ls: string[], max: number, paint: (style: Style, s: string) => string): string[] {
  if (ls.length <= max) return ls;
  const half = Math.floor(max / 2);
  return [...ls.slice(0, half), `  ${paint('dim', `… ${ls.length - 2 * half} more lines`)}`, ...ls.slice(-half)];
}

/** The lines an edit changes: what is left of old and new once their common first and last lines are dropped. */
function changedLines(oldText: string, newText: string): { removed: string[]; added: string[] } {
  const a = oldText === '' ? [] : oldText.split('\n');
  const b = newText === '' ? [] : newText.split('\n');
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let end = 0;
  while (end < a.length - start && end < b.length - start && a[a.length - 1 - end] === b[b.length - 1 - end]) end++;
  return { removed: a.slice(start, a.length - end), added: b.slice(start, b.length - end) };
}

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
