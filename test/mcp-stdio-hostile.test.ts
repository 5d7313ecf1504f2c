/**
 * A stdio MCP server runs where the agent can reach it: what it writes is hostile input
 * (src/tools/mcp/stdio.ts). A line that never ends, a dense line and a line that is not JSON-RPC
 * each end that server with the reason, with bounded memory and nothing thrown; honest messages,
 * however they are split, pass.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { StdioProcessTransport } from '../src/tools/mcp/stdio.js';
import { tempDir } from './support/daemon.js';

const MiB = 1024 * 1024;

/** A server that writes `script`'s output (a node program) and then waits. */
async function server(body: string): Promise<{ t: StdioProcessTransport; messages: unknown[]; errors: string[]; closed: Promise<void> }> {
  const dir = tempDir('parley-mcp-hostile-');
  const file = path.join(dir, 'server.mjs');
  fs.writeFileSync(file, `${body}\nsetInterval(() => {}, 1000);\n`);
  const t = new StdioProcessTransport({ command: process.execPath, args: [file], env: { PATH: process.env.PATH ?? '/usr/bin' }, cwd: dir });
  const messages: unknown[] = [];
  const errors: string[] = [];
  const closed = new Promise<void>((resolve) => (t.onclose = resolve));
  t.onmessage = (m) => messages.push(m);
  t.onerror = (e) => errors.push(e.message);
  await t.start();
  return { t, messages, errors, closed };
}

describe('a hostile stdio MCP server', { timeout: 60_000 }, () => {
  test('honest messages pass, split anywhere and after blank lines', async () => {
    const s = await server(`
      const m = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } }) + '\\n';
      const all = '\\n\\r\\n' + m + m;
      let i = 0;
      const step = () => { if (i < all.length) { process.stdout.write(all.slice(i, i + 7)); i += 7; setTimeout(step, 1); } };
      step();`);
    const until = Date.now() + 20_000;
    while (s.messages.length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.equal(s.messages.length, 2);
    assert.deepEqual(s.errors, []);
    assert.equal(s.t.exitDescription(), undefined);
    await s.t.close();
  });

  for (const [what, body, reason] of [
    [
      'a line that never ends (12 MiB)',
      `const c = 'x'.repeat(65536); let n = 0; const w = () => { while (n < 192 && process.stdout.write(c)) n++; ` +
        `if (n < 192) process.stdout.once('drain', () => { n++; w(); }); }; w();`,
      /line longer than 10485760 bytes/,
    ],
    ['a dense line of 9 MiB', `process.stdout.write('[' + '[],'.repeat(3 * 1024 * 1024) + '[]]\\n');`, /more structure than the limit/],
    ['a line that is not JSON-RPC', `process.stdout.write('hello from a server\\n');`, /not a JSON-RPC message/],
  ] as const) {
    test(`${what}: the server is ended with the reason, memory stays bounded`, async () => {
      const before = process.memoryUsage().rss;
      const s = await server(body);
      await s.closed;
      const grew = (process.memoryUsage().rss - before) / MiB;
      assert.match(s.t.exitDescription() ?? '', reason);
      assert.match(s.errors.join('\n'), /broke the protocol/);
      assert.deepEqual(s.messages, []);
      assert.ok(grew < 96, `grew ${grew.toFixed(0)} MiB`);
    });
  }
});
