import { modelFromRow, modelValues, routeFromRow, routeValues, type ModelRecord, type ModelRoute, type ModelRouteRow, type ModelRow, type ModelTable } from '../contract/models.js';
import { stmt, type Db } from './db.js';

/** `manifest.name` is the version's own name (`<model>@<version>`); `model` the name clients use. */
export function insertModel(db: Db, model: string, record: ModelRecord): void {
  stmt(db, 'INSERT INTO models (name, version, manifest, policy, created_at) VALUES (?, ?, ?, ?, ?)').run(...modelValues(model, record));
}

export function deleteModel(db: Db, model: string, version: string): void {
  stmt(db, 'DELETE FROM models WHERE name = ? AND version = ?').run(model, version);
}

/** Every stored model version, oldest first. */
export function listModels(db: Db): { model: string; record: ModelRecord }[] {
  return (stmt(db, 'SELECT name, manifest, policy, created_at FROM models ORDER BY created_at, name, version').all() as ModelRow[]).map(modelFromRow);
}

export function setModelRoute(db: Db, route: ModelRoute): void {
  stmt(db, 'INSERT INTO model_routes (name, pinned, split) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET pinned = excluded.pinned, split = excluded.split')
    .run(...routeValues(route));
}

export function deleteModelRoute(db: Db, name: string): void {
  stmt(db, 'DELETE FROM model_routes WHERE name = ?').run(name);
}

export function listModelRoutes(db: Db): ModelRoute[] {
  return (stmt(db, 'SELECT name, pinned, split FROM model_routes').all() as ModelRouteRow[]).map(routeFromRow);
}

/** The models and model_routes tables on one connection. */
export function modelTable(db: Db): ModelTable {
  return {
    insertModel: (model, record) => insertModel(db, model, record),
    deleteModel: (model, version) => deleteModel(db, model, version),
    setModelRoute: (route) => setModelRoute(db, route),
    deleteModelRoute: (name) => deleteModelRoute(db, name),
    listModels: async () => listModels(db),
    listModelRoutes: async () => listModelRoutes(db),
  };
}
