/**
 * `npm start`: runs the built daemon (dist/, see build.mjs), rebuilding it first when it is missing
 * or older than a source file, so `npm start` always runs the current code.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const entry = path.join(root, 'dist', 'main.mjs');

function newest(p) {
  const st = fs.statSync(p);
  if (!st.isDirectory()) return st.mtimeMs;
  let m = st.mtimeMs;
  for (const name of fs.readdirSync(p)) m = Math.max(m, newest(path.join(p, name)));
  return m;
}

let built = 0;
try {
  built = fs.statSync(entry).mtimeMs;
} catch {
  // not built yet
}
const sources = ['bridge', 'src', 'console', 'package.json', 'package-lock.json'].map((s) => path.join(root, s)).filter((s) => fs.existsSync(s));
if (!built || sources.some((s) => newest(s) > built)) {
  const { build } = await import('./build.mjs');
  await build();
}
await import(entry);
