/** The only module that imports uWebSockets.js: moving to another build is a one-line change here. */
import uws from 'uWebSockets.js';
export type { HttpRequest, HttpResponse, TemplatedApp, WebSocket, us_listen_socket } from 'uWebSockets.js';
export const { App, us_listen_socket_close, us_socket_local_port } = uws;
