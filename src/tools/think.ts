/** `think` tool: lets the agent write down its reasoning; it changes nothing. */
import type * as z from 'zod';
import { THINK, thinkParameters, type ThinkObservation } from '../events/tool-catalog.js';
import type { Tool } from './types.js';

type ThinkParams = z.output<typeof thinkParameters>;
export type { ThinkObservation };

export function createThinkTool(): Tool<ThinkParams, ThinkObservation> {
  return {
    name: THINK.name,
    kind: THINK.kind,
    actionKind: THINK.actionKind,
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
