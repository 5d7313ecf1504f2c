/**
 * The `parley` command: `serve` starts the daemon (what `npm start` does); every other command is
 * a client of a running daemon through the typed client (src/client.ts), so it can do nothing the
 * API cannot. bin/parley.mjs runs the build of this file (lib/cli.mjs).
 *
 * Arguments are parsed by node:util's parseArgs: six commands with a few flags each need no
 * more (typed flags, `--flag=value`, strict unknown-option errors), and the command starts with
 * nothing to load but itself and the client. Help text is written here, next to the commands.
 */
import { createRequire } from 'node:module';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { createParleyClient, type ParleyClient, type ParleyInputs } from '../src/client.js';
import { describeFailure, EXIT, type FailureContext } from './failure.js';
import { follow } from './follow.js';
import { jsonSink, textSink } from './render.js';

const DEFAULT_URL = 'http://127.0.0.1:3000';

const USAGE = `parley: run and watch Parley's coding agent from a terminal

Usage:
  parley serve                       start the daemon (as \`npm start\`; configured by its environment)
  parley run "task" [--repo owner/name] [--branch b] [--provider github|gitlab|bitbucket|enterprise_sso]
                    [--instructions text] [--json] [--interrupt]
                                     create a conversation and follow it until its run ends
  parley attach <id> [--after seq] [--json] [--interrupt]
                                     show a conversation's events and follow it until its run ends
  parley send <id> "message" [--run] add a message (--run: and run the agent)
  parley ls [--limit n] [--all] [--json]
                                     conversations, newest first
  parley rm <id>...                  delete conversations (and their workspaces)

Options:
  --url <url>        the daemon (default $PARLEY_URL, else ${DEFAULT_URL})
  --key <key>        session key (default $PARLEY_API_KEY; prefer the variable: arguments show in ps)
  --json             events (or conversations) as NDJSON, one JSON object per line
  --interrupt        Ctrl-C interrupts the agent before leaving (without it, Ctrl-C only detaches)
  --after <seq>      attach: show only events after this seq (what a detach printed)

Exit codes:
  0  the run finished (or nothing was running)     5  waiting for confirmation of an action
  1  the conversation ended in error               6  the daemon cannot be reached
  2  wrong arguments                               7  session key missing or refused (401)
  3  the agent is stuck                            8  no such conversation
  4  paused or interrupted                         9  the daemon refused the request
  130  detached with Ctrl-C (the conversation goes on)
`;

