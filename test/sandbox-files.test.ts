/**
 * The file service (src/sandbox/file-service.pl through src/sandbox/files.ts) as a plain process
 * (SANDBOX=none): its rules and bounds. What it must never do with links it follows is what the
 * sandbox enforces; test/sandbox-attacks.test.ts attacks that from inside a real sandbox.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { ChannelFiles, FileChannel, FileOpError, type WorkspaceFiles } from '../src/sandbox/files.js';
import { Sandbox } from '../src/sandbox/launcher.js';
import { PathOutsideError, PathView } from '../src/sandbox/path-view.js';
import { findProgram } from '../src/sandbox/programs.js';
import { FILE_SERVICE } from '../src/sandbox/view.js';
import { tempDir } from './support/daemon.js';

let root: string;
let ws: string;
let outside: string;
let sandbox: Sandbox;
let files: WorkspaceFiles;

before(() => {
  root = tempDir('parley-files-');
  ws = path.join(root, 'ws');
  outside = path.join(root, 'outside');
  fs.mkdirSync(ws);
  fs.mkdirSync(outside);
  fs.writeFileSync(path.join(outside, 'secret.txt'), 'OUTSIDE-SECRET');
  sandbox = Sandbox.none(root);
  files = sandbox.files('files-test', ws);
});
after(async () => {
  await sandbox.close();
  fs.rmSync(root, { recursive: true, force: true });
});

const code = (c: string) => (e: unknown) => e instanceof FileOpError && e.code === c;

describe('PathView: lexical translation only', () => {
  test('both names of a path map to the conversation view; .. and other roots are refused before anything is opened', () => {
    const v = new PathView(ws, '/workspace');
    assert.equal(v.lexical('/workspace/src/a.py'), '/workspace/src/a.py');
    assert.equal(v.lexical(path.join(ws, 'src/a.py')), '/workspace/src/a.py');
    assert.equal(v.lexical(ws), '/workspace');
    assert.equal(v.toHost('/workspace/x'), path.join(ws, 'x'));
    for (const p of ['/etc/passwd', '/workspace/../outside/secret.txt', path.join(ws, '../outside')]) {
      assert.throws(
        () => v.lexical(p),
        (e: Error) => e instanceof PathOutsideError && /outside the workspace/.test(e.message) && !e.message.includes(root),
        p,
      );
    }
  });
});

describe('file service (plain process)', () => {
  test('reads and writes regular files; creates parents; exclusive, create and existing modes', async () => {
    await files.write(path.join(ws, 'a/b/c.txt'), 'one', { mode: 'exclusive', mkdirs: true });
    assert.equal(fs.readFileSync(path.join(ws, 'a/b/c.txt'), 'utf8'), 'one');
    await assert.rejects(files.write(path.join(ws, 'a/b/c.txt'), 'two', { mode: 'exclusive' }), code('EEXIST'));
    await files.write(path.join(ws, 'a/b/c.txt'), 'three', { mode: 'existing' });
    await assert.rejects(files.write(path.join(ws, 'missing.txt'), 'x', { mode: 'existing' }), code('ENOENT'));
    await files.write(path.join(ws, 'made.txt'), 'made', { mode: 'create' });
    assert.equal((await files.read(path.join(ws, 'a/b/c.txt'), 100)).toString(), 'three');
    assert.deepEqual((await files.stat(path.join(ws, 'a')))?.type, 'dir');
    assert.equal(await files.stat(path.join(ws, 'nope')), null);
    assert.equal(await files.remove(path.join(ws, 'made.txt')), true);
    assert.equal(fs.existsSync(path.join(ws, 'made.txt')), false);
    await assert.rejects(files.remove(path.join(ws, 'a')), code('EISDIR'));
  });

  test('links: followed inside the workspace, refused when they lead out (no byte of the target in the answer)', async () => {
    fs.mkdirSync(path.join(ws, 'src'), { recursive: true });
    fs.writeFileSync(path.join(ws, 'src/in.txt'), 'inside');
    fs.symlinkSync('src', path.join(ws, 'inner'));
    fs.symlinkSync(outside, path.join(ws, 'dirlink'));
    fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(ws, 'filelink'));
    fs.symlinkSync('/nonexistent/target', path.join(ws, 'dangling'));
    assert.equal((await files.read(path.join(ws, 'inner/in.txt'), 100)).toString(), 'inside');
    // chains of links, relative ones, `..` in a target, out of the workspace and back in: followed to where they end
    fs.symlinkSync('chain2', path.join(ws, 'chain1'));
    fs.symlinkSync('inner/../src', path.join(ws, 'chain2'));
    fs.symlinkSync(`../${path.basename(ws)}/src`, path.join(ws, 'outandback'));
    for (const p of ['chain1/in.txt', 'outandback/in.txt', 'chain1/../src/in.txt'])
      assert.equal((await files.read(path.join(ws, p), 100)).toString(), 'inside', p);
    assert.equal(await files.realpath(path.join(ws, 'chain1/in.txt')), path.join(ws, 'src/in.txt'));
    // links that loop are refused, not followed for ever
    fs.symlinkSync('loop2', path.join(ws, 'loop1'));
    fs.symlinkSync('loop1', path.join(ws, 'loop2'));
    await assert.rejects(files.read(path.join(ws, 'loop1/x'), 100), code('ELOOP'));
    fs.symlinkSync('..', path.join(ws, 'up'));
    for (const p of ['dirlink/secret.txt', 'filelink', 'dangling', 'dirlink', `up/${path.basename(ws)}/src/in.txt`, 'up/outside/secret.txt']) {
      for (const op of [
        () => files.read(path.join(ws, p), 100),
        () => files.write(path.join(ws, p), 'pwned', { mode: 'create' }),
        () => files.list(path.join(ws, p)),
      ]) {
        await assert.rejects(op(), (e: unknown) => e instanceof FileOpError && e.code === 'OUTSIDE' && !e.message.includes('OUTSIDE-SECRET'), p);
      }
    }
    assert.equal(fs.readFileSync(path.join(outside, 'secret.txt'), 'utf8'), 'OUTSIDE-SECRET');
    assert.deepEqual(fs.readdirSync(outside), ['secret.txt']);
    // removing a link removes the link, never its target
    assert.equal(await files.remove(path.join(ws, 'filelink')), true);
    assert.equal(fs.readFileSync(path.join(outside, 'secret.txt'), 'utf8'), 'OUTSIDE-SECRET');
    await assert.rejects(files.read('/etc/passwd', 100), code('OUTSIDE'));
  });

  test('a FIFO, a device, a socket are refused at once; a file larger than asked is TOO_LARGE; head reads the start', async () => {
    execFileSync('mkfifo', [path.join(ws, 'fifo')]);
    fs.symlinkSync('/dev/zero', path.join(ws, 'zero'));
    const t0 = Date.now();
    await assert.rejects(files.read(path.join(ws, 'fifo'), 100), code('NOT_REGULAR'));
    await assert.rejects(files.write(path.join(ws, 'fifo'), 'x', { mode: 'existing' }), (e: unknown) => e instanceof FileOpError);
    await assert.rejects(
      files.read(path.join(ws, 'zero'), 100),
      (e: unknown) => e instanceof FileOpError && (e.code === 'OUTSIDE' || e.code === 'NOT_REGULAR'),
    );
    assert.ok(Date.now() - t0 < 20_000, 'nothing blocked');
    fs.writeFileSync(path.join(ws, 'big.bin'), Buffer.alloc(4096, 1));
    await assert.rejects(files.read(path.join(ws, 'big.bin'), 1000), code('TOO_LARGE'));
    const head = await files.head(path.join(ws, 'big.bin'), 10);
    assert.equal(head.data.length, 10);
    assert.equal(head.size, 4096);
  });

  test('listings stop at their entry limit, hidden names counted; a huge directory answers', async () => {
    const big = path.join(ws, 'huge');
    fs.mkdirSync(big);
    for (let i = 0; i < 3000; i++) fs.writeFileSync(path.join(big, `f${String(i).padStart(5, '0')}`), '');
    fs.writeFileSync(path.join(big, '.hidden'), '');
    const l = await files.list(big, { depth: 1, max: 100 });
    assert.equal(l.entries.length, 100);
    assert.equal(l.truncated, true);
    assert.equal(l.entries[0]!.path, path.join(big, 'f00000'));
    const all = await files.list(big, { depth: 1, max: 5000 });
    assert.equal(all.entries.length, 3000);
    assert.equal(all.hidden, 1);
  });

  test('usage counts allocated bytes; clear empties a directory and follows no link', async () => {
    const d = path.join(ws, 'usage');
    fs.mkdirSync(d);
    fs.writeFileSync(path.join(d, 'x'), Buffer.alloc(64 * 1024, 7));
    fs.symlinkSync(outside, path.join(d, 'out'));
    const u = await files.usage([d]);
    assert.ok(u.bytes >= 64 * 1024 && u.complete, JSON.stringify(u));
    await files.clear(d);
    assert.deepEqual(fs.readdirSync(d), []);
    assert.deepEqual(fs.readdirSync(outside), ['secret.txt']);
  });

  test('names with quotes, backslashes, control characters, non-ASCII and astral characters keep every byte both ways', async () => {
    const names = ['q"uote', 'back\\slash', 'tab\there', 'new\nline', 'bell\u0007', 'ünï-çødé', '漢字', 'emoji-😀', 'slash\\u0041'];
    const d = path.join(ws, 'names');
    for (const [i, name] of names.entries()) {
      const p = path.join(d, name, `${name}.txt`);
      await files.write(p, `text ${i} ${name}`, { mode: 'create', mkdirs: true });
      // the host sees the very name the request gave, and the service reads it back by it
      assert.equal(fs.readFileSync(path.join(d, name, `${name}.txt`), 'utf8'), `text ${i} ${name}`);
      assert.equal((await files.read(p, 1000)).toString(), `text ${i} ${name}`);
      assert.equal((await files.stat(p))?.size, Buffer.byteLength(`text ${i} ${name}`));
      assert.equal(await files.realpath(p), p);
    }
    const listed = (await files.list(d, { depth: 2, max: 100 })).entries.map((e) => e.path);
    assert.deepEqual(new Set(listed), new Set(names.flatMap((n) => [path.join(d, n), path.join(d, n, `${n}.txt`)])));
    // an error names the path as the request gave it
    await assert.rejects(files.read(path.join(d, names[0]!), 100), (e: unknown) => e instanceof FileOpError && e.message.includes(names[0]!));
  });

  test("the service needs perl-base's modules only (every Debian system has them)", () => {
    // the service run with only perl-base's directory to load modules from, its stdin at its end:
    // it says it is ready and ends
    const out = execFileSync(
      findProgram('perl')!,
      ['-e', 'BEGIN { @INC = grep { m{/perl-base$} } @INC; die "no perl-base in \\@INC" unless @INC } do $ARGV[0] or die $@ || $!', FILE_SERVICE],
      { input: '', env: { PATH: process.env.PATH } },
    );
    assert.match(out.subarray(8).toString(), /^\{"id":0,"ok":true,"ready":true\}$/);
  });
});

describe('file channel: the daemon does not trust the service', () => {
  /** A frame as the service writes it. */
  const frameOf = (h: unknown, data = Buffer.alloc(0)) => {
    const head = Buffer.from(JSON.stringify(h));
    const pre = Buffer.alloc(8);
    pre.writeUInt32LE(head.length, 0);
    pre.writeUInt32LE(data.length, 4);
    return Buffer.concat([pre, head, data]);
  };
  /** A channel to a service the test plays (it has said it is ready). */
  function fake(): { channel: FileChannel; toDaemon: PassThrough; broken: string[] } {
    const toService = new PassThrough();
    const toDaemon = new PassThrough();
    const broken: string[] = [];
    const channel = new FileChannel(toService, toDaemon, (why) => broken.push(why), 300);
    toDaemon.write(frameOf({ id: 0, ok: true, ready: true }));
    return { channel, toDaemon, broken };
  }

  test('an answer larger than its request allows ends the channel without buffering it', async () => {
    const { channel, toDaemon, broken } = fake();
    await channel.ready;
    const p = channel.request({ op: 'read', path: '/x', max: 10 }, null, 10);
    const pre = Buffer.alloc(8);
    pre.writeUInt32LE(2, 0);
    pre.writeUInt32LE(1 << 30, 4); // claims a gigabyte
    toDaemon.write(pre);
    await assert.rejects(p, code('UNAVAILABLE'));
    assert.equal(broken.length, 1);
    await assert.rejects(channel.request({ op: 'stat', path: '/x' }, null), code('UNAVAILABLE'));
  });

  /** A channel whose service sends `bytes` (after the ready frame) while `ask` waits; what the daemon made of it. */
  async function answer(bytes: Buffer | Buffer[], ask?: (c: FileChannel) => Promise<unknown>) {
    const f = fake();
    const faults: string[] = [];
    f.channel.onFault = (why) => faults.push(why);
    await f.channel.ready;
    const pending = ask?.(f.channel).then(
      (v) => ({ ok: true as const, v }),
      (e: Error) => ({ ok: false as const, e }),
    );
    for (const b of Array.isArray(bytes) ? bytes : [bytes]) f.toDaemon.write(b);
    const result = await pending;
    await new Promise((r) => setImmediate(r));
    return { result, faults, broken: f.broken, channel: f.channel };
  }
  const stat = (c: FileChannel) => c.request({ op: 'stat', path: '/workspace/x' }, null);
  const info = { type: 'file', size: 3, mode: 0o644, mtimeMs: 1 };

  test('the 12 bytes of a `null` frame, and `{}`, while no request waits: one fault, nothing thrown, the channel ends', async () => {
    for (const head of ['null', '{}']) {
      const r = await answer(frameOf(JSON.parse(head)));
      assert.equal(r.faults.length, 1, head);
      assert.match(r.faults[0]!, /no request waited/);
      assert.equal(r.channel.usable, false);
      assert.equal(r.broken.length, 1, 'the owner ends the service once');
    }
    assert.equal(frameOf(null).length, 12);
  });

  test("a sandbox that ends in the middle of an answer is a fault, whether its end or its pipe's end comes first", async () => {
    for (const first of ['sandbox', 'pipe'] as const) {
      const f = fake();
      const faults: string[] = [];
      f.channel.onFault = (why) => faults.push(why);
      await f.channel.ready;
      const pending = stat(f.channel).catch((e: Error) => e);
      const whole = frameOf({ id: 1, ok: true, info });
      f.toDaemon.write(whole.subarray(0, whole.length - 3));
      await new Promise((r) => setImmediate(r));
      if (first === 'sandbox') f.channel.ended('the sandbox ended');
      f.toDaemon.end();
      await new Promise((r) => setImmediate(r));
      assert.ok((await pending) instanceof Error, first);
      assert.deepEqual(faults, ['the file service ended in the middle of an answer'], first);
    }
    // an end between answers is no fault
    const f = fake();
    const faults: string[] = [];
    f.channel.onFault = (why) => faults.push(why);
    await f.channel.ready;
    f.channel.ended('the sandbox ended');
    assert.deepEqual(faults, []);
    assert.equal(f.channel.usable, false);
  });

  test('every malformed, out-of-order, oversized or replayed answer is one fault with a reason; legal answers pass, however split', async () => {
    const bad: [string, Buffer | Buffer[], (c: FileChannel) => Promise<unknown>, RegExp][] = [
      ['null as the answer', frameOf(null), stat, /out of order/],
      ['{} as the answer', frameOf({}), stat, /out of order/],
      ['an array', frameOf([1, true]), stat, /out of order/],
      ['a wrong id', frameOf({ id: 2, ok: true, info: null }), stat, /out of order/],
      ['ok not a boolean', frameOf({ id: 1, ok: 1, info: null }), stat, /malformed/],
      ['a size of -1', frameOf({ id: 1, ok: true, info: { ...info, size: -1 } }), stat, /malformed \(info\.size\)/],
      ['a size as a string', frameOf({ id: 1, ok: true, info: { ...info, size: '3' } }), stat, /malformed/],
      ['an unknown type', frameOf({ id: 1, ok: true, info: { ...info, type: 'door' } }), stat, /malformed/],
      ['an extra key', frameOf({ id: 1, ok: true, info: null, more: 1 }), stat, /malformed/],
      ['a code in lower case', frameOf({ id: 1, ok: false, code: 'enoent', message: 'x' }), stat, /failure answer was malformed/],
      ['a message of 20,000 characters', frameOf({ id: 1, ok: false, code: 'ENOENT', message: 'x'.repeat(20_000) }), stat, /failure answer was malformed/],
      [
        'a failure with data',
        frameOf({ id: 1, ok: false, code: 'ENOENT', message: 'x' }, Buffer.from('zz')),
        (c) => c.request({ op: 'read', path: '/w', max: 9 }, null, 9),
        /carried data/,
      ],
      ['a header that is not JSON', frameOf({ id: 1 }).fill(0x41, 8), stat, /not JSON/],
      [
        'a dense header',
        (() => {
          const h = Buffer.from(`[${'[],'.repeat(20_000)}[]]`);
          const pre = Buffer.alloc(8);
          pre.writeUInt32LE(h.length, 0);
          return Buffer.concat([pre, h]);
        })(),
        stat,
        /more structure/,
      ],
      [
        'a header of 9 MiB, announced',
        (() => {
          const pre = Buffer.alloc(8);
          pre.writeUInt32LE(9 << 20, 0);
          return pre;
        })(),
        stat,
        /header of 9\.0 MiB is larger than 64 KiB/,
      ],
      [
        'data over what was asked',
        frameOf({ id: 1, ok: true }, Buffer.alloc(11)),
        (c) => c.request({ op: 'read', path: '/w', max: 10 }, null, 10),
        /larger than its request allows/,
      ],
      ['an answer, replayed', [frameOf({ id: 1, ok: true, info: null }), frameOf({ id: 1, ok: true, info: null })], stat, /no request waited/],
    ];
    for (const [what, bytes, ask, reason] of bad) {
      const r = await answer(bytes, ask);
      assert.equal(r.faults.length, 1, what);
      assert.match(r.faults[0]!, reason, what);
      assert.equal(r.channel.usable, false, what);
      if (!what.includes('replayed')) assert.equal(r.result?.ok, false, what);
    }
    // a legal answer one byte at a time, and a listing whose entries stay under the directory
    const f = frameOf({ id: 1, ok: true, info });
    const split = await answer(
      [...f].map((b) => Buffer.from([b])),
      stat,
    );
    assert.deepEqual(split.faults, []);
    assert.deepEqual((split.result as { v: { header: unknown } }).v.header, { id: 1, ok: true, info });
  });

  test('paths in answers must be under what was asked: a listing or a realpath that names another is a fault', async () => {
    const tick = () => new Promise((r) => setImmediate(r));
    const ch = () => {
      const f = fake();
      const faults: string[] = [];
      f.channel.onFault = (why) => faults.push(why);
      return { ...f, faults, files: new ChannelFiles('/workspace', async () => f.channel) };
    };
    const a = ch();
    const list = a.files.list('/workspace/d');
    await tick();
    a.toDaemon.write(frameOf({ id: 1, ok: true, hidden: 0, truncated: false, count: 2 }, Buffer.from('f/workspace/d/a\0d/etc\0')));
    await assert.rejects(list, code('UNAVAILABLE'));
    assert.match(a.faults[0]!, /outside the listed directory/);
    const b = ch();
    const real = b.files.realpath('/workspace/x');
    await tick();
    b.toDaemon.write(frameOf({ id: 1, ok: true, path: '/workspace/../etc/passwd' }));
    await assert.rejects(real, code('UNAVAILABLE'));
    assert.match(b.faults[0]!, /outside \/workspace/);
    const c = ch();
    const ok = c.files.list('/workspace/d', { depth: 2 });
    await tick();
    c.toDaemon.write(frameOf({ id: 1, ok: true, hidden: 1, truncated: false, count: 2 }, Buffer.from('d/workspace/d/sub\0f/workspace/d/sub/x y\0')));
    assert.deepEqual(await ok, {
      entries: [
        { path: '/workspace/d/sub', dir: true },
        { path: '/workspace/d/sub/x y', dir: false },
      ],
      hidden: 1,
      truncated: false,
    });
    assert.deepEqual(c.faults, []);
  });

  test('a request not answered in time ends the channel with TIMEOUT; answers out of order end it too', async () => {
    // (the channel's deadline does not keep a daemon alive; here nothing else would)
    const alive = setInterval(() => {}, 1000);
    try {
      const a = fake();
      await a.channel.ready;
      await assert.rejects(a.channel.request({ op: 'stat', path: '/x' }, null), code('TIMEOUT'));
      const b = fake();
      await b.channel.ready;
      const p = b.channel.request({ op: 'stat', path: '/x' }, null);
      b.toDaemon.write(frameOf({ id: 999, ok: true }));
      await assert.rejects(p, code('UNAVAILABLE'));
      assert.match(b.broken[0]!, /out of order/);
    } finally {
      clearInterval(alive);
    }
  });
});
