/**
 * Running the `parley` command in tests: as a subprocess (bin/parley.mjs, as `npx parley` runs it)
 * against a test daemon with a scripted agent, with everything it prints kept for "the key is in no
 * output" checks. Used by test/cli.test.ts and test/cli-resume.test.ts.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { ROOT, startDaemon, waitFor, type DaemonHandle } from './daemon.js';
import { startScriptedLlm, type ScriptedLlm, type ScriptedReplyValue, type ScriptedRequest } from './scripted-llm.js';

export const BIN = path.join(ROOT, 'bin', 'parley.mjs');
export const KEY = 'cli-test-session-key';
export const H = { 'X-Session-API-Key': KEY };

/**
 * The scripted agent's behaviour is chosen by the latest user message: `task:finish` runs a
 * command and creates a file, edits it, then finishes; `task:reply` answers in text; `task:error` gets a
 * provider error; `task:stuck` repeats one command; `task:slow` waits two minutes for the LLM
 * (a run to detach from, interrupt or restart under).
 */
function reply(req: ScriptedRequest): ScriptedReplyValue {
  const messages = (req.body as { messages: { role: string; content: unknown }[] }).messages;
  const lastUser = messages.map((m) => m.role).lastIndexOf('user');
  const task = /task:(\w+)/.exec(JSON.stringify(messages[lastUser]?.content))?.[1];
  const toolResults = messages.slice(lastUser).filter((m) => m.role === 'tool').length;
  // the system prompt names the workspace (a host path: these daemons run with SANDBOX=none)
  const workspace = /(\/[^\s"'`\\]*\/workspaces\/[0-9a-f]{32})/.exec(JSON.stringify(messages[0]))?.[1] ?? '/workspace';
  switch (task) {
    case 'finish':
      if (toolResults === 0) {
        return {
          text: 'Let me write it.',
          toolCalls: [
            { name: 'terminal', arguments: { command: "printf 'one\\ntwo\\n'" } },
            { name: 'file_editor', arguments: { command: 'create', path: `${workspace}/hello.py`, file_text: 'print("hello")\nprint("again")\n' } },
          ],
        };
      }
      if (toolResults === 2) {
        return {
          toolCalls: [
            {
              name: 'file_editor',
              arguments: {
                command: 'str_replace',
                path: `${workspace}/hello.py`,
                old_str: 'print("hello")\nprint("again")',
                new_str: 'print("hello")\nprint("edited")',
              },
            },
          ],
        };
      }
      return { toolCalls: [{ name: 'finish', arguments: { message: 'Wrote hello.py' } }] };
    case 'reply':
      return { text: 'pong' };
    case 'error':
      return { error: { status: 400 } };
    case 'stuck':
      return { toolCalls: [{ name: 'terminal', arguments: { command: 'echo same' } }] };
    case 'slow':
      return { delayMs: 120_000, text: 'too late' };
    default:
      return { text: `no task in ${JSON.stringify(messages[lastUser]?.content)}` };
  }
}

export interface CliBench {
  /** The daemon (a new handle after `restart`). */
  d: DaemonHandle;
  llm: ScriptedLlm;
  /** The daemon's environment (to start another on the same LLM). */
  env: Record<string, string>;
  /** Everything every command printed. */
  printed: string[];
  parley(args: string[], env?: Record<string, string | undefined>, daemon?: DaemonHandle): Cli;
  info(id: string, daemon?: DaemonHandle): Promise<{ execution_status: string; last_seq: number }>;
  /**
   * `parley attach <id> --json` once the conversation's run waits for the (slow) LLM and the command
   * has shown every event so far: nothing more is written until the test makes it happen.
   */
  attachCaughtUp(id: string): Promise<Cli>;
  /** Stops the daemon with `signal` and starts it again on the same data (and port, when PORT was given). */
  restart(signal: NodeJS.Signals): Promise<void>;
  close(): Promise<void>;
}

export interface Cli {
  proc: ChildProcess;
  out(): string;
  err(): string;
  /** The exit code (128 + n for a signal). */
  code: Promise<number>;
}

/** A daemon (key, no sandbox, the scripted agent) and a way to run `parley` against it; lib/ built once first. */
export async function startCliBench(extraEnv: Record<string, string> = {}): Promise<CliBench> {
  const llm = await startScriptedLlm(Array.from({ length: 1000 }, () => reply));
  const env = { SESSION_API_KEY: KEY, SANDBOX: 'none', LLM_MODEL: 'openai/scripted', LLM_BASE_URL: llm.url, LLM_API_KEY: 'llm-key', ...extraEnv };
  const d = await startDaemon(env);
  // build lib/ once here rather than in the first commands started side by side
  const built = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8', timeout: 120_000 });
  if (built.status !== 0) throw new Error(`parley --version: ${built.stderr}`);
  const printed: string[] = [];
  const running = new Set<ChildProcess>();
  const parley = (args: string[], extra: Record<string, string | undefined> = {}, daemon: DaemonHandle = bench.d): Cli => {
    const full: Record<string, string> = {};
    for (const [k, v] of Object.entries({ PATH: process.env.PATH, HOME: os.tmpdir(), PARLEY_URL: daemon.url, PARLEY_API_KEY: KEY, ...extra }))
      if (v !== undefined) full[k] = v;
    const proc = spawn(process.execPath, [BIN, ...args], { cwd: os.tmpdir(), env: full, stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(proc);
    let out = '';
    let err = '';
    proc.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s));
    proc.stderr!.setEncoding('utf8').on('data', (s: string) => (err += s));
    const code = new Promise<number>((resolve) =>
      proc.on('close', (c, signal) => {
        running.delete(proc);
        printed.push(out, err);
        resolve(c ?? 128 + (os.constants.signals[signal as NodeJS.Signals] ?? 0));
      }),
    );
    return { proc, out: () => out, err: () => err, code };
  };
  const bench: CliBench = {
    d,
    llm,
    env,
    printed,
    parley,
    info: async (id, daemon = bench.d) => (await daemon.req('GET', `/api/conversations/${id}`, undefined, H)).body,
    async attachCaughtUp(id) {
      // the system prompt names the conversation's workspace (WORKSPACE_ROOT/<id as 32 hex>)
      const hex = id.replaceAll('-', '');
      await waitFor(() => llm.requests.some((q) => JSON.stringify(q.body).includes(hex)), 'the LLM call', 60_000);
      const r = parley(['attach', id, '--json']);
      await waitFor(async () => seqsOf(ndjson(r.out())).at(-1) === (await bench.info(id)).last_seq, 'attach caught up', 60_000);
      return r;
    },
    async restart(signal) {
      await bench.d.stop(signal);
      bench.d = await startDaemon(env, bench.d.dataDir);
    },
    async close() {
      for (const p of running) p.kill('SIGKILL');
      await bench.d.stop();
      await llm.close();
    },
  };
  return bench;
}

/** `--json` output: one event per line (a line still being written is left out). */
export const ndjson = (text: string) =>
  text
    .slice(0, text.lastIndexOf('\n') + 1)
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { kind: string; seq?: number; key?: string; value?: unknown; id?: string });
export const seqsOf = (events: { seq?: number }[]) => events.filter((e) => e.seq !== undefined).map((e) => e.seq!);
export const oneToN = (n: number) => Array.from({ length: n }, (_, i) => i + 1);
