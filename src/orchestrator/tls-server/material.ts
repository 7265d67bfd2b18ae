import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { certificateFingerprint } from '../../tls-client/fingerprint.js';
import { belongsTo, createCa, expiryOf, issueServerCertificate, namesOf, type KeyAndCertificate } from './certificates.js';
import { sameNames, type CertificateName } from '../config/certificate-names.js';
import { MeshError } from '../../protocol/index.js';

/** What the HTTPS server and the grant authority need. */
export interface TlsMaterial {
  /** The server certificate's key and certificate (PEM). */
  key: string;
  cert: string;
  /** The CA certificate (PEM), served at /v1/tls/ca.crt. */
  caCert: string;
  /** `sha256:<hex>` of the CA certificate: what grants name and clients pin. */
  caFingerprint: string;
  /** The names the server certificate covers. */
  names: CertificateName[];
}

export interface TlsSetup {
  material: TlsMaterial;
  /** A new CA was made (first start): grants minted before now carry no pin for it. */
  createdCa: boolean;
  /** Why the server certificate was (re-)issued at this start, or null if the one on disk was kept. */
  issued: string | null;
}

export interface TlsPolicy {
  /** How long a new CA is valid. Default 20 years: it is what clients pin, so it should outlive them. */
  caValidDays?: number;
  /** How long a server certificate is valid. Default 825 days (the most Apple's clients accept). */
  serverValidDays?: number;
  /** A server certificate with less than this left is re-issued at start. Default 60 days. */
  renewWithinDays?: number;
}

const FILES = { caKey: 'ca.key', caCert: 'ca.crt', serverKey: 'server.key', serverCert: 'server.crt' } as const;
const DAY_MS = 86_400_000;

/** Write a file whole or not at all (a crash mid-write must not leave half a key), with the given mode. */
function writeAtomically(path: string, contents: string, mode: number): void {
  const temporary = `${path}.tmp`;
  rmSync(temporary, { force: true });
  writeFileSync(temporary, contents, { mode, flag: 'wx' });
  renameSync(temporary, path);
}

function read(dir: string, file: string): string | null {
  const path = join(dir, file);
  return existsSync(path) ? readFileSync(path, 'utf8') : null;
}

async function loadOrCreateCa(dir: string, now: number, validDays: number): Promise<{ ca: KeyAndCertificate; created: boolean }> {
  const keyPem = read(dir, FILES.caKey);
  const certPem = read(dir, FILES.caCert);
  if (keyPem && certPem) return { ca: { keyPem, certPem }, created: false };
  if (certPem && !keyPem) {
    // Never replace a CA that clients may have pinned just because its key went missing: say so instead.
    throw new MeshError('TLS_MATERIAL_INVALID', { detail: `${join(dir, FILES.caCert)} is there but ${FILES.caKey} is not: restore the key, or delete the tls folder to make a new CA (every grant must then be re-issued)` });
  }
  // No certificate was ever written, so nobody can have pinned this CA: (re)make it.
  const ca = await createCa(now, validDays);
  writeAtomically(join(dir, FILES.caKey), ca.keyPem, 0o600);
  writeAtomically(join(dir, FILES.caCert), ca.certPem, 0o644);
  return { ca, created: true };
}

/** Why the server certificate on disk cannot be kept, or null if it can. */
function reasonToIssue(server: { keyPem: string | null; certPem: string | null }, ca: KeyAndCertificate, names: readonly CertificateName[], now: number, renewWithinDays: number): string | null {
  if (!server.keyPem || !server.certPem) return 'first start';
  if (!belongsTo(server.certPem, server.keyPem, ca.certPem)) return 'the certificate on disk is not from this CA or does not match its key';
  if (!sameNames(namesOf(server.certPem), names)) return 'the names changed';
  if (expiryOf(server.certPem) - now < renewWithinDays * DAY_MS) return 'it expires soon';
  return null;
}

/**
 * The TLS files under `dir` (`<data>/tls`): a private CA made once and kept (clients pin it), and a
 * server certificate for `names`, re-issued by that CA when the names change, it nears expiry or it
 * does not belong to the CA. Keys are written with mode 0600, the folder with 0700.
 */
export async function ensureTlsMaterial(dir: string, names: readonly CertificateName[], now: number, policy: TlsPolicy = {}): Promise<TlsSetup> {
  const { caValidDays = 20 * 365, serverValidDays = 825, renewWithinDays = 60 } = policy;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const { ca, created } = await loadOrCreateCa(dir, now, caValidDays);
  let server = { keyPem: read(dir, FILES.serverKey), certPem: read(dir, FILES.serverCert) };
  const issued = reasonToIssue(server, ca, names, now, renewWithinDays);
  if (issued) {
    const fresh = await issueServerCertificate(ca, names, now, serverValidDays);
    writeAtomically(join(dir, FILES.serverKey), fresh.keyPem, 0o600);
    writeAtomically(join(dir, FILES.serverCert), fresh.certPem, 0o644);
    server = fresh;
  }
  return {
    material: {
      key: server.keyPem!, cert: server.certPem!, caCert: ca.certPem,
      caFingerprint: certificateFingerprint(ca.certPem), names: namesOf(server.certPem!),
    },
    createdCa: created,
    issued,
  };
}
