/**
 * Counts the Maps and Sets keyed by a conversation id in src/ and bridge/: every `new Map`/`new Set`
 * whose `get`/`set`/`has`/`delete`/`add` is called with a key that names a conversation id (`id`,
 * `conversationId`, `ctx.conversationId`, `conversation_id`, `record.id`...). Syntax only (swc's
 * parser, no type checker): a collection whose `id` keys are not conversations' is excluded by name
 * below, with the reason. Prints each one (file:line, name, the keys seen) and the count per file.
 *
 *   npx tsx scripts/count-conversation-maps.ts [--all]    (--all: every Map and Set, keyed or not)
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseSync } from '@swc/core';

const ROOTS = ['src', 'bridge'];
/** A key expression that names a conversation id. */
const CONVERSATION_KEY = /^(id|cid|conversationId|conversation_id|[\w.]*\.conversationId|[\w.]*\.conversation_id|rec(ord)?\.id|conv\.record\.id|r\.id)$/;
/** Collections whose `id` keys are not conversations' (file:name), with why. */
const NOT_CONVERSATIONS: Record<string, string> = {
  'src/llm/chat-stream.ts:usedIds': 'the tool-call ids of one response',
  'src/store/postgres.ts:byId': 'event ids',
  'bridge/sessions.ts:sessions': 'browser session ids',
  // built and dropped within one call: not state kept about a conversation
  'src/store/postgres.ts:out': "one query's rows",
  'src/cluster/leases.ts:kept': "one renewal's rows",
  'src/store/sqlite.ts:newest': "one journal frame's events",
  'src/store/sqlite.ts:seqBefore': "one batch's events",
};

interface Collection {
  file: string;
  line: number;
  name: string;
  kind: string;
  keys: Set<string>;
}

type Node = { type?: string; span?: { start: number; end: number }; [k: string]: unknown };

function files(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...files(p));
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

function walk(n: unknown, fn: (n: Node) => void): void {
  if (Array.isArray(n)) for (const c of n) walk(c, fn);
  else if (n && typeof n === 'object') {
    if ((n as Node).type) fn(n as Node);
    for (const v of Object.values(n)) if (v && typeof v === 'object') walk(v, fn);
  }
}

function collect(file: string): Collection[] {
  // swc's spans count from a global offset: the leading `0;` marks where this file's offset 0 is
  const text = `0;${fs.readFileSync(file, 'utf8')}`;
  const mod = parseSync(text, { syntax: 'typescript', target: 'es2022' }) as unknown as { body: Node[] };
  const base = mod.body[0]!.span!.start;
  // (spans count bytes of UTF-8)
  const bytes = Buffer.from(text, 'utf8');
  const src = (n: Node) => bytes.subarray(n.span!.start - base, n.span!.end - base).toString('utf8');
  const lineOf = (n: Node) =>
    bytes
      .subarray(0, n.span!.start - base)
      .toString('utf8')
      .split('\n').length;
  const found = new Map<string, Collection>();
  const newCollection = (e: unknown): string | null => {
    const n = e as Node | undefined;
    if (n?.type !== 'NewExpression') return null;
    const callee = n.callee as Node;
    const name = callee.type === 'Identifier' ? (callee.value as string) : null;
    return name === 'Map' || name === 'Set' ? name : null;
  };
  /** `name` or `this.name`. */
  const nameOf = (e: Node): string | null => {
    if (e.type === 'Identifier') return e.value as string;
    if (e.type === 'MemberExpression' && (e.object as Node).type === 'ThisExpression') {
      const p = e.property as Node;
      return p.type === 'Identifier' || p.type === 'PrivateName' ? ((p.value ?? (p.id as Node)?.value) as string) : null;
    }
    return null;
  };
  const declare = (name: string, at: Node, kind: string) => {
    if (!found.has(name)) found.set(name, { file, line: lineOf(at), name, kind, keys: new Set() });
  };
  walk(mod, (n) => {
    if (n.type === 'ClassProperty' || n.type === 'PrivateProperty') {
      const k = newCollection(n.value);
      const key = n.key as Node;
      const name = (key.value ?? (key.id as Node)?.value) as string | undefined;
      if (k && name) declare(name, n, k);
    } else if (n.type === 'VariableDeclarator') {
      const k = newCollection(n.init);
      const id = n.id as Node;
      if (k && id.type === 'Identifier') declare(id.value as string, n, k);
    } else if (n.type === 'AssignmentExpression' && n.operator === '=') {
      const k = newCollection(n.right);
      const name = nameOf(n.left as Node);
      if (k && name) declare(name, n, k);
    }
  });
  walk(mod, (n) => {
    if (n.type !== 'CallExpression' || (n.callee as Node).type !== 'MemberExpression') return;
    const callee = n.callee as Node;
    const method = (callee.property as Node).value as string;
    const target = nameOf(callee.object as Node);
    const c = target ? found.get(target) : undefined;
    const arg = (n.arguments as { expression: Node }[])[0]?.expression;
    if (c && arg && ['get', 'set', 'has', 'delete', 'add'].includes(method)) c.keys.add(src(arg));
  });
  return [...found.values()];
}

const all = process.argv.includes('--all');
const rows = ROOTS.flatMap((r) => files(r)).flatMap(collect);
const keyed = rows.filter((c) => !NOT_CONVERSATIONS[`${c.file}:${c.name}`] && [...c.keys].some((k) => CONVERSATION_KEY.test(k)));
const byFile = new Map<string, number>();
for (const c of all ? rows : keyed) {
  const mark = keyed.includes(c) ? '*' : ' ';
  console.log(`${mark} ${c.file}:${c.line}  ${c.kind} ${c.name}  keys: ${[...c.keys].slice(0, 4).join(', ') || '-'}`);
  if (keyed.includes(c)) byFile.set(c.file, (byFile.get(c.file) ?? 0) + 1);
}
console.log('\nper file:');
for (const [f, n] of [...byFile].sort((a, b) => b[1] - a[1])) console.log(`  ${n}  ${f}`);
console.log('\nexcluded (keys named like a conversation id, but not one, or not kept):');
for (const [k, why] of Object.entries(NOT_CONVERSATIONS)) console.log(`  ${k}: ${why}`);
console.log(`\n${keyed.length} Maps/Sets keyed by a conversation id in ${byFile.size} files (${rows.length} Maps/Sets in all)`);
