import { BlockList, isIP } from 'node:net';

/** An address or a network in CIDR form, split: `192.168.1.0/24` → 192.168.1.0, 24, ipv4; a bare address is its own /32 or /128. */
export interface Network {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

/** `192.168.1.0/24`, `10.0.0.7`, `fd00::/8`, `::1` as a network; null for anything else (a name, a prefix out of range). */
export function parseNetwork(text: string): Network | null {
  const [address = '', prefixText, extra] = text.trim().split('/');
  const version = isIP(address);
  if (version === 0 || extra !== undefined) return null;
  const most = version === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = prefixText === undefined ? most : Number(prefixText);
  if (prefix > most) return null;
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/** The IPv4 address inside an IPv4-mapped IPv6 one (`::ffff:10.0.0.1`), which reaches (or comes from) the IPv4 host. */
export function unmapped(address: string): string {
  const match = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return match ? match[1]! : address;
}

/**
 * A set of networks an address is checked against. A client's address is compared unmapped (a dual-stack server sees
 * an IPv4 client as `::ffff:192.168.1.5`) and without the brackets of a URL's host.
 */
export class Networks {
  readonly #list = new BlockList();
  readonly size: number;

  /** Throws on an entry that is no network: callers validate their settings first (parseNetwork). */
  constructor(entries: readonly string[]) {
    for (const entry of entries) {
      const network = parseNetwork(entry);
      if (!network) throw new Error(`not a network: ${entry}`);
      this.#list.addSubnet(network.address, network.prefix, network.family);
    }
    this.size = entries.length;
  }

  has(address: string): boolean {
    const plain = unmapped(address.replace(/^\[|\]$/g, ''));
    const version = isIP(plain);
    return version !== 0 && this.#list.check(plain, version === 6 ? 'ipv6' : 'ipv4');
  }
}
