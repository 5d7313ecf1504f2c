/**
 * Turns zod issues into FastAPI/pydantic-compatible validation entries (the 422 body of docs/api.md):
 * pydantic `type` names, full `loc` paths, and an `input` that never echoes a secret and, in all,
 * at most ECHO_BUDGET bytes of the request.
 */
import type * as z from 'zod';
import type { ValidationIssue } from '../errors.js';
import { SECRET_PLACEHOLDER } from '../secrets/redact.js';

type Loc = (string | number)[];
const FLOAT_FIELDS = new Set(['timeout']);
// `headers` and `auth`: an MCP server's credentials travel in them (OpenHands' MCP server settings and test)
const SECRET_KEYS = new Set(['api_key', 'token', 'env', 'llm_api_key', 'value', 'session_api_key', 'password', 'headers', 'auth']);

/** Copy of `v` with every value under a secret-looking key replaced. */
function scrubSecrets(v: unknown, depth = 0): unknown {
  if (depth > 20) return undefined;
  if (Array.isArray(v)) return v.map((x) => scrubSecrets(x, depth + 1));
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = SECRET_KEYS.has(k) ? SECRET_PLACEHOLDER : scrubSecrets(x, depth + 1);
    return out;
  }
  return v;
}

function valueAt(root: unknown, path: PropertyKey[]): { found: boolean; value: unknown } {
  let cur: unknown = root;
  for (const p of path) {
    if (cur === null || typeof cur !== 'object' || !(String(p) in (cur as object))) return { found: false, value: undefined };
    cur = (cur as Record<string, unknown>)[String(p)];
  }
  return { found: true, value: cur };
}

/**
 * What one 422 echoes of the request in all (its `input` values, about as many bytes of JSON): an
 * entry whose input does not fit in what is left has none. pydantic echoes every input whole; here a
 * body of MAX_BODY_BYTES with many issues (a 9 MiB string under an object missing three fields is
 * echoed for each of them) would make a 422 several times its body.
 */
const ECHO_BUDGET = 1024 * 1024;

/** About the JSON size of `v` as scrubSecrets copies it (20 levels), counted only up to `budget` (then more than it). */
function echoSize(v: unknown, budget: number): number {
  let size = 0;
  const walk = (x: unknown, depth: number): void => {
    if (size > budget) return;
    if (typeof x === 'string') size += x.length + 2;
    else if (x === null || typeof x !== 'object') size += 8;
    else if (depth > 20) size += 4;
    else if (Array.isArray(x)) {
      size += 2;
      for (const y of x) {
        walk(y, depth + 1);
        if (size > budget) return;
      }
    } else {
      size += 2;
      for (const k in x) {
        size += k.length + 4;
        walk((x as Record<string, unknown>)[k], depth + 1);
        if (size > budget) return;
      }
    }
  };
  walk(v, 0);
  return size;
}

const quote = (v: unknown) => (typeof v === 'string' ? `'${v}'` : String(v));
function orList(values: readonly unknown[]): string {
  const q = values.map(quote);
  return q.length <= 1 ? q.join('') : `${q.slice(0, -1).join(', ')} or ${q[q.length - 1]}`;
}

const TYPE_NAMES: Record<string, [string, string]> = {
  string: ['string_type', 'Input should be a valid string'],
  boolean: ['bool_type', 'Input should be a valid boolean'],
  int: ['int_type', 'Input should be a valid integer'],
  number: ['float_type', 'Input should be a valid number'],
  array: ['list_type', 'Input should be a valid list'],
  object: ['dict_type', 'Input should be a valid dictionary'],
  record: ['dict_type', 'Input should be a valid dictionary'],
};

/** Pick the union branch the input was meant as: by its `type`, else the one with the fewest issues. */
function pickUnionBranch(errors: z.core.$ZodIssue[][], input: unknown): z.core.$ZodIssue[] {
  const t = input && typeof input === 'object' ? (input as Record<string, unknown>).type : undefined;
  if (t === 'image' && errors[1]) return errors[1];
  if ((t === 'text' || t === undefined) && errors[0] && !(input && typeof input === 'object' && 'image_urls' in input)) return errors[0];
  return [...errors].sort((a, b) => a.length - b.length)[0] ?? [];
}

/**
 * @param issues zod issues for `input`
 * @param input  the value that was validated
 * @param locOf  maps an issue path to its wire location (e.g. prefixes "body" or "query")
 */
