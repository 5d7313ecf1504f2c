/** `finish` tool: the agent's final answer. The agent loop ends the run when it sees tool_name `finish`. */
import { z } from 'zod';
import { actionSchema, observationSchema } from '../events/content.js';
import type { Tool } from './types.js';

export const finishParameters = z.object({
  message: z.string().describe('The final message to the user: what was done, and anything they should know.'),
});

type FinishParams = z.output<typeof finishParameters>;
export const FinishAction = actionSchema('FinishAction', finishParameters);
export const FinishObservation = observationSchema('FinishObservation', { message: z.string() });
export type FinishObservation = z.output<typeof FinishObservation>;

export function createFinishTool(): Tool<FinishParams, FinishObservation> {
  return {
    name: 'finish',
    kind: 'FinishTool',
    actionKind: 'FinishAction',
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
