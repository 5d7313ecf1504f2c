import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { ModelMessage } from 'ai';
import { convertToLanguageModelPrompt } from 'ai/internal';
import { cacheControlProviderOptions, createLlmClient, parseModelString, toAssistantMessage, withCacheControl, type LlmSettings } from '../src/llm/provider.js';
import { ProviderError, parseRetryAfter, scrubSecrets } from '../src/llm/errors.js';
import { ImageResolver } from '../src/llm/image-urls.js';
import { defaultContextWindow, defaultSupportsImages } from '../src/llm/models.js';
import { PromptConverter } from '../src/llm/prompt.js';
import { retryDelayMs } from '../src/llm/retry.js';
import type { LlmRequest, LlmToolSpec, ProviderErrorInfo } from '../src/llm/types.js';
import { startScriptedAnthropic, startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const CANARY_KEY = 'sk-canary-7f3a9c1e5b2d4f6a8c0e';

const TOOLS: LlmToolSpec[] = [
  {
    name: 'terminal',
    description: 'Run a shell command',
    inputSchema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
  {
    name: 'str_replace_editor',
    description: 'Edit files',
    inputSchema: {
      type: 'object',
      properties: { command: { type: 'string' }, path: { type: 'string' }, file_text: { type: 'string' } },
      required: ['command', 'path'],
    },
  },
];

function request(overrides: Partial<LlmRequest> = {}): LlmRequest {
  return {
    system: 'You are a test agent.',
    messages: [{ role: 'user', content: 'Hello' }],
    tools: TOOLS,
    ...overrides,
  };
}

async function expectProviderError(p: Promise<unknown>): Promise<ProviderError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof ProviderError, `expected ProviderError, got ${String(e)}`);
    return e;
  }
  assert.fail('expected the call to fail');
}

describe('model strings and defaults', () => {
  it('parses provider/model and keeps slashes in the model id', () => {
    assert.deepEqual(parseModelString('openai/gpt-4o'), { provider: 'openai', modelId: 'gpt-4o' });
    assert.deepEqual(parseModelString('anthropic/claude-sonnet-4-5'), { provider: 'anthropic', modelId: 'claude-sonnet-4-5' });
    assert.deepEqual(parseModelString('openai/meta-llama/Llama-3.3-70B'), { provider: 'openai', modelId: 'meta-llama/Llama-3.3-70B' });
  });

  it('rejects bad model strings naming the allowed providers', () => {
    assert.throws(() => parseModelString('gpt-4o'), /openai, anthropic/);
    assert.throws(() => parseModelString('openai/'), /openai, anthropic/);
    assert.throws(
      () => parseModelString('mystery/model-x'),
      (e: Error) => /mystery/.test(e.message) && /openai, anthropic/.test(e.message),
    );
    assert.throws(() => createLlmClient({ model: 'nope' }), /provider/);
  });

  it('knows context windows and image support, overridable', () => {
    assert.equal(defaultContextWindow('gpt-4o-mini'), 128_000);
    assert.equal(defaultContextWindow('gpt-4.1'), 1_047_576);
    assert.equal(defaultContextWindow('gpt-5-mini'), 400_000);
    assert.equal(defaultContextWindow('o3-mini'), 200_000);
    assert.equal(defaultContextWindow('claude-3-5-haiku-latest'), 200_000);
    assert.equal(defaultContextWindow('claude-opus-4-1'), 200_000);
    assert.equal(defaultContextWindow('gpt-3.5-turbo'), 16_385);
    assert.equal(defaultContextWindow('llama3.1:8b'), 131_072);
    assert.equal(defaultContextWindow('some-unknown-model'), 128_000);
    assert.equal(defaultSupportsImages('gpt-4o'), true);
    assert.equal(defaultSupportsImages('claude-sonnet-4-5'), true);
    assert.equal(defaultSupportsImages('gpt-3.5-turbo'), false);
    assert.equal(defaultSupportsImages('o1-mini'), false);
    assert.equal(defaultSupportsImages('deepseek-chat'), false);
    assert.equal(defaultSupportsImages('qwen2.5-coder:32b'), false);
    assert.equal(defaultSupportsImages('qwen2.5-vl-7b'), true);
    assert.equal(defaultSupportsImages('llama3.2-vision'), true);
    const c = createLlmClient({ model: 'openai/gpt-3.5-turbo', apiKey: 'x', contextWindow: 5000, supportsImages: true });
    assert.equal(c.contextWindow, 5000);
    assert.equal(c.supportsImages, true);
    assert.equal(c.model, 'openai/gpt-3.5-turbo');
    assert.equal(createLlmClient({ model: 'openai/deepseek-coder', baseUrl: 'http://127.0.0.1:1/v1' }).supportsImages, false);
  });

  it('parses Retry-After (seconds, HTTP date, ms) and computes jittered backoff', () => {
    const now = Date.parse('2025-01-01T00:00:00Z');
    assert.equal(parseRetryAfter({ 'retry-after': '2' }, now), 2000);
    assert.equal(parseRetryAfter({ 'Retry-After': '0.5' }, now), 500);
    assert.equal(parseRetryAfter({ 'retry-after': 'Wed, 01 Jan 2025 00:00:03 GMT' }, now), 3000);
    assert.equal(parseRetryAfter({ 'retry-after-ms': '150', 'retry-after': '9' }, now), 150);
    assert.equal(parseRetryAfter({}, now), undefined);
    const s = { baseDelayMs: 100, maxDelayMs: 1000, maxRetryAfterMs: 5000 };
    assert.equal(
      retryDelayMs(1, s, undefined, () => 0),
      50,
    );
    assert.equal(
      retryDelayMs(1, s, undefined, () => 1),
      100,
    );
    assert.equal(
      retryDelayMs(3, s, undefined, () => 1),
      400,
    );
    assert.equal(
      retryDelayMs(10, s, undefined, () => 1),
      1000,
    );
    assert.equal(retryDelayMs(1, s, 2500), 2500);
    assert.equal(retryDelayMs(1, s, 60_000), 5000);
  });

  it('scrubs keys from texts', () => {
    assert.equal(scrubSecrets(`bad key ${CANARY_KEY}!`, CANARY_KEY), 'bad key <secret_hidden>!');
    assert.ok(!scrubSecrets('Authorization: Bearer abcdefghijklmnop').includes('abcdefghijklmnop'));
    assert.ok(!scrubSecrets('key sk-ant-api03-AAAABBBBCCCCDDDD').includes('AAAABBBBCCCCDDDD'));
  });
});

