/**
 * The own Chat Completions client (src/llm/chat-completions.ts) against a real HTTP server that plays raw
 * SSE bytes, written in the pieces a test gives (so lines, events and UTF-8 characters are split across
 * reads). Every stream and failure is also run through the AI SDK's provider (`chatCompletionsClient:
 * 'ai-sdk'`): the two must send the same request body and give the same result or error.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { ModelMessage } from 'ai';
import { createLlmClient, toAssistantMessage, type LlmSettings } from '../src/llm/provider.js';
import { ProviderError } from '../src/llm/errors.js';
import type { LlmRequest, LlmResponse, LlmToolSpec } from '../src/llm/types.js';

const KEY = 'sk-chatstream-3b9d1f7a5c2e8d4b';

const TOOLS: LlmToolSpec[] = [
  { name: 'terminal', description: 'Run a command', inputSchema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } },
  { name: 'file_editor', description: 'Edit files', inputSchema: { type: 'object', properties: { path: { type: 'string' }, file_text: { type: 'string' } } } },
];

/** A reply: status and headers, then the body written piece by piece (a turn of the event loop between). */
interface RawReply {
  status?: number;
  headers?: Record<string, string>;
  pieces: (string | Buffer)[];
  /** Destroy the socket after the pieces instead of ending the response. */
  drop?: boolean;
  /** Keep the response open after the pieces (until the client goes away). */
  hang?: boolean;
}

interface RawServer {
  url: string;
  bodies: string[];
  /** Closed client connections seen (a hang reply's request ends when its client closes). */
  closed: number;
  push(...replies: RawReply[]): void;
  /** Drop the queued replies (a failed test must not hand its leftovers to the next). */
  clear(): void;
  close(): Promise<void>;
}

