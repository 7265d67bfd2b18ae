import http from 'node:http';
import { readFileSync } from 'node:fs';
const admin = readFileSync('/tmp/prof/d/admin.grant', 'utf8').trim();
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const req = (method: string, path: string, body?: string) => new Promise<http.IncomingMessage>((res, rej) => { const r = http.request({ host: '127.0.0.1', port: 7190, method, path, agent, headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' } }, res); r.on('error', rej); r.end(body); });
const ids: string[] = [];
const t0 = performance.now();
let next = 0;
await Promise.all(Array.from({ length: 64 }, async () => { while (next < 3000) { next++; const r = await req('POST', '/v1/jobs', JSON.stringify({ type: 'tensor', input: { x: Array.from({ length: 64 }, (_, k) => Math.sin(k)) } })); let t = ''; for await (const c of r) t += c; ids.push(JSON.parse(t).id); } }));
console.log('submitted/s', 3000 / ((performance.now() - t0) / 1000));
for (;;) { const r = await req('GET', '/v1/status'); let t = ''; for await (const c of r) t += c; const j = JSON.parse(t); if ((j.jobs.succeeded ?? 0) >= 3000) break; await new Promise((r) => setTimeout(r, 100)); }
console.log('done/s', 3000 / ((performance.now() - t0) / 1000));
process.exit(0);
