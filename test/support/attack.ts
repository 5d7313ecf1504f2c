/** What the sandbox attack tests share: the agent's swapper and host canaries (test/sandbox-attack-*.test.ts). */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { startDaemon, tempDir, waitFor, type DaemonHandle } from './daemon.js';

/** How often each operation is tried against the swapping directory. */
export const TRIES = 200;
export const CANARY = `HOST-CANARY-${crypto.randomBytes(8).toString('hex')}`;
export const ROOT_RUN = process.getuid?.() === 0;
export const RUN_AS = ROOT_RUN ? { uid: 65533, gid: 65533 } : null;

/**
 * The agent's swapper (python3 in the sandbox): `d` (a directory with f.txt) and `l` (a link to the
 * host directory) exchange names as fast as the kernel allows, until `stop` exists.
 */
export const SWAPPER = String.raw`
import ctypes, os, sys
os.chdir(sys.argv[1])
os.makedirs('d/sub', exist_ok=True)
open('d/f.txt', 'w').write('inside\nline two\n')
try: os.symlink(sys.argv[2], 'l')
except FileExistsError: pass
libc = ctypes.CDLL(None, use_errno=True)
open('swapping', 'w').close()
n = 0
while not os.path.exists('stop'):
    libc.syscall(316, -100, b'd', -100, b'l', 2)
    n += 1
open('swapped', 'w').write(str(n))
`;

/** A host directory with canaries, and a way to tell that nothing in it changed. */
export function canaryDir(prefix: string): { dir: string; unchanged(): void } {
  const dir = tempDir(prefix);
  fs.writeFileSync(path.join(dir, 'secret.txt'), `${CANARY} secret\n`, { mode: 0o600 });
  fs.writeFileSync(path.join(dir, 'f.txt'), `${CANARY} readable by all\n`, { mode: 0o644 });
  fs.mkdirSync(path.join(dir, 'sub'));
  fs.writeFileSync(path.join(dir, 'sub', 'deep.txt'), `${CANARY} deep\n`, { mode: 0o644 });
  const snapshot = () => {
    const out: Record<string, string> = {};
    const walk = (d: string) => {
      for (const n of fs.readdirSync(d).sort()) {
        const p = path.join(d, n);
        const st = fs.lstatSync(p);
        out[path.relative(dir, p)] = st.isDirectory() ? `dir ${st.mode}` : `${st.mode} ${st.size} ${st.mtimeMs} ${fs.readFileSync(p, 'utf8')}`;
        if (st.isDirectory()) walk(p);
      }
    };
    walk(dir);
    return out;
  };
  const before = snapshot();
  return { dir, unchanged: () => assert.deepEqual(snapshot(), before, 'the host directory is exactly as it was') };
}

/** A daemon whose one conversation (a git repository) runs the swapper against a canary directory. */
export interface SwappingConversation {
  d: DaemonHandle;
  id: string;
  ws: string;
  H: Record<string, string>;
  canary: ReturnType<typeof canaryDir>;
  /** A 0600 file of the daemon's own in DATA_DIR (the report's `GET /api/git/diff` read one). */
  dataCanary: string;
  /** `conversation_id=…&path=…` for the side channels. */
  q(p: string): string;
  /** Asserts an answer is no 5xx, holds no canary and names no host path; counts its status. */
  check(r: { status: number; text: string }, what: string): void;
  statuses: Map<number, number>;
  close(): Promise<void>;
}

export async function swappingConversation(): Promise<SwappingConversation> {
  const key = 'attack-session-key-0042';
  const H = { 'X-Session-API-Key': key };
  const canary = canaryDir('parley-canary-sc-');
  const d = await startDaemon({ SESSION_API_KEY: key, SANDBOX: 'bwrap', SANDBOX_NETWORK: 'none' });
  const dataCanary = path.join(d.dataDir, 'canary-0600.txt');
  fs.writeFileSync(dataCanary, `${CANARY} data dir\n`, { mode: 0o600 });
  const id = (await d.req('POST', '/api/conversations', {}, H)).body.conversation_id as string;
  const ws = path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
  // a repository, so git changes and diff have work to do
  const started = await d.req(
    'POST',
    '/api/bash/execute_bash_command',
    { command: 'git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m init && echo ok', conversation_id: id, timeout: 60 },
    H,
  );
  assert.match(String(started.body.stdout), /ok/, JSON.stringify(started.body));
  const script = Buffer.from(SWAPPER).toString('base64');
  const swap = await d.req(
    'POST',
    '/api/bash/start_bash_command',
    {
      command: `echo ${script} | base64 -d > /tmp/swap.py && python3 /tmp/swap.py /workspace ${canary.dir} > /dev/null 2>&1`,
      conversation_id: id,
      timeout: 3600,
    },
    H,
  );
  assert.equal(swap.status, 200, swap.text);
  await waitFor(() => fs.existsSync(path.join(ws, 'swapping')), 'the swapper runs', 60_000);
  const statuses = new Map<number, number>();
  return {
    d,
    id,
    ws,
    H,
    canary,
    dataCanary,
    statuses,
    q: (p) => `conversation_id=${id}&path=${encodeURIComponent(p)}`,
    check(r, what) {
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      assert.ok(r.status < 500, `${what}: ${r.status} ${r.text.slice(0, 300)}`);
      assert.ok(!r.text.includes(CANARY), `${what} answered a canary: ${r.text.slice(0, 300)}`);
      assert.ok(!r.text.includes(canary.dir) && !r.text.includes(d.dataDir), `${what} named a host path: ${r.text.slice(0, 300)}`);
    },
    async close() {
      fs.writeFileSync(path.join(ws, 'stop'), '');
      await d.stop();
    },
  };
}

