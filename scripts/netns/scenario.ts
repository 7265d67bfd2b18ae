/**
 * The failover scenario over a real network: run by `scripts/netns-mesh.sh` (as root) inside the `nas`
 * namespace, with `laptop`, `west` and `cloud` reachable only over the bridge. It prints each step's result and
 * exits 0 only if every check of every step held.
 *
 * What stands for what:
 *  - image work: the built-in `gen` model (job type `image`), routed `[image, cloud]`: the laptop, else the cloud box;
 *  - video work: `clip` (job type `tensor`, an exec model, scripts/netns/clip.mjs, that holds its batch for
 *    x[0] ms and writes one file per job), routed `[video, cloud]`: the west box, else the cloud box.
 *    (A `video` job type is on its way; until then a slow tensor model is what the video class runs.)
 *  - "the rest": a batch client whose grant allows only the `cloud` class (`gpumesh grant create --classes
 *    cloud`): its image jobs go to the cloud box, and the route log says the others were `class not granted`.
 *
 * Timeouts are shortened through mesh.yaml rows (heartbeats 400 ms, a link silent 2 s is dropped, a host
 * breaker opens on one drop for 2 s, half-open closes after 2 good probes), so the run takes about a minute.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MeshClient } from '../../src/cli/common/client.js';
import type { MeshConfigInput } from '../../src/orchestrator/config/config.js';
import type { AttemptView, JobView, MeshEvent } from '../../src/protocol/api/index.js';
import { JobLedger, MeshEvents, NetnsMesh, sleep, until, type AcceptedJob, type SeenEvent } from './mesh.js';
import { Topology } from './topology.js';

const topology = Topology.fromEnv();
const HEARTBEAT_MS = 400;
const STALE_AFTER_MS = 2000;
const config: MeshConfigInput = {
  routing: { image: ['image', 'cloud'], tensor: ['video', 'cloud'] },
  defaultModels: { image: 'gen', tensor: 'clip' },
  models: {
    gen: { retries: 6 },
    clip: {
      engine: 'exec', types: ['tensor'], memoryMB: 32, params: { inputDim: 2 }, retries: 6,
      batching: { maxBatchSize: 4 },
      // The command is each host's own (its host.yaml, below): the mesh says only how to batch and how long to wait.
      settings: { batch: true, timeoutMs: 30_000 },
    },
  },
  agents: { heartbeatMs: HEARTBEAT_MS, staleAfterMs: STALE_AFTER_MS, reconnectGraceMs: 5000 },
  breakers: { host: { failuresToOpen: 1, openForS: 2, maxOpenForS: 8, successesToClose: 2 } },
  health: { probeIntervalMs: 0 },
  retry: { backoffMs: 100 },
};
/** What the hosts that make clips declare in their own config: the clip command, which only a host may name. */
const CLIP_HOST = { models: { clip: { settings: { command: [process.execPath, join(import.meta.dirname, 'clip.mjs')] } } } };
const AGENTS = [
  { host: 'laptop', classes: ['image'] },
  { host: 'west', classes: ['video'], hostConfig: CLIP_HOST },
  { host: 'cloud', classes: ['cloud'], hostConfig: CLIP_HOST },
];

const mesh = new NetnsMesh(topology, config);
const ledger = new JobLedger(() => mesh.admin, topology.run);

const image = (n: number, size = 64): Record<string, unknown> => ({ type: 'image', input: { prompt: `netns image ${n}`, seed: n, width: size, height: size, steps: 4 } });
const clip = (n: number, workMs = 400): Record<string, unknown> => ({ type: 'tensor', model: 'clip', input: { x: [workMs, n] } });

/** One step's checks: each says what held or did not; the step passes when all held. */
class Step {
  readonly lines: string[] = [];
  ok = true;

  constructor(readonly n: number, readonly title: string) {}

  check(holds: boolean, what: string): boolean {
    this.lines.push(`  ${holds ? 'ok  ' : 'FAIL'} ${what}`);
    if (!holds) this.ok = false;
    return holds;
  }

  /** A condition a wait established (the wait throws, failing the step, when it does not come about). */
  held(what: string): void {
    this.check(true, what);
  }

  fail(why: string): this {
    this.check(false, why);
    return this;
  }

  note(text: string): void {
    this.lines.push(...text.split('\n').map((line) => `       ${line}`));
  }
}

