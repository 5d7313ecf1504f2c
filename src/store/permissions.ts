/**
 * The data directory holds the event log, sealed secrets, the key file and full terminal outputs:
 * nothing in it is for other users of the machine. The daemon sets its umask to 077
 * at start (bridge/main.ts), so SQLite's database, WAL and journal files, the journal, the key
 * file and outputs are created 0600 and directories 0700 whatever the umask it was started with;
 * this removes the group and other bits from what an earlier version or another umask left behind.
 * Workspaces are skipped: their files belong to the repository and the agent.
 */
import fs from 'node:fs';
import path from 'node:path';

export const DATA_DIR_UMASK = 0o077;

export function restrictDataDir(dataDir: string, skip: string[] = []): void {
  const skipped = new Set(skip.map((p) => path.resolve(p)));
  const walk = (p: string) => {
    if (skipped.has(p)) return;
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch {
      return;
    }
    if (st.isSymbolicLink()) return;
    if ((st.mode & 0o077) !== 0) fs.chmodSync(p, st.mode & 0o700);
    if (st.isDirectory()) for (const name of fs.readdirSync(p)) walk(path.join(p, name));
  };
  walk(path.resolve(dataDir));
}
