/**
 * How each event kind is shown. The switch is over the event union by `kind` (src/events/schema.ts),
 * so a new kind that is not handled here fails the console's type check.
 */
import { Component, type ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import type { ExecutionStatus, ParleyEvent } from './api.js';
import { Diff } from './diff.js';
import type { ActionEventT, ResultEventT, Row } from './rows.js';
import { clip, RichText, stripAnsi } from './text.js';

type Content = { type: 'text'; text: string } | { type: 'image'; image_urls: string[] };

const textOf = (content: readonly Content[]) =>
  content
    .filter((c): c is { type: 'text'; text: string } => c.type === 'text')
    .map((c) => c.text)
    .join('\n');

// one formatter: toLocaleTimeString builds a new one per call, which showed in the scroll profile
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const time = (iso: string) => {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : clock.format(d);
};

function Images({ content }: { content: readonly Content[] }) {
  const urls = content.flatMap((c) => (c.type === 'image' ? c.image_urls : []));
  if (!urls.length) return null;
  // data: images are shown; other URLs are links (the page loads nothing from elsewhere)
  return (
    <div class="images">
      {urls.map((u, i) =>
        u.startsWith('data:image/') ? (
          <img key={i} src={u} alt="" />
        ) : (
          <a key={i} href={u} target="_blank" rel="noreferrer noopener">
            {u.length > 80 ? `${u.slice(0, 77)}…` : u}
          </a>
        ),
      )}
    </div>
  );
}

/** Long output with a "show all" toggle. */
function Clipped({ text, lines, render }: { text: string; lines: number; render: (t: string) => ComponentChildren }) {
  const [all, setAll] = useState(false);
  const { shown, hidden } = all ? { shown: text, hidden: 0 } : clip(text, lines);
  return (
    <>
      {render(shown)}
      {hidden > 0 && (
        <button type="button" class="link" onClick={() => setAll(true)}>
          Show {hidden} more lines
        </button>
      )}
    </>
  );
}

/** The observation's text without the lines the badge and the header show (the LLM reads them; a person sees them drawn). */
const terminalOutput = (text: string) =>
  text.replace(/\n?\[Command finished with exit code -?\d+\]$/, '').replace(/\n?\[Current working directory: [^\n]*\]$/, '');

function Terminal({
  command,
  output,
  exit,
  pending,
  cwd,
}: {
  command: string;
  output: string | null;
  exit?: ComponentChildren;
  pending?: ComponentChildren;
  cwd?: string;
}) {
  return (
    <div class="term">
      <div class="term-cmd">
        <span class="prompt">$</span>
        <span>{command}</span>
        {cwd && <span class="cwd">{cwd}</span>}
      </div>
      {output !== null && output !== '' && <Clipped text={stripAnsi(output)} lines={40} render={(t) => <pre class="term-out">{t}</pre>} />}
      {pending}
      {exit}
    </div>
  );
}

function ExitBadge({ code, timeout }: { code: number | null; timeout: boolean }) {
  if (timeout) return <span class="badge warn">timed out</span>;
  if (code === null) return <span class="badge">did not run</span>;
  if (code === -1) return <span class="badge warn">still running (no output for a while)</span>;
  return <span class={`badge ${code === 0 ? 'ok' : 'bad'}`}>exit {code}</span>;
}

const Running = ({ status }: { status: ExecutionStatus | null }) =>
  status === 'waiting_for_confirmation' ? (
    <span class="badge warn">waiting for confirmation</span>
  ) : status === 'running' ? (
    <span class="badge run">
      <span class="spinner" /> running
    </span>
  ) : (
    <span class="badge">no result</span>
  );

function resultText(result: ResultEventT): string {
  if (result.kind === 'ObservationEvent') return textOf(result.observation.content);
  if (result.kind === 'UserRejectObservation') return `Rejected: ${result.rejection_reason}`;
  return result.error;
}

function ResultBlock({ result }: { result: ResultEventT }) {
  const text = resultText(result);
  const isError = result.kind !== 'ObservationEvent' || result.observation.is_error;
  return (
    <div class={`result ${isError ? 'error' : ''}`} data-seq={result.seq}>
      {result.kind === 'UserRejectObservation' && <span class="badge bad">rejected</span>}
      {text && <Clipped text={text} lines={20} render={(t) => <pre class="out">{t}</pre>} />}
      {result.kind === 'ObservationEvent' && <Images content={result.observation.content} />}
    </div>
  );
}

function ActionBody({ ev, result, status }: { ev: ActionEventT; result?: ResultEventT; status: ExecutionStatus | null }) {
  const a = ev.action;
  const waiting = result ? null : <Running status={status} />;
  if (!a) {
    return (
      <>
        <pre class="out">{ev.tool_call.arguments}</pre>
        {result ? <ResultBlock result={result} /> : waiting}
      </>
    );
  }
  switch (a.kind) {
    case 'TerminalAction': {
      const obs = result?.kind === 'ObservationEvent' && result.observation.kind === 'TerminalObservation' ? result.observation : null;
      return (
        <div data-seq={result?.seq}>
          <Terminal
            command={a.is_input ? `(input) ${a.command}` : a.command || '(wait for output)'}
            output={obs ? terminalOutput(textOf(obs.content)) : result ? resultText(result) : null}
            cwd={obs?.working_dir}
            exit={
              obs ? (
                <ExitBadge code={obs.exit_code} timeout={obs.timeout} />
              ) : result ? (
                <span class="badge bad">{result.kind === 'UserRejectObservation' ? 'rejected' : 'error'}</span>
              ) : null
            }
            pending={waiting}
          />
        </div>
      );
    }
    case 'FileEditorAction': {
      const ok = result?.kind === 'ObservationEvent' && !result.observation.is_error;
      const edit =
        a.command === 'str_replace' ? (
          <Diff before={a.old_str ?? ''} after={a.new_str ?? ''} context={2} />
        ) : a.command === 'create' ? (
          <Diff before="" after={a.file_text ?? ''} context={0} />
        ) : a.command === 'insert' ? (
          <>
            <div class="muted small">after line {a.insert_line}</div>
            <Diff before="" after={a.new_str ?? ''} context={0} />
          </>
        ) : null;
      return (
        <>
          {edit}
          {result && (!ok || !edit) ? (
            <ResultBlock result={result} />
          ) : result ? (
            <span data-seq={result.seq} class="badge ok">
              applied
            </span>
          ) : (
            waiting
          )}
        </>
      );
    }
    case 'TaskTrackerAction':
      return (
        <>
          {a.task_list && (
            <ul class="tasks">
              {a.task_list.map((t, i) => (
                <li key={i} class={t.status}>
                  <span class="task-box">{t.status === 'done' ? '✓' : t.status === 'in_progress' ? '•' : ''}</span>
                  {t.title}
                  {t.notes && <span class="muted"> — {t.notes}</span>}
                </li>
              ))}
            </ul>
          )}
          {result ? <ResultBlock result={result} /> : waiting}
        </>
      );
    case 'ThinkAction':
      return (
        <>
          <RichText class="thinking" text={a.thought} />
          {result && <span data-seq={result.seq} />}
        </>
      );
    case 'FinishAction':
      return (
        <>
          <RichText class="final" text={a.message} />
          {result && <span data-seq={result.seq} />}
        </>
      );
    case 'MCPToolAction':
      return (
        <>
          <pre class="out args">{JSON.stringify(a.data, null, 2)}</pre>
          {result ? <ResultBlock result={result} /> : waiting}
        </>
      );
  }
}

function actionTitle(ev: ActionEventT): { tag: string; title: ComponentChildren } {
  const a = ev.action;
  if (!a) return { tag: ev.tool_name, title: <span class="muted">call that could not run</span> };
  switch (a.kind) {
    case 'TerminalAction':
      return { tag: 'terminal', title: 'Command' };
    case 'FileEditorAction': {
      // one wording whether the call waits, runs or ran
      const verb = { view: 'View', create: 'Create', str_replace: 'Edit', insert: 'Insert into', undo_edit: 'Undo the last edit of' }[a.command] ?? a.command;
      return {
        tag: 'file',
        title: (
          <>
            {verb} <code>{a.path}</code>
          </>
        ),
      };
    }
    case 'TaskTrackerAction':
      return { tag: 'tasks', title: a.command === 'plan' ? 'Plan' : 'View the plan' };
    case 'ThinkAction':
      return { tag: 'think', title: 'Thought' };
    case 'FinishAction':
      return { tag: 'done', title: 'Final answer' };
    case 'MCPToolAction':
      return {
        tag: 'mcp',
        title: (
          <>
            Call <code>{ev.tool_name}</code>
          </>
        ),
      };
  }
}

function StateUpdate({ ev }: { ev: Extract<ParleyEvent, { kind: 'ConversationStateUpdateEvent' }> }) {
  const v = ev.value as Record<string, unknown> | string | null;
  switch (ev.key) {
    case 'execution_status':
      return (
        <div class="divider">
          <span class={`status-dot s-${String(v)}`} /> {String(v).replace(/_/g, ' ')}
        </div>
      );
    case 'setup': {
      const o = (v ?? {}) as { phase?: string; detail?: string; error?: string };
      return (
        <div class="divider">
          setup: {o.phase ?? JSON.stringify(v)}
          {o.error ? ` — ${o.error}` : ''}
        </div>
      );
    }
    case 'setup_script': {
      const o = (v ?? {}) as { exit_code?: number; output?: string };
      return <Terminal command=".openhands/setup.sh" output={o.output ?? ''} exit={<ExitBadge code={o.exit_code ?? null} timeout={false} />} />;
    }
    default:
      return (
        <div class="divider">
          {ev.key}: <code>{JSON.stringify(v).slice(0, 200)}</code>
        </div>
      );
  }
}

function EventBody({ row, status }: { row: Row; status: ExecutionStatus | null }) {
  const ev = row.event;
  switch (ev.kind) {
    case 'MessageEvent': {
      const role = ev.llm_message.role;
      const who = role === 'user' ? 'You' : role === 'assistant' ? 'Agent' : role;
      return (
        <div class={`msg msg-${role}`}>
          <div class="who">
            {who}
            <span class="when">{time(ev.timestamp)}</span>
          </div>
          <RichText text={textOf(ev.llm_message.content)} />
          <Images content={ev.llm_message.content} />
        </div>
      );
    }
    case 'ActionEvent': {
      const { tag, title } = actionTitle(ev);
      const thought = ev.thought
        .map((t) => t.text)
        .join('\n')
        .trim();
      return (
        <div class={`action tool-${tag} ${row.result ? '' : 'open'}`}>
          {thought && <RichText class="thought" text={thought} />}
          <div class="action-head">
            <span class="tag">{tag}</span>
            <span class="action-title">{title}</span>
            <span class="when">{time(ev.timestamp)}</span>
          </div>
          <ActionBody ev={ev} result={row.result} status={status} />
        </div>
      );
    }
    case 'ObservationEvent':
    case 'UserRejectObservation':
      // an answer whose action is not in the page (it should not happen): shown on its own
      return <ResultBlock result={ev} />;
    case 'AgentErrorEvent':
      return (
        <div class="note error">
          <strong>{ev.tool_name ? `${ev.tool_name}: ` : ''}</strong>
          <Clipped text={ev.error} lines={12} render={(t) => <span class="pre">{t}</span>} />
        </div>
      );
    case 'ConversationErrorEvent':
      return (
        <div class="note error big">
          <strong>{ev.code}</strong> {ev.detail}
        </div>
      );
    case 'ConversationStateUpdateEvent':
      return <StateUpdate ev={ev} />;
    case 'SystemPromptEvent':
      return (
        <details class="sys">
          <summary>
            System prompt and {ev.tools.length} tools ({ev.tools.map((t) => t.name).join(', ')})
          </summary>
          <pre class="out">{ev.system_prompt.text}</pre>
        </details>
      );
    case 'PauseEvent':
      return <div class="divider">paused</div>;
    case 'InterruptEvent':
      return <div class="divider">interrupted</div>;
    case 'Condensation':
      return (
        <div class="divider" title={ev.summary ?? ''}>
          {ev.forgotten_event_ids.length} earlier events condensed into a summary
        </div>
      );
    case 'StreamingDeltaEvent':
    case 'SetupOutputEvent':
    case 'ServerErrorEvent':
      return null; // live-only: never a row (the stream keeps them apart)
  }
}

interface RowProps {
  row: Row;
  status: ExecutionStatus | null;
  version: number;
}

/** One row of the list; rendered again only when its result arrives or, while it waits for one, the status changes. */
export class EventRow extends Component<RowProps> {
  override shouldComponentUpdate(next: RowProps): boolean {
    const p = this.props;
    return p.row !== next.row || p.version !== next.version || (p.status !== next.status && !next.row.result);
  }

  override render({ row, status }: RowProps) {
    return (
      <div class="ev" data-seq={row.event.seq}>
        <EventBody row={row} status={status} />
      </div>
    );
  }
}
