/** The workspace file view (src/sandbox/path-view.ts): resolution, and I/O that a swap after the check cannot lead outside. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConfinedFiles, PathOutsideError, PathView } from '../src/sandbox/path-view.js';
import { tempDir } from './support/daemon.js';

let root: string;
let ws: string;
let outside: string;
before(() => {
  root = tempDir('parley-pathview-');
  ws = path.join(root, 'ws');
  outside = path.join(root, 'outside');
  fs.mkdirSync(ws);
  fs.mkdirSync(outside);
  fs.writeFileSync(path.join(outside, 'secret.txt'), 'OUTSIDE-SECRET');
});
after(() => fs.rmSync(root, { recursive: true, force: true }));

describe('PathView', () => {
  test('maps /workspace and the host path to the same file; refuses outside paths, .. and symlinks leading out', () => {
    const v = new PathView(ws, '/workspace');
    fs.mkdirSync(path.join(ws, 'src'), { recursive: true });
    assert.equal(v.resolve('/workspace/src/a.py').host, path.join(ws, 'src/a.py'));
    assert.equal(v.resolve(path.join(ws, 'src/a.py')).visible, '/workspace/src/a.py');
    assert.equal(v.resolve('/workspace/new/dir/file').host, path.join(ws, 'new/dir/file'));
    assert.throws(() => v.resolve('/etc/passwd'), PathOutsideError);
    assert.throws(() => v.resolve('/workspace/../outside/secret.txt'), PathOutsideError);
    fs.symlinkSync(outside, path.join(ws, 'link'));
    fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(ws, 'file-link'));
    fs.symlinkSync('/nonexistent/target', path.join(ws, 'dangling'));
    fs.symlinkSync('src', path.join(ws, 'inner-link'));
    for (const p of ['/workspace/link/secret.txt', '/workspace/file-link', '/workspace/dangling', '/workspace/link']) {
      assert.throws(() => v.resolve(p), (e: Error) => e instanceof PathOutsideError && /outside the workspace/.test(e.message) && !e.message.includes('OUTSIDE-SECRET'), p);
    }
    // a symlink that stays inside is followed
    assert.equal(v.resolve('/workspace/inner-link/a.py').host, path.join(ws, 'src/a.py'));
  });

  test('I/O after the check: a final symlink or a directory swapped for a symlink is refused, nothing read or left outside', async () => {
    const v = new PathView(ws, '/workspace');
    const io = new ConfinedFiles(v);
    fs.mkdirSync(path.join(ws, 'd'));
    fs.writeFileSync(path.join(ws, 'd/secret.txt'), 'inside');
    const checked = v.resolve('/workspace/d/secret.txt').host;
    assert.equal((await io.readFile(checked)).toString(), 'inside');
    await io.writeFile(checked, 'rewritten');
    assert.equal(fs.readFileSync(checked, 'utf8'), 'rewritten');
    // the agent swaps d for a symlink to the outside directory between the check and the open
    fs.rmSync(path.join(ws, 'd'), { recursive: true });
    fs.symlinkSync(outside, path.join(ws, 'd'));
    await assert.rejects(io.readFile(checked), PathOutsideError);
    await assert.rejects(io.writeFile(checked, 'pwned'), PathOutsideError);
    assert.equal(fs.readFileSync(path.join(outside, 'secret.txt'), 'utf8'), 'OUTSIDE-SECRET', 'not truncated, not written');
    const created = v.resolve('/workspace/e/new.txt').host;
    fs.symlinkSync(outside, path.join(ws, 'e'));
    await assert.rejects(io.writeFile(created, 'x', { exclusive: true }), PathOutsideError);
    assert.ok(!fs.existsSync(path.join(outside, 'new.txt')), 'the file created outside was removed');
    // the last component swapped for a symlink: O_NOFOLLOW
    fs.writeFileSync(path.join(ws, 'f.txt'), 'f');
    const f = v.resolve('/workspace/f.txt').host;
    fs.rmSync(f);
    fs.symlinkSync(path.join(outside, 'secret.txt'), f);
    await assert.rejects(io.readFile(f), /ELOOP|outside/);
  });
});
