/**
 * What the sandbox is told (SandboxSettings), declared here in the base layer because
 * src/config.ts builds it from the environment; and SANDBOX_ALLOW_NETS's format, parsed and
 * printed (src/sandbox/network.ts turns the entries into the egress filter).
 */
import { isIPv4, isIPv6 } from 'node:net';

export type SandboxModeSetting = 'auto' | 'bwrap' | 'none';

export type SandboxNetwork = 'egress' | 'host' | 'none';

export interface SandboxSettings {
  mode: SandboxModeSetting;
  /** egress: its own namespace with user-mode networking to the outside only (network.ts); none: loopback only; host: the host's. */
  network: SandboxNetwork;
  /** SANDBOX_ALLOW_NETS: what egress may reach besides the internet. */
  allowNets?: AllowedNet[];
  memoryMb: number;
  /** All sandboxes together (SANDBOX_TOTAL_MEMORY_MB); default half of the machine's memory. */
  totalMemoryMb?: number;
  /** CPUs one conversation may use (SANDBOX_CPU); absent: no quota. */
  cpus?: number | null;
  /** Disk one conversation may use, its workspace, /tmp and HOME together (SANDBOX_DISK_MB); absent or 0: no bound. */
  diskMb?: number;
  pids: number;
  fileSizeMb: number;
  /** Most conversations with a live sandbox; the least recently used idle one is closed. */
  maxLive: number;
  /** A sandbox with no process started through the launcher is closed after this long (default 10 min). */
  idleCloseMs?: number;
  /** Keep a holder started ahead for the next conversation (default true; false: benchmarks of the cold path). */
  spareHolder?: boolean;
  /** How long after a spare was taken the next one starts, outside a burst (default 1 s: src/sandbox/holders.ts REFILL_MS). */
  spareRefillMs?: number;
  /** With no take for this long, the spares beyond those held for the next burst are closed (default 5 s: src/sandbox/holders.ts QUIET_MS). */
  spareQuietMs?: number;
  /** How long after a burst's last take as many spares as it had takes are held ready (default 5 min: src/sandbox/holders.ts HOLD_MS; 0: one). */
  spareHoldMs?: number;
  /**
   * A spare that died before a conversation took it is replaced after this long, doubled for each
   * one after it that died young too (default 1 s: src/sandbox/holders.ts RETRY_MS).
   */
  spareRetryMs?: number;
  /** The bwrap binary (BWRAP_PATH), else `bwrap` from PATH. */
  bwrapPath?: string;
  /** Extra host directories mounted read-only at the same path (SANDBOX_RO_BINDS). */
  roBinds: string[];
  /**
   * The host uid and gid sandboxes run as when the daemon is root (SANDBOX_UID/SANDBOX_GID); null
   * or absent: the daemon's own (a daemon that is not root cannot change uid; a root daemon then
   * uses the defaults, never root).
   */
  runAs?: { uid: number; gid: number } | null;
  /** The host uid and gid of each sandbox's file service when the daemon is root (SANDBOX_SERVICE_UID/GID; default 65532). */
  serviceAs?: { uid: number; gid: number } | null;
  /**
   * SANDBOX_LIMITS: `enforced` (default): a bwrap daemon that cannot make cgroups refuses to start;
   * `unenforced`: it starts anyway with rlimits only, and says so (a warning at start, /server_info).
   */
  limits?: 'enforced' | 'unenforced';
  /**
   * SANDBOX_DISK: how SANDBOX_DISK_MB is held: `image` (default): a file system of that size per
   * conversation where the daemon can make one (root, not cluster mode), else measured; `measured`:
   * measured always (src/sandbox/disk-quota.ts).
   */
  disk?: 'image' | 'measured';
}

/** One SANDBOX_ALLOW_NETS entry: a network, and the one TCP/UDP port allowed on it (null: all). */
export interface AllowedNet {
  family: 4 | 6;
  /** The network's address (its host bits are zero). */
  address: string;
  prefix: number;
  port: number | null;
}

