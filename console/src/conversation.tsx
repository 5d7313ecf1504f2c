/**
 * One conversation: its events live (a virtualised list: only the rows in view are in the DOM, so
 * 10,000 events scroll like 10), the controls (run, pause, interrupt, confirmation), a box to send
 * a message, and a side panel with the files the agent changed, the MCP servers and the details.
 */
import { Fragment, type ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useReducer, useRef, useState } from 'preact/hooks';
import {
  type ApiError,
  call,
  type ConversationInfo,
  downloadFile,
  type ExecutionStatus,
  type GitChange,
  type McpStatus,
  type ParleyEvent,
  parley,
} from './api.js';
import { Diff } from './diff.js';
import { EventRow } from './events.js';
import { titleOf } from './list.js';
import { Rows, type Row } from './rows.js';
import { ConversationStream } from './stream.js';
import { ConfirmButton, ErrorNote, Link, navigate, StatusChip, useAction } from './ui.js';
import { useVirtualizer } from './virtual.js';

/**
 * A row's height before it is measured: close guesses keep the scrollbar and jumps steady. Kept per
 * event: the virtualiser asks for every row's estimate each time a measurement changes, and rows are
 * built again when older events are put in front.
 */
const estimates = new WeakMap<ParleyEvent, number>();
function estimate(row: Row | undefined): number {
  if (!row) return 40;
  let h = estimates.get(row.event);
  if (h === undefined) estimates.set(row.event, (h = guess(row.event)));
  return h;
}
function guess(ev: ParleyEvent): number {
  if (ev.kind === 'MessageEvent') {
    let lines = 1;
    for (const c of ev.llm_message.content) if (c.type === 'text') lines += Math.ceil(c.text.length / 110) + (c.text.match(/\n/g)?.length ?? 0);
    return 52 + 21 * Math.min(lines, 400);
  }
  if (ev.kind === 'ActionEvent') return ev.action?.kind === 'ThinkAction' ? 84 : 160;
  return 36;
}

function EventList({ rows, status, shown }: { rows: Rows; status: ExecutionStatus | null; shown: boolean }) {
  const scroller = useRef<HTMLDivElement>(null);
  const list = rows.list;
  const v = useVirtualizer({
    count: shown ? list.length : 0,
    getScrollElement: () => scroller.current,
    estimateSize: (i) => estimate(list[i]),
    getItemKey: (i) => list[i]?.event.id ?? i,
    overscan: 8,
    anchorTo: 'end',
    followOnAppend: true,
    scrollEndThreshold: 48,
  });
  // Once the newest events are in: start at the end, before the first paint (older ones are then put
  // in front without moving the view). An end command, not scrollToIndex(last): the virtualiser keeps
  // a command on its target for the frames it takes to settle (each page put in front restarts them),
  // and an index there is the last row only until the next page comes: it then names a row hundreds
  // of events up, where the view was taken and kept.
  const placed = useRef(false);
  useLayoutEffect(() => {
    if (shown && !placed.current && list.length) {
      placed.current = true;
      v.scrollToEnd();
    }
  }, [shown, list.length]);
  const items = v.getVirtualItems();
  // from the layout, not the element: while older events are put in front the position has moved by
  // their height and the element's size has not yet (getDistanceFromEnd read 0, hiding the button)
  const atEnd = v.getTotalSize() - (v.scrollRect?.height ?? 0) - (v.scrollOffset ?? 0) <= 48;
  return (
    <div class="events-wrap">
      <div class="events" ref={scroller}>
        <div class="events-inner" style={{ height: `${v.getTotalSize()}px` }}>
          <div class="events-window" style={{ transform: `translateY(${items[0]?.start ?? 0}px)` }}>
            {items.map((it) => {
              const row = list[it.index]!;
              return (
                <div key={it.key} data-index={it.index} ref={v.measureElement} class="ev-slot">
                  <EventRow row={row} status={status} version={row.version} />
                </div>
              );
            })}
          </div>
        </div>
      </div>
      {!atEnd && list.length > 0 && (
        <button type="button" class="to-end" onClick={() => v.scrollToEnd()}>
          ↓ Latest
        </button>
      )}
    </div>
  );
}

