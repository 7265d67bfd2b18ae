import { modelFromRow, modelValues, routeFromRow, routeValues, type ModelRouteRow, type ModelRow, type ModelTable } from '../contract/models.js';
import type { PgAccess } from './access.js';

/** The models and model_routes tables in PostgreSQL. */
export function modelTable({ write, read }: PgAccess): ModelTable {
  return {
    insertModel: (model, record) => write('INSERT INTO models (name, version, manifest, policy, created_at) VALUES ($1, $2, $3, $4, $5)', modelValues(model, record)),
    deleteModel: (model, version) => write('DELETE FROM models WHERE name = $1 AND version = $2', [model, version]),
    setModelRoute: (route) => write(
      'INSERT INTO model_routes (name, pinned, split) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET pinned = excluded.pinned, split = excluded.split',
      routeValues(route),
    ),
    deleteModelRoute: (name) => write('DELETE FROM model_routes WHERE name = $1', [name]),
    listModels: async () => (await read<ModelRow>('SELECT name, manifest, policy, created_at FROM models ORDER BY created_at, name, version')).map(modelFromRow),
    listModelRoutes: async () => (await read<ModelRouteRow>('SELECT name, pinned, split FROM model_routes')).map(routeFromRow),
  };
}
