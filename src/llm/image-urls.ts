/**
 * Image URLs in a conversation. The AI SDK downloads an image URL the model cannot
 * take itself at every step, refusing private addresses and other schemes; one such URL used to
 * fail every later step of the conversation. So:
 *
 * - `imageUrlProblem` (image-url-rule.ts) is checked when a message arrives (422 with the rule): a
 *   URL that will never be fetched (a scheme other than http/https/data:image, a loopback, private
 *   or link-local address, a local-only name) is refused before it is stored;
 * - `ImageResolver` downloads what the model cannot fetch before the message is first sent (the
 *   prompt converter keeps the result with the message: it is not fetched again at every step),
 *   and replaces an image whose download fails (DNS, 404, too big, a name that resolves to a
 *   private address) by a short text note, so the conversation keeps working. Failures are
 *   remembered (bounded) so a dead URL is not retried for every message that holds it.
 */
import type { createDownload, ModelMessage } from 'ai';
import { loadAi } from './sdk.js';

/** Largest image the daemon downloads for a model (the SDK's default is 2 GiB). */
const MAX_IMAGE_BYTES = 20 * 1024 * 1024;
const REMEMBERED_FAILURES = 256;

type SupportedUrls = Record<string, RegExp[]> | PromiseLike<Record<string, RegExp[]>>;

export class ImageResolver {
  private readonly failed = new Map<string, string>();
  /** The SDK's download (its checks of addresses and sizes), made when the first image is downloaded. */
  private download: ReturnType<typeof createDownload> | undefined;

  constructor(private readonly supportedUrls: () => SupportedUrls) {}

  /** The messages with every image URL the model cannot fetch itself downloaded, or replaced by a note. */
  async resolve(messages: ModelMessage[], signal?: AbortSignal): Promise<ModelMessage[]> {
    const supported = Object.entries(await this.supportedUrls())
      .filter(([type]) => type === '*' || type.startsWith('image/'))
      .flatMap(([, res]) => res);
    const todo: Promise<void>[] = [];
    const out = messages.map((message): ModelMessage => {
      if (message.role !== 'user' || !Array.isArray(message.content)) return message;
      if (!message.content.some((p) => p.type === 'image' && isRemote(p.image))) return message;
      const content = [...message.content];
      content.forEach((part, i) => {
        if (part.type !== 'image' || !isRemote(part.image)) return;
        const url = part.image.toString();
        if (supported.some((re) => re.test(url))) return;
        todo.push(
          this.fetch(url, signal).then((got) => {
            content[i] =
              typeof got === 'string'
                ? { type: 'text', text: got }
                : { ...part, image: got.data, ...(got.mediaType?.startsWith('image/') ? { mediaType: got.mediaType } : {}) };
          }),
        );
      });
      return { ...message, content } as ModelMessage;
    });
    await Promise.all(todo);
    return out;
  }

  private async fetch(url: string, signal?: AbortSignal): Promise<{ data: Uint8Array; mediaType?: string } | string> {
    const known = this.failed.get(url);
    if (known) return known;
    this.download ??= (await loadAi()).createDownload({ maxBytes: MAX_IMAGE_BYTES });
    try {
      return await this.download({ url: new URL(url), abortSignal: signal });
    } catch (err) {
      if (signal?.aborted) throw err;
      const reason = String((err as Error)?.message ?? err)
        .split('\n')[0]!
        .slice(0, 200);
      const note = `[image omitted: ${url.length > 200 ? `${url.slice(0, 200)}…` : url} could not be downloaded (${reason})]`;
      if (this.failed.size >= REMEMBERED_FAILURES) this.failed.delete(this.failed.keys().next().value!);
      this.failed.set(url, note);
      return note;
    }
  }
}

function isRemote(image: unknown): image is URL | string {
  if (image instanceof URL) return image.protocol === 'http:' || image.protocol === 'https:';
  return typeof image === 'string' && /^https?:\/\//i.test(image);
}
