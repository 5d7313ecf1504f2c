export { createWorkspace, removeWorkspace } from '../sandbox/workspace-dir.js';
export {
  cloneRepository,
  CloneError,
  type CloneOptions,
} from './git.js';
export { askpassEnv, gitCredentialEnv, askpassHostMap } from './askpass.js';
export {
  providerBaseUrl,
  type ProviderCredential,
} from './providers.js';
export {
  loadRepoInstructions,
  selectTriggered,
} from './instructions.js';
export { parseFrontMatter } from './front-matter.js';
export { runSetupScript } from './setup-script.js';
export {
  suggestedTaskMessage,
  validateSuggestedTask,
  createMicroagentMessage,
  SuggestedTaskError,
} from './tasks.js';