const succeededAttempt = (view: JobView): AttemptView | undefined => view.attempts.find((attempt) => attempt.status === 'succeeded');
const lostOn = (view: JobView, host: string): boolean => view.attempts.some((attempt) => attempt.host === host && attempt.status === 'lost' && attempt.error?.code === 'AGENT_LOST');
/** The first event of `type` about the host itself (a breaker's: the host's own), received at or after `after`. */
const hostEvent = (events: MeshEvents, type: MeshEvent['type'], host: string, after: number): SeenEvent | undefined => events
  .where((event) => event.type === type && 'host' in event && event.host === host && (!('model' in event) || event.model === null))
  .find((seen) => seen.at >= after);
const allSucceeded = (views: Map<string, JobView>): boolean => [...views.values()].every((view) => view.status === 'succeeded');
const statusCounts = (views: Map<string, JobView>): string => {
  const counts = new Map<string, number>();
  for (const view of views.values()) counts.set(view.status, (counts.get(view.status) ?? 0) + 1);
  return [...counts].map(([status, count]) => `${count} ${status}`).join(', ');
};

async function explain(id: string): Promise<string> {
  return (await mesh.cli(['explain', id])).stdout.trimEnd();
}

/** Wait until `host` is running one of the given jobs (so what happens next happens mid-batch). */
async function runningOn(host: string, jobs: () => AcceptedJob[]): Promise<void> {
  await until(`a job running on ${host}`, async () => {
    const recent = jobs().slice(-8);
    const views = await Promise.all(recent.map((job) => mesh.admin.job(job.id)));
    return views.some((view) => view.status === 'running' && view.attempts.at(-1)?.host === host);
  }, 20_000, 20);
}

async function step1(step: Step): Promise<void> {
  const { token } = await mesh.admin.request<{ token: string }>('POST', '/v1/grants', { kind: 'client', classes: ['cloud'], note: 'the batch client: the cloud box only' });
  const batchClient = new MeshClient(mesh.url, token);
  const jobs = await Promise.all([
    ...Array.from({ length: 4 }, (_, n) => ledger.submit('image', image(n))),
    ...Array.from({ length: 4 }, (_, n) => ledger.submit('clip', clip(n, 50))),
    ...Array.from({ length: 3 }, (_, n) => ledger.submit('batch', image(100 + n), batchClient)),
  ]);
  const views = await ledger.settle(jobs);
  step.check(allSucceeded(views), `${jobs.length} jobs accepted: ${statusCounts(views)}`);
  const where = (kind: string, host: string, klass: string, skips: [string, string][]) => {
    const ofKind = jobs.filter((job) => job.kind === kind).map((job) => views.get(job.id)!);
    const right = ofKind.filter((view) => {
      const attempt = succeededAttempt(view);
      return attempt?.host === host && attempt.route?.class === klass
        && skips.every(([skipped, reason]) => attempt.route!.skipped.some((skip) => skip.host === skipped && skip.reason === reason));
    });
    step.check(right.length === ofKind.length, `${kind} jobs ran on ${host} as class ${klass}${skips.length ? `, passing over ${skips.map(([h, r]) => `${h} (${r})`).join(', ')}` : ''}: ${right.length}/${ofKind.length}`);
    return ofKind[0]!;
  };
  const imageJob = where('image', 'laptop', 'image', []);
  const clipJob = where('clip', 'west', 'video', []);
  const batchJob = where('batch', 'cloud', 'cloud', [['laptop', 'class not granted'], ['west', 'class not granted']]);
  for (const view of [imageJob, clipJob, batchJob]) step.note(`$ gpumesh explain ${view.id}\n${await explain(view.id)}`);
}

/** What step 2 leaves running for step 3: the stream of image jobs, and when laptop's link was cut. */
interface Cut {
  stream: { stop(): Promise<AcceptedJob[]> };
  streamed(): AcceptedJob[];
  cutAt: number;
}

