import { describe, expect, it } from 'vitest';
import { answerHeaders, headerRecord, headersWithin, onlyHeaders, requestHeaders, socketHeaders } from '../../src/net/relay-headers.js';

describe('the headers a relay carries', () => {
  it('a client\'s request: what describes its body and what it accepts, never its grant, cookies, host or origin', () => {
    const relayed = requestHeaders({
      authorization: 'Bearer secret', cookie: 'a=b', host: 'mesh:7070', origin: 'http://mesh:7070', connection: 'keep-alive', 'transfer-encoding': 'chunked',
      'content-type': 'application/json', 'content-length': '12', accept: '*/*', 'comfy-user': 'me', range: 'bytes=0-9', 'x-forwarded-for': '1.2.3.4',
    });
    expect(Object.fromEntries(relayed)).toEqual({ 'content-type': 'application/json', 'content-length': '12', accept: '*/*', 'comfy-user': 'me', range: 'bytes=0-9' });
    expect(socketHeaders({ authorization: 'Bearer x', 'sec-websocket-protocol': 'a, b', 'sec-websocket-key': 'k' })).toEqual([['sec-websocket-protocol', 'a, b']]);
  });

  it('ComfyUI\'s answer: all but hop-by-hop headers, those Connection names, cookies, and what the orchestrator sets itself', () => {
    const relayed = answerHeaders({
      'content-type': 'image/png', 'content-length': '3', 'set-cookie': ['a=1', 'b=2'], connection: 'keep-alive, x-private', 'x-private': 'no',
      'keep-alive': 'timeout=5', 'transfer-encoding': 'chunked', 'content-security-policy': "script-src 'self'", 'x-comfy': 'yes',
    });
    expect(Object.fromEntries(relayed)).toEqual({ 'content-type': 'image/png', 'content-length': '3', 'x-comfy': 'yes' });
  });

  it('a name that repeats stays repeated, and each side applies its rule again to what the other sent', () => {
    expect(headerRecord([['accept', 'a'], ['accept', 'b'], ['range', 'r']])).toEqual({ accept: ['a', 'b'], range: 'r' });
    expect(onlyHeaders([['authorization', 'Bearer x'], ['accept', 'a']], 'request')).toEqual([['accept', 'a']]);
    expect(onlyHeaders([['set-cookie', 'a=1'], ['etag', '"1"']], 'answer')).toEqual([['etag', '"1"']]);
  });

  it('a head keeps its headers in order for as long as they fit a frame', () => {
    expect(headersWithin([['a', 'x'.repeat(10)], ['b', 'y'.repeat(10)], ['c', 'z']], 40)).toEqual([['a', 'x'.repeat(10)], ['b', 'y'.repeat(10)]]);
  });
});
