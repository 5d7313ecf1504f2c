/**
 * The file view of one conversation, for everything the daemon does on the agent's behalf with a
 * path the LLM chose (file_editor, replay writes, side channels): exactly the workspace, like the
 * sandboxed shell sees it.
 *
 * A path is accepted in the form the agent sees (`/workspace/src/a.py` when sandboxed) or as the
 * host path of the workspace (the two name the same files). It is normalised, then every existing
 * component is resolved with realpath: a `..` that leaves the workspace, or a symlink planted in
 * the workspace that points outside it (another conversation's workspace, DATA_DIR, /etc/shadow)
 * is refused with a PathOutsideError, before anything is opened, so no byte of the target leaks.
 * The remaining race (a component swapped for a symlink between the check and the open) needs the
 * agent's shell to win a timing window; the shell itself cannot see outside the sandbox anyway.
 */
import fs from 'node:fs';
import path from 'node:path';

export class PathOutsideError extends Error {
  override name = 'PathOutsideError';
}

export interface ResolvedPath {
  /** The host path to open (symlinks inside the workspace resolved). */
  host: string;
  /** The path as the agent sees it (what observations show). */
  visible: string;
}

export class PathView {
  /**
   * @param hostRoot the workspace directory on the host
   * @param visibleRoot where processes of the conversation see it (`/workspace`, or hostRoot unsandboxed)
   */
  constructor(
    readonly hostRoot: string,
    readonly visibleRoot: string,
  ) {
    this.hostRoot = path.resolve(hostRoot);
    this.visibleRoot = path.resolve(visibleRoot);
  }

  /** The host path of a visible path, without checks (for paths the daemon built itself). */
  toHost(p: string): string {
    const abs = path.resolve(p);
    const rel = relativeInside(this.visibleRoot, abs);
    return rel === null ? abs : path.join(this.hostRoot, rel);
  }

  /** The visible path of a host path inside the workspace (other paths unchanged). */
  toVisible(p: string): string {
    const abs = path.resolve(p);
    const rel = relativeInside(this.hostRoot, abs);
    return rel === null ? abs : rel === '' ? this.visibleRoot : path.join(this.visibleRoot, rel);
  }

  /**
   * Checks that `p` (absolute) stays inside the workspace once symlinks and `..` are resolved.
   * Throws PathOutsideError with a message meant for the agent.
   */
  resolve(p: string): ResolvedPath {
    const abs = path.resolve(p);
    let rel = relativeInside(this.visibleRoot, abs);
    if (rel === null) rel = relativeInside(this.hostRoot, abs);
    if (rel === null) {
      throw new PathOutsideError(
        `The path ${p} is outside the workspace: only files under ${this.visibleRoot} can be read or written.`,
      );
    }
    let realRoot: string;
    try {
      realRoot = fs.realpathSync(this.hostRoot);
    } catch {
      throw new PathOutsideError(`The workspace ${this.visibleRoot} does not exist yet.`);
    }
    // Resolve the longest existing prefix; the missing rest (a file to create) cannot be a symlink.
    const parts = rel === '' ? [] : rel.split(path.sep);
    let real = realRoot;
    let i = 0;
    for (; i < parts.length; i++) {
      const next = path.join(real, parts[i]!);
      let resolved: string;
      try {
        resolved = fs.realpathSync(next);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') {
          // a dangling symlink is still a symlink: refuse it rather than create its target
          let isLink = false;
          try {
            isLink = fs.lstatSync(next).isSymbolicLink();
          } catch {
            /* really missing */
          }
          if (isLink) throw this.outside(p, parts.slice(0, i + 1));
          break;
        }
        if (code === 'ENOTDIR') break;
        throw err;
      }
      if (relativeInside(realRoot, resolved) === null) throw this.outside(p, parts.slice(0, i + 1));
      real = resolved;
    }
    // named under hostRoot (not its realpath) so messages can show the visible path
    const host = path.join(this.hostRoot, path.relative(realRoot, path.join(real, ...parts.slice(i))));
    return { host, visible: this.toVisible(host) };
  }

  private outside(p: string, parts: string[]): PathOutsideError {
    const at = path.join(this.visibleRoot, ...parts);
    return new PathOutsideError(
      `The path ${p} leads outside the workspace (${at} is a symbolic link pointing outside ${this.visibleRoot}); ` +
        'it was not opened. Only files inside the workspace can be read or written.',
    );
  }
}

/** `child` relative to `root` ('' for root itself), or null when it is not inside. */
function relativeInside(root: string, child: string): string | null {
  if (child === root) return '';
  const rel = path.relative(root, child);
  if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) return null;
  return rel;
}

/**
 * File I/O on a path `PathView.resolve` accepted, closing the window between that check and the
 * open: the last component is opened with O_NOFOLLOW, and the file actually opened (its
 * /proc/self/fd link) must still be inside the workspace; a directory swapped for a symlink in
 * between is caught there. A write never truncates before that check.
 */
export class ConfinedFiles {
  constructor(private readonly view: PathView) {}

  private realRoot(): string {
    return fs.realpathSync(this.view.hostRoot);
  }

  private async check(fh: fs.promises.FileHandle, p: string): Promise<void> {
    let real: string;
    try {
      real = await fs.promises.readlink(`/proc/self/fd/${fh.fd}`);
    } catch {
      return; // no /proc: the O_NOFOLLOW open and the resolve() check stand
    }
    if (relativeInside(this.realRoot(), real) === null) {
      await fh.close();
      throw new PathOutsideError(`The path ${this.view.toVisible(p)} led outside the workspace while it was opened; it was not read or written.`);
    }
  }

  async readFile(p: string): Promise<Buffer> {
    const fh = await fs.promises.open(p, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    await this.check(fh, p);
    try {
      return await fh.readFile();
    } finally {
      await fh.close();
    }
  }

  /** `exclusive`: the file must not exist yet (create); `create`: made when missing; else it must exist. */
  async writeFile(p: string, data: string | Buffer, opts: { exclusive?: boolean; create?: boolean } = {}): Promise<void> {
    const c = fs.constants;
    const creating = opts.exclusive || (opts.create && !fs.existsSync(p));
    const flags = c.O_WRONLY | c.O_NOFOLLOW | (opts.exclusive || opts.create ? c.O_CREAT : 0) | (opts.exclusive ? c.O_EXCL : 0);
    const fh = await fs.promises.open(p, flags, 0o644);
    try {
      await this.check(fh, p);
    } catch (err) {
      if (creating) await fs.promises.unlink(p).catch(() => {}); // what we just created outside
      throw err;
    }
    try {
      await fh.truncate(0);
      await fh.writeFile(data);
    } finally {
      await fh.close();
    }
  }
}
