/**
 * A real git smart-HTTP server for tests.
 *
 * A node `http` server on 127.0.0.1 (random port) that runs `git http-backend` as a CGI program
 * for every request, serving bare repositories created from in-memory file maps. Private
 * repositories require HTTP Basic auth whose password is the configured token (401 with
 * `WWW-Authenticate: Basic` when missing or wrong). Every request's method, URL and headers are
 * recorded so a test can assert what the client sent (e.g. that no token was ever in a URL).
 */
import http from 'node:http';
import { spawn, execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export interface RecordedRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  /** Username from a valid or invalid Basic header, if any. */
  user: string | null;
  status: number;
}

export interface RepoOptions {
  /** Extra branches, each created from the default branch with these files added/overwritten. */
  branches?: Record<string, Record<string, string>>;
  /** Require Basic auth (password = the server's token) for every request to this repository. */
  private?: boolean;
  /** Default branch name (default `main`). */
  defaultBranch?: string;
}

export interface GitServerOptions {
  /** The token private repositories accept as the Basic password. */
  token?: string;
  /** When set, the Basic username must match too. */
  username?: string;
}

/** Environment for server-side git: isolated from the machine's user and system config. */
function serverGitEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: tmpdir(),
    LC_ALL: 'C',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_AUTHOR_NAME: 'Test Server',
    GIT_AUTHOR_EMAIL: 'server@test.local',
    GIT_COMMITTER_NAME: 'Test Server',
    GIT_COMMITTER_EMAIL: 'server@test.local',
    ...extra,
  };
}

const execFileAsync = promisify(execFile);

/** Async on purpose: a synchronous child would block the event loop that serves the requests. */
async function git(args: string[], cwd?: string): Promise<string> {
  const { stdout } = await execFileAsync('git', args, { cwd, env: serverGitEnv(), encoding: 'utf8' });
  return stdout;
}

/** Throws when `git http-backend` is not available. */
export function assertHttpBackend(): void {
  const execPath = execFileSync('git', ['--exec-path'], { env: serverGitEnv(), encoding: 'utf8' }).trim();
  if (!existsSync(join(execPath, 'git-http-backend'))) {
    throw new Error(`git-http-backend not found in ${execPath}`);
  }
}

async function writeFiles(dir: string, files: Record<string, string>): Promise<void> {
  for (const [name, content] of Object.entries(files)) {
    const path = join(dir, name);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, content);
  }
}

export class GitHttpServer {
  readonly requests: RecordedRequest[] = [];
  token: string;
  username: string | undefined;
  private readonly privateRepos = new Set<string>();
  private readonly repos = new Set<string>();
  private port = 0;

  private constructor(
    readonly root: string,
    private readonly server: http.Server,
    opts: GitServerOptions,
  ) {
    this.token = opts.token ?? 'test-token';
    this.username = opts.username;
  }