async function startRawServer(): Promise<RawServer> {
  const queue: RawReply[] = [];
  const state: RawServer = {
    url: '',
    bodies: [],
    closed: 0,
    push: (...r) => void queue.push(...r),
    clear: () => void queue.splice(0),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      state.bodies.push(Buffer.concat(chunks).toString('utf8'));
      res.on('close', () => state.closed++);
      const reply = queue.shift() ?? { status: 500, pieces: ['{"error":{"message":"no reply queued"}}'] };
      res.writeHead(reply.status ?? 200, { 'content-type': reply.status && reply.status >= 400 ? 'application/json' : 'text/event-stream', ...reply.headers });
      res.flushHeaders();
      for (const piece of reply.pieces) {
        if (res.destroyed) return;
        res.write(piece);
        await new Promise((r) => setTimeout(r, 2));
      }
      if (reply.drop) res.socket?.destroy();
      else if (!reply.hang) res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return state;
}

const sse = (...chunks: unknown[]) => chunks.map((c) => `data: ${typeof c === 'string' ? c : JSON.stringify(c)}\n\n`);
const chunk = (delta: object | null, finish: string | null = null, extra: object = {}) => ({
  id: 'chatcmpl-7',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm',
  choices: delta === null ? [] : [{ index: 0, delta, finish_reason: finish }],
  ...extra,
});

function request(extra: Partial<LlmRequest> = {}): LlmRequest {
  return { system: 'You are a test agent.', messages: [{ role: 'user', content: 'Hello' }], tools: TOOLS, ...extra };
}

type Outcome = { ok: LlmResponse; deltas: string[] } | { error: { code: string; retryable: boolean; status?: number; detail: string } };

describe('own Chat Completions client, against the AI SDK provider on the same bytes', () => {
  let srv: RawServer;
  const settings = (client: 'own' | 'ai-sdk', extra: Partial<LlmSettings> = {}): LlmSettings => ({
    model: 'openai/raw-model',
    baseUrl: srv.url,
    apiKey: KEY,
    maxAttempts: 1,
    baseDelayMs: 5,
    maxDelayMs: 20,
    chatCompletionsClient: client,
    ...extra,
  });

  /** The reply played to both clients, one after the other: what each returned or threw. */
  async function both(reply: RawReply, req: LlmRequest = request()): Promise<{ own: Outcome; sdk: Outcome }> {
    const run = async (client: 'own' | 'ai-sdk'): Promise<Outcome> => {
      srv.push(reply);
      const deltas: string[] = [];
      try {
        return { ok: await createLlmClient(settings(client)).complete({ ...req, onTextDelta: (d) => deltas.push(d) }), deltas };
      } catch (e) {
        assert.ok(e instanceof ProviderError, `expected a ProviderError, got ${String(e)}`);
        return { error: e.toInfo() };
      }
    };
    return { own: await run('own'), sdk: await run('ai-sdk') };
  }

  before(async () => {
    srv = await startRawServer();
  });
  after(async () => {
    await srv.close();
  });
  beforeEach(() => srv.clear());

  it('sends the same request body as the AI SDK, byte for byte, step after step', async () => {
    const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
    const history: ModelMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Look at this' },
          { type: 'image', image: png, mediaType: 'image/png' },
          { type: 'image', image: 'data:image/jpeg;base64,/9j/4AAQ' },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'reasoning', text: 'thinking' },
          { type: 'text', text: 'I will run it. ' },
          { type: 'tool-call', toolCallId: 'c1', toolName: 'terminal', input: { command: 'ls "a b"\n' } },
          { type: 'tool-call', toolCallId: 'c2', toolName: 'terminal', input: 'not an object' },
        ],
      },
      {
        role: 'tool',
        content: [
          { type: 'tool-result', toolCallId: 'c1', toolName: 'terminal', output: { type: 'text', value: 'a b\nüñí ✓' } },
          { type: 'tool-result', toolCallId: 'c2', toolName: 'terminal', output: { type: 'error-text', value: 'bad arguments' } },
        ],
      },
      { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c3', toolName: 'file_editor', output: { type: 'json', value: { ok: true, n: [1, 2] } } }] },
      { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'c4', toolName: 'file_editor', input: { path: '/w/x' } }] },
      { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c4', toolName: 'file_editor', output: { type: 'execution-denied' } }] },
      { role: 'assistant', content: 'plain text answer' },
      { role: 'user', content: 'next "quoted" \u2028 line' },
    ];
    for (const extra of [{}, { maxOutputTokens: 321, headers: { 'x-title': 'parley-test' } }]) {
      for (const tools of [TOOLS, []]) {
        const own = createLlmClient(settings('own', { ...extra, supportsImages: true }));
        const sdk = createLlmClient(settings('ai-sdk', { ...extra, supportsImages: true }));
        // a growing history, as an agent sends it (the own client reuses each message's JSON)
        for (let k = 1; k <= history.length; k++) {
          const n = srv.bodies.length;
          srv.push({ pieces: sse(chunk({ content: 'ok' }, 'stop')) }, { pieces: sse(chunk({ content: 'ok' }, 'stop')) });
          await own.complete(request({ messages: history.slice(0, k), tools }));
          await sdk.complete(request({ messages: history.slice(0, k), tools }));
          assert.equal(srv.bodies[n], srv.bodies[n + 1], `step ${k}, tools ${tools.length}, ${JSON.stringify(extra)}`);
        }
      }
    }
    const last = JSON.parse(srv.bodies.at(-1)!);
    assert.equal(last.max_tokens, 321);
    assert.equal(last.stream, true);
    assert.deepEqual(last.stream_options, { include_usage: true });
  });

  it('streams text split anywhere (CRLF, comments, UTF-8 characters cut in two) as the AI SDK does', async () => {
    const text = 'Grüße, 世界 🙂 — done.';
    const bytes = Buffer.from(
      sse(
        chunk({ role: 'assistant', content: '' }),
        chunk({ content: text.slice(0, 9) }),
        chunk({ content: text.slice(9) }),
        chunk({}, 'stop'),
        chunk(null, null, { usage: { prompt_tokens: 12, completion_tokens: 5 } }),
        '[DONE]',
      )
        .join('')
        .replace(/\n/g, '\r\n'),
    );
    // cut every few bytes: inside lines, inside "\r\n", inside multi-byte characters
    const pieces: Buffer[] = [Buffer.from(': keep-alive comment\r\n\r\n')];
    for (let i = 0; i < bytes.length; i += 7) pieces.push(bytes.subarray(i, i + 7));
    const { own, sdk } = await both({ pieces });
    assert.ok('ok' in own && 'ok' in sdk, JSON.stringify({ own, sdk }));
    assert.equal(own.ok.text, text);
    assert.equal(own.deltas.join(''), text);
    assert.deepEqual(own.ok, sdk.ok);
    assert.deepEqual(own.ok.usage, { inputTokens: 12, outputTokens: 5, cacheReadTokens: 0 });
    assert.equal(own.ok.responseId, 'chatcmpl-7');
  });

  it('assembles tool calls whose arguments are split across chunks, with usage and cached tokens, as the AI SDK does', async () => {
    const args1 = JSON.stringify({ command: 'echo "hello"' });
    const args2 = JSON.stringify({ path: '/w/hello.txt', file_text: 'hello\nworld ✓\n'.repeat(20) });
    const pieces = sse(
      chunk({ role: 'assistant', content: 'Two calls.' }),
      chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'terminal', arguments: '' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'file_editor', arguments: args2.slice(0, 10) } }] }),
      ...[0, 5, 12].map((at, i, all) => chunk({ tool_calls: [{ index: 0, function: { arguments: args1.slice(at, all[i + 1]) } }] })),
      ...Array.from({ length: Math.ceil((args2.length - 10) / 33) }, (_, i) =>
        chunk({ tool_calls: [{ index: 1, function: { arguments: args2.slice(10 + i * 33, 10 + (i + 1) * 33) } }] }),
      ),
      chunk({}, 'tool_calls'),
      chunk(null, null, { usage: { prompt_tokens: 900, completion_tokens: 80, total_tokens: 980, prompt_tokens_details: { cached_tokens: 768 } } }),
      '[DONE]',
    );
    const { own, sdk } = await both({ pieces });
    assert.ok('ok' in own && 'ok' in sdk, JSON.stringify({ own, sdk }));
    assert.deepEqual(own.ok, sdk.ok);
    assert.equal(own.ok.finishReason, 'tool-calls');
    assert.deepEqual(own.ok.usage, { inputTokens: 900, outputTokens: 80, cacheReadTokens: 768 });
    assert.deepEqual(
      own.ok.toolCalls.map((c) => [c.id, c.name, c.rawInput]),
      [
        ['call_a', 'terminal', args1],
        ['call_b', 'file_editor', args2],
      ],
    );
    // and what goes back into the history is the same object
    assert.deepEqual(toAssistantMessage(own.ok), toAssistantMessage(sdk.ok));
  });

  it('handles the tool-call variants of other servers as the AI SDK does', async () => {
    const variants: [string, unknown[]][] = [
      // arguments before the name, on the same index
      [
        'arguments first',
        [
          chunk({ tool_calls: [{ index: 0, id: 'c1', function: { arguments: '{"command":' } }] }),
          chunk({ tool_calls: [{ index: 0, function: { name: 'terminal', arguments: '"ls"}' } }] }),
          chunk({}, 'tool_calls'),
        ],
      ],
      // every call whole in one chunk, all numbered 0, each with its own id (Ollama-like)
      [
        'index reused',
        [
          chunk({ tool_calls: [{ index: 0, id: 'c1', function: { name: 'terminal', arguments: '{"command":"a"}' } }] }),
          chunk({ tool_calls: [{ index: 0, id: 'c2', function: { name: 'terminal', arguments: '{"command":"b"}' } }] }),
          chunk({}, 'tool_calls'),
        ],
      ],
      // no index at all (Gemini-like), continued by id
      [
        'no index',
        [
          chunk({ tool_calls: [{ id: 'g1', function: { name: 'terminal', arguments: '{"command"' } }] }),
          chunk({ tool_calls: [{ id: 'g1', function: { arguments: ':"x"}' } }] }),
          chunk({ tool_calls: [{ id: 'g2', function: { name: 'file_editor', arguments: '{}' } }] }),
          chunk({}, 'stop'),
        ],
      ],
      // content as an array of parts, an odd finish reason, no usage
      ['content parts', [chunk({ content: [{ type: 'text', text: 'par' }, { type: 'image_url' }, { type: 'text', text: 'ts' }] }), chunk({}, 'length')]],
      ['other reason', [chunk({ content: 'x' }), chunk({}, 'eos_token')]],
    ];
    for (const [name, chunks] of variants) {
      const { own, sdk } = await both({ pieces: sse(...chunks, '[DONE]') });
      assert.ok('ok' in own && 'ok' in sdk, `${name}: ${JSON.stringify({ own, sdk })}`);
      assert.deepEqual(own.ok, sdk.ok, name);
    }
    // calls opened OpenAI-style (name, empty arguments) but all numbered 0: the SDK joins the second into the
    // first (one call with two JSON objects as arguments); a new id is a new call here
    srv.push({
      pieces: sse(
        ...['a', 'b'].flatMap((x) => [
          chunk({ tool_calls: [{ index: 0, id: `c_${x}`, type: 'function', function: { name: 'terminal', arguments: '' } }] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: `{"command":"${x}"}` } }] }),
        ]),
        chunk({}, 'tool_calls'),
        '[DONE]',
      ),
    });
    const res = await createLlmClient(settings('own')).complete(request());
    assert.deepEqual(
      res.toolCalls.map((c) => [c.id, c.input]),
      [
        ['c_a', { command: 'a' }],
        ['c_b', { command: 'b' }],
      ],
    );
  });

  it('classifies HTTP errors, in-stream errors and broken streams as the AI SDK does', async () => {
    const replies: [string, RawReply][] = [
      [
        '429',
        { status: 429, headers: { 'retry-after': '0' }, pieces: ['{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}'] },
      ],
      ['quota', { status: 429, pieces: ['{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}'] }],
      ['500', { status: 500, pieces: ['{"error":{"message":"Internal error"}}'] }],
      ['503 text', { status: 503, headers: { 'content-type': 'text/plain' }, pieces: ['upstream connect error'] }],
      ['401 echoing the key', { status: 401, pieces: [`{"error":{"message":"Incorrect API key provided: ${KEY}","code":"invalid_api_key"}}`] }],
      ['context', { status: 400, pieces: ['{"error":{"message":"This model\'s maximum context length is 8192 tokens","code":"context_length_exceeded"}}'] }],
      ['404 empty', { status: 404, pieces: [] }],
      ['in-stream error', { pieces: sse(chunk({ content: 'half' }), { error: { message: 'The server had an error', type: 'server_error' } }) }],
      ['no finish reason', { pieces: sse(chunk({ content: 'half' }), '[DONE]') }],
      ['dropped', { pieces: sse(chunk({ content: 'half' })), drop: true }],
    ];
    for (const [name, reply] of replies) {
      const { own, sdk } = await both(reply);
      assert.ok('error' in own && 'error' in sdk, `${name}: ${JSON.stringify({ own, sdk })}`);
      assert.equal(own.error.code, sdk.error.code, name);
      assert.equal(own.error.retryable, sdk.error.retryable, name);
      assert.equal(own.error.status, sdk.error.status, name);
      if (name !== 'dropped') assert.equal(own.error.detail, sdk.error.detail, name);
      assert.ok(!own.error.detail.includes(KEY), own.error.detail);
    }
  });

  it('follows a 307/308 redirect with the same body, as fetch did', async () => {
    for (const client of ['own', 'ai-sdk'] as const) {
      srv.push(
        { status: 307, headers: { location: '/moved/v1/chat/completions' }, pieces: [] },
        { status: 308, headers: { location: `${srv.url}/chat/completions?again=1` }, pieces: [] },
        { pieces: sse(chunk({ content: `moved ${client}` }), chunk({}, 'stop'), '[DONE]') },
      );
      const n = srv.bodies.length;
      const res = await createLlmClient(settings(client)).complete(request());
      assert.equal(res.text, `moved ${client}`);
      assert.equal(srv.bodies.length - n, 3);
      assert.equal(new Set(srv.bodies.slice(n)).size, 1, 'the body was sent again unchanged');
    }
  });

  it('ends at a malformed chunk with a clear, retryable error', async () => {
    for (const [bad, why] of [
      ['{"id":"x","choices":[{"delta":{"content":"a"}', /not JSON/],
      ['{"id":"x","choices":[{"delta":{"content":42},"finish_reason":null}]}', /delta\.content is neither a string nor an array/],
      ['{"id":"x","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":7}}]}}]}', /function\.name is not a string/],
      ['{"id":"x"}', /no choices array/],
    ] as const) {
      srv.push({ pieces: sse(chunk({ content: 'ok so far' }), bad, chunk({}, 'stop')) });
      const err = await createLlmClient(settings('own'))
        .complete(request())
        .then(
          () => assert.fail('expected an error'),
          (e: unknown) => e as ProviderError,
        );
      assert.ok(err instanceof ProviderError);
      assert.equal(err.code, 'StreamInterrupted');
      assert.equal(err.retryable, true);
      assert.match(err.detail, /malformed chunk from the provider/);
      assert.match(err.detail, why);
    }
  });

  it('retries a 429 and a 500 with the same backoff rules, then answers', async () => {
    srv.push(
      { status: 429, headers: { 'retry-after-ms': '30' }, pieces: ['{"error":{"message":"slow down"}}'] },
      { status: 500, pieces: ['{"error":{"message":"oops"}}'] },
      { pieces: sse(chunk({ content: 'finally' }), chunk({}, 'stop'), '[DONE]') },
    );
    const n = srv.bodies.length;
    const retries: { code: string; delayMs: number }[] = [];
    const res = await createLlmClient(settings('own', { maxAttempts: 3 })).complete(
      request({ onRetry: (i) => retries.push({ code: i.error.code, delayMs: i.delayMs }) }),
    );
    assert.equal(res.text, 'finally');
    assert.equal(srv.bodies.length - n, 3);
    assert.equal(retries.length, 2);
    assert.deepEqual(retries[0], { code: 'RateLimited', delayMs: 30 });
    assert.equal(retries[1]!.code, 'ProviderUnavailable');
    // every attempt sent the same body
    assert.equal(new Set(srv.bodies.slice(n)).size, 1);
  });

  it('aborts mid-stream at once and closes the connection', async () => {
    srv.push({ pieces: sse(chunk({ content: 'first ' })), hang: true });
    const closed = srv.closed;
    const ac = new AbortController();
    const p = createLlmClient(settings('own')).complete(request({ signal: ac.signal, onTextDelta: () => ac.abort() }));
    await assert.rejects(p, (e: Error) => e.name === 'AbortError');
    // the server sees its response closed (the hanging reply would otherwise stay open)
    for (let i = 0; srv.closed === closed; i++) {
      assert.ok(i < 500, 'the connection was not closed after the abort');
      await new Promise((r) => setTimeout(r, 10));
    }
  });
});
