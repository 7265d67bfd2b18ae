import { describe, expect, it } from 'vitest';
import { Networks, parseNetwork, unmapped } from '../../src/net/networks.js';

describe('networks (addresses and CIDR blocks)', () => {
  it('parses addresses and CIDR blocks of both families, and nothing else', () => {
    expect(parseNetwork('192.168.1.0/24')).toEqual({ address: '192.168.1.0', prefix: 24, family: 'ipv4' });
    expect(parseNetwork('10.0.0.7')).toEqual({ address: '10.0.0.7', prefix: 32, family: 'ipv4' });
    expect(parseNetwork('fd00::/8')).toEqual({ address: 'fd00::', prefix: 8, family: 'ipv6' });
    expect(parseNetwork('::1')).toEqual({ address: '::1', prefix: 128, family: 'ipv6' });
    for (const bad of ['nas.local', '10.0.0.0/33', '::/129', '10.0.0.0/8/8', '10.0.0.0/', '10.0.0.0/x', '']) expect(parseNetwork(bad), bad).toBeNull();
  });

  it('matches an address against its blocks, IPv4-mapped IPv6 and URL brackets included', () => {
    const networks = new Networks(['192.168.1.0/24', '::1']);
    expect(networks.has('192.168.1.77')).toBe(true);
    expect(networks.has('::ffff:192.168.1.77')).toBe(true);
    expect(networks.has('[::1]')).toBe(true);
    expect(networks.has('192.168.2.1')).toBe(false);
    expect(networks.has('not an address')).toBe(false);
    expect(unmapped('::FFFF:10.0.0.1')).toBe('10.0.0.1');
    expect(() => new Networks(['nas.local'])).toThrow(/not a network/);
  });
});
