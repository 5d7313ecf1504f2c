/**
 * A hostile stand-in for a conversation's file service, run INSIDE the real sandbox in its place
 * (the daemon takes it with NODE_ENV=test and PARLEY_TEST_FILE_SERVICE): it runs the real service
 * as its child and passes every frame through, except for a request whose path has a part
 * `.attack` followed by `<kind>-<seed>`: that one is answered the way `kind` says, with bytes a
 * compromised service could send. So one daemon serves honest conversations and attacked ones side
 * by side, from inside real sandboxes, whatever keeps an agent from reaching the real service.
 *
 * Kinds: see ATTACKS. `fault: false` kinds are legal (a split answer), the others break the protocol.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REAL_SERVICE_JS } from './real-file-service.js';

/** Each kind and whether the daemon must see a violation in it. */
export const ATTACKS: Record<string, { fault: boolean }> = {
  /** a header of `null` as the answer */
  null: { fault: true },
  /** the real answer, then the 12 bytes of a `null` frame while no request waits */
  'null-late': { fault: true },
  /** `{}` as the answer */
  empty: { fault: true },
  /** the real answer, then `{}` while no request waits */
  'empty-late': { fault: true },
  /** the real answer, twice */
  replay: { fault: true },
  /** an answer to another id */
  reorder: { fault: true },
  /** 60 KiB of `[[],[],…]` as the header */
  dense: { fault: true },
  /** a header that says 8 MiB (dense JSON follows): the size once parsed whole */
  'dense-8m': { fault: true },
  /** a frame whose data is larger than the request allows */
  'huge-data': { fault: true },
  /** random bytes */
  random: { fault: true },
  /** the start of an answer, then the service ends */
  truncated: { fault: true },
  /** an answer of the right shape with a field of the wrong type or range */
  'bad-field': { fault: true },
  /** the real answer, one byte per write: legal */
  split: { fault: false },
};

