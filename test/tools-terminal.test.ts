/**
 * The terminal tool, part one: what a command runs in and reports (workspace, exit code, state kept
 * between commands, environment and redaction, ANSI) and interactive input (read -p, a python3 REPL,
 * C-d, special keys). Part two (tools-terminal-control.test.ts): timeouts, interrupts, outputs, shells
 * ending and closing. Two files so that they run side by side (each ~20 s of mostly waiting).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as z from 'zod';
import { Sandbox } from '../src/sandbox/launcher.js';
import { createTerminalTool } from '../src/tools/terminal/tool.js';
import type { ToolContext } from '../src/tools/types.js';
import type { TerminalObservation as ToolObservation } from '../src/tools/terminal/tool.js';
import { SECRET, alive, makeCtx, root, run, runWith, shellPids, textOf, tool, useTerminalTool, waitUntil, type Call } from './support/terminal-harness.js';

useTerminalTool();

describe('terminal tool', () => {
  it('has a parameter schema that converts to JSON Schema', () => {
    const schema = z.toJSONSchema(tool.parameters) as { type: string; properties: Record<string, unknown> };
    assert.equal(schema.type, 'object');
    for (const k of ['command', 'is_input', 'timeout', 'reset']) assert.ok(k in schema.properties, k);
    const input = z.toJSONSchema(tool.parameters, { io: 'input' }) as { required?: string[] };
    assert.deepEqual(input.required, ['command']);
    const parsed = tool.parameters.parse({ command: 'ls' });
    assert.equal(parsed.is_input, false);
    assert.equal(parsed.reset, false);
    assert.equal(tool.name, 'terminal');
  });

  it('runs in the workspace and reports output, exit code and working directory', async () => {
    const ctx = makeCtx();
    const obs = await run(ctx, { command: 'echo hello; pwd' });
    assert.equal(obs.kind, 'TerminalObservation');
    assert.equal(obs.is_error, false);
    assert.equal(obs.exit_code, 0);
    assert.equal(obs.working_dir, ctx.workspaceDir);
    assert.equal(obs.command, 'echo hello; pwd');
    assert.match(textOf(obs), new RegExp(`^hello\\n${ctx.workspaceDir}\\n`));
    assert.match(textOf(obs), /exit code 0/);
    const fail = await run(ctx, { command: 'ls /definitely/not/here; (exit 7)' });
    assert.equal(fail.exit_code, 7);
    assert.match(textOf(fail), /No such file or directory/); // stderr is included
  });

  it('keeps cd, exported variables, functions and a venv activation between commands', async () => {
    const ctx = makeCtx();
    await run(ctx, { command: 'mkdir -p sub/dir && cd sub/dir && export MY_VAR=kept && greet() { echo "hi $1"; }' });
    const obs = await run(ctx, { command: 'pwd; echo $MY_VAR; greet you' });
    assert.equal(obs.working_dir, path.join(ctx.workspaceDir, 'sub/dir'));
    assert.match(textOf(obs), /sub\/dir\nkept\nhi you\n/);

    const venv = await run(ctx, { command: 'python3 -m venv --without-pip venv && source venv/bin/activate', timeout: 60 });
    assert.equal(venv.exit_code, 0, textOf(venv));
    const which = await run(ctx, { command: 'echo "VENV=$VIRTUAL_ENV"; python3 -c "import sys; print(sys.prefix)"' });
    const venvDir = path.join(ctx.workspaceDir, 'sub/dir/venv');
    assert.match(textOf(which), new RegExp(`VENV=${venvDir}\\n${venvDir}\\n`));
  });

  it('merges ctx.env over process.env, exports later changes, and redacts secrets everywhere', async () => {
    const ctx = makeCtx({ env: { API_TOKEN: SECRET } });
    const obs = await run(ctx, { command: `echo "token=$API_TOKEN"; echo home=$HOME` });
    assert.match(textOf(obs), /token=<secret_hidden>/);
    assert.ok(!textOf(obs).includes(SECRET));
    assert.match(textOf(obs), new RegExp(`home=${process.env.HOME}`));
    // The command text itself is redacted too.
    const echoed = await run(ctx, { command: `echo ${SECRET}` });
    assert.ok(!JSON.stringify(echoed).includes(SECRET));
    // A secret added later is exported before the next command.
    ctx.env.NEW_ONE = 'added-later';
    const later = await run(ctx, { command: 'echo "$NEW_ONE"' });
    assert.match(textOf(later), /^added-later/);
  });

  it('strips ANSI escape codes and survives a syntax error', async () => {
    const ctx = makeCtx();
    const obs = await run(ctx, { command: String.raw`printf '\033[1;31mred\033[0m plain\n'` });
    assert.match(textOf(obs), /^red plain\n/);
    assert.ok(!textOf(obs).includes('\x1b'));
    const bad = await run(ctx, { command: 'echo (' });
    assert.equal(bad.exit_code, 2);
    assert.match(textOf(bad), /syntax error/);
    const ok = await run(ctx, { command: 'echo still-alive' });
    assert.match(textOf(ok), /^still-alive/);
  });

  it('answers a read -p prompt through is_input', async () => {
    const ctx = makeCtx();
    const first = await run(ctx, { command: 'read -p "Your name: " name; echo "hello $name"' });
    assert.equal(first.exit_code, -1);
    assert.match(textOf(first), /Your name: /);
    assert.match(textOf(first), /is_input/);
    const second = await run(ctx, { command: 'Ada', is_input: true });
    assert.equal(second.exit_code, 0);
    assert.match(textOf(second), /hello Ada/);
    // A plain `read` from a pipe is not affected by the prompt wrapper.
    const piped = await run(ctx, { command: 'echo "a b" | { read x y; echo "y=$y"; }' });
    assert.match(textOf(piped), /^y=b\n/);
  });

  it('drives a python3 REPL with is_input, C-c and C-d', async (t) => {
    const ctx = makeCtx();
    // python3 here is a pyenv shim (~0.6 s to start when idle, seconds on a busy machine): each step
    // reads on with "" until what it waits for has arrived, instead of trusting one quiet period
    const repl = createTerminalTool({
      sandbox: Sandbox.none(),
      noOutputTimeoutMs: 3000,
      inputWaitMs: 1000,
      maxOutputChars: 2000,
      outputDir: (id) => path.join(root, 'outputs', id),
    });
    t.after(() => repl.closeAll());
    const run = (c: ToolContext, call: Call) => runWith(c, call, repl);
    const until = async (first: ToolObservation, re: RegExp): Promise<{ text: string; last: ToolObservation }> => {
      let last = first;
      let text = textOf(first);
      const deadline = Date.now() + 60_000;
      while (!re.test(text) && last.exit_code === -1 && Date.now() < deadline) {
        last = await run(ctx, { command: '', is_input: true });
        text += textOf(last);
      }
      assert.match(text, re);
      return { text, last };
    };
    const start = await until(await run(ctx, { command: 'python3 -q' }), />>> /);
    assert.equal(start.last.exit_code, -1);
    await until(await run(ctx, { command: 'x = 6 * 7', is_input: true }), />>> /);
    const r2 = await until(await run(ctx, { command: 'print(x)', is_input: true }), /42\n>>> /);
    assert.equal(r2.last.exit_code, -1);
    await run(ctx, { command: 'import time; print("sleeping", flush=True); time.sleep(30)', is_input: true });
    const intr = await until(await run(ctx, { command: 'C-c', is_input: true }), /KeyboardInterrupt[\s\S]*>>> /);
    assert.equal(intr.last.exit_code, -1, 'the REPL survives C-c');
    await until(await run(ctx, { command: 'print("al" + "ive")', is_input: true }), /alive/);
    let end = await run(ctx, { command: 'C-d', is_input: true });
    for (const deadline = Date.now() + 60_000; end.exit_code === -1 && Date.now() < deadline; ) {
      end = await run(ctx, { command: '', is_input: true });
    }
    assert.notEqual(end.exit_code, -1, 'C-d ends the REPL');
    const after2 = await run(ctx, { command: 'echo shell-ok' });
    assert.match(textOf(after2), /^shell-ok/);
  });

  it('C-d closes stdin of the running program without killing the shell', async () => {
    const ctx = makeCtx();
    await run(ctx, { command: 'export KEEP=yes' });
    const start = await run(ctx, { command: 'cat > got.txt; echo "cat done"' });
    assert.equal(start.exit_code, -1);
    await run(ctx, { command: 'line one', is_input: true });
    await run(ctx, { command: 'line two', is_input: true });
    const done = await run(ctx, { command: 'C-d', is_input: true });
    assert.equal(done.exit_code, 0);
    assert.match(textOf(done), /cat done/);
    assert.equal(fs.readFileSync(path.join(ctx.workspaceDir, 'got.txt'), 'utf8'), 'line one\nline two\n');
    const keep = await run(ctx, { command: 'echo $KEEP' });
    assert.match(textOf(keep), /^yes/);
  });

  it('sends special keys as bytes (TAB, ENTER, arrows, ESC, C-<letter>)', async () => {
    const ctx = makeCtx();
    const start = await run(ctx, { command: 'od -An -c' });
    assert.equal(start.exit_code, -1);
    for (const key of ['TAB', 'UP', 'DOWN', 'LEFT', 'RIGHT', 'ESC', 'C-a', 'ENTER']) {
      const obs = await run(ctx, { command: key, is_input: true });
      assert.equal(obs.is_error, false, key);
    }
    const done = await run(ctx, { command: 'C-d', is_input: true });
    const text = textOf(done).replace(/\s+/g, ' ');
    assert.match(text, /\\t 033 \[ A 033 \[ B 033 \[ D 033 \[ C 033 001 \\n/);
    assert.equal(done.exit_code, 0);
  });

  it('leaves no process behind after closeAll', async () => {
    await tool.closeAll();
    assert.ok(shellPids.size >= 5, `${shellPids.size} shells`);
    assert.ok(await waitUntil(() => [...shellPids].every((p) => !alive(p))), 'every shell started by the tests is gone');
  });
});
