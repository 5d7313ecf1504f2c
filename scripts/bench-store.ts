/**
 * Store benchmark: CPU microseconds per committed append, N conversations round-robin, appends
 * grouped per event-loop turn as the daemon does. Prints the number; not a test.
 *   npx tsx scripts/bench-store.ts [conversations=50] [events=100000] [batch=40]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { SqliteStore } from '../src/store/sqlite.js';

const [convs = 50, total = 100_000, batch = 40] = process.argv.slice(2).map(Number);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-bench-store-'));
let store = new SqliteStore(dir);
const ids = Array.from({ length: convs }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`);
const draft = (i: number) => ({
  kind: 'MessageEvent' as const,
  source: 'user' as const,
  llm_message: { role: 'user' as const, content: [{ type: 'text' as const, text: `message number ${i} with some ordinary text in it`, cache_prompt: false }] },
});

async function run(n: number) {
  for (let i = 0; i < n; i += batch) {
    const ps = [];
    for (let j = 0; j < batch && i + j < n; j++) ps.push(store.append(ids[(i + j) % convs]!, draft(i + j)));
    await Promise.all(ps);
  }
}
await run(Math.min(20_000, total / 5)); // warm-up
await store.close();
store = new SqliteStore(dir);
const cpu0 = process.cpuUsage();
const elu0 = performance.eventLoopUtilization();
const t0 = process.hrtime.bigint();
await run(total);
const committed = Number(process.hrtime.bigint() - t0) / 1e3;
const elu = performance.eventLoopUtilization(elu0);
await store.close(); // waits until the writer thread has indexed everything
const wall = Number(process.hrtime.bigint() - t0) / 1e3;
const cpu = process.cpuUsage(cpu0);
console.log(`store append: ${convs} conversations, ${total} events, ~${batch} per journal frame`);
console.log(`  event loop ${((elu.active * 1000) / total).toFixed(1)} µs/event busy; committed ${Math.round(total / (committed / 1e6))} events/s`);
console.log(`  CPU (all threads, until indexed) ${((cpu.user + cpu.system) / total).toFixed(1)} µs/event, wall ${(wall / total).toFixed(1)} µs/event`);
fs.rmSync(dir, { recursive: true, force: true });
