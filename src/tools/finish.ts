/** `finish` tool: the agent's final answer. The agent loop ends the run when it sees tool_name `finish`. */
import { z } from 'zod';
import type { Tool } from './types.js';

export const finishParameters = z.object({
  message: z.string().describe('The final message to the user: what was done, and anything they should know.'),
});

export type FinishParams = z.output<typeof finishParameters>;

export function createFinishTool(): Tool<FinishParams> {
  return {
    name: 'finish',
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
