/** Conversations: the paged list (newest first), a form to create one, and deletion. */
import { useEffect, useState } from 'preact/hooks';
import { GIT_PROVIDERS } from '../../src/workspace/providers.js';
import type { ParleyInputs } from '../../src/client.js';
import { call, type ConversationInfo, type ConversationPage, parley } from './api.js';
import { ago, ConfirmButton, ErrorNote, Link, navigate, StatusChip, useAction } from './ui.js';

const PAGE_SIZE = 20;
const PROVIDERS = GIT_PROVIDERS;

export const titleOf = (c: Pick<ConversationInfo, 'title' | 'conversation_id'>) => c.title?.trim() || `Conversation ${c.conversation_id.slice(0, 8)}`;

function NewConversation({ onCancel }: { onCancel: () => void }) {
  const [task, setTask] = useState('');
  const [repository, setRepository] = useState('');
  const [branch, setBranch] = useState('');
  const [provider, setProvider] = useState<(typeof PROVIDERS)[number]>('github');
  const [instructions, setInstructions] = useState('');
  const [confirm, setConfirm] = useState(false);
  const [busy, error, run] = useAction();

  const submit = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      const text = task.trim();
      const body: ParleyInputs['createConversation'] = {};
      if (repository.trim()) {
        body.repository = repository.trim();
        body.git_provider = provider;
        if (branch.trim()) body.selected_branch = branch.trim();
      }
      if (instructions.trim()) body.conversation_instructions = instructions.trim();
      // with confirmation the policy must be set before the first step: create, set it, then send
      if (text && !confirm) body.initial_user_msg = text;
      const { conversation_id } = await call(parley.createConversation.mutate(body));
      if (confirm) await call(parley.setConfirmationPolicy.mutate({ conversation_id, policy: { kind: 'AlwaysConfirm' } }));
      if (text && confirm) await call(parley.sendMessage.mutate({ conversation_id, message: { role: 'user', content: [{ type: 'text', text }], run: true } }));
      navigate(`/conversations/${conversation_id}`);
    });
  };

  return (
    <form class="card new-conversation" onSubmit={submit}>
      <h2>New conversation</h2>
      <label>
        <span>Task</span>
        <textarea name="task" rows={4} placeholder="What should the agent do?" value={task} onInput={(e) => setTask(e.currentTarget.value)} autofocus />
      </label>
      <div class="row3">
        <label>
          <span>
            Repository <span class="muted">(optional)</span>
          </span>
          <input name="repository" placeholder="owner/name" value={repository} onInput={(e) => setRepository(e.currentTarget.value)} />
        </label>
        <label>
          <span>Branch</span>
          <input name="branch" placeholder="default branch" value={branch} onInput={(e) => setBranch(e.currentTarget.value)} />
        </label>
        <label>
          <span>Provider</span>
          <select name="provider" value={provider} onChange={(e) => setProvider(e.currentTarget.value as (typeof PROVIDERS)[number])}>
            {PROVIDERS.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </label>
      </div>
      <label>
        <span>
          Instructions <span class="muted">(optional: added to the agent's system prompt)</span>
        </span>
        <textarea name="instructions" rows={2} value={instructions} onInput={(e) => setInstructions(e.currentTarget.value)} />
      </label>
      <label class="check">
        <input type="checkbox" name="confirm" checked={confirm} onChange={(e) => setConfirm(e.currentTarget.checked)} />
        Ask me before each action runs
      </label>
      <ErrorNote error={error} />
      <div class="actions">
        <button type="button" class="ghost" onClick={onCancel}>
          Cancel
        </button>
        <button type="submit" class="primary" disabled={busy}>
          {task.trim() ? 'Start' : 'Create'}
        </button>
      </div>
    </form>
  );
}

function ConversationRow({ c, onDeleted }: { c: ConversationInfo; onDeleted: () => void }) {
  const [busy, error, run] = useAction();
  const remove = () =>
    void run(async () => {
      await call(parley.deleteConversation.mutate({ conversation_id: c.conversation_id }));
      onDeleted();
    });
  return (
    <tr data-id={c.conversation_id} onClick={(e) => !(e.target as HTMLElement).closest('button,a') && navigate(`/conversations/${c.conversation_id}`)}>
      <td class="title-cell">
        <Link href={`/conversations/${c.conversation_id}`}>{titleOf(c)}</Link>
        <ErrorNote error={error} />
      </td>
      <td>
        <StatusChip status={c.execution_status} />
      </td>
      <td class="repo">
        {c.selected_repository ? (
          <>
            {c.selected_repository}
            {c.selected_branch && <span class="muted"> @ {c.selected_branch}</span>}
          </>
        ) : (
          <span class="muted">—</span>
        )}
      </td>
      <td class="muted" title={new Date(c.updated_at).toLocaleString()}>
        {ago(c.updated_at)}
      </td>
      <td class="row-actions">
        <ConfirmButton label="Delete" title="Delete the conversation and its workspace" busy={busy} onConfirm={remove} />
      </td>
    </tr>
  );
}

export function ConversationList() {
  const [pages, setPages] = useState<(string | null)[]>([null]);
  const [page, setPage] = useState<ConversationPage | null>(null);
  const [creating, setCreating] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  const current = pages[pages.length - 1] ?? null;

  useEffect(() => {
    let live = true;
    const load = () =>
      call(parley.listConversations.query({ limit: PAGE_SIZE, page_id: current }))
        .then((p) => live && (setPage(p), setError(null)))
        .catch((err) => live && setError((err as Error).message));
    void load();
    // statuses change while the list is open
    const timer = setInterval(() => document.visibilityState === 'visible' && void load(), 5000);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [current, tick]);

  const items = page?.items ?? [];
  return (
    <div class="page">
      <div class="page-head">
        <h1>Conversations</h1>
        <div class="spacer" />
        {!creating && (
          <button type="button" class="primary" onClick={() => setCreating(true)}>
            New conversation
          </button>
        )}
      </div>
      {creating && <NewConversation onCancel={() => setCreating(false)} />}
      <ErrorNote error={error} />
      {page && items.length === 0 && pages.length === 1 ? (
        <div class="empty card">
          <p>No conversations yet.</p>
          {!creating && (
            <button type="button" class="primary" onClick={() => setCreating(true)}>
              Start one
            </button>
          )}
        </div>
      ) : (
        <div class="card flush">
          <table class="list">
            <thead>
              <tr>
                <th>Title</th>
                <th>Status</th>
                <th>Repository</th>
                <th>Updated</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {items.map((c) => (
                <ConversationRow key={c.conversation_id} c={c} onDeleted={() => setTick((t) => t + 1)} />
              ))}
            </tbody>
          </table>
          <div class="pager">
            <button type="button" class="ghost small" disabled={pages.length === 1} onClick={() => setPages((p) => p.slice(0, -1))}>
              ← Newer
            </button>
            <span class="muted small">Page {pages.length}</span>
            <button
              type="button"
              class="ghost small"
              disabled={!page?.next_page_id}
              onClick={() => page?.next_page_id && setPages((p) => [...p, page.next_page_id])}
            >
              Older →
            </button>
          </div>
        </div>
      )}
    </div>
  );
}
