// @ts-check
/**
 * The spawner: the small process that starts the sandboxes' host-side programs for the daemon (a
 * holder's supervisor, the user namespace's `unshare`, the seal, egress's tool and filter, a disk's
 * mkfs, mount, umount and e2fsck). spawner.ts is the daemon's side.
 *
 * Why a process of its own: Node starts a child with fork(2) of the whole process, and the calling
 * thread waits until the child has exec'd. In the daemon (tens of MiB, most of it written to) a fork
 * copies the page tables and write-protects the heap, so the wait held its event loop 2–10 ms per
 * program, and the heap's pages faulted again as they were written afterwards: a spare's start (5–8
 * programs) beside a turn held that turn's events. Here a fork is of this small process, and its
 * waits hold nothing else.
 *
 * Plain JavaScript with node's built-ins only, run as it is. argv: the daemon's pid.
 *
 * Protocol: Node's IPC channel with the daemon (advanced serialization: buffers travel as they are).
 *   in:  {t:'spawn', id, file, args, env, cwd?, uid?, gid?, nice? (default 0), stdio}   each slot one of
 *          'ignore';
 *          'pipe'    relayed: what the child writes comes out as 'data' and 'eof', 'write' and 'end'
 *                    go to it;
 *          'direct'  a socket pair whose other end goes to the daemon (the file service's channel, which
 *                    must not pass through here; a shell's stdio, started ahead of its conversation):
 *                    each with a 'direct' message before 'spawned';
 *          a number  that fd of the daemon, opened again through /proc/<daemon>/fd/<n> (the
 *                    namespace files a process enters: a socket cannot be opened so);
 *          {data}    a pipe the bytes are written into, then closed, as the program starts;
 *        {t:'write', id, slot, data}  {t:'end', id, slot}  {t:'destroy', id, slot}
 *   out: {t:'direct', id, slot} (with that slot's socket)  {t:'spawned', id, pid}  {t:'failed', id, code, message}
 *        {t:'data', id, slot, data}  {t:'eof', id, slot}  {t:'exit', id, code, signal}  {t:'close', id}
 * Every child leads a process group of its own. When the daemon goes (the channel ends, or SIGTERM
 * from --pdeathsig when it died), every group still running gets SIGKILL and this process exits.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';

const daemon = Number(process.argv[2]);
/** @type {Map<number, import('node:child_process').ChildProcess>} */
const children = new Map();

/**
 * @param {any} m
 * @param {any} [handle]
 * @param {() => void} [sent]
 */
function send(m, handle, sent = () => {}) {
  if (process.connected) process.send?.(m, handle, sent);
  else sent();
}

/** @param {any} m */
function start(m) {
  const opened = [];
  /** @type {import('node:child_process').StdioOptions} */
  const stdio = m.stdio.map((/** @type {any} */ s) => {
    if (typeof s === 'number') {
      const fd = fs.openSync(`/proc/${daemon}/fd/${s}`, 'r');
      opened.push(fd);
      return fd;
    }
    return s === 'ignore' ? 'ignore' : 'pipe';
  });
  let child;
  try {
    child = spawn(m.file, m.args, { env: m.env, cwd: m.cwd, uid: m.uid, gid: m.gid, stdio, detached: true });
  } finally {
    for (const fd of opened) fs.closeSync(fd);
  }
  const { id } = m;
  if (child.pid === undefined) {
    child.once('error', (/** @type {NodeJS.ErrnoException} */ e) => send({ t: 'failed', id, code: e.code ?? null, message: e.message }));
    return;
  }
  children.set(id, child);
  // (this process runs at a higher priority than the conversations: what it starts does not). The
  // child leads a session of its own, and where the kernel weighs sessions as groups (autogroups) its
  // group's nice value is what counts against the daemon's: both are set
  try {
    os.setPriority(child.pid, m.nice ?? 0);
    if (m.nice) fs.writeFileSync(`/proc/${child.pid}/autogroup`, String(m.nice));
  } catch {
    /* gone already, or no autogroups */
  }
  const streams = /** @type {Array<import('node:net').Socket | null>} */ (/** @type {unknown} */ (child.stdio));
  streams.forEach((s, slot) => {
    if (!s) return;
    s.on('error', () => {});
    const given = m.stdio[slot];
    if (typeof given === 'object' && given !== null) {
      s.end(given.data);
      return;
    }
    if (given === 'direct') {
      // not one byte is read here: the socket (reading since the spawn, in this same turn of the
      // event loop, so nothing yet) stops before the next turn and goes to the daemon as it is; once
      // sent (a message with a socket waits for the one before it to be taken), the handle has left
      // with it: the empty socket is closed then, which the child's 'close' counts
      /** @type {any} */ (s)._handle?.readStop();
      send({ t: 'direct', id, slot }, s, () => s.destroy());
      return;
    }
    s.on('data', (data) => send({ t: 'data', id, slot, data }));
    s.on('end', () => send({ t: 'eof', id, slot }));
  });
  send({ t: 'spawned', id, pid: child.pid });
  child.on('error', () => {});
  child.once('exit', (code, signal) => send({ t: 'exit', id, code, signal }));
  child.once('close', () => {
    children.delete(id);
    send({ t: 'close', id });
  });
}

/** @param {any} m */
function stream(m) {
  const s = /** @type {import('node:net').Socket | null | undefined} */ (children.get(m.id)?.stdio[m.slot]);
  if (!s || s.destroyed) return;
  if (m.t === 'write') s.write(m.data);
  else if (m.t === 'end') s.end();
  else s.destroy();
}

process.on('message', (/** @type {any} */ m) => {
  if (m.t === 'spawn') {
    try {
      start(m);
    } catch (e) {
      const err = /** @type {NodeJS.ErrnoException} */ (e);
      send({ t: 'failed', id: m.id, code: err.code ?? null, message: err.message });
    }
  } else stream(m);
});

/** The daemon is gone (its channel ended, or SIGTERM: setpriv's --pdeathsig when it died): so is everything started here. */
function end() {
  for (const c of children.values()) {
    try {
      process.kill(-(/** @type {number} */ (c.pid)), 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  process.exit(0);
}
process.on('disconnect', end);
process.on('SIGTERM', end);
send({ t: 'ready', pid: process.pid });
