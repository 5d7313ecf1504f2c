/**
 * Skills, hooks and sub-agents as OpenHands' agent server answers them (`POST /api/skills`,
 * `/api/hooks`, `/api/sub-agents`, `/api/skills/install`, `…/refresh`), from what Parley has:
 *
 * - project skills, hooks and agents: read from the project directory (`project_dir`, as the client
 *   names it: found in a conversation's workspace like every side-channel path, read through its file
 *   service inside its sandbox: workspace-browser.ts);
 * - user-level skills: the enabled installed skills (settings/installed-skills.ts);
 * - public, marketplace and organization skills need the internet (a git clone of OpenHands' extensions
 *   or of an organization's repository), which Parley does not reach: none, counted 0 in `sources`.
 *
 * A skill is installed from a path (a directory holding a SKILL.md) in a conversation's workspace; a URL
 * or `github:` source is a 501 saying why. Later sources win on a name: user < project.
 */
import { posix } from 'node:path';
import { ConflictError, NotImplementedError, RequestValidationError } from '../errors.js';
import { FileOpError } from '../sandbox/files.js';
import { MAX_SKILL_BYTES, SKILL_NAME, type InstalledSkills } from '../settings/installed-skills.js';
import { parseFrontMatter } from '../workspace/front-matter.js';
import { loadProjectHooks } from '../workspace/hooks.js';
import { loadProjectSkills, parseSkill, type SkillInfo } from '../workspace/skills.js';
import { loadProjectAgents } from '../workspace/sub-agents.js';
import type { WorkspaceBrowser } from './workspace-browser.js';
import { isoTime } from '../iso-time.js';

/** A source that is fetched over the network (OpenHands' git URLs and GitHub shorthands). */
const REMOTE_SOURCE = /^(https?:|git@|ssh:|git:|github:|gitlab:)/i;

export const NO_INTERNET = 'Parley does not reach the internet';

export class ProjectExtensions {
  constructor(
    private readonly browser: WorkspaceBrowser,
    private readonly installed: InstalledSkills,
  ) {}

  async skills(req: { load_user: boolean; load_project: boolean; project_dir?: string | null; conversation_id?: string | null }) {
    const sources: Record<string, number> = { sandbox: 0, registered_marketplaces: 0, sdk_base: 0, org: 0, project: 0 };
    const byName = new Map<string, SkillInfo>();
    if (req.load_user) {
      const user = (await this.installed.enabled()).map((s) => parseSkill(s.content, { name: s.name, source: s.source, agentskills: true }));
      sources.sdk_base = user.length;
      for (const s of user) byName.set(s.name, s);
    }
    if (req.load_project) {
      const at = await this.browser.project(req.project_dir, req.conversation_id);
      if (at) {
        const { skills } = await loadProjectSkills(at.files, at.dir);
        sources.project = skills.length;
        for (const s of skills) {
          byName.delete(s.name);
          byName.set(s.name, s);
        }
      }
    }
    return { skills: [...byName.values()], sources };
  }

  async hooks(req: { project_dir?: string | null; conversation_id?: string | null }) {
    const at = await this.browser.project(req.project_dir, req.conversation_id);
    if (!at) return { hook_config: null };
    return { hook_config: (await loadProjectHooks(at.files, at.dir)).config };
  }

  async subAgents(req: { load_project: boolean; project_dir?: string | null; conversation_id?: string | null }) {
    if (!req.load_project) return { agents: [] };
    const at = await this.browser.project(req.project_dir, req.conversation_id);
    if (!at) return { agents: [] };
    return { agents: (await loadProjectAgents(at.files, at.dir)).agents };
  }

  /** Installs the SKILL.md of a directory in a conversation's workspace; a URL source is a 501. */
  async install(req: { source: string; ref?: string | null; repo_path?: string | null; force: boolean; conversation_id?: string | null }) {
    if (REMOTE_SOURCE.test(req.source))
      throw new NotImplementedError(
        `Installing a skill from ${req.source.split(':')[0]} needs the internet: ${NO_INTERNET}. Install it from a directory in a conversation's workspace.`,
      );
    const dir = req.repo_path ? posix.join(req.source, req.repo_path) : req.source;
    const read = await this.readSkill(dir, req.conversation_id);
    if (!read.ok) throw new RequestValidationError([{ type: 'value_error', loc: ['body', 'source'], msg: `Value error, ${read.why}`, input: req.source }]);
    const { name, description, version, content, conversationId, visibleDir } = read;
    if (!req.force && (await this.installed.exists(name))) throw new ConflictError('Skill already installed. Use force=true to overwrite.');
    return this.installed.put({
      name,
      version,
      description,
      enabled: true,
      source: req.source,
      resolved_ref: null,
      repo_path: req.repo_path ?? null,
      installed_at: isoTime(),
      install_path: posix.join(dir, 'SKILL.md'),
      content,
      conversation_id: conversationId,
      dir: visibleDir,
    });
  }

  /** Reads the skill again from where it was installed from. */
  async refresh(name: string) {
    const s = await this.installed.stored(name);
    const read = await this.readSkill(s.dir, s.conversation_id).catch((err: unknown) => ({ ok: false as const, why: String((err as Error).message) }));
    if (!read.ok) throw new ConflictError(`Skill '${name}' could not be read again from ${s.source}: ${read.why}`);
    const skill = await this.installed.put({ ...s, description: read.description, version: read.version, content: read.content });
    return { message: `Skill '${name}' refreshed`, skill };
  }

  private async readSkill(dir: string, conversationId: string | null | undefined) {
    if (!posix.isAbsolute(dir)) return { ok: false as const, why: 'a skill source is an absolute path of a directory holding SKILL.md' };
    const at = await this.browser.locate(conversationId, dir);
    let head: { data: Buffer; size: number };
    try {
      head = await at.files.head(posix.join(at.dir, 'SKILL.md'), MAX_SKILL_BYTES + 1);
    } catch (err) {
      if (err instanceof FileOpError && (err.code === 'ENOENT' || err.code === 'ENOTDIR' || err.code === 'NOT_REGULAR'))
        return { ok: false as const, why: `Invalid skill: ${dir} holds no SKILL.md` };
      if (err instanceof FileOpError && err.code === 'OUTSIDE') return { ok: false as const, why: `${dir} leads out of the workspace` };
      throw err;
    }
    if (head.size > MAX_SKILL_BYTES) return { ok: false as const, why: `SKILL.md is larger than ${MAX_SKILL_BYTES} bytes` };
    const content = head.data.toString('utf8');
    const info = parseSkill(content, { name: posix.basename(at.dir), source: null, agentskills: true });
    if (!SKILL_NAME.test(info.name) || info.name.length > 255)
      return { ok: false as const, why: `Invalid skill name '${info.name}': lowercase letters and digits, words joined by hyphens` };
    const v = parseFrontMatter(content).data?.version;
    const version = typeof v === 'string' ? v.trim() : '';
    return { ok: true as const, name: info.name, description: info.description ?? '', version, content, conversationId: at.conversationId, visibleDir: at.dir };
  }
}
