/**
 * The tool catalog: the one list of the built-in tools, each with its name, its OpenHands tool kind,
 * and the zod schemas of its parameters, of the action its calls record (`ActionEvent.action`) and
 * of the observation it returns (`ObservationEvent.observation`); and the MCP tools' action and
 * observation. The event unions (schema.ts), the agent's built-ins, the tool names the API lists,
 * the agent-server info, the names MCP tools may not take and the 0.1.0 upgrade all derive from it.
 *
 * It sits with the event model, below the tools: the events describe what a tool call records,
 * and the tools (src/tools/, above) implement the executors against these schemas.
 */
import * as z from 'zod';
import { actionSchema, observationSchema } from './content.js';

// ---- terminal -------------------------------------------------------------------------------------

export const terminalParameters = z.object({
  command: z
    .string()
    .describe(
      'The bash command to run. Can be several lines; chain with && or ;. Send "" (empty) to wait for more output ' +
        'of the command that is still running. With is_input=true: text to type into the running program ' +
        '(a newline is added), or one special key: C-c (interrupt), C-d (end of input), C-z, ENTER, TAB, ESC, BS, ' +
        'UP, DOWN, LEFT, RIGHT, HOME, END, PGUP, PGDN, or C-<letter>.',
    ),
  is_input: z.boolean().default(false).describe('If true, `command` is sent as input to the command that is still running instead of being run.'),
  timeout: z
    .number()
    .min(0)
    .nullable()
    .optional()
    .describe(
      'Hard time limit in seconds: when it is reached the command is killed. Without it (or with 0), the call ' +
        'returns after a while without new output and the command keeps running.',
    ),
  reset: z
    .boolean()
    .default(false)
    .describe('If true, kill the shell (and everything it runs) and start a fresh one in the workspace before running `command`.'),
});

const TerminalAction = actionSchema('TerminalAction', terminalParameters);
export const TerminalObservation = observationSchema('TerminalObservation', {
  command: z.string(),
  /** -1 while the command is still running (it went quiet and keeps running); null when it never ran. */
  exit_code: z.number().int().nullable(),
  working_dir: z.string(),
  timeout: z.boolean(),
  full_output_path: z.string().optional(),
});
export type TerminalObservation = z.output<typeof TerminalObservation>;

// ---- file_editor ----------------------------------------------------------------------------------

export const FILE_EDITOR_COMMANDS = ['view', 'create', 'str_replace', 'insert', 'undo_edit'] as const;

/**
 * A flat object with a `command` enum rather than a discriminated union: it converts to a single
 * plain JSON object schema, which every LLM provider accepts for tool parameters (a top-level
 * `oneOf` is rejected by some). The per-command requirements are checked in `execute` and
 * reported as correctable errors.
 */
export const fileEditorParameters = z.object({
  command: z.enum(FILE_EDITOR_COMMANDS).describe('The operation: `view`, `create`, `str_replace`, `insert` or `undo_edit`.'),
  path: z.string().describe('Absolute path to the file or directory, e.g. `/workspace/src/app.py`.'),
  file_text: z.string().optional().describe('Required for `create`: the content of the new file.'),
  old_str: z
    .string()
    .optional()
    .describe('Required for `str_replace`: the exact text to replace. It must occur exactly once in the file, whitespace included.'),
  new_str: z.string().optional().describe('For `str_replace`: the replacement text (omit to delete `old_str`). Required for `insert`: the text to insert.'),
  insert_line: z.number().optional().describe('Required for `insert`: `new_str` is inserted AFTER this line number (0 inserts at the top of the file).'),
  view_range: z
    .array(z.number())
    .optional()
    .describe('Optional for `view` on a file: [start_line, end_line], 1-based and inclusive; end_line -1 means the end of the file.'),
});

const FileEditorAction = actionSchema('FileEditorAction', fileEditorParameters);
export const FileEditorObservation = observationSchema('FileEditorObservation', {
  command: z.string(),
  path: z.string(),
  /** Whether the file existed before a create or an edit. */
  prev_exist: z.boolean().optional(),
});
export type FileEditorObservation = z.output<typeof FileEditorObservation>;

// ---- task_tracker ---------------------------------------------------------------------------------