function Confirmation({ id, rows }: { id: string; rows: Rows }) {
  const pending = rows.pendingActions();
  const [reason, setReason] = useState('');
  const [busy, error, run] = useAction();
  const respond = (accept: boolean) =>
    void run(() =>
      call(
        parley.respondToConfirmation.mutate(
          accept ? { conversation_id: id, accept } : { conversation_id: id, accept, reason: reason.trim() || 'Rejected in the console' },
        ),
      ),
    );
  return (
    <div class="confirm-bar" role="alert">
      <div>
        <strong>The agent asks to run {pending.length === 1 ? 'an action' : `${pending.length} actions`}</strong>
        <span class="muted"> {pending.map((r) => (r.event.kind === 'ActionEvent' ? r.event.tool_name : '')).join(', ')}</span>
      </div>
      <input placeholder="Reason (if you reject)" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
      <button type="button" class="danger" disabled={busy} onClick={() => respond(false)}>
        Reject
      </button>
      <button type="button" class="primary" disabled={busy} onClick={() => respond(true)}>
        Accept
      </button>
      <ErrorNote error={error} />
    </div>
  );
}

function Composer({ id, status }: { id: string; status: ExecutionStatus | null }) {
  const [text, setText] = useState('');
  const [runAgent, setRunAgent] = useState(true);
  const [busy, error, run] = useAction();
  const send = () => {
    const t = text.trim();
    if (!t) return;
    void run(async () => {
      await call(parley.sendMessage.mutate({ conversation_id: id, message: { role: 'user', content: [{ type: 'text', text: t }], run: runAgent } }));
      setText('');
    });
  };
  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault();
        send();
      }}
    >
      <textarea
        name="message"
        rows={2}
        placeholder={status === 'running' ? 'Message the agent (it reads it at its next step)…' : 'Message the agent…'}
        value={text}
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            send();
          }
        }}
      />
      <div class="composer-side">
        <label class="check small" title="Without it the message is only added to the conversation">
          <input type="checkbox" name="run" checked={runAgent} onChange={(e) => setRunAgent(e.currentTarget.checked)} /> Run the agent
        </label>
        <button class="primary" type="submit" disabled={busy || !text.trim()}>
          Send
        </button>
      </div>
      <ErrorNote error={error} />
    </form>
  );
}

function FileDiff({ id, workdir, change, onClose }: { id: string; workdir: string; change: GitChange; onClose: () => void }) {
  const [diff, setDiff] = useState<{ original: string | null; modified: string | null } | null>(null);
  const [busy, error, run] = useAction();
  const full = `${workdir.replace(/\/$/, '')}/${change.path}`;
  useEffect(() => {
    void run(async () => setDiff(await call(parley.gitDiff.query({ path: full, conversation_id: id }))));
  }, [full]);
  return (
    // biome-ignore lint/a11y/noStaticElementInteractions: the backdrop; a click beside the dialog closes it, as Escape does from inside it
    <div class="overlay" onClick={(e) => e.target === e.currentTarget && onClose()} onKeyDown={(e) => e.key === 'Escape' && onClose()}>
      <div class="card dialog wide" role="dialog" aria-label={`Changes of ${change.path}`}>
        <div class="dialog-head">
          <span class={`change-status c-${change.status}`}>{change.status}</span>
          <code class="path">{change.path}</code>
          <div class="spacer" />
          {change.status !== 'DELETED' && (
            <button type="button" class="small" disabled={busy} onClick={() => void run(() => downloadFile(id, full))}>
              Download
            </button>
          )}
          <button type="button" class="ghost small" onClick={onClose}>
            Close
          </button>
        </div>
        <ErrorNote error={error} />
        {diff && <Diff before={diff.original ?? ''} after={diff.modified ?? ''} />}
      </div>
    </div>
  );
}

