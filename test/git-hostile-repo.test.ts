/**
 * The daemon's own git on a repository the agent has poisoned (src/workspace/git-process.ts).
 *
 * Inside its sandbox, the agent plants in its repository's `.git/config` (and in files it includes,
 * and in HOME's `.gitconfig`) every setting that makes git run a program, hooks in `.git/hooks` and in
 * a `core.hooksPath`, and attributes that name a filter, a textconv and a merge driver. Each program
 * touches a marker named after what ran it; the fsmonitor also tries to write the 12 bytes that
 * once killed the daemon (a frame whose header is `null`) on the file service's socket. Then the
 * daemon serves /api/git/changes, /api/git/diff and the file browser's patch archive for it, as the
 * console does: the answers must be
 * right, no marker may appear (judged from the host, in the workspace's directory), and the daemon
 * must be up. The agent's own git, last, still runs what it planted (the markers appear): the test
 * plants what works.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';

/** A program for every executor: touches /workspace/markers/<what>, passes its input on. */
const MARK = `#!/bin/sh
touch "/workspace/markers/$1"
cat 2>/dev/null
exit 0
`;

/** What the fsmonitor adds: the file service's stdout through pidfd_getfd, and a 12-byte frame of `null` on it. */
const CRASH = String.raw`
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        cmd = open('/proc/%s/cmdline' % pid, 'rb').read()
    except Exception:
        continue
    if b'file-service.pl' not in cmd:
        continue
    pidfd = libc.syscall(434, int(pid), 0)
    fd = libc.syscall(438, pidfd, 1, 0) if pidfd >= 0 else -1
    if fd >= 0:
        # (marked first: the daemon's answer to the frame may end this process)
        open('/workspace/markers/frame-sent', 'w').close()
        os.write(fd, b'\x04\x00\x00\x00\x00\x00\x00\x00null')
`;

const HOOKS = [
  'pre-commit',
  'post-checkout',
  'post-commit',
  'post-merge',
  'pre-auto-gc',
  'reference-transaction',
  'post-index-change',
  'fsmonitor-watchman',
  'pre-push',
  'post-rewrite',
];

/** The repository at /workspace/repo, with a change, an untracked file and everything planted. */
const PLANT = `set -e
mkdir -p /workspace/markers /workspace/hooks
printf '%s' "$MARK_B64" | base64 -d > /workspace/mark && chmod +x /workspace/mark
printf '%s' "$CRASH_B64" | base64 -d > /workspace/crash.py
cd /workspace && git init -q repo && cd repo
git config user.email a@b && git config user.name a
printf 'one\\n' > a.txt && printf 'two\\n' > b.txt && printf '* filter=evil diff=evil merge=evil\\n' > .gitattributes
git add . && git commit -qm init
for h in ${HOOKS.join(' ')}; do
  printf '#!/bin/sh\\n/workspace/mark hook-%s\\n' "$h" > .git/hooks/$h
  printf '#!/bin/sh\\n/workspace/mark hookspath-%s\\n' "$h" > /workspace/hooks/$h
  chmod +x .git/hooks/$h /workspace/hooks/$h
done
printf '* filter=evil diff=evil\\n' > .git/info/attributes
m() { printf '/workspace/mark %s' "$1"; }
git config core.fsmonitor "/workspace/mark fsmonitor; python3 /workspace/crash.py"
git config core.hooksPath /workspace/hooks
git config filter.evil.clean "$(m filter-clean)"
git config filter.evil.smudge "$(m filter-smudge)"
git config filter.evil.process "$(m filter-process)"
git config diff.external "$(m diff-external)"
git config diff.evil.textconv "$(m textconv)"
git config diff.evil.command "$(m diff-command)"
git config core.sshCommand "$(m ssh)"
git config core.pager "$(m pager)"
git config pager.status "$(m pager-status)"
git config pager.show "$(m pager-show)"
git config core.editor "$(m editor)"
git config sequence.editor "$(m sequence-editor)"
git config core.askPass "$(m askpass)"
git config credential.helper "!/workspace/mark credential"
git config gpg.program "$(m gpg)"
git config log.showSignature true
git config merge.evil.driver "$(m merge-driver)"
git config alias.st "!/workspace/mark alias"
git config protocol.allow always
git config remote.origin.url /workspace/other
git config remote.origin.uploadpack "$(m uploadpack)"
git config remote.origin.receivepack "$(m receivepack)"
git config core.gitProxy "$(m git-proxy)"
git config core.alternateRefsCommand "$(m alternate-refs)"
git config core.preloadIndex true
printf '[core]\\n\\tfsmonitor = /workspace/mark include-fsmonitor\\n' > /workspace/evil.inc
git config include.path /workspace/evil.inc
printf '[core]\\n\\thooksPath = /workspace/hooks\\n' > /workspace/evil-if.inc
printf '\\tfsmonitor = "/workspace/mark includeif-fsmonitor; python3 /workspace/crash.py"\\n' >> /workspace/evil-if.inc
git config includeIf.gitdir:/workspace/.path /workspace/evil-if.inc
printf '[core]\\n\\tfsmonitor = /workspace/mark global-fsmonitor\\n\\tpager = /workspace/mark global-pager\\n' > "$HOME/.gitconfig"
printf 'one\\nmore\\n' > a.txt && printf 'new\\n' > c.txt
echo planted
`;

