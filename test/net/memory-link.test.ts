import { describe, expect, it } from 'vitest';
import { ClonedMessage, MemorySocket, readLinkMessage, sendLinkMessage } from '../../src/net/memory-link.js';
import { OrchestratorMessage } from '../../src/protocol/index.js';

/** A schema that refuses everything: what a message that must not be checked is read with. */
const refuseAll = { safeParse: () => ({ success: false as const, error: { issues: [{ path: ['type'], message: 'refused' }] } }) };

const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('an in-process link (MemorySocket)', () => {
  it('hands each message to the other end, in order, after the sender returns', async () => {
    const [a, b] = MemorySocket.pair();
    const got: string[] = [];
    b.on('message', (data: string, isBinary: boolean) => got.push(`${data}${isBinary ? ' (binary)' : ''}`));
    a.send('one');
    a.send('two');
    expect(got).toEqual([]); // never inside the sender's call
    await settle();
    expect(got).toEqual(['one', 'two']);
  });

  it('closes both ends with the same code and reason, and carries nothing after', async () => {
    const [agent, hub] = MemorySocket.pair();
    const closes: string[] = [];
    agent.on('close', (code: number, reason: Buffer) => closes.push(`agent ${code} ${reason.toString()}`));
    hub.on('close', (code: number, reason: Buffer) => closes.push(`hub ${code} ${reason.toString()}`));
    const heard: string[] = [];
    agent.on('message', (data: string) => heard.push(data));
    hub.send('sent before the close');
    hub.close(4403, 'refused');
    hub.send('sent after it');
    hub.close(1000, 'twice');
    await settle();
    expect(closes.sort()).toEqual(['agent 4403 refused', 'hub 4403 refused']);
    expect(heard).toEqual(['sent before the close']); // as a close frame follows the frames sent before it
    expect([agent.readyState, hub.readyState]).toEqual([3, 3]);
  });

  it('terminate is a close without a close frame (1006), and a ping is answered at once', async () => {
    const [a, b] = MemorySocket.pair();
    let pongs = 0;
    a.on('pong', () => pongs++);
    a.ping();
    await settle();
    expect(pongs).toBe(1);
    const codes: number[] = [];
    b.on('close', (code: number) => codes.push(code));
    a.terminate();
    await settle();
    expect(codes).toEqual([1006]);
    a.ping();
    await settle();
    expect(pongs).toBe(1);
  });

  it('sends a message as a copy taken when it is sent, which the receiver reads as it would the JSON text', async () => {
    const [a, b] = MemorySocket.pair();
    const got: unknown[] = [];
    b.on('message', (data: ClonedMessage) => got.push(data));
    const message = { type: 'run', jobs: [{ id: 'j1', input: { x: [0.1, -2.5e-7, 3] } }] };
    sendLinkMessage(a, message);
    message.jobs[0]!.input.x[0] = 99; // changed after the send: the receiver must not see it
    await settle();
    expect(got[0]).toBeInstanceOf(ClonedMessage);
    // Taken as it is: a message from this program, typed when it was sent (a socket's text is checked; below).
    const value = readLinkMessage(got[0] as ClonedMessage, refuseAll) as typeof message;
    expect(value).toEqual({ type: 'run', jobs: [{ id: 'j1', input: { x: [0.1, -2.5e-7, 3] } }] });
    expect(value.jobs[0]!.input).not.toBe(message.jobs[0]!.input); // nothing shared with the sender
  });

  it('a socket without sendMessage (a WebSocket) gets JSON text, and text is parsed and checked on receipt', () => {
    const sent: string[] = [];
    sendLinkMessage({ send: (data: string) => sent.push(data) }, { type: 'ack', jobIds: ['j1'] });
    expect(sent).toEqual(['{"type":"ack","jobIds":["j1"]}']);
    expect(readLinkMessage(Buffer.from(sent[0]!), OrchestratorMessage)).toEqual({ type: 'ack', jobIds: ['j1'] });
    expect(() => readLinkMessage('not json', OrchestratorMessage)).toThrow(SyntaxError);
    expect(() => readLinkMessage('{"type":"ack","jobIds":[7]}', OrchestratorMessage)).toThrow(/jobIds\.0: /);
    expect(() => readLinkMessage('{"type":"ack"}', refuseAll)).toThrow('type: refused');
  });

  it("a run's manifest arrives as one frozen copy per manifest: the JSON copy, never the sender's object", async () => {
    const [a, b] = MemorySocket.pair();
    const got: Record<string, unknown>[] = [];
    b.on('message', (data: ClonedMessage) => got.push(data.value as Record<string, unknown>));
    const manifest = { name: 'simple', settings: { process: 'agent', gone: undefined }, inputs: [{ name: 'INPUT0', shape: ['batch', 16] }] };
    const run = (batchId: string): object => ({ type: 'run', batchId, model: manifest, uploadCredential: 'c', jobs: [{ id: 'j', input: { x: [1, 2] } }] });
    a.sendMessage(run('b1'));
    a.sendMessage(run('b2'));
    await settle();
    expect(got.map((message) => message.batchId)).toEqual(['b1', 'b2']);
    expect(got[0]).toEqual(JSON.parse(JSON.stringify(run('b1'))));
    expect(got[0]!.model).toBe(got[1]!.model);
    expect(got[0]!.model).not.toBe(manifest);
    expect(got[0]!.jobs).not.toBe(got[1]!.jobs);
    const copy = got[0]!.model as typeof manifest;
    expect(Object.isFrozen(copy) && Object.isFrozen(copy.settings) && Object.isFrozen(copy.inputs[0]!.shape)).toBe(true);
    expect(() => { copy.settings.process = 'worker'; }).toThrow(TypeError);
  });
});
