import { readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../../src/orchestrator/config/config.js';
import { ConfigError } from '../../../src/protocol/errors.js';
import { belongsTo, createCa, issueServerCertificate, namesOf } from '../../../src/orchestrator/tls-server/certificates.js';
import { ensureTlsMaterial } from '../../../src/orchestrator/tls-server/material.js';
import { certificateNamesFor, parseCertificateName, type CertificateName } from '../../../src/orchestrator/config/certificate-names.js';
import { certificateFingerprint, parseFingerprint } from '../../../src/tls-client/index.js';
import { removeDir, tempDir } from '../../helpers/mesh.js';

const NOW = Date.parse('2026-12-02T10:00:00Z');
const DAY = 86_400_000;
const dirs: string[] = [];
afterAll(() => dirs.forEach(removeDir));

function names(...texts: string[]): CertificateName[] {
  return texts.map((text) => {
    const name = parseCertificateName(text);
    if (typeof name === 'string') throw new Error(name);
    return name;
  });
}

/** Node's own hostname check (the one https and ws run), against a certificate in PEM. */
function covers(certPem: string, host: string): boolean {
  const certificate = new X509Certificate(certPem);
  return checkServerIdentity(host, { subject: {}, subjectaltname: certificate.subjectAltName } as unknown as PeerCertificate) === undefined;
}

describe('certificate names', () => {
  it('accepts host names and IP addresses in canonical form, and nothing else', () => {
    expect(parseCertificateName('NAS.lan.')).toEqual({ type: 'dns', value: 'nas.lan' });
    expect(parseCertificateName('203.0.113.5')).toEqual({ type: 'ip', value: '203.0.113.5' });
    expect(parseCertificateName('[2001:DB8:0::1]')).toEqual({ type: 'ip', value: '2001:db8::1' });
    expect(parseCertificateName('::1')).toEqual({ type: 'ip', value: '::1' });
    for (const bad of ['', 'a..b', 'under_score.lan', 'nas lan', '1.2.3', '-lead.lan', 'fe80::1%eth0', `${'a'.repeat(64)}.lan`, '*.example.com']) {
      expect(typeof parseCertificateName(bad), bad).toBe('string');
    }
  });

  it('the certificate covers loopback, the host (this machine\'s name on a wildcard bind), the public URL\'s host and the extra names', () => {
    const listed = (server: Parameters<typeof certificateNamesFor>[0]): string[] => certificateNamesFor(server, 'gpubox').map((name) => name.value);
    expect(listed({ host: '0.0.0.0', tls: { names: [] } })).toEqual(['gpubox', 'localhost', '127.0.0.1', '::1']);
    expect(listed({ host: '192.168.1.20', publicUrl: 'https://mesh.example.org:8443', tls: { names: ['nas.lan', '203.0.113.5', 'NAS.lan'] } }))
      .toEqual(['localhost', 'mesh.example.org', 'nas.lan', '127.0.0.1', '192.168.1.20', '203.0.113.5', '::1']);
    expect(() => certificateNamesFor({ host: '127.0.0.1', tls: { names: ['bad name'] } }, 'gpubox')).toThrow(/not a host name/);
  });

  it('mesh.yaml: names are checked, and TLS needs an https publicUrl', () => {
    expect(resolveConfig({}, '/tmp/unused').server.tls).toEqual({ enabled: false, names: [] });
    expect(() => resolveConfig({ server: { tls: { enabled: true, names: ['ok.lan', 'not ok'] } } }, '/tmp/unused')).toThrow(/server\.tls\.names\.1: must be a host name or an IP address/);
    expect(() => resolveConfig({ server: { tls: { enabled: true }, publicUrl: 'http://mesh.example.org' } }, '/tmp/unused')).toThrow(ConfigError);
    expect(() => resolveConfig({ server: { tls: { names: ['nas.lan'] } } }, '/tmp/unused')).toThrow(/need TLS on/);
    expect(resolveConfig({ server: { tls: { enabled: true, names: ['nas.lan'] }, publicUrl: 'https://mesh.example.org' } }, '/tmp/unused').server.tls.names).toEqual(['nas.lan']);
  });
});

describe('the private CA and the server certificate', () => {
  it('the CA is a CA for servers only; the server certificate names every host, is signed by it and is valid from now', async () => {
    const ca = await createCa(NOW, 3650);
    const caCertificate = new X509Certificate(ca.certPem);
    expect(caCertificate.ca).toBe(true);
    expect(caCertificate.checkIssued(caCertificate)).toBe(true);
    expect(caCertificate.subject).toMatch(/CN=gpumesh private CA [0-9a-f]{8}/);
    const server = await issueServerCertificate(ca, names('localhost', 'nas.lan', '127.0.0.1', '203.0.113.5', '::1'), NOW, 825);
    const certificate = new X509Certificate(server.certPem);
    expect(certificate.ca).toBe(false);
    expect(certificate.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']); // serverAuth only
    expect(belongsTo(server.certPem, server.keyPem, ca.certPem)).toBe(true);
    // An hour of grace for clients whose clock lags, then exactly the validity asked for.
    expect(Date.parse(certificate.validFrom)).toBe(NOW - 3_600_000);
    expect(Date.parse(certificate.validTo)).toBe(NOW + 825 * DAY);
    for (const host of ['localhost', 'nas.lan', '127.0.0.1', '203.0.113.5', '::1', '0:0:0:0:0:0:0:1']) expect(covers(server.certPem, host), host).toBe(true);
    for (const host of ['other.lan', '203.0.113.6', 'lan']) expect(covers(server.certPem, host), host).toBe(false);
    expect(namesOf(server.certPem).map((name) => name.value)).toEqual(['localhost', 'nas.lan', '127.0.0.1', '203.0.113.5', '::1']);

    const otherCa = await createCa(NOW, 3650);
    expect(belongsTo(server.certPem, server.keyPem, otherCa.certPem)).toBe(false);
    expect(belongsTo(server.certPem, ca.keyPem, ca.certPem)).toBe(false);
  });

  it('the fingerprint is SHA-256 over the DER, as OpenSSL and Node print it, and is read back in any of their forms', async () => {
    const ca = await createCa(NOW, 3650);
    const fingerprint = certificateFingerprint(ca.certPem);
    expect(fingerprint).toMatch(/^sha256:[0-9a-f]{64}$/);
    const nodeForm = new X509Certificate(ca.certPem).fingerprint256; // "AB:CD:…", computed by OpenSSL
    expect(parseFingerprint(nodeForm)).toBe(fingerprint);
    expect(parseFingerprint(`sha256 Fingerprint=${nodeForm}`)).toBe(fingerprint);
    expect(parseFingerprint(fingerprint.toUpperCase())).toBe(fingerprint);
    expect(parseFingerprint(fingerprint.slice('sha256:'.length))).toBe(fingerprint);
    expect(parseFingerprint('sha256:abc')).toBeNull();
    expect(parseFingerprint(`md5:${'ab'.repeat(32)}`)).toBeNull();
  });
});

describe('the TLS folder', () => {
  it('first start makes the CA and the certificate, keys readable only by their owner', async () => {
    const dir = join(tempDir(), 'tls');
    dirs.push(dir);
    const setup = await ensureTlsMaterial(dir, names('localhost', '127.0.0.1'), NOW);
    expect(setup.createdCa).toBe(true);
    expect(setup.issued).toBe('first start');
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'ca.key')).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'server.key')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, 'ca.crt'), 'utf8')).toBe(setup.material.caCert);
    expect(setup.material.caFingerprint).toBe(certificateFingerprint(setup.material.caCert));
    expect(belongsTo(setup.material.cert, setup.material.key, setup.material.caCert)).toBe(true);
  });

  it('keeps the CA for ever and re-issues the server certificate only when the names change, it nears expiry or it is not the CA\'s', async () => {
    const dir = join(tempDir(), 'tls');
    dirs.push(dir);
    const first = await ensureTlsMaterial(dir, names('localhost', '127.0.0.1'), NOW);
    const read = (file: string): string => readFileSync(join(dir, file), 'utf8');

    const again = await ensureTlsMaterial(dir, names('127.0.0.1', 'LOCALHOST'), NOW + 30 * DAY);
    expect(again.createdCa).toBe(false);
    expect(again.issued).toBeNull();
    expect(again.material.cert).toBe(first.material.cert);

    const renamed = await ensureTlsMaterial(dir, names('localhost', '127.0.0.1', 'nas.lan'), NOW + 31 * DAY);
    expect(renamed.issued).toBe('the names changed');
    expect(renamed.material.caFingerprint).toBe(first.material.caFingerprint);
    expect(read('ca.crt')).toBe(first.material.caCert);
    expect(read('server.crt')).toBe(renamed.material.cert);
    expect(covers(read('server.crt'), 'nas.lan')).toBe(true);
    expect(statSync(join(dir, 'server.key')).mode & 0o777).toBe(0o600);

    const late = await ensureTlsMaterial(dir, names('localhost', '127.0.0.1', 'nas.lan'), NOW + 31 * DAY + 800 * DAY);
    expect(late.issued).toBe('it expires soon');
    expect(late.material.caFingerprint).toBe(first.material.caFingerprint);

    // A certificate from some other CA dropped into the folder is replaced, not served.
    const stranger = await createCa(NOW, 3650);
    const foreign = await issueServerCertificate(stranger, names('localhost', '127.0.0.1', 'nas.lan'), NOW, 825);
    writeFileSync(join(dir, 'server.crt'), foreign.certPem);
    writeFileSync(join(dir, 'server.key'), foreign.keyPem);
    const replaced = await ensureTlsMaterial(dir, names('localhost', '127.0.0.1', 'nas.lan'), NOW + 32 * DAY);
    expect(replaced.issued).toMatch(/not from this CA/);
    expect(belongsTo(replaced.material.cert, replaced.material.key, first.material.caCert)).toBe(true);
  });

  it('refuses to replace a CA whose key went missing (clients pin it); a key without a certificate is made again', async () => {
    const dir = join(tempDir(), 'tls');
    dirs.push(dir);
    await ensureTlsMaterial(dir, names('localhost'), NOW);
    rmSync(join(dir, 'ca.key'));
    await expect(ensureTlsMaterial(dir, names('localhost'), NOW)).rejects.toThrow(/ca\.crt is there but ca\.key is not/);
    rmSync(join(dir, 'ca.crt'));
    writeFileSync(join(dir, 'ca.key'), 'half-written');
    const remade = await ensureTlsMaterial(dir, names('localhost'), NOW);
    expect(remade.createdCa).toBe(true);
    expect(remade.issued).toMatch(/not from this CA/);
  });
});
