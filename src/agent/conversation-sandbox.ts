/**
 * What a live conversation uses of its sandbox (`conv.sandbox`): today the host-wide `Sandbox`'s
 * methods bound to the conversation's id, behind this small interface so that a per-conversation
 * sandbox handle takes their place without the code that uses it changing.
 */
import type { Sandbox } from '../sandbox/index.js';
import type { WorkspaceFiles } from '../sandbox/files.js';
import type { ProcessLauncher } from '../sandbox/types.js';

export interface ConversationSandbox {
  /** Resolves once processes can be started and files reached (the sandbox's start-up probe). */
  readonly ready: Promise<void>;
  /** bwrap in force (false: plain processes). */
  readonly enabled: boolean;
  /** The conversation's files through its file service (`workspaceDir`: its workspace on the host). */
  files(workspaceDir?: string): WorkspaceFiles;
  /** Starts its processes (setup.sh, git, stdio MCP servers). */
  launcher(): ProcessLauncher;
  /** The workspace as its processes see it. */
  visibleWorkspace(hostWorkspaceDir: string): string;
  /** Starts its sandbox in the background when it has none (a run begins: it comes up while the LLM answers). */
  prewarm(): void;
  /** The same, only when one more sandbox fits under SANDBOX_MAX_LIVE without another's being closed (a client came back to it). */
  prewarmIfRoom(): void;
  /** Kills every process of it, background ones included. */
  close(): Promise<void>;
  /** Closes it and removes its /tmp and HOME from the host (the conversation is deleted). */
  remove(): Promise<void>;
}

/** The conversation's part of the host-wide sandbox launcher. */
export function sandboxOf(sandbox: Sandbox, id: string): ConversationSandbox {
  return {
    get ready() {
      return sandbox.ready;
    },
    get enabled() {
      return sandbox.enabled;
    },
    files: (workspaceDir) => sandbox.files(id, workspaceDir),
    launcher: () => sandbox.forConversation(id),
    visibleWorkspace: (dir) => sandbox.visibleWorkspace(dir),
    prewarm: () => sandbox.prewarm(id),
    prewarmIfRoom: () => sandbox.prewarm(id, { ifRoom: true }),
    close: () => sandbox.closeConversation(id),
    remove: () => sandbox.removeConversation(id),
  };
}
