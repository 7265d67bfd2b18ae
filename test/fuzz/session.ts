import http from 'node:http';
import fc from 'fast-check';
import { JOB_STATUSES } from '../../src/protocol/index.js';
import { anyPathInputs, routeInputs, routesFromOpenApi, runHttp, type GrantChoice, type HttpInput, type HttpTarget, type Outcome, type RouteSpec } from './http.js';
import { KnownIds, MARKERS } from './known.js';
import { linkInputs, runLink, type LinkInput, type LinkTarget } from './link.js';
import { OUTPUT_EXAMPLES, OutputsAgent, outputInputs, type OutputInput } from './outputs.js';
import { rawInputs, runRaw, type RawInput } from './raw.js';
import { editInputs, inferInputs, modelAddInputs, runEdit, runInfer, runModelAdd, runUpload, uploadInputs, type EditInput, type InferInput, type ModelAddInput, type UploadInput } from './surfaces.js';
import type { Vocabulary } from './schema-arbitrary.js';
import { Tally } from './tally.js';
import { linkFrameLimit, resolveConfig } from '../../src/orchestrator/config/config.js';
import { OUTPUT_MEDIA_TYPES } from '../../src/orchestrator/blobs/output-media.js';

/** One fuzz target: a table row, its generator, and how to run one input. */
export interface FuzzTarget<T = unknown> {
  label: string;
  inputs: fc.Arbitrary<T>;
  /** Inputs always tried first, before the generated ones (so a property that needs one kind of input meets it). */
  examples?: T[];
  run(input: T): Promise<Outcome>;
}

/**
 * The mesh a fuzz run starts (`gpumesh up --no-agent` with this mesh.yaml): the breakers never open and `gen` is not
 * retried, so the outputs agent's refused results (on purpose) end their job at once and do not keep later jobs from it.
 */
export const FUZZ_MESH_CONFIG = {
  breakers: { replica: { failuresToOpen: 1000, failureRatio: 0.99, minCalls: 1000, window: 1000 }, host: { failuresToOpen: 1000, failureRatio: 0.99, minCalls: 1000, window: 1000 } },
  models: { gen: { retries: 0 } },
};

/** Job inputs of the shapes the two pipelines read, mostly values they accept (so jobs get queued and dispatched), the edges now and then. */
const JOB_INPUTS: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  // Image inputs most: `type` is drawn from the job types, and most of them are images.
  { weight: 3, arbitrary: fc.record({
    prompt: fc.oneof({ weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 30 }) }, { weight: 1, arbitrary: fc.constantFrom('', 'p'.repeat(2001), 7) }),
    seed: fc.oneof(fc.nat(), fc.constantFrom(-1, 0.5, 2 ** 53)),
    width: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 8, max: 64 }) }, { weight: 1, arbitrary: fc.constantFrom(7, 1024, 1025, -8, 8.5) }),
    height: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 8, max: 64 }) }, { weight: 1, arbitrary: fc.constantFrom(7, 1024, 1025, -8, 8.5) }),
    steps: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 1, max: 3 }) }, { weight: 1, arbitrary: fc.constantFrom(0, 32, 33, -1, 1.5) }),
  }, { requiredKeys: ['prompt'] }) },
  { weight: 1, arbitrary: fc.record({
    x: fc.oneof(
      { weight: 3, arbitrary: fc.array(fc.double({ min: -10, max: 10, noNaN: true }), { minLength: 64, maxLength: 64 }) },
      { weight: 1, arbitrary: fc.array(fc.double({ noNaN: true, noDefaultInfinity: true }), { minLength: 62, maxLength: 66 }) },
      { weight: 1, arbitrary: fc.array(fc.jsonValue(), { maxLength: 3 }) },
    ),
  }) },
  { weight: 1, arbitrary: fc.constant({}) },
);

/**
 * What a fuzz run shares across its inputs: the routes the server publishes, grants
 * of each kind, the ids it has handed out so far, and the tally. Both entry points
 * (the test and `bench/fuzz.ts`) run their inputs through one of these.
 */
