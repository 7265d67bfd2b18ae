import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentMessage, ModelManifest, OrchestratorMessage } from '../../../src/protocol/index.js';
import type { LoadedModel } from '../../../src/agent/core/engine.js';
import { HostConfig } from '../../../src/agent/models/host-config.js';
import { AgentRelays } from '../../../src/agent/relay/relays.js';
import { waitFor } from '../../helpers/mesh.js';

type RelayOpen = Extract<OrchestratorMessage, { type: 'relay-open' }>;

let server: Server;
let url: string;
const seen: { headers: Record<string, unknown>; body: string }[] = [];

beforeAll(async () => {
  server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      seen.push({ headers: request.headers, body });
      response.writeHead(200, { 'content-type': 'text/plain', 'set-cookie': 'session=1', 'x-comfy': 'yes' });
      response.end(`you sent ${body.length} bytes`);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => server.close());

const manifest = (name: string, settings: Record<string, unknown> = {}): ModelManifest =>
  ({ name, version: '1', engine: 'comfyui', digest: `sha256:${name}`, jobTypes: ['image'], memoryMB: 16, settings, file: false }) as unknown as ModelManifest;

function agentRelays(models: Record<string, Record<string, unknown>>, serverUrl = (): string => url) {
  const sent: AgentMessage[] = [];
  const held = new Map<string, number>();
  const relays = new AgentRelays({
    hostConfig: HostConfig.of({ models: Object.fromEntries(Object.entries(models).map(([name, settings]) => [name, { settings }])) }, 'host.yaml'),
    send: (message) => sent.push(message),
    refusal: () => null,
    log: pino({ level: 'silent' }),
    residency: {
      acquire: async (sent) => {
        held.set(sent.name, (held.get(sent.name) ?? 0) + 1);
        return { loaded: { manifest: sent, serverUrl } as unknown as LoadedModel, loadMs: 0 };
      },
      release: (loaded) => held.set(loaded.manifest.name, held.get(loaded.manifest.name)! - 1),
    },
  });
  return { relays, sent, held };
}

const open = (relayId: string, model: ModelManifest, body: boolean): RelayOpen => ({
  type: 'relay-open', relayId, model, chunkBytes: 4096, windowBytes: 65536,
  request: { kind: 'http', method: body ? 'POST' : 'GET', path: '/prompt?x=1', headers: [['authorization', 'Bearer grant'], ['content-type', 'text/plain']], body },
});

describe('the agent\'s pass-through relays', () => {
  it('a model its host config does not open is refused, whatever the orchestrator\'s manifest says; one the host does not declare too', () => {
    const { relays, sent } = agentRelays({ comfy: { url: 'http://127.0.0.1:1' } });
    relays.open(open('r1', manifest('comfy', { passthrough: true }), false));
    relays.open(open('r2', manifest('elsewhere', { url, passthrough: true }), false));
    expect(sent).toEqual([
      { type: 'relay-close', relayId: 'r1', error: { code: 'PASSTHROUGH_NOT_FOUND', message: expect.stringContaining('passthrough: true') } },
      { type: 'relay-close', relayId: 'r2', error: { code: 'PASSTHROUGH_NOT_FOUND', message: expect.stringContaining('not declared') } },
    ]);
    expect(relays.size).toBe(0);
  });

  it('relays a request to the model\'s server: the body as it comes, credited; the answer back without cookies; the model held until it ends', async () => {
    const { relays, sent, held } = agentRelays({ comfy: { url, passthrough: true } });
    relays.open(open('r1', manifest('comfy'), true));
    expect(relays.holds('comfy')).toBe(true);
    relays.receive({ type: 'relay-data', relayId: 'r1', data: Buffer.from('hello ').toString('base64'), at: 0 });
    relays.receive({ type: 'relay-data', relayId: 'r1', data: Buffer.from('comfy').toString('base64'), at: 6, end: true });
    await waitFor(() => sent.some((message) => message.type === 'relay-data' && message.end), { what: 'the answer' });
    expect(seen.at(-1)!.body).toBe('hello comfy');
    expect(seen.at(-1)!.headers.authorization).toBeUndefined();
    const head = sent.find((message) => message.type === 'relay-head')!;
    expect(head).toMatchObject({ status: 200 });
    expect(Object.fromEntries((head as { headers: [string, string][] }).headers)).toMatchObject({ 'content-type': 'text/plain', 'x-comfy': 'yes' });
    expect(JSON.stringify(head)).not.toContain('set-cookie');
    const answer = sent.filter((message) => message.type === 'relay-data').map((message) => Buffer.from((message as { data: string }).data, 'base64').toString()).join('');
    expect(answer).toBe('you sent 11 bytes');
    expect(sent.filter((message) => message.type === 'relay-credit').reduce((sum, message) => sum + (message as { bytes: number }).bytes, 0)).toBe(11);
    expect(held.get('comfy')).toBe(0);
    expect(relays.holds('comfy')).toBe(false);
  });

  it('a server that cannot be reached fails the relay before any answer; a dropped link ends every relay and lets its model go', async () => {
    const { relays, sent, held } = agentRelays({ comfy: { url, passthrough: true } }, () => 'http://127.0.0.1:1');
    relays.open(open('r1', manifest('comfy'), false));
    await waitFor(() => sent.length > 0, { what: 'the refusal' });
    expect(sent).toEqual([{ type: 'relay-close', relayId: 'r1', error: { code: 'RELAY_FAILED', message: expect.stringContaining('could not be reached') } }]);
    expect(held.get('comfy')).toBe(0);

    const linked = agentRelays({ comfy: { url, passthrough: true } });
    linked.relays.open(open('r2', manifest('comfy'), true));
    linked.relays.open(open('r3', manifest('comfy'), true));
    linked.relays.disconnected();
    expect(linked.relays.size).toBe(0);
    await waitFor(() => linked.held.get('comfy') === 0, { what: 'the model to be let go' });
    expect(linked.relays.holds('comfy')).toBe(false);
  });
});
