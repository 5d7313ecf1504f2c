/** `think` tool: lets the agent write down its reasoning; it changes nothing. */
import { z } from 'zod';
import { actionSchema, observationSchema } from '../events/content.js';
import type { Tool } from './types.js';

export const thinkParameters = z.object({
  thought: z.string().describe('Your thought: analysis, a plan, hypotheses about a bug, options to compare.'),
});

type ThinkParams = z.output<typeof thinkParameters>;
export const ThinkAction = actionSchema('ThinkAction', thinkParameters);
export const ThinkObservation = observationSchema('ThinkObservation', {});
export type ThinkObservation = z.output<typeof ThinkObservation>;

export function createThinkTool(): Tool<ThinkParams, ThinkObservation> {
  return {
    name: 'think',
    kind: 'ThinkTool',
    actionKind: 'ThinkAction',
    description:
      'Use this tool to think about something: it does not get new information or change anything, it only logs the ' +
      'thought. Use it when complex reasoning helps, e.g. to weigh approaches to a fix or to organise what you found.',
    parameters: thinkParameters,
    async execute() {
      return {
        kind: 'ThinkObservation',
        content: [{ type: 'text', text: 'Your thought has been logged.' }],
        is_error: false,
      };
    },
  };
}
