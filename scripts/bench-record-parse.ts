/**
 * What parsing a conversation record's data costs (src/conversation/record-data.ts), next to what
 * reading it costs anyway: the JSON decode of the stored text (the SQLite store's read).
 *
 *   npx tsx scripts/bench-record-parse.ts [--records 10000] [--rounds 6]
 *
 * Each round decodes `--records` copies of a typical record's JSON, then decodes and parses them,
 * rounds alternating so a busy machine weighs on both alike; prints the median time of each per
 * record, their ratio, and the same for a record with a malformed key (the key-by-key path).
 */
import { parseArgs } from 'node:util';
import { parseRecordData } from '../src/conversation/record-data.js';

const { values: args } = parseArgs({ options: { records: { type: 'string', default: '10000' }, rounds: { type: 'string', default: '6' } } });
const records = Number(args.records);
const rounds = Number(args.rounds);

const typical = {
  selected_repository: 'acme/app',
  selected_branch: null,
  git_provider: 'github',
  conversation_instructions: null,
  image_urls: null,
  suggested_task: null,
  create_microagent: null,
  replay_json: null,
  mcp_config_sealed: 'v1:'.padEnd(240, 'x'),
  setup: { phase: 'ready' },
  run_requested: false,
  branch: 'main',
  llm: { model: 'openai/gpt-4o', base_url: null, api_key_sealed: 'v1:'.padEnd(90, 'y') },
  usage: { prompt_tokens: 1200, completion_tokens: 300, cache_read_tokens: 0, cache_write_tokens: 0 },
  confirmation_policy: { kind: 'NeverConfirm' },
  tags: { team: 'core' },
};

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const timed = (fn: () => void) => {
  const t = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t) / 1e3 / records; // µs per record
};

function measure(name: string, data: unknown): void {
  const text = JSON.stringify(data);
  const decode: number[] = [];
  const parse: number[] = [];
  for (let r = 0; r < rounds; r++) {
    decode.push(
      timed(() => {
        for (let i = 0; i < records; i++) JSON.parse(text);
      }),
    );
    parse.push(
      timed(() => {
        for (let i = 0; i < records; i++) parseRecordData(JSON.parse(text));
      }),
    );
  }
  const d = median(decode);
  const p = median(parse);
  console.log(`${name}: JSON decode ${d.toFixed(2)} µs/record, decode + parse ${p.toFixed(2)} µs/record, ratio ${(p / d).toFixed(2)}`);
}

console.log(`${records} records × ${rounds} alternating rounds (medians)`);
measure('typical record', typical);
measure('record with a malformed key', { ...typical, max_iterations: 'ten' });
