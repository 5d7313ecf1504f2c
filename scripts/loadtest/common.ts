/** What the load test's processes share. */
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const HOST = '127.0.0.1';
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** CLOCK_MONOTONIC ms, shared by all processes. */
export const now = (): number => Number(process.hrtime.bigint()) / 1e6;
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Numbers as the reports print them (the runner's progress line and report.ts's table). */
export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');
export const fmtMs = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : 'n/a');