const STAND_IN = String.raw`
import { spawn } from 'node:child_process';
import fs from 'node:fs';
${REAL_SERVICE_JS}
const real = realService(['pipe', 'pipe', 'inherit']);
real.on('exit', () => process.exit(0));
process.stdin.on('end', () => process.exit(0));
process.stdout.on('error', () => process.exit(0));
let seed = 1;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const frame = (head, data = Buffer.alloc(0)) => {
  const h = Buffer.isBuffer(head) ? head : Buffer.from(typeof head === 'string' ? head : JSON.stringify(head));
  const pre = Buffer.alloc(8);
  pre.writeUInt32LE(h.length, 0);
  pre.writeUInt32LE(data.length, 4);
  return Buffer.concat([pre, h, data]);
};
// what goes out keeps its order (a split answer is written over many turns; an answer the real
// service gives meanwhile, e.g. to the daemon's disk walk, waits for it)
let queue = Promise.resolve();
const later = (fn) => (queue = queue.then(fn));
const out = (b) => later(() => void process.stdout.write(b));
/** after the real answer to an id: what to do with it */
const after = new Map();
const attack = (h, kind) => {
  const id = h.id;
  switch (kind) {
    case 'null': return out(frame('null'));
    case 'empty': return out(frame('{}'));
    case 'reorder': return out(frame({ id: id + 1 + Math.floor(rand() * 3), ok: true, info: null }));
    case 'dense': return out(frame('[' + '[],'.repeat(20000) + '[]]'));
    case 'dense-8m': {
      const n = 8 * 1024 * 1024 - 1;
      const pre = Buffer.alloc(8);
      pre.writeUInt32LE(n, 0);
      out(pre);
      return out(Buffer.from('[' + '[],'.repeat(Math.floor((n - 2) / 3))));
    }
    case 'huge-data': {
      const pre = Buffer.alloc(8);
      const head = Buffer.from(JSON.stringify({ id, ok: true, info: null }));
      pre.writeUInt32LE(head.length, 0);
      pre.writeUInt32LE(64 * 1024 * 1024 + Math.floor(rand() * 1e6), 4);
      return out(Buffer.concat([pre, head, Buffer.alloc(1024 * 1024)]));
    }
    case 'random': {
      const b = Buffer.alloc(1 + Math.floor(rand() * 100000));
      for (let i = 0; i < b.length; i++) b[i] = Math.floor(rand() * 256);
      return out(b);
    }
    case 'truncated': {
      const f = frame({ id, ok: true, handle: 1, info: { type: 'file', size: 3, mode: 420, mtimeMs: 1 } });
      out(f.subarray(0, 1 + Math.floor(rand() * (f.length - 2))));
      return later(() => setTimeout(() => process.exit(0), 50));
    }
    case 'bad-field': {
      const info = { type: 'file', size: 3, mode: 420, mtimeMs: 1 };
      const bad = [
        { id, ok: true, handle: -1, info },
        { id, ok: true, handle: 1, info: { ...info, size: 'big' } },
        { id, ok: true, handle: 1, info: { ...info, size: -5 } },
        { id, ok: true, handle: 1, info: { ...info, type: 'nonsense' } },
        { id, ok: true, handle: 1, info, extra: [1, 2, 3] },
        { id, ok: 1, handle: 1, info },
        { id, ok: false, code: 'enoent', message: 'x' },
        { id, ok: false, code: 'ENOENT', message: 'x'.repeat(20000) },
        { id, ok: false, code: 'ENOENT', message: 'x', detail: { size: 'huge' } },
        { id: String(id), ok: true, handle: 1, info },
        [id, true],
        { id, ok: true, handle: 1, info: { ...info, mtimeMs: null } },
      ];
      return out(frame(bad[Math.floor(rand() * bad.length)]));
    }
    default: {
      after.set(id, kind);
      return real.stdin.write(frame(h));
    }
  }
};
// answers of the real service: passed on, or changed as the attack on their request says
let rb = Buffer.alloc(0);
real.stdout.on('data', (c) => {
  rb = Buffer.concat([rb, c]);
  while (rb.length >= 8) {
    const n = 8 + rb.readUInt32LE(0) + rb.readUInt32LE(4);
    if (rb.length < n) return;
    const f = rb.subarray(0, n);
    rb = rb.subarray(n);
    const id = JSON.parse(f.subarray(8, 8 + f.readUInt32LE(0)).toString()).id;
    const kind = after.get(id);
    after.delete(id);
    if (kind === 'split') {
      later(() => new Promise((done) => {
        let i = 0;
        const step = () => { if (i >= f.length) return done(); process.stdout.write(f.subarray(i, i + 1)); i++; setImmediate(step); };
        step();
      }));
      continue;
    }
    out(f);
    if (kind === 'null-late') out(Buffer.from([4, 0, 0, 0, 0, 0, 0, 0, 110, 117, 108, 108]));
    if (kind === 'empty-late') out(frame('{}'));
    if (kind === 'replay') out(f);

  }
});
// requests of the daemon
let ib = Buffer.alloc(0);
process.stdin.on('data', (c) => {
  ib = Buffer.concat([ib, c]);
  while (ib.length >= 8) {
    const n = 8 + ib.readUInt32LE(0) + ib.readUInt32LE(4);
    if (ib.length < n) return;
    const f = ib.subarray(0, n);
    ib = ib.subarray(n);
    const h = JSON.parse(f.subarray(8, 8 + f.readUInt32LE(0)).toString());
    const m = typeof h.path === 'string' ? /\/\.attack\/([a-z0-9-]+?)-(\d+)$/.exec(h.path) : null;
    if (!m) { real.stdin.write(f); continue; }
    seed = Number(m[2]) + 1;
    attack(h, m[1]);
  }
});
`;

/** Writes the stand-in into `dir` (which the sandbox must show: SANDBOX_RO_BINDS) and returns its path. */
export function writeStandIn(dir: string): string {
  const file = path.join(dir, 'hostile-file-service.mjs');
  fs.writeFileSync(file, STAND_IN, { mode: 0o644 });
  fs.chmodSync(dir, 0o755);
  return file;
}
