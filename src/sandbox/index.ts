export { Sandbox } from './launcher.js';
