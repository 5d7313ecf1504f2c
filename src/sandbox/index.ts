export {
  Sandbox,
  SandboxUnavailableError,
  DEFAULT_SANDBOX_SETTINGS,
  VISIBLE_WORKSPACE,
  type SandboxSettings,
  type SandboxModeSetting,
  type SandboxSpawnOptions,
  type SandboxInfo,
  type MappedDir,
  type SandboxDir,
} from './launcher.js';
export { PathView, PathOutsideError, type ResolvedPath } from './path-view.js';
export type { ProcessLauncher } from './types.js';
