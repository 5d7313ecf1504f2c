/**
 * A copy of the built daemon's bundle (dist/daemon.cjs) whose esbuild module wrappers (`__esm`,
 * `__commonJS`) record each module's first evaluation: its name (the module's source path), the
 * heap it holds (after a full GC before and after, less what the modules it loads hold), the RSS
 * grown meanwhile and the time taken. The packages the bundle leaves out and requires on first use
 * (the AI SDK, the MCP SDK, tRPC, NATS, pg) are recorded the same way when first required, each as
 * `node_modules/<package>/` (a subpath as `node_modules/<package>/<subpath>`). SIGUSR2 makes the process write one line to stderr,
 * `parley-modules <JSON>`, with the modules evaluated since the last such line. Used by
 * scripts/bench-memory.ts (`--modules`) and test/daemon-lazy-modules.test.ts.
 */
import fs from 'node:fs';
import path from 'node:path';

export interface EvaluatedModule {
  name: string;
  /** heap held after a full GC, less what the modules it loaded hold (bytes) */
  heap: number;
  /** RSS grown meanwhile (bytes; native memory too, and whatever else the process did meanwhile) */
  rss: number;
  ms: number;
}

/**
 * Writes the instrumented copy of `dist`/daemon.cjs and a runner for it into `dir`, and returns
 * the runner's path: run it with `node --expose-gc` (the daemon's other flags as wished). It runs
 * the copy as dist/main.mjs runs the bundle (without the code cache): paths beside it (the writer
 * thread, the console) are `dist`'s.
 */
export function instrumentedBundle(dist: string, dir: string): string {
  const src = fs.readFileSync(path.join(dist, 'daemon.cjs'), 'utf8');
  // esbuild's module wrappers (its minifier may rename their parameters)
  const esm =
    /var __esm=\((\w+),(\w+),(\w+)\)=>function\(\)\{if\(\3\)throw \3\[0\];try\{return \1&&\(\2=\(0,\1\[__getOwnPropNames\(\1\)\[0\]\]\)\(\1=0\)\),\2\}catch\((\w+)\)\{throw \3=\[\4\],\4\}\};/;
  const cjs =
    /var __commonJS=\((\w+),(\w+)\)=>function\(\)\{try\{return \2\|\|\(0,\1\[__getOwnPropNames\(\1\)\[0\]\]\)\(\(\2=\{exports:\{\}\}\)\.exports,\2\),\2\.exports\}catch\((\w+)\)\{throw \2=0,\3\}\};/;
  if (!esm.test(src) || !cjs.test(src)) throw new Error("the bundle's module wrappers are not esbuild's as this probe knows them");
  // each module's first evaluation is measured: a full GC (when exposed), the heap, the evaluation, a
  // full GC, the heap (less what the modules it loaded hold: they are measured as themselves)
  const probe = `globalThis.__mods=[];globalThis.__stack=[];const __gc=typeof gc==='function'?gc:()=>{};globalThis.__measure=function(name,run){__gc();const h0=process.memoryUsage().heapUsed,r0=process.memoryUsage.rss(),t0=performance.now(),frame={inner:0,innerRss:0};__stack.push(frame);try{return run()}finally{__stack.pop();__gc();const all=process.memoryUsage().heapUsed-h0,allRss=process.memoryUsage.rss()-r0;__mods.push({name,heap:all-frame.inner,rss:allRss-frame.innerRss,ms:performance.now()-t0});if(__stack.length){__stack[__stack.length-1].inner+=all;__stack[__stack.length-1].innerRss+=allRss}}};process.on('SIGUSR2',()=>{process.stderr.write('parley-modules '+JSON.stringify(__mods.splice(0))+'\\n')});`;
  const patched = src
    .replace(
      esm,
      `var __esm=(fn,res,err)=>function(){if(err)throw err[0];try{if(fn){const name=__getOwnPropNames(fn)[0],f=fn;fn=0;res=__measure(name,()=>(0,f[name])())}return res}catch(e){throw err=[e],e}};`,
    )
    .replace(
      cjs,
      'var __commonJS=(cb,mod)=>function(){try{if(!mod){const name=__getOwnPropNames(cb)[0];mod={exports:{}};__measure(name,()=>(0,cb[name])(mod.exports,mod))}return mod.exports}catch(e){throw mod=0,e}};',
    );
  fs.writeFileSync(path.join(dir, 'daemon.cjs'), patched);
  // the bundle's require: a package it left out (a bare name, not a built-in) is measured when first required
  const requireProbe = [
    "const __req=createRequire(dist+'/daemon.cjs'),__seen=new Set();",
    'const __left=(id)=>!__seen.has(id)&&!/^(node:|[./])/.test(id)&&!require("node:module").isBuiltin(id);',
    "const __pkg=(id)=>id.split('/').slice(0,id.startsWith('@')?2:1).join('/');",
    'const __require=Object.assign((id)=>{if(!__left(id))return __req(id);__seen.add(id);',
    "return __measure('node_modules/'+(id===__pkg(id)?id+'/':id),()=>__req(id))},__req);",
  ].join('');
  const run = [
    "const {createRequire}=require('node:module');const vm=require('node:vm');const fs=require('node:fs');",
    `const dist=${JSON.stringify(dist)};${requireProbe}`,
    `const code=fs.readFileSync(${JSON.stringify(path.join(dir, 'daemon.cjs'))},'utf8');const m={exports:{}};`,
    "new vm.Script('(function (exports, require, module, __filename, __dirname, __parleyMetaUrl) {'+code+'\\n})',{filename:dist+'/daemon.cjs'})",
    ".runInThisContext()(m.exports,__require,m,dist+'/daemon.cjs',dist,require('node:url').pathToFileURL(dist+'/main.mjs').href);",
  ].join('');
  const runner = `${probe}${run}`;
  const file = path.join(dir, 'run.cjs');
  fs.writeFileSync(file, runner);
  return file;
}
