/**
 * The request half of the own Chat Completions client (chat-completions.ts): the JSON body the AI SDK's
 * openai-compatible provider sends for a prompt, byte for byte (test/llm-chat-completions.test.ts holds
 * the two to it), put together from each prompt message's JSON, made once per message: the prompt
 * converter (prompt.ts) hands in the same message objects step after step, so a step serialises only
 * what is new.
 */
import type { SdkPrompt, SdkTools } from './prompt.js';

type SdkMessage = SdkPrompt[number];
type UserPart = Extract<SdkMessage, { role: 'user' }>['content'][number];
type FilePart = Extract<UserPart, { type: 'file' }>;

/** `providerOptions.openaiCompatible` of a message or part: extra fields the provider puts into its JSON. */
function extraFields(o: { providerOptions?: Record<string, unknown> } | undefined): Record<string, unknown> {
  const extra = o?.providerOptions?.openaiCompatible;
  return extra && typeof extra === 'object' ? (extra as Record<string, unknown>) : {};
}

/**
 * A prompt part Chat Completions cannot carry: the error the SDK's provider throws for it, by name and
 * message (errors.ts classifies it as a bad request by its name), without loading the SDK for it.
 */
class UnsupportedFunctionalityError extends Error {
  override readonly name = 'AI_UnsupportedFunctionalityError';
  readonly functionality: string;

  constructor({ functionality }: { functionality: string }) {
    super(`'${functionality}' functionality not supported.`);
    this.functionality = functionality;
  }
}

function base64(data: Uint8Array | string): string {
  return typeof data === 'string' ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64');
}

function userFilePart(part: FilePart): Record<string, unknown> {
  const extra = extraFields(part);
  const data = part.data;
  if (part.mediaType.startsWith('image/')) {
    const mediaType = part.mediaType === 'image/*' ? 'image/jpeg' : part.mediaType;
    return { type: 'image_url', image_url: { url: data instanceof URL ? data.toString() : `data:${mediaType};base64,${base64(data)}` }, ...extra };
  }
  if (part.mediaType.startsWith('audio/')) {
    if (data instanceof URL) throw new UnsupportedFunctionalityError({ functionality: 'audio file parts with URLs' });
    const format = part.mediaType === 'audio/wav' ? 'wav' : part.mediaType === 'audio/mp3' || part.mediaType === 'audio/mpeg' ? 'mp3' : null;
    if (format === null) throw new UnsupportedFunctionalityError({ functionality: `audio media type ${part.mediaType}` });
    return { type: 'input_audio', input_audio: { data: base64(data), format }, ...extra };
  }
  if (part.mediaType === 'application/pdf') {
    if (data instanceof URL) throw new UnsupportedFunctionalityError({ functionality: 'PDF file parts with URLs' });
    return { type: 'file', file: { filename: part.filename ?? 'document.pdf', file_data: `data:application/pdf;base64,${base64(data)}` }, ...extra };
  }
  if (part.mediaType.startsWith('text/')) {
    const text =
      data instanceof URL ? data.toString() : typeof data === 'string' ? Buffer.from(data, 'base64').toString('utf8') : new TextDecoder().decode(data);
    return { type: 'text', text, ...extra };
  }
  throw new UnsupportedFunctionalityError({ functionality: `file part media type ${part.mediaType}` });
}

/** One prompt message as Chat Completions messages (a tool message gives one per result). */
function chatMessages(message: SdkMessage): Record<string, unknown>[] {
  switch (message.role) {
    case 'system':
      return [{ role: 'system', content: message.content, ...extraFields(message) }];
    case 'user': {
      const first = message.content[0];
      if (message.content.length === 1 && first?.type === 'text') return [{ role: 'user', content: first.text, ...extraFields(first) }];
      const content = message.content.map((part) => (part.type === 'text' ? { type: 'text', text: part.text, ...extraFields(part) } : userFilePart(part)));
      return [{ role: 'user', content, ...extraFields(message) }];
    }
    case 'assistant': {
      let text = '';
      let reasoning = '';
      const toolCalls: Record<string, unknown>[] = [];
      for (const part of message.content) {
        if (part.type === 'text') text += part.text;
        else if (part.type === 'reasoning') reasoning += part.text;
        else if (part.type === 'tool-call') {
          const signature = (part.providerOptions?.google as { thoughtSignature?: unknown } | undefined)?.thoughtSignature;
          toolCalls.push({
            id: part.toolCallId,
            type: 'function',
            function: { name: part.toolName, arguments: JSON.stringify(part.input) },
            ...extraFields(part),
            ...(signature ? { extra_content: { google: { thought_signature: String(signature) } } } : {}),
          });
        }
      }
      return [
        {
          role: 'assistant',
          content: toolCalls.length > 0 ? text || null : text,
          ...(reasoning.length > 0 ? { reasoning_content: reasoning } : {}),
          tool_calls: toolCalls.length > 0 ? toolCalls : undefined,
          ...extraFields(message),
        },
      ];
    }
    case 'tool': {
      const out: Record<string, unknown>[] = [];
      for (const part of message.content) {
        if (part.type !== 'tool-result') continue;
        const output = part.output;
        let content: unknown;
        if (output.type === 'text' || output.type === 'error-text') content = output.value;
        else if (output.type === 'execution-denied') content = output.reason ?? 'Tool call execution denied.';
        else content = JSON.stringify(output.value);
        out.push({ role: 'tool', tool_call_id: part.toolCallId, content, ...extraFields(part) });
      }
      return out;
    }
  }
}

/** Request bodies for one model: each prompt message's JSON is made once (by identity) and kept. */
export class RequestBodies {
  private readonly messageJson = new WeakMap<SdkMessage, string>();
  private readonly toolsJson = new WeakMap<SdkTools, string>();
  private readonly head: string;

  constructor(modelId: string, maxOutputTokens: number | undefined) {
    this.head = `{"model":${JSON.stringify(modelId)}${maxOutputTokens !== undefined ? `,"max_tokens":${JSON.stringify(maxOutputTokens)}` : ''},"messages":[`;
  }

  /** The same JSON text as the AI SDK's openai-compatible provider sends for this prompt (stream: true, usage asked for). */
  body(prompt: SdkPrompt, tools: SdkTools | undefined): string {
    const parts: string[] = [];
    for (const message of prompt) {
      let json = this.messageJson.get(message);
      if (json === undefined) {
        json = chatMessages(message)
          .map((m) => JSON.stringify(m))
          .join(',');
        this.messageJson.set(message, json);
      }
      if (json !== '') parts.push(json);
    }
    let toolPart = '';
    if (tools && tools.length > 0) {
      let json = this.toolsJson.get(tools);
      if (json === undefined) {
        const list = tools.flatMap((t) =>
          t.type === 'function'
            ? [
                {
                  type: 'function',
                  function: { name: t.name, description: t.description, parameters: t.inputSchema, ...(t.strict != null ? { strict: t.strict } : {}) },
                },
              ]
            : [],
        );
        json = `,"tools":${JSON.stringify(list)},"tool_choice":"auto"`;
        this.toolsJson.set(tools, json);
      }
      toolPart = json;
    }
    return `${this.head}${parts.join(',')}]${toolPart},"stream":true,"stream_options":{"include_usage":true}}`;
  }
}
