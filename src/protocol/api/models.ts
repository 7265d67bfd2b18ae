import { z } from 'zod';
import { Device } from '../link.js';
import { ModelManifest } from '../models.js';

/**
 * One version of a model as the models API shows it: its manifest, with the model and its version as separate fields
 * (`name: "ocr-det", version: "2"`, where jobs name it `ocr-det@2`) and its job types as `types` (as `POST
 * /v1/models` and mesh.yaml take them; the agent link's manifest calls them `jobTypes`), and the policy in effect.
 */
export const ModelVersion = ModelManifest.omit({ name: true, jobTypes: true }).extend({
  name: z.string().describe('the model, as jobs and grants name it (a job runs this version as <name>@<version>)'),
  types: z.array(z.string()).describe('the job types it serves'),
  policy: z.record(z.string(), z.unknown()).describe('batching, queue, replicas and timeouts in effect'),
});
export type ModelVersion = z.infer<typeof ModelVersion>;

/** `GET /v1/models`. */
export const Models = z.strictObject({
  models: z.array(ModelVersion),
  families: z.array(z.strictObject({
    name: z.string(), versions: z.array(z.string()), pinned: z.string().nullable(), split: z.record(z.string(), z.number()).nullable(), route: z.string(),
  })).describe('the models with versions, and which version a bare name runs'),
});
export type Models = z.infer<typeof Models>;

/** One model with versions, as `gpumesh models show` and `GET /v1/models/:name` show it. */
export const ModelFamily = z.strictObject({
  name: z.string(),
  /** The route in effect (mesh.yaml's pin, else the API's route). */
  pinned: z.string().nullable(),
  split: z.record(z.string(), z.number()).nullable(),
  /** Where the pin comes from: `mesh.yaml` (the API may not change it), `api`, or null (no pin). */
  pinnedIn: z.enum(['mesh.yaml', 'api']).nullable(),
  route: z.string().describe('which version a job naming only the model runs now, in words'),
  versions: z.array(ModelVersion),
});
export type ModelFamily = z.infer<typeof ModelFamily>;

/** A replica's change on one host, and its device's memory before and after it. */
export const ReplicaChange = z.strictObject({
  host: z.string(), model: z.string(), change: z.enum(['loaded', 'unloaded']), device: z.string().nullable(), memoryMB: z.number().nullable(),
  before: z.array(Device).describe('the host\'s devices before'), after: z.array(Device).describe('and after'),
});
export type ReplicaChange = z.infer<typeof ReplicaChange>;

/** What a load asked for did (`POST /v1/models/:name/load`): each host's change, and how far it fell short of what was wanted. */
export const LoadAnswer = z.strictObject({
  model: z.string(),
  /** max(1, minReplicas), or the count asked, capped by maxReplicas. */
  wanted: z.int().describe('how many hosts should hold it'),
  /** The hosts that hold it now, each with its devices' memory before and after (one that held it already included). */
  loaded: z.array(ReplicaChange),
  /** `2 of 3 replicas: only 2 hosts can serve it`, or why the count asked was cut; null when it went as asked. */
  note: z.string().nullable().describe('why fewer than wanted, or why the count asked was cut'),
});
export type LoadAnswer = z.infer<typeof LoadAnswer>;

/** `POST /v1/models/:name/unload`. */
export const UnloadAnswer = z.strictObject({ unloaded: z.array(ReplicaChange) });
export type UnloadAnswer = z.infer<typeof UnloadAnswer>;
