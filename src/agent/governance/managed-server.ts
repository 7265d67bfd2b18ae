import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { Timer } from '../../protocol/clock.js';
import { classifyExit, exitError, type ExitReason } from './exit-reason.js';
import { freePort } from './free-port.js';
import type { GovernedProcess } from './governed-process.js';
import type { Governor } from './governor.js';
import { prepareLaunch } from './launch.js';
import { LogTail } from './log-tail.js';
import { NotReadyError, waitForHttp, waitForLogLine } from './readiness.js';
import { ServerSettings, type ServerSettingsInput } from '../../protocol/engines/process-settings.js';

const HOST = '127.0.0.1';
/** What one `output()` reader may have waiting before its oldest chunks are dropped. */
const OUTPUT_QUEUE_BYTES = 1024 * 1024;

export interface ServerLaunch {
  /** For logs, the cgroup's name and errors (`sd-server`, `comfyui`). */
  name: string;
  /** The engine's or model's settings (validated here; defaults filled). */
  settings: ServerSettingsInput;
  /** `${MODEL_PATH}`: the model file in the agent's cache. */
  modelPath?: string;
  /** `${DATA_DIR}`: a folder the server may write. */
  dataDir?: string;
  /** `${GPU}` and CUDA_VISIBLE_DEVICES: the GPU's nvidia-smi index; null or absent: the CPU (no GPU visible). */
  gpu?: number | null;
  /** More variables the adapter offers to the template. */
  variables?: Record<string, string>;
  cwd?: string;
  /** The environment to start from (default: the agent's, without GPUMESH_* variables). */
  baseEnv?: NodeJS.ProcessEnv;
}

/** A server process the agent started, as an engine adapter sees it. */
export interface ManagedServer {
  readonly name: string;
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly argv: readonly string[];
  /** Its cgroup directories (empty without cgroups). */
  readonly cgroupPaths: readonly string[];
  /** Resolves when the readiness check passes; rejects with an EngineError if the server exits first or is not ready in time (it is stopped then). */
  readonly ready: Promise<void>;
  /** Resolves, once the process and everything it left are gone, with why it ended. Never rejects. */
  readonly exited: Promise<ExitReason>;
  /** Why it ended, or null while it runs. */
  readonly exitReason: ExitReason | null;
  /** The last lines of its stdout and stderr. */
  logTail(lines?: number): string[];
  /** Bytes it has written to stdout and stderr so far (kept or dropped). */
  readonly outputBytes: number;
  /**
   * Its stdout and stderr from the first read on, as the chunks arrive, ending when it exits (an engine that reads
   * progress from the log: sd.cpp's step bar). A reader that falls behind loses the oldest chunks beyond 1 MiB.
   */
  output(): AsyncIterable<Buffer>;
  /** Keep it from its idle stop while busy; call the returned function when done. */
  hold(): () => void;
  /** SIGTERM to its group, SIGKILL after its grace, cgroup removed; resolves when nothing of it is left. */
  stop(): Promise<ExitReason>;
}

/**
 * Start a server governed by `governor`: a free port, the command template
 * expanded into argv (no shell), its output read into a bounded tail, its
 * readiness checked, its exit classified and logged.
 */