const common = {
  url: { type: 'string' },
  key: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies ParseArgsConfig['options'];
const following = { json: { type: 'boolean' }, interrupt: { type: 'boolean' } } as const satisfies ParseArgsConfig['options'];
const COMMANDS = {
  run: { ...common, ...following, repo: { type: 'string' }, branch: { type: 'string' }, provider: { type: 'string' }, instructions: { type: 'string' } },
  attach: { ...common, ...following, after: { type: 'string' } },
  send: { ...common, run: { type: 'boolean' } },
  ls: { ...common, json: { type: 'boolean' }, limit: { type: 'string' }, all: { type: 'boolean' } },
  rm: { ...common },
  serve: { help: common.help },
} as const satisfies Record<string, ParseArgsConfig['options']>;
type Command = keyof typeof COMMANDS;

interface Io {
  env: NodeJS.ProcessEnv;
  stdout: NodeJS.WriteStream | NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
}

/** Runs one command; resolves with the exit code, or null when the process must stay (serve). */
export async function main(argv: string[], io: Io = { env: process.env, stdout: process.stdout, stderr: process.stderr }): Promise<number | null> {
  const note = (line: string) => void io.stderr.write(`parley: ${line}\n`);
  const [name, ...rest] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    io.stdout.write(USAGE);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  if (name === '--version' || name === 'version') {
    // lib/cli.mjs and cli/main.ts both sit one level below the package root
    io.stdout.write(`${(createRequire(import.meta.url)('../package.json') as { version: string }).version}\n`);
    return EXIT.ok;
  }
  if (!Object.hasOwn(COMMANDS, name)) {
    note(`unknown command "${name}" (parley --help lists them)`);
    return EXIT.usage;
  }
  const command = name as Command;
  let parsed: { values: Flags; positionals: string[] };
  try {
    const r = parseArgs({ args: rest, options: COMMANDS[command] as ParseArgsConfig['options'], allowPositionals: true, strict: true });
    parsed = { values: r.values as Flags, positionals: r.positionals };
  } catch (err) {
    // parseArgs explains at length; its first sentence names the problem
    note(`${(err as Error).message.split(/\.( |$)/)[0]} (parley --help)`);
    return EXIT.usage;
  }
  const flags = parsed.values;
  const args = parsed.positionals;
  if (flags.help) {
    io.stdout.write(USAGE);
    return EXIT.ok;
  }
  if (command === 'serve') {
    if (args.length) return usage(note, 'serve takes no arguments: the daemon is configured by its environment (PORT, DATA_DIR, LLM_MODEL…)');
    // the daemon in this process, started as `npm start` starts it (scripts/start.mjs: rebuilt when stale)
    await import(new URL('../scripts/start.mjs', import.meta.url).href);
    return null;
  }

  const url = typeof flags.url === 'string' ? flags.url : io.env.PARLEY_URL || DEFAULT_URL;
  let shown: string;
  try {
    const u = new URL(url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('not http(s)');
    // credentials in a URL end up in error messages (fetch refuses them anyway): the key goes in a header
    if (u.username || u.password) return usage(note, '--url / PARLEY_URL must not carry credentials: give the session key with PARLEY_API_KEY or --key');
    shown = u.href.replace(/\/$/, '');
  } catch {
    return usage(note, `--url / PARLEY_URL must be an http(s) URL like ${DEFAULT_URL}`);
  }
  const key = typeof flags.key === 'string' ? flags.key : io.env.PARLEY_API_KEY || undefined;
  const client = createParleyClient({ url, apiKey: key });
  const failure: FailureContext = { url: shown, keyGiven: key !== undefined };

  try {
    switch (command) {
      case 'run':
        return await run(client, args, flags, failure, io, note);
      case 'attach':
        return await attach(client, args, flags, failure, io, note);
      case 'send': {
        if (args.length !== 2) return usage(note, 'send takes a conversation id and a message: parley send <id> "message" [--run]');
        const [id, text] = args as [string, string];
        failure.conversationId = id;
        await client.sendMessage.mutate({ conversation_id: id, message: { role: 'user', content: [{ type: 'text', text }], run: flags.run === true } });
        return EXIT.ok;
      }
      case 'ls':
        return await list(client, args, flags, io, note);
      case 'rm':
        if (!args.length) return usage(note, 'rm takes one or more conversation ids');
        for (const id of args) {
          failure.conversationId = id;
          await client.deleteConversation.mutate({ conversation_id: id });
        }
        return EXIT.ok;
    }
  } catch (err) {
    const f = describeFailure(err, failure);
    note(f.message);
    return f.code;
  }
}

type Flags = Record<string, string | boolean | undefined>;
type Note = (line: string) => void;

function usage(note: Note, message: string): number {
  note(`${message} (parley --help)`);
  return EXIT.usage;
}

const sinkFor = (flags: Flags, io: Io) => (flags.json ? jsonSink(io.stdout) : textSink(io.stdout));

async function run(client: ParleyClient, args: string[], flags: Flags, failure: FailureContext, io: Io, note: Note): Promise<number> {
  if (args.length !== 1 || !args[0]!.trim()) return usage(note, 'run takes the task as one argument: parley run "fix the failing test"');
  if (flags.branch !== undefined && flags.repo === undefined) return usage(note, '--branch needs --repo');
  const created = await client.createConversation.mutate({
    initial_user_msg: args[0],
    repository: (flags.repo as string | undefined) ?? null,
    selected_branch: (flags.branch as string | undefined) ?? null,
    // checked by the daemon (a 422 naming the providers it knows)
    git_provider: (flags.provider as ParleyInputs['createConversation']['git_provider']) ?? null,
    conversation_instructions: (flags.instructions as string | undefined) ?? null,
  });
  const id = created.conversation_id;
  failure.conversationId = id;
  note(`conversation ${id}`);
  return follow({
    client,
    id,
    afterSeq: 0,
    from: { status: 'idle', lastSeq: 0, pending: true },
    sink: sinkFor(flags, io),
    interruptOnCtrlC: flags.interrupt === true,
    failure,
    note,
  });
}

async function attach(client: ParleyClient, args: string[], flags: Flags, failure: FailureContext, io: Io, note: Note): Promise<number> {
  if (args.length !== 1) return usage(note, 'attach takes one conversation id');
  const after = flags.after === undefined ? 0 : Number(flags.after);
  if (!Number.isSafeInteger(after) || after < 0) return usage(note, '--after takes a seq (a whole number ≥ 0)');
  failure.conversationId = args[0];
  const info = await client.getConversation.query({ conversation_id: args[0]! });
  const phase = (info.setup as { phase?: string } | undefined)?.phase;
  return follow({
    client,
    id: info.conversation_id,
    afterSeq: after,
    // a workspace still being prepared runs its first message when ready
    from: {
      status: info.execution_status,
      lastSeq: info.last_seq,
      pending: info.execution_status === 'idle' && phase !== undefined && phase !== 'ready' && phase !== 'error',
    },
    sink: sinkFor(flags, io),
    interruptOnCtrlC: flags.interrupt === true,
    failure,
    note,
  });
}

async function list(client: ParleyClient, args: string[], flags: Flags, io: Io, note: Note): Promise<number> {
  if (args.length) return usage(note, 'ls takes no arguments');
  const limit = flags.limit === undefined ? 20 : Number(flags.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) return usage(note, '--limit takes a number from 1 to 100');
  let page: string | null = null;
  let header = !flags.json;
  do {
    const res = await client.listConversations.query({ page_id: page, limit });
    for (const c of res.items) {
      if (flags.json) {
        io.stdout.write(`${JSON.stringify(c)}\n`);
        continue;
      }
      if (header) {
        io.stdout.write(`${'ID'.padEnd(36)}  ${'STATUS'.padEnd(24)}  ${'UPDATED'.padEnd(16)}  ${'REPOSITORY'.padEnd(24)}  TITLE\n`);
        header = false;
      }
      const updated = c.updated_at.replace('T', ' ').slice(0, 16);
      io.stdout.write(
        `${c.conversation_id}  ${c.execution_status.padEnd(24)}  ${updated.padEnd(16)}  ` +
          `${(c.selected_repository ?? '-').padEnd(24)}  ${(c.title ?? '').replace(/\s+/g, ' ')}\n`,
      );
    }
    page = flags.all ? res.next_page_id : null;
  } while (page);
  if (header) note('no conversations');
  return EXIT.ok;
}
