import { randomBytes, X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliError } from '../../src/cli/common/output.js';
import { resolvePins } from '../../src/cli/common/settings.js';
import { GrantAuthority, narrowGrant } from '../../src/orchestrator/auth/index.js';
import { createCa, issueServerCertificate, type KeyAndCertificate } from '../../src/orchestrator/tls-server/certificates.js';
import { parseCertificateName, type CertificateName } from '../../src/orchestrator/config/certificate-names.js';
import { ServerTrust, TlsPinError, certificateFingerprint, pinsOfGrant, TLS_CA_PATH } from '../../src/tls-client/index.js';
import { removeDir, tempDir } from '../helpers/mesh.js';

const NOW = Date.now();
const LOCAL = ['localhost', '127.0.0.1'].map((text) => parseCertificateName(text) as CertificateName);

interface Seen {
  method: string;
  url: string;
  authorization: string | undefined;
}

/** A real HTTPS server with `server` as its certificate, serving `caCert` at the CA route; it records every request. */
async function recordingServer(server: KeyAndCertificate, caCert: string): Promise<{ url: string; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const app = https.createServer({ key: server.keyPem, cert: server.certPem }, (request, response) => {
    seen.push({ method: request.method!, url: request.url!, authorization: request.headers.authorization });
    if (request.url === TLS_CA_PATH) return void response.writeHead(200, { 'content-type': 'application/x-pem-file' }).end(caCert);
    if (request.url === '/v1/stream') {
      // A streamed body, as SSE and model pulls are.
      response.writeHead(200, { 'content-type': 'text/plain' });
      response.write('one ');
      setTimeout(() => response.end('two'), 20);
      return;
    }
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true }));
  });
  app.listen(0, '127.0.0.1');
  await once(app, 'listening');
  return {
    url: `https://127.0.0.1:${(app.address() as AddressInfo).port}`,
    seen,
    async close() {
      app.closeAllConnections();
      app.close();
      await once(app, 'close');
    },
  };
}

let ca: KeyAndCertificate;
let fingerprint: string;
let genuine: Awaited<ReturnType<typeof recordingServer>>;
let impostor: Awaited<ReturnType<typeof recordingServer>>;
let copycat: Awaited<ReturnType<typeof recordingServer>>;

beforeAll(async () => {
  ca = await createCa(NOW, 3650);
  fingerprint = certificateFingerprint(ca.certPem);
  genuine = await recordingServer(await issueServerCertificate(ca, LOCAL, NOW, 30), ca.certPem);
  // Its own CA, which it serves: the usual man in the middle.
  const otherCa = await createCa(NOW, 3650);
  impostor = await recordingServer(await issueServerCertificate(otherCa, LOCAL, NOW, 30), otherCa.certPem);
  // Serves the genuine CA certificate (it is public), but cannot have a certificate signed by it.
  copycat = await recordingServer(await issueServerCertificate(otherCa, LOCAL, NOW, 30), ca.certPem);
});
afterAll(async () => {
  await Promise.all([genuine, impostor, copycat].map((server) => server?.close()));
});

const withGrant = { headers: { authorization: 'Bearer the-grant' } };
const pin = (value: string, source = 'the grant') => ({ fingerprint: value, source });

