/**
 * Workspace access without a sandbox: plain processes with a built environment, paths confined by
 * realpath. Stands in until the sandbox's launcher and path view are on main (then they replace it).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { baseChildEnv } from '../workspace/child-env.js';
import type { WorkspaceAccess } from './side-channels.js';

function inside(root: string, p: string): boolean {
  const rel = path.relative(root, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

export function hostAccess(): WorkspaceAccess {
  return {
    resolve(workspaceDir, p) {
      const root = fs.realpathSync(workspaceDir);
      const abs = path.resolve(p);
      if (!inside(path.resolve(workspaceDir), abs)) throw new Error(`The path ${p} is outside the workspace ${workspaceDir}`);
      // the longest existing prefix, resolved: a symlink leading out is refused
      let probe = abs;
      while (!fs.existsSync(probe) && probe !== path.dirname(probe)) {
        if (fs.lstatSync(probe, { throwIfNoEntry: false })?.isSymbolicLink()) throw new Error(`The path ${p} leads outside the workspace (a dangling symbolic link)`);
        probe = path.dirname(probe);
      }
      if (!inside(root, fs.realpathSync(probe))) throw new Error(`The path ${p} leads outside the workspace (a symbolic link pointing outside ${workspaceDir})`);
      return { host: abs, visible: abs };
    },
    visibleWorkspace: (dir) => dir,
    launcher: () => ({
      spawn: (argv, opts) => spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd, env: opts.env, stdio: opts.stdio ?? 'pipe', detached: true }),
      env: (extra = {}) => baseChildEnv(extra),
    }),
    gitOptions: () => ({ env: baseChildEnv({ GIT_TERMINAL_PROMPT: '0' }) }),
  };
}
