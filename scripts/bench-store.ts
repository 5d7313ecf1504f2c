/**
 * Store benchmark: CPU microseconds per committed append, N conversations round-robin, appends
 * grouped per event-loop turn as the daemon does. Prints the number; not a test.
 *   npx tsx scripts/bench-store.ts [conversations=50] [events=100000] [batch=40]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SqliteStore } from '../src/store/sqlite.js';

const [convs = 50, total = 100_000, batch = 40] = process.argv.slice(2).map(Number);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-store-'));
const store = new SqliteStore(dir);
const ids = Array.from({ length: convs }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`);
const draft = (i: number) => ({ kind: 'MessageEvent', source: 'user' as const, llm_message: { role: 'user', content: [{ type: 'text', text: `message number ${i} with some ordinary text in it`, cache_prompt: false }] } });

async function run(n: number) {
  for (let i = 0; i < n; i += batch) {
    const ps = [];
    for (let j = 0; j < batch && i + j < n; j++) ps.push(store.append(ids[(i + j) % convs]!, draft(i + j)));
    await Promise.all(ps);
  }
}
await run(Math.min(20_000, total / 5)); // warm-up
const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
await run(total);
const wall = Number(process.hrtime.bigint() - t0) / 1e3;
const cpu = process.cpuUsage(cpu0);
console.log(`store append: ${convs} conversations, ${total} events, ~${batch} per transaction`);
console.log(`  CPU ${((cpu.user + cpu.system) / total).toFixed(1)} µs/event, wall ${(wall / total).toFixed(1)} µs/event, ${Math.round(total / (wall / 1e6))} events/s`);
await store.close();
fs.rmSync(dir, { recursive: true, force: true });