function Changes({ id, workdir, tick }: { id: string; workdir: string; tick: number }) {
  const [changes, setChanges] = useState<GitChange[] | null>(null);
  const [open, setOpen] = useState<GitChange | null>(null);
  const [busy, error, run] = useAction();
  // asked once: later looks wait 700 ms whatever the answer was (a workspace that is no git repository
  // answers 422, and must not be asked again at once on every tool call)
  const asked = useRef(false);
  const load = () => {
    asked.current = true;
    void run(async () => setChanges(await call(parley.gitChanges.query({ path: workdir, conversation_id: id }))));
  };
  // the agent changes files as it works: look again after its tool calls (at most every 700 ms)
  useEffect(() => {
    const t = setTimeout(load, asked.current ? 700 : 0);
    return () => clearTimeout(t);
  }, [tick, workdir]);
  return (
    <div class="panel-body">
      <div class="panel-tools">
        <span class="muted small">{changes ? `${changes.length} changed file${changes.length === 1 ? '' : 's'}` : ''}</span>
        <div class="spacer" />
        <button type="button" class="ghost small" disabled={busy} onClick={load}>
          Refresh
        </button>
      </div>
      {error && (
        <div class="muted small">
          {/not a git repository/i.test(error)
            ? 'The workspace is not a git repository.'
            : `The changes could not be listed: ${error.replace(/^path: (Value error, )?/, '')}`}
        </div>
      )}
      {changes && changes.length === 0 && <div class="muted small">No changes.</div>}
      <ul class="changes">
        {changes?.map((c) => (
          <li key={c.path}>
            <button type="button" class="change" onClick={() => setOpen(c)} title="Show the diff">
              <span class={`change-status c-${c.status}`}>{c.status[0]}</span>
              <span class="path">{c.path}</span>
            </button>
            {c.status !== 'DELETED' && (
              <button
                type="button"
                class="ghost small icon"
                title={`Download ${c.path}`}
                aria-label={`Download ${c.path}`}
                onClick={() => void run(() => downloadFile(id, `${workdir.replace(/\/$/, '')}/${c.path}`))}
              >
                ↓
              </button>
            )}
          </li>
        ))}
      </ul>
      {open && <FileDiff id={id} workdir={workdir} change={open} onClose={() => setOpen(null)} />}
    </div>
  );
}

function Mcp({ id }: { id: string }) {
  const [status, setStatus] = useState<McpStatus | null>(null);
  const [busy, error, run] = useAction();
  const load = () => void run(async () => setStatus(await call(parley.getMcpStatus.query({ conversation_id: id }))));
  useEffect(load, [id]);
  return (
    <div class="panel-body">
      <div class="panel-tools">
        <span class="muted small">MCP servers of this conversation</span>
        <div class="spacer" />
        <button type="button" class="ghost small" disabled={busy} onClick={load}>
          Refresh
        </button>
      </div>
      <ErrorNote error={error} />
      {status && status.servers.length === 0 && (
        <div class="muted small">None configured (Settings → default MCP servers, or the conversation's mcp_config).</div>
      )}
      <ul class="mcp">
        {status?.servers.map((s) => (
          <li key={s.name}>
            <div>
              <span class={`badge ${s.state === 'ready' ? 'ok' : s.state === 'failed' ? 'bad' : ''}`}>{s.state}</span> <strong>{s.name}</strong>{' '}
              <span class="muted small">{s.transport}</span>
            </div>
            {s.reason && <div class="small error-text">{s.reason}</div>}
            {s.tools.length > 0 && <div class="small muted">{s.tools.join(', ')}</div>}
          </li>
        ))}
      </ul>
    </div>
  );
}

function Details({ info, onRenamed }: { info: ConversationInfo; onRenamed: (title: string) => void }) {
  const [title, setTitle] = useState(info.title ?? '');
  const [busy, error, run] = useAction();
  const conversation_id = info.conversation_id;
  const usage = (info.stats?.usage_to_metrics as { agent?: { accumulated_token_usage?: { prompt_tokens?: number; completion_tokens?: number } } } | undefined)
    ?.agent?.accumulated_token_usage;
  const rows: [string, ComponentChildren][] = [
    ['Id', <code>{info.conversation_id}</code>],
    ['Created', new Date(info.created_at).toLocaleString()],
    ['Repository', info.selected_repository ? `${info.selected_repository}${info.selected_branch ? ` @ ${info.selected_branch}` : ''}` : '—'],
    ['Model', info.agent?.llm.model ?? 'server default'],
    ['Workspace', <code>{info.workspace?.working_dir ?? '—'}</code>],
    ['Events', String(info.last_seq)],
  ];
  if (usage) rows.push(['Tokens', `${usage.prompt_tokens ?? 0} in · ${usage.completion_tokens ?? 0} out`]);
  if (info.node_id) rows.push(['Node', info.node_id]);
  return (
    <div class="panel-body">
      <dl class="details">
        {rows.map(([k, v]) => (
          <Fragment key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </Fragment>
        ))}
      </dl>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void run(async () => {
            await call(parley.updateConversation.mutate({ conversation_id, title: title.trim() }));
            onRenamed(title.trim());
          });
        }}
      >
        <input name="title" placeholder="Title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} />
        <button type="submit" class="small" disabled={busy || !title.trim()}>
          Rename
        </button>
      </form>
      <div class="danger-zone">
        <ConfirmButton
          label="Delete conversation"
          class="danger-text"
          question="Delete this conversation and its workspace?"
          busy={busy}
          onConfirm={() => void run(async () => (await call(parley.deleteConversation.mutate({ conversation_id })), navigate('/')))}
        />
      </div>
      <ErrorNote error={error} />
    </div>
  );
}

