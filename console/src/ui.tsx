/** Small pieces shared by the pages: links that navigate in the page, the status chip, times, errors. */
import type { AnchorHTMLAttributes, ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { ExecutionStatus } from './api.js';

/**
 * Where the console's pages are: `/`, or `/console` when the daemon serves a web app at `/`
 * (WEB_APP_DIR). The pages name their routes from the base (`/`, `/conversations/:id`, `/settings`);
 * links and the address bar carry the base.
 */
const BASE = /^\/console(\/|$)/.test(location.pathname) ? '/console' : '';

/** A route of the console as its address: the base in front. */
export const href = (to: string) => (BASE && to === '/' ? `${BASE}/` : BASE + to);

/** The console's route of the address bar's path (the base taken off). */
const routeOf = (pathname: string) => pathname.slice(BASE.length) || '/';

/** Client-side navigation: the daemon serves the page for `/`, `/conversations/:id` and `/settings` (under the base). */
export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', href(to));
  else history.pushState(null, '', href(to));
  dispatchEvent(new PopStateEvent('popstate'));
}

export function usePath(): string {
  const [path, setPath] = useState(routeOf(location.pathname));
  useEffect(() => {
    const update = () => setPath(routeOf(location.pathname));
    addEventListener('popstate', update);
    return () => removeEventListener('popstate', update);
  }, []);
  return path;
}

export function Link({ href: to, children, ...rest }: { href: string; children: ComponentChildren } & AnchorHTMLAttributes<HTMLAnchorElement>) {
  const onClick = (e: MouseEvent) => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return (
    <a href={href(to)} onClick={onClick} {...rest}>
      {children}
    </a>
  );
}

const STATUS_TEXT: Record<ExecutionStatus, string> = {
  idle: 'idle',
  running: 'running',
  paused: 'paused',
  waiting_for_confirmation: 'needs confirmation',
  finished: 'finished',
  error: 'error',
  stuck: 'stuck',
};

export function StatusChip({ status }: { status: ExecutionStatus | null | undefined }) {
  if (!status) return null;
  return (
    <span class={`chip s-${status}`} data-status={status}>
      {status === 'running' ? <span class="spinner" /> : <span class={`status-dot s-${status}`} />}
      {STATUS_TEXT[status] ?? status}
    </span>
  );
}

export function ago(iso: string, now = Date.now()): string {
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return '';
  const s = Math.round((now - t) / 1000);
  if (s < 45) return 'just now';
  if (s < 90 * 60) return `${Math.max(1, Math.round(s / 60))} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString([], { year: 'numeric', month: 'short', day: 'numeric' });
}

export const ErrorNote = ({ error }: { error: string | null | undefined }) =>
  error ? (
    <div class="alert" role="alert">
      {error}
    </div>
  ) : null;

/** Runs an async action with a busy flag and its error as text. */
export function useAction(): [
  busy: boolean,
  error: string | null,
  run: (fn: () => Promise<unknown>) => Promise<boolean>,
  setError: (e: string | null) => void,
] {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const run = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await fn();
      return true;
    } catch (err) {
      setError((err as Error).message);
      return false;
    } finally {
      setBusy(false);
    }
  };
  return [busy, error, run, setError];
}

/** A destructive button that asks once more in place (Delete → "Delete" / "Keep"). */
export function ConfirmButton({
  label,
  question,
  title,
  busy,
  onConfirm,
  class: cls = '',
}: {
  label: string;
  question?: string;
  title?: string;
  busy: boolean;
  onConfirm: () => void;
  class?: string;
}) {
  const [asking, setAsking] = useState(false);
  if (!asking)
    return (
      <button type="button" class={`ghost small ${cls}`} title={title} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  return (
    <>
      {question && <span class="small">{question}</span>}
      <button type="button" class="danger small" disabled={busy} onClick={onConfirm}>
        Delete
      </button>
      <button type="button" class="ghost small" onClick={() => setAsking(false)}>
        Keep
      </button>
    </>
  );
}
