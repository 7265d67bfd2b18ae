import { describe, expect, it } from 'vitest';
import { closeReason, MessagePump, piecesOf, ReceiveWindow, RelayClosed, SendWindow, sendableCloseCode, sendStream } from '../../src/net/relay-flow.js';

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('a relay\'s flow control', () => {
  it('a sender takes no more than the window holds, waits in order for credit, and stops when the relay closes', async () => {
    const window = new SendWindow(10);
    await window.take(6);
    expect(window.fits(5)).toBe(false);
    const order: string[] = [];
    const first = window.take(5).then(() => order.push('first'));
    const second = window.take(1).then(() => order.push('second'));
    await tick();
    // The second would fit now, but waits behind the first.
    expect(order).toEqual([]);
    window.credit(2);
    await first;
    await second;
    expect(order).toEqual(['first', 'second']);
    const stuck = window.take(10);
    window.close();
    await expect(stuck).rejects.toBeInstanceOf(RelayClosed);
    await expect(window.take(0)).rejects.toBeInstanceOf(RelayClosed);
  });

  it('a receiver refuses a sender that runs past its window, and a piece that does not start where the last ended', () => {
    const window = new ReceiveWindow(10);
    expect(window.received(8, 0)).toBeNull();
    window.handedOn(8);
    expect(window.received(10, 8)).toBeNull();
    expect(window.received(1, 18)).toMatch(/window/);
    expect(new ReceiveWindow(10).received(4, 4)).toMatch(/lost/);
  });

  it('a stream goes in pieces of the chunk size, each only once credited room: what is sent ahead never passes the window', async () => {
    const window = new SendWindow(8);
    const sent: Buffer[] = [];
    async function* source(): AsyncGenerator<Uint8Array> {
      yield Buffer.from('abcdefghij'); // 10 bytes: pieces of 4, 4, 2
      yield Buffer.alloc(0);
      yield Buffer.from('klm');
    }
    const done = sendStream(source(), window, 4, (piece) => sent.push(Buffer.from(piece)));
    await tick();
    expect(sent.map(String)).toEqual(['abcd', 'efgh']);
    window.credit(4);
    await tick();
    expect(sent.map(String)).toEqual(['abcd', 'efgh', 'ij']);
    window.credit(8);
    await done;
    expect(Buffer.concat(sent).toString()).toBe('abcdefghijklm');
    expect(piecesOf(Buffer.alloc(0), 4)).toHaveLength(1);
  });

  it('a socket\'s messages go on whole and in order, in pieces with fin on the last; the socket is paused while a piece waits; its close comes last', async () => {
    const window = new SendWindow(5);
    const socket = { isPaused: false, pause() { this.isPaused = true; }, resume() { this.isPaused = false; } };
    const sent: { text: string; binary: boolean; fin: boolean }[] = [];
    const closed: [number, string][] = [];
    const pump = new MessagePump({
      window, chunkBytes: 3, socket,
      send: (piece, flags) => sent.push({ text: piece.toString(), ...flags }),
      closed: (code, reason) => closed.push([code, reason]),
    });
    pump.message(Buffer.from('hello'), false);
    pump.message(Buffer.from('xy'), true);
    pump.close(1000, 'bye');
    await tick();
    expect(sent).toEqual([{ text: 'hel', binary: false, fin: false }, { text: 'lo', binary: false, fin: true }]);
    expect(socket.isPaused).toBe(true);
    expect(closed).toEqual([]);
    window.credit(5);
    await tick();
    expect(sent.at(-1)).toEqual({ text: 'xy', binary: true, fin: true });
    expect(closed).toEqual([[1000, 'bye']]);
    expect(socket.isPaused).toBe(false);
  });

  it('close codes an endpoint may not send become 1000; reasons fit a close frame', () => {
    expect([1000, 1001, 1006, 1005, 1011, 4001, 2999, undefined].map(sendableCloseCode)).toEqual([1000, 1001, 1000, 1000, 1011, 4001, 1000, 1000]);
    expect(Buffer.byteLength(closeReason('é'.repeat(100)))).toBeLessThanOrEqual(123);
  });
});