describe("the daemon's git on a poisoned repository", { timeout: 170_000 }, () => {
  let d: DaemonHandle;
  let id: string;
  let markers: string;
  before(async () => {
    d = await startDaemon({ SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' });
    id = (await d.req('POST', '/api/conversations', {})).body.conversation_id as string;
    markers = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''), 'markers');
    const env = `MARK_B64=${Buffer.from(MARK).toString('base64')} CRASH_B64=${Buffer.from(CRASH).toString('base64')}`;
    const r = await d.req('POST', '/api/bash/execute_bash_command', {
      command: `${env} bash -c '${PLANT.replace(/'/g, `'\\''`)}'`,
      conversation_id: id,
      timeout: 60,
    });
    assert.match(String(r.body.stdout), /planted/, JSON.stringify(r.body));
    assert.deepEqual(fs.readdirSync(markers), [], 'planting ran nothing');
  });
  after(() => d?.stop());

  test('changes and diff are served right, nothing planted runs, the daemon stays up', async () => {
    const q = (p: string) => `conversation_id=${id}&path=${encodeURIComponent(p)}`;
    for (let i = 0; i < 3; i++) {
      const changes = await d.req('GET', `/api/git/changes?${q('/workspace/repo')}`);
      assert.equal(changes.status, 200, changes.text);
      const byPath = Object.fromEntries((changes.body as { path: string; status: string }[]).map((c) => [c.path, c.status]));
      assert.deepEqual(byPath, { 'a.txt': 'UPDATED', 'c.txt': 'ADDED' });
      const diff = await d.req('GET', `/api/git/diff?${q('/workspace/repo/a.txt')}`);
      assert.equal(diff.status, 200, diff.text);
      assert.deepEqual(diff.body, { original: 'one\n', modified: 'one\nmore\n' });
      // the file browser's archive as a patch: git add and diff on a temporary index
      const patch = await fetch(`${d.url}/api/file/archive?${q('/workspace/repo')}&format=git-delta`);
      const text = await patch.text();
      assert.equal(patch.status, 200, text);
      assert.match(text, /\+more/);
      assert.match(text, /new file mode[\s\S]*\+new/);
    }
    assert.deepEqual(fs.readdirSync(markers), [], 'no program the repository names ran');
    assert.equal((await d.req('GET', '/health')).status, 200);
    assert.equal(d.proc.exitCode, null, 'the daemon is up');
    assert.deepEqual(
      (await allEvents(d.req, id)).filter((e) => e.kind === 'ConversationErrorEvent'),
      [],
      'the conversation had nothing to be told',
    );
  });

  test("the agent's own git runs what it planted (so the test above can fail); the daemon survives its frame", async (t) => {
    const r = await d.req('POST', '/api/bash/execute_bash_command', {
      // the fsmonitor (and its frame) last
      command:
        'cd /workspace/repo && G="git -c core.fsmonitor=false"; $G status >/dev/null 2>&1; $G diff >/dev/null 2>&1; git status >/dev/null 2>&1; echo done',
      conversation_id: id,
      timeout: 60,
    });
    // (when the frame reached the file service, the sandbox was closed under the command: no `done`)
    assert.ok(r.status < 500, r.text);
    // (the last fsmonitor the config sets wins: the conditional include's)
    const ran = ['includeif-fsmonitor', 'filter-process', 'diff-command', 'hookspath-post-index-change'];
    await waitFor(() => ran.every((m) => fs.readdirSync(markers).includes(m)), `${ran.join(', ')} run for the agent`, 30_000).catch((e: Error) => {
      throw new Error(`${e.message}; markers: ${fs.readdirSync(markers).join(', ')}`);
    });
    // whether the frame reached the file service depends on what keeps the agent from it; either way the daemon is up
    t.diagnostic(`ran for the agent: ${fs.readdirSync(markers).join(', ')}`);
    assert.equal((await d.req('GET', '/health')).status, 200);
    if (fs.readdirSync(markers).includes('frame-sent')) {
      // it reached the service: that sandbox was closed, and the conversation told why
      await waitFor(async () => (await allEvents(d.req, id)).some((e) => e.code === 'SandboxProtocolError'), 'the SandboxProtocolError event');
    }
    const changes = await d.req('GET', `/api/git/changes?conversation_id=${id}&path=/workspace/repo`);
    assert.equal(changes.status, 200, changes.text);
    assert.equal(d.proc.exitCode, null, 'the daemon is up');
  });
});
