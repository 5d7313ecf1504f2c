/**
 * The instructions of a conversation's system prompt: the conversation's own, the repository it
 * works on, the repository's instructions and the skills (the project's and the user's installed
 * ones, skills.ts), read at a run's first step and kept on the conversation (`conv.instructions`),
 * and the knowledge its user's messages trigger.
 */
import fs from 'node:fs';
import { workspacePath } from '../sandbox/workspace-dir.js';
import { loadRepoInstructions, selectTriggered, type RepoInstructions } from '../workspace/instructions.js';
import type { AgentRecordData, LoadedConversation } from './conversation-data.js';
import type { ConversationSandbox } from './conversation-sandbox.js';
import { loadSkills, type UserSkill } from './skills.js';

/** The repository's instructions as read at a run's first step, and what the user's messages triggered. */
export interface InstructionsCache {
  /** The repository's instructions with the skills (their always-on texts after the instructions', their knowledge among the triggered). */
  loaded: RepoInstructions | null;
  /** The skills' always-on texts. */
  skills: string[];
  /** The number of user messages `texts` was selected for. */
  users: number;
  texts: string[];
}

/** A conversation as its instructions are read. */
interface Instructed extends LoadedConversation {
  instructions: InstructionsCache | null;
  readonly sandbox: Pick<ConversationSandbox, 'files'>;
}

export class Instructions {
  constructor(
    /** Reads a large field of the record from the store (the conversation's instructions). */
    private readonly field: <K extends keyof AgentRecordData>(conv: LoadedConversation, key: K) => Promise<AgentRecordData[K]>,
    private readonly workspaceRoot: string,
    /** The user's installed, enabled skills. */
    private readonly userSkills: () => Promise<UserSkill[]> = async () => [],
  ) {}

  /** The instructions for `userTexts` (the user's messages so far); `reload`: read the repository's again (a run's first step). */
  async of(conv: Instructed, userTexts: string[], reload: boolean): Promise<string[]> {
    const out: string[] = [];
    // large instructions are not kept in memory (Conversations.field reads them from the store)
    const ci = await this.field(conv, 'conversation_instructions');
    if (ci) out.push(`Instructions for this conversation:\n${ci}`);
    const { selected_repository: repo, branch, selected_branch } = conv.record.data;
    if (repo) out.push(`The repository ${repo} is checked out in the working directory (branch ${branch ?? selected_branch ?? 'default'}).`);
    // the repository's files are read at a run's first step, not at every step
    let cached = conv.instructions;
    if (!cached || reload) {
      // (no workspace yet: nothing to read, and no sandbox started for it)
      const hasWorkspace = fs.existsSync(workspacePath(this.workspaceRoot, conv.record.id));
      // the repository's instructions and the skills at once: their requests to the file service travel together
      const [loaded, skills] = await Promise.all([
        hasWorkspace ? loadRepoInstructions(conv.sandbox.files()).catch(() => null) : null,
        this.userSkills()
          .catch(() => [])
          .then((user) => (hasWorkspace || user.length ? loadSkills(hasWorkspace ? conv.sandbox.files() : null, user).catch(() => null) : null)),
      ]);
      const merged = loaded || skills ? { always: [], warnings: [], ...loaded, triggered: [...(loaded?.triggered ?? []), ...(skills?.triggered ?? [])] } : null;
      conv.instructions = cached = { loaded: merged, skills: skills?.always ?? [], users: -1, texts: [] };
    }
    if (!cached.loaded) return out;
    if (cached.users !== userTexts.length) {
      const always = [...cached.loaded.always.map((a) => `Repository instructions (${a.source}):\n${a.content}`), ...cached.skills];
      const triggered = selectTriggered(cached.loaded.triggered, userTexts.join('\n')).map((t) => `Knowledge (${t.source}):\n${t.content}`);
      cached.texts = [...always, ...triggered];
      cached.users = userTexts.length;
    }
    return [...out, ...cached.texts];
  }
}
