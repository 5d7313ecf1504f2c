/**
 * Project skills, read from a workspace as OpenHands' agent server reads them (its `load_project_skills`):
 *
 * - third-party instruction files at the project directory and, when that is inside a git repository of
 *   the workspace, at the repository's root: `AGENTS.md` / `AGENT.md` (name `agents`), `CLAUDE.md`
 *   (`claude`), `GEMINI.md` (`gemini`), `.cursorrules` (`cursorrules`), any case; always on (`repo`);
 * - the skill folders `.agents/skills`, `.openhands/skills` and the legacy `.openhands/microagents`, in that
 *   order (the first of a name wins): `<folder>/<name>/SKILL.md` (the AgentSkills format, type
 *   `agentskills`) and any other `.md` (README.md excepted), named by its front matter's `name` or its path
 *   in the folder, `knowledge` when it has `triggers` (a task, with `inputs`, also gets `/<name>`), else
 *   `repo`.
 *
 * Everything is read through the conversation's file service (inside its sandbox): a link can only lead to
 * what the sandbox sees, and one that leads out of the workspace is skipped. Files are cut at 64 KiB,
 * binary ones skipped, at most 500 files looked at; what is skipped is said in `warnings`.
 */
import { posix } from 'node:path';
import { FileOpError, type WorkspaceFiles } from '../sandbox/files.js';
import { parseFrontMatter, type FrontMatterValue } from './front-matter.js';

/** OpenHands' SkillInfo. */
export interface SkillInfo {
  name: string;
  type: 'repo' | 'knowledge' | 'agentskills';
  content: string;
  triggers: string[];
  source: string | null;
  description: string | null;
  is_agentskills_format: boolean;
  disable_model_invocation: boolean;
}

const THIRD_PARTY: Record<string, string> = {
  'agents.md': 'agents',
  'agent.md': 'agents',
  'claude.md': 'claude',
  'gemini.md': 'gemini',
  '.cursorrules': 'cursorrules',
};
const SKILL_FOLDERS = ['.agents/skills', '.openhands/skills', '.openhands/microagents'];
const MAX_BYTES = 64 * 1024;
const MAX_FILES = 500;
const MAX_DEPTH = 6;

const list = (v: FrontMatterValue | undefined): string[] => (v == null ? [] : (Array.isArray(v) ? v : v.split(',')).map((s) => s.trim()).filter(Boolean));
const str = (v: FrontMatterValue | undefined): string | null => (typeof v === 'string' && v.trim() ? v.trim() : null);

/**
 * One skill file's text → its SkillInfo. `agentskills`: a SKILL.md (named by its folder unless its front
 * matter names it). Never throws: text without front matter is a `repo` skill of that text.
 */
export function parseSkill(text: string, opts: { name: string; source: string | null; agentskills: boolean }): SkillInfo {
  const fm = parseFrontMatter(text);
  const data = fm.data ?? {};
  const name = str(data.name) ?? opts.name;
  const triggers = list(data.triggers);
  const type = str(data.type)?.toLowerCase();
  if (!opts.agentskills && (type === 'task' || (data.inputs != null && type !== 'repo' && type !== 'knowledge'))) triggers.push(`/${name}`);
  return {
    name,
    type: opts.agentskills ? 'agentskills' : triggers.length && type !== 'repo' ? 'knowledge' : 'repo',
    content: (fm.data ? fm.body : text).trim(),
    triggers: [...new Set(triggers)],
    source: opts.source,
    description: str(data.description),
    is_agentskills_format: opts.agentskills,
    disable_model_invocation: str(data['disable-model-invocation'] ?? data.disable_model_invocation) === 'true',
  };
}

/** A text file of the workspace through its file service, or why not (null reason: it simply is not there). */
async function readText(files: WorkspaceFiles, p: string): Promise<{ text: string } | { skip: string | null }> {
  try {
    const head = await files.head(p, MAX_BYTES);
    if (head.data.includes(0)) return { skip: `${p}: skipped (binary)` };
    return { text: head.data.toString('utf8') };
  } catch (err) {
    if (err instanceof FileOpError && (err.code === 'ENOENT' || err.code === 'ENOTDIR' || err.code === 'NOT_REGULAR')) return { skip: null };
    if (err instanceof FileOpError && err.code === 'OUTSIDE') return { skip: `${p}: skipped (links outside the workspace)` };
    return { skip: `${p}: could not be read` };
  }
}

async function listDir(files: WorkspaceFiles, dir: string, depth: number) {
  try {
    const st = await files.stat(dir);
    if (st?.type !== 'dir') return [];
    return (await files.list(dir, { depth, hidden: true, max: MAX_FILES * 4 })).entries;
  } catch {
    return [];
  }
}

/** The roots a project's skills are looked for in: the project directory, then its git repository's root inside the workspace. */
async function searchRoots(files: WorkspaceFiles, projectDir: string): Promise<string[]> {
  const roots = [projectDir];
  for (let d = projectDir; d.startsWith(files.root); d = posix.dirname(d)) {
    if ((await files.stat(posix.join(d, '.git')).catch(() => null)) !== null) {
      if (d !== projectDir) roots.push(d);
      break;
    }
    if (d === files.root || d === '/') break;
  }
  return roots;
}

/** The project's skills (see the file comment); `projectDir` as the conversation sees it. */
export async function loadProjectSkills(files: WorkspaceFiles, projectDir: string): Promise<{ skills: SkillInfo[]; warnings: string[] }> {
  const skills: SkillInfo[] = [];
  const warnings: string[] = [];
  const seen = new Set<string>();
  const add = (s: SkillInfo) => {
    if (seen.has(s.name) || !s.content) return;
    seen.add(s.name);
    skills.push(s);
  };
  let budget = MAX_FILES;
  const read = async (p: string) => {
    if (budget-- <= 0) return null;
    const r = await readText(files, p);
    if ('skip' in r) {
      if (r.skip) warnings.push(r.skip);
      return null;
    }
    return r.text;
  };
  const roots = await searchRoots(files, projectDir);
  for (const root of roots) {
    for (const e of await listDir(files, root, 1)) {
      const name = THIRD_PARTY[posix.basename(e.path).toLowerCase()];
      if (!name || e.dir) continue;
      const text = await read(e.path);
      if (text !== null) add({ ...parseSkill(text, { name, source: e.path, agentskills: false }), name, type: 'repo', triggers: [] });
    }
  }
  for (const root of roots) {
    for (const folder of SKILL_FOLDERS) {
      const dir = posix.join(root, folder);
      const entries = await listDir(files, dir, MAX_DEPTH);
      const skillMd = entries.filter((e) => !e.dir && posix.basename(e.path) === 'SKILL.md' && posix.dirname(posix.dirname(e.path)) === dir);
      const skillDirs = new Set(skillMd.map((e) => posix.dirname(e.path)));
      for (const e of skillMd) {
        const text = await read(e.path);
        if (text !== null) add(parseSkill(text, { name: posix.basename(posix.dirname(e.path)), source: e.path, agentskills: true }));
      }
      for (const e of entries) {
        if (e.dir || !/\.md$/i.test(e.path) || /^readme\.md$/i.test(posix.basename(e.path))) continue;
        if ([...skillDirs].some((d) => e.path.startsWith(`${d}/`))) continue;
        const text = await read(e.path);
        if (text !== null) add(parseSkill(text, { name: posix.relative(dir, e.path).replace(/\.md$/i, ''), source: e.path, agentskills: false }));
      }
    }
  }
  if (budget < 0) warnings.push(`more than ${MAX_FILES} skill files: the rest were not read`);
  return { skills, warnings };
}
