/**
 * A project's file-based sub-agents, read as OpenHands reads them (its `load_project_agents`): the
 * top-level `.md` files (README.md excepted) of `.agents/agents` and then `.openhands/agents` in the
 * project directory, the first of a name winning. Each file's front matter gives the agent's `name`
 * (else the file's name), `description`, `model` (`inherit` by default), `color`, `tools`, `skills`,
 * `when_to_use_examples`, `permission_mode`; its body is the agent's system prompt. Read through the
 * conversation's file service, like the skills (skills.ts).
 */
import { posix } from 'node:path';
import { FileOpError, type WorkspaceFiles } from '../sandbox/files.js';
import { parseFrontMatter, type FrontMatterValue } from './front-matter.js';

const AGENT_FOLDERS = ['.agents/agents', '.openhands/agents'];
const MAX_BYTES = 64 * 1024;
const MAX_FILES = 200;

/** OpenHands' SubAgentInfo (the fields a file can give). */
export interface SubAgentInfo {
  name: string;
  description: string;
  model: string;
  color: string | null;
  tools: string[];
  skills: string[];
  system_prompt: string;
  when_to_use_examples: string[];
  permission_mode: string | null;
  metadata: Record<string, unknown>;
  level: 'project';
  source: string;
  is_builtin: false;
}

const KNOWN = new Set(['name', 'description', 'model', 'color', 'tools', 'skills', 'when_to_use_examples', 'permission_mode']);
const list = (v: FrontMatterValue | undefined): string[] => (v == null ? [] : (Array.isArray(v) ? v : v.split(',')).map((s) => s.trim()).filter(Boolean));
const str = (v: FrontMatterValue | undefined): string | null => (typeof v === 'string' && v.trim() ? v.trim() : null);

export async function loadProjectAgents(files: WorkspaceFiles, projectDir: string): Promise<{ agents: SubAgentInfo[]; warnings: string[] }> {
  const agents: SubAgentInfo[] = [];
  const warnings: string[] = [];
  const seen = new Set<string>();
  let budget = MAX_FILES;
  for (const folder of AGENT_FOLDERS) {
    const dir = posix.join(projectDir, folder);
    let entries: { path: string; dir: boolean }[] = [];
    try {
      if ((await files.stat(dir))?.type === 'dir') entries = (await files.list(dir, { depth: 1, hidden: false, max: MAX_FILES * 2 })).entries;
    } catch {
      continue;
    }
    for (const e of entries.sort((a, b) => (a.path < b.path ? -1 : 1))) {
      if (e.dir || !/\.md$/i.test(e.path) || /^readme\.md$/i.test(posix.basename(e.path))) continue;
      if (budget-- <= 0) break;
      let text: string;
      try {
        const head = await files.head(e.path, MAX_BYTES);
        if (head.data.includes(0)) continue;
        text = head.data.toString('utf8');
      } catch (err) {
        if (err instanceof FileOpError && err.code === 'OUTSIDE') warnings.push(`${e.path}: skipped (links outside the workspace)`);
        continue;
      }
      const fm = parseFrontMatter(text);
      if (fm.error) warnings.push(`${e.path}: ${fm.error}`);
      const d = fm.data ?? {};
      const name = str(d.name) ?? posix.basename(e.path).replace(/\.md$/i, '');
      if (seen.has(name)) continue;
      seen.add(name);
      agents.push({
        name,
        description: str(d.description) ?? '',
        model: str(d.model) ?? 'inherit',
        color: str(d.color),
        tools: list(d.tools),
        skills: list(d.skills),
        system_prompt: (fm.data ? fm.body : text).trim(),
        when_to_use_examples: list(d.when_to_use_examples),
        permission_mode: str(d.permission_mode),
        metadata: Object.fromEntries(Object.entries(d).filter(([k]) => !KNOWN.has(k))),
        level: 'project',
        source: e.path,
        is_builtin: false,
      });
    }
  }
  return { agents, warnings };
}
