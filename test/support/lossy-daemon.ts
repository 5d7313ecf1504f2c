/**
 * The real daemon with one defect planted: every 7th MessageEvent is committed but not published.
 * `test/loadtest.test.ts` runs the load test against it to prove the load test's verification
 * catches a daemon that answers 200 without publishing.
 */
import { EventBus } from '../../src/events/bus.js';

const publish = EventBus.prototype.publish;
let n = 0;
EventBus.prototype.publish = function (this: EventBus, conversationId, ev) {
  if (ev.event.kind === 'MessageEvent' && ++n % 7 === 0) return;
  publish.call(this, conversationId, ev);
};
await import('../../bridge/main.js');