/**
 * SANDBOX_ALLOW_NETS: comma-separated networks the sandbox may reach although they are private or
 * the host's, each an address or CIDR, optionally with a port: `10.1.2.0/24`, `10.1.2.3:3128`,
 * `[fd00::/8]:443`, `192.168.1.5` (a bare address is /32 or /128). The host's loopback only as
 * `127.0.0.1:PORT` (one service; the sandbox reaches it at 10.0.2.2:PORT). Throws an Error whose
 * message is one line naming the entry.
 */
export function parseAllowNets(value: string): AllowedNet[] {
  return value
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '')
    .map(parseAllowEntry);
}

function parseAllowEntry(entry: string): AllowedNet {
  const bad = (why: string) => new Error(`SANDBOX_ALLOW_NETS: "${entry}" ${why}`);
  const usage = 'is not an address or CIDR with an optional port (10.1.2.0/24, 10.1.2.3:3128, [fd00::/8]:443)';
  let cidr = entry;
  let port: string | undefined;
  const bracketed = /^\[([^\]]*)\](?::(.*))?$/.exec(entry);
  if (bracketed) {
    cidr = bracketed[1]!;
    port = bracketed[2];
  } else if (entry.split(':').length === 2) {
    [cidr, port] = entry.split(':') as [string, string];
  }
  const [address = '', prefixText, ...rest] = cidr.split('/');
  const family = isIPv4(address) ? 4 : isIPv6(address) && !address.includes('%') ? 6 : null;
  if (family === 6 && !bracketed && prefixText?.includes(':')) throw bad('has a port after an IPv6 address: write it in brackets, [fd00::/8]:443');
  if (!family || rest.length > 0) throw bad(usage);
  if (bracketed && family === 4) throw bad('puts an IPv4 address in brackets (brackets are for IPv6: [fd00::/8]:443)');
  const bits = family === 4 ? 32 : 128;
  let prefix = bits;
  if (prefixText !== undefined) {
    if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > bits) throw bad(`has a prefix length that is not 0 to ${bits}`);
    prefix = Number(prefixText);
  }
  let portNumber: number | null = null;
  if (port !== undefined) {
    if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) throw bad('has a port that is not 1 to 65535');
    portNumber = Number(port);
  }
  const bytes = addressBytes(address, family);
  for (let bit = prefix; bit < bits; bit++) {
    if (bytes[bit >> 3]! & (0x80 >> (bit & 7))) throw bad(`has address bits set after /${prefix} (write its network address)`);
  }
  if (family === 4 && bytes[0] === 127 && (prefix !== 32 || bytes[3] !== 1 || bytes[1] !== 0 || bytes[2] !== 0 || portNumber === null)) {
    throw bad("opens the host's loopback: only one service can be allowed there, as 127.0.0.1:PORT");
  }
  if (family === 6 && prefix === 128 && bytes.every((b, i) => b === (i === 15 ? 1 : 0))) {
    throw bad("is the host's IPv6 loopback: allow 127.0.0.1:PORT instead");
  }
  return { family, address, prefix, port: portNumber };
}

/** An entry as SANDBOX_ALLOW_NETS writes it (for /server_info and logs): `10.1.2.0/24:3128`, `[fd00::/8]:443`. */
export function formatAllowedNet(a: AllowedNet): string {
  const net = a.prefix === (a.family === 4 ? 32 : 128) ? a.address : `${a.address}/${a.prefix}`;
  if (a.port === null) return net;
  return a.family === 6 ? `[${net}]:${a.port}` : `${net}:${a.port}`;
}

/** The 4 or 16 bytes of a valid address (IPv6 canonicalised by the URL parser, embedded IPv4 included). */
function addressBytes(address: string, family: 4 | 6): number[] {
  if (family === 4) return address.split('.').map(Number);
  const canonical = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  const [head = '', tail] = canonical.split('::');
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const words =
    tail === undefined ? groups(head) : [...groups(head), ...Array<string>(8 - groups(head).length - groups(tail).length).fill('0'), ...groups(tail)];
  return words.flatMap((w) => [parseInt(w, 16) >> 8, parseInt(w, 16) & 0xff]);
}
