/**
 * GET /docs: Swagger UI (the `swagger-ui-dist` package, served from node_modules: no CDN, works
 * offline) rendering /openapi.json. With session keys configured, "Authorize" takes the key
 * (apiKey header X-Session-API-Key) and "Try it out" sends real requests with it.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { RouteMetric } from './metrics.js';
import { send, sendJson, watchAbort } from './http.js';
import type { TemplatedApp } from './uws.js';

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Parley API</title>
<link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head><body><div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body></html>`;

// a file of its own rather than an inline script, so a strict Content-Security-Policy (script-src 'self') can apply
const INIT = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  tryItOutEnabled: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: 'BaseLayout',
});`;

/** The package's files the page uses, and their types. */
const ASSETS: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'favicon-32x32.png': 'image/png',
};

export function mountDocs(app: TemplatedApp): void {
  // found and read on first use: no node_modules lookup at start, and the bundle is 1.5 MB that a
  // daemon nobody browses never needs in memory
  const cache = new Map<string, Buffer>();
  let dir: string | undefined;
  const metric = new RouteMetric('GET', '/docs');
  const assetMetric = new RouteMetric('GET', '/docs/{asset}');
  const page = (res: Parameters<Parameters<TemplatedApp['get']>[1]>[0]) => send(res, watchAbort(res, metric), 200, PAGE, 'text/html; charset=utf-8');
  app.get('/docs', page);
  app.get('/docs/', page);
  app.get('/docs/*', (res, req) => {
    const state = watchAbort(res, assetMetric);
    const name = req.getUrl().slice('/docs/'.length);
    if (name === 'init.js') return send(res, state, 200, INIT, 'text/javascript; charset=utf-8');
    const type = ASSETS[name];
    if (!type) return sendJson(res, state, 404, { detail: 'Not Found' });
    let body = cache.get(name);
    if (!body) {
      dir ??= path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
      cache.set(name, (body = fs.readFileSync(path.join(dir, name))));
    }
    send(res, state, 200, body, type, { 'cache-control': 'public, max-age=86400' });
  });
}