describe('pinning the CA a grant names', () => {
  it('fetches the CA once, without a grant, then trusts only it; bodies stream', async () => {
    genuine.seen.length = 0;
    const trust = new ServerTrust(genuine.url, [pin(fingerprint)]);
    expect(trust.pinned).toBe(true);
    const response = await trust.fetch(`${genuine.url}/v1/status`, withGrant);
    expect(await response.json()).toEqual({ ok: true });
    const stream = await trust.fetch(`${genuine.url}/v1/stream`, withGrant);
    expect(await stream.text()).toBe('one two');
    expect(await trust.ca()).toBe(ca.certPem);
    expect(genuine.seen).toEqual([
      { method: 'GET', url: TLS_CA_PATH, authorization: undefined },
      { method: 'GET', url: '/v1/status', authorization: 'Bearer the-grant' },
      { method: 'GET', url: '/v1/stream', authorization: 'Bearer the-grant' },
    ]);
    trust.close();
  });

  it('a server whose CA is not the pinned one is refused, naming both fingerprints, and never sees the grant', async () => {
    impostor.seen.length = 0;
    const trust = new ServerTrust(impostor.url, [pin(fingerprint)]);
    const error = await trust.fetch(`${impostor.url}/v1/status`, withGrant).then(() => null, (caught: unknown) => caught);
    expect(error).toBeInstanceOf(TlsPinError);
    const message = (error as Error).message;
    expect(message).toContain(`the pinned CA is ${fingerprint} (from the grant)`);
    expect(message).toMatch(/the server's CA is sha256:[0-9a-f]{64}/);
    expect(message).not.toContain(`the server's CA is ${fingerprint}`);
    expect(message).toContain('no grant was sent');
    expect(impostor.seen).toEqual([{ method: 'GET', url: TLS_CA_PATH, authorization: undefined }]);
  });

  it('serving the genuine CA certificate is not enough: the handshake must chain to it', async () => {
    copycat.seen.length = 0;
    const trust = new ServerTrust(copycat.url, [pin(fingerprint)]);
    expect(await trust.ca()).toBe(ca.certPem);
    const error = await trust.fetch(`${copycat.url}/v1/status`, withGrant).then(() => null, (caught: unknown) => caught);
    expect(error).toBeInstanceOf(Error);
    expect(trust.explain(error)).toMatch(/not signed by the pinned CA/);
    expect(copycat.seen.filter((request) => request.authorization)).toEqual([]);
  });

  it('every pin must match: a grant narrowed with a second, different CA cannot be used', async () => {
    const authority = new GrantAuthority(randomBytes(32), genuine.url, [], [`tls-ca ${fingerprint}`]);
    const token = authority.mint('client').token;
    expect(pinsOfGrant(token)).toEqual([pin(fingerprint)]);
    const other = `sha256:${'00'.repeat(32)}`;
    const narrowed = narrowGrant(token, [`tls-ca ${other}`]);
    expect(pinsOfGrant(narrowed)).toEqual([pin(fingerprint), pin(other)]);
    const trust = new ServerTrust(genuine.url, pinsOfGrant(narrowed));
    await expect(trust.ca()).rejects.toThrow(`the pinned CA is ${other} (from the grant)`);
    const flagged = new ServerTrust(genuine.url, [...pinsOfGrant(token), pin(other, '--tls-ca-fingerprint')]);
    await expect(flagged.ca()).rejects.toThrow(`${other} (from --tls-ca-fingerprint)`);
    expect(pinsOfGrant('not a grant')).toEqual([]);
    expect(pinsOfGrant(new GrantAuthority(randomBytes(32), 'http://x').mint('client').token)).toEqual([]);
  });

  it('a pinned grant never goes over plain http; without a pin, https trusts the system\'s CAs and says how to pin', async () => {
    const plain = new ServerTrust(genuine.url.replace('https:', 'http:'), [pin(fingerprint)]);
    await expect(plain.ca()).rejects.toThrow(/is plain http: use its https:\/\/ URL/);
    await expect(plain.ca()).rejects.toBeInstanceOf(TlsPinError);

    const unpinned = new ServerTrust(genuine.url);
    expect(unpinned.pinned).toBe(false);
    expect(await unpinned.ca()).toBeUndefined();
    const error = await unpinned.fetch(`${genuine.url}/v1/status`, withGrant).then(() => null, (caught: unknown) => caught);
    expect(unpinned.explain(error)).toMatch(/not trusted by this machine .*--tls-ca-fingerprint/);
  });

  it('a certificate that does not name the host is explained with the flag that fixes it', async () => {
    // Signed by the pinned CA, but for "localhost" only, while the client dials 127.0.0.1.
    const misnamed = await recordingServer(await issueServerCertificate(ca, [LOCAL[0]!], NOW, 30), ca.certPem);
    try {
      const trust = new ServerTrust(misnamed.url, [pin(fingerprint)]);
      const error = await trust.fetch(`${misnamed.url}/v1/status`, withGrant).then(() => null, (caught: unknown) => caught);
      expect(trust.explain(error)).toMatch(/does not name "127\.0\.0\.1" .*restart it with --tls-name 127\.0\.0\.1/);
      expect(misnamed.seen.filter((request) => request.authorization)).toEqual([]);
    } finally {
      await misnamed.close();
    }
  });
});

describe('what the CLI pins besides the grant', () => {
  it('--tls-ca-fingerprint first; else, for an https URL and a grant that names no CA, the local mesh\'s ca.crt', () => {
    const data = tempDir();
    try {
      mkdirSync(join(data, 'tls'));
      writeFileSync(join(data, 'tls', 'ca.crt'), ca.certPem);
      const unpinned = new GrantAuthority(randomBytes(32), 'http://x').mint('admin').token;
      const pinned = new GrantAuthority(randomBytes(32), 'https://x', [], [`tls-ca ${fingerprint}`]).mint('admin').token;
      expect(resolvePins({ data }, 'https://127.0.0.1:7070', unpinned)).toEqual([{ fingerprint, source: join(data, 'tls', 'ca.crt') }]);
      expect(resolvePins({ data }, 'https://127.0.0.1:7070', pinned)).toEqual([]); // the grant's own pin is enough
      expect(resolvePins({ data }, 'http://127.0.0.1:7070', unpinned)).toEqual([]);
      expect(resolvePins({ data: tempDir() }, 'https://127.0.0.1:7070', unpinned)).toEqual([]);
      const flag = new X509Certificate(ca.certPem).fingerprint256;
      expect(resolvePins({ data, tlsCaFingerprint: flag }, 'https://127.0.0.1:7070', pinned)).toEqual([{ fingerprint, source: '--tls-ca-fingerprint' }]);
      expect(() => resolvePins({ data, tlsCaFingerprint: 'sha256:nope' }, 'https://127.0.0.1:7070', pinned)).toThrow(CliError);
    } finally {
      removeDir(data);
    }
  });
});
