import { formatError, type ErrorCode } from '../../../protocol/index.js';
import { createHash, randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { sleep, type Clock } from '../../../protocol/clock.js';
import { EngineError, type EngineJob, type JobOutput, type OutputFile, type Progress } from '../../core/engine.js';
import { BatchProgress } from '../kit/batch-progress.js';
import { ServerError, summaryOf } from '../kit/server-error.js';
import type { ServerBatch } from '../kit/server.js';
import { describeOutput } from '../kit/media.js';
import type { ComfyClient, ComfyFileRef, HistoryEntry } from './client.js';
import { comfyUiDescriptor, type ComfyUiSettings } from '../../../protocol/engines/comfyui.js';
import { controlMarkupIn } from '../../../protocol/engines/index.js';
import { fillWorkflow, promptFor, withPictures, type JobPrompt, type ResolvedWorkflow } from './workflow.js';
import { ComfySocket, type ComfyMessage, type ComfyPreview } from './socket.js';
import { describeExecutionError } from './errors.js';
import { uploadPictures, uploadWorkflowPictures } from './pictures.js';
import { PreviewGate } from './previews.js';
import type { Workflow } from '../../../protocol/engines/comfyui.js';

type Failure = { kind: 'failed'; code: ErrorCode; message: string; retryable: boolean };
type Outcome = { kind: 'succeeded' } | { kind: 'cancelled' } | Failure;

/** One job of the batch as one ComfyUI prompt: unsent → queued → running → done. */
interface PromptState {
  job: EngineJob;
  index: number;
  /** What it runs here: the model's workflow filled in, a client's whole workflow, a probe, or why it cannot. */
  prompt: JobPrompt;
  promptId: string | null;
  phase: 'unsent' | 'queued' | 'running' | 'done';
  cancelled: boolean;
  outcome: Outcome | null;
  history: HistoryEntry | null;
  /** Each progress-reporting node's place (`value` of `max`): the workflow's samplers from the start, others as they report. */
  nodes: Map<string, { value: number; max: number }>;
  /** Its previews, when the job asked for some. */
  previews: PreviewGate | null;
  settle(): void;
  settled: Promise<void>;
}

export interface BatchDeps {
  /** The gpumesh model's name, for errors. */
  model: string;
  client: ComfyClient;
  /** The model's own workflow; null: it runs only clients' (`acceptWorkflows`). */
  workflow: ResolvedWorkflow | null;
  settings: ComfyUiSettings;
  log: Logger;
  /** For the batch's deadline and the pauses between polls. */
  clock: Clock;
}

const NEVER_ABORTED = new AbortController().signal;

/** Messages for prompts whose POST /prompt has not answered yet are kept (at most this many) and replayed. */
const MAX_EARLY_MESSAGES = 10_000;
/** Polling gives up after this many failed rounds in a row that were not the server being away (it answered, badly). */
const MAX_POLL_FAILURES = 5;

/** Nothing reached the server, or the connection broke: a server that is starting, restarting or gone. */
const away = (error: unknown): boolean => error instanceof ServerError && (error.failure === 'unreachable' || error.failure === 'dropped');

const failed = (code: ErrorCode, message: string, retryable: boolean): Failure => ({ kind: 'failed', code, message, retryable });

/**
 * One batch on a ComfyUI server: each job becomes a prompt (ComfyUI runs one
 * prompt at a time, so jobs do not share a forward pass), all queued at once
 * behind a WebSocket opened first, each job's pictures uploaded before its
 * prompt. Progress, previews and completion come from the socket; if it drops,
 * /history is polled instead (no step progress then). A server that stops
 * answering (restarting) is waited for, `readyWaitMs` at most: then the socket
 * opens again and prompts the restart lost are sent again.
 */
export class ComfyBatch implements ServerBatch {
  readonly #deps: BatchDeps;
  readonly #states: PromptState[];
  readonly #byId = new Map<string, PromptState>();
  readonly #early = new Map<string, ComfyMessage[]>();
  #earlyCount = 0;
  readonly #progress: BatchProgress;
  readonly #clientId = randomUUID();
  #runningId: string | null = null;
  #polling = false;
  #timedOut = false;
  #ended = false;
  #socket: ComfySocket | null = null;
  /** The server went away and came back: a prompt of ours it knows nothing of was lost with it. */
  #restarted = false;

  constructor(deps: BatchDeps, jobs: readonly EngineJob[], onProgress: (progress: Progress) => void) {
    this.#deps = deps;
    this.#progress = new BatchProgress(jobs.length, onProgress);
    this.#states = jobs.map((job, index) => {
      let settle!: () => void;
      const settled = new Promise<void>((resolve) => (settle = resolve));
      const prompt = promptFor(deps.workflow, deps.settings, deps.model, job.input);
      const nodes = new Map<string, { value: number; max: number }>();
      if ('workflow' in prompt) for (const [node, steps] of samplerSteps(prompt.workflow)) nodes.set(node, { value: 0, max: steps });
      const wanted = Number(job.input.previews ?? 0);
      const previews = wanted > 0 ? new PreviewGate({
        limit: wanted, intervalMs: deps.settings.previewIntervalMs, clock: deps.clock, log: deps.log,
        emit: (png) => onProgress({ ...this.#progress.current, previews: [{ jobId: job.id, png }] }),
      }) : null;
      return { job, index, prompt, promptId: null, phase: 'unsent', cancelled: false, outcome: null, history: null, nodes, previews, settle, settled };
    });
    // Every job's whole count is known before it starts: the bar's total does not grow as the workflow's nodes run.
    for (const state of this.#states) this.#reportNodes(state);
  }

  async run(): Promise<JobOutput[]> {
    const { settings } = this.#deps;
    this.#socket = await this.#connect();
    const deadline = this.#deps.clock.setTimer(settings.timeoutMs, () => this.#timeOut());
    try {
      for (const state of this.#states) await this.#submit(state);
      await Promise.all(this.#states.map((state) => state.settled));
    } finally {
      deadline.cancel();
      this.#ended = true;
      this.#socket?.close();
    }
    return Promise.all(this.#states.map((state) => this.#output(state)));
  }

  /**
   * The WebSocket, opened before any prompt is sent. A server that refuses it (starting, restarting) is waited for,
   * `readyWaitMs` at most; one that does not come back fails the batch ENGINE_UNREACHABLE, which the replica's
   * breaker counts.
   */
  async #connect(): Promise<ComfySocket> {
    const { client, settings } = this.#deps;
    const open = (): Promise<ComfySocket> =>
      ComfySocket.connect(client.url, this.#clientId, settings.requestTimeoutMs, (message) => this.#onMessage(message), (preview) => this.#onPreview(preview));
    let socket: ComfySocket;
    try {
      socket = await open();
    } catch {
      await this.#untilBack();
      try {
        socket = await open();
      } catch (error) {
        throw new EngineError('ENGINE_UNREACHABLE', formatError('ENGINE_UNREACHABLE', { url: client.url, detail: `its WebSocket did not open: ${(error as Error).message}` }), true, { cause: error });
      }
    }
    socket.onClose((reason) => {
      if (this.#ended) return;
      this.#deps.log.warn({ server: client.url, reason }, 'ComfyUI WebSocket dropped mid-batch; polling /history instead');
      void this.#poll();
    });
    return socket;
  }

  /**
   * Hold the batch (its jobs NOT_READY, not failed) while the server does not answer, `readyWaitMs` at most, with a
   * backoff; throws ENGINE_UNREACHABLE once the window is over.
   */
  async #untilBack(): Promise<void> {
    const { client, settings, log } = this.#deps;
    log.info({ server: client.url, readyWaitMs: settings.readyWaitMs }, 'ComfyUI is not answering; holding its jobs until it is back');
    try {
      await client.untilReady(settings.readyWaitMs);
    } catch (error) {
      throw new EngineError('ENGINE_UNREACHABLE', formatError('ENGINE_UNREACHABLE', { url: client.url, detail: `not back within readyWaitMs (${settings.readyWaitMs} ms): ${summaryOf(error)}` }), true, { cause: error });
    }
    log.info({ server: client.url }, 'ComfyUI answers again');
  }

  /**
   * Stop these jobs: not yet sent → skipped; queued → taken out of the queue;
   * running → interrupted. A job cancelled before the batch returns ends
   * CANCELLED even if its prompt had finished, as in every engine.
   */
  cancel(jobIds: readonly string[]): void {
    for (const state of queuedFirst(this.#states)) {
      if (!jobIds.includes(state.job.id) || state.cancelled) continue;
      state.cancelled = true;
      if (state.promptId && state.phase !== 'done') void this.#stop(state);
      // An unsent prompt is skipped by #submit; one being sent is stopped once its id is known.
    }
  }

  async #submit(state: PromptState): Promise<void> {
    const { client } = this.#deps;
    if (state.cancelled || state.outcome) return this.#finish(state, { kind: 'cancelled' });
    const { prompt } = state;
    if (prompt.kind === 'refused') return this.#finish(state, failed('ENGINE_FAILED', prompt.message, prompt.retryable));
    if (prompt.kind === 'probe') return this.#probe(state);
    const markup = controlMarkupIn(state.job.input, comfyUiDescriptor);
    if (markup) return this.#finish(state, failed('INVALID_INPUT', formatError('INVALID_INPUT', { model: this.#deps.model, detail: markup }), false));
    try {
      const submitted = await this.#patiently(async () => client.submit(await this.#graphOf(state.job, prompt), this.#clientId, randomUUID()));
      state.promptId = String(submitted.prompt_id);
    } catch (error) {
      return this.#finish(state, this.#submitFailure(error));
    }
    if (state.phase === 'unsent') state.phase = 'queued';
    this.#byId.set(state.promptId, state);
    const early = this.#early.get(state.promptId) ?? [];
    this.#early.delete(state.promptId);
    for (const message of early) this.#onMessage(message);
    // Cancelled, or past the deadline, while it was being sent: take it back off the server.
    if (state.cancelled || (this.#timedOut && state.phase === 'done')) await this.#stop(state);
  }

  /** The graph a prompt sends, once the job's pictures are uploaded under its own names and wired in. */
  async #graphOf(job: EngineJob, prompt: Extract<JobPrompt, { workflow: Workflow }>): Promise<Workflow> {
    const { client, workflow } = this.#deps;
    if (prompt.kind === 'client') return withPictures(prompt.workflow, await uploadWorkflowPictures(client, job));
    return fillWorkflow(workflow!, job.input, await uploadPictures(client, job));
  }

  /** A health probe of a model without a workflow of its own: the server answers (waited for while it restarts), or the probe fails. */
  async #probe(state: PromptState): Promise<void> {
    try {
      await this.#patiently(() => this.#deps.client.systemStats());
      this.#finish(state, { kind: 'succeeded' });
    } catch (error) {
      this.#finish(state, this.#submitFailure(error));
    }
  }

  /**
   * `send` (uploads, then the prompt), and once more if nothing reached the server — it refused the connection:
   * restarting — after waiting for it to be back. A connection that dropped mid-request is not sent again here: the
   * prompt may be queued.
   */
  async #patiently<T>(send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (error) {
      if (!(error instanceof ServerError && error.failure === 'unreachable')) throw error;
      await this.#untilBack();
      return send();
    }
  }

  #submitFailure(error: unknown): Failure {
    const { client } = this.#deps;
    if (error instanceof EngineError && !(error instanceof ServerError)) return failed(error.code, error.message, error.retryable);
    if (!(error instanceof ServerError) || error.failure === 'protocol') return failed('ENGINE_FAILED', `${client.label}: ${summaryOf(error)}`, true);
    if (error.status === 400) return failed('INVALID_INPUT', `${client.label} refused the workflow: ${describeRefusal(error.body, error.detail)}`, false);
    // A server that cannot take the prompt now (busy after the retries, unreachable) may be ready on the next attempt.
    if (error.status === null || error.busy) return failed('NOT_READY', error.summary, true);
    return failed('ENGINE_FAILED', error.summary, error.status >= 500);
  }

  #onMessage(message: ComfyMessage): void {
    if (this.#ended) return;
    const promptId = ('prompt_id' in message.data ? message.data.prompt_id : undefined) ?? (message.type === 'progress' ? this.#runningId : null);
    if (!promptId) return;
    const state = this.#byId.get(promptId);
    if (!state) {
      // progress_state goes to every client, about every prompt; the next one for ours says all an early one would.
      if (message.type === 'progress_state') return;
      // Our POST /prompt may not have answered yet; ComfyUI can start (even finish) a prompt before that.
      if (this.#earlyCount >= MAX_EARLY_MESSAGES) return;
      const list = this.#early.get(promptId) ?? [];
      list.push(message);
      this.#early.set(promptId, list);
      this.#earlyCount++;
      return;
    }
    if (state.phase === 'done') return;
    switch (message.type) {
      case 'execution_start':
        this.#started(state);
        return;
      case 'execution_cached':
        this.#started(state);
        // A cached sampler does not run again: its steps are done.
        for (const node of message.data.nodes ?? []) this.#nodeAt(state, node, Number.POSITIVE_INFINITY, null);
        return this.#reportNodes(state);
      case 'executing':
        if (message.data.node === null) return this.#finish(state, { kind: 'succeeded' });
        this.#started(state);
        return;
      case 'progress':
        this.#started(state);
        this.#nodeAt(state, message.data.node ?? '?', Number(message.data.value), Number(message.data.max));
        return this.#reportNodes(state);
      case 'progress_state':
        // Every node that is not pending, each with its own value/max (1 of 1 for one that reports no steps).
        for (const [node, place] of Object.entries(message.data.nodes ?? {})) {
          const max = Number(place?.max);
          this.#nodeAt(state, node, place?.state === 'finished' ? Number.POSITIVE_INFINITY : Number(place?.value), Number.isFinite(max) ? max : null);
        }
        return this.#reportNodes(state);
      case 'execution_success':
        return this.#finish(state, { kind: 'succeeded' });
      case 'execution_error':
        return this.#finish(state, this.#executionError(state, message.data));
      case 'execution_interrupted':
        return this.#finish(state, this.#interrupted(message.data));
      default:
        return;
    }
  }

  /**
   * A node's place in the job: `value` of `max` (max null: as it was; value ∞: all of it). Nodes that report no steps
   * (1 of 1) count only where the workflow said they would (its samplers): the bar is the sampling.
   */
  #nodeAt(state: PromptState, node: string, value: number, max: number | null): void {
    const known = state.nodes.get(node);
    const whole = max ?? known?.max ?? 0;
    if (!known && !(whole > 1)) return;
    const at = Math.min(Number.isFinite(value) ? Math.max(value, 0) : whole, whole);
    state.nodes.set(node, { value: Number.isNaN(at) ? known?.value ?? 0 : at, max: whole });
  }

  /** The job's steps over every progress-reporting node so far: one bar over the whole workflow. */
  #reportNodes(state: PromptState): void {
    let value = 0;
    let max = 0;
    for (const node of state.nodes.values()) {
      value += node.value;
      max += node.max;
    }
    if (max > 0) this.#progress.set(state.index, value, max);
  }

  /** A binary preview frame: the running prompt's (or, with metadata, the one it names), if its job asked for previews. */
  #onPreview(preview: ComfyPreview): void {
    if (this.#ended) return;
    const promptId = preview.promptId ?? this.#runningId;
    const state = promptId ? this.#byId.get(promptId) : undefined;
    if (state && state.phase !== 'done' && !state.cancelled) state.previews?.offer(preview);
  }

  /** An error while the prompt ran: one line for the client; the whole traceback, with the server's paths, for the agent's log. */
  #executionError(state: PromptState, data: Record<string, unknown>): Failure {
    const { client, log } = this.#deps;
    log.warn({
      server: client.url, jobId: state.job.id, promptId: state.promptId, node: data.node_id, nodeType: data.node_type,
      exceptionType: data.exception_type, exceptionMessage: data.exception_message, traceback: data.traceback,
    }, 'a ComfyUI prompt failed');
    return failed('ENGINE_FAILED', `${client.label}: ${describeExecutionError(data)}`, false);
  }

  #started(state: PromptState): void {
    if (state.phase !== 'queued' && state.phase !== 'unsent') return;
    state.phase = 'running';
    this.#runningId = state.promptId;
    // Cancelled while we thought it queued: the delete missed it, so interrupt it now.
    if (state.cancelled) void this.#stop(state);
  }

  #interrupted(data: { node_id?: string; node_type?: string }): Outcome {
    return failed('ENGINE_FAILED', `${this.#deps.client.label}: the prompt was interrupted at node ${data.node_id ?? '?'} (${data.node_type ?? '?'}) by another client`, true);
  }

  #finish(state: PromptState, outcome: Outcome): void {
    if (state.outcome) return;
    state.outcome = state.cancelled ? { kind: 'cancelled' } : outcome;
    state.phase = 'done';
    state.previews?.close();
    if (this.#runningId === state.promptId) this.#runningId = null;
    this.#progress.complete(state.index);
    state.settle();
  }

  /** Take a cancelled prompt off the server: out of the queue if it waits there, else interrupt it. */
  async #stop(state: PromptState): Promise<void> {
    const { client, log } = this.#deps;
    const promptId = state.promptId!;
    try {
      if (state.phase === 'running') {
        await client.interrupt(promptId); // the socket (or polling) reports it interrupted
        return;
      }
      await client.deleteQueued([promptId]);
      const queue = await client.queue();
      if (queue.running.has(promptId)) {
        state.phase = 'running';
        await client.interrupt(promptId);
      } else if (!queue.pending.has(promptId)) {
        this.#finish(state, { kind: 'cancelled' });
      }
    } catch (error) {
      // The batch deadline still ends the job; the server may be gone.
      log.warn({ err: error, promptId }, 'could not cancel a ComfyUI prompt');
    }
  }

  /** The WebSocket dropped: learn each prompt's end from /history, and notice prompts the server lost. */
  async #poll(): Promise<void> {
    if (this.#polling) return;
    this.#polling = true;
    const { client, settings } = this.#deps;
    let failures = 0;
    while (!this.#ended && this.#states.some((state) => state.phase !== 'done')) {
      await sleep(this.#deps.clock, settings.pollIntervalMs, NEVER_ABORTED);
      try {
        await this.#pollOnce();
        failures = 0;
      } catch (error) {
        if (away(error)) {
          await this.#backAgain();
          continue;
        }
        if (++failures < MAX_POLL_FAILURES) continue;
        for (const state of this.#states) this.#finish(state, failed('NOT_READY', `${client.label}: lost while polling: ${summaryOf(error)}`, true));
      }
    }
  }

  /**
   * The server went away under the batch (a restart): wait for it, then listen again — the prompts it lost are sent
   * again by the next poll. If it is not back within the window, every job still open fails ENGINE_UNREACHABLE.
   */
  async #backAgain(): Promise<void> {
    try {
      await this.#untilBack();
    } catch (error) {
      const { code, message } = error as EngineError;
      for (const state of this.#states) this.#finish(state, failed(code, message, true));
      return;
    }
    this.#restarted = true;
    if (this.#ended) return;
    try {
      this.#socket?.close();
      this.#socket = await this.#connect();
    } catch (error) {
      // Polling carries on without step progress.
      this.#deps.log.warn({ err: error }, 'the ComfyUI WebSocket did not open again');
    }
  }

  async #pollOnce(): Promise<void> {
    const { client } = this.#deps;
    const missing: PromptState[] = [];
    for (const state of this.#states) {
      if (state.phase === 'done' || !state.promptId) continue;
      const entry = await client.history(state.promptId);
      if (entry) this.#finishFromHistory(state, entry);
      else missing.push(state);
    }
    if (missing.length === 0) return;
    const queue = await client.queue();
    for (const state of missing) {
      const promptId = state.promptId!;
      if (queue.running.has(promptId)) this.#started(state);
      if (queue.running.has(promptId) || queue.pending.has(promptId) || state.phase === 'done') continue;
      const entry = await client.history(promptId); // it may have finished between the two reads
      if (entry) this.#finishFromHistory(state, entry);
      else if (this.#restarted && !this.#timedOut) await this.#resubmit(state);
      else this.#finish(state, failed('ENGINE_FAILED', `${client.label} lost prompt ${promptId}: it is neither queued, running nor in its history`, true));
    }
  }

  /** A prompt the server lost in a restart: sent again, pictures and all, as if it had never been sent. */
  async #resubmit(state: PromptState): Promise<void> {
    this.#deps.log.info({ jobId: state.job.id, promptId: state.promptId }, 'ComfyUI lost the prompt in a restart; sending it again');
    this.#byId.delete(state.promptId!);
    state.promptId = null;
    state.phase = 'unsent';
    await this.#submit(state);
  }

  #finishFromHistory(state: PromptState, entry: HistoryEntry): void {
    state.history = entry;
    const messages = entry.status?.messages ?? [];
    const error = messages.find(([type]) => type === 'execution_error')?.[1];
    const interrupted = messages.find(([type]) => type === 'execution_interrupted')?.[1];
    if (error) return this.#finish(state, this.#executionError(state, error));
    if (interrupted) return this.#finish(state, this.#interrupted(interrupted));
    if (entry.status?.status_str === 'error') return this.#finish(state, failed('ENGINE_FAILED', `${this.#deps.client.label}: the prompt failed`, false));
    this.#finish(state, { kind: 'succeeded' });
  }

  #timeOut(): void {
    const { client, settings } = this.#deps;
    this.#timedOut = true;
    for (const state of queuedFirst(this.#states)) {
      if (state.phase === 'done') continue;
      if (state.promptId) void this.#stop(state); // free the server for the next batch
      this.#finish(state, failed('ENGINE_FAILED', `${client.label}: the batch took longer than ${settings.timeoutMs} ms`, true));
    }
  }

  async #output(state: PromptState): Promise<JobOutput> {
    const jobId = state.job.id;
    const outcome = state.outcome!;
    if (outcome.kind === 'cancelled' || state.cancelled) return { jobId, ok: false, code: 'CANCELLED', message: 'cancelled', retryable: false };
    if (outcome.kind === 'failed') return { jobId, ok: false, code: outcome.code, message: outcome.message, retryable: outcome.retryable };
    const { client, workflow, log } = this.#deps;
    if (state.prompt.kind === 'probe') return { jobId, ok: true, files: [] };
    const fromClient = state.prompt.kind === 'client';
    try {
      const entry = state.history ?? await client.history(state.promptId!);
      if (!entry) return { jobId, ok: false, code: 'ENGINE_FAILED', message: `${client.label} has no history for prompt ${state.promptId}`, retryable: true };
      const refs = outputFiles(entry, fromClient ? null : workflow!.outputNodes, fromClient);
      const files: OutputFile[] = [];
      /** A client's workflow: which node made each file (in `files`' order), for the front door's /history. */
      const made: { node: string; type: string; digest: string }[] = [];
      for (const { node, ref } of refs) {
        const { bytes, contentType } = await client.view(ref);
        const file = await describeOutput(ref.filename, bytes, contentType);
        if (fromClient && !WORKFLOW_OUTPUTS.has(file.mediaType)) {
          log.info({ jobId, node, file: ref.filename, mediaType: file.mediaType }, 'a workflow output of a kind the mesh does not keep; left out');
          continue;
        }
        files.push(file);
        if (fromClient) made.push({ node, type: ref.type, digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}` });
      }
      if (files.length === 0) {
        return { jobId, ok: false, code: 'ENGINE_FAILED', message: `${client.label}: the workflow produced no output files (does it end in a SaveImage node?)`, retryable: false };
      }
      return fromClient ? { jobId, ok: true, files, result: { outputs: made } } : { jobId, ok: true, files };
    } catch (error) {
      return { jobId, ok: false, code: 'ENGINE_FAILED', message: `${client.label}: fetching the outputs of prompt ${state.promptId} failed: ${summaryOf(error)}`, retryable: true };
    }
  }
}

/**
 * Prompts in the order to take them off the server: waiting ones out of the queue before the running one is
 * interrupted, since the server starts the next prompt the moment the running one stops.
 */
const queuedFirst = (states: readonly PromptState[]): PromptState[] =>
  [...states.filter((state) => state.phase !== 'running'), ...states.filter((state) => state.phase === 'running')];

/** The media types a client's workflow may leave as its job's outputs (the `workflow` job type's: blobs/output-media.ts). */
const WORKFLOW_OUTPUTS: ReadonlySet<string> = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif', 'video/mp4', 'video/webm']);

/**
 * The files a finished prompt wrote, each with the node that wrote it, in node order: of every node (or of the chosen
 * nodes). `all`: previews (type "temp", a PreviewImage's) too, as a ComfyUI client of the front door sees them;
 * otherwise, without chosen nodes, they are left out when the workflow saved real outputs.
 */
function outputFiles(entry: HistoryEntry, outputNodes: string[] | null, all = false): { node: string; ref: ComfyFileRef }[] {
  const nodes = outputNodes ?? Object.keys(entry.outputs ?? {}).sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  const refs: { node: string; ref: ComfyFileRef }[] = [];
  for (const node of nodes) {
    for (const value of Object.values(entry.outputs?.[node] ?? {})) {
      if (!Array.isArray(value)) continue;
      for (const item of value) {
        if (item && typeof item === 'object' && typeof (item as ComfyFileRef).filename === 'string') refs.push({ node, ref: item as ComfyFileRef });
      }
    }
  }
  if (outputNodes || all) return refs;
  const saved = refs.filter(({ ref }) => ref.type === 'output');
  return saved.length > 0 ? saved : refs;
}

/**
 * The workflow's samplers: nodes with a whole-number `steps` input (KSampler, KSamplerAdvanced, …), each with its
 * steps. They report progress step by step; knowing them up front gives every job its whole count before it starts.
 */
function samplerSteps(workflow: Workflow): [string, number][] {
  return Object.entries(workflow)
    .filter(([, node]) => Number.isInteger(node.inputs.steps))
    .map(([id, node]) => [id, Math.max(Number(node.inputs.steps), 0)]);
}

/** A 400 from POST /prompt: `{error: {message, details}, node_errors: {id: {class_type, errors: [{message, details}]}}}`. */
function describeRefusal(body: unknown, fallback: string): string {
  const nodeErrors = (body as { node_errors?: unknown })?.node_errors;
  const parts: string[] = [];
  if (nodeErrors && typeof nodeErrors === 'object' && !Array.isArray(nodeErrors)) {
    for (const [node, value] of Object.entries(nodeErrors as Record<string, { class_type?: string; errors?: { message?: string; details?: string }[] }>)) {
      const errors = (value.errors ?? []).map((error) => `${error.message ?? 'invalid'}${error.details ? `: ${error.details}` : ''}`);
      parts.push(`node ${node} (${value.class_type ?? '?'}): ${errors.join('; ') || 'invalid'}`);
    }
  }
  return parts.length > 0 ? parts.join('; ') : fallback;
}
