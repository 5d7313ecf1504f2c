/**
 * The documentation keeps up with the code:
 *
 * - README.md stays a short entry page (at most README_MAX_LINES lines); the rest lives in docs/;
 * - docs/configuration.md names every environment variable the code reads: those the daemon's
 *   configuration, the child environments and the stdio MCP servers read (found by running them
 *   against an environment that records each name asked for), and every `process.env.X` (or the
 *   command's `io.env.X`) read in code of src/, bridge/, cli/, bin/, scripts/*.mjs and test/ (a
 *   variable a test file sets itself is that test's own business, not a setting);
 * - every relative link of README.md, CONTRIBUTING.md and docs/*.md leads to a file that exists and,
 *   with a `#fragment`, to a heading of it (GitHub's anchors);
 * - no code comment cites an issue number or a design file outside the repository: a comment says
 *   the reason itself, or points at docs/. Comments are found by parsing each source file with swc
 *   (the parser the layer check uses), so a string, a template, a regular expression or JSX text
 *   that looks like a comment is not one.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { parseSync } from '@swc/core';
import { loadConfig } from '../src/config.js';
import { baseChildEnv } from '../src/sandbox/child-env.js';
import { minimalEnv } from '../src/tools/mcp/stdio.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const README_MAX_LINES = 250;
/** Where the code lives; what is generated or installed is not read. */
const SOURCE_DIRS = ['src', 'bridge', 'cli', 'console', 'scripts', 'test', 'bin'];
const SKIP_DIRS = new Set(['node_modules', 'dist', 'lib', 'artifacts', 'data']);
/** Root files with comments of their own. */
const ROOT_SOURCES = ['.dependency-cruiser.cjs', '.ci/run'];

/** A path of the checkout (relative to its root) or any absolute one. */
const abs = (f: string) => path.resolve(ROOT, f);
const read = (f: string) => fs.readFileSync(abs(f), 'utf8');

function walk(rel: string, out: string[] = []): string[] {
  for (const e of fs.readdirSync(path.join(ROOT, rel), { withFileTypes: true })) {
    if (e.name.startsWith('.') || SKIP_DIRS.has(e.name)) continue;
    const p = `${rel}/${e.name}`;
    if (e.isDirectory()) walk(p, out);
    else if (e.isFile()) out.push(p);
  }
  return out;
}

const sourceFiles = () => [...SOURCE_DIRS.flatMap((d) => walk(d)), ...ROOT_SOURCES.filter((f) => fs.existsSync(path.join(ROOT, f)))];
const isScript = (f: string) => /\.(m|c)?[jt]sx?$/.test(f);

interface Lexed {
  /** The file's bytes; positions below are byte offsets into it. */
  bytes: Buffer;
  /** 1 where a string, template text, regular expression or JSX text is. */
  literal: Uint8Array;
  /** [start, end) of each comment. */
  comments: [number, number][];
}

/**
 * A script's comments, found around what swc parses as literals: their byte ranges are taken out of
 * the scan, and what remains that starts with `//` or `/*` is a comment.
 */
