/** `finish` tool: the agent's final answer. The agent loop ends the run when it sees tool_name `finish`. */
import type * as z from 'zod';
import { FINISH, finishParameters, type FinishObservation } from '../events/tool-catalog.js';
import type { Tool } from './types.js';

type FinishParams = z.output<typeof finishParameters>;
export type { FinishObservation };

export function createFinishTool(): Tool<FinishParams, FinishObservation> {
  return {
    name: FINISH.name,
    kind: FINISH.kind,
    actionKind: FINISH.actionKind,
    description:
      'Signals that the task is complete (or that you cannot go further) and gives the user your final message. ' +
      'Call it only when done: it ends your turn.',
    parameters: finishParameters,
    async execute(params, ctx) {
      return {
        kind: 'FinishObservation',
        content: [{ type: 'text', text: ctx.redact(params.message) }],
        is_error: false,
        message: ctx.redact(params.message),
      };
    },
  };
}
