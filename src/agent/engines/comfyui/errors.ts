/** The longest line of ComfyUI's own words an error keeps. */
const MAX_CHARS = 300;

/**
 * An absolute path on the server: `/home/…/ComfyUI/nodes.py` (two segments at least, so `1/2` stays) or
 * `C:\ComfyUI\…`. What the server's file system looks like is the server's business, not the client's.
 */
const SERVER_PATH = /(?:\b[A-Za-z]:[\\/]|(?<![\w.~/])\/(?=[^\s/]+\/))[^\s'"`,;()[\]]*/g;

/** A path as its last part: `…/nodes.py` (a folder: `…`). */
const withoutFolders = (path: string): string => {
  const last = path.split(/[\\/]/).filter(Boolean).at(-1);
  return last && !/[\\/]$/.test(path) ? `…/${last}` : '…';
};

/**
 * ComfyUI's words as one line for a client: the first line that says something (an exception's message often goes
 * on with the server's folders, one per line), its absolute paths cut to their last part, its banner asterisks
 * dropped, at most {@link MAX_CHARS} characters.
 */
export function oneLine(text: string): string {
  const first = text.split(/\r?\n/).map((line) => line.trim()).find((line) => line.replace(/^\*+/, '').trim().length > 0) ?? '';
  const line = first.replace(/^\*+\s*/, '').replace(SERVER_PATH, withoutFolders);
  return line.length > MAX_CHARS ? `${line.slice(0, MAX_CHARS - 1)}…` : line;
}

/** `execution_error` → "node 9 (SaveImage) failed: Exception: ERROR: Saving image outside the output folder is not allowed." */
export function describeExecutionError(data: { node_id?: unknown; node_type?: unknown; exception_type?: unknown; exception_message?: unknown }): string {
  const type = data.exception_type ? `${oneLine(String(data.exception_type))}: ` : '';
  return `node ${oneLine(String(data.node_id ?? '?'))} (${oneLine(String(data.node_type ?? '?'))}) failed: ${type}${oneLine(String(data.exception_message ?? 'failed')) || 'failed'}`;
}