async function step2(step: Step, events: MeshEvents): Promise<Cut> {
  // Larger pictures, so the laptop is mid-batch when its link goes.
  const started = Date.now();
  const streamed = (): AcceptedJob[] => [...ledger.accepted.values()].filter((job) => job.kind === 'image' && job.submittedAt >= started);
  const stream = ledger.stream('image', (n) => image(1000 + n, 192), 150);
  await runningOn('laptop', streamed);
  const cutAt = Date.now();
  await topology.cut('laptop');
  try {
    const lost = await until('the orchestrator to drop laptop', () => hostEvent(events, 'host:lost', 'laptop', cutAt), 20_000);
    const opened = await until('laptop\'s breaker to open', () => hostEvent(events, 'breaker:opened', 'laptop', cutAt), 5000);
    step.held(`link cut at 0 ms; laptop dropped after ${lost.at - cutAt} ms (${(lost.event as { reason: string }).reason}; agents.staleAfterMs ${STALE_AFTER_MS}), its breaker opened after ${opened.at - cutAt} ms`);
    await sleep(1500); // the stream goes on while laptop is away
    const duringCut = streamed().filter((job) => job.submittedAt > lost.at + 50);
    const views = await ledger.settle(duringCut);
    const spilled = [...views.values()].filter((view) => {
      const attempt = succeededAttempt(view);
      return attempt?.host === 'cloud' && attempt.route?.class === 'cloud' && attempt.route.skipped.some((skip) => skip.host === 'laptop' && (skip.reason === 'disconnected' || skip.reason === 'breaker open'));
    });
    step.check(duringCut.length > 0 && spilled.length === duringCut.length,
      `image jobs submitted while laptop was away spilled to cloud (fallback class), the route log naming laptop's skip: ${spilled.length}/${duringCut.length}`);
    if (spilled[0]) step.note(`$ gpumesh explain ${spilled[0].id}\n${await explain(spilled[0].id)}`);
    // Every job so far, those laptop held when its link went among them, finishes while it is still away.
    const sofar = await ledger.settle(streamed());
    const lostThere = [...sofar.values()].filter((view) => lostOn(view, 'laptop'));
    step.check(allSucceeded(sofar), `no job lost: the ${sofar.size} image jobs streamed so far: ${statusCounts(sofar)}`);
    step.check(lostThere.length >= 1 && lostThere.every((view) => view.status === 'succeeded' && succeededAttempt(view)!.host !== 'laptop'),
      `jobs laptop held when its link went (attempt lost, AGENT_LOST) finished on another host: ${lostThere.length}`);
  } catch (error) {
    await stream.stop().catch(() => []);
    await topology.restore('laptop');
    throw error;
  }
  return { stream, streamed, cutAt };
}

async function step3(step: Step, events: MeshEvents, { stream, streamed, cutAt }: Cut): Promise<void> {
  await topology.restore('laptop');
  const restoredAt = Date.now();
  await mesh.connected(['laptop'], 30_000);
  const rejoinedAt = Date.now();
  // The agent cannot be told its link is gone (no packet gets through): its own watchdog must have noticed the silence.
  const agentLog = readFileSync(join(mesh.logs, 'agent-laptop.log'), 'utf8');
  step.check(agentLog.includes('the orchestrator stopped answering'), 'laptop\'s agent noticed the silence itself (its link watchdog dropped the dead link and it redialled until the link was back)');
  const halfOpen = await until('laptop\'s breaker to half-open', () => hostEvent(events, 'breaker:half-open', 'laptop', cutAt), 15_000);
  const closed = await until('laptop\'s breaker to close', () => hostEvent(events, 'breaker:closed', 'laptop', restoredAt), 15_000);
  step.held(`link restored at 0 ms; laptop rejoined after ${rejoinedAt - restoredAt} ms; breaker half-open ${halfOpen.at >= restoredAt ? `after ${halfOpen.at - restoredAt} ms` : `${restoredAt - halfOpen.at} ms before the restore (it waited for laptop)`}, closed after ${closed.at - restoredAt} ms`);
  const metrics = new TextDecoder().decode(await mesh.admin.download('/metrics'));
  const probes = Number(/gpumesh_probes_total\{host="laptop",model="gen",outcome="ok"\} (\d+)/.exec(metrics)?.[1] ?? 0);
  step.check(probes >= 1, `probes of laptop succeeded (its half-open trials): gpumesh_probes_total{host="laptop",model="gen",outcome="ok"} ${probes}`);
  const back = await until('an image job to run on laptop again', async () => {
    const after = streamed().filter((job) => job.submittedAt > closed.at);
    if (after.length < 3) return null;
    const views = await ledger.settle(after.slice(0, 3));
    return [...views.values()].find((view) => succeededAttempt(view)?.host === 'laptop') ?? null;
  }, 20_000, 100);
  const attempt = succeededAttempt(back)!;
  step.check(attempt.route?.class === 'image', `traffic returned to laptop: ${back.id} ran there (class ${attempt.route?.class}), ${Date.parse(attempt.dispatchedAt) - closed.at} ms after the breaker closed`);
  await stream.stop();
  const all = await ledger.settle(streamed());
  step.check(allSucceeded(all), `every image job streamed through the cut and the restore finished: ${statusCounts(all)}`);
}

