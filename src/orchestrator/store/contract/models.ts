import type { ModelManifest } from '../../../protocol/index.js';

/** A model version added at run time (`gpumesh models add`, `POST /v1/models`). */
export interface ModelRecord {
  manifest: ModelManifest;
  /** The batching and replica policy given when it was added (merged over the defaults); null: the defaults. */
  policy: Record<string, unknown> | null;
  createdAt: number;
}

/** Which version a bare model name means: the pinned one, else a traffic split by share, else the newest. */
export interface ModelRoute {
  name: string;
  pinned: string | null;
  split: Record<string, number> | null;
}

/** The models and model_routes tables: versions added at run time, and which version a bare name means. */
export interface ModelTable {
  /** `manifest.name` is the version's own name (`<model>@<version>`); `model` the name clients use. */
  insertModel(model: string, record: ModelRecord): void;
  deleteModel(model: string, version: string): void;
  setModelRoute(route: ModelRoute): void;
  deleteModelRoute(name: string): void;
  /** Every stored model version, oldest first. */
  listModels(): Promise<{ model: string; record: ModelRecord }[]>;
  listModelRoutes(): Promise<ModelRoute[]>;
}

export interface ModelRow { name: string; manifest: string; policy: string | null; created_at: number }
export interface ModelRouteRow { name: string; pinned: string | null; split: string | null }

export const modelFromRow = (row: ModelRow): { model: string; record: ModelRecord } => ({
  model: row.name,
  record: { manifest: JSON.parse(row.manifest) as ModelManifest, policy: row.policy === null ? null : JSON.parse(row.policy) as Record<string, unknown>, createdAt: row.created_at },
});

export const routeFromRow = (row: ModelRouteRow): ModelRoute =>
  ({ name: row.name, pinned: row.pinned, split: row.split === null ? null : JSON.parse(row.split) as Record<string, number> });

/** The values of a version's INSERT (name, version, manifest, policy, created_at). */
export const modelValues = (model: string, record: ModelRecord): unknown[] =>
  [model, record.manifest.version, JSON.stringify(record.manifest), record.policy === null ? null : JSON.stringify(record.policy), record.createdAt];

/** The values of a route's upsert (name, pinned, split). */
export const routeValues = (route: ModelRoute): unknown[] => [route.name, route.pinned, route.split === null ? null : JSON.stringify(route.split)];
