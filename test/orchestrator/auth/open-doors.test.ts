import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { AuditLog } from '../../../src/orchestrator/auth/audit.js';
import { GrantAuthority, GrantIssuer, GrantLifetimes, UploadCredentials } from '../../../src/orchestrator/auth/index.js';
import { OpenDoors, type DoorName, type DoorSetting } from '../../../src/orchestrator/auth/open-doors.js';
import { doorLines } from '../../../src/cli/commands/status.js';
import { resolveConfig } from '../../../src/orchestrator/config/config.js';
import { RequestAuth } from '../../../src/orchestrator/http/auth.js';
import { installErrorHandling } from '../../../src/orchestrator/http/errors.js';
import { SqliteStore } from '../../../src/orchestrator/store/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { removeDir, tempDir } from '../../helpers/mesh.js';

const CLOSED: DoorSetting = { openTo: [], caveats: [] };
const folders: string[] = [];

/** One orchestrator's grant machinery on a store and a data folder (the same ones again: a restart). */
function machinery(store = new SqliteStore(':memory:'), rootKey = randomBytes(32), data = tempDir()) {
  folders.push(data);
  const clock = new FakeClock(Date.parse('2026-12-06T10:00:00Z'));
  const audit = new AuditLog({ store, commits: store.commits, clock, retention: { days: 30, maxRows: 1000 } });
  const authority = new GrantAuthority(rootKey, 'gpumesh');
  const issuer = new GrantIssuer({ store, commits: store.commits, clock, authority, audit, caps: { usage: () => ({ maxQueued: null, deviceSecondsPerDay: null }) } });
  return { store, rootKey, data, clock, audit, authority, issuer };
}

type Machinery = ReturnType<typeof machinery>;

/** A door route behind `requireAtDoor` that asks to submit an image job, answering which grant it acted as. */
async function doorApp(parts: Machinery, doors: OpenDoors, door: DoorName = 'a1111'): Promise<FastifyInstance> {
  const app = Fastify();
  installErrorHandling(app, 1024 * 1024);
  const auth = new RequestAuth({ authority: parts.authority, uploads: new UploadCredentials(parts.rootKey), clock: parts.clock, lifetimes: new GrantLifetimes(parts.authority, parts.clock), doors });
  app.decorateRequest('grant', null);
  app.decorateRequest('grantToken', null);
  app.post('/door', { onRequest: auth.requireAtDoor(door, 'jobs:submit', () => ({ jobType: 'image' })) }, async (request) => ({ grant: request.grant!.id }));
  await app.ready();
  return app;
}

const basic = (text: string): string => `Basic ${Buffer.from(text).toString('base64')}`;

afterEach(() => {
  for (const folder of folders.splice(0)) removeDir(folder);
});

