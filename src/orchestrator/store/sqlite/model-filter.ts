/**
 * The SQL that limits a column of model names to `models` — which a grant's `models` caveat names by the model's
 * name, allowing every version of it: `ocr-det` matches the rows of `ocr-det` and of `ocr-det@2`.
 */
export function modelIn(column: string, models: readonly string[]): { sql: string; args: string[] } {
  const marks = models.map(() => '?').join(', ');
  return {
    sql: `(${column} IN (${marks}) OR (instr(${column}, '@') > 0 AND substr(${column}, 1, instr(${column}, '@') - 1) IN (${marks})))`,
    args: [...models, ...models],
  };
}
