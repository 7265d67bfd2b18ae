import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { meshErrorOf } from '../helpers/errors.js';
import { GrantAuthority, inspectGrant, narrowGrant, caveatsFromOptions, UploadCredentials } from '../../src/orchestrator/auth/index.js';

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

  it('revocation applies to every narrowed copy', () => {
    const minted = authority.mint('client');
    const narrowed = narrowGrant(minted.token, ['types image']);
    authority.revoke(minted.id);
    expect(meshErrorOf(() => authority.verify(narrowed, NOW)).code).toBe('GRANT_REVOKED');
  });

  it('inspect reads caveats without the key', () => {
    const { token, id } = authority.mint('client', ['types image', 'rate 60/m']);
    expect(inspectGrant(token)).toEqual({ id, location: 'http://test', caveats: ['kind client', 'types image', 'rate 60/m'] });
  });
});
