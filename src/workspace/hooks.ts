/**
 * A project's hook configuration, read as OpenHands' agent server reads it: `<project>/.openhands/hooks.json`,
 * in its own form (`{"pre_tool_use": [{"matcher": "terminal", "hooks": [{"command": "…"}]}]}`) or the
 * Claude Code form (`{"hooks": {"PreToolUse": […]}}`: PascalCase event names, a `hooks` wrapper). The
 * answer is the normalised configuration, or null when there is none, it is empty, or it is not a valid
 * one (OpenHands answers null then too; `problem` says why, for the log). Read through the
 * conversation's file service (inside its sandbox), at most 256 KiB.
 *
 * Parley reads the configuration; it does not run hooks (a conversation's `hook_config` is accepted and
 * not used): the answer tells a client what the project declares.
 */
import { posix } from 'node:path';
import * as z from 'zod';
import { FileOpError, type WorkspaceFiles } from '../sandbox/files.js';

const MAX_BYTES = 256 * 1024;
const EVENTS = ['pre_tool_use', 'post_tool_use', 'user_prompt_submit', 'session_start', 'session_end', 'stop'] as const;

const HookDefinition = z
  .object({
    type: z.enum(['command', 'prompt', 'agent']).default('command'),
    name: z.string().nullish(),
    command: z.string().default(''),
    prompt: z.string().nullish(),
    system_prompt: z.string().nullish(),
    tools: z.array(z.string()).default([]),
    timeout: z.number().int().positive().default(60),
    max_iterations: z.number().int().positive().default(3),
    async: z.boolean().default(false),
  })
  .refine((h) => h.type !== 'command' || h.command !== '', { message: "'command' is required when type is 'command'" })
  .refine((h) => h.type !== 'prompt' || !!h.prompt, { message: "'prompt' is required when type is 'prompt'" });
const HookMatcher = z.object({ matcher: z.string().default('*'), hooks: z.array(HookDefinition).default([]) });
const HookConfig = z.strictObject(
  Object.fromEntries(EVENTS.map((e) => [e, z.array(HookMatcher).default([])])) as Record<(typeof EVENTS)[number], z.ZodDefault<z.ZodArray<typeof HookMatcher>>>,
);
export type HookConfig = z.output<typeof HookConfig>;

/** `PreToolUse` → `pre_tool_use`. */
const snake = (k: string) => k.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();

/** The configuration from a hooks.json text: null and the reason when it is not one. */
function parseHookConfig(text: string): { config: HookConfig | null; problem?: string } {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    return { config: null, problem: `not JSON: ${(err as Error).message}` };
  }
  if (data && typeof data === 'object' && !Array.isArray(data) && 'hooks' in data) data = (data as { hooks: unknown }).hooks;
  if (!data || typeof data !== 'object' || Array.isArray(data)) return { config: null, problem: 'not an object of hook events' };
  const normalised: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(data)) {
    const key = snake(k);
    if (key in normalised) return { config: null, problem: `the event ${key} is given twice` };
    normalised[key] = v;
  }
  const parsed = HookConfig.safeParse(normalised);
  if (!parsed.success) return { config: null, problem: parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') };
  if (EVENTS.every((e) => parsed.data[e].length === 0)) return { config: null, problem: 'no hooks' };
  return { config: parsed.data };
}

/** `<projectDir>/.openhands/hooks.json` through the file service (projectDir as the conversation sees it). */
export async function loadProjectHooks(files: WorkspaceFiles, projectDir: string): Promise<{ config: HookConfig | null; problem?: string }> {
  const p = posix.join(projectDir, '.openhands', 'hooks.json');
  try {
    const head = await files.head(p, MAX_BYTES + 1);
    if (head.size > MAX_BYTES) return { config: null, problem: `${p} is larger than ${MAX_BYTES} bytes` };
    return parseHookConfig(head.data.toString('utf8'));
  } catch (err) {
    if (err instanceof FileOpError && (err.code === 'ENOENT' || err.code === 'ENOTDIR' || err.code === 'NOT_REGULAR')) return { config: null };
    if (err instanceof FileOpError && err.code === 'OUTSIDE') return { config: null, problem: `${p} links outside the workspace` };
    throw err;
  }
}