async function step4(step: Step, events: MeshEvents): Promise<void> {
  const started = Date.now();
  const streamed = () => [...ledger.accepted.values()].filter((job) => job.kind === 'clip' && job.submittedAt >= started);
  const stream = ledger.stream('clip', (n) => clip(1000 + n, 500), 150);
  await runningOn('west', streamed);
  const killedAt = Date.now();
  await mesh.agent('west').kill('SIGKILL');
  const lost = await until('the orchestrator to drop west', () => hostEvent(events, 'host:lost', 'west', killedAt), 10_000);
  step.held(`west's agent killed (SIGKILL) mid-batch; dropped after ${lost.at - killedAt} ms (${(lost.event as { reason: string }).reason})`);
  await sleep(1000);
  await mesh.startAgent(AGENTS[1]!);
  await mesh.connected(['west'], 30_000);
  const rejoinedAt = Date.now();
  const closed = await until('west\'s breaker to close', () => hostEvent(events, 'breaker:closed', 'west', killedAt), 20_000);
  const back = await until('a clip job to run on west again', async () => {
    const after = streamed().filter((job) => job.submittedAt > closed.at);
    if (after.length < 3) return null;
    const views = await ledger.settle(after.slice(0, 3));
    return [...views.values()].find((view) => succeededAttempt(view)?.host === 'west') ?? null;
  }, 20_000, 100);
  step.held(`west rejoined ${rejoinedAt - killedAt} ms after the kill; its breaker closed after ${closed.at - killedAt} ms; ${back.id} ran there again`);
  await stream.stop();
  const all = await ledger.settle(streamed());
  const lostThere = [...all.values()].filter((view) => lostOn(view, 'west'));
  step.check(allSucceeded(all), `every clip job streamed through the kill finished: ${statusCounts(all)}`);
  const elsewhere = lostThere.filter((view) => succeededAttempt(view)?.host === 'cloud').length;
  step.check(lostThere.length >= 1 && lostThere.every((view) => view.status === 'succeeded'),
    `jobs west held when it died (AGENT_LOST) finished: ${lostThere.length} (${elsewhere} on cloud, ${lostThere.length - elsewhere} on west after it rejoined)`);
}

async function step5(step: Step): Promise<void> {
  const started = Date.now();
  const images = ledger.stream('image', (n) => image(5000 + n, 128), 200);
  const clips = ledger.stream('clip', (n) => clip(5000 + n, 300), 250);
  const streamed = () => [...ledger.accepted.values()].filter((job) => job.submittedAt >= started);
  await sleep(1000);
  const inFlight = await until('jobs in flight on the hosts', async () => {
    const count = (await mesh.hosts()).reduce((sum, host) => sum + host.jobsInFlight, 0);
    return count >= 2 ? count : null;
  }, 20_000, 20);
  const killedAt = Date.now();
  await mesh.killOrchestrator('SIGKILL');
  step.held(`orchestrator killed (SIGKILL) with ${inFlight} jobs in flight and two streams of submits going`);
  await sleep(1000);
  await mesh.startOrchestrator();
  const upAt = Date.now();
  await mesh.connected(AGENTS.map((agent) => agent.host), 30_000);
  const reconnectedAt = Date.now();
  step.held(`restarted after ${upAt - killedAt} ms; laptop, west and cloud reconnected by themselves ${reconnectedAt - upAt} ms after it was up`);
  await sleep(1500);
  await Promise.all([images.stop(), clips.stop()]);
  const during = streamed();
  const spanning = during.filter((job) => job.submittedAt < killedAt);
  step.note(`${during.length} jobs accepted during this step (${spanning.length} before the kill); submits refused by the dead orchestrator were retried with their idempotency key (${ledger.deduplicated} answered with the job their first try had made)`);

  // Exactly once, over every job of the whole run.
  const all = await ledger.settle(ledger.accepted.values(), 90_000);
  step.check(allSucceeded(all) && all.size === ledger.accepted.size, `every job accepted in the whole run completed: ${all.size} jobs, ${statusCounts(all)}`);
  const twice = [...all.values()].filter((view) => view.attempts.filter((attempt) => attempt.status === 'succeeded').length !== 1 || view.artifacts.length !== 1);
  step.check(twice.length === 0, `each has exactly one succeeded attempt and one artifact${twice.length ? `; not: ${twice.slice(0, 5).map((view) => view.id).join(', ')}` : ''}`);
  const artifacts = await allArtifacts();
  const perJob = new Map<string, number>();
  for (const artifact of artifacts) perJob.set(artifact.jobId, (perJob.get(artifact.jobId) ?? 0) + 1);
  const duplicated = [...perJob].filter(([, count]) => count > 1);
  const strangers = [...perJob.keys()].filter((id) => !ledger.accepted.has(id));
  step.check(duplicated.length === 0 && strangers.length === 0 && artifacts.length === ledger.accepted.size,
    `the gallery holds ${artifacts.length} artifacts for ${ledger.accepted.size} jobs: ${duplicated.length} jobs with more than one, ${strangers.length} for jobs nobody accepted`);
  const reclaimed = [...all.values()].filter((view) => view.attempts.some((attempt) => Date.parse(attempt.dispatchedAt) < killedAt && (attempt.finishedAt === null || Date.parse(attempt.finishedAt) > killedAt)));
  const claimed = reclaimed.filter((view) => view.attempts.length === 1).length;
  step.check(reclaimed.length >= 1 && reclaimed.every((view) => view.status === 'succeeded'),
    `jobs out on a host when the orchestrator died completed: ${reclaimed.length} (${claimed} claimed by their agent's hello on reconnect, ${reclaimed.length - claimed} retried)`);
}