export class FuzzSession implements HttpTarget, LinkTarget {
  readonly known = new KnownIds();
  readonly tally = new Tally();
  readonly agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  readonly agentHost = 'fuzz-agent';
  /** Published outputs whose serving the health checks looked at. */
  readonly outputsChecked = new Set<string>();
  /** The orchestrator's default frame limit (`gpumesh up` with no mesh.yaml): the default inline output as base64, and 1 MiB. */
  readonly maxFrameBytes = linkFrameLimit(resolveConfig({}, '/tmp').agents);
  readonly #minted: string[] = [];
  readonly #outputs: OutputsAgent;

  private constructor(
    readonly url: string,
    readonly routes: RouteSpec[],
    readonly vocabulary: Vocabulary,
    private readonly grants: { admin: string; client: string; agent: string },
  ) {
    this.#outputs = new OutputsAgent(url, grants.admin, async () => {
      const response = await fetch(`${url}/v1/grants`, {
        method: 'POST', headers: { authorization: `Bearer ${grants.admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'agent', host: 'fuzz-outputs', classes: ['image'], note: 'fuzz: outputs agent' }),
      });
      return ((await response.json()) as { token: string }).token;
    });
  }

  get agentGrant(): string {
    return this.grants.agent;
  }

  /** Read the routes from the server's OpenAPI document and mint the grants the inputs use. */
  static async open(url: string, admin: string): Promise<FuzzSession> {
    const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
      const response = await fetch(`${url}${path}`, {
        method, body: body === undefined ? undefined : JSON.stringify(body),
        headers: { authorization: `Bearer ${admin}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      });
      if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
      return (await response.json()) as T;
    };
    const routes = routesFromOpenApi(await call('GET', '/openapi.json'));
    const { models } = await call<{ models: { name: string; types: string[] }[] }>('GET', '/v1/models');
    const host = 'fuzz-agent';
    const client = await call<{ token: string }>('POST', '/v1/grants', { kind: 'client', types: ['tensor'], note: 'fuzz: narrow client' });
    const agent = await call<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, note: 'fuzz: agent' });
    const jobTypes = [...new Set(models.flatMap((model) => model.types))];
    const marked = (kind: string): string[] => MARKERS.filter((marker) => marker.startsWith(`@@${kind}:`));
    const vocabulary: Vocabulary = {
      words: [...new Set([...models.map((model) => model.name), ...jobTypes, ...JOB_STATUSES, 'queued,running', 'onnx', 'cpu', 'gpu', host, 'default', '10m', '1/s', ...MARKERS])],
      // The names the API and the link protocol give these fields, with the values that get past validation.
      fieldWords: {
        type: jobTypes, model: models.map((model) => model.name), status: [...JOB_STATUSES, 'queued,running'], host: [host], album: ['default'],
        classes: jobTypes, engines: ['onnx'], expires: ['10m', '1h', '90s', '2d'], rate: ['5/s', '100/m'],
        id: marked('job'), jobId: marked('job'), jobIds: marked('job'), batchId: marked('batch'), digest: marked('digest'), cursor: [],
      },
      freeForm: JOB_INPUTS,
    };
    return new FuzzSession(url, routes, vocabulary, { admin, client: client.token, agent: agent.token });
  }

  grant(choice: GrantChoice, pick: number): string | null {
    switch (choice) {
      case 'none': return null;
      case 'garbage': return 'eyJub3QiOiJhIGdyYW50In0';
      case 'malformed': return 'not-a-grant';
      case 'minted': return this.#minted.length > 0 ? this.#minted[pick % this.#minted.length]! : this.grants.client;
      default: return this.grants[choice];
    }
  }

  learnGrant(token: string): void {
    if (this.#minted.length < 100 && !this.#minted.includes(token)) this.#minted.push(token);
  }

  /**
   * One target per route in the OpenAPI document, plus paths no route declares, raw HTTP, the agent link, agents'
   * outputs, and the surfaces that read their own bodies (multipart edits, binary OIP, resumable uploads, models add).
   */
  targets(): FuzzTarget[] {
    const targets: FuzzTarget[] = this.routes.map((route): FuzzTarget<HttpInput> => ({
      label: route.label, inputs: routeInputs(route, this.vocabulary), run: (input) => runHttp(this, input),
    }));
    targets.push({ label: 'any path', inputs: anyPathInputs(this.vocabulary), run: (input) => runHttp(this, input as HttpInput) } satisfies FuzzTarget<HttpInput> as FuzzTarget);
    targets.push({ label: 'raw HTTP', inputs: rawInputs(this.routes), run: (input) => runRaw(this.url, input as RawInput) } satisfies FuzzTarget<RawInput> as FuzzTarget);
    targets.push({ label: 'agent link', inputs: linkInputs(this.vocabulary, this.agentHost), run: (input) => runLink(this, input as LinkInput) } satisfies FuzzTarget<LinkInput> as FuzzTarget);
    targets.push({ label: 'agent outputs', inputs: outputInputs(), examples: OUTPUT_EXAMPLES, run: (input) => this.#outputs.run(input as OutputInput) } satisfies FuzzTarget<OutputInput> as FuzzTarget);
    // The surfaces that read their own bodies, with inputs shaped like what they take (surfaces.ts).
    targets.push({ label: 'surface: multipart edits', inputs: editInputs, run: (input) => runEdit(this, input as EditInput) } satisfies FuzzTarget<EditInput> as FuzzTarget);
    targets.push({ label: 'surface: binary OIP', inputs: inferInputs, run: (input) => runInfer(this, input as InferInput) } satisfies FuzzTarget<InferInput> as FuzzTarget);
    targets.push({ label: 'surface: resumable uploads', inputs: uploadInputs, run: (input) => runUpload(this, input as UploadInput) } satisfies FuzzTarget<UploadInput> as FuzzTarget);
    targets.push({ label: 'surface: models add', inputs: modelAddInputs, run: (input) => runModelAdd(this, input as ModelAddInput) } satisfies FuzzTarget<ModelAddInput> as FuzzTarget);
    return targets as FuzzTarget[];
  }

  /** Run one input and tally it. */
  async run(target: FuzzTarget, input: unknown): Promise<Outcome> {
    const started = performance.now();
    const outcome = await target.run(input);
    this.tally.record(outcome.label, outcome.seen, outcome.problems, () => outcome.sent, performance.now() - started);
    return outcome;
  }

  /**
   * The orchestrator still answers `/healthz` on a fresh connection, and every published output is served so it
   * cannot script the origin: a type an output may have (never HTML, SVG, a script), `nosniff`, a sandboxing CSP, and
   * a download for anything that is not an image or a video — whatever media types the fuzzed agent declared.
   */
  async healthProblems(): Promise<string[]> {
    try {
      const response = await fetch(`${this.url}/healthz`, { signal: AbortSignal.timeout(10_000) });
      const body = (await response.json()) as { ok?: boolean };
      if (response.status !== 200 || body.ok !== true) return [`/healthz answered ${response.status} ${JSON.stringify(body)}`];
      return await this.#servedSafely();
    } catch (error) {
      return [`/healthz did not answer: ${(error as Error).message}`];
    }
  }

  async #servedSafely(): Promise<string[]> {
    const headers = { authorization: `Bearer ${this.grants.admin}` };
    const listed = (await (await fetch(`${this.url}/v1/artifacts?limit=50`, { headers })).json()) as { artifacts: { digest: string; mediaType: string }[] };
    const problems: string[] = [];
    const allowed = new Set<string>(Object.values(OUTPUT_MEDIA_TYPES).flat());
    for (const artifact of listed.artifacts) {
      this.outputsChecked.add(artifact.digest);
      const blob = await fetch(`${this.url}/v1/blobs/${artifact.digest}`, { method: 'HEAD', headers });
      const type = (blob.headers.get('content-type') ?? '').split(';')[0]!;
      const where = `${artifact.digest.slice(0, 19)}… (declared ${artifact.mediaType})`;
      if (!allowed.has(type)) problems.push(`${where} is served as ${type}`);
      if (blob.headers.get('x-content-type-options') !== 'nosniff') problems.push(`${where} is served without nosniff`);
      if (!/sandbox/.test(blob.headers.get('content-security-policy') ?? '')) problems.push(`${where} is served without a sandboxing CSP`);
      const inline = type.startsWith('image/') || type.startsWith('video/');
      if (!inline && !(blob.headers.get('content-disposition') ?? '').startsWith('attachment')) problems.push(`${where} (${type}) is not served as a download`);
    }
    return problems;
  }

  close(): void {
    this.#outputs.close();
    this.agent.destroy();
  }
}