function Controls({ id, status, policy }: { id: string; status: ExecutionStatus | null; policy: string }) {
  const [busy, error, run, setError] = useAction();
  const act = (request: () => Promise<unknown>) => void run(() => call(request()));
  const active = status === 'running' || status === 'waiting_for_confirmation';
  useEffect(() => setError(null), [status]);
  return (
    <div class="controls">
      <select
        name="policy"
        title="Confirmation policy"
        value={policy}
        disabled={busy}
        onChange={(e) => {
          const kind = e.currentTarget.value as 'NeverConfirm' | 'AlwaysConfirm';
          act(() => parley.setConfirmationPolicy.mutate({ conversation_id: id, policy: { kind } }));
        }}
      >
        <option value="NeverConfirm">Run actions freely</option>
        <option value="AlwaysConfirm">Ask before each action</option>
      </select>
      {active ? (
        <>
          <button
            type="button"
            disabled={busy || status !== 'running'}
            onClick={() => act(() => parley.pause.mutate({ conversation_id: id }))}
            title="Stop after the current step"
          >
            Pause
          </button>
          <button
            type="button"
            class="danger"
            disabled={busy}
            onClick={() => act(() => parley.interrupt.mutate({ conversation_id: id }))}
            title="Stop now: cancel the LLM call, kill the running command"
          >
            Interrupt
          </button>
        </>
      ) : (
        <button type="button" class="primary" disabled={busy || !status} onClick={() => act(() => parley.run.mutate({ conversation_id: id }))}>
          Run
        </button>
      )}
      {error && <div class="controls-error alert">{error}</div>}
    </div>
  );
}

/** What the user asked first, as a title for a conversation without one. */
function firstMessage(events: ParleyEvent[]): string | null {
  for (const ev of events.slice(0, 20)) {
    if (ev.kind !== 'MessageEvent' || ev.llm_message.role !== 'user') continue;
    const text = ev.llm_message.content
      .map((c) => (c.type === 'text' ? c.text : ''))
      .join(' ')
      .trim();
    if (text) return text.length > 90 ? `${text.slice(0, 87)}…` : text;
  }
  return null;
}

/**
 * The conversation's stream, opened once its record is read, and its rows: built again when older
 * events are put in front, added to as new ones come. `answered` counts the answers to tool calls
 * that came while the page was open (not those of older pages put in front): a file may have
 * changed with each, so the Changes panel looks again.
 */
function useConversation(id: string): { stream: ConversationStream | null; loadError: string | null; rows: Rows; answered: number } {
  const [stream, setStream] = useState<ConversationStream | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [, redraw] = useReducer((n: number) => n + 1, 0);
  const rows = useRef(new Rows());
  const answered = useRef(0);

  useEffect(() => {
    let s: ConversationStream | null = null;
    let live = true;
    call(parley.getConversation.query({ conversation_id: id }))
      .then((info) => {
        if (!live) return;
        const stream = (s = new ConversationStream(id));
        stream.subscribe((change) => {
          if (change.reset) {
            // older events were put in front: the rows are built again (an action and its answer may now both be in)
            rows.current = new Rows();
            rows.current.add(stream.events);
          } else {
            const before = rows.current.results;
            rows.current.add(change.added);
            answered.current += rows.current.results - before;
          }
          redraw(0);
        });
        s.start(info);
        setStream(s);
      })
      .catch(
        (err) =>
          live && setLoadError((err as ApiError).status === 404 ? 'This conversation does not exist (it may have been deleted).' : (err as Error).message),
      );
    return () => {
      live = false;
      s?.close();
    };
  }, [id]);
  return { stream, loadError, rows: rows.current, answered: answered.current };
}

