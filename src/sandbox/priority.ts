/**
 * The CPU priority of a spare holder: it starts at a lower priority (a nice value) than the
 * conversations running beside it, so that on a busy machine its start (a node, bwrap, the egress
 * tool) takes the CPU the running turns leave, not theirs; its processes get the normal priority back
 * when a conversation takes it. Giving it back (lowering a nice value) needs CAP_SYS_NICE: only a
 * root daemon lowers it in the first place.
 */
import fs from 'node:fs';
import os from 'node:os';

/** A spare's nice value while no conversation has it. */
export const SPARE_NICE = 10;

/** Whether spares may start at a lower priority (the daemon can give the priority back). */
export function canRenice(): boolean {
  return process.getuid?.() === 0;
}

/** Sets the nice value of every thread of each process (Linux keeps one per thread); gone ones are skipped. */
export function setNice(pids: number[], nice: number): void {
  for (const pid of pids) {
    let tids: string[];
    try {
      tids = fs.readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const t of tids) {
      try {
        os.setPriority(Number(t), nice);
      } catch {
        /* gone */
      }
    }
  }
}
