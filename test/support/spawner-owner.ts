/**
 * A process that owns a spawner (src/sandbox/spawner.ts) as the daemon does: it starts `sleep 600`
 * through it, prints "<spawner pid> <sleep pid>" and waits to be killed. test/sandbox-spawner.test.ts
 * kills it with SIGKILL (no close, no exit handler) and checks from the host that both are gone.
 */
import { Spawner } from '../../src/sandbox/spawner.js';

const spawner = new Spawner('/usr/bin/setpriv');
const child = await spawner.spawn({ file: '/bin/sleep', args: ['600'], env: {}, stdio: ['ignore', 'ignore', 'ignore'] });
process.stdout.write(`${spawner.pid} ${child.pid}\n`);
setInterval(() => {}, 60_000);
