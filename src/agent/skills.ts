/**
 * The skills a conversation's agent is given, as OpenHands' agent server gives them (besides the
 * repository's instructions, src/agent/instructions.ts): the project's skill folders
 * (`.agents/skills`, `.openhands/skills`, read as src/workspace/skills.ts reads them) and the user's
 * installed, enabled skills (`/api/skills/installed`).
 *
 * - a project AgentSkills skill (`<folder>/<name>/SKILL.md`) is listed by name, description and path:
 *   the agent reads the file when the task calls for it (its body is not put in every prompt);
 * - a skill with `triggers` is knowledge: its text is given once a user message says a trigger;
 * - any other project skill file is always on;
 * - an installed skill lives in the store, not in the workspace: its text is given (cut at
 *   INSTALLED_SKILL_CHARS) so the agent has it where it cannot read a file.
 *
 * They are read at a run's first step, with the instructions; the folders are looked for with one
 * `stat` each, and read only when they exist.
 */
import { posix } from 'node:path';
import type { WorkspaceFiles } from '../sandbox/files.js';
import type { TriggeredInstruction } from '../workspace/instructions.js';
import { loadProjectSkills, parseSkill, type SkillInfo } from '../workspace/skills.js';

/** The skill folders read here (the legacy `.openhands/microagents` is the instructions'). */
const FOLDERS = ['.agents/skills', '.openhands/skills'];
const INSTALLED_SKILL_CHARS = 8 * 1024;
const MAX_INSTALLED = 20;

/** An installed skill as the settings keep it (its SKILL.md text). */
export interface UserSkill {
  name: string;
  source: string;
  content: string;
}

export interface SkillTexts {
  /** Texts of the system prompt every step. */
  always: string[];
  /** Knowledge given when a user message says a trigger. */
  triggered: TriggeredInstruction[];
  /** Every skill given (OpenHands' SkillInfo), for the info's `agent.agent_context.skills`. */
  skills: SkillInfo[];
}

/** The project's skills in the workspace (`files.root` as the conversation sees it; null: it has none yet) and the user's installed ones. */
export async function loadSkills(files: WorkspaceFiles | null, user: UserSkill[]): Promise<SkillTexts> {
  const installed = user.slice(0, MAX_INSTALLED).map((s) => parseSkill(s.content, { name: s.name, source: s.source, agentskills: true }));
  const project = files && (await hasSkillFolder(files)) ? (await loadProjectSkills(files, files.root)).skills.filter(inFolder(files.root)) : [];
  // a project skill of the same name as an installed one wins (OpenHands: user < project)
  const names = new Set(project.map((s) => s.name));
  const skills = [...installed.filter((s) => !names.has(s.name)), ...project];
  const always: string[] = [];
  const listed: SkillInfo[] = [];
  const triggered: TriggeredInstruction[] = [];
  for (const s of skills) {
    const fromProject = project.includes(s);
    if (s.triggers.length) triggered.push({ name: s.name, source: s.source ?? s.name, triggers: s.triggers, content: s.content });
    else if (fromProject && s.is_agentskills_format) listed.push(s);
    else
      always.push(
        `Skill ${s.name}${s.description ? ` (${s.description})` : ''}:\n${cut(s.content, fromProject ? Number.POSITIVE_INFINITY : INSTALLED_SKILL_CHARS)}`,
      );
  }
  if (listed.length) {
    const lines = listed.map((s) => `- ${s.name}: ${s.description ?? '(no description)'} (read ${s.source})`);
    always.unshift(`Skills of this project: read a skill's SKILL.md with file_editor when the task calls for it.\n${lines.join('\n')}`);
  }
  return { always, triggered, skills };
}

async function hasSkillFolder(files: WorkspaceFiles): Promise<boolean> {
  const found = await Promise.all(FOLDERS.map((f) => files.stat(posix.join(files.root, f)).catch(() => null)));
  return found.some((st) => st?.type === 'dir');
}

const inFolder = (root: string) => (s: SkillInfo) => FOLDERS.some((f) => s.source?.startsWith(`${posix.join(root, f)}/`));

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}\n[…the rest of this skill (${text.length - max} characters) is left out]`;
}
