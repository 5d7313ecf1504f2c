export { createWorkspace, removeWorkspace, workspacePath, conversationIdHex, InvalidConversationIdError } from '../sandbox/workspace-dir.js';
export {
  cloneRepository,
  CloneError,
  normalizeRepository,
  validateBranchName,
  DEFAULT_GIT_IDENTITY,
  type CloneOptions,
  type CloneResult,
  type ClonePhase,
  type CloneErrorCode,
  type CloneAttempt,
} from './git.js';
export { askpassEnv, gitCredentialEnv, ensureAskpassScript, askpassHostMap, ASKPASS_SCRIPT_NAME } from './askpass.js';
export {
  GIT_PROVIDERS,
  DEFAULT_HOSTS,
  TOKEN_ENV_VARS,
  TOKEN_USERNAMES,
  providerBaseUrl,
  InvalidHostError,
  type GitProvider,
  type ProviderCredential,
} from './providers.js';
export {
  loadRepoInstructions,
  selectTriggered,
  DEFAULT_MAX_INSTRUCTION_BYTES,
  type RepoInstructions,
  type AlwaysInstruction,
  type TriggeredInstruction,
} from './instructions.js';
export { parseFrontMatter } from './front-matter.js';
export { runSetupScript, SETUP_SCRIPT_PATH, DEFAULT_SETUP_TIMEOUT_MS, type SetupScriptOptions, type SetupScriptResult } from './setup-script.js';
export {
  suggestedTaskMessage,
  validateSuggestedTask,
  createMicroagentMessage,
  SuggestedTaskError,
  TASK_TYPES,
  type SuggestedTask,
  type TaskType,
} from './tasks.js';
