/**
 * Import rules for src/, bridge/, cli/ and scripts/ (docs/architecture.md, "Layers"), checked by
 * `npm test` before the suites run: no import circles, and imports run one way, from a layer to the
 * same or a lower one.
 *
 * Type-only imports count: `import type` ties two modules' designs together just as a value import
 * does, so a lower layer that needs a type from a higher one declares it (or the type moves down).
 * The TypeScript sources are parsed with swc, which sees every import as written (the
 * `typescript` package of this project is 7.x, which dependency-cruiser cannot load).
 */

/** Layers from the bottom up; a module may import its own layer and the ones before it. */
const LAYERS = [
  // config (and the sandbox settings it builds), domain errors, logger, metrics, process groups,
  // body limits, UTC timestamps, and the one redaction function (redaction sits in base because every layer
  // applies it at its exits).
  ['base', '^src/(config|errors|logger|metrics|process-group|body-shape|sandbox-settings|iso-time)\\.ts$|^src/secrets/redact\\.ts$'],
  // the Store interface and engines; the event model (with the tool payload schemas), log, bus, feed
  ['store-events', '^src/(store|events)/'],
  // how anything touches a conversation: bubblewrap, cgroups, in-sandbox file operations
  ['sandbox', '^src/sandbox/'],
  // LLM adapters; the workspace (git, setup, instructions) runs its processes through the sandbox
  ['llm-workspace', '^src/(llm|workspace)/'],
  // encryption at rest and the stored settings (LLM, git providers, MCP servers; settings/: OpenHands' settings, profiles, saved workspaces)
  ['secrets', '^src/(secrets|settings)/'],
  ['tools', '^src/tools/'],
  ['agent', '^src/agent/'],
  ['conversation', '^src/conversation/'],
  ['cluster', '^src/cluster/'],
  // the composition root: the only module that knows every part
  ['composition-root', '^src/core\\.ts$'],
  ['api', '^src/api/'],
  // the package's entry points: parley/server (embedded core) and parley/client
  ['entry-points', '^src/(server|client)\\.ts$'],
  ['bridge', '^bridge/'],
  ['cli', '^cli/'],
];

const upward = LAYERS.slice(0, -1).map(([name, path], i) => {
  const higher = LAYERS.slice(i + 1);
  // a path matched by an earlier (more specific) layer is not in this one: src/secrets/redact.ts
  const lower = LAYERS.slice(0, i).map(([, p]) => p);
  return {
    name: `layer-${name}`,
    comment: `${name} may not import ${higher.map(([n]) => n).join(', ')} (imports run one way)`,
    severity: 'error',
    from: { path, pathNot: lower.length ? lower.join('|') : undefined },
    to: { path: higher.map(([, p]) => p).join('|'), pathNot: `${lower.join('|')}${lower.length ? '|' : ''}${path}` },
  };
});

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'An import circle: the modules cannot be understood, tested or loaded one at a time.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-importing-scripts',
      comment: 'scripts/ (load test, benchmarks, dev helpers) may import anything; nothing imports it.',
      severity: 'error',
      from: { pathNot: '^scripts/' },
      to: { path: '^scripts/' },
    },
    {
      name: 'not-to-unresolvable',
      comment: 'An import that resolves to nothing.',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
    ...upward,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    parser: 'swc',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
