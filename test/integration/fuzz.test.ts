import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FUZZ_MESH_CONFIG, FuzzSession, type FuzzTarget } from '../fuzz/session.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * Property-based tests (fast-check) against a real `gpumesh up --no-agent` process:
 * generated requests for every route the server's OpenAPI document lists (so a new
 * route is fuzzed without editing this file), raw HTTP bytes, and agent link frames
 * over a real WebSocket with an agent grant. Properties: no 5xx (but /readyz's
 * documented 503), every error in the envelope with a registered code of its status,
 * the grant checked before anything else, the link closing with its documented code
 * on a frame it refuses, and the orchestrator up and healthy afterwards.
 *
 * A small sample here; `npm run bench:fuzz` runs the same generators for 10,000+
 * inputs. Replay a failure with FUZZ_SEED=<seed printed by fast-check>.
 */
const running = meshForFile({ args: ['--no-agent'], config: FUZZ_MESH_CONFIG });
let session: FuzzSession;

beforeAll(async () => {
  session = await FuzzSession.open(running().url, running().admin);
});
afterAll(() => session?.close());

const RUNS_PER_TARGET = 15;
const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;

async function fuzz(targets: FuzzTarget[]): Promise<void> {
  for (const target of targets) {
    await fc.assert(fc.asyncProperty(target.inputs, async (input) => {
      const outcome = await session.run(target, input);
      if (outcome.problems.length > 0) throw new Error(`${outcome.label}: ${outcome.problems.join('; ')}\n  sent: ${outcome.sent}`);
    }), { numRuns: RUNS_PER_TARGET, seed, endOnFailure: true, examples: (target.examples ?? []).map((example) => [example]) });
  }
  expect(await session.healthProblems()).toEqual([]);
  expect(running().process.exitCode).toBeNull();
}

describe('fuzzing', () => {
  it('reads every route from the OpenAPI document', () => {
    expect(session.routes.map((route) => route.label)).toEqual(expect.arrayContaining([
      'POST /v1/jobs', 'GET /v1/jobs/{id}', 'DELETE /v1/jobs/{id}', 'PUT /v1/jobs/{id}/outputs/{digest}', 'POST /v1/grants', 'GET /v1/agents/link',
      // The ComfyUI door, whose answers the oracle holds to ComfyUI's error shape.
      'POST /prompt', 'GET /history/{prompt_id}', 'GET /view', 'POST /upload/image', 'GET /ws',
    ]));
  });

  it('every route answers generated requests in the envelope, grant first, never a 5xx', async () => {
    await fuzz(session.targets().filter((target) => target.label.includes(' /') || target.label === 'any path'));
    const routes = session.tally.rows().filter((row) => row.label.includes(' /'));
    expect(routes.length).toBeGreaterThanOrEqual(session.routes.length);
  });

  it('an agent\'s outputs are published exactly when they are what they claim and an image job may make them, and served so they cannot script the origin', async () => {
    await fuzz(session.targets().filter((target) => target.label === 'agent outputs'));
    expect(session.outputsChecked.size).toBeGreaterThan(0);
  });

  it('the surfaces that read their own bodies — multipart edits, binary OIP, resumable uploads, models add — answer inputs shaped like theirs in their shape, never a 5xx', async () => {
    await fuzz(session.targets().filter((target) => target.label.startsWith('surface: ')));
    expect(session.tally.rows().map((row) => row.label)).toEqual(expect.arrayContaining([
      'surface: multipart edits', 'surface: binary OIP', 'surface: resumable uploads', 'surface: models add',
    ]));
  });

  it('raw HTTP bytes are answered in the envelope or closed, never a 5xx', async () => {
    await fuzz(session.targets().filter((target) => target.label === 'raw HTTP'));
  });

  it('the agent link closes on a frame it refuses with the documented code, and stays up otherwise', async () => {
    await fuzz(session.targets().filter((target) => target.label === 'agent link'));
    // The sample reached both sides of the hello.
    expect(session.tally.rows().map((row) => row.label)).toEqual(expect.arrayContaining(['link: after hello']));
  });
});