describe('prompt conversion', () => {
  const converter = () =>
    new PromptConverter({ supportsImages: true, textOnlyToolResults: false, images: new ImageResolver(() => ({})), supportedUrls: () => ({}) });
  const cache = cacheControlProviderOptions();
  const history: ModelMessage[] = [
    { role: 'user', content: 'Hello' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'a' },
        { type: 'text', text: '' },
      ],
      providerOptions: cache,
    },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: '' },
        { type: 'reasoning', text: 'hmm' },
        { type: 'text', text: 'x' },
        { type: 'tool-call', toolCallId: 'c1', toolName: 't', input: { a: 1 } },
        { type: 'tool-call', toolCallId: 'c2', toolName: 't', input: { a: 2 } },
      ],
    },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c1', toolName: 't', output: { type: 'text', value: 'r1' } }], providerOptions: cache },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c2', toolName: 't', output: { type: 'error-text', value: 'r2' } }] },
    { role: 'assistant', content: 'plain' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'img' },
        { type: 'image', image: 'data:image/png;base64,iVBORw0KGgo=' },
      ],
    },
  ];

  it('converts a history as the AI SDK does, without its validation pass', async () => {
    const sdk = await convertToLanguageModelPrompt({ prompt: { system: 'S', messages: history }, supportedUrls: {}, download: undefined });
    assert.deepStrictEqual(await converter().prompt('S', undefined, history), sdk);
  });

  it('converts a longer history of the same conversation from where the last one left off, and one that differs from where it differs', async () => {
    const c = converter();
    for (let i = 1; i <= history.length; i++) {
      assert.deepStrictEqual(await c.prompt('S', undefined, history.slice(0, i)), await converter().prompt('S', undefined, history.slice(0, i)), `first ${i}`);
    }
    // a message in the middle of a run of tool messages (which are joined into one) and at the end
    const changed: ModelMessage[] = [...history.slice(0, 4), { role: 'user', content: 'between' }, ...history.slice(4, 6), { role: 'user', content: 'last' }];
    const fresh = await converter().prompt('S', undefined, changed);
    assert.deepStrictEqual(await c.prompt('S', undefined, changed), fresh);
    assert.deepStrictEqual(await c.prompt('S', undefined, history), await converter().prompt('S', undefined, history));
    // what one call returned is not changed by the next
    const before = structuredClone(fresh);
    const again = await c.prompt('S', undefined, changed);
    await c.prompt('T', undefined, [...changed, { role: 'assistant', content: 'more' }]);
    assert.deepStrictEqual(again, before);
  });
});

