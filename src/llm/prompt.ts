/**
 * The history in the provider's terms (the AI SDK's LanguageModelV3 prompt), converted once per
 * message. `streamText` re-validated (zod) and re-converted the whole history at every step, which
 * made a step cost as much as the history was long; here each message is converted the first time
 * it is sent and kept (by identity: callers hand in the same, unchanged message objects step after
 * step, as the agent's MessageView does), so a step converts only what is new.
 *
 * On the way each message is made safe to send:
 * - tool-call inputs that are not JSON objects become `{ invalid_arguments: "<raw>" }` (Anthropic
 *   requires an object there);
 * - for text-only models, images become a short note;
 * - for Chat Completions (a `tool` message holds only text), images of tool results move into one
 *   user message placed after the run of tool messages, and text-only rich outputs become text;
 * - image URLs the model cannot fetch itself are downloaded (or replaced by a note, see ImageResolver).
 * Messages with media go through the AI SDK's own converter (one message at a time, the SDK loaded on
 * the first); plain text, tool calls and text tool results, nearly every message of a conversation,
 * are converted here.
 */
import type { ModelMessage } from 'ai';
import type { ImageResolver } from './image-urls.js';
import type { SdkLanguageModel } from './models.js';
import type { LlmToolSpec } from './types.js';
import { loadAiInternal } from './sdk.js';

type CallOptions = Parameters<SdkLanguageModel['doStream']>[0];
export type SdkPrompt = CallOptions['prompt'];
type SdkMessage = SdkPrompt[number];
type SdkUserPart = Extract<SdkMessage, { role: 'user' }>['content'][number];
type SdkToolMessage = Extract<SdkMessage, { role: 'tool' }>;
export type SdkTools = NonNullable<CallOptions['tools']>;

type UserPart = Exclude<Extract<ModelMessage, { role: 'user' }>['content'], string>[number];
type AssistantMessage = Extract<ModelMessage, { role: 'assistant' }>;
type ToolMessage = Extract<ModelMessage, { role: 'tool' }>;
type ToolResultPart = Extract<ToolMessage['content'][number], { type: 'tool-result' }>;
type ContentItem = Extract<ToolResultPart['output'], { type: 'content' }>['value'][number];

const IMAGE_OMITTED = '[image omitted: this model does not accept images]';

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A tool call's input as providers accept it: an object (anything else is sent as `{ invalid_arguments }`). */
export function safeToolInput(input: unknown, raw?: string): Record<string, unknown> {
  if (isPlainObject(input)) return input;
  const text = raw ?? (typeof input === 'string' ? input : JSON.stringify(input ?? null));
  return { invalid_arguments: text };
}

const isImageMediaType = (mediaType: unknown) => typeof mediaType === 'string' && mediaType.toLowerCase().startsWith('image/');

function isImageItem(item: ContentItem): boolean {
  return (
    item.type === 'image-data' ||
    item.type === 'image-url' ||
    item.type === 'image-file-id' ||
    ((item.type === 'media' || item.type === 'file-data' || item.type === 'file-url') && isImageMediaType(item.mediaType))
  );
}

/** Non-object tool-call inputs wrapped and, for text-only models, image parts replaced by a note. */
function prepare(message: ModelMessage, supportsImages: boolean): ModelMessage {
  if (message.role === 'assistant' && Array.isArray(message.content)) {
    if (message.content.every((p) => p.type !== 'tool-call' || isPlainObject(p.input))) return message;
    return {
      ...message,
      content: message.content.map((p) => (p.type === 'tool-call' && !isPlainObject(p.input) ? { ...p, input: safeToolInput(p.input) } : p)),
    };
  }
  if (supportsImages) return message;
  if (message.role === 'user' && Array.isArray(message.content)) {
    const isImage = (p: UserPart) => p.type === 'image' || (p.type === 'file' && isImageMediaType(p.mediaType));
    if (!message.content.some(isImage)) return message;
    return { ...message, content: message.content.map((p) => (isImage(p) ? { type: 'text' as const, text: IMAGE_OMITTED } : p)) };
  }
  if (message.role === 'tool') {
    const hasImage = message.content.some((p) => p.type === 'tool-result' && p.output.type === 'content' && p.output.value.some(isImageItem));
    if (!hasImage) return message;
    const content = message.content.map((p) => {
      if (p.type !== 'tool-result' || p.output.type !== 'content') return p;
      return {
        ...p,
        output: { ...p.output, value: p.output.value.map((item) => (isImageItem(item) ? { type: 'text' as const, text: IMAGE_OMITTED } : item)) },
      };
    });
    return { ...message, content };
  }
  return message;
}

