/** The user namespace of a root daemon's sandbox, made before its bwrap (holder-launch.ts says why). */
import fs from 'node:fs';
import { baseChildEnv } from './child-env.js';
import { closeFd, helper, killTree, lastError, type ProcessLike } from './processes.js';
import { callNumbers, NS_FLAGS } from './seccomp.js';
import type { SandboxIds } from './settings.js';
import type { Spawner } from './spawner.js';

/** How long the process that makes a conversation's user namespace may take. */
const USERNS_MS = 10_000;

/**
 * Root daemon: a new user namespace (and network namespace, unless the host's) made by a perl
 * process as the sandbox uid, which therefore owns them (unshare(2), then a line on its stdout, then
 * it waits on its stdin: one program where util-linux unshare, sh and cat were three); the daemon
 * opens both and writes the two-id maps (one write each: the kernel takes a map in one write(2)
 * only), then ends the process: its fds keep the namespaces.
 */
export async function userNamespace(spawner: Spawner, perl: string, ids: SandboxIds, net: boolean): Promise<{ user: number; net: number | null }> {
  const { agent, service } = ids;
  const flags = NS_FLAGS.user | (net ? NS_FLAGS.net : 0);
  const program =
    `syscall(${callNumbers().unshare}, ${flags}) == 0 or die "parley: unshare: $!\n"; ` +
    'syswrite(STDOUT, "\n") == 1 or die "parley: $!\n"; sysread(STDIN, my $b, 1)';
  let p: ProcessLike;
  try {
    p = helper(
      await spawner.spawn({
        file: perl,
        args: ['-e', program],
        uid: agent.uid,
        gid: agent.gid,
        env: { PATH: baseChildEnv().PATH! },
        stdio: ['pipe', 'pipe', 'pipe'],
      }),
    );
  } catch (e) {
    throw new Error(`the user namespace's process could not be started (${(e as Error).message})`);
  }
  return new Promise((resolve, reject) => {
    let stderr = '';
    const opened: number[] = [];
    const timer = setTimeout(() => done(new Error('the user namespace was not made in time')), USERNS_MS);
    const done = (err: Error | null) => {
      clearTimeout(timer);
      killTree(p);
      if (err) {
        for (const fd of opened) closeFd(fd);
        reject(err);
      }
    };
    p.stdin!.on('error', () => {});
    p.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-1000)));
    const early = (code: number | null) => done(new Error(lastError(stderr) || `the user namespace's process exited (${code})`));
    p.once('exit', early);
    p.stdout!.once('data', () => {
      try {
        opened.push(fs.openSync(`/proc/${p.pid}/ns/user`, 'r'));
        if (net) opened.push(fs.openSync(`/proc/${p.pid}/ns/net`, 'r'));
        fs.writeFileSync(`/proc/${p.pid}/uid_map`, `0 ${agent.uid} 1\n1 ${service.uid} 1\n`);
        fs.writeFileSync(`/proc/${p.pid}/gid_map`, `0 ${agent.gid} 1\n1 ${service.gid} 1\n`);
      } catch (e) {
        return done(new Error(`the user namespace could not be mapped (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`));
      }
      p.removeListener('exit', early);
      done(null);
      resolve({ user: opened[0]!, net: net ? opened[1]! : null });
    });
  });
}
