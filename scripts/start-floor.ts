/**
 * The least a Parley start can do before its first `200` of `/health`, for scripts/bench-startup.ts
 * (`--floors`), which builds this file as the daemon is built (scripts/build.mjs: one bundle run
 * through the same code-cache entry) and starts it as `node dist/main.mjs` is started. Not a
 * server anyone should run: it answers `/health` and nothing else.
 *
 * What it does is what the daemon must have done before `/health` may say 200: read and check the
 * configuration, make the logger, open the data directory (its directories and permissions, the
 * secret key, the SQLite store with its lock, journal and writer thread), open the port. With
 * `FLOOR=port`, only the configuration, the logger and the port: the floor of a daemon that would
 * answer `/health` before its data directory is open.
 */
import fs from 'node:fs';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { Redactor } from '../src/secrets/redact.js';
import { SecretBox } from '../src/secrets/crypto.js';
import { DiskWatch } from '../src/store/disk-watch.js';
import { DATA_DIR_UMASK, restrictDataDir } from '../src/store/permissions.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { App, us_listen_socket_close, type us_listen_socket } from '../bridge/uws.js';

process.umask(DATA_DIR_UMASK);
const config = loadConfig();
const log = createLogger(config.logLevel, new Redactor());
let close = () => {};
if (process.env.FLOOR !== 'port') {
  const disk = new DiskWatch(config.dataDir, { log });
  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(config.workspaceRoot, { recursive: true, mode: 0o700 });
  restrictDataDir(config.dataDir, [config.workspaceRoot]);
  SecretBox.open(config.dataDir, config.secretKey);
  const store = new SqliteStore(config.dataDir, { synchronous: config.sqliteSynchronous, disk, reserveBytes: config.diskReserveMb * 1024 * 1024 });
  close = () => {
    void store.close();
    disk.close();
  };
}
const app = App();
app.get('/health', (res) => void res.cork(() => res.writeHeader('content-type', 'application/json').end('{"status":"ok"}')));
app.listen(config.host, config.port, (socket: us_listen_socket | false) => {
  if (!socket) {
    process.stderr.write(`start-floor: cannot listen on ${config.host}:${config.port}\n`);
    process.exit(1);
  }
  // the entry saves its code cache once the start is over, as the daemon's does
  (process.emit as (event: string) => boolean)('parley:listening');
  const stop = () => {
    us_listen_socket_close(socket);
    close();
    setTimeout(() => process.exit(0), 50).unref();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
});
