/** What the sandbox attack tests share: the agent's swapper and host canaries (test/sandbox-attack-*.test.ts). */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { tempDir } from './daemon.js';

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

