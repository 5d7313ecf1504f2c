/** Stylesheets are bundled by esbuild (scripts/build.mjs) into the page's one CSS file. */
declare module '*.css';
