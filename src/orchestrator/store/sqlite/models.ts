import type { ModelManifest } from '../../protocol/index.js';
import { stmt, type Db } from './db.js';

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

/** `manifest.name` is the version's own name (`<model>@<version>`); `model` the name clients use. */
export function insertModel(db: Db, model: string, record: ModelRecord): void {
  stmt(db, 'INSERT INTO models (name, version, manifest, policy, created_at) VALUES (?, ?, ?, ?, ?)').run(
    model, record.manifest.version, JSON.stringify(record.manifest), record.policy === null ? null : JSON.stringify(record.policy), record.createdAt,
  );
}

export function deleteModel(db: Db, model: string, version: string): void {
  stmt(db, 'DELETE FROM models WHERE name = ? AND version = ?').run(model, version);
}

/** Every stored model version, oldest first. */
export function listModels(db: Db): { model: string; record: ModelRecord }[] {
  return (stmt(db, 'SELECT name, manifest, policy, created_at FROM models ORDER BY created_at, name, version').all() as
    { name: string; manifest: string; policy: string | null; created_at: number }[])
    .map((row) => ({
      model: row.name,
      record: { manifest: JSON.parse(row.manifest) as ModelManifest, policy: row.policy === null ? null : JSON.parse(row.policy) as Record<string, unknown>, createdAt: row.created_at },
    }));
}

export function setModelRoute(db: Db, route: ModelRoute): void {
  stmt(db, 'INSERT INTO model_routes (name, pinned, split) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET pinned = excluded.pinned, split = excluded.split').run(
    route.name, route.pinned, route.split === null ? null : JSON.stringify(route.split),
  );
}

export function deleteModelRoute(db: Db, name: string): void {
  stmt(db, 'DELETE FROM model_routes WHERE name = ?').run(name);
}

export function listModelRoutes(db: Db): ModelRoute[] {
  return (stmt(db, 'SELECT name, pinned, split FROM model_routes').all() as { name: string; pinned: string | null; split: string | null }[])
    .map((row) => ({ name: row.name, pinned: row.pinned, split: row.split === null ? null : JSON.parse(row.split) as Record<string, number> }));
}
