/**
 * A spare sandbox starts its conversation's shell ahead (src/sandbox/holders.ts prestartWith, the
 * terminal's pool), so a new conversation's first command does not wait for bash to join the sandbox.
 * Judged from the host: the first command runs in the very bash the spare started before the
 * conversation existed; that bash held none of the conversation's secrets while it was a spare's, and
 * its commands get them; it runs at the normal priority once taken; and its commands see the same
 * environment as those of a shell started for the conversation (after `exit`). The daemon forks
 * nothing for that first command: its shell is the spare's, its stdin's FIFOs were made ahead with it
 * (by the spawner), and one swapped for a file before the take is not used.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { waitFor } from './support/daemon.js';
import { fileServices, spareShells, workspaceOf } from './support/holders.js';
import { terminalTurn, useScriptedDaemon } from './support/scripted-daemon.js';

const argv0 = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0];
  } catch {
    return undefined;
  }
};
/** The nice value of a host process (field 19 of /proc/<pid>/stat). */
const niceOf = (pid: number) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
};

describe("a spare sandbox's shell, started ahead, is its conversation's first shell", { timeout: 240_000 }, () => {
  const s = useScriptedDaemon(
    { SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' },
    { nodeArgs: ['--import', path.join(import.meta.dirname, 'support/spawn-log.mjs')] },
  );
  /** What the daemon itself started (support/spawn-log.mjs), in order. */
  const forked = () => s.d.output.filter((l) => l.startsWith('parley-test-spawn '));

  const sh = (id: string, command: string) => terminalTurn(s, id, command);

  test('the first command runs in the bash the spare started; it gets the secrets, the normal priority, the environment of a new shell', async () => {
    const daemon = s.d.proc.pid!;
    const secret = `spare-shell-${crypto.randomBytes(8).toString('hex')}`;
    const digest = crypto.createHash('sha256').update(secret).digest('hex');
    assert.equal((await s.d.req('POST', '/api/secrets', { name: 'SPARE_SECRET', value: secret })).status, 201);
    // the spare's shell: bash in the spare's sandbox, under the joiner that started it
    const bash = Number(await waitFor(() => spareShells(daemon).find((p) => argv0(p) === 'bash'), "a spare's shell", 60_000));
    assert.ok(!fs.readFileSync(`/proc/${bash}/environ`, 'utf8').includes(secret), "a spare's shell holds no conversation's secret");
    // the FIFOs made ahead for its first commands, in the spare's io directory (seen from the host through
    // the sandbox's root); one swapped for a file: the terminal must not take it up (it checks the inode)
    const io = `/proc/${bash}/root/parley/io`;
    const fifos = (): string[] => fs.readdirSync(io).filter((n) => /^stdin-[0-9a-f]+-\d+$/.test(n) && fs.lstatSync(path.join(io, n)).isFIFO());
    const ahead = (await waitFor(() => (fifos().length === 8 ? fifos() : null), 'the FIFOs made ahead', 60_000))!.sort(
      (a, b) => Number(a.split('-').pop()) - Number(b.split('-').pop()),
    );
    fs.unlinkSync(path.join(io, ahead[0]!));
    fs.writeFileSync(path.join(io, ahead[0]!), 'not a FIFO');
    const before = forked().length;
    const id = (await s.d.req('POST', '/api/conversations', {})).body.conversation_id;

    const first = await sh(
      id,
      'touch made-by-first-shell; printf %s "$SPARE_SECRET" | sha256sum | cut -d" " -f1; ' +
        `sh -c 'printf "child %s\\n" "\${#SPARE_SECRET}"'; echo "nice $(cut -d' ' -f19 /proc/self/stat)"; env | sort > /tmp/first.env; ` +
        'echo "stdin $(readlink /proc/self/fd/0)"',
    );
    assert.match(first, new RegExp(`^stdin /parley/io/${ahead[1]}$`, 'm'), 'its stdin is the next FIFO made ahead, not the swapped one');
    assert.ok(!fs.existsSync(path.join(io, ahead[0]!)), 'what was swapped in was removed');
    assert.match(first, new RegExp(`^${digest}$`, 'm'), 'the shell has the secret');
    assert.match(first, new RegExp(`^child ${secret.length}$`, 'm'), "the shell's commands get the secret");
    assert.match(first, /^nice 0$/m, 'commands run at the normal priority');
    const during = forked().slice(before);
    assert.ok(forked().length > 0, "the spawn log is loaded (the spawner's start at least)");
    assert.deepEqual(
      during.filter((l) => /^parley-test-spawn (\S*\/)?(mkfifo|sh) /.test(l)),
      [],
      `the daemon forked no shell and no mkfifo for the first command (${during.join('; ')})`,
    );
    // the command ran in that bash: it is alive, at the normal priority, and its /workspace is the conversation's
    assert.ok(fs.readdirSync(`/proc/${bash}/root/workspace`).includes('made-by-first-shell'), "the spare's bash is the conversation's shell");
    assert.equal(niceOf(bash), 0);
    // it is the conversation's sandbox's: its pid namespace and its cgroup are those of the conversation's
    // file service (the holder it joined), not the daemon's
    const service = fileServices(daemon).find((p) => workspaceOf(p)?.includes('made-by-first-shell'));
    assert.ok(service, "the conversation's file service");
    const ns = (pid: number) => fs.readlinkSync(`/proc/${pid}/ns/pid`);
    const cgroup = (pid: number) => fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8');
    assert.equal(ns(bash), ns(service));
    assert.notEqual(ns(bash), ns(daemon));
    assert.equal(cgroup(bash), cgroup(service));
    assert.notEqual(cgroup(bash), cgroup(daemon));

    // a shell started for the conversation (the first one exited) sees the same environment
    await sh(id, 'exit');
    const second = await sh(id, 'env | sort > /tmp/second.env; diff /tmp/first.env /tmp/second.env && echo same-env; grep -c "^SPARE_SECRET=" /tmp/second.env');
    assert.match(second, /^same-env$/m, second);
    assert.match(second, /^1$/m);
    assert.ok(!fs.existsSync(`/proc/${bash}`) || argv0(bash) !== 'bash', 'the first shell exited');
  });
});
