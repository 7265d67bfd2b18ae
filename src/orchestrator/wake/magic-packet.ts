import { createSocket } from 'node:dgram';

/** A Wake-on-LAN magic packet: six 0xFF bytes, then the MAC address sixteen times (102 bytes). */
export function magicPacket(mac: string): Buffer {
  const bytes = Buffer.from(mac.replaceAll(':', ''), 'hex');
  if (bytes.length !== 6) throw new Error(`not a MAC address: ${mac}`);
  return Buffer.concat([Buffer.alloc(6, 0xff), ...Array.from({ length: 16 }, () => bytes)]);
}

/** Send the magic packet for each MAC to `address:port` over UDP (broadcast allowed), once each. */
export async function sendMagicPackets(macs: readonly string[], address: string, port: number): Promise<void> {
  const socket = createSocket(address.includes(':') ? 'udp6' : 'udp4');
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(0, () => resolve());
    });
    socket.setBroadcast(true);
    for (const mac of macs) {
      await new Promise<void>((resolve, reject) => socket.send(magicPacket(mac), port, address, (error) => (error ? reject(error) : resolve())));
    }
  } finally {
    socket.close();
  }
}
