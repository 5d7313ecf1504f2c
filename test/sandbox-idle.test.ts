/**
 * Idle cost: a conversation whose shell has had no command for SANDBOX_IDLE_CLOSE_MS
 * costs no process — its shell, its sandbox and their background jobs are gone, judged from the
 * host — and its next shell takes up where the old one was: the working directory and the exported
 * variables come back, and the observation says the shell was restarted. Its sandbox comes back as
 * the spare holder with the conversation's files moved in (holders.ts, adoptWithContents): the
 * workspace, /tmp and HOME as they were, a symlink as the link.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { waitFor } from './support/daemon.js';
import {
  fileServices as fileServicesOf,
  readySpare as readySpareOf,
  readySpares as readySparesOf,
  isJoiner,
  spareShells,
  workspaceOf,
} from './support/holders.js';
import { descendants } from './support/processes.js';
import { terminalTurn, useScriptedDaemon } from './support/scripted-daemon.js';

const argvOf = (pid: number): string[] => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
};
const cmdline = (pid: number) => argvOf(pid).join(' ');

describe('an idle conversation costs no process; its shell comes back as it was', { timeout: 420_000 }, () => {
  // (measured disks: a conversation with a disk image of its own comes back in a holder of its own, sandbox-disk.test.ts)
  const s = useScriptedDaemon({
    SANDBOX: 'bwrap',
    SANDBOX_NETWORK: 'none',
    SANDBOX_IDLE_CLOSE_MS: '3000',
    SANDBOX_DISK: 'measured',
  });

  const fileServices = () => fileServicesOf(s.d.proc.pid!);
  const readySpare = () => readySpareOf(s.d.proc.pid!);

  const sh = (id: string, command: string) => terminalTurn(s, id, command);

  test('after SANDBOX_IDLE_CLOSE_MS without a command nothing of the conversation runs; the next command finds its directory and exports', async () => {
    const marker = `8181${process.pid % 1000}`;
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    const first = await sh(
      id,
      `mkdir -p sub/dir && cd sub/dir && export PARLEY_IDLE_VAR='a b "c"' && export PATH="/workspace/bin:$PATH" && ` +
        `(sleep ${marker} > /dev/null 2>&1 &) && echo set`,
    );
    assert.match(first, /^set$/m);
    const daemon = s.d.proc.pid!;
    const job = await waitFor(() => descendants(daemon).find((p) => cmdline(p).includes(`sleep ${marker}`)), 'the background job runs', 20_000);
    // idle: the shell, the job and the conversation's holder go; the spare holder (no conversation's) stays
    await waitFor(() => !fs.existsSync(`/proc/${job}`), 'the background job was stopped with the idle sandbox', 60_000);
    // (a joined process runs under a joiner; the spare's shell, started ahead for the next conversation, is no
    // conversation's)
    const ours = (p: number) => (/bash --norc/.test(cmdline(p)) || isJoiner(argvOf(p))) && !spareShells(daemon).includes(p);
    await waitFor(() => !descendants(daemon).some(ours), 'no shell or joined process left', 60_000);
    await waitFor(() => fileServices().length <= 1, "the conversation's holder closed (only the spare's file service left)", 60_000);
    const left = fileServices().map(workspaceOf);
    assert.deepEqual(left.flat(), [], "what is left is the spare's (an empty workspace), not the conversation's");
    // the next command: a new shell, where the old one was
    const next = await sh(id, 'pwd; echo "[$PARLEY_IDLE_VAR]"; echo "$PATH" | cut -d: -f1');
    assert.match(next, /^\/workspace\/sub\/dir$/m);
    assert.match(next, /^\[a b "c"\]$/m);
    assert.match(next, /^\/workspace\/bin$/m);
    assert.match(next, /had been idle .* and was stopped with everything it ran in the background/);
  });

  test('a returning conversation takes the spare holder with its files moved in: workspace, /tmp, HOME and shell state come back, links as links', async () => {
    const daemon = s.d.proc.pid!;
    await waitFor(readySpare, 'a spare holder', 60_000);
    // (and the shell it starts ahead for its conversation)
    await waitFor(() => spareShells(daemon).length === 2, "the spare's shell", 60_000);
    const base = descendants(daemon).length;
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    const first = await sh(
      id,
      `mkdir -p d/e && echo inner > d/e/f && echo top > top.txt && ln -s /etc link && printf raw > "$(printf 'n\\377')" && ` +
        `echo t > /tmp/keep && echo h > ~/keep && chmod 751 /workspace && cd d/e && export RETURN_VAR=back && echo set`,
    );
    assert.match(first, /^set$/m);
    // idle: the conversation costs no process (the daemon's tree is what it was before it, a spare holder)
    await waitFor(() => descendants(daemon).every((p) => !/bash --norc/.test(cmdline(p)) || spareShells(daemon).includes(p)), 'the shell closed', 60_000);
    await waitFor(() => fileServices().every((p) => workspaceOf(p)?.length === 0), "the conversation's holder closed", 60_000);
    await waitFor(() => descendants(daemon).length <= base, `no process of the idle conversation (${base} before it)`, 60_000);
    // the FIFOs the old shell made for later commands stay for the next one (no mkfifo when it starts)
    const io = path.join(s.d.dataDir, 'workspaces', '.sandbox', id.replace(/-/g, ''), 'io');
    const fifos = () =>
      fs
        .readdirSync(io)
        .filter((n) => n.startsWith('stdin-'))
        .sort((a, b) => Number(a.split('-').pop()) - Number(b.split('-').pop()));
    const kept = fifos();
    assert.ok(kept.length > 0 && kept.every((n) => fs.lstatSync(path.join(io, n)).isFIFO()), `the old shell's unused FIFOs are kept (${kept.join(' ')})`);
    await waitFor(readySpare, 'a spare holder ready', 60_000);
    // (the daemon may keep more than one spare when holders start slower than conversations come: it
    // takes one of them; every holder running before the command is a spare, this conversation's was closed)
    const spares = fileServices();
    // it comes back in a spare holder: the same process now has the conversation's workspace
    const next = await sh(
      id,
      `pwd; echo "[$RETURN_VAR]"; cat /workspace/d/e/f /workspace/top.txt /tmp/keep ~/keep "/workspace/$(printf 'n\\377')"; ` +
        `echo; readlink /workspace/link; stat -c %a /workspace`,
    );
    const after = fifos();
    assert.ok(
      !after.includes(kept[0]!) && after.every((n) => kept.includes(n)),
      `the new shell's command read from the first kept FIFO, and no FIFO was made (kept ${kept.join(' ')}, now ${after.join(' ')})`,
    );
    assert.match(next, /^\/workspace\/d\/e$/m);
    assert.match(next, /^\[back\]$/m);
    assert.match(next, /^inner\ntop\nt\nh\nraw$/m, 'the files came back (one whose name is not UTF-8 too)');
    assert.match(next, /^\/etc$/m, 'the link moved as a link');
    assert.match(next, /^751$/m, "the workspace directory's mode came with it");
    const spare = spares.find((p) => workspaceOf(p)?.join('/') === ['d', 'link', 'n\ufffd', 'top.txt'].join('/'));
    assert.ok(spare, `a spare holder was taken, with the files moved in (${spares.map((p) => workspaceOf(p)?.join(' ')).join('; ')})`);
    assert.ok(fs.existsSync('/etc/passwd') && fs.lstatSync('/etc').isDirectory(), 'nothing the link names was moved');
    // and a spare is ready for the next conversation: a new one, or one that was already starting beside the
    // taken one (the daemon keeps two when holders start slower than conversations came, as on a busy
    // machine; it then starts none, the other being enough). The taken one, with the files, is never it.
    await waitFor(() => readySparesOf(daemon).some((p) => p !== spare), 'a spare holder ready for the next conversation after the take', 60_000);
  });

  test('a workspace with more top-level entries than are moved at once gets a holder of its own; the spare keeps nothing of it', async () => {
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    // 2,001 top-level entries: more than MOVE_MAX_ENTRIES (holders.ts), so the conversation's holder binds its own directories
    assert.match(await sh(id, 'touch $(seq -f n%g 2001) && echo t > /tmp/keep && ls | wc -l'), /^2001$/m);
    await waitFor(() => fileServices().every((p) => workspaceOf(p)?.length === 0), "the conversation's holder closed", 60_000);
    const spare = (await waitFor(readySpare, 'a spare holder ready', 60_000))!;
    const next = await sh(id, 'pwd; ls /workspace | wc -l; cat /tmp/keep');
    assert.match(next, /^\/workspace$/m);
    assert.match(next, /^2001\nt$/m, 'its files and /tmp came back');
    assert.deepEqual(workspaceOf(spare), [], 'the spare was not taken, and nothing was left in it');
    assert.ok(
      fileServices().some((p) => p !== spare && workspaceOf(p)?.length === 2001),
      'a holder of its own has the workspace',
    );
  });

  test('a move refused halfway is undone: the workspace is whole in a holder of its own, the spare keeps nothing of it', async () => {
    const id: string = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;
    assert.match(await sh(id, 'mkdir -p a/b && echo 1 > a/b/c && echo 2 > d && echo made'), /^made$/m);
    await waitFor(() => fileServices().every((p) => workspaceOf(p)?.length === 0), "the conversation's holder closed", 60_000);
    // something in its state directory that is none of the four (holders.ts): refused after the workspace's entries were moved
    const state = path.join(s.d.dataDir, 'workspaces', '.sandbox', id.replace(/-/g, ''));
    fs.writeFileSync(path.join(state, 'stray'), 'x');
    const spare = (await waitFor(readySpare, 'a spare holder ready', 60_000))!;
    const next = await sh(id, 'ls /workspace; cat /workspace/a/b/c');
    assert.match(next, /^a\nd\n1$/m, 'the workspace came back whole');
    assert.deepEqual(workspaceOf(spare), [], 'the spare was not taken, and nothing was left in it');
    assert.equal(fs.readFileSync(path.join(state, 'stray'), 'utf8'), 'x');
  });
});