function lexScript(file: string): Lexed {
  const bytes = fs.readFileSync(abs(file));
  const src = Buffer.from(bytes);
  // a shebang is allowed only as a file's first line: blanked, since the parse is given a prefix
  if (src[0] === 0x23 && src[1] === 0x21) for (let i = 0; i < src.length && src[i] !== 0x0a; i++) src[i] = 0x20;
  // swc's spans are byte offsets from a base that grows with every parse: a first statement at offset 0 names it
  const prefix = Buffer.from('0;\n');
  const ts = /\.(m|c)?tsx?$/.test(file);
  const module = parseSync(
    Buffer.concat([prefix, src]).toString('utf8'),
    ts ? { syntax: 'typescript', tsx: file.endsWith('.tsx') } : { syntax: 'ecmascript', jsx: false },
  );
  const base = (module.body[0] as unknown as { span: { start: number } }).span.start + prefix.length;
  const literal = new Uint8Array(src.length);
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(visit);
    if (!node || typeof node !== 'object') return;
    const o = node as { type?: string; span?: { start: number; end: number } };
    if (o.span && (o.type === 'StringLiteral' || o.type === 'TemplateElement' || o.type === 'JSXText' || o.type === 'RegExpLiteral')) {
      literal.fill(1, o.span.start - base, o.span.end - base);
    }
    for (const v of Object.values(o)) if (v && typeof v === 'object') visit(v);
  };
  visit(module.body);
  // latin1: one character per byte, so string positions are byte positions
  const text = src.toString('latin1');
  const comments: [number, number][] = [];
  for (let i = 0; i < text.length; i++) {
    if (literal[i] || text[i] !== '/') continue;
    if (text[i + 1] === '/') {
      const nl = text.indexOf('\n', i);
      const end = nl < 0 ? text.length : nl;
      comments.push([i, end]);
      i = end;
    } else if (text[i + 1] === '*') {
      const close = text.indexOf('*/', i + 2);
      assert.ok(close >= 0, `${file}: a comment that never ends at byte ${i}`);
      comments.push([i, close + 2]);
      i = close + 1;
    }
  }
  return { bytes, literal, comments };
}

