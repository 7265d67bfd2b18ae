import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { openSse } from '../../../src/orchestrator/http/sse.js';
import { systemClock } from '../../../src/protocol/clock.js';

// The last event of a stream is sent and the stream closed in the same tick (a job's terminal event): it must arrive.
// On Node 22 an HTTP response ended while corked for the tick dropped it (found running the suite on Node 22).
const app = Fastify();
app.get('/stream', (request, reply) => {
  const stream = openSse(request, reply, () => {}, systemClock);
  setTimeout(() => {
    stream.send('running', { n: 1 });
    stream.send('succeeded', { n: 2 }, 'x.2');
    stream.close();
  }, 20);
});
afterAll(() => app.close());

describe('SSE streams', () => {
  it('deliver the events sent in the tick that closes them, then end', async () => {
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    const response = await fetch(`${url}/stream`);
    let text = '';
    for await (const chunk of response.body!) text += Buffer.from(chunk).toString();
    expect(text).toBe('retry: 2000\n\nevent: running\ndata: {"n":1}\n\nid: x.2\nevent: succeeded\ndata: {"n":2}\n\n');
  });
});
