/**
 * Stop: SIGTERM (and SIGINT) ends the daemon with exit code 0 only once every process it started is
 * gone — sandboxes (holders, their file services, slirp4netns), shells, MCP servers, background
 * jobs — with 40 live sandboxes, with 40 conversations idle after agent turns (their terminals'
 * shells open), and with 10 whose turns are running a command. Judged from the host: every
 * descendant of the daemon is recorded before the signal, and none is alive when the daemon's exit
 * is seen. How long the stop takes is printed (scripts/bench-startup.ts measures start; this is not
 * a timed test).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { describe, test } from 'node:test';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm, type ScriptedRequest } from './support/scripted-llm.js';
import { descendants, livingProcesses } from './support/processes.js';

/**
 * Every living descendant of the daemon: its sandboxes (supervisor, bwrap, the sandbox's init and what
 * runs in it, reparented there), joined processes (the seccomp loader's parent and its child), slirp4netns. (Not "every
 * process of the sandbox uid": other test files' sandboxes run as that uid at the same time.)
 */
const started = descendants;

const cmdline = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
};

const alive = (pids: number[]) => {
  const now = livingProcesses();
  return pids.filter((p) => now.has(p));
};

async function liveSandboxes(d: DaemonHandle, n: number): Promise<void> {
  const one = async () => {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    // a command that leaves a background job: the sandbox and the job stay
    const r = await d.req('POST', '/api/bash/execute_bash_command', {
      command: 'sleep 600 > /dev/null 2>&1 & echo started',
      conversation_id: id,
      timeout: 120,
    });
    assert.equal(r.status, 200, r.text);
    assert.match(String(r.body.stdout), /started/);
  };
  // ten at a time (each sandbox after the spare starts a holder of its own)
  for (let i = 0; i < n; i += 10) await Promise.all(Array.from({ length: Math.min(10, n - i) }, one));
}

async function stop(d: DaemonHandle, signal: NodeJS.Signals, n: number): Promise<void> {
  const pid = d.proc.pid!;
  const before = started(pid);
  // at least: per sandbox its holder (supervisor, bwrap, init, file service) and the job
  assert.ok(before.length >= n * 4, `${before.length} processes for ${n} sandboxes`);
  const t0 = Date.now();
  const code = await d.stop(signal);
  const took = Date.now() - t0;
  const left = alive(before);
  // (what the daemon says its stop's parts took, or which part it was closing at its deadline)
  const parts = d.output
    .filter((l) => /"msg":"(closed"|stopped"|the stop passed)/.test(l))
    .map((l) => {
      const { msg, ms, closing } = JSON.parse(l) as { msg: string; ms?: unknown; closing?: string };
      return `${closing ? `closing ${closing}` : msg} ${JSON.stringify(ms)}`;
    });
  console.log(`${signal} with ${n} live sandboxes (${before.length} processes): exit ${code} after ${took} ms, ${left.length} left; ${parts.join('; ')}`);
  assert.equal(code, 0);
  assert.ok(parts.some((p) => /^closed \{.*"sandboxes":\d+/.test(p)) && parts.some((p) => /^stopped \d+$/.test(p)), `the stop's parts: ${parts.join('; ')}`);
  assert.deepEqual(
    left.map((p) => `${p} ${fs.existsSync(`/proc/${p}/cmdline`) ? fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0/g, ' ') : ''}`),
    [],
    'no process the daemon started is alive once it exited',
  );
}

/**
 * `n` conversations, each given one agent turn that runs `command` in its terminal. The reply is
 * chosen by what the agent sent (a tool result came back: the final answer), so turns of different
 * conversations may interleave.
 */
async function turns(d: DaemonHandle, llm: ScriptedLlm, n: number, command: string): Promise<string[]> {
  const reply = (r: ScriptedRequest) =>
    (r.body as { messages: { role: string }[] }).messages.at(-1)?.role === 'tool'
      ? { text: 'done' }
      : { toolCalls: [{ name: 'terminal', arguments: { command, timeout: 900 } }] };
  llm.push(...Array.from({ length: 2 * n }, () => reply));
  const ids: string[] = [];
  // five at a time: each conversation past the spares starts a holder of its own, and on a busy machine ten at
  // once can outlast a holder's start deadline (the command then fails and leaves no sandbox to stop)
  for (let i = 0; i < n; i += 5) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(5, n - i) }, async () => {
        const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
        assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
        return id;
      }),
    );
    ids.push(...batch);
  }
  return ids;
}

describe('stop: nothing the daemon started outlives it', { timeout: 420_000 }, () => {
  test('SIGTERM with 40 live sandboxes: exit 0, no process left', async () => {
    const d = await startDaemon({ SANDBOX: 'bwrap', SANDBOX_MAX_LIVE: '64' });
    await liveSandboxes(d, 40);
    await stop(d, 'SIGTERM', 40);
  });

  test('SIGTERM with 40 conversations idle after their turns (their shells open): exit 0, no process left', async () => {
    const llm = await startScriptedLlm();
    try {
      const d = await startDaemon({ SANDBOX: 'bwrap', SANDBOX_MAX_LIVE: '64', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url });
      const ids = await turns(d, llm, 40, 'sleep 600 > /dev/null 2>&1 & echo started');
      for (const id of ids) {
        await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status === 'finished', 'the turn ended', 120_000);
        // its command ran: its sandbox and the background job are there to be stopped
        // (the observation's output, not the whole event: the event also carries the command, which says "started")
        const items = (await d.req('GET', `/api/conversations/${id}/events/search?kind=ObservationEvent&limit=10`)).body.items as {
          observation: { content: { text?: string }[] };
        }[];
        const output = items.map((e) => e.observation.content.map((c) => c.text ?? '').join('')).join('\n');
        assert.match(output, /^started$/m, `the command of ${id} ran: ${output}`);
      }
      await stop(d, 'SIGTERM', 40);
    } finally {
      await llm.close();
    }
  });

  test('SIGTERM with 10 conversations running a command: exit 0, no process left', async () => {
    const llm = await startScriptedLlm();
    try {
      const d = await startDaemon({ SANDBOX: 'bwrap', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url });
      const marker = `4747${process.pid % 1000}`;
      await turns(d, llm, 10, `sleep ${marker}`);
      await waitFor(() => descendants(d.proc.pid!).filter((p) => cmdline(p) === `sleep\0${marker}\0`).length === 10, 'ten commands running', 120_000);
      await stop(d, 'SIGTERM', 10);
    } finally {
      await llm.close();
    }
  });

  test('SIGINT with 3 live sandboxes: exit 0, no process left', async () => {
    const d = await startDaemon({ SANDBOX: 'bwrap' });
    await liveSandboxes(d, 3);
    await stop(d, 'SIGINT', 3);
  });
});
