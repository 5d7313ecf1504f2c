/**
 * The `parley` command's exit codes (one table; docs/api.md and `parley --help` list them) and the
 * one-line message each failure prints. A script tells "the agent failed" (1, 3) from "the agent
 * stopped to wait" (4, 5) from "Parley could not be asked" (6-9) by the code alone.
 */
import { TRPCClientError } from '@trpc/client';

export const EXIT = {
  /** The run finished (or the conversation is idle / the command did what it was asked). */
  ok: 0,
  /** The conversation ended in `error` (LLM failure, failed clone, too many steps...). */
  error: 1,
  /** Wrong arguments. */
  usage: 2,
  /** The agent is `stuck` (repeating itself). */
  stuck: 3,
  /** The run was paused or interrupted (`--interrupt` included). */
  paused: 4,
  /** The agent waits for an action to be accepted or rejected. */
  waiting: 5,
  /** The daemon cannot be reached (not running, wrong --url, lost for too long). */
  unreachable: 6,
  /** The daemon wants a session key, or refused the one given (401). */
  unauthorized: 7,
  /** No such conversation (404, or not a conversation id). */
  notFound: 8,
  /** The daemon refused or failed the request (422, 409, 413, 5xx). */
  refused: 9,
  /** Ctrl-C: detached; the conversation goes on. */
  detached: 130,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** The exit code of a run that ended in `status`. */
export function exitForStatus(status: string): ExitCode {
  switch (status) {
    case 'finished':
    case 'idle':
      return EXIT.ok;
    case 'stuck':
      return EXIT.stuck;
    case 'paused':
      return EXIT.paused;
    case 'waiting_for_confirmation':
      return EXIT.waiting;
    default:
      return EXIT.error;
  }
}

/** A failure to report with one line and an exit code. */
export class CliFailure extends Error {
  constructor(
    message: string,
    readonly code: ExitCode,
  ) {
    super(message);
  }
}

export interface FailureContext {
  /** The daemon's URL as shown to the user (no credentials). */
  url: string;
  keyGiven: boolean;
  conversationId?: string;
}

/**
 * Turns what the tRPC client threw into a CliFailure. Its messages are built here from the status
 * and code only: nothing of the request (headers, the key) can end up in them.
 */
export function describeFailure(err: unknown, ctx: FailureContext): CliFailure {
  if (err instanceof CliFailure) return err;
  const status = httpStatusOf(err);
  if (status === 401) {
    return ctx.keyGiven
      ? new CliFailure(`the daemon at ${ctx.url} refused the session key (401 Unauthorized); check --key / PARLEY_API_KEY`, EXIT.unauthorized)
      : new CliFailure(`the daemon at ${ctx.url} requires a session key (401 Unauthorized); set PARLEY_API_KEY or --key`, EXIT.unauthorized);
  }
  if (err instanceof TRPCClientError) {
    const code = (err.data as { code?: string } | undefined)?.code;
    if (code === 'NOT_FOUND') return new CliFailure(ctx.conversationId ? `no conversation ${ctx.conversationId} on ${ctx.url}` : err.message, EXIT.notFound);
    if (code === 'UNPROCESSABLE_CONTENT' || code === 'BAD_REQUEST') {
      const issues = issuesOf(err);
      if (ctx.conversationId && issues.some((i) => i.path[0] === 'conversation_id'))
        return new CliFailure(`${ctx.conversationId} is not a conversation id`, EXIT.notFound);
      const detail = issues.length ? issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') : err.message;
      return new CliFailure(`the daemon refused the request: ${oneLine(detail)}`, EXIT.refused);
    }
    if (code) return new CliFailure(`the daemon refused the request (${code}): ${oneLine(err.message)}`, EXIT.refused);
  }
  const reason = networkReason(err);
  if (reason !== null)
    return new CliFailure(
      `cannot reach the daemon at ${ctx.url} (${reason}); start it with \`parley serve\` or point --url / PARLEY_URL at it`,
      EXIT.unreachable,
    );
  if (status !== null) return new CliFailure(`the daemon at ${ctx.url} answered ${status}`, EXIT.refused);
  return new CliFailure(`unexpected failure: ${oneLine((err as Error)?.message ?? String(err))}`, EXIT.refused);
}

/**
 * What was wrong with the input: the core's own validation errors carry `issues` (pydantic-style
 * `loc`/`msg`), also for a tRPC input schema's failure (UNPROCESSABLE_CONTENT, 422, like REST);
 * BAD_REQUEST with zod's issues as its message is still read (older daemons).
 */
function issuesOf(err: TRPCClientError<never>): { path: (string | number)[]; message: string }[] {
  const own = (err.data as { issues?: { loc?: (string | number)[]; msg?: string }[] } | undefined)?.issues;
  if (own?.length) return own.map((i) => ({ path: (i.loc ?? []).filter((p) => p !== 'body'), message: i.msg ?? '' }));
  try {
    const zod = JSON.parse(err.message) as { path?: (string | number)[]; message?: string }[];
    if (Array.isArray(zod)) return zod.map((i) => ({ path: i.path ?? [], message: i.message ?? '' }));
  } catch {
    // not zod's issues
  }
  return [];
}

/** The HTTP status behind a client error, when it has one (a reply that is not tRPC's: the guard's 401). */
function httpStatusOf(err: unknown): number | null {
  if (!(err instanceof TRPCClientError)) return null;
  const data = err.data as { httpStatus?: number } | undefined;
  const meta = err.meta as { response?: { status?: number } } | undefined;
  const status = data?.httpStatus ?? meta?.response?.status;
  if (typeof status === 'number') return status;
  // an EventSource that could not (re)connect says "Non-200 status code (401)"
  const m = /\bstatus code \((\d{3})\)/.exec(err.message);
  return m ? Number(m[1]) : null;
}

/** Why a request never got an answer (connection refused, DNS, reset...), or null when it got one. */
function networkReason(err: unknown): string | null {
  let fetchFailed = false;
  let innermost = '';
  for (
    let e = err as { cause?: unknown; code?: unknown; message?: unknown } | undefined, depth = 0;
    e && typeof e === 'object' && depth < 6;
    e = e.cause as typeof e, depth++
  ) {
    if (typeof e.code === 'string' && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT)$/.test(e.code)) {
      return e.code === 'ECONNREFUSED' ? 'connection refused' : e.code;
    }
    if (e instanceof TypeError && e.message === 'fetch failed') fetchFailed = true;
    if (typeof e.message === 'string') innermost = e.message;
  }
  return fetchFailed ? innermost : null;
}

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim().slice(0, 500);