export async function startServer(governor: Governor, launch: ServerLaunch, log: Logger): Promise<ManagedServer> {
  const settings = ServerSettings.parse(launch.settings);
  const port = await freePort(HOST);
  const gpu = launch.gpu ?? null;
  const variables = {
    PORT: String(port), HOST, MODEL_PATH: launch.modelPath ?? '', DATA_DIR: launch.dataDir ?? '',
    GPU: gpu === null ? '' : String(gpu), ...launch.variables,
  };
  // Its own folder when the settings name one (the host's config), else an empty one of its own (the governor's).
  const cwd = settings.cwd ?? launch.cwd;
  const prepared = prepareLaunch({ command: settings.command, env: settings.env, variables, gpu, baseEnv: launch.baseEnv, cwd });
  const governed = governor.spawn({
    name: launch.name, file: prepared.file, args: prepared.args, env: prepared.env, cwd,
    limits: settings, stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Server(launch.name, port, [prepared.file, ...prepared.args], governed, settings, governor, log.child({ engine: launch.name, pid: governed.pid }));
}

class Server implements ManagedServer {
  readonly name: string;
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly argv: readonly string[];
  readonly cgroupPaths: readonly string[];
  readonly ready: Promise<void>;
  readonly exited: Promise<ExitReason>;
  readonly #governed: GovernedProcess;
  readonly #settings: ServerSettings;
  readonly #governor: Governor;
  readonly #tail: LogTail;
  readonly #gone = new AbortController();
  #exitReason: ExitReason | null = null;
  #notReadyDetail: string | undefined;
  #holds = 0;
  #idleTimer: Timer | null = null;
  #isReady = false;
  /** Readers of `output()`: each gets every chunk, and null once the process is gone. */
  readonly #readers = new Set<(chunk: Buffer | null) => void>();

  constructor(name: string, port: number, argv: string[], governed: GovernedProcess, settings: ServerSettings, governor: Governor, log: Logger) {
    this.name = name;
    this.port = port;
    this.url = `http://${HOST}:${port}`;
    this.pid = governed.pid;
    this.argv = argv;
    this.cgroupPaths = governed.container?.paths ?? [];
    this.#governed = governed;
    this.#settings = settings;
    this.#governor = governor;
    this.#tail = new LogTail(settings.log);
    for (const [stream, readable] of [['out', governed.child.stdout], ['err', governed.child.stderr]] as const) {
      // Flowing mode, no buffering beyond the tail: a flood is read as fast as it comes and dropped.
      (readable as Readable).on('data', (chunk: Buffer) => {
        this.#tail.write(stream, chunk);
        for (const reader of this.#readers) reader(chunk);
      });
    }
    this.exited = governed.ended.then((end) => {
      this.#tail.flush();
      this.#cancelIdle();
      const reason = classifyExit(end, { name, logTail: this.#tail.lines(), detail: this.#notReadyDetail });
      this.#exitReason = reason;
      for (const reader of this.#readers) reader(null);
      this.#gone.abort(exitError(reason));
      if (end.cause === null) log.warn({ kind: reason.kind, code: end.code, signal: end.signal, logTail: reason.logTail.slice(-10) }, `server exited unexpectedly: ${reason.message}`);
      else log.info({ kind: reason.kind }, reason.message);
      return reason;
    });
    this.ready = this.#checkReadiness();
    // Nobody may be waiting on readiness yet; its failure is also reported through `exited`.
    this.ready.catch(() => {});
    log.info({ url: this.url, argv, cgroup: this.cgroupPaths[0] ?? null }, 'server started');
  }

  get exitReason(): ExitReason | null {
    return this.#exitReason;
  }

  logTail(lines?: number): string[] {
    return this.#tail.lines(lines);
  }

  get outputBytes(): number {
    return this.#tail.bytesSeen;
  }

  async *output(): AsyncGenerator<Buffer> {
    const queue: Buffer[] = [];
    let queued = 0;
    let ended = this.#exitReason !== null;
    let wake: (() => void) | null = null;
    const reader = (chunk: Buffer | null): void => {
      if (chunk === null) ended = true;
      else {
        queue.push(chunk);
        queued += chunk.length;
        // Bounded, like the tail: a reader that stalls costs at most this much, however much the server writes.
        while (queued > OUTPUT_QUEUE_BYTES && queue.length > 1) queued -= queue.shift()!.length;
      }
      wake?.();
    };
    this.#readers.add(reader);
    try {
      for (;;) {
        while (queue.length > 0) {
          const chunk = queue.shift()!;
          queued -= chunk.length;
          yield chunk;
        }
        if (ended) return;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = null;
      }
    } finally {
      this.#readers.delete(reader);
    }
  }

  hold(): () => void {
    this.#holds++;
    this.#cancelIdle();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#holds--;
      this.#armIdle();
    };
  }

  async stop(): Promise<ExitReason> {
    await this.#governed.stop(this.#settings.stopGraceMs, this.#governor.clock, 'stop');
    return this.exited;
  }

  async #checkReadiness(): Promise<void> {
    const readiness = this.#settings.readiness;
    const clock = this.#governor.clock;
    try {
      if ('http' in readiness) {
        await waitForHttp(new URL(readiness.http, this.url), { ...readiness, clock, signal: this.#gone.signal, tail: this.#tail });
      } else {
        await waitForLogLine(this.#tail, new RegExp(readiness.logLine), { timeoutMs: readiness.timeoutMs, clock, signal: this.#gone.signal });
      }
    } catch (error) {
      if (!(error instanceof NotReadyError)) throw error;
      this.#notReadyDetail = error.message;
      await this.#governed.stop(this.#settings.stopGraceMs, clock, 'not-ready');
      throw exitError(await this.exited);
    }
    this.#isReady = true;
    this.#armIdle();
  }

  #armIdle(): void {
    const idleMs = this.#settings.idleStopMs;
    if (idleMs === null || !this.#isReady || this.#holds > 0 || this.#exitReason) return;
    this.#cancelIdle();
    this.#idleTimer = this.#governor.clock.setTimer(idleMs, () => {
      void this.#governed.stop(this.#settings.stopGraceMs, this.#governor.clock, 'idle');
    });
  }

  #cancelIdle(): void {
    this.#idleTimer?.cancel();
    this.#idleTimer = null;
  }
}
