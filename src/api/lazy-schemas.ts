/**
 * A module's wire schemas built on first use. Constructing zod schemas is work: the API's ~200 took
 * ~10 ms of a daemon's start and ~1 MiB of its heap, most for routes an idle daemon never serves. A
 * schema module therefore builds its schemas in one function and exports them through
 * `builtOnFirstUse(build)`: reading any of them (an operation's input when its first request
 * arrives, the OpenAPI document) builds the whole module's once.
 */
export function builtOnFirstUse<T extends object>(build: () => T): T {
  let built: T | undefined;
  const get = () => (built ??= build());
  return new Proxy({} as T, {
    get: (_, key) => get()[key as keyof T],
    has: (_, key) => key in get(),
    ownKeys: () => Reflect.ownKeys(get()),
    getOwnPropertyDescriptor: (_, key) => {
      const d = Reflect.getOwnPropertyDescriptor(get(), key);
      return d && { ...d, configurable: true };
    },
  });
}
