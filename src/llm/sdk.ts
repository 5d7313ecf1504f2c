/**
 * The AI SDK (`ai`, with zod v3 below it: about half a MiB of heap), loaded on first use. A step through the
 * own Chat Completions client (chat-completions.ts) needs none of it; the SDK's providers (models.ts), the
 * converter of messages with media (prompt.ts) and image downloads (image-urls.ts) load it when they run.
 */
type Ai = typeof import('ai');

let ai: Ai | undefined;
let loading: Promise<Ai> | undefined;

/** The AI SDK, loaded once. */
export function loadAi(): Promise<Ai> {
  loading ??= import('ai').then((m) => {
    ai = m;
    return m;
  });
  return loading;
}

/**
 * The AI SDK when something has loaded it, else undefined: the error classifier (errors.ts) asks the SDK's
 * own `isInstance` only then, since no error can be one of the SDK's before the SDK ran.
 */
export function loadedAi(): Ai | undefined {
  return ai;
}

/**
 * The SDK's internal entry (its converter of messages with media), loaded with the SDK itself so that the
 * errors it throws are classified as they were when both came with the daemon.
 */
export async function loadAiInternal(): Promise<typeof import('ai/internal')> {
  const [internal] = await Promise.all([import('ai/internal'), loadAi()]);
  return internal;
}
