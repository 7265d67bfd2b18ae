import net from 'node:net';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { frameworkErrorOptions, installErrorHandling } from '../../../src/orchestrator/http/errors.js';

describe('error handling while the server closes', () => {
  it('a request that reaches the server after it began to close is 503 NOT_READY in the envelope', async () => {
    const app = Fastify({ ...frameworkErrorOptions() });
    installErrorHandling(app, 1024);
    let entered!: () => void;
    let release!: () => void;
    let closing!: () => void;
    const inSlow = new Promise<void>((resolve) => (entered = resolve));
    const gate = new Promise<void>((resolve) => (release = resolve));
    const preClosed = new Promise<void>((resolve) => (closing = resolve));
    app.get('/slow', async () => {
      entered();
      await gate;
      return { ok: true };
    });
    app.get('/fast', async () => ({ ok: true }));
    // Runs after installErrorHandling's own preClose hook, so the server counts as closing by then.
    app.addHook('preClose', (done) => {
      closing();
      done();
    });
    let refuse!: () => void;
    const refused = new Promise<void>((resolve) => (refuse = resolve));
    app.addHook('onError', (request, _reply, _error, done) => {
      if (request.url === '/fast') refuse();
      done();
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as net.AddressInfo;

    // A keep-alive connection busy with a slow request is not closed with the server, so a second
    // request on it, written once the close has begun, still reaches the routes.
    const socket = net.connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    const socketClosed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write('GET /slow HTTP/1.1\r\nhost: x\r\n\r\n');
    await inSlow;
    const closed = app.close();
    await preClosed;
    socket.write('GET /fast HTTP/1.1\r\nhost: x\r\n\r\n');
    await refused;
    release();
    await closed;
    await socketClosed;

    const text = Buffer.concat(received).toString();
    const [first, second] = text.split(/(?=HTTP\/1\.1 )/);
    expect(first).toMatch(/^HTTP\/1\.1 200/);
    expect(second).toMatch(/^HTTP\/1\.1 503/);
    expect(JSON.parse(second!.slice(second!.indexOf('\r\n\r\n') + 4))).toEqual({
      error: { code: 'NOT_READY', message: 'Not ready: the orchestrator is shutting down' },
    });
  });
});