export function ConversationPage({ id }: { id: string }) {
  const { stream, loadError, rows, answered } = useConversation(id);
  const [tab, setTab] = useState<'changes' | 'mcp' | 'details'>('changes');
  const [title, setTitle] = useState<string | null>(null);

  if (loadError)
    return (
      <div class="page">
        <ErrorNote error={loadError} />
        <Link href="/">← Conversations</Link>
      </div>
    );
  if (!stream?.info) return <div class="center muted">Loading…</div>;
  const info = stream.info;
  const status = stream.status;
  const ended = stream.ended;
  return (
    <div class="conversation">
      <div class="conv-head">
        <Link href="/" class="back" title="Conversations">
          ←
        </Link>
        <div class="conv-title">
          <h1>{title ?? (info.title || firstMessage(stream.events)) ?? titleOf(info)}</h1>
          <div class="muted small">
            {info.selected_repository && (
              <span class="repo">
                {info.selected_repository}
                {info.selected_branch && ` @ ${info.selected_branch}`} ·{' '}
              </span>
            )}
            {stream.lastSeq} events
            {!stream.connected && !ended && <span class="warn-text"> · reconnecting…</span>}
          </div>
        </div>
        <StatusChip status={status} />
        <div class="spacer" />
        <Controls id={id} status={status} policy={String(info.confirmation_policy?.kind ?? 'NeverConfirm')} />
      </div>
      <div class="conv-body">
        <section class="conv-main">
          {ended && (
            <div class="alert">
              {ended === 'unauthorized'
                ? 'The daemon refused the session key.'
                : ended === 'deleted'
                  ? 'This conversation was deleted.'
                  : 'This conversation does not exist.'}
            </div>
          )}
          {!stream.shown && (
            <div class="loading">
              <span class="spinner" /> Loading events…
            </div>
          )}
          {stream.shown && stream.base > 0 && stream.olderError && (
            <div class="alert older-error" role="alert">
              Events before #{stream.base + 1} could not be read: {stream.olderError}. Reload the page to try again.
            </div>
          )}
          {stream.shown && stream.base > 0 && !stream.olderError && (
            <div class="loading-older">
              <span class="spinner" /> Loading earlier events… {(stream.lastSeq - stream.base).toLocaleString()} of {stream.lastSeq.toLocaleString()}
            </div>
          )}
          <EventList rows={rows} status={status} shown={stream.shown} />
          {stream.setupOutput && <pre class="live-output">{stream.setupOutput.slice(-4000)}</pre>}
          {stream.streaming && (
            <div class="live-answer">
              <div class="who">
                Agent <span class="spinner" />
              </div>
              <div class="prose">{stream.streaming}</div>
            </div>
          )}
          {stream.serverError && <ErrorNote error={stream.serverError} />}
          {status === 'waiting_for_confirmation' && <Confirmation id={id} rows={rows} />}
          <Composer id={id} status={status} />
        </section>
        <aside class="side">
          <div class="tabs" role="tablist">
            {(['changes', 'mcp', 'details'] as const).map((t) => (
              <button type="button" key={t} role="tab" aria-selected={tab === t} class={tab === t ? 'active' : ''} onClick={() => setTab(t)}>
                {t === 'changes' ? 'Changes' : t === 'mcp' ? 'MCP' : 'Details'}
              </button>
            ))}
          </div>
          {tab === 'changes' && <Changes id={id} workdir={info.workspace?.working_dir ?? '/workspace'} tick={answered} />}
          {tab === 'mcp' && <Mcp id={id} />}
          {tab === 'details' && <Details info={info} onRenamed={setTitle} />}
        </aside>
      </div>
    </div>
  );
}
