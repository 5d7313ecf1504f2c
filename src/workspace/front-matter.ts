/**
 * A small parser for the YAML front matter subset used by microagent files:
 *
 *   ---
 *   name: my_agent            # plain, 'single' or "double" quoted scalars
 *   type: knowledge
 *   triggers: [docker, "k8s"]  # flow lists
 *   tags:                      # block lists
 *     - a
 *     - b
 *   description: |             # block scalars (| keeps newlines, > folds them)
 *     text
 *   inputs:                    # anything nested is kept as raw item strings / lines
 *     - name: x
 *   ---
 *
 * Values are strings, string lists, or null (empty). Nothing is evaluated (no anchors, tags or
 * type coercion), which is all the loader needs.
 */

export type FrontMatterValue = string | string[] | null;

interface FrontMatterResult {
  /** null when the text has no front matter (or it is unterminated). */
  data: Record<string, FrontMatterValue> | null;
  /** The text after the front matter (the whole text when there is none). */
  body: string;
  /** Set when the text starts like front matter but could not be parsed. */
  error?: string;
}

function unquote(v: string): string {
  if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) {
    return v.slice(1, -1).replace(/\\(["\\/nrt])/g, (_m, c: string) => ({ n: '\n', r: '\r', t: '\t' })[c as 'n'] ?? c);
  }
  if (v.length >= 2 && v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1).replace(/''/g, "'");
  return v;
}

/** Removes a ` # comment` that is not inside quotes. */
function stripComment(v: string): string {
  let quote: string | null = null;
  for (let i = 0; i < v.length; i++) {
    const c = v[i]!;
    if (quote) {
      if (c === quote) quote = null;
    } else if (c === '"' || c === "'") {
      quote = c;
    } else if (c === '#' && (i === 0 || /\s/.test(v[i - 1]!))) {
      return v.slice(0, i).trimEnd();
    }
  }
  return v.trim();
}

function splitFlowList(inner: string): string[] {
  const items: string[] = [];
  let cur = '';
  let quote: string | null = null;
  for (const c of inner) {
    if (quote) {
      cur += c;
      if (c === quote) quote = null;
    } else if (c === '"' || c === "'") {
      quote = c;
      cur += c;
    } else if (c === ',') {
      items.push(cur);
      cur = '';
    } else {
      cur += c;
    }
  }
  items.push(cur);
  return items.map((s) => unquote(s.trim())).filter((s) => s.length > 0);
}

function scalar(raw: string): FrontMatterValue {
  const v = stripComment(raw);
  if (v === '' || v === '~' || v === 'null') return null;
  if (v.startsWith('[') && v.endsWith(']')) return splitFlowList(v.slice(1, -1));
  return unquote(v);
}

export function parseFrontMatter(text: string): FrontMatterResult {
  const src = text.replace(/^\uFEFF/, '');
  const lines = src.split(/\r?\n/);
  if (lines[0]?.trimEnd() !== '---') return { data: null, body: text };
  let end = -1;
  for (let i = 1; i < lines.length; i++) {
    const l = lines[i]!.trimEnd();
    if (l === '---' || l === '...') {
      end = i;
      break;
    }
  }
  if (end < 0) return { data: null, body: text, error: 'front matter is not terminated by ---' };

  const data: Record<string, FrontMatterValue> = {};
  const header = lines.slice(1, end);
  let i = 0;
  while (i < header.length) {
    const line = header[i]!;
    if (!line.trim() || line.trimStart().startsWith('#')) {
      i++;
      continue;
    }
    const m = /^([A-Za-z_][\w.-]*)\s*:(?:\s+(.*)|\s*)$/.exec(line);
    if (!m) {
      // Not a top-level key (stray indentation or unsupported syntax): skip it.
      i++;
      continue;
    }
    const key = m[1]!;
    const rest = (m[2] ?? '').trim();
    i++;
    // Collect the indented block that belongs to this key (for lists, block scalars, nesting).
    const block: string[] = [];
    while (i < header.length && (header[i]!.trim() === '' || /^\s/.test(header[i]!) || /^-(\s|$)/.test(header[i]!))) {
      block.push(header[i]!);
      i++;
    }
    if (rest === '|' || rest === '>' || /^[|>][+-]?$/.test(rest)) {
      const nonEmpty = block.filter((l) => l.trim());
      const indent = Math.min(...nonEmpty.map((l) => /^\s*/.exec(l)![0].length));
      const body = block.map((l) => l.slice(Number.isFinite(indent) ? indent : 0).trimEnd());
      while (body.length && !body.at(-1)) body.pop();
      data[key] = rest.startsWith('|') ? body.join('\n') : body.join(' ').replace(/\s+/g, ' ').trim();
      continue;
    }
    if (rest !== '') {
      data[key] = scalar(rest);
      continue;
    }
    const meaningful = block.filter((l) => l.trim() && !l.trim().startsWith('#'));
    if (meaningful.length === 0) {
      data[key] = null;
      continue;
    }
    const itemIndent = /^\s*/.exec(meaningful[0]!)![0].length;
    if (/^\s*-(\s|$)/.test(meaningful[0]!)) {
      const items: string[] = [];
      for (const l of meaningful) {
        const indent = /^\s*/.exec(l)![0].length;
        const item = /^\s*-(?:\s+(.*))?$/.exec(l);
        if (item && indent === itemIndent) {
          const v = scalar(item[1] ?? '');
          items.push(Array.isArray(v) ? v.join(', ') : (v ?? ''));
        } else if (items.length) {
          items[items.length - 1] += `\n${l.trim()}`;
        }
      }
      data[key] = items;
    } else {
      // A nested mapping: kept as its raw lines.
      data[key] = meaningful.map((l) => l.trim());
    }
  }
  const body = lines.slice(end + 1).join('\n');
  return { data, body };
}