  static async start(opts: GitServerOptions = {}): Promise<GitHttpServer> {
    assertHttpBackend();
    const root = await mkdtemp(join(tmpdir(), 'parley-git-server-'));
    const server = http.createServer();
    const instance = new GitHttpServer(root, server, opts);
    server.on('request', (req, res) => instance.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    instance.port = (server.address() as { port: number }).port;
    return instance;
  }

  /** `http://127.0.0.1:PORT` */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Path of the bare repository `owner/repo` on disk. */
  repoPath(name: string): string {
    return join(this.root, `${name}.git`);
  }

  /** Creates the bare repository `owner/repo` holding `files` (an empty map: no commits). */
  async createRepo(name: string, files: Record<string, string>, opts: RepoOptions = {}): Promise<string> {
    const bare = this.repoPath(name);
    const branch = opts.defaultBranch ?? 'main';
    await mkdir(dirname(bare), { recursive: true });
    await git(['init', '-q', '--bare', `--initial-branch=${branch}`, bare]);
    await git(['config', 'http.receivepack', 'true'], bare);
    if (Object.keys(files).length > 0) {
      const work = await mkdtemp(join(tmpdir(), 'parley-git-src-'));
      try {
        await git(['init', '-q', `--initial-branch=${branch}`], work);
        await writeFiles(work, files);
        await git(['add', '-A'], work);
        await git(['commit', '-q', '-m', 'initial'], work);
        await git(['push', '-q', bare, branch], work);
        for (const [b, extra] of Object.entries(opts.branches ?? {})) {
          await git(['checkout', '-q', '-b', b, branch], work);
          await writeFiles(work, extra);
          await git(['add', '-A'], work);
          await git(['commit', '-q', '--allow-empty', '-m', `branch ${b}`], work);
          await git(['push', '-q', bare, b], work);
        }
      } finally {
        await rm(work, { recursive: true, force: true });
      }
    }
    this.repos.add(name);
    if (opts.private) this.privateRepos.add(name);
    return bare;
  }

  /** Runs git against a served bare repository (for assertions). */
  gitIn(name: string, args: string[]): Promise<string> {
    return git(args, this.repoPath(name));
  }

  private repoOf(pathname: string): string | null {
    for (const name of this.repos) {
      if (pathname === `/${name}.git` || pathname.startsWith(`/${name}.git/`)) return name;
    }
    return null;
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const record: RecordedRequest = {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      headers: { ...req.headers },
      user: null,
      status: 0,
    };
    this.requests.push(record);
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const pathname = decodeURIComponent(url.pathname);
    const repo = this.repoOf(pathname);

    let user: string | null = null;
    const auth = req.headers.authorization;
    if (auth?.startsWith('Basic ')) {
      const decoded = Buffer.from(auth.slice(6), 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      user = colon >= 0 ? decoded.slice(0, colon) : decoded;
      record.user = user;
      const password = colon >= 0 ? decoded.slice(colon + 1) : '';
      const ok = password === this.token && (this.username === undefined || user === this.username);
      if (!ok) user = null;
      else record.user = user;
      if (!ok && repo && this.privateRepos.has(repo)) return this.deny(res, record);
    }
    if (repo && this.privateRepos.has(repo) && !user) return this.deny(res, record);

    const env = serverGitEnv({
      GIT_PROJECT_ROOT: this.root,
      GIT_HTTP_EXPORT_ALL: '1',
      PATH_INFO: pathname,
      QUERY_STRING: url.search.replace(/^\?/, ''),
      REQUEST_METHOD: req.method ?? 'GET',
      CONTENT_TYPE: req.headers['content-type'] ?? '',
      REMOTE_ADDR: req.socket.remoteAddress ?? '127.0.0.1',
      ...(req.headers['content-length'] ? { CONTENT_LENGTH: req.headers['content-length'] } : {}),
      ...(req.headers['content-encoding'] ? { HTTP_CONTENT_ENCODING: String(req.headers['content-encoding']) } : {}),
      ...(req.headers['git-protocol'] ? { GIT_PROTOCOL: String(req.headers['git-protocol']) } : {}),
      ...(user ? { REMOTE_USER: user } : {}),
    });
    const cgi = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    req.pipe(cgi.stdin);
    cgi.stdin.on('error', () => {});
    let stderr = '';
    cgi.stderr.on('data', (d: Buffer) => (stderr += d.toString()));

    let head = Buffer.alloc(0);
    let headersSent = false;
    cgi.stdout.on('data', (chunk: Buffer) => {
      if (headersSent) {
        res.write(chunk);
        return;
      }
      head = Buffer.concat([head, chunk]);
      let end = head.indexOf('\r\n\r\n');
      let sepLen = 4;
      if (end < 0) {
        end = head.indexOf('\n\n');
        sepLen = 2;
      }
      if (end < 0) return;
      const lines = head.subarray(0, end).toString('latin1').split(/\r?\n/);
      let status = 200;
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const i = line.indexOf(':');
        if (i < 0) continue;
        const key = line.slice(0, i).trim();
        const value = line.slice(i + 1).trim();
        if (key.toLowerCase() === 'status') status = parseInt(value, 10) || 200;
        else headers[key] = value;
      }
      record.status = status;
      res.writeHead(status, headers);
      headersSent = true;
      const rest = head.subarray(end + sepLen);
      if (rest.length) res.write(rest);
    });
    cgi.on('close', (code) => {
      if (!headersSent) {
        record.status = 500;
        res.writeHead(500, { 'Content-Type': 'text/plain' });
        res.end(`git http-backend failed (${code}): ${stderr}`);
        return;
      }
      res.end();
    });
    cgi.on('error', () => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  }

  private deny(res: http.ServerResponse, record: RecordedRequest): void {
    record.status = 401;
    res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="parley-test"', 'Content-Type': 'text/plain' });
    res.end('Authentication required\n');
  }

  async close(): Promise<void> {
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.root, { recursive: true, force: true });
  }
}

export function startGitServer(opts: GitServerOptions = {}): Promise<GitHttpServer> {
  return GitHttpServer.start(opts);
}
