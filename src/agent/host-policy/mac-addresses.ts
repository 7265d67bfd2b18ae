import { networkInterfaces } from 'node:os';

/**
 * This machine's network interfaces' MAC addresses, for Wake-on-LAN (host config `wake.announce`): every interface
 * but loopback and those without a hardware address (tunnels, some virtual ones), once each, at most 16.
 */
export function macAddresses(interfaces = networkInterfaces()): string[] {
  const macs = new Set<string>();
  for (const addresses of Object.values(interfaces)) {
    for (const address of addresses ?? []) {
      if (address.internal || address.mac === '00:00:00:00:00:00') continue;
      macs.add(address.mac.toLowerCase());
    }
  }
  return [...macs].slice(0, 16);
}
