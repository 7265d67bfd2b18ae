import { isIP } from 'node:net';

/** One subjectAltName of the server certificate, in canonical form (lowercase DNS name, compressed IPv6). */
export interface CertificateName {
  type: 'dns' | 'ip';
  value: string;
}

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const WILDCARD_BINDS = new Set(['0.0.0.0', '::', '']);

/** Parse a host name or IP address (`nas.lan`, `203.0.113.5`, `[2001:db8::1]`); returns an error string for anything else. */
export function parseCertificateName(text: string): CertificateName | string {
  const raw = text.trim().replace(/^\[(.*)\]$/, '$1');
  if (raw.includes('%')) return `"${text}": an IPv6 zone cannot be in a certificate`;
  const family = isIP(raw);
  if (family === 4) return { type: 'ip', value: raw };
  // The WHATWG URL parser writes IPv6 the one canonical way (lowercase, compressed), as OpenSSL's reading is normalized below.
  if (family === 6) return { type: 'ip', value: new URL(`http://[${raw}]`).hostname.slice(1, -1) };
  const dns = raw.toLowerCase().replace(/\.$/, '');
  if (dns.length > 0 && dns.length <= 253 && dns.split('.').every((label) => LABEL.test(label)) && !/^[0-9.]+$/.test(dns)) {
    return { type: 'dns', value: dns };
  }
  return `"${text}" is not a host name or an IP address`;
}

function nameKey(name: CertificateName): string {
  return `${name.type}:${name.value}`;
}

/** Canonical, de-duplicated and sorted, so two lists of the same names compare equal. */
function normalizeNames(names: Iterable<CertificateName>): CertificateName[] {
  const unique = new Map([...names].map((name) => [nameKey(name), name]));
  return [...unique.keys()].sort().map((key) => unique.get(key)!);
}

export function sameNames(a: readonly CertificateName[], b: readonly CertificateName[]): boolean {
  const left = normalizeNames(a).map(nameKey);
  const right = normalizeNames(b).map(nameKey);
  return left.length === right.length && left.every((key, index) => key === right[index]);
}

/**
 * The names the server certificate must cover: loopback (so `gpumesh up` and a local CLI can
 * verify it), the address it listens on (this machine's host name when that is a wildcard),
 * the public URL's host, and the extra names configured.
 */
export function certificateNamesFor(server: { host: string; publicUrl?: string; tls: { names: readonly string[] } }, machineHostname: string): CertificateName[] {
  const candidates = ['localhost', '127.0.0.1', '::1'];
  candidates.push(WILDCARD_BINDS.has(server.host) ? machineHostname : server.host);
  if (server.publicUrl) candidates.push(new URL(server.publicUrl).hostname);
  const names: CertificateName[] = [];
  for (const candidate of candidates) {
    const name = parseCertificateName(candidate);
    if (typeof name !== 'string') names.push(name); // a machine host name such as "my_box" cannot be certified; the others were validated
  }
  for (const extra of server.tls.names) {
    const name = parseCertificateName(extra);
    // An invariant: the config's schema checked every name with parseCertificateName at load.
    if (typeof name === 'string') throw new Error(`server.tls.names: ${name}`);
    names.push(name);
  }
  return normalizeNames(names);
}
