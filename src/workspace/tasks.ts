/**
 * First messages for `suggested_task` and `create_microagent` conversations.
 *
 * Templates are plain functions (no files read at run time), filled with each provider's words:
 * GitHub and Bitbucket say "pull request" (PR), GitLab "merge request" (MR); the token variable
 * is GITHUB_TOKEN / GITLAB_TOKEN / BITBUCKET_TOKEN (set in the agent's shell).
 *
 * Decisions:
 * - No `git_provider` → GitHub's words (github is the default provider everywhere else).
 * - No `task_type` → OPEN_ISSUE (a suggested task is "work on issue #N: title").
 * - `enterprise_sso` is a login identity, not a git service: there is no pull-request, CI or
 *   issue API behind it. MERGE_CONFLICTS, FAILING_CHECKS and UNRESOLVED_COMMENTS need such an
 *   API and are refused by validateSuggestedTask; OPEN_ISSUE is allowed and written so that it
 *   works from the title alone (no API calls, the agent pushes a branch).
 */
import * as z from 'zod';
import { GIT_PROVIDERS, isGitProvider, TOKEN_ENV_VARS, type GitProvider } from './providers.js';

const TASK_TYPES = ['MERGE_CONFLICTS', 'FAILING_CHECKS', 'UNRESOLVED_COMMENTS', 'OPEN_ISSUE'] as const;
type TaskType = (typeof TASK_TYPES)[number];

/** A suggested task as a create asks for it (the API's request schema) and the conversation's record keeps it. */
export const SuggestedTask = z.strictObject({
  git_provider: z.enum(GIT_PROVIDERS).nullish(),
  task_type: z.enum(TASK_TYPES).nullish(),
  repo: z.string().min(1),
  issue_number: z.number().int(),
  title: z.string(),
});
export type SuggestedTask = z.output<typeof SuggestedTask>;

/** A microagent to create, as a create asks for it and the conversation's record keeps it. */
export const CreateMicroagent = z.strictObject({
  repo: z.string().min(1),
  git_provider: z.enum(GIT_PROVIDERS).nullish(),
  title: z.string().nullish(),
});
export type CreateMicroagent = z.output<typeof CreateMicroagent>;

interface ProviderTerms {
  name: string;
  request: string;
  requestShort: string;
  api: string;
  tokenVar: string;
  ci: string;
  apiHint: string;
}

const TERMS: Record<Exclude<GitProvider, 'enterprise_sso'>, ProviderTerms> = {
  github: {
    name: 'GitHub',
    request: 'pull request',
    requestShort: 'PR',
    api: 'GitHub API',
    tokenVar: TOKEN_ENV_VARS.github,
    ci: 'GitHub Actions',
    apiHint: 'e.g. `curl -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com/repos/OWNER/REPO/...`',
  },
  gitlab: {
    name: 'GitLab',
    request: 'merge request',
    requestShort: 'MR',
    api: 'GitLab API',
    tokenVar: TOKEN_ENV_VARS.gitlab,
    ci: 'GitLab CI',
    apiHint: 'e.g. `curl -H "PRIVATE-TOKEN: $GITLAB_TOKEN" https://gitlab.com/api/v4/projects/OWNER%2FREPO/...`',
  },
  bitbucket: {
    name: 'Bitbucket',
    request: 'pull request',
    requestShort: 'PR',
    api: 'Bitbucket API',
    tokenVar: TOKEN_ENV_VARS.bitbucket,
    ci: 'Bitbucket Pipelines',
    apiHint: 'e.g. `curl -H "Authorization: Bearer $BITBUCKET_TOKEN" https://api.bitbucket.org/2.0/repositories/OWNER/REPO/...`',
  },
};

const NEEDS_REQUEST_API: TaskType[] = ['MERGE_CONFLICTS', 'FAILING_CHECKS', 'UNRESOLVED_COMMENTS'];
const REPO_RE = /^[A-Za-z0-9_.][A-Za-z0-9_.-]*(\/[A-Za-z0-9_.][A-Za-z0-9_.-]*)+$/;

/** What is wrong with a suggested task: the field at fault and a clear reason. */
interface TaskProblem {
  field: 'git_provider' | 'task_type' | 'repo' | 'issue_number' | 'title';
  message: string;
}

/** Null when the task can be turned into a message; otherwise the field at fault and why. */
export function suggestedTaskProblem(task: SuggestedTask): TaskProblem | null {
  const provider = task.git_provider ?? 'github';
  if (!isGitProvider(provider)) return { field: 'git_provider', message: `Unsupported git provider ${JSON.stringify(provider)}` };
  const type = task.task_type ?? 'OPEN_ISSUE';
  if (!(TASK_TYPES as readonly string[]).includes(type)) {
    return { field: 'task_type', message: `Unsupported task type ${JSON.stringify(type)}: expected one of ${TASK_TYPES.join(', ')}` };
  }
  if (typeof task.repo !== 'string' || !REPO_RE.test(task.repo.trim())) {
    return { field: 'repo', message: 'suggested_task.repo must be a repository name like "owner/repo"' };
  }
  if (!Number.isSafeInteger(task.issue_number) || task.issue_number <= 0) {
    return { field: 'issue_number', message: 'suggested_task.issue_number must be a positive integer' };
  }
  if (typeof task.title !== 'string') return { field: 'title', message: 'suggested_task.title must be a string' };
  if (provider === 'enterprise_sso' && NEEDS_REQUEST_API.includes(type)) {
    return {
      field: 'task_type',
      message: `Task type ${type} needs a pull/merge request API, which enterprise_sso does not have; use github, gitlab or bitbucket`,
    };
  }
  return null;
}

