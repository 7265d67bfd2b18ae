import { createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { meshErrorOf } from '../../helpers/errors.js';
import { GrantAuthority, GrantLifetimes, narrowGrant, UploadCredentials, type GrantEnd } from '../../../src/orchestrator/auth/index.js';
import { caveatsFromOptions } from '../../../src/protocol/api/index.js';
import { inspectGrant } from '../../../src/protocol/grant-token.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const NOW = Date.parse('2026-12-02T10:00:00Z');
const authority = new GrantAuthority(randomBytes(32), 'http://test');


describe('grants', () => {
  it('a client grant allows what its caveats allow and names the caveat that fails', () => {
    const { token } = authority.mint('client', ['types image', 'models gen']);
    const grant = authority.verify(token, NOW);
    expect(() => authority.authorize(grant, { action: 'jobs:submit', jobType: 'image', model: 'gen' }, NOW)).not.toThrow();
    const error = meshErrorOf(() => authority.authorize(grant, { action: 'jobs:submit', jobType: 'video', model: 'gen' }, NOW));
    expect(error.code).toBe('GRANT_DENIED');
    expect(error.status).toBe(403);
    expect(error.message).toContain('types image');
    expect(error.message).toContain('"video"');
    expect(meshErrorOf(() => authority.authorize(grant, { action: 'grants:create' }, NOW)).message).toContain('kind client');
  });

  it('narrowing offline can only take away', () => {
    const { token } = authority.mint('client', ['types image,video']);
    const narrowed = narrowGrant(token, caveatsFromOptions({ types: ['video'], expires: '10m' }, NOW));
    const grant = authority.verify(narrowed, NOW);
    expect(() => authority.authorize(grant, { action: 'jobs:submit', jobType: 'video' }, NOW)).not.toThrow();
    expect(meshErrorOf(() => authority.authorize(grant, { action: 'jobs:submit', jobType: 'image' }, NOW)).code).toBe('GRANT_DENIED');
    // "Widening" by adding a broader caveat still leaves the narrower one in force.
    const widened = authority.verify(narrowGrant(narrowed, ['types image,video,text']), NOW);
    expect(meshErrorOf(() => authority.authorize(widened, { action: 'jobs:submit', jobType: 'image' }, NOW)).code).toBe('GRANT_DENIED');
    expect(widened.types).toEqual(['video']);
    expect(widened.id).toBe(authority.verify(token, NOW).id);
    expect(meshErrorOf(() => authority.verify(narrowed, NOW + 11 * 60_000)).code).toBe('GRANT_EXPIRED');
  });

  it('rejects tampering, foreign keys, garbage and unknown caveats', () => {
    const { token } = authority.mint('client', ['types image']);
    const other = new GrantAuthority(randomBytes(32), 'http://other');
    expect(meshErrorOf(() => other.verify(token, NOW)).code).toBe('GRANT_INVALID');
    expect(meshErrorOf(() => authority.verify('not-a-grant', NOW)).code).toBe('GRANT_INVALID');
    // Drop the caveat by re-encoding without it: the signature no longer matches.
    const bytes = Buffer.from(token, 'base64url');
    const stripped = Buffer.from(bytes.toString('latin1').replace('types image', 'types video'), 'latin1').toString('base64url');
    expect(meshErrorOf(() => authority.verify(stripped, NOW)).code).toBe('GRANT_INVALID');
    expect(() => narrowGrant(token, ['colour blue'])).toThrow(/unknown caveat condition/);
  });

  it('agent grants bind a host and its classes', () => {
    const agent = authority.verify(authority.mint('agent', ['host laptop', 'classes image']).token, NOW);
    expect(() => authority.authorize(agent, { action: 'agent:join', host: 'laptop', classes: ['image'] }, NOW)).not.toThrow();
    expect(meshErrorOf(() => authority.authorize(agent, { action: 'agent:join', host: 'desktop', classes: ['image'] }, NOW)).message).toContain('host laptop');
    expect(meshErrorOf(() => authority.authorize(agent, { action: 'agent:join', host: 'laptop', classes: ['image', 'video'] }, NOW)).message).toContain('video');
    expect(meshErrorOf(() => authority.authorize(agent, { action: 'jobs:submit', jobType: 'image' }, NOW)).code).toBe('GRANT_DENIED');
  });

  it('a hosts caveat narrows where jobs may run (applied by routing) and which host ids an agent may join as', () => {
    const { token } = authority.mint('client', ['hosts laptop,desktop']);
    const client = authority.verify(narrowGrant(token, ['hosts desktop,cloud']), NOW);
    expect(client.hosts).toEqual(['desktop']);
    // A submit names no host: the caveat holds, and the job keeps the allowed hosts for the router.
    expect(() => authority.authorize(client, { action: 'jobs:submit', jobType: 'image' }, NOW)).not.toThrow();
    const agent = authority.verify(authority.mint('agent', caveatsFromOptions({ hosts: ['laptop', 'laptop-2'] }, NOW)).token, NOW);
    expect(() => authority.authorize(agent, { action: 'agent:join', host: 'laptop-2', classes: ['image'] }, NOW)).not.toThrow();
    expect(meshErrorOf(() => authority.authorize(agent, { action: 'agent:join', host: 'desktop', classes: ['image'] }, NOW)).message)
      .toContain('caveat "hosts laptop,laptop-2" failed (host "desktop" is not among laptop, laptop-2)');
    expect(() => narrowGrant(token, ['hosts not a list!'])).toThrow(/malformed list/);
  });

  it('upload credentials name one batch, expire, and cannot be forged or passed off as grants', () => {
    const credentials = new UploadCredentials(new Uint8Array(32).fill(7));
    const token = credentials.mint('b_1', NOW + 1000);
    expect(UploadCredentials.looksLike(token)).toBe(true);
    expect(credentials.verify(token, NOW)).toEqual({ batchId: 'b_1' });
    expect(meshErrorOf(() => credentials.verify(token, NOW + 1000)).code).toBe('GRANT_EXPIRED');
    expect(meshErrorOf(() => credentials.verify(token.replace('b_1', 'b_2'), NOW)).code).toBe('GRANT_INVALID');
    expect(meshErrorOf(() => new UploadCredentials(new Uint8Array(32).fill(8)).verify(token, NOW)).code).toBe('GRANT_INVALID');
    expect(meshErrorOf(() => credentials.verify('gmu1.b_1', NOW)).code).toBe('GRANT_INVALID');
    expect(meshErrorOf(() => authority.verify(token, NOW)).code).toBe('GRANT_INVALID');
  });

  it('an upload credential is signed with HMAC-SHA256 under the key derived from the root key, as before its pads were kept', () => {
    const root = new Uint8Array(32).fill(7);
    const token = new UploadCredentials(root).mint('b_\u00e9x', NOW + 1000);
    const key = createHmac('sha256', root).update('gpumesh upload credentials v1').digest();
    const body = token.slice(0, token.lastIndexOf('.'));
    expect(token.slice(body.length + 1)).toBe(createHmac('sha256', key).update(body).digest('base64url'));
  });

  it('revocation applies to every narrowed copy', () => {
    const minted = authority.mint('client');
    const narrowed = narrowGrant(minted.token, ['types image']);
    authority.revoke(minted.id);
    expect(meshErrorOf(() => authority.verify(narrowed, NOW)).code).toBe('GRANT_REVOKED');
  });

  it('a TLS mesh names its CA in every grant it mints; the caveat holds for any request and tells the holder what to pin', () => {
    const pin = `sha256:${'ab'.repeat(32)}`;
    const tlsAuthority = new GrantAuthority(randomBytes(32), 'https://test', [], [`tls-ca ${pin}`]);
    for (const kind of ['admin', 'client', 'agent'] as const) {
      const minted = tlsAuthority.mint(kind, kind === 'agent' ? ['host laptop'] : []);
      expect(minted.caveats.at(-1)).toBe(`tls-ca ${pin}`);
      expect(inspectGrant(minted.token).caveats).toEqual(minted.caveats);
    }
    const client = tlsAuthority.verify(tlsAuthority.mint('client', ['types image']).token, NOW);
    expect(() => tlsAuthority.authorize(client, { action: 'jobs:submit', jobType: 'image' }, NOW)).not.toThrow();
    expect(() => tlsAuthority.authorize(client, { action: 'blobs:read' }, NOW)).not.toThrow();
    // Anyone may add one (it only tells the holder more to check); a malformed one makes the grant invalid.
    const repinned = tlsAuthority.verify(narrowGrant(tlsAuthority.mint('client').token, [`tls-ca sha256:${'cd'.repeat(32)}`]), NOW);
    expect(() => tlsAuthority.authorize(repinned, { action: 'jobs:read' }, NOW)).not.toThrow();
    expect(() => narrowGrant(tlsAuthority.mint('client').token, ['tls-ca md5:abc'])).toThrow(/sha256:<64 lowercase hex>/);
    expect(() => new GrantAuthority(randomBytes(32), 'https://test', [], ['tls-ca AB:CD'])).toThrow(/sha256/);
    // A mesh without TLS mints exactly what it was asked for.
    expect(authority.mint('client', ['types image']).caveats).toEqual(['kind client', 'types image']);
  });

  it('inspect reads caveats without the key', () => {
    const { token, id } = authority.mint('client', ['types image', 'rate 60/m']);
    expect(inspectGrant(token)).toEqual({ id, location: 'http://test', caveats: ['kind client', 'types image', 'rate 60/m'] });
  });

  it('a narrowed copy shares the limiter of every rate it inherits; a rate it adds is a limiter of its own', () => {
    const { token } = authority.mint('client', ['rate 10/m']);
    const parent = authority.verify(token, NOW);
    const child = authority.verify(narrowGrant(token, ['types image', 'rate 1/h']), NOW);
    const sibling = authority.verify(narrowGrant(token, ['types video', 'rate 1/h']), NOW);
    expect(parent.rates).toEqual([{ key: expect.stringMatching(new RegExp(`^${parent.id}/`)), count: 10, windowMs: 60_000, caveat: 'rate 10/m' }]);
    expect(child.rates.map((rate) => rate.caveat)).toEqual(['rate 10/m', 'rate 1/h']);
    expect(child.rates[0]!.key).toBe(parent.rates[0]!.key);
    expect(sibling.rates[0]!.key).toBe(parent.rates[0]!.key);
    expect(child.rates[1]!.key).not.toBe(sibling.rates[1]!.key);
    // Another grant with the same caveats has other limiters.
    expect(authority.verify(authority.mint('client', ['rate 10/m']).token, NOW).rates[0]!.key).not.toBe(parent.rates[0]!.key);
  });

  it('GRANT_DENIED, GRANT_REVOKED and GRANT_EXPIRED carry the grant id (for the audit log), not in their message', () => {
    const minted = authority.mint('client', ['types image', `time-before ${new Date(NOW + 1000).toISOString()}`]);
    const grant = authority.verify(minted.token, NOW);
    const denied = meshErrorOf(() => authority.authorize(grant, { action: 'jobs:submit', jobType: 'video' }, NOW));
    expect(denied.params.grantId).toBe(minted.id);
    expect(denied.message).not.toContain(minted.id);
    expect(meshErrorOf(() => authority.verify(minted.token, NOW + 1000)).params.grantId).toBe(minted.id);
    authority.revoke(minted.id);
    expect(meshErrorOf(() => authority.verify(minted.token, NOW)).params.grantId).toBe(minted.id);
  });
});

describe('grant lifetimes (fake clock)', () => {
  it('a watch ends once, on revocation of the grant or any narrowing of it', async () => {
    const clock = new FakeClock(NOW);
    const lifetimes = new GrantLifetimes(authority, clock);
    const minted = authority.mint('client');
    const ends: GrantEnd[] = [];
    lifetimes.watch(authority.verify(narrowGrant(minted.token, ['types image']), NOW), (why) => ends.push(why));
    const stopped: GrantEnd[] = [];
    const stop = lifetimes.watch(authority.verify(minted.token, NOW), (why) => stopped.push(why));
    stop();
    authority.revoke(minted.id);
    authority.revoke(minted.id);
    expect(ends).toEqual(['revoked']);
    expect(stopped).toEqual([]);
    // Watching a grant revoked already ends it too — later, never inside watch().
    lifetimes.watch(authority.verify(authority.mint('client').token, NOW), () => {});
    const late: GrantEnd[] = [];
    const revokedAlready = authority.mint('client');
    const verified = authority.verify(revokedAlready.token, NOW);
    authority.revoke(revokedAlready.id);
    lifetimes.watch(verified, (why) => late.push(why));
    expect(late).toEqual([]);
    await Promise.resolve();
    expect(late).toEqual(['revoked']);
  });

  it('expiry ends a watch on time, even forty days out (longer than one Node timer can wait)', () => {
    const clock = new FakeClock(NOW);
    const lifetimes = new GrantLifetimes(authority, clock);
    const at = NOW + 40 * 86_400_000;
    const grant = authority.verify(authority.mint('client', [`time-before ${new Date(at).toISOString()}`]).token, NOW);
    const ends: GrantEnd[] = [];
    lifetimes.watch(grant, (why) => ends.push(why));
    clock.advance(at - NOW - 1);
    expect(ends).toEqual([]);
    clock.advance(1);
    expect(ends).toEqual(['expired']);
  });
});
