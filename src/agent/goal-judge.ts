/**
 * The judge of a `/goal` loop (src/conversation/goals.ts): after each run, the conversation's LLM is
 * shown the objective and the transcript of the conversation (what the user asked, what the agent
 * said and did, and what its tools answered) and asked whether the objective is done, as strict
 * JSON `{score, complete, missing}`. An answer that does not parse is "not done" (the loop goes on
 * rather than stopping on a guess), as in OpenHands' judge.
 */
import type { ModelMessage } from 'ai';
import type { ParleyEvent } from '../events/types.js';
import type { LlmClient } from '../llm/types.js';
import { eventsToMessages } from './prompt.js';

export interface GoalVerdict {
  /** How sure the judge is that the whole objective is done (0 to 1). */
  score: number;
  complete: boolean;
  /** What remains, in a few words (empty when complete). */
  missing: string;
}

/** The most of the transcript the judge reads (its end: the newest work is what decides). */
const MAX_TRANSCRIPT_CHARS = 120_000;

const judgePrompt = (objective: string, transcript: string) =>
  [
    'You audit whether an AI software agent has COMPLETED a goal.',
    `<objective>\n${objective}\n</objective>`,
    'List the requirements the objective implies. For each, look in the transcript for evidence the agent produced itself: ' +
      'command output, file contents, test results. A requirement that is only claimed, uncertain or not shown is NOT met.',
    `<transcript>\n${transcript}\n</transcript>`,
    'Answer with strict JSON only, exactly: {"score": <0.0 to 1.0, how sure you are the whole objective is provably done>, ' +
      '"complete": <true or false>, "missing": "<what remains, briefly; empty when complete>"}',
  ].join('\n\n');

/** The follow-up the loop sends when the judge found the goal not done. */
export const followUp = (iteration: number, missing: string) =>
  `The goal is not complete yet (audit ${iteration}). What remains: ${missing || 'some requirements are not shown to be met.'}\n\n` +
  'Look at the actual state of the workspace (do not rely on memory), make progress on each remaining requirement, and show it is met ' +
  'by running the commands or tests that prove it. Keep the whole objective in view, and finish only when all of it is shown to be done.';

/** What the loop sends when a stopped goal is resumed. */
export const RESUME_TEXT =
  'We are resuming a goal that was stopped. Check the actual state of the workspace (do not rely on memory) and go on making ' +
  'verified progress toward the objective; finish only when all of it is shown to be done.';

/** The transcript as plain lines (`role: text`), tool calls and results included; the system prompt is left out. */
function transcriptOf(events: ParleyEvent[]): string {
  const { messages } = eventsToMessages(events);
  const text = messages.map(render).filter(Boolean).join('\n\n');
  return text.length > MAX_TRANSCRIPT_CHARS ? `[…earlier turns left out]\n${text.slice(-MAX_TRANSCRIPT_CHARS)}` : text;
}

function render(m: ModelMessage): string {
  if (m.role === 'system') return '';
  if (typeof m.content === 'string') return m.content.trim() ? `${m.role}: ${m.content.trim()}` : '';
  const parts: string[] = [];
  for (const p of m.content) {
    if (p.type === 'text' && p.text.trim()) parts.push(p.text.trim());
    else if (p.type === 'tool-call') parts.push(`[calls ${p.toolName} ${JSON.stringify(p.input)}]`);
    else if (p.type === 'tool-result') parts.push(`[${p.toolName} answered] ${p.output.type === 'text' ? p.output.value : JSON.stringify(p.output)}`);
  }
  return parts.length ? `${m.role}: ${parts.join('\n')}` : '';
}

/** The judge's verdict on the objective, from the conversation's events. */
export async function judgeGoal(llm: LlmClient, objective: string, events: ParleyEvent[], signal?: AbortSignal): Promise<GoalVerdict> {
  const res = await llm.complete({
    system: '',
    messages: [{ role: 'user', content: [{ type: 'text', text: judgePrompt(objective, transcriptOf(events)) }] }],
    tools: [],
    signal,
  });
  return parseVerdict(res.text);
}

/** The judge's answer, read leniently (the JSON may come inside other text); anything else is "not done". */
function parseVerdict(raw: string): GoalVerdict {
  const candidates = [raw.trim()];
  const block = /\{[\s\S]*\}/.exec(raw);
  if (block) candidates.push(block[0]);
  for (const c of candidates) {
    let data: unknown;
    try {
      data = JSON.parse(c);
    } catch {
      continue;
    }
    if (typeof data !== 'object' || data === null || Array.isArray(data)) continue;
    const d = data as Record<string, unknown>;
    const n = Number(d.score ?? 0);
    const score = Number.isFinite(n) ? Math.max(0, Math.min(1, n)) : 0;
    const complete = typeof d.complete === 'boolean' ? d.complete : score >= 1;
    return { score, complete, missing: typeof d.missing === 'string' ? d.missing.slice(0, 2000) : '' };
  }
  return { score: 0, complete: false, missing: 'The judge’s verdict could not be read.' };
}