export function toValidationIssues(issues: readonly z.core.$ZodIssue[], input: unknown, locOf: (path: PropertyKey[]) => Loc): ValidationIssue[] {
  const out: ValidationIssue[] = [];
  let echoLeft = ECHO_BUDGET;
  const echo = (entry: ValidationIssue, value: unknown) => {
    const size = echoSize(value, echoLeft);
    if (size > echoLeft) return;
    echoLeft -= size;
    entry.input = scrubSecrets(value);
  };
  const visit = (issue: z.core.$ZodIssue, base: PropertyKey[]) => {
    const path = [...base, ...issue.path];
    const at = valueAt(input, path);
    const push = (type: string, msg: string, p: PropertyKey[] = path, ctx?: Record<string, unknown>) => {
      const v = valueAt(input, p);
      const entry: ValidationIssue = { type, loc: locOf(p), msg };
      const sensitive = p.some((k) => typeof k === 'string' && SECRET_KEYS.has(k));
      if (!sensitive) echo(entry, type !== 'missing' || v.found ? v.value : valueAt(input, p.slice(0, -1)).value);
      if (ctx) entry.ctx = ctx;
      out.push(entry);
    };
    switch (issue.code) {
      case 'invalid_type': {
        if (!at.found || at.value === undefined) return push('missing', 'Field required');
        if (issue.expected === 'int' && typeof at.value === 'number') {
          return push('int_from_float', 'Input should be a valid integer, got a number with a fractional part');
        }
        // this API's numbers are integers except the few float fields listed here
        const expected = issue.expected === 'number' && !FLOAT_FIELDS.has(String(path[path.length - 1])) ? 'int' : issue.expected;
        if (locOf(path).length <= 1 && expected === 'object') {
          return push('model_attributes_type', 'Input should be a valid dictionary or object to extract fields from');
        }
        if (expected === 'int' && locOf(path)[0] === 'query') {
          return push('int_parsing', 'Input should be a valid integer, unable to parse string as an integer');
        }
        const [type, msg] = TYPE_NAMES[expected] ?? [`${expected}_type`, `Input should be a valid ${expected}`];
        return push(type, msg);
      }
      case 'unrecognized_keys':
        for (const k of issue.keys) push('extra_forbidden', 'Extra inputs are not permitted', [...path, k]);
        return;
      case 'invalid_value':
        if (issue.values.length === 1) return push('literal_error', `Input should be ${quote(issue.values[0])}`, path, { expected: quote(issue.values[0]) });
        return push('enum', `Input should be ${orList(issue.values)}`, path, { expected: orList(issue.values) });
      case 'invalid_union':
        for (const sub of pickUnionBranch(issue.errors, at.value)) visit(sub, path);
        return;
      case 'too_small': {
        if (issue.origin === 'number' || issue.origin === 'int' || issue.origin === 'bigint') {
          const op = issue.inclusive ? 'greater_than_equal' : 'greater_than';
          return push(op, `Input should be greater than${issue.inclusive ? ' or equal to' : ''} ${issue.minimum}`, path, {
            [issue.inclusive ? 'ge' : 'gt']: issue.minimum,
          });
        }
        if (issue.origin === 'string')
          return push('string_too_short', `String should have at least ${issue.minimum} character${Number(issue.minimum) === 1 ? '' : 's'}`, path, {
            min_length: issue.minimum,
          });
        return push('too_short', `List should have at least ${issue.minimum} item${Number(issue.minimum) === 1 ? '' : 's'}`, path, {
          min_length: issue.minimum,
        });
      }
      case 'too_big': {
        if (issue.origin === 'number' || issue.origin === 'int' || issue.origin === 'bigint') {
          const op = issue.inclusive ? 'less_than_equal' : 'less_than';
          return push(op, `Input should be less than${issue.inclusive ? ' or equal to' : ''} ${issue.maximum}`, path, {
            [issue.inclusive ? 'le' : 'lt']: issue.maximum,
          });
        }
        if (issue.origin === 'string')
          return push('string_too_long', `String should have at most ${issue.maximum} characters`, path, { max_length: issue.maximum });
        return push('too_long', `List should have at most ${issue.maximum} items`, path, { max_length: issue.maximum });
      }
      case 'invalid_format':
        if (issue.message === 'uuid_parsing' || issue.format === 'uuid') return push('uuid_parsing', 'Input should be a valid UUID');
        if (issue.format === 'regex') {
          if (issue.message === 'uuid_parsing') return push('uuid_parsing', 'Input should be a valid UUID');
          return push(
            'string_pattern_mismatch',
            issue.message.startsWith('Invalid') ? `String should match pattern '${(issue as { pattern?: string }).pattern ?? ''}'` : issue.message,
          );
        }
        return push('value_error', `Value error, ${issue.message}`);
      case 'invalid_key':
        for (const sub of issue.issues) visit(sub, path);
        return;
      default:
        return push('value_error', `Value error, ${issue.message}`);
    }
  };
  for (const issue of issues) visit(issue, []);
  return out;
}
