/** Types of scripts/code-cache.mjs (plain JavaScript: the build bundles it into dist/main.mjs as it is) for the TypeScript that uses it. */
import type vm from 'node:vm';

/** A Node built-in by name, without an import statement. */
export declare const builtin: (id: string) => any;
export declare const MADE_BY_BUILD: 0;
export declare const MADE_BY_START: 1;
export declare function compile(bundle: string, bytes: Buffer, cachedData?: Buffer): vm.Script;
export declare function digestOf(bytes: Buffer): Buffer;
export declare function cacheFileOf(bundle: string, execArgv?: string[]): string;
export declare function readCache(file: string, digest: Buffer): { madeBy: number; data: Buffer } | undefined;
export declare function writeCache(file: string, digest: Buffer, madeBy: number, data: Buffer): void;
