// Stands in for a sleeping machine's network card (run inside its namespace by scripts/netns/wake.ts): listens for
// Wake-on-LAN magic packets on UDP port 9 and, on the first that carries one of this namespace's MAC addresses,
// "wakes the machine" — runs the command given after `--` (its agent), as a woken machine's service would — and exits.
import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { networkInterfaces } from 'node:os';

const command = process.argv.slice(process.argv.indexOf('--') + 1);
const macs = Object.values(networkInterfaces()).flat().filter((address) => !address.internal).map((address) => address.mac.replaceAll(':', ''));
const socket = createSocket({ type: 'udp4', reuseAddr: true });
socket.on('message', (packet, from) => {
  const hex = packet.toString('hex');
  const mac = macs.find((candidate) => hex === 'ff'.repeat(6) + candidate.repeat(16));
  if (!mac) return;
  process.stdout.write(`magic packet for ${mac} from ${from.address}: waking\n`);
  socket.close();
  const agent = spawn(command[0], command.slice(1), { stdio: 'inherit' });
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => agent.kill(signal));
  agent.on('exit', (code) => process.exit(code ?? 1));
});
socket.bind(9, '0.0.0.0', () => process.stdout.write(`asleep, listening for a magic packet for ${macs.join(', ')}\n`));
