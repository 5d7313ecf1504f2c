/** What the sandbox test files share (test/sandbox*.test.ts): the harness, host-side process views, the canaries. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { allEvents } from './conversation-api.js';
import { removeDir, startDaemon, waitFor, type DaemonHandle } from './daemon.js';
export { descendants } from './processes.js';
import { startScriptedLlm, type ScriptedLlm } from './scripted-llm.js';
import { fileURLToPath } from 'node:url';

export const SESSION = 'sess-SANDBOXCANARY-4711';
export const LLM_KEY = 'sk-SANDBOXCANARY-llm-0815';
export const SECRET_KEY = 'secretkey-SANDBOXCANARY-0042';
export const CANARIES = [SESSION, LLM_KEY, SECRET_KEY];
export const H = { 'X-Session-API-Key': SESSION };
export const rev = (s: string) => [...s].reverse().join('');

/** Host processes whose command line contains `marker` (read from the host's /proc). */
export function hostProcesses(marker: string): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const state = fs.readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1]?.[0];
      if (cmd.includes(marker) && state !== 'Z') out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

/**
 * The one host process whose command line contains `marker`, once it is there: a job started with
 * `(cmd &)` may not have exec'd yet when the command that started it returns.
 */
export async function hostProcess(marker: string): Promise<number> {
  const found = await waitFor(() => (hostProcesses(marker).length === 1 ? hostProcesses(marker)[0] : undefined), `one process "${marker}"`, 10_000);
  return found!;
}

/** The namespace a host process is in (`pid:[4026…]`), or null when it is gone. */
export function nsOf(pid: number, kind = 'pid'): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/${kind}`);
  } catch {
    return null;
  }
}

/**
 * A namespace of `pid`, held open until `release()`: the kernel numbers namespaces from the lowest
 * free number, so once the last process of a namespace is gone a sandbox another test starts meanwhile
 * may get the same `pid:[N]`, and "no process left in it" would count that sandbox's. An open
 * descriptor keeps the namespace (not its processes), and with it its number.
 */
export function holdNs(pid: number, kind = 'pid'): { ns: string; release(): void } {
  const fd = fs.openSync(`/proc/${pid}/ns/${kind}`, 'r');
  const ns = fs.readlinkSync(`/proc/self/fd/${fd}`);
  return { ns, release: () => fs.closeSync(fd) };
}

/** Host processes in the pid namespace `ns` (zombies have no namespace links). */
export function pidsInNs(ns: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d) && nsOf(Number(d)) === ns)
    .map(Number);
}

export const alive = (pids: number[]) =>
  pids.filter((p) => {
    try {
      return !/\) Z /.test(fs.readFileSync(`/proc/${p}/stat`, 'utf8'));
    } catch {
      return false;
    }
  });

/**
 * A conversation's /tmp on the host: on its disk image (a root daemon's sandbox, the image mounted
 * while the sandbox lives) or in its state directory.
 */
export function sandboxTmp(dataDir: string, id: string): string {
  const state = path.join(dataDir, 'workspaces', '.sandbox', id.replace(/-/g, ''));
  return fs.existsSync(path.join(state, 'disk.img')) ? path.join(state, 'disk', 'tmp') : path.join(state, 'tmp');
}

export const TSX_LOADER = import.meta.resolve('tsx');
export const STDIO_SERVER = fileURLToPath(new URL('./mcp-servers/stdio-server.ts', import.meta.url));

export interface Harness {
  d: DaemonHandle;
  llm: ScriptedLlm;
  req: DaemonHandle['req'];
  /** Creates a conversation (its workspace exists once this returns). */
  create(): Promise<string>;
  /** Runs tool calls (one LLM response each) then a final answer; returns the observations. */
  run(id: string, calls: { name: string; arguments: object }[]): Promise<any[]>;
  /** One terminal command; the observation's text. */
  sh(id: string, command: string, timeout?: number): Promise<{ text: string; exit: number | null }>;
  ws(id: string): string;
  close(): Promise<void>;
}

export async function harness(env: Record<string, string> = {}): Promise<Harness> {
  const llm = await startScriptedLlm();
  const d = await startDaemon({
    LLM_MODEL: 'openai/scripted',
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: LLM_KEY,
    SESSION_API_KEY: SESSION,
    SECRET_KEY,
    SANDBOX: 'bwrap',
    ...env,
  });
  const req: DaemonHandle['req'] = (m, p, b, h) => d.req(m, p, b, { ...H, ...h });
  // the sandbox probe runs once the port is open (its warnings are logged when it decides)
  await waitFor(async () => (await req('GET', '/server_info')).body.sandbox.mode !== 'probing', 'the sandbox probe', 60_000);
  const h: Harness = {
    d,
    llm,
    req,
    async create() {
      const r = await req('POST', '/api/conversations', {});
      assert.equal(r.status, 200, r.text);
      const id = r.body.conversation_id as string;
      await waitFor(async () => (await req('GET', `/api/conversations/${id}`)).body.execution_status === 'idle', 'conversation ready', 20_000);
      // created on first use: nothing on disk until something runs
      assert.ok(!fs.existsSync(h.ws(id)), 'no workspace before first use');
      fs.mkdirSync(h.ws(id), { recursive: true });
      return id;
    },
    async run(id, calls) {
      const before = (await allEvents(req, id)).length;
      llm.push(...calls.map((c) => ({ toolCalls: [c] })), { text: 'done' });
      const r = await req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true });
      assert.equal(r.status, 200, r.text);
      await waitFor(
        async () => {
          const evs = await allEvents(req, id);
          return evs.slice(before).some((e) => e.kind === 'MessageEvent' && e.source === 'agent');
        },
        'the run answered',
        60_000,
      );
      await waitFor(async () => (await req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'run ended', 20_000);
      return (await allEvents(req, id))
        .slice(before)
        .filter((e) => e.kind === 'ObservationEvent')
        .map((e) => e.observation);
    },
    async sh(id, command, timeout) {
      const [o] = await h.run(id, [{ name: 'terminal', arguments: { command, ...(timeout ? { timeout } : {}) } }]);
      return { text: o.content.map((c: any) => c.text ?? '').join('\n'), exit: o.exit_code };
    },
    ws: (id) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, '')),
    async close() {
      await d.stop();
      await llm.close();
      removeDir(d.dataDir);
    },
  };
  return h;
}
