#!/usr/bin/env node
// The gpumesh command. The TypeScript sources are compiled to dist/ by `npm install` (the prepare script).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('gpumesh: not built yet; run `npm run build` in the gpumesh folder\n');
  process.exit(1);
}
await import(entry.href);
