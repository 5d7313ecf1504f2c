/**
 * The two names of one conversation's workspace: where its processes see it (`/workspace` when
 * sandboxed) and where it is on the host. Paths are translated between them lexically, never
 * resolved on the host: what a path leads to once links are followed is decided inside the
 * sandbox, by the conversation's file service (files.ts), where a link can only lead to what the
 * sandbox already sees.
 */
import path from 'node:path';

export class PathOutsideError extends Error {
  override name = 'PathOutsideError';
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
   * `p` (absolute: in the conversation's view, or a host path of the workspace) as the conversation
   * sees it, normalised; a path that is outside the workspace lexically (`..`, another root) is a
   * PathOutsideError in the conversation's terms. Nothing is resolved: links are followed only by
   * the file service, inside the sandbox (files.ts).
   */
  lexical(p: string): string {
    const abs = path.resolve(p);
    let rel = relativeInside(this.visibleRoot, abs);
    if (rel === null) rel = relativeInside(this.hostRoot, abs);
    if (rel === null) {
      // a path among the daemon's own directories is not named back (the caller may have guessed it)
      const shown = relativeInside(path.dirname(this.hostRoot), abs) === null ? `The path ${p}` : 'The path';
      throw new PathOutsideError(`${shown} is outside the workspace: only files under ${this.visibleRoot} can be read or written.`);
    }
    return rel === '' ? this.visibleRoot : path.join(this.visibleRoot, rel);
  }
}

/** `child` relative to `root` ('' for root itself), or null when it is not inside. */
function relativeInside(root: string, child: string): string | null {
  if (child === root) return '';
  const rel = path.relative(root, child);
  if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) return null;
  return rel;
}
