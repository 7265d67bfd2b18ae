import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import type { EndpointProvider } from '../../src/agent/engines/kit/endpoint.js';
import { splitLines } from '../../src/agent/engines/kit/lines.js';
import { ROOT, TSX_LOADER, waitFor } from './mesh.js';

export type StandinKind = 'sdcpp' | 'openai-images';

/** A stand-in image server running as its own process on its own port. */
export interface Standin {
  readonly kind: StandinKind;
  readonly url: string;
  readonly child: ChildProcess;
  output(): string;
  /** Its stdout from now on, as lines (split on \r and \n), as a launcher would hand it to an engine. */
  lines(): AsyncIterable<string>;
  /** What it saw (`GET /standin/stats`). */
  stats<T = Record<string, unknown>>(): Promise<T>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Start `test/fixtures/standins/<kind>-standin.ts` with these flags and wait until it prints its
 * port. With `--port` and `--start-delay-ms`, it returns before the server listens (`waitListening: false`).
 */
export async function startStandin(kind: StandinKind, flags: string[] = [], options: { waitListening?: boolean } = {}): Promise<Standin> {
  const script = join(ROOT, 'test/fixtures/standins', `${kind}-standin.ts`);
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...flags], { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT });
  let output = '';
  const listeners = new Set<(chunk: string) => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    for (const listener of listeners) listener(chunk.toString());
  });
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'exit');
  let url = '';
  const fixedPort = flags[flags.indexOf('--port') + 1];
  if (flags.includes('--port') && options.waitListening === false) {
    url = `http://127.0.0.1:${fixedPort}`;
  } else {
    const port = await waitFor(() => {
      if (child.exitCode !== null) throw new Error(`${kind} stand-in exited with ${child.exitCode}:\n${output}`);
      return /listening on port (\d+)/.exec(output)?.[1];
    }, { timeoutMs: 30_000, what: `the ${kind} stand-in to listen` });
    url = `http://127.0.0.1:${port}`;
  }
  return {
    kind, url, child,
    output: () => output,
    lines: () => splitLines(chunksFrom(listeners, child)),
    async stats<T>() {
      return (await (await fetch(`${url}/standin/stats`)).json()) as T;
    },
    async kill(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

/** Stdout chunks as an async iterable that ends when the process does. */
async function* chunksFrom(listeners: Set<(chunk: string) => void>, child: ChildProcess): AsyncGenerator<string> {
  const queue: string[] = [];
  let wake: (() => void) | null = null;
  let ended = child.exitCode !== null || child.signalCode !== null;
  const listener = (chunk: string): void => {
    queue.push(chunk);
    wake?.();
  };
  const onExit = (): void => {
    ended = true;
    wake?.();
  };
  listeners.add(listener);
  child.once('exit', onExit);
  try {
    for (;;) {
      while (queue.length) yield queue.shift()!;
      if (ended) return;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = null;
    }
  } finally {
    listeners.delete(listener);
    child.off('exit', onExit);
  }
}

/**
 * An {@link EndpointProvider} for tests: every load starts a stand-in with these flags and hands
 * the engine its URL and log; release kills it. It plays the part of the server launcher.
 */
export class StandinLauncher {
  readonly #kind: StandinKind;
  readonly #flags: string[];
  readonly #live = new Set<Standin>();
  readonly started: Standin[] = [];

  constructor(kind: StandinKind, flags: string[] = []) {
    this.#kind = kind;
    this.#flags = flags;
  }

  readonly provider: EndpointProvider = async () => {
    const standin = await startStandin(this.#kind, this.#flags);
    this.#live.add(standin);
    this.started.push(standin);
    return {
      url: standin.url,
      logLines: standin.lines(),
      release: async () => {
        this.#live.delete(standin);
        await standin.kill();
      },
    };
  };

  /** Stand-ins alive now. */
  get count(): number {
    return [...this.#live].filter((standin) => standin.child.exitCode === null && standin.child.signalCode === null).length;
  }

  pids(): number[] {
    return [...this.#live].map((standin) => standin.child.pid!).filter(Boolean);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.#live].map((standin) => standin.kill()));
    this.#live.clear();
  }
}

/**
 * The settings of a model whose server is the sd.cpp stand-in, started by the mesh from its command template as a
 * managed server would be: `flags`, the stand-in's own (`--step-ms 5`); `more`, any other settings of the model.
 */
export function sdcppStandinSettings(flags: string, more: Record<string, unknown> = {}): Record<string, unknown> {
  const script = join(ROOT, 'test/fixtures/standins/sdcpp-standin.ts');
  return {
    command: `'${process.execPath}' --import ${TSX_LOADER} '${script}' --port \${PORT} --model \${MODEL_PATH} ${flags}`,
    readiness: { http: '/sdcpp/v1/capabilities', timeoutMs: 60_000, intervalMs: 50 },
    ...more,
  };
}