const TASK_STATUSES = ['todo', 'in_progress', 'done'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

const taskSchema = z.object({
  id: z.union([z.string(), z.number()]).describe('A short unique id for the task, e.g. "1" or "tests". Keep ids stable between updates.'),
  title: z.string().describe('What the task is, in a few words.'),
  status: z.enum(TASK_STATUSES).describe('`todo`, `in_progress` (at most one at a time) or `done`.'),
  notes: z.string().optional().describe('Optional details, findings or blockers.'),
});

export const taskTrackerParameters = z.object({
  command: z.enum(['view', 'plan']).describe('`view` shows the current task list; `plan` replaces it with `task_list`.'),
  task_list: z.array(taskSchema).optional().describe('Required for `plan`: the COMPLETE new task list (it replaces the old one), in order.'),
});

const TaskTrackerAction = actionSchema('TaskTrackerAction', taskTrackerParameters);
export const TaskTrackerObservation = observationSchema('TaskTrackerObservation', {
  command: z.string(),
  task_list: z.array(z.object({ id: z.string(), title: z.string(), status: z.enum(TASK_STATUSES), notes: z.string().optional() })),
});
export type TaskTrackerObservation = z.output<typeof TaskTrackerObservation>;

// ---- think ----------------------------------------------------------------------------------------

export const thinkParameters = z.object({
  thought: z.string().describe('Your thought: analysis, a plan, hypotheses about a bug, options to compare.'),
});

const ThinkAction = actionSchema('ThinkAction', thinkParameters);
export const ThinkObservation = observationSchema('ThinkObservation', {});
export type ThinkObservation = z.output<typeof ThinkObservation>;

// ---- finish ---------------------------------------------------------------------------------------

export const finishParameters = z.object({
  message: z.string().describe('The final message to the user: what was done, and anything they should know.'),
});

const FinishAction = actionSchema('FinishAction', finishParameters);
export const FinishObservation = observationSchema('FinishObservation', { message: z.string() });
export type FinishObservation = z.output<typeof FinishObservation>;

// ---- MCP tools ------------------------------------------------------------------------------------

/** A call of an MCP tool as `ActionEvent.action`: the arguments under `data` (OpenHands' MCPToolAction). */
export const MCPToolAction = z.object({ kind: z.literal('MCPToolAction'), data: z.record(z.string(), z.unknown()) }).meta({ id: 'MCPToolAction' });
/** The result of an MCP tool call. */
export const MCPObservation = observationSchema('MCPObservation', {
  /** The server's name (as in the MCP status). */
  server: z.string(),
  /** The tool's name on its server. */
  tool: z.string(),
});
export type MCPObservation = z.output<typeof MCPObservation>;

// ---- the catalog ----------------------------------------------------------------------------------

/**
 * A built-in tool's identity and payloads. `inAgentSpec`: listed in the agent-server info's
 * `agent.tools` (the OpenHands agent spec names terminal, file_editor and task_tracker; think and
 * finish are the SDK's default tools, always present and not listed).
 */
const builtin = <N extends string, K extends string, A extends z.ZodObject & { shape: { kind: z.ZodLiteral<string> } }, O extends z.ZodObject>(
  name: N,
  kind: K,
  parameters: z.ZodObject,
  action: A,
  observation: O,
  inAgentSpec: boolean,
) => ({ name, kind, actionKind: action.shape.kind.value as z.output<A>['kind'], parameters, action, observation, inAgentSpec });

export const TERMINAL = builtin('terminal', 'TerminalTool', terminalParameters, TerminalAction, TerminalObservation, true);
export const FILE_EDITOR = builtin('file_editor', 'FileEditorTool', fileEditorParameters, FileEditorAction, FileEditorObservation, true);
export const TASK_TRACKER = builtin('task_tracker', 'TaskTrackerTool', taskTrackerParameters, TaskTrackerAction, TaskTrackerObservation, true);
export const THINK = builtin('think', 'ThinkTool', thinkParameters, ThinkAction, ThinkObservation, false);
export const FINISH = builtin('finish', 'FinishTool', finishParameters, FinishAction, FinishObservation, false);

/** The built-in tools, in the order they are offered to the LLM. */
export const BUILTIN_TOOLS = [TERMINAL, FILE_EDITOR, TASK_TRACKER, THINK, FINISH] as const;
type BuiltinTool = (typeof BUILTIN_TOOLS)[number];
export type BuiltinToolName = BuiltinTool['name'];
export const BUILTIN_TOOL_NAMES: readonly BuiltinToolName[] = BUILTIN_TOOLS.map((t) => t.name);

type ActionsOf<T extends readonly BuiltinTool[]> = { -readonly [I in keyof T]: T[I]['action'] };
type ObservationsOf<T extends readonly BuiltinTool[]> = { -readonly [I in keyof T]: T[I]['observation'] };
/** Every action kind a call can record: the built-ins' and MCP's (the members of `Action` in schema.ts). */
export const ACTION_SCHEMAS = [...BUILTIN_TOOLS.map((t) => t.action), MCPToolAction] as unknown as [...ActionsOf<typeof BUILTIN_TOOLS>, typeof MCPToolAction];
/** Every observation kind a tool can return (the members of `Observation` in schema.ts). */
export const OBSERVATION_SCHEMAS = [...BUILTIN_TOOLS.map((t) => t.observation), MCPObservation] as unknown as [
  ...ObservationsOf<typeof BUILTIN_TOOLS>,
  typeof MCPObservation,
];
