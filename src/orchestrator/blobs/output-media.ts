import { fileTypeFromBuffer } from 'file-type';
import { MeshError } from '../../protocol/index.js';
import type { JOB_INPUTS } from '../job-inputs/job-inputs.js';

/**
 * The media types a job's outputs may have, by job type — what the engines really produce: images are PNG (the ONNX
 * and HTTP engines), or JPEG, WebP or GIF from a server (ComfyUI, a command); a clip is an MP4 (the agent's ffmpeg
 * encoder) or a WebM, with a poster image; a tensor job answers in its JSON result and makes no file, though a
 * command may leave one (JSON, text, or raw bytes such as a `.npy` array: `application/octet-stream`, which claims
 * no type, so there is nothing to check). JSON and plain text are allowed for every type (a command's report). All
 * but images and videos are served as downloads. Anything else — HTML, SVG, a script — is refused: outputs are
 * served from the orchestrator's origin. OCR answers with its lines in the JSON result and the picture annotated as a PNG.
 */
export const OUTPUT_MEDIA_TYPES = {
  image: ['image/png', 'image/jpeg', 'image/webp', 'image/gif', 'application/json', 'text/plain'],
  video: ['video/mp4', 'video/webm', 'image/png', 'image/jpeg', 'image/webp', 'image/gif', 'application/json', 'text/plain'],
  tensor: ['application/json', 'text/plain', 'application/octet-stream'],
  // The lines read are the JSON result; the picture with their boxes drawn is a PNG.
  ocr: ['image/png', 'application/json', 'text/plain'],
  // What a ComfyUI workflow's save nodes write: pictures (animated WebP and GIF too) and clips.
  workflow: ['image/png', 'image/jpeg', 'image/webp', 'image/gif', 'video/mp4', 'video/webm', 'application/json', 'text/plain'],
} as const satisfies Readonly<Record<keyof typeof JOB_INPUTS, readonly string[]>>;

/** What a blob is served as, by the type it was recorded with: only types on some job type's list keep theirs. */
const SERVED: Readonly<Record<string, { contentType: string; extension: string }>> = {
  'image/png': { contentType: 'image/png', extension: 'png' },
  'image/jpeg': { contentType: 'image/jpeg', extension: 'jpg' },
  'image/webp': { contentType: 'image/webp', extension: 'webp' },
  'image/gif': { contentType: 'image/gif', extension: 'gif' },
  'video/mp4': { contentType: 'video/mp4', extension: 'mp4' },
  'video/webm': { contentType: 'video/webm', extension: 'webm' },
  'application/json': { contentType: 'application/json', extension: 'json' },
  'text/plain': { contentType: 'text/plain; charset=utf-8', extension: 'txt' },
  'application/octet-stream': { contentType: 'application/octet-stream', extension: 'bin' },
};
const OCTETS = SERVED['application/octet-stream']!;

/** The first bytes kept for the signature check (file-type reads a few KiB at most for the types above). */
const HEAD_BYTES = 64 * 1024;
/** The largest output checked as JSON (it is parsed whole); a larger one declared JSON is refused. */
export const JSON_CHECK_LIMIT = 16 * 1024 * 1024;

/** The media types outputs of `jobType` may have (none for a type this orchestrator has no list for). */
export function outputTypesOf(jobType: string): readonly string[] {
  return Object.hasOwn(OUTPUT_MEDIA_TYPES, jobType) ? OUTPUT_MEDIA_TYPES[jobType as keyof typeof OUTPUT_MEDIA_TYPES] : [];
}

/**
 * How a blob recorded with `mediaType` is served: its own type if that is on some job type's list, else
 * application/octet-stream; images and videos inline (an <img>, a <video>), anything else as a download.
 */
export function servedAs(mediaType: string | null | undefined): { contentType: string; extension: string; inline: boolean } {
  const served = (mediaType && Object.hasOwn(SERVED, mediaType) ? SERVED[mediaType] : undefined) ?? OCTETS;
  return { ...served, inline: served.contentType.startsWith('image/') || served.contentType.startsWith('video/') };
}

