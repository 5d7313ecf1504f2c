/**
 * The real daemon with one defect planted: after the 2nd, MessageEvents are committed but not
 * published (a short run on a loaded machine sends as few as 20). (A publication lost here and there is not a defect a subscriber would see: its feed
 * reads a seq gap from the store when the next event arrives.)
 * `test/loadtest.test.ts` runs the load test against it to prove the load test's verification
 * catches a daemon that answers 200 without publishing.
 */
import { EventBus } from '../../src/events/bus.js';

const publish = EventBus.prototype.publish;
let n = 0;
EventBus.prototype.publish = function (this: EventBus, conversationId, ev) {
  if (ev.event.kind === 'MessageEvent' && ++n > 2) return;
  publish.call(this, conversationId, ev);
};
await import('../../bridge/main.js');