/** An image item of a tool result as a user-message image part (undefined when it is not an image). */
function toImagePart(item: ContentItem): UserPart | undefined {
  switch (item.type) {
    case 'image-data':
      return { type: 'image', image: item.data, mediaType: item.mediaType };
    case 'media':
    case 'file-data':
      return isImageMediaType(item.mediaType) ? { type: 'image', image: item.data, mediaType: item.mediaType } : undefined;
    case 'image-url':
      return { type: 'image', image: new URL(item.url) };
    case 'file-url':
      return isImageMediaType(item.mediaType) ? { type: 'image', image: new URL(item.url), mediaType: item.mediaType } : undefined;
    default:
      return undefined;
  }
}

/**
 * For Chat Completions: a `tool` message can only hold text, and the AI SDK would JSON-encode rich tool output
 * (base64 images included: a token bomb). So text-only `content` outputs become plain text, and the images
 * of the results are returned, to go into one user message after the run of tool messages.
 */
function liftImages(message: ToolMessage): { message: ToolMessage; images: UserPart[] } {
  const images: UserPart[] = [];
  if (!message.content.some((p) => p.type === 'tool-result' && p.output.type === 'content')) return { message, images };
  const content = message.content.map((part) => {
    if (part.type !== 'tool-result' || part.output.type !== 'content') return part;
    const rest: ContentItem[] = [];
    const own: UserPart[] = [];
    for (const item of part.output.value) {
      const image = toImagePart(item);
      if (image) own.push(image);
      else rest.push(item);
    }
    if (own.length > 0) {
      images.push({ type: 'text', text: `${own.length === 1 ? 'Image' : 'Images'} returned by tool call ${part.toolCallId} (${part.toolName}):` }, ...own);
      rest.push({ type: 'text', text: `[${own.length} image${own.length === 1 ? '' : 's'} attached in the next user message]` });
    }
    if (rest.every((item) => item.type === 'text')) {
      return { ...part, output: { type: 'text' as const, value: rest.map((item) => (item as { text: string }).text).join('\n') } };
    }
    return own.length > 0 ? { ...part, output: { type: 'content' as const, value: rest } } : part;
  });
  return { message: { ...message, content }, images };
}

/**
 * A message without media: everything but user messages with images or files and tool messages with
 * rich (`content`) results, which the SDK's converter takes (assistant files are rare and simple).
 */
function isPlain(message: ModelMessage): boolean {
  if (typeof message.content === 'string') return true;
  if (message.role === 'user') return message.content.every((p) => p.type === 'text');
  if (message.role === 'tool') return message.content.every((p) => p.type !== 'tool-result' || p.output.type !== 'content');
  return true;
}