async function allArtifacts(): Promise<{ jobId: string }[]> {
  const out: { jobId: string }[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 1000; page++) {
    const answer: { artifacts: { jobId: string }[]; nextCursor: string | null } = await mesh.admin.request('GET', `/v1/artifacts?limit=200${cursor ? `&cursor=${cursor}` : ''}`);
    out.push(...answer.artifacts);
    if (!answer.nextCursor) break;
    cursor = answer.nextCursor;
  }
  return out;
}

async function main(): Promise<number> {
  const began = Date.now();
  const steps = [
    new Step(1, 'routes image jobs to laptop, video-class jobs to west, the rest to cloud'),
    new Step(2, 'cuts laptop\'s link mid-stream: no job lost, its breaker opens, image jobs spill to cloud'),
    new Step(3, 'restores the link: the breaker half-opens, probes succeed, traffic returns to laptop'),
    new Step(4, 'kills west\'s agent mid-batch: its jobs finish elsewhere or after it rejoins'),
    new Step(5, 'kills the orchestrator mid-stream and restarts it: agents reconnect, every job completes exactly once'),
  ];
  const print = (step: Step): void => {
    process.stdout.write(`step ${step.n}: ${step.title}: ${step.ok ? 'PASS' : 'FAIL'}\n${step.lines.join('\n')}\n`);
  };
  /** Run a step; one that throws (a wait that timed out) fails with why. Its result, or null when it threw. */
  const attempt = async <T>(step: Step, body: () => Promise<T>): Promise<T | null> => {
    let result: T | null = null;
    try {
      result = await body();
    } catch (error) {
      step.fail(`stopped: ${(error as Error).message}`);
    }
    print(step);
    return result;
  };
  let events: MeshEvents | null = null;
  try {
    await mesh.startOrchestrator();
    events = new MeshEvents(mesh.url, mesh.adminGrant);
    const watching = events;
    for (const agent of AGENTS) await mesh.startAgent(agent);
    await mesh.connected(AGENTS.map((agent) => agent.host));
    process.stdout.write(`mesh up in ${Date.now() - began} ms: orchestrator on nas at ${mesh.url}; agents on laptop, west, cloud (logs in ${mesh.logs})\n`);
    await attempt(steps[0]!, () => step1(steps[0]!));
    const cut = await attempt(steps[1]!, () => step2(steps[1]!, watching));
    if (cut) await attempt(steps[2]!, () => step3(steps[2]!, watching, cut));
    else print(steps[2]!.fail('not reached: step 2 did not finish'));
    await attempt(steps[3]!, () => step4(steps[3]!, watching));
    await attempt(steps[4]!, () => step5(steps[4]!));
  } catch (error) {
    process.stdout.write(`the mesh did not come up: ${(error as Error).message}\n`);
    return 1;
  } finally {
    events?.close();
    await mesh.stop();
  }
  const failed = steps.filter((step) => !step.ok);
  process.stdout.write(`\n${failed.length === 0 ? 'all 5 steps held' : `${failed.length} of 5 steps failed: ${failed.map((step) => step.n).join(', ')}`} (${((Date.now() - began) / 1000).toFixed(1)} s)\n`);
  return failed.length === 0 ? 0 : 1;
}

process.exitCode = await main();