/**
 * What a prompt-injected agent tries against another process (python3 in the sandbox): ptrace
 * attach, pidfd_getfd of its fd 1, process_vm_readv, /proc/<pid>/mem opened for reading and for
 * writing, a signal (0: the permission check alone), its fds' links and its environment. For
 * each pid given, and for a child of its own (the control: where the kernel lets the agent reach a
 * process, the probe sees it). Prints one JSON object: pid (or "own") → attempt → "reached" or the
 * errno's name. With `--hard` it also sends SIGSTOP and SIGKILL (`stopped`, `killed`).
 */
export const REACH_PROBE = `
import ctypes, errno, json, os, signal, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {'x86_64': (101, 434, 438, 310), 'aarch64': (117, 434, 438, 270)}[os.uname().machine]
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
def name(n): return errno.errorcode.get(n, str(n))
def err(): return name(ctypes.get_errno())
def attempts(pid, hard):
    r = {}
    if libc.syscall(NR[0], 16, pid, 0, 0) == 0:
        try: os.waitpid(pid, 0x40000000)
        except ChildProcessError: pass
        libc.syscall(NR[0], 17, pid, 0, 0)
        r['ptrace'] = 'reached'
    else: r['ptrace'] = err()
    pfd = libc.syscall(NR[1], pid, 0)
    if pfd < 0: r['pidfd_getfd'] = 'pidfd_open ' + err()
    else:
        fd = libc.syscall(NR[2], pfd, 1, 0)
        r['pidfd_getfd'] = 'reached' if fd >= 0 else err()
        if fd >= 0: os.close(fd)
        os.close(pfd)
    buf = ctypes.create_string_buffer(8)
    local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
    remote = iovec(0x10000, 8)
    n = libc.syscall(NR[3], pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    r['process_vm_readv'] = 'reached' if n >= 0 or ctypes.get_errno() == errno.EFAULT else err()
    for mode, key in ((os.O_RDONLY, 'mem_read'), (os.O_WRONLY, 'mem_write')):
        try:
            os.close(os.open('/proc/%d/mem' % pid, mode)); r[key] = 'reached'
        except OSError as x: r[key] = name(x.errno)
    for key, fn in (('fd_link', lambda: os.readlink('/proc/%d/fd/1' % pid)), ('environ', lambda: open('/proc/%d/environ' % pid, 'rb').read())):
        try: fn(); r[key] = 'reached'
        except OSError as x: r[key] = name(x.errno)
    try: os.kill(pid, 0); r['kill'] = 'reached'
    except OSError as x: r['kill'] = name(x.errno)
    if hard:
        for sig, key in ((signal.SIGSTOP, 'stopped'), (signal.SIGKILL, 'killed')):
            try: os.kill(pid, sig); r[key] = 'reached'
            except OSError as x: r[key] = name(x.errno)
    return r
out = {}
hard = '--hard' in sys.argv
for p in [a for a in sys.argv[1:] if a != '--hard']: out[p] = attempts(int(p), hard)
own = subprocess.Popen(['sleep', '60'])
out['own'] = attempts(own.pid, False)
own.kill()
print('REACH ' + json.dumps(out, sort_keys=True))
`;

/** The probe's JSON from a command's output. */
export function reachResult(text: string): Record<string, Record<string, string>> {
  const line = text.split('\n').find((l) => l.startsWith('REACH '));
  assert.ok(line, `the probe answered: ${text.slice(0, 2000)}`);
  return JSON.parse(line!.slice(6));
}
