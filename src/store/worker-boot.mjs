// Loads a TypeScript worker module: worker threads do not inherit tsx's loader on Node 20.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';
register();
await import(workerData.entry);