/** Null when the task can be turned into a message; otherwise a clear reason. */
export function validateSuggestedTask(task: SuggestedTask): string | null {
  return suggestedTaskProblem(task)?.message ?? null;
}

export class SuggestedTaskError extends Error {
  override name = 'SuggestedTaskError';
}

/** A title as one quoted line (a title can contain anything). */
function quoteTitle(title: string): string {
  const one = title.replace(/\s+/g, ' ').trim().slice(0, 300);
  return one ? `"${one}"` : '(no title)';
}

/** The first user message for a suggested task. Throws SuggestedTaskError when invalid. */
export function suggestedTaskMessage(task: SuggestedTask): string {
  const problem = validateSuggestedTask(task);
  if (problem) throw new SuggestedTaskError(problem);
  const provider = task.git_provider ?? 'github';
  const type = task.task_type ?? 'OPEN_ISSUE';
  const repo = task.repo.trim();
  const n = task.issue_number;
  const title = quoteTitle(task.title);

  if (provider === 'enterprise_sso') {
    return [
      `Please resolve issue #${n} in the repository ${repo}: ${title}.`,
      '',
      'No provider API is available for this repository, so work from the title above and the code itself.',
      '1. Read the relevant code and decide what the issue asks for.',
      '2. Implement the change with tests, on a new branch.',
      `3. Commit with a message that references issue #${n} and push the branch to origin.`,
      'Finally, summarise what you changed.',
    ].join('\n');
  }

  const t = TERMS[provider];
  const header = (what: string) => `You are working on ${t.request} #${n} (${title}) in the ${t.name} repository ${repo}. ${what}`;
  const apiLine = `Use the ${t.api} with the token in the environment variable ${t.tokenVar} to read its details (${t.apiHint}).`;

  switch (type) {
    case 'MERGE_CONFLICTS':
      return [
        header(`The ${t.requestShort} has merge conflicts with its target branch.`),
        apiLine,
        '',
        `1. Find the ${t.requestShort}'s source and target branches, fetch both and check out the source branch.`,
        '2. Merge (or rebase onto) the target branch and resolve every conflict, keeping the intent of both sides.',
        '3. Build and run the tests to make sure nothing broke.',
        `4. Commit and push the source branch so the ${t.request} is mergeable again.`,
      ].join('\n');
    case 'FAILING_CHECKS':
      return [
        header(`Its ${t.ci} checks are failing.`),
        apiLine,
        '',
        `1. Check out the ${t.requestShort}'s source branch and look at the failing checks and their logs.`,
        '2. Reproduce the failures locally where possible and fix their cause (not the symptoms).',
        '3. Commit and push the fix.',
        '4. Wait about 30 seconds, check the status of the checks again, and repeat until they pass.',
      ].join('\n');
    case 'UNRESOLVED_COMMENTS':
      return [
        header('It has unresolved review comments.'),
        apiLine,
        '',
        `1. Check out the ${t.requestShort}'s source branch and read every unresolved review comment.`,
        '2. Address each comment with a code change (or, where a change is not right, a reply explaining why).',
        '3. Run the tests, then commit and push.',
      ].join('\n');
    case 'OPEN_ISSUE':
      return [
        `Please resolve issue #${n} (${title}) in the ${t.name} repository ${repo}.`,
        `Use the ${t.api} with the token in the environment variable ${t.tokenVar} to read the issue and its comments (${t.apiHint}).`,
        '',
        '1. Understand the issue and find the relevant code.',
        '2. Implement the change with tests on a new branch.',
        `3. Push the branch and open a ${t.request} whose description references issue #${n}.`,
      ].join('\n');
  }
}

/** The first user message for `create_microagent`: write a repository microagent file. */
export function createMicroagentMessage(opts: { repo: string; title?: string | null }): string {
  const repo = opts.repo.trim();
  const title = opts.title?.replace(/\s+/g, ' ').trim();
  const slug = title
    ? title
        .toLowerCase()
        .replace(/[^a-z0-9]+/g, '-')
        .replace(/^-+|-+$/g, '')
        .slice(0, 60) || 'repo'
    : 'repo';
  const file = `.openhands/microagents/${slug}.md`;
  return [
    title ? `Please create a microagent for the repository ${repo} titled "${title}".` : `Please create a microagent that describes the repository ${repo}.`,
    '',
    `Write it to \`${file}\` (create the directory if needed). Explore the repository first, then write a Markdown file`,
    'that starts with YAML front matter:',
    '',
    '```',
    '---',
    `name: ${slug}`,
    'type: repo',
    '---',
    '```',
    '',
    'followed by what a developer (or an agent) needs to work in this repository: its purpose, the layout of the',
    'code, how to install dependencies, build, run the tests and the linters, the coding conventions, and anything',
    'surprising. Keep it concise and accurate: only state what you verified in the repository.',
    'For knowledge that only matters for some tasks, use `type: knowledge` with `triggers: [word, ...]` instead.',
    'Commit the file when you are done.',
  ].join('\n');
}
