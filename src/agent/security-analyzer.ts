/**
 * A conversation's security analyzer and what the confirmation policy decides with it, as OpenHands'
 * agent does: with the LLM analyzer (`{kind:"LLMSecurityAnalyzer"}`), every tool that can change
 * something offers the model a `security_risk` argument (LOW, MEDIUM or HIGH), the action records
 * the risk the model gave, and `ConfirmRisky` holds the step for confirmation when one of its
 * actions is at or above the policy's threshold (an unknown risk asks when `confirm_unknown`).
 * Without an analyzer every risk is UNKNOWN, whatever the model wrote.
 *
 * The model's word is the whole analysis: it is what the LLM analyzer is (a prompt injection can
 * make the model call a dangerous action LOW). The sandbox, not this, is the boundary.
 */
import * as z from 'zod';

const SECURITY_RISKS = ['UNKNOWN', 'LOW', 'MEDIUM', 'HIGH'] as const;
export type SecurityRisk = (typeof SECURITY_RISKS)[number];

/** The analyzer Parley runs. */
export const LLM_ANALYZER = 'LLMSecurityAnalyzer';

/** OpenHands' other analyzers: a pattern list, rails, an ensemble, a second LLM pass, or a third-party service Parley does not call. */
export const OTHER_ANALYZERS = [
  'PatternSecurityAnalyzer',
  'PolicyRailSecurityAnalyzer',
  'EnsembleSecurityAnalyzer',
  'GraySwanAnalyzer',
  'ToolShieldLLMSecurityAnalyzer',
] as const;

/** The analyzer as the conversation keeps it (`data.security_analyzer`; loose: what another version adds is kept). */
export const StoredAnalyzer = z.looseObject({ kind: z.string() });
export type StoredAnalyzer = z.output<typeof StoredAnalyzer>;

const RANK: Record<Exclude<SecurityRisk, 'UNKNOWN'>, number> = { LOW: 1, MEDIUM: 2, HIGH: 3 };

/** Whether the analyzer asks the model for a risk on each action. */
export function predictsRisk(analyzer: StoredAnalyzer | null | undefined): boolean {
  return analyzer?.kind === LLM_ANALYZER;
}

/** Whether the policy holds an action of this risk for confirmation. */
export function shouldConfirm(policy: { kind: string; confirm_unknown?: boolean; threshold?: string } | undefined, risk: SecurityRisk): boolean {
  if (!policy || policy.kind === 'NeverConfirm') return false;
  if (policy.kind === 'AlwaysConfirm') return true;
  if (risk === 'UNKNOWN') return policy.confirm_unknown !== false;
  const threshold = RANK[(policy.threshold ?? 'HIGH') as keyof typeof RANK] ?? RANK.HIGH;
  return RANK[risk] >= threshold;
}

/**
 * The risk of one tool call and its arguments without `security_risk` (the model may send it to any
 * tool; the tool never sees it). A read-only tool's risk, and every risk without the LLM analyzer,
 * is UNKNOWN; a value that is not a risk level is an error the model can correct.
 */
export function takeRisk(
  input: unknown,
  readOnly: boolean,
  analyzer: StoredAnalyzer | null | undefined,
): { input: unknown; risk: SecurityRisk; error?: string } {
  if (typeof input !== 'object' || input === null || Array.isArray(input) || !('security_risk' in input)) return { input, risk: 'UNKNOWN' };
  const { security_risk: raw, ...rest } = input as Record<string, unknown>;
  if (readOnly || !predictsRisk(analyzer) || raw === undefined || raw === null) return { input: rest, risk: 'UNKNOWN' };
  const risk = typeof raw === 'string' ? raw.toUpperCase() : raw;
  if (risk === 'LOW' || risk === 'MEDIUM' || risk === 'HIGH' || risk === 'UNKNOWN') return { input: rest, risk };
  return { input: rest, risk: 'UNKNOWN', error: `Invalid security_risk ${JSON.stringify(raw)}: give LOW, MEDIUM or HIGH.` };
}

/** The argument offered to the model with the LLM analyzer, on every tool but the read-only ones. */
const RISK_PROPERTY = {
  type: 'string',
  enum: ['LOW', 'MEDIUM', 'HIGH'],
  description:
    'The security risk of this action: LOW (reads or changes only files of the task), MEDIUM (changes beyond the task, installs, network), ' +
    'HIGH (deletes data, touches credentials or the system, sends data out). Actions at the risk the user set are held for their confirmation.',
};

/** A tool's JSON Schema with the `security_risk` argument (required, as OpenHands' agent offers it). */
export function withRiskArgument(schema: Record<string, unknown>): Record<string, unknown> {
  const properties = { security_risk: RISK_PROPERTY, ...((schema.properties as Record<string, unknown> | undefined) ?? {}) };
  const required = ['security_risk', ...((schema.required as string[] | undefined) ?? []).filter((r) => r !== 'security_risk')];
  return { ...schema, type: 'object', properties, required };
}

/** What the system prompt says with the LLM analyzer. */
export const RISK_INSTRUCTIONS =
  'Every action you take is given a security_risk argument: LOW, MEDIUM or HIGH, judged honestly from what the action does. ' +
  'The user may hold risky actions for their confirmation; never understate a risk to avoid it.';
