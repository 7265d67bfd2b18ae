import { CliError } from './output.js';

/**
 * The orchestrator URLs one setting names: one URL, or several separated by commas (`http://nas1:7070,http://nas2:7070`,
 * orchestrators sharing one store, where one is active and the others stand by). Spaces around a comma are allowed,
 * a trailing `/` is dropped and a URL named twice counts once. Anything that is not an http(s) URL stops the command
 * with an error naming it and where it came from (`source`: `--url`, `--join`, `GPUMESH_URL`).
 */
export function parseUrlList(text: string, source: string): string[] {
  const parts = text.split(',').map((part) => part.trim());
  const urls: string[] = [];
  for (const part of parts) {
    if (part === '') {
      // "a,,b" or a trailing comma: a slip of the hand, but a list with nothing in it is a mistake.
      if (parts.length === 1) throw new CliError(`${source}: no orchestrator URL given`);
      continue;
    }
    let url: URL;
    try {
      url = new URL(part);
    } catch {
      throw new CliError(`${source}: "${part}" is not a URL${parts.length > 1 ? ` (in the list "${text}")` : ''}; give http://host:port or https://host:port, several separated by commas`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new CliError(`${source}: "${part}" is not an http:// or https:// URL${parts.length > 1 ? ` (in the list "${text}")` : ''}`);
    }
    const normal = part.replace(/\/+$/, '');
    if (!urls.includes(normal)) urls.push(normal);
  }
  if (urls.length === 0) throw new CliError(`${source}: no orchestrator URL given`);
  return urls;
}
