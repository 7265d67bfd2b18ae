import type { Logger } from 'pino';
import type { Clock } from '../../../protocol/clock.js';
import { EngineError, type EngineJob, type OutputFile } from '../../core/engine.js';
import type { JobContext } from '../kit/job-batch.js';
import { pngFromBase64 } from '../kit/png.js';
import { sleep } from '../../../protocol/clock.js';
import { Backoff } from '../../../net/backoff.js';
import type { SdcppClient } from './client.js';
import { sdcppDescriptor, type SdcppSettings } from '../../../protocol/engines/sdcpp.js';
import type { StepLineTracker } from './step-lines.js';
import { imageRequest, type RequestDefaults } from '../kit/image-input.js';
import { checkLimits, nativeBody, sdapiBody, type Capabilities, type JobState } from './wire.js';

/** What one job's run needs from its model. */
export interface JobDeps {
  client: SdcppClient;
  settings: SdcppSettings;
  clock: Clock;
  tracker: StepLineTracker;
  defaults: RequestDefaults;
  capabilities: Capabilities | null;
  model: string;
  log: Logger;
}

function png(encoded: string, deps: JobDeps, what: string): OutputFile {
  try {
    return pngFromBase64(encoded);
  } catch (error) {
    throw deps.client.unexpected(what, (error as Error).message);
  }
}

/**
 * One job through the native async API: submit (waiting out a full queue), poll with backoff until
 * the job ends, decode its image. When the job is cancelled or runs out of time, the server is
 * told to cancel it too.
 */
export async function runNativeJob(job: EngineJob, context: JobContext, deps: JobDeps): Promise<OutputFile[]> {
  const { client, settings, clock, tracker } = deps;
  const request = imageRequest(job.input, deps.defaults, deps.model, sdcppDescriptor);
  checkLimits(request, deps.capabilities, deps.model);
  tracker.register(job.id, request.steps, (step) => context.progress(step));
  let reachedSampler = false;
  try {
    const id = await client.submit(nativeBody(request, settings), context.signal, context.deadlineAt);
    deps.log.debug({ jobId: job.id, serverJob: id }, 'sd.cpp job submitted');
    const cancelOnServer = (): void => {
      void client.cancel(id).then((outcome) => deps.log.info({ jobId: job.id, serverJob: id, ...outcome }, 'asked sd.cpp to cancel'));
    };
    context.signal.addEventListener('abort', cancelOnServer, { once: true });
    try {
      const backoff = new Backoff(settings.poll);
      let seen = '';
      for (;;) {
        await sleep(clock, backoff.next(), context.signal);
        const state = await client.job(id, context.signal);
        reachedSampler ||= state.started != null || state.status === 'generating' || state.status === 'completed';
        // Poll fast again whenever the job moves; back off while it waits.
        const moved = `${state.status}:${state.progress_step ?? ''}`;
        if (moved !== seen) backoff.reset();
        seen = moved;
        if (state.progress_step != null && state.progress_steps) context.progress(state.progress_step, state.progress_steps);
        const outcome = ended(state, deps);
        if (outcome) return outcome;
      }
    } finally {
      context.signal.removeEventListener('abort', cancelOnServer);
    }
  } finally {
    tracker.end(job.id, reachedSampler);
  }
}

/** The job's files when it completed, an error when it failed or was cancelled elsewhere, null while it runs. */
function ended(state: JobState, deps: JobDeps): OutputFile[] | null {
  const what = `GET /sdcpp/v1/jobs/${state.id}`;
  switch (state.status) {
    case 'completed': {
      const images = [...(state.result?.images ?? [])].sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
      if (!images.length) throw deps.client.unexpected(what, 'a completed job without images');
      return [png(images[0]!.b64_json, deps, what)];
    }
    case 'failed':
      throw new EngineError('ENGINE_FAILED', `sd.cpp failed job ${state.id}: ${state.error?.code ?? 'generation_failed'}: ${state.error?.message ?? 'no message'}`, true);
    case 'cancelled':
      throw new EngineError('ENGINE_FAILED', `sd.cpp job ${state.id} was cancelled on the server (${state.error?.message ?? 'not by this agent'})`, true);
    default:
      return null; // queued, generating, or a state newer than this engine
  }
}

/** One job through the A1111-style synchronous API (servers without the native one). */
export async function runSdapiJob(job: EngineJob, context: JobContext, deps: JobDeps): Promise<OutputFile[]> {
  const request = imageRequest(job.input, deps.defaults, deps.model, sdcppDescriptor);
  deps.tracker.register(job.id, request.steps, (step) => context.progress(step));
  let reachedSampler = false;
  try {
    const encoded = await deps.client.txt2img(sdapiBody(request, deps.settings), context.signal, context.deadlineAt);
    reachedSampler = true;
    return [png(encoded, deps, 'POST /sdapi/v1/txt2img')];
  } finally {
    deps.tracker.end(job.id, reachedSampler);
  }
}
