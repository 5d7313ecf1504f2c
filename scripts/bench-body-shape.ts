/**
 * What counting a body's JSON values before parsing it costs (src/body-shape.ts), as a
 * ratio to `JSON.parse` of the same text measured in the same run:
 *
 *   npx tsx scripts/bench-body-shape.ts
 *
 * Bodies: the load test's message (the hot path), a create request with an MCP config, a 9 MiB text
 * message, 9 MiB of text full of escaped quotes (the counter's worst case: one `indexOf` per quote),
 * and 10 MiB of `[[],[],…]` (refused at the 10,001st value; not parsed). When the maintained
 * streaming tokenizers it was chosen against are installed (`npm i --no-save jsonc-parser
 * @streamparser/json`), the same count done with each of them is printed beside it.
 */
import os from 'node:os';
import { BODY_SHAPE_LIMITS, jsonShapeError } from '../src/body-shape.js';

const MiB = 1024 * 1024;
const L = BODY_SHAPE_LIMITS;

/** The same count over a tokenizer's tokens: a value per token that starts one, keys skipped. */
function counter() {
  let values = 0;
  let depth = 0;
  let keyNext = false;
  const objects: boolean[] = [];
  return {
    open(object: boolean) {
      keyNext = object;
      objects.push(object);
      return ++values > L.values || ++depth > L.depth;
    },
    close() {
      depth--;
      objects.pop();
      keyNext = false;
    },
    comma() {
      keyNext = objects[objects.length - 1] === true;
    },
    string() {
      const key = keyNext;
      keyNext = false;
      return !key && ++values > L.values;
    },
    scalar() {
      keyNext = false;
      return ++values > L.values;
    },
  };
}

async function libraries(): Promise<Record<string, (text: string) => unknown>> {
  const out: Record<string, (text: string) => unknown> = {};
  try {
    const { createScanner, SyntaxKind: K } = await import('jsonc-parser' as string);
    out['jsonc-parser scanner'] = (text: string) => {
      const s = createScanner(text, true);
      const c = counter();
      for (let k = s.scan(); k !== K.EOF; k = s.scan()) {
        if (k === K.OpenBraceToken || k === K.OpenBracketToken) {
          if (c.open(k === K.OpenBraceToken)) return 'refused';
        } else if (k === K.CloseBraceToken || k === K.CloseBracketToken) c.close();
        else if (k === K.CommaToken) c.comma();
        else if (k === K.StringLiteral) {
          if (c.string()) return 'refused';
        } else if (k !== K.ColonToken && k !== K.Trivia && k !== K.LineBreakTrivia && c.scalar()) return 'refused';
      }
      return null;
    };
  } catch {
    /* not installed */
  }
  try {
    const { Tokenizer, TokenType: T } = await import('@streamparser/json' as string);
    out['@streamparser/json tokenizer'] = (text: string) => {
      const t = new Tokenizer();
      const c = counter();
      let refused = false;
      t.onToken = ({ token }: { token: number }) => {
        if (token === T.LEFT_BRACE || token === T.LEFT_BRACKET) refused = c.open(token === T.LEFT_BRACE);
        else if (token === T.RIGHT_BRACE || token === T.RIGHT_BRACKET) c.close();
        else if (token === T.COMMA) c.comma();
        else if (token === T.STRING) refused = c.string();
        else if (token !== T.COLON) refused = c.scalar();
        if (refused) throw new Error('refused');
      };
      try {
        t.write(text);
      } catch {
        return 'refused';
      }
      return null;
    };
  } catch {
    /* not installed */
  }
  return out;
}

const bodies: Record<string, string> = {
  'hot-path message': JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'load test message 12345' }], run: false }),
  'create with MCP config': JSON.stringify({
    initial_user_msg: 'fix the failing test',
    repository: 'owner/repo',
    mcp_config: {
      stdio_servers: Array.from({ length: 10 }, (_, i) => ({ name: `server${i}`, command: 'npx', args: ['-y', `@scope/server-${i}`], env: { MODE: 'ci' } })),
      shttp_servers: [{ url: 'https://mcp.example.com/mcp', timeout: 30 }],
    },
  }),
  '9 MiB text message': JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'lorem ipsum '.repeat((9 * MiB) / 12) }] }),
  '9 MiB of escaped quotes': JSON.stringify({ role: 'user', content: [{ type: 'text', text: 'a"b\\c\n'.repeat((9 * MiB) / 9) }] }),
  '10 MiB [[],[],…] (refused)': `{"initial_user_msg":[${'[],'.repeat((10 * MiB) / 3 - 10)}[]]}`,
};

/** Mean milliseconds per call over at least `minMs` (and at least 3 calls). */
function time(fn: (t: string) => unknown, text: string, minMs = 1000): number {
  for (let i = 0; i < 3; i++) fn(text);
  let n = 0;
  const t0 = performance.now();
  while (n < 3 || performance.now() - t0 < minMs) {
    fn(text);
    n++;
  }
  return (performance.now() - t0) / n;
}

const fmt = (ms: number) => (ms < 0.001 ? `${(ms * 1e6).toFixed(0)} ns` : ms < 1 ? `${(ms * 1000).toFixed(1)} µs` : `${ms.toFixed(1)} ms`);
const libs = await libraries();
console.log(
  `bench-body-shape (${os.cpus().length} cores, Node ${process.version}, load average ${os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')})`,
);
if (!Object.keys(libs).length) console.log('(jsonc-parser and @streamparser/json not installed: only the counter and JSON.parse)');
for (const [name, text] of Object.entries(bodies)) {
  const refused = jsonShapeError(text) !== null;
  const parse = refused ? NaN : time((t) => JSON.parse(t), text);
  const row = [`${name} (${text.length} chars${refused ? ', refused' : ''}):`];
  row.push(refused ? 'JSON.parse not run' : `JSON.parse ${fmt(parse)}`);
  for (const [lib, fn] of Object.entries({ 'counter (src/body-shape.ts)': (t: string) => jsonShapeError(t), ...libs })) {
    const ms = time(fn, text);
    row.push(`${lib} ${fmt(ms)}${refused ? '' : ` (${(ms / parse).toFixed(3)}× parse)`}`);
  }
  console.log(`${row[0]} ${row.slice(1).join('; ')}`);
}