/** File data as the SDK's converter takes it apart: bytes, a data URL's base64 and media type, a URL. */
function dataContent(data: unknown): { data: Uint8Array | string | URL; mediaType?: string } {
  if (data instanceof Uint8Array) return { data };
  if (data instanceof ArrayBuffer) return { data: new Uint8Array(data) };
  if (typeof data === 'string' && data.startsWith('data:')) {
    const [header = '', base64 = ''] = data.split(',');
    return { data: base64, mediaType: header.split(';')[0]!.split(':')[1] };
  }
  if (typeof data === 'string' && /^https?:\/\//i.test(data)) return { data: new URL(data) };
  return { data: data as string | URL };
}

/** A plain message (see isPlain) as the SDK's converter would make it, without its validation pass. */
function convertPlain(message: ModelMessage): SdkMessage[] {
  const providerOptions = message.providerOptions;
  switch (message.role) {
    case 'system':
      return [{ role: 'system', content: message.content, providerOptions }];
    case 'user':
      if (typeof message.content === 'string') return [{ role: 'user', content: [{ type: 'text', text: message.content }], providerOptions }];
      return [
        {
          role: 'user',
          content: message.content.flatMap((p) =>
            p.type === 'text' && p.text !== '' ? [{ type: 'text' as const, text: p.text, providerOptions: p.providerOptions }] : [],
          ),
          providerOptions,
        },
      ];
    case 'assistant': {
      if (typeof message.content === 'string') return [{ role: 'assistant', content: [{ type: 'text', text: message.content }], providerOptions }];
      const content: Extract<SdkMessage, { role: 'assistant' }>['content'] = [];
      for (const p of (message as AssistantMessage).content as Exclude<AssistantMessage['content'], string>) {
        if (p.type === 'text' && (p.text !== '' || p.providerOptions != null)) content.push({ type: 'text', text: p.text, providerOptions: p.providerOptions });
        else if (p.type === 'file') {
          const d = dataContent(p.data);
          content.push({ type: 'file', data: d.data, filename: p.filename, mediaType: d.mediaType ?? p.mediaType, providerOptions: p.providerOptions });
        } else if (p.type === 'reasoning') content.push({ type: 'reasoning', text: p.text, providerOptions: p.providerOptions });
        else if (p.type === 'tool-call')
          content.push({
            type: 'tool-call',
            toolCallId: p.toolCallId,
            toolName: p.toolName,
            input: p.input,
            providerExecuted: p.providerExecuted,
            providerOptions: p.providerOptions,
          });
        else if (p.type === 'tool-result')
          content.push({ type: 'tool-result', toolCallId: p.toolCallId, toolName: p.toolName, output: p.output as never, providerOptions: p.providerOptions });
      }
      return [{ role: 'assistant', content, providerOptions }];
    }
    case 'tool': {
      const content: SdkToolMessage['content'] = [];
      for (const p of message.content) {
        if (p.type === 'tool-result')
          content.push({ type: 'tool-result', toolCallId: p.toolCallId, toolName: p.toolName, output: p.output as never, providerOptions: p.providerOptions });
        else if (p.type === 'tool-approval-response' && p.providerExecuted)
          content.push({ type: 'tool-approval-response', approvalId: p.approvalId, approved: p.approved, reason: p.reason });
      }
      return content.length > 0 ? [{ role: 'tool', content, providerOptions }] : [];
    }
  }
}

/** One message converted: its prompt messages, and the tool-result images lifted out of it (Chat Completions). */
interface Converted {
  messages: SdkMessage[];
  lifted: SdkUserPart[];
}

interface PromptConverterOptions {
  supportsImages: boolean;
  /** Chat Completions models cannot take images in tool results (see liftImages). */
  textOnlyToolResults: boolean;
  images: ImageResolver;
  supportedUrls: () => PromiseLike<Record<string, RegExp[]>> | Record<string, RegExp[]>;
}

/** Converts histories for one model, each message once. */
export class PromptConverter {
  private readonly done = new WeakMap<ModelMessage, Converted>();
  private readonly toolSets = new WeakMap<LlmToolSpec[], SdkTools>();
  /**
   * The last history converted, by its first message: its messages, the result, and for each prefix
   * length k the result's length after it (-1 inside a run of tool messages, which later ones join).
   */
  private readonly last = new WeakMap<ModelMessage, { inputs: ModelMessage[]; out: SdkMessage[]; marks: number[] }>();

  constructor(private readonly o: PromptConverterOptions) {}

  /** The tool definitions in the provider's terms, converted once per list. */
  tools(specs: LlmToolSpec[]): SdkTools | undefined {
    if (specs.length === 0) return undefined;
    let tools = this.toolSets.get(specs);
    if (!tools) {
      tools = specs.map((s) => ({ type: 'function' as const, name: s.name, description: s.description, inputSchema: s.inputSchema }));
      this.toolSets.set(specs, tools);
    }
    return tools;
  }

  /**
   * The prompt for a system text and a history (downloading the images the model cannot fetch). A
   * history that starts with the messages of the one converted before it (the same conversation, a
   * step later) takes that one's result up to where they differ and converts only the rest.
   */
  async prompt(system: string | undefined, systemOptions: SdkMessage['providerOptions'], messages: ModelMessage[], signal?: AbortSignal): Promise<SdkPrompt> {
    const prev = messages.length > 0 ? this.last.get(messages[0]!) : undefined;
    let k = 0;
    if (prev) {
      const n = Math.min(prev.inputs.length, messages.length);
      while (k < n && prev.inputs[k] === messages[k]) k++;
      while (k > 0 && prev.marks[k]! < 0) k--; // back to a point where no tool messages are being joined
    }
    const out: SdkMessage[] = prev ? prev.out.slice(0, prev.marks[k]) : [];
    const marks = prev ? prev.marks.slice(0, k + 1) : [0];
    let pending: SdkUserPart[] = [];
    for (const message of messages.slice(k)) {
      const c = this.done.get(message) ?? (await this.convert(message, signal));
      if (message.role !== 'tool') {
        if (pending.length > 0) out.push({ role: 'user', content: pending });
        pending = [];
        out.push(...c.messages);
        marks.push(out.length);
        continue;
      }
      for (const m of c.messages as SdkToolMessage[]) {
        const last = out[out.length - 1];
        // consecutive tool messages are one (as the SDK does it); the kept ones are not changed
        if (last?.role === 'tool') {
          const lastPart = last.content[last.content.length - 1];
          const merged =
            lastPart && last.providerOptions != null
              ? [...last.content.slice(0, -1), { ...lastPart, providerOptions: { ...last.providerOptions, ...lastPart.providerOptions } }]
              : last.content;
          out[out.length - 1] = { role: 'tool', content: [...merged, ...m.content], providerOptions: m.providerOptions };
        } else {
          out.push(m);
        }
      }
      pending.push(...c.lifted);
      marks.push(-1);
    }
    if (pending.length > 0) out.push({ role: 'user', content: pending });
    else if (messages.length > 0) this.last.set(messages[0]!, { inputs: messages.slice(), out, marks });
    return system ? [{ role: 'system', content: system, ...(systemOptions ? { providerOptions: systemOptions } : {}) }, ...out] : out.slice();
  }

  private async convert(original: ModelMessage, signal?: AbortSignal): Promise<Converted> {
    let message = prepare(original, this.o.supportsImages);
    let images: UserPart[] = [];
    if (message.role === 'tool' && this.o.textOnlyToolResults) ({ message, images } = liftImages(message));
    if (this.o.supportsImages) {
      if (message.role === 'user') [message] = await this.o.images.resolve([message], signal);
      if (images.length > 0) images = ((await this.o.images.resolve([{ role: 'user', content: images }], signal))[0] as ModelMessage).content as UserPart[];
    }
    const converted: Converted = {
      messages: isPlain(message) ? convertPlain(message) : await this.viaSdk(message, signal),
      lifted: images.length > 0 ? ((await this.viaSdk({ role: 'user', content: images }, signal))[0]?.content as SdkUserPart[]) : [],
    };
    this.done.set(original, converted);
    return converted;
  }

  /** A message with media, by the SDK's converter (data URLs, bytes, media types, downloads). */
  private async viaSdk(message: ModelMessage, signal?: AbortSignal): Promise<SdkMessage[]> {
    const { convertToLanguageModelPrompt } = await loadAiInternal();
    return convertToLanguageModelPrompt({
      prompt: { messages: [message] },
      supportedUrls: await this.o.supportedUrls(),
      download: undefined,
      abortSignal: signal,
    }) as Promise<SdkMessage[]>;
  }
}