/** The type on a job type's list, or UNSUPPORTED_MEDIA_TYPE naming the list. */
function assertListed(jobType: string, mediaType: string): void {
  const allowed = outputTypesOf(jobType);
  if (!allowed.includes(mediaType)) {
    throw new MeshError('UNSUPPORTED_MEDIA_TYPE', {
      detail: `${mediaType.slice(0, 100)} is not an output type of ${jobType.slice(0, 40)} jobs (they may be: ${allowed.join(', ') || 'none'})`,
    });
  }
}

/**
 * Checks that an output's bytes are what its declared media type says, fed as they arrive (an upload streams): the
 * type must be on the job type's list (refused at once), an image or video must carry that type's signature
 * (file-type), plain text must be UTF-8 without NUL bytes, JSON must also parse. `finish` tells once all bytes are
 * in. Every refusal is UNSUPPORTED_MEDIA_TYPE (415) naming what was wrong; a report's inline output that fails
 * fails its attempt with INTEGRITY_FAILED.
 */
export class OutputCheck {
  readonly #mediaType: string;
  readonly #kind: 'signature' | 'text' | 'json' | 'opaque';
  readonly #head: Buffer[] = [];
  #headBytes = 0;
  #bytes = 0;
  readonly #decoder = new TextDecoder('utf-8', { fatal: true });
  readonly #text: string[] = [];
  #problem: string | null = null;

  constructor(jobType: string, mediaType: string) {
    assertListed(jobType, mediaType);
    this.#mediaType = mediaType;
    this.#kind = mediaType === 'application/json' ? 'json' : mediaType === 'text/plain' ? 'text' : mediaType === OCTETS.contentType ? 'opaque' : 'signature';
  }

  push(chunk: Uint8Array): void {
    this.#bytes += chunk.length;
    if (this.#problem !== null || this.#kind === 'opaque') return;
    if (this.#kind === 'signature') {
      if (this.#headBytes < HEAD_BYTES) {
        const part = Buffer.from(chunk.subarray(0, HEAD_BYTES - this.#headBytes)); // a copy: the caller may reuse its chunk
        this.#head.push(part);
        this.#headBytes += part.length;
      }
      return;
    }
    if (chunk.indexOf(0) !== -1) {
      this.#problem = 'it holds a NUL byte';
      return;
    }
    let text: string;
    try {
      text = this.#decoder.decode(chunk, { stream: true });
    } catch {
      this.#problem = 'it is not UTF-8 text';
      return;
    }
    if (this.#kind !== 'json') return;
    if (this.#bytes > JSON_CHECK_LIMIT) this.#problem = `it has more than ${JSON_CHECK_LIMIT} bytes, the most checked as JSON`;
    else this.#text.push(text);
  }

  /** Resolves if the bytes fed are what the declared type says; else UNSUPPORTED_MEDIA_TYPE. */
  async finish(): Promise<void> {
    if (this.#problem === null) this.#problem = await this.#verdict();
    this.#head.length = 0;
    this.#text.length = 0;
    if (this.#problem !== null) throw new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: `the bytes are not ${this.#mediaType}: ${this.#problem}` });
  }

  async #verdict(): Promise<string | null> {
    if (this.#kind === 'opaque') return null;
    if (this.#kind === 'signature') {
      const found = await fileTypeFromBuffer(Buffer.concat(this.#head, this.#headBytes));
      if (found?.mime === this.#mediaType) return null;
      return found ? `their signature is that of ${found.mime}` : 'they carry no signature of a known media type';
    }
    let rest: string;
    try {
      rest = this.#decoder.decode(); // a sequence cut off at the end throws
    } catch {
      return 'it is not UTF-8 text';
    }
    if (this.#kind === 'text') return null;
    try {
      JSON.parse(this.#text.join('') + rest);
      return null;
    } catch (error) {
      return `it does not parse as JSON (${(error as Error).message.slice(0, 100)})`;
    }
  }
}

/** Check bytes already in memory (an inline output); see OutputCheck. */
export async function checkOutput(jobType: string, mediaType: string, bytes: Uint8Array): Promise<void> {
  const check = new OutputCheck(jobType, mediaType);
  check.push(bytes);
  await check.finish();
}
