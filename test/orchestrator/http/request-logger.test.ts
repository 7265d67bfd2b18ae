import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { requestLogger } from '../../../src/orchestrator/http/request-logger.js';

describe('a request\'s logger', () => {
  it('is made on its first use, with the request\'s bindings, and logs as pino\'s child would', () => {
    const lines: Record<string, unknown>[] = [];
    const parent = pino({ level: 'info' }, new Writable({ write(chunk, _encoding, done) { lines.push(JSON.parse(String(chunk)) as Record<string, unknown>); done(); } }));
    const child = vi.spyOn(parent, 'child');
    const log = requestLogger(parent, { reqId: 'req-7' }, {});
    expect(child).not.toHaveBeenCalled();
    expect(log.level).toBe('info');
    log.debug('below the level');
    log.warn({ code: 'X' }, 'something to say');
    log.error(new Error('boom'), 'it broke');
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines).toEqual([
      expect.objectContaining({ level: 40, reqId: 'req-7', code: 'X', msg: 'something to say' }),
      expect.objectContaining({ level: 50, reqId: 'req-7', msg: 'it broke', err: expect.objectContaining({ message: 'boom' }) }),
    ]);
    log.child({ part: 'inner' }).info('deeper');
    expect(lines.at(-1)).toMatchObject({ reqId: 'req-7', part: 'inner', msg: 'deeper' });
  });
});
