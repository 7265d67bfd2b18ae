import { once } from 'node:events';
import { createServer } from 'node:net';

/**
 * A TCP port free on the loopback interface right now. Another process could
 * take it before the server binds it; the server then fails to start and is
 * restarted on a new port, which is cheaper than passing a listening socket
 * to programs that cannot take one.
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const server = createServer();
  server.listen(0, host);
  await once(server, 'listening');
  const address = server.address();
  server.close();
  await once(server, 'close');
  // An invariant of node:net (a listening TCP server has an address).
  if (typeof address !== 'object' || !address) throw new Error('the system gave no port');
  return address.port;
}
