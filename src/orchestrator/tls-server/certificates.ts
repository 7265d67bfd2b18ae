import 'reflect-metadata'; // @peculiar/x509's ASN.1 schemas are declared with decorators that need it, before the import below
import * as x509 from '@peculiar/x509';
import { createPrivateKey, randomBytes, webcrypto, X509Certificate } from 'node:crypto';
import { parseCertificateName, type CertificateName } from '../config/certificate-names.js';
import { MeshError } from '../../protocol/index.js';

/**
 * Issue the mesh's private CA and its server certificate with WebCrypto (ECDSA P-256, SHA-256).
 * Pure functions of their arguments and the time given: the files live in material.ts.
 */

const KEY_ALGORITHM: EcKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' };
const SIGNING_ALGORITHM: EcdsaParams = { name: 'ECDSA', hash: 'SHA-256' };
const DAY_MS = 86_400_000;
/** Certificates start an hour early, so a client whose clock is a little behind still accepts a fresh one. */
const CLOCK_SKEW_MS = 3_600_000;
// The provider is passed to every call rather than installed globally in @peculiar/x509.
const crypto = webcrypto as unknown as Crypto;

/** A private key (PKCS#8 PEM) and its certificate (PEM). */
export interface KeyAndCertificate {
  keyPem: string;
  certPem: string;
}

function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0]! &= 0x7f; // a positive INTEGER
  return bytes.toString('hex');
}

function pem(label: string, der: ArrayBuffer): string {
  const base64 = Buffer.from(der).toString('base64').match(/.{1,64}/g)!.join('\n');
  return `-----BEGIN ${label}-----\n${base64}\n-----END ${label}-----\n`;
}

async function newKeys(): Promise<CryptoKeyPair> {
  return crypto.subtle.generateKey(KEY_ALGORITHM, true, ['sign', 'verify']);
}

async function exportKey(key: CryptoKey): Promise<string> {
  return pem('PRIVATE KEY', await crypto.subtle.exportKey('pkcs8', key));
}

/** A self-signed CA that may sign server certificates and nothing below them (path length 0). */
export async function createCa(now: number, validDays: number): Promise<KeyAndCertificate> {
  const keys = await newKeys();
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    // A random suffix tells this mesh's CA apart from another's in a browser's certificate list.
    name: `CN=gpumesh private CA ${randomBytes(4).toString('hex')}, O=gpumesh`,
    keys,
    notBefore: new Date(now - CLOCK_SKEW_MS),
    notAfter: new Date(now + validDays * DAY_MS),
    signingAlgorithm: SIGNING_ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, crypto),
    ],
  }, crypto);
  return { keyPem: await exportKey(keys.privateKey), certPem: certificate.toString('pem') };
}

/** A server certificate for `names`, signed by the CA, with a fresh key. */
export async function issueServerCertificate(ca: KeyAndCertificate, names: readonly CertificateName[], now: number, validDays: number): Promise<KeyAndCertificate> {
  if (names.length === 0) throw new MeshError('TLS_MATERIAL_INVALID', { detail: 'a server certificate needs at least one name (server.tls.names, or --host)' });
  const caCertificate = new x509.X509Certificate(ca.certPem);
  let caKey: CryptoKey;
  try {
    caKey = await crypto.subtle.importKey('pkcs8', createPrivateKey(ca.keyPem).export({ type: 'pkcs8', format: 'der' }), KEY_ALGORITHM, false, ['sign']);
  } catch (error) {
    throw new MeshError('TLS_MATERIAL_INVALID', { detail: 'the CA key is not an ECDSA P-256 key in PEM' }, { cause: error });
  }
  const keys = await newKeys();
  const certificate = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: `CN=${names[0]!.value}, O=gpumesh`,
    issuer: caCertificate.subject,
    publicKey: keys.publicKey,
    signingKey: caKey,
    notBefore: new Date(now - CLOCK_SKEW_MS),
    notAfter: new Date(now + validDays * DAY_MS),
    signingAlgorithm: SIGNING_ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((name) => ({ type: name.type, value: name.value }))),
      await x509.AuthorityKeyIdentifierExtension.create(caCertificate, false, crypto),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey, false, crypto),
    ],
  }, crypto);
  return { keyPem: await exportKey(keys.privateKey), certPem: certificate.toString('pem') };
}

/** The subjectAltNames of a certificate, as OpenSSL reads them, in canonical form. */
export function namesOf(certPem: string): CertificateName[] {
  const text = new X509Certificate(certPem).subjectAltName ?? '';
  const names: CertificateName[] = [];
  for (const entry of text.split(', ')) {
    const match = /^(DNS|IP Address):(.*)$/.exec(entry);
    if (!match) continue;
    const name = parseCertificateName(match[2]!);
    if (typeof name !== 'string') names.push(name);
  }
  return names;
}

/** True when `certPem` was signed by the CA `caPem` and belongs with the private key `keyPem`. */
export function belongsTo(certPem: string, keyPem: string, caPem: string): boolean {
  try {
    const certificate = new X509Certificate(certPem);
    const ca = new X509Certificate(caPem);
    return certificate.checkIssued(ca) && certificate.verify(ca.publicKey) && certificate.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

/** When the certificate stops being valid (epoch ms). */
export function expiryOf(certPem: string): number {
  return Date.parse(new X509Certificate(certPem).validTo);
}
