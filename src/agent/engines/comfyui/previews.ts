import sharp from 'sharp';
import type { Logger } from 'pino';
import type { Clock, Timer } from '../../../protocol/clock.js';
import type { ComfyPreview } from './socket.js';

/**
 * One job's previews from ComfyUI's binary frames: at most `limit` (the job's `previews`), at least `intervalMs`
 * apart. ComfyUI sends a frame every sampler step, far more than anyone can look at; of the frames that come while
 * the gate is shut, the newest is kept and sent when it opens. A JPEG frame (ComfyUI's default) becomes a PNG, the
 * mesh's preview format; a PNG goes as it came.
 */
export class PreviewGate {
  readonly #limit: number;
  readonly #intervalMs: number;
  readonly #clock: Clock;
  readonly #emit: (png: Uint8Array) => void;
  readonly #log: Logger;
  #sent = 0;
  #lastAt = Number.NEGATIVE_INFINITY;
  #pending: ComfyPreview | null = null;
  #timer: Timer | null = null;
  #encoding = false;
  #closed = false;

  constructor(options: { limit: number; intervalMs: number; clock: Clock; log: Logger; emit: (png: Uint8Array) => void }) {
    this.#limit = options.limit;
    this.#intervalMs = options.intervalMs;
    this.#clock = options.clock;
    this.#emit = options.emit;
    this.#log = options.log;
  }

  offer(preview: ComfyPreview): void {
    if (this.#closed || this.#sent >= this.#limit) return;
    this.#pending = preview;
    this.#schedule();
  }

  /** The job ended: nothing more goes out, not even a frame waiting for its turn. */
  close(): void {
    this.#closed = true;
    this.#pending = null;
    this.#timer?.cancel();
    this.#timer = null;
  }

  #schedule(): void {
    if (this.#timer || this.#encoding || !this.#pending) return;
    const wait = this.#lastAt + this.#intervalMs - this.#clock.now();
    if (wait <= 0) return void this.#send();
    this.#timer = this.#clock.setTimer(wait, () => {
      this.#timer = null;
      void this.#send();
    });
  }

  async #send(): Promise<void> {
    const preview = this.#pending;
    this.#pending = null;
    if (!preview || this.#closed || this.#sent >= this.#limit) return;
    this.#sent++;
    this.#lastAt = this.#clock.now();
    this.#encoding = true;
    try {
      const png = preview.format === 'png' ? preview.bytes : await sharp(preview.bytes).png().toBuffer();
      if (!this.#closed) this.#emit(png);
    } catch (error) {
      // A frame that does not decode is a lost preview, not a failed job.
      this.#sent--;
      this.#log.debug({ err: error }, 'a ComfyUI preview frame did not decode');
    } finally {
      this.#encoding = false;
      this.#schedule();
    }
  }
}