describe('front-door credentials (RequestAuth.requireAtDoor, a real grant authority and store)', () => {
  it('takes the grant as a Bearer token, as Basic\'s password, or as Basic\'s user when the password is empty', async () => {
    const parts = machinery();
    const app = await doorApp(parts, await OpenDoors.open({ comfyui: CLOSED, a1111: CLOSED }, parts));
    const { id, token } = parts.issuer.mintNow('client', ['types image'], 'sillytavern');
    for (const authorization of [`Bearer ${token}`, basic(`sillytavern:${token}`), basic(`${token}:`), basic(token)]) {
      const answer = await app.inject({ method: 'POST', url: '/door', headers: { authorization } });
      expect(answer.statusCode, authorization.slice(0, 12)).toBe(200);
      expect(answer.json()).toEqual({ grant: id });
    }
  });

  it('answers 401 with a Basic challenge for no credentials, an empty Basic (SillyTavern\'s default) or a bad grant; 403 names the caveat', async () => {
    const parts = machinery();
    const app = await doorApp(parts, await OpenDoors.open({ comfyui: CLOSED, a1111: CLOSED }, parts));
    for (const headers of [{}, { authorization: 'Basic ' }, { authorization: basic(':') }, { authorization: basic('me:not-a-grant') }, { authorization: 'Digest x' }]) {
      const answer = await app.inject({ method: 'POST', url: '/door', headers });
      expect(answer.statusCode).toBe(401);
      expect(answer.headers['www-authenticate']).toBe('Basic realm="gpumesh", charset="UTF-8"');
    }
    const video = parts.issuer.mintNow('client', ['types video'], null).token;
    const refused = await app.inject({ method: 'POST', url: '/door', headers: { authorization: basic(`u:${video}`) } });
    expect(refused.statusCode).toBe(403);
    expect(refused.json().error.message).toContain('types video');
    expect(refused.headers['www-authenticate']).toBeUndefined();
  });

  it('an open door lets requests without credentials from its networks act as its narrowed grant, and nobody else', async () => {
    const parts = machinery();
    const doors = await OpenDoors.open({ comfyui: CLOSED, a1111: { openTo: ['192.168.1.0/24', '::1'], caveats: ['types image', 'max-queued 4'] } }, parts);
    const [open] = doors.views();
    expect(open).toMatchObject({ door: 'a1111', openTo: ['192.168.1.0/24', '::1'], caveats: ['types image', 'max-queued 4'] });
    expect(doorLines(doors.views())).toEqual([`door a1111: open without credentials to 192.168.1.0/24, ::1 as grant ${open!.grantId} (types image; max-queued 4)`]);
    const app = await doorApp(parts, doors);
    // From the network, as IPv4 or IPv4-mapped IPv6 (a dual-stack listener), with no header or SillyTavern's empty Basic.
    for (const [remoteAddress, headers] of [['192.168.1.20', {}], ['::ffff:192.168.1.20', { authorization: 'Basic ' }], ['::1', {}]] as const) {
      const answer = await app.inject({ method: 'POST', url: '/door', remoteAddress, headers });
      expect(answer.statusCode, remoteAddress).toBe(200);
      expect(answer.json()).toEqual({ grant: open!.grantId });
    }
    // Elsewhere, or through another door, or with a wrong credential: refused, never traded for the door's grant.
    expect((await app.inject({ method: 'POST', url: '/door', remoteAddress: '192.168.2.20' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'POST', url: '/door', remoteAddress: '192.168.1.20', headers: { authorization: basic('u:forged') } })).statusCode).toBe(401);
    const comfy = await doorApp(parts, doors, 'comfyui');
    expect((await comfy.inject({ method: 'POST', url: '/door', remoteAddress: '192.168.1.20' })).statusCode).toBe(401);
    // The grant is a recorded one: revoking it shuts the door at once.
    await parts.issuer.revoke(open!.grantId);
    const revoked = await app.inject({ method: 'POST', url: '/door', remoteAddress: '192.168.1.20' });
    expect(revoked.statusCode).toBe(401);
    expect(revoked.json().error.code).toBe('GRANT_REVOKED');
  });

  it('keeps a door\'s grant across restarts, mints anew when its caveats change, revokes it when the door closes; each in the audit log', async () => {
    const first = machinery();
    const setting = { openTo: ['10.0.0.0/8'], caveats: ['types workflow'] };
    const opened = (await OpenDoors.open({ comfyui: setting, a1111: CLOSED }, first)).views()[0]!;
    // A restart on the same store and data folder: the same grant.
    const again = machinery(first.store, first.rootKey, first.data);
    expect((await OpenDoors.open({ comfyui: setting, a1111: CLOSED }, again)).views()[0]!.grantId).toBe(opened.grantId);
    // Changed caveats (even a caveat taken away): a new grant, the old one revoked.
    const changed = (await OpenDoors.open({ comfyui: { ...setting, caveats: ['types workflow', 'rate 30/m'] }, a1111: CLOSED }, again)).views()[0]!;
    expect(changed.grantId).not.toBe(opened.grantId);
    expect(again.authority.isRevoked(opened.grantId)).toBe(true);
    const narrower = (await OpenDoors.open({ comfyui: setting, a1111: CLOSED }, again)).views()[0]!;
    expect(narrower.grantId).not.toBe(changed.grantId);
    // Closed: revoked, nothing open.
    expect((await OpenDoors.open({ comfyui: CLOSED, a1111: CLOSED }, again)).views()).toEqual([]);
    expect((await again.issuer.show(narrower.grantId)).revokedAt).not.toBeNull();
    await first.store.commits.durable();
    const events = (await again.audit.list({ limit: 50 })).entries.map((entry) => `${entry.event} ${entry.grantId}`);
    expect(events).toContain(`door:opened ${opened.grantId}`);
    expect(events).toContain(`door:closed ${narrower.grantId}`);
    expect(events).toContain(`grant:minted ${changed.grantId}`);
    first.audit.close();
    again.audit.close();
  });

  it('refuses at start a door whose caveats are no caveats, or claim a kind', async () => {
    const parts = machinery();
    await expect(OpenDoors.open({ comfyui: { openTo: ['127.0.0.1'], caveats: ['colour blue'] }, a1111: CLOSED }, parts)).rejects.toThrow(/doors\.comfyui\.caveats/);
    await expect(OpenDoors.open({ comfyui: CLOSED, a1111: { openTo: ['127.0.0.1'], caveats: ['kind admin'] } }, parts)).rejects.toThrow(/client grant/);
  });

  it('mesh.yaml refuses a door opened without caveats, or to something that is no network', () => {
    expect(() => resolveConfig({ doors: { a1111: { openTo: ['192.168.1.0/24'] } } }, '/tmp/x')).toThrow(/doors\.a1111\.caveats: an open door needs caveats/);
    expect(() => resolveConfig({ doors: { comfyui: { openTo: ['nas.local'], caveats: ['types workflow'] } } }, '/tmp/x')).toThrow(/doors\.comfyui\.openTo\.0: must be an address or a network/);
    expect(() => resolveConfig({ doors: { comfyui: { openTo: ['10.0.0.0/33'], caveats: ['types workflow'] } } }, '/tmp/x')).toThrow(/openTo/);
    expect(resolveConfig({}, '/tmp/x').doors).toEqual({ comfyui: CLOSED, a1111: CLOSED });
  });
});
