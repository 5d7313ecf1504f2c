/**
 * Installed skills (OpenHands' `/api/skills/installed`): AgentSkills (a SKILL.md) installed by name, each
 * enabled or not. OpenHands copies them under `~/.openhands/skills/installed/`; Parley keeps each one's
 * SKILL.md text in the store (shared by a cluster's nodes), with where it came from so it can be refreshed.
 * They are the user-level skills of `POST /api/skills` (the enabled ones).
 */
import { NotFoundError } from '../errors.js';
import type { JsonRecords } from './records.js';

const KIND = 'skill';
/** OpenHands' skill names: lowercase words joined by hyphens. */
export const SKILL_NAME = /^[a-z0-9]+(-[a-z0-9]+)*$/;
/** The most of a SKILL.md kept. */
export const MAX_SKILL_BYTES = 256 * 1024;

export interface InstalledSkill {
  name: string;
  version: string;
  description: string;
  enabled: boolean;
  /** Where it was installed from, as the client named it. */
  source: string;
  resolved_ref: string | null;
  repo_path: string | null;
  installed_at: string;
  install_path: string;
}

interface Stored extends InstalledSkill {
  /** The SKILL.md text. */
  content: string;
  /** The conversation whose workspace the source was read in, and the directory as it sees it (to read it again on refresh). */
  conversation_id: string;
  dir: string;
}

export class InstalledSkills {
  constructor(private readonly records: JsonRecords) {}

  private static show({ content: _content, conversation_id: _c, dir: _d, ...info }: Stored): InstalledSkill {
    return info;
  }

  async list() {
    return { skills: (await this.records.list<Stored>(KIND)).map((r) => InstalledSkills.show(r.doc)).sort((a, b) => a.name.localeCompare(b.name)) };
  }

  async stored(name: string): Promise<Stored> {
    const s = await this.records.get<Stored>(KIND, name);
    if (!s) throw new NotFoundError(`Skill '${name}' is not installed`);
    return s;
  }

  async get(name: string) {
    return InstalledSkills.show(await this.stored(name));
  }

  exists(name: string): Promise<boolean> {
    return this.records.get(KIND, name).then((s) => s !== null);
  }

  async put(s: Stored) {
    await this.records.put(KIND, s.name, s);
    return InstalledSkills.show(s);
  }

  /** The enabled skills' SKILL.md texts (the user-level skills). */
  async enabled(): Promise<{ name: string; source: string; content: string }[]> {
    return (await this.records.list<Stored>(KIND))
      .filter((r) => r.doc.enabled)
      .map((r) => ({ name: r.name, source: r.doc.install_path, content: r.doc.content }));
  }

  async setEnabled(name: string, enabled: boolean) {
    const s = await this.stored(name);
    await this.records.put(KIND, name, { ...s, enabled });
    return { name, enabled };
  }

  async uninstall(name: string) {
    if (!(await this.records.delete(KIND, name))) throw new NotFoundError(`Skill '${name}' is not installed`);
    return { message: `Skill '${name}' uninstalled` };
  }
}
