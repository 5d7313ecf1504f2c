/**
 * Saved workspaces and workspace parents (OpenHands' `/api/workspaces`): the list a client's workspace
 * picker shows, kept by the server so that every client sees the same one. Entries are names for the
 * client; Parley never opens them as host paths (a conversation's workspace is its own, and the file
 * browser shows the sandbox's view). Adds are idempotent by `path`.
 */
import { NotFoundError } from '../errors.js';
import type { Settings } from '../secrets/settings.js';
import { SETTINGS_KIND, type JsonRecords } from './records.js';

export interface WorkspaceItem {
  id: string;
  name: string;
  path: string;
  parentPath?: string | null;
}
export interface WorkspaceParentItem {
  id: string;
  name: string;
  path: string;
}
export interface Saved {
  workspaces: WorkspaceItem[];
  workspaceParents: WorkspaceParentItem[];
}

/** As many of each as a picker shows (more is a 422 from the wire schema's list bound, or here once stored). */
const MAX_SAVED = 1000;

export class SavedWorkspaces {
  constructor(
    private readonly records: JsonRecords,
    private readonly settings: Settings,
  ) {}

  async list(): Promise<Saved> {
    const saved = (await this.records.get<Saved>(SETTINGS_KIND, 'workspaces')) ?? { workspaces: [], workspaceParents: [] };
    // a null parentPath is left out, as OpenHands answers it
    return { workspaces: saved.workspaces.map(({ parentPath, ...w }) => (parentPath ? { ...w, parentPath } : w)), workspaceParents: saved.workspaceParents };
  }

  private update(fn: (s: Saved) => Saved | null): Promise<Saved> {
    return this.settings.serialize(async () => {
      const next = fn(await this.list());
      if (next) await this.records.put(SETTINGS_KIND, 'workspaces', next);
      return this.list();
    });
  }

  add(items: WorkspaceItem[]) {
    return this.update((s) => ({ ...s, workspaces: appendNew(s.workspaces, items) }));
  }

  addParents(items: WorkspaceParentItem[]) {
    return this.update((s) => ({ ...s, workspaceParents: appendNew(s.workspaceParents, items) }));
  }

  async remove(path: string) {
    let removed = false;
    await this.update((s) => {
      const rest = s.workspaces.filter((w) => w.path !== path);
      removed = rest.length < s.workspaces.length;
      return removed ? { ...s, workspaces: rest } : null;
    });
    if (!removed) throw new NotFoundError('Workspace not found');
    return { deleted: true };
  }

  async removeParent(path: string) {
    let removed = false;
    await this.update((s) => {
      const rest = s.workspaceParents.filter((w) => w.path !== path);
      removed = rest.length < s.workspaceParents.length;
      return removed ? { ...s, workspaceParents: rest } : null;
    });
    if (!removed) throw new NotFoundError('Workspace parent not found');
    return { deleted: true };
  }
}

/** The list with the items whose path it does not have yet (the first of a path in the request wins), bounded. */
function appendNew<T extends { path: string }>(list: T[], items: T[]): T[] {
  const seen = new Set(list.map((w) => w.path));
  const out = [...list];
  for (const w of items) {
    if (seen.has(w.path) || out.length >= MAX_SAVED) continue;
    seen.add(w.path);
    out.push(w);
  }
  return out;
}
