/**
 * The embedded store's start-up: every journal frame the index has not seen (a kill -9 left them)
 * is indexed, then a new journal generation starts and the old files go. Runs before the writer
 * thread exists. When the database cannot be written (a full disk), the frames are handed back
 * instead and their generations kept: the store serves them from its tail and the writer indexes
 * them once it can.
 */
import fs from 'node:fs';
import type Database from 'better-sqlite3';
import { isDiskFull } from './disk-watch.js';
import { Journal, journalFile, journalGenerations, journalIndexer, type JournalPosition, readFrames } from './journal.js';
import { cannotWrite } from './sqlite-schema.js';

interface Recovered {
  journal: Journal;
  /** Frames committed before this start that the index could not take now. */
  unindexed: { payload: string; pos: JournalPosition }[];
}

export function recoverJournal(
  db: Database.Database,
  dir: string,
  journalOpts: ConstructorParameters<typeof Journal>[2],
  onDiskFull: (err: unknown) => void,
): Recovered {
  fs.mkdirSync(dir, { recursive: true });
  const state = (db.prepare('SELECT gen, offset FROM journal_state WHERE k = 0').get() as JournalPosition | undefined) ?? { gen: 0, offset: 0 };
  const gens = journalGenerations(dir);
  const frames: { payload: string; pos: JournalPosition }[] = [];
  for (const gen of gens) {
    if (gen < state.gen) continue;
    for (const f of readFrames(dir, gen, gen === state.gen ? state.offset : 0)) frames.push({ payload: f.payload, pos: { gen, offset: f.end } });
  }
  const next = Math.max(state.gen, ...gens) + 1;
  try {
    if (frames.length) journalIndexer(db)(frames);
    db.prepare('INSERT INTO journal_state (k, gen, offset) VALUES (0, ?, 0) ON CONFLICT (k) DO UPDATE SET gen = excluded.gen, offset = 0').run(next);
  } catch (err) {
    if (!cannotWrite(err)) throw err;
    if (isDiskFull(err)) onDiskFull(err);
    for (const gen of gens) if (gen < state.gen) fs.rmSync(journalFile(dir, gen), { force: true });
    return {
      journal: new Journal(
        dir,
        next,
        journalOpts,
        gens.filter((g) => g >= state.gen),
      ),
      unindexed: frames,
    };
  }
  for (const gen of gens) fs.rmSync(journalFile(dir, gen), { force: true });
  return { journal: new Journal(dir, next, journalOpts), unindexed: [] };
}