describe('OpenAI-compatible provider against the scripted server', () => {
  let llm: ScriptedLlm;
  const settings = (extra: Partial<LlmSettings> = {}): LlmSettings => ({
    model: 'openai/scripted-model',
    baseUrl: llm.url,
    apiKey: CANARY_KEY,
    baseDelayMs: 10,
    maxDelayMs: 50,
    ...extra,
  });

  before(async () => {
    llm = await startScriptedLlm();
  });
  after(async () => {
    await llm.close();
  });

  it('streams text with deltas and reports usage', async () => {
    llm.push({ text: 'The quick brown fox jumps over the lazy dog.', usage: { prompt_tokens: 42, completion_tokens: 11 } });
    const deltas: string[] = [];
    const n = llm.requests.length;
    const res = await createLlmClient(settings()).complete(request({ onTextDelta: (d) => deltas.push(d) }));
    assert.equal(res.text, 'The quick brown fox jumps over the lazy dog.');
    assert.ok(deltas.length > 3, `expected several deltas, got ${deltas.length}`);
    assert.equal(deltas.join(''), res.text);
    assert.deepEqual(res.toolCalls, []);
    assert.equal(res.finishReason, 'stop');
    assert.equal(res.usage.inputTokens, 42);
    assert.equal(res.usage.outputTokens, 11);
    assert.match(res.responseId ?? '', /^chatcmpl_scripted_/);

    const sent = llm.requests[n]!;
    assert.equal(sent.path, '/v1/chat/completions');
    assert.equal(sent.headers.authorization, `Bearer ${CANARY_KEY}`);
    assert.equal(sent.body.model, 'scripted-model');
    assert.equal(sent.body.stream, true);
    assert.deepEqual(sent.body.messages[0], { role: 'system', content: 'You are a test agent.' });
    assert.deepEqual(sent.body.messages[1], { role: 'user', content: 'Hello' });
    assert.deepEqual(
      sent.body.tools.map((t: any) => t.function.name),
      ['terminal', 'str_replace_editor'],
    );
    assert.deepEqual(sent.body.tools[0].function.parameters, TOOLS[0]!.inputSchema);
  });

  it('returns a single tool call with parsed input and raw arguments', async () => {
    llm.push({ text: 'Listing files.', toolCalls: [{ id: 'call_abc', name: 'terminal', arguments: { command: 'ls -la /tmp' } }] });
    const res = await createLlmClient(settings()).complete(request());
    assert.equal(res.text, 'Listing files.');
    assert.equal(res.finishReason, 'tool-calls');
    assert.deepEqual(res.toolCalls, [{ id: 'call_abc', name: 'terminal', input: { command: 'ls -la /tmp' }, rawInput: '{"command":"ls -la /tmp"}' }]);
  });

  it('returns several tool calls from one response (arguments split across chunks)', async () => {
    const longText = 'x'.repeat(200);
    llm.push({
      toolCalls: [
        { name: 'terminal', arguments: { command: 'echo "one two three"' } },
        { name: 'str_replace_editor', arguments: { command: 'create', path: '/w/a.txt', file_text: longText } },
        { name: 'terminal', arguments: { command: 'cat /w/a.txt' } },
      ],
    });
    const res = await createLlmClient(settings()).complete(request());
    assert.equal(res.text, '');
    assert.equal(res.toolCalls.length, 3);
    assert.deepEqual(
      res.toolCalls.map((c) => c.name),
      ['terminal', 'str_replace_editor', 'terminal'],
    );
    assert.deepEqual(res.toolCalls[1]!.input, { command: 'create', path: '/w/a.txt', file_text: longText });
    assert.equal(new Set(res.toolCalls.map((c) => c.id)).size, 3);
    for (const c of res.toolCalls) assert.equal(c.error, undefined);
  });

  it('returns invalid JSON arguments and unknown tools as tool calls with an error, not a throw', async () => {
    llm.push({
      text: 'Trying.',
      toolCalls: [
        { id: 'call_bad', name: 'terminal', arguments: '{"command": "ls' },
        { id: 'call_unknown', name: 'browse_web', arguments: { url: 'http://x' } },
        { id: 'call_ok', name: 'terminal', arguments: { command: 'pwd' } },
      ],
    });
    const res = await createLlmClient(settings()).complete(request());
    assert.equal(res.toolCalls.length, 3);
    const [bad, unknown, ok] = res.toolCalls;
    assert.equal(bad!.id, 'call_bad');
    assert.equal(bad!.name, 'terminal');
    assert.equal(bad!.input, '{"command": "ls');
    assert.equal(bad!.rawInput, '{"command": "ls');
    assert.match(bad!.error ?? '', /not valid JSON/);
    assert.equal(unknown!.name, 'browse_web');
    assert.deepEqual(unknown!.input, { url: 'http://x' });
    assert.match(unknown!.error ?? '', /Unknown tool "browse_web".*terminal, str_replace_editor/);
    assert.deepEqual(ok!.input, { command: 'pwd' });
    assert.equal(ok!.error, undefined);

    // The history can carry the invalid call back to the provider.
    const assistant = toAssistantMessage(res);
    const n = llm.requests.length;
    llm.push({ text: 'ok' });
    await createLlmClient(settings()).complete(
      request({
        messages: [
          { role: 'user', content: 'Hello' },
          assistant,
          {
            role: 'tool',
            content: res.toolCalls.map((c) => ({
              type: 'tool-result' as const,
              toolCallId: c.id,
              toolName: c.name,
              output: c.error ? { type: 'error-text' as const, value: c.error } : { type: 'text' as const, value: '/w' },
            })),
          },
        ],
      }),
    );
    const msgs = llm.requests[n]!.body.messages;
    const asst = msgs.find((m: any) => m.role === 'assistant');
    assert.equal(asst.tool_calls.length, 3);
    assert.deepEqual(JSON.parse(asst.tool_calls[0].function.arguments), { invalid_arguments: '{"command": "ls' });
    const toolMsgs = msgs.filter((m: any) => m.role === 'tool');
    assert.equal(toolMsgs.length, 3);
    assert.equal(toolMsgs[0].tool_call_id, 'call_bad');
    assert.match(toolMsgs[0].content, /not valid JSON/);
  });

  it('works without tools', async () => {
    llm.push({ text: 'plain' });
    const n = llm.requests.length;
    const res = await createLlmClient(settings()).complete(request({ tools: [] }));
    assert.equal(res.text, 'plain');
    assert.equal(llm.requests[n]!.body.tools, undefined);
  });

  it('retries a 429 honouring Retry-After', async () => {
    llm.push({ error: { status: 429, headers: { 'retry-after': '0.25' } } }, { text: 'after rate limit' });
    const retries: { attempt: number; delayMs: number; error: ProviderErrorInfo }[] = [];
    const t0 = Date.now();
    const res = await createLlmClient(settings()).complete(request({ onRetry: (i) => retries.push(i) }));
    const elapsed = Date.now() - t0;
    assert.equal(res.text, 'after rate limit');
    assert.equal(retries.length, 1);
    assert.equal(retries[0]!.attempt, 1);
    assert.equal(retries[0]!.delayMs, 250);
    assert.equal(retries[0]!.error.code, 'RateLimited');
    assert.equal(retries[0]!.error.status, 429);
    assert.equal(retries[0]!.error.retryable, true);
    assert.ok(elapsed >= 240, `waited only ${elapsed} ms`);
  });

  it('honours retry-after-ms', async () => {
    llm.push({ error: { status: 429, headers: { 'retry-after-ms': '120' } } }, { text: 'ok' });
    const retries: number[] = [];
    await createLlmClient(settings()).complete(request({ onRetry: (i) => retries.push(i.delayMs) }));
    assert.deepEqual(retries, [120]);
  });

  it('retries 500s and dropped streams', async () => {
    llm.push(
      { error: { status: 500 } },
      { error: { status: 503, body: 'upstream connect error' } },
      { dropStream: true, text: 'partial text here' },
      {
        text: 'finally',
      },
    );
    const codes: string[] = [];
    const deltas: string[] = [];
    const n = llm.requests.length;
    const res = await createLlmClient(settings()).complete(request({ onRetry: (i) => codes.push(i.error.code), onTextDelta: (d) => deltas.push(d) }));
    assert.equal(res.text, 'finally');
    assert.deepEqual(codes, ['ProviderUnavailable', 'ProviderUnavailable', 'StreamInterrupted']);
    assert.equal(llm.requests.length - n, 4);
    // Deltas of the dropped attempt were streamed before the retry; the final text is complete.
    assert.ok(deltas.join('').endsWith('finally'));
  });

  it('gives up after maxAttempts with a retryable error code', async () => {
    llm.push({ error: { status: 502 } }, { error: { status: 502 } }, { error: { status: 502 } }, { text: 'never reached' });
    const n = llm.requests.length;
    const retries: number[] = [];
    const err = await expectProviderError(createLlmClient(settings({ maxAttempts: 3 })).complete(request({ onRetry: (i) => retries.push(i.attempt) })));
    assert.equal(err.code, 'ProviderUnavailable');
    assert.equal(err.retryable, true);
    assert.equal(err.status, 502);
    assert.equal(err.attempts, 3);
    assert.match(err.detail, /gave up after 3 attempts/);
    assert.deepEqual(retries, [1, 2]);
    assert.equal(llm.requests.length - n, 3);
    assert.equal(llm.pending(), 1);
    llm.push(); // (the leftover reply is consumed by the next test)
    await createLlmClient(settings()).complete(request());
  });

  it('does not retry 401 and never leaks the API key', async () => {
    llm.push({ error: { status: 401 } }, { text: 'not reached' });
    const n = llm.requests.length;
    let retried = false;
    const err = await expectProviderError(createLlmClient(settings()).complete(request({ onRetry: () => (retried = true) })));
    assert.equal(retried, false);
    assert.equal(llm.requests.length - n, 1);
    assert.equal(err.code, 'AuthenticationFailed');
    assert.equal(err.retryable, false);
    assert.equal(err.status, 401);
    // The scripted server echoed the key in its body: it must be gone from everything we expose.
    for (const text of [err.detail, err.message, String(err), err.stack ?? '', JSON.stringify(err), JSON.stringify(err.toInfo())]) {
      assert.ok(!text.includes(CANARY_KEY), `key leaked in: ${text}`);
      assert.ok(!text.includes(CANARY_KEY.slice(3)), `key leaked in: ${text}`);
    }
    assert.match(err.detail, /Incorrect API key provided: <secret_hidden>/);
    await createLlmClient(settings()).complete(request()); // consume 'not reached'
  });

  it('scrubs the key from any error body (e.g. a 500 echoing the request)', async () => {
    llm.push({ error: { status: 400, body: (r) => ({ error: { message: `bad header Authorization: ${r.headers.authorization}` } }) } });
    const err = await expectProviderError(createLlmClient(settings()).complete(request()));
    assert.equal(err.code, 'BadRequest');
    assert.ok(!err.detail.includes(CANARY_KEY), err.detail);
  });

  it('does not retry a context-window error', async () => {
    llm.push({
      error: {
        status: 400,
        body: {
          error: {
            message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.",
            type: 'invalid_request_error',
            code: 'context_length_exceeded',
          },
        },
      },
    });
    const n = llm.requests.length;
    const err = await expectProviderError(createLlmClient(settings()).complete(request({ onRetry: () => assert.fail('retried') })));
    assert.equal(err.code, 'ContextWindowExceeded');
    assert.equal(err.retryable, false);
    assert.equal(err.status, 400);
    assert.match(err.detail, /maximum context length/);
    assert.equal(llm.requests.length - n, 1);
  });

  it('does not retry other bad requests (400/404/422)', async () => {
    for (const status of [400, 404, 422]) {
      llm.push({ error: { status } });
      const err = await expectProviderError(createLlmClient(settings()).complete(request({ onRetry: () => assert.fail('retried') })));
      assert.equal(err.code, 'BadRequest');
      assert.equal(err.status, status);
    }
  });

  it('aborts a hanging request immediately with an AbortError', async () => {
    llm.push({ delayMs: 5000, text: 'too late' });
    const n = llm.requests.length;
    const ac = new AbortController();
    const p = createLlmClient(settings()).complete(request({ signal: ac.signal, onRetry: () => assert.fail('retried') }));
    await llm.waitForRequests(n + 1);
    const t0 = Date.now();
    ac.abort();
    await assert.rejects(p, (e: Error) => e.name === 'AbortError');
    assert.ok(Date.now() - t0 < 500, 'abort took too long');
    assert.equal(llm.requests.length, n + 1);
  });

  it('aborts mid-stream and during a backoff wait', async () => {
    llm.push({ text: 'one two three four five six seven eight nine ten', chunkDelayMs: 100 });
    const ac = new AbortController();
    const deltas: string[] = [];
    const p = createLlmClient(settings()).complete(
      request({
        signal: ac.signal,
        onTextDelta: (d) => {
          deltas.push(d);
          if (deltas.length === 2) ac.abort();
        },
      }),
    );
    await assert.rejects(p, (e: Error) => e.name === 'AbortError');
    assert.ok(deltas.length < 5);

    llm.push({ error: { status: 429, headers: { 'retry-after': '10' } } });
    const ac2 = new AbortController();
    const t0 = Date.now();
    const p2 = createLlmClient(settings()).complete(request({ signal: ac2.signal, onRetry: () => setTimeout(() => ac2.abort(), 20) }));
    await assert.rejects(p2, (e: Error) => e.name === 'AbortError');
    assert.ok(Date.now() - t0 < 2000);

    const ac3 = new AbortController();
    ac3.abort();
    const n = llm.requests.length;
    await assert.rejects(createLlmClient(settings()).complete(request({ signal: ac3.signal })), { name: 'AbortError' });
    assert.equal(llm.requests.length, n);
  });

  it('retries after an idle timeout', async () => {
    llm.push({ delayMs: 2000, text: 'slow' }, { text: 'fast' });
    const codes: string[] = [];
    const res = await createLlmClient(settings({ timeoutMs: 150 })).complete(request({ onRetry: (i) => codes.push(i.error.code) }));
    assert.equal(res.text, 'fast');
    assert.deepEqual(codes, ['Timeout']);
  });

  it('passes the exception of a throwing onTextDelta through without retrying', async () => {
    llm.push({ text: 'a b c' });
    const boom = new Error('callback bug');
    await assert.rejects(
      createLlmClient(settings()).complete(
        request({
          onTextDelta: () => {
            throw boom;
          },
          onRetry: () => assert.fail('retried'),
        }),
      ),
      (e) => e === boom,
    );
  });

  it('replaces images for text-only models and sends them to vision models', async () => {
    const png = Buffer.from('89504e470d0a1a0a', 'hex');
    const messages: ModelMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image', image: png, mediaType: 'image/png' },
        ],
      },
    ];
    llm.push({ text: 'no eyes' }, { text: 'a png' });
    const n = llm.requests.length;
    await createLlmClient(settings({ supportsImages: false })).complete(request({ messages }));
    await createLlmClient(settings({ supportsImages: true })).complete(request({ messages }));
    const textOnly = JSON.stringify(llm.requests[n]!.body.messages);
    const vision = JSON.stringify(llm.requests[n + 1]!.body.messages);
    assert.ok(!textOnly.includes('image_url'));
    assert.match(textOnly, /image omitted/);
    assert.match(vision, /image_url/);
    assert.match(vision, /data:image\/png;base64,/);
  });

  it('moves tool-result images into a user message for Chat Completions', async () => {
    const b64 = Buffer.from('89504e470d0a1a0a', 'hex').toString('base64');
    llm.push({ text: 'I see a screenshot' });
    const n = llm.requests.length;
    await createLlmClient(settings({ supportsImages: true })).complete(
      request({
        messages: [
          { role: 'user', content: 'Take a screenshot' },
          { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_s', toolName: 'terminal', input: { command: 'shot' } }] },
          {
            role: 'tool',
            content: [
              {
                type: 'tool-result',
                toolCallId: 'call_s',
                toolName: 'terminal',
                output: {
                  type: 'content',
                  value: [
                    { type: 'text', text: 'saved shot.png' },
                    { type: 'image-data', data: b64, mediaType: 'image/png' },
                  ],
                },
              },
            ],
          },
        ],
      }),
    );
    const msgs = llm.requests[n]!.body.messages;
    assert.deepEqual(
      msgs.map((m: any) => m.role),
      ['system', 'user', 'assistant', 'tool', 'user'],
    );
    assert.match(msgs[3].content, /^saved shot\.png\n\[1 image attached in the next user message\]$/);
    assert.ok(!msgs[3].content.includes(b64));
    const imagePart = msgs[4].content.find((c: any) => c.type === 'image_url');
    assert.equal(imagePart.image_url.url, `data:image/png;base64,${b64}`);
  });

  it('retries an error reported inside a 200 stream', async () => {
    llm.push({ text: 'half an', streamError: { message: 'The server had an error while processing your request.', type: 'server_error' } }, { text: 'whole' });
    const codes: string[] = [];
    const res = await createLlmClient(settings()).complete(request({ onRetry: (i) => codes.push(i.error.code) }));
    assert.equal(res.text, 'whole');
    assert.deepEqual(codes, ['ProviderUnavailable']);
  });

  it('reports a network error as retryable ProviderUnavailable', async () => {
    const dead = http.createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
    const port = (dead.address() as AddressInfo).port;
    await new Promise<void>((r) => dead.close(() => r()));
    const codes: string[] = [];
    const err = await expectProviderError(
      createLlmClient({ model: 'openai/x', baseUrl: `http://127.0.0.1:${port}/v1`, maxAttempts: 2, baseDelayMs: 5 }).complete(
        request({ onRetry: (i) => codes.push(i.error.code) }),
      ),
    );
    assert.equal(err.code, 'ProviderUnavailable');
    assert.equal(err.retryable, true);
    assert.deepEqual(codes, ['ProviderUnavailable']);
  });

  it('serves non-streaming completions, /v1/models and the exhausted reply', async () => {
    llm.push({ text: 'json answer', toolCalls: [{ name: 'terminal', arguments: { command: 'ls' } }] });
    const r = await fetch(`${llm.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    const j = (await r.json()) as any;
    assert.equal(j.object, 'chat.completion');
    assert.equal(j.choices[0].message.content, 'json answer');
    assert.equal(j.choices[0].message.tool_calls[0].function.arguments, '{"command":"ls"}');
    assert.equal(j.choices[0].finish_reason, 'tool_calls');
    assert.ok(j.usage.prompt_tokens > 0 && j.usage.completion_tokens > 0);

    const models = (await (await fetch(`${llm.url}/models`)).json()) as any;
    assert.equal(models.data[0].id, 'scripted');

    assert.equal(llm.pending(), 0);
    const res = await createLlmClient(settings()).complete(request());
    assert.equal(res.text, '(script exhausted)');
  });

  it('supports reply functions that see the request', async () => {
    llm.push((req) => ({ text: `you said: ${req.body.messages.at(-1).content}` }));
    const res = await createLlmClient(settings()).complete(request({ messages: [{ role: 'user', content: 'ping' }] }));
    assert.equal(res.text, 'you said: ping');
  });
});

describe('Anthropic provider against a scripted Messages API', () => {
  let llm: ScriptedLlm;
  const settings = (extra: Partial<LlmSettings> = {}): LlmSettings => ({
    model: 'anthropic/claude-sonnet-4-5',
    baseUrl: llm.url,
    apiKey: CANARY_KEY,
    baseDelayMs: 10,
    ...extra,
  });

  before(async () => {
    llm = await startScriptedAnthropic();
  });
  after(async () => {
    await llm.close();
  });

  it('streams text and tool calls; sends cache control for the system prompt and marked messages', async () => {
    llm.push({ text: 'Let me check.', toolCalls: [{ id: 'toolu_1', name: 'terminal', arguments: { command: 'git status' } }] });
    const deltas: string[] = [];
    const messages: ModelMessage[] = [
      withCacheControl({ role: 'user', content: 'First question' }),
      { role: 'assistant', content: [{ type: 'text', text: 'First answer' }] },
      { role: 'user', content: [{ type: 'text', text: 'Second question' }], providerOptions: cacheControlProviderOptions() },
    ];
    const res = await createLlmClient(settings()).complete(request({ messages, onTextDelta: (d) => deltas.push(d) }));
    assert.equal(res.text, 'Let me check.');
    assert.ok(deltas.length >= 2);
    assert.deepEqual(res.toolCalls, [{ id: 'toolu_1', name: 'terminal', input: { command: 'git status' }, rawInput: '{"command":"git status"}' }]);
    assert.equal(res.finishReason, 'tool-calls');
    assert.ok((res.usage.inputTokens ?? 0) > 0);

    const sent = llm.requests.at(-1)!;
    assert.equal(sent.path, '/v1/messages');
    assert.equal(sent.headers['x-api-key'], CANARY_KEY);
    assert.ok(sent.headers['anthropic-version']);
    assert.equal(sent.body.model, 'claude-sonnet-4-5');
    assert.equal(sent.body.stream, true);
    assert.ok(sent.body.max_tokens > 0);
    assert.deepEqual(sent.body.system, [{ type: 'text', text: 'You are a test agent.', cache_control: { type: 'ephemeral' } }]);
    assert.deepEqual(
      sent.body.tools.map((t: any) => t.name),
      ['terminal', 'str_replace_editor'],
    );
    assert.deepEqual(sent.body.tools[0].input_schema, TOOLS[0]!.inputSchema);
    const [m1, m2, m3] = sent.body.messages;
    assert.equal(m1.role, 'user');
    assert.deepEqual(m1.content.at(-1).cache_control, { type: 'ephemeral' });
    assert.equal(m2.role, 'assistant');
    assert.equal(m2.content.at(-1).cache_control, undefined);
    assert.deepEqual(m3.content.at(-1).cache_control, { type: 'ephemeral' });
  });

  it('round-trips tool calls and results (invalid input sent back as an object)', async () => {
    llm.push({ toolCalls: [{ id: 'toolu_bad', name: 'terminal', arguments: '{"command": ' }] });
    const first = await createLlmClient(settings()).complete(request());
    assert.equal(first.toolCalls[0]!.input, '{"command": ');
    assert.match(first.toolCalls[0]!.error ?? '', /not valid JSON/);

    llm.push({ text: 'Sorry, fixed.' });
    const res = await createLlmClient(settings({ cacheSystemPrompt: false })).complete(
      request({
        messages: [
          { role: 'user', content: 'Hello' },
          toAssistantMessage(first),
          {
            role: 'tool',
            content: [
              { type: 'tool-result', toolCallId: 'toolu_bad', toolName: 'terminal', output: { type: 'error-text', value: first.toolCalls[0]!.error! } },
            ],
          },
        ],
      }),
    );
    assert.equal(res.text, 'Sorry, fixed.');
    const sent = llm.requests.at(-1)!.body;
    assert.equal(sent.system[0].cache_control, undefined);
    const toolUse = sent.messages[1].content.find((c: any) => c.type === 'tool_use');
    assert.deepEqual(toolUse.input, { invalid_arguments: '{"command": ' });
    const toolResult = sent.messages[2].content.find((c: any) => c.type === 'tool_result');
    assert.equal(toolResult.tool_use_id, 'toolu_bad');
    assert.equal(toolResult.is_error, true);
  });

  it('retries overloaded (529) and classifies prompt-too-long and auth errors', async () => {
    llm.push({ error: { status: 529 } }, { text: 'ok' });
    const codes: string[] = [];
    const res = await createLlmClient(settings()).complete(request({ onRetry: (i) => codes.push(i.error.code) }));
    assert.equal(res.text, 'ok');
    assert.deepEqual(codes, ['ProviderUnavailable']);

    llm.push({
      error: { status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 210000 tokens > 200000 maximum' } } },
    });
    const ctx = await expectProviderError(createLlmClient(settings()).complete(request()));
    assert.equal(ctx.code, 'ContextWindowExceeded');

    llm.push({ error: { status: 401 } });
    const auth = await expectProviderError(createLlmClient(settings()).complete(request()));
    assert.equal(auth.code, 'AuthenticationFailed');
    assert.ok(!JSON.stringify(auth).includes(CANARY_KEY) && !auth.detail.includes(CANARY_KEY));
  });

  it('retries an overloaded_error event inside the stream', async () => {
    llm.push({ text: 'partial', streamError: { type: 'overloaded_error', message: 'Overloaded' } }, { text: 'done' });
    const codes: string[] = [];
    const res = await createLlmClient(settings()).complete(request({ onRetry: (i) => codes.push(i.error.code) }));
    assert.equal(res.text, 'done');
    assert.deepEqual(codes, ['ProviderUnavailable']);
  });

  it('retries a dropped Anthropic stream', async () => {
    llm.push({ dropStream: true }, { text: 'whole answer' });
    const codes: string[] = [];
    const res = await createLlmClient(settings()).complete(request({ onRetry: (i) => codes.push(i.error.code) }));
    assert.equal(res.text, 'whole answer');
    assert.deepEqual(codes, ['StreamInterrupted']);
  });
});
