import http from 'node:http';
import fc from 'fast-check';
import { JOB_STATUSES } from '../../src/protocol/index.js';
import { anyPathInputs, routeInputs, routesFromOpenApi, runHttp, type GrantChoice, type HttpInput, type HttpTarget, type Outcome, type RouteSpec } from './http.js';
import { KnownIds, MARKERS } from './known.js';
import { linkInputs, runLink, type LinkInput, type LinkTarget } from './link.js';
import { rawInputs, runRaw, type RawInput } from './raw.js';
import type { Vocabulary } from './schema-arbitrary.js';
import { Tally } from './tally.js';
import { linkFrameLimit, resolveConfig } from '../../src/orchestrator/config/config.js';

/** One fuzz target: a table row, its generator, and how to run one input. */
export interface FuzzTarget<T = unknown> {
  label: string;
  inputs: fc.Arbitrary<T>;
  run(input: T): Promise<Outcome>;
}

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
  /** The orchestrator's default frame limit (`gpumesh up` with no mesh.yaml): the default inline output as base64, and 1 MiB. */
  readonly maxFrameBytes = linkFrameLimit(resolveConfig({}, '/tmp').agents);
  readonly #minted: string[] = [];

  private constructor(
    readonly url: string,
    readonly routes: RouteSpec[],
    readonly vocabulary: Vocabulary,
    private readonly grants: { admin: string; client: string; agent: string },
  ) {}

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
    const { models } = await call<{ models: { name: string; jobTypes: string[] }[] }>('GET', '/v1/models');
    const host = 'fuzz-agent';
    const client = await call<{ token: string }>('POST', '/v1/grants', { kind: 'client', types: ['tensor'], note: 'fuzz: narrow client' });
    const agent = await call<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, note: 'fuzz: agent' });
    const jobTypes = [...new Set(models.flatMap((model) => model.jobTypes))];
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

  /** One target per route in the OpenAPI document, plus paths no route declares, raw HTTP and the agent link. */
  targets(): FuzzTarget[] {
    const targets: FuzzTarget[] = this.routes.map((route): FuzzTarget<HttpInput> => ({
      label: route.label, inputs: routeInputs(route, this.vocabulary), run: (input) => runHttp(this, input),
    }));
    targets.push({ label: 'any path', inputs: anyPathInputs(this.vocabulary), run: (input) => runHttp(this, input as HttpInput) } satisfies FuzzTarget<HttpInput> as FuzzTarget);
    targets.push({ label: 'raw HTTP', inputs: rawInputs(this.routes), run: (input) => runRaw(this.url, input as RawInput) } satisfies FuzzTarget<RawInput> as FuzzTarget);
    targets.push({ label: 'agent link', inputs: linkInputs(this.vocabulary, this.agentHost), run: (input) => runLink(this, input as LinkInput) } satisfies FuzzTarget<LinkInput> as FuzzTarget);
    return targets as FuzzTarget[];
  }

  /** Run one input and tally it. */
  async run(target: FuzzTarget, input: unknown): Promise<Outcome> {
    const started = performance.now();
    const outcome = await target.run(input);
    this.tally.record(outcome.label, outcome.seen, outcome.problems, () => outcome.sent, performance.now() - started);
    return outcome;
  }

  /** The orchestrator still answers `/healthz` on a fresh connection. */
  async healthProblems(): Promise<string[]> {
    try {
      const response = await fetch(`${this.url}/healthz`, { signal: AbortSignal.timeout(10_000) });
      const body = (await response.json()) as { ok?: boolean };
      return response.status === 200 && body.ok === true ? [] : [`/healthz answered ${response.status} ${JSON.stringify(body)}`];
    } catch (error) {
      return [`/healthz did not answer: ${(error as Error).message}`];
    }
  }

  close(): void {
    this.agent.destroy();
  }
}
