import WebSocket from 'ws';

/**
 * The JSON messages of ComfyUI's `/ws` (docs.comfy.org, "comms_messages").
 * `prompt_id` is optional on `progress` because older servers leave it out.
 */
export type ComfyMessage =
  | { type: 'status'; data: { status?: { exec_info?: { queue_remaining?: number } }; sid?: string } }
  | { type: 'execution_start'; data: { prompt_id: string } }
  | { type: 'execution_cached'; data: { prompt_id: string; nodes?: string[] } }
  | { type: 'executing'; data: { prompt_id?: string; node: string | null } }
  | { type: 'progress'; data: { prompt_id?: string; node?: string; value: number; max: number } }
  /** Newer servers (comfy_execution/progress.py), to every client: each node that is not pending, with its own value/max. */
  | { type: 'progress_state'; data: { prompt_id: string; nodes: Record<string, { value?: number; max?: number; state?: string }> } }
  | { type: 'executed'; data: { prompt_id: string; node: string; output?: unknown } }
  | { type: 'execution_success'; data: { prompt_id: string } }
  | { type: 'execution_error'; data: { prompt_id: string; node_id?: string; node_type?: string; exception_type?: string; exception_message?: string; traceback?: unknown } }
  | { type: 'execution_interrupted'; data: { prompt_id: string; node_id?: string; node_type?: string } };

const KNOWN = new Set(['status', 'execution_start', 'execution_cached', 'executing', 'progress', 'progress_state', 'executed', 'execution_success', 'execution_error', 'execution_interrupted']);

/**
 * A preview picture from a binary frame (server.py, protocol.py `BinaryEventTypes`): a 4-byte big-endian event type,
 * then for PREVIEW_IMAGE (1) a 4-byte image format (1 JPEG, 2 PNG) and the picture; for PREVIEW_IMAGE_WITH_METADATA
 * (4, sent only to clients that announce `supports_preview_metadata`) a 4-byte length, that much JSON (`prompt_id`,
 * `node_id`, `image_type`) and the picture. Other events (TEXT, 3) and frames too short are not previews.
 */
export interface ComfyPreview {
  format: 'jpeg' | 'png';
  bytes: Buffer;
  /** Only frames with metadata say whose they are; a plain frame is the running prompt's. */
  promptId: string | null;
}

export function previewOfFrame(frame: Buffer): ComfyPreview | null {
  if (frame.length < 8) return null;
  const event = frame.readUInt32BE(0);
  if (event === 1) {
    const format = frame.readUInt32BE(4);
    if (format !== 1 && format !== 2) return null;
    return { format: format === 1 ? 'jpeg' : 'png', bytes: frame.subarray(8), promptId: null };
  }
  if (event === 4) {
    const length = frame.readUInt32BE(4);
    if (8 + length > frame.length) return null;
    let metadata: { prompt_id?: unknown; image_type?: unknown };
    try {
      metadata = JSON.parse(frame.toString('utf8', 8, 8 + length)) as typeof metadata;
    } catch {
      return null;
    }
    return { format: metadata.image_type === 'image/png' ? 'png' : 'jpeg', bytes: frame.subarray(8 + length), promptId: typeof metadata.prompt_id === 'string' ? metadata.prompt_id : null };
  }
  return null;
}

/** The WebSocket URL of a ComfyUI base URL: `ws://host/ws?clientId=<id>`. */
function socketUrl(baseUrl: string, clientId: string): string {
  const url = new URL(baseUrl);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/ws`;
  url.search = new URLSearchParams({ clientId }).toString();
  return url.toString();
}

/**
 * One client's WebSocket to ComfyUI. Binary frames that are previews go to
 * `onPreview`; text frames that are not JSON or not a known message are
 * ignored (ComfyUI extensions add their own types).
 */
export class ComfySocket {
  readonly #socket: WebSocket;
  #closed = false;
  readonly #closeHandlers: ((reason: string) => void)[] = [];

  private constructor(socket: WebSocket, onMessage: (message: ComfyMessage) => void, onPreview: (preview: ComfyPreview) => void) {
    this.#socket = socket;
    socket.on('message', (data, isBinary) => {
      if (isBinary) {
        const preview = previewOfFrame(Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]));
        if (preview) onPreview(preview);
        return;
      }
      let message: unknown;
      try {
        message = JSON.parse(data.toString());
      } catch {
        return;
      }
      const { type, data: body } = (message ?? {}) as { type?: unknown; data?: unknown };
      if (typeof type === 'string' && KNOWN.has(type) && body && typeof body === 'object') onMessage(message as ComfyMessage);
    });
    socket.on('close', (code, reason) => this.#ended(`closed (${code}${reason.length ? ` ${reason.toString()}` : ''})`));
    // An error is followed by close; the close handler reports it.
    socket.on('error', () => {});
  }

  /** Connect before submitting, so no message about our prompts is missed. */
  static async connect(
    baseUrl: string, clientId: string, timeoutMs: number, onMessage: (message: ComfyMessage) => void, onPreview: (preview: ComfyPreview) => void = () => {},
  ): Promise<ComfySocket> {
    const socket = new WebSocket(socketUrl(baseUrl, clientId), { handshakeTimeout: timeoutMs });
    const comfy = new ComfySocket(socket, onMessage, onPreview);
    await new Promise<void>((resolve, reject) => {
      const settle = (error?: Error): void => {
        socket.off('open', opened);
        socket.off('error', settle);
        socket.off('unexpected-response', refused);
        if (error) reject(error);
        else resolve();
      };
      const opened = (): void => settle();
      const refused = (_request: unknown, response: { statusCode?: number }): void => {
        // The engine reports a socket that does not open as the server being unreachable (ServerError).
        settle(new Error(`the WebSocket upgrade was refused with HTTP ${response.statusCode}`));
        socket.terminate();
      };
      socket.on('open', opened);
      socket.on('error', settle);
      socket.on('unexpected-response', refused);
    });
    return comfy;
  }

  get open(): boolean {
    return !this.#closed;
  }

  onClose(handler: (reason: string) => void): void {
    if (this.#closed) handler('closed');
    else this.#closeHandlers.push(handler);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.terminate();
  }

  #ended(reason: string): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const handler of this.#closeHandlers) handler(reason);
  }
}