/** The comments of any source file: scripts parsed, CSS and HTML by their delimiters, the rest by `#` lines. */
function commentsOf(file: string): string[] {
  if (isScript(file)) {
    const { bytes, comments } = lexScript(file);
    return comments.map(([s, e]) => bytes.subarray(s, e).toString('utf8'));
  }
  const text = read(file);
  if (file.endsWith('.css')) return text.match(/\/\*[\s\S]*?\*\//g) ?? [];
  if (file.endsWith('.html') || file.endsWith('.svg')) return text.match(/<!--[\s\S]*?-->/g) ?? [];
  if (file.endsWith('.json')) return [];
  return text.split('\n').filter((l) => /^\s*#(?!!)/.test(l));
}

/** What a comment may not say: an issue number, a point of an issue, or a design file that is not in the repository. */
const FORBIDDEN: [RegExp, string][] = [
  [/\bissues? #?\d+/i, 'an issue number'],
  [/\(\s*\d{1,2}\.\d{1,2}\s*\)/, 'a point of an issue, "(N.M)"'],
  [/\bpoints? \d+(\.\d+)? of\b/i, 'a point of an issue'],
  [/§/, 'a section of a design file'],
  [/\b(CONTRACT|ARCHITECTURE|STYLE)(\.md)?\b/, 'a design file outside the repository'],
  [/\bthe contract's\b/i, "the contract's sections"],
  [/\.\.\/shared\b|\bshared\/(design|reference|vendor)\b/, 'a path outside the repository'],
];

function forbiddenIn(comment: string): string | null {
  for (const [re, what] of FORBIDDEN) if (re.test(comment)) return what;
  return null;
}

// ---- the names the code reads -------------------------------------------------------------------

/** Runs `fn` with process.env (or the environment it is given) recording each name read. */
function namesRead(fn: (env: NodeJS.ProcessEnv) => unknown): Set<string> {
  const seen = new Set<string>();
  const recorder = new Proxy({} as NodeJS.ProcessEnv, {
    get(_t, k) {
      if (typeof k === 'string') seen.add(k);
      return undefined;
    },
    has(_t, k) {
      if (typeof k === 'string') seen.add(k);
      return false;
    },
  });
  const saved = process.env;
  process.env = recorder;
  try {
    fn(recorder);
  } finally {
    process.env = saved;
  }
  return seen;
}

const ENV_READ = /\b(?:process\.env|io\.env)\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*(['"])([A-Za-z_][A-Za-z0-9_]*)\2\s*\])/g;

/** `process.env.X` and `process.env['X']` read in the code of `file` (not in its comments or strings); without the names it assigns when `ownSets`. */
function envReadsIn(file: string, ownSets: boolean): Set<string> {
  const { bytes, literal, comments } = lexScript(file);
  const chars = bytes.toString('latin1').split('');
  for (const [s, e] of comments) for (let i = s; i < e; i++) chars[i] = ' ';
  const text = chars.join('');
  const read = new Set<string>();
  const set = new Set<string>();
  for (const m of text.matchAll(ENV_READ)) {
    if (literal[m.index]) continue; // inside a string: code the test runs elsewhere, not this file's read
    const name = m[1] ?? m[3]!;
    const after = text.slice(m.index + m[0].length);
    if (/^\s*(=(?!=)|\?\?=)/.test(after) || /\bdelete\s*$/.test(text.slice(Math.max(0, m.index - 10), m.index))) set.add(name);
    else read.add(name);
  }
  if (ownSets) for (const n of set) read.delete(n);
  return read;
}

/** Every variable the code reads, each with where it was found. */
function variablesRead(): Map<string, string> {
  const found = new Map<string, string>();
  const add = (names: Iterable<string>, where: string) => {
    for (const n of names) if (/^[A-Z][A-Z0-9_]*$|^[a-z]+_proxy$/.test(n) && !found.has(n)) found.set(n, where);
  };
  add(
    namesRead((env) => loadConfig(env)),
    'src/config.ts (loadConfig)',
  );
  add(
    namesRead(() => baseChildEnv()),
    'src/sandbox/child-env.ts (baseChildEnv)',
  );
  add(
    namesRead(() => minimalEnv()),
    'src/tools/mcp/stdio.ts (minimalEnv)',
  );
  const code = sourceFiles().filter((f) => isScript(f) && (/^(src|bridge|cli|bin)\//.test(f) || /^scripts\/[^/]+\.mjs$/.test(f) || f.startsWith('test/')));
  for (const f of code) add(envReadsIn(f, f.startsWith('test/')), f);
  return found;
}

/** Names written as code in a markdown file: `NAME`, also inside a table cell or a list. */
const documentedNames = (md: string) => new Set([...md.matchAll(/`([A-Za-z_][A-Za-z0-9_]*)(=[^`]*)?`/g)].map((m) => m[1]!));

// ---- markdown links -----------------------------------------------------------------------------

/** GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped, spaces as dashes. */
function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** The markdown outside fenced code blocks, inline code removed, as lines. */
function prose(md: string): string[] {
  let fenced = false;
  const out: string[] = [];
  for (const line of md.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      out.push('');
      continue;
    }
    out.push(fenced ? '' : line.replace(/`[^`]*`/g, '``'));
  }
  return out;
}

function anchorsOf(md: string): Set<string> {
  const anchors = new Set<string>();
  const counts = new Map<string, number>();
  let fenced = false;
  for (const line of md.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const h = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!h) continue;
    const s = slug(h[1]!);
    const n = counts.get(s) ?? 0;
    counts.set(s, n + 1);
    anchors.add(n === 0 ? s : `${s}-${n}`);
  }
  return anchors;
}

/** Each relative link of a markdown file that leads nowhere, as "line: target (why)". */
function brokenLinks(file: string): string[] {
  const broken: string[] = [];
  prose(read(file)).forEach((line, i) => {
    for (const m of line.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [p = '', fragment] = target.split('#');
      const dest = p === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), decodeURIComponent(p)));
      if ((!path.isAbsolute(dest) && dest.startsWith('..')) || !fs.existsSync(abs(dest))) {
        broken.push(`${file}:${i + 1}: ${target} (no such file)`);
        continue;
      }
      if (fragment === undefined) continue;
      if (!dest.endsWith('.md')) broken.push(`${file}:${i + 1}: ${target} (a fragment of a file that is not markdown)`);
      else if (!anchorsOf(read(dest)).has(fragment)) broken.push(`${file}:${i + 1}: ${target} (no such heading in ${dest})`);
    }
  });
  return broken;
}

const markdownFiles = () => ['README.md', 'CONTRIBUTING.md', ...walk('docs').filter((f) => f.endsWith('.md'))];

// ---- the tests ----------------------------------------------------------------------------------

test(`README.md is at most ${README_MAX_LINES} lines`, () => {
  const lines = read('README.md').replace(/\n$/, '').split('\n').length;
  assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines: move what a newcomer does not need first to docs/`);
});

test('docs/configuration.md names every environment variable the code reads', () => {
  const documented = documentedNames(read('docs/configuration.md'));
  const read_ = variablesRead();
  // the recorders and the scan found something: a change that made them see nothing would pass silently
  for (const expected of ['PORT', 'SANDBOX_NETWORK', 'LEASE_TTL_MS', 'HTTPS_PROXY', 'PARLEY_URL', 'PARLEY_TEST_PG']) {
    assert.ok(read_.has(expected), `${expected} should be among the variables found (${[...read_.keys()].join(', ')})`);
  }
  const missing = [...read_].filter(([name]) => !documented.has(name)).map(([name, where]) => `${name} (read in ${where})`);
  assert.deepEqual(missing, [], `add these to docs/configuration.md: ${missing.join('; ')}`);
});

test('every relative link of the README, CONTRIBUTING and docs/ leads to a file and heading that exist', () => {
  const files = markdownFiles();
  assert.ok(files.includes('docs/configuration.md') && files.length >= 8, `markdown files found: ${files.join(', ')}`);
  const broken = files.flatMap(brokenLinks);
  assert.deepEqual(broken, []);
});

test('no code comment cites an issue number or a design file outside the repository', () => {
  const offending: string[] = [];
  let seen = 0;
  for (const f of sourceFiles()) {
    for (const c of commentsOf(f)) {
      seen += 1;
      const what = forbiddenIn(c);
      if (what) offending.push(`${f}: ${what}: ${c.replace(/\s+/g, ' ').slice(0, 160)}`);
    }
  }
  assert.ok(seen > 1000, `only ${seen} comments found: the scan is not reading the sources`);
  assert.deepEqual(offending, [], 'say the reason itself, or point at a docs/ file');
});

test('the checks above catch what they are for', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-docs-probe-'));
  try {
    // comments, not look-alikes: the same words in a string, a template, a regular expression or JSX text pass
    const script = path.join(dir, 'probe.tsx');
    fs.writeFileSync(
      script,
      [
        "const a = 'issue 12.4 // not a comment';",
        'const b = `see CONTRACT §4 /* nor this */`;',
        'const c = /issue #42/;',
        'const d = <p>// (22.3) text, not a comment</p>;',
        '// a comment citing issue 12.4',
        '/* and one pointing at ../shared/design/ARCHITECTURE.md */',
        'const e = process.env.SOME_SETTING ?? process.env["OTHER_ONE"];',
        'process.env.SET_HERE = "1";',
        'const f = process.env.SET_HERE;',
        'const g = "process.env.IN_A_STRING";',
      ].join('\n'),
    );
    assert.deepEqual(commentsOf(script).map(forbiddenIn), ['an issue number', 'a design file outside the repository']);
    assert.deepEqual([...envReadsIn(script, false)].sort(), ['OTHER_ONE', 'SET_HERE', 'SOME_SETTING']);
    assert.deepEqual([...envReadsIn(script, true)].sort(), ['OTHER_ONE', 'SOME_SETTING']);
    // links: a missing file, a missing heading, and ones that are there
    const md = path.join(dir, 'probe.md');
    fs.writeFileSync(md, ['# A heading', '[ok](#a-heading) [gone](#no-such-heading) [file](probe.tsx) [none](missing.md)', '`[code](nowhere.md)`'].join('\n'));
    assert.deepEqual(
      brokenLinks(md).map((b) => b.replace(/^.*?: /, '')),
      [`#no-such-heading (no such heading in ${md})`, 'missing.md (no such file)'],
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  assert.equal(slug('The `parley` command'), 'the-parley-command');
  assert.equal(slug("OpenHands' TypeScript client"), 'openhands-typescript-client');
});
