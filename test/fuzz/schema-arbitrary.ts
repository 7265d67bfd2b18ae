import fc from 'fast-check';

/** The part of JSON Schema (and OpenAPI 3.0's dialect) that the mesh's zod schemas produce. */
export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  /** The items' schema; false (after `prefixItems`, a tuple's): no more items. */
  items?: JsonSchema | boolean;
  /** A tuple's items, in order (`z.tuple`). */
  prefixItems?: JsonSchema[];
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number | boolean;
  exclusiveMaximum?: number | boolean;
  oneOf?: JsonSchema[];
  anyOf?: JsonSchema[];
  allOf?: JsonSchema[];
  nullable?: boolean;
  $ref?: string;
  $defs?: Record<string, JsonSchema>;
  definitions?: Record<string, JsonSchema>;
}

/** What generated values draw on besides the schema: known words, per field and in general. */
export interface Vocabulary {
  /** Strings worth trying where a schema only says "string": model names, job types, id markers. */
  words: readonly string[];
  /** Strings worth trying for a field of this name (`type`: the job types, `jobId`: known job ids), in objects and arrays. */
  fieldWords?: Record<string, readonly string[]>;
  /** Objects worth trying where a schema allows any object (a job's `input`). */
  freeForm?: fc.Arbitrary<Record<string, unknown>>;
}

export interface SchemaArbitraryOptions extends Vocabulary {
  /** Weight of a wrong value at each node of the document, against 12 for a fitting one. */
  mutationWeight?: number;
  maxDepth?: number;
}

/** Property names that have broken JSON handlers before: prototype pollution and friends. */
const HOSTILE_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', '', ' ', 'type'];

/** Numbers at the edges of what JSON and JavaScript agree on. */
const EDGE_NUMBERS = [0, -0, -1, 1, 0.5, -0.5, 2 ** 31, -(2 ** 31), 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 1e21, 1e308, -1e308, 5e-324, Number.MAX_SAFE_INTEGER];

/** Strings that tend to find bugs: empty, whitespace, control and astral characters, separators, long. */
const EDGE_STRINGS = [
  '', ' ', '\u0000', '\n', '\r\n', '%', '%ff', '../..', '/', '?', '#', ',', ';', '"', "'", '\\', '${x}', '{detail}', '<script>',
  '\u202e', '\ud83d\ude00', '\ud800', 'null', 'undefined', 'NaN', '-1', '1e999', 'sha256:', `sha256:${'0'.repeat(64)}`, 'x'.repeat(101), 'y'.repeat(4097),
];

/** Any JSON value, biased towards the edges. */
export function anyJson(maxDepth = 2): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.jsonValue({ maxDepth }) },
    { weight: 1, arbitrary: fc.constantFrom<unknown>(...EDGE_NUMBERS, ...EDGE_STRINGS, null, true, false, [], {}) },
  );
}

/**
 * Values for a JSON schema: mostly ones that fit, with a wrong value now and then
 * at any node (another type, a bound crossed, a required field dropped, a hostile
 * key added), so one generator reaches both the handlers and the validators.
 */
export function arbitraryFor(schema: JsonSchema, options: SchemaArbitraryOptions): fc.Arbitrary<unknown> {
  const root = schema;
  const mutationWeight = options.mutationWeight ?? 1;
  const maxDepth = options.maxDepth ?? 5;

  const resolve = (node: JsonSchema): JsonSchema => {
    if (!node.$ref) return node;
    const name = node.$ref.split('/').pop()!;
    return root.$defs?.[name] ?? root.definitions?.[name] ?? {};
  };

  const build = (raw: JsonSchema, depth: number, field?: string): fc.Arbitrary<unknown> => {
    const node = resolve(raw);
    const fitting = fits(node, depth, field);
    if (mutationWeight === 0) return fitting;
    return fc.oneof({ weight: 12, arbitrary: fitting }, { weight: mutationWeight, arbitrary: wrong(node, depth) });
  };

  const fits = (node: JsonSchema, depth: number, field?: string): fc.Arbitrary<unknown> => {
    if (depth > maxDepth) return fc.constant(null);
    if ('const' in node) return fc.constant(node.const);
    if (node.enum) return fc.constantFrom(...node.enum);
    const variants = node.oneOf ?? node.anyOf;
    if (variants) return fc.oneof(...variants.map((variant) => build(variant, depth + 1, field)));
    if (node.allOf?.length) return build(node.allOf[0]!, depth + 1, field);
    const types = Array.isArray(node.type) ? node.type : node.type ? [node.type] : [];
    const withNull = (arbitrary: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> =>
      node.nullable || types.includes('null') ? fc.oneof(arbitrary, fc.constant(null)) : arbitrary;
    const type = types.find((candidate) => candidate !== 'null') ?? (node.properties ? 'object' : undefined);
    switch (type) {
      case 'string': return withNull(stringFits(node, field));
      case 'integer': return withNull(integerFits(node));
      case 'number': return withNull(fc.oneof(integerFits(node), numberFits(node)));
      case 'boolean': return withNull(fc.boolean());
      case 'array': {
        if (node.prefixItems) return withNull(fc.tuple(...node.prefixItems.map((item) => build(item, depth + 1, field))));
        const minLength = node.minItems ?? 0;
        const maxLength = Math.min(node.maxItems ?? minLength + 4, minLength + 4);
        return withNull(fc.array(build(typeof node.items === 'object' ? node.items : {}, depth + 1, field), { minLength, maxLength }));
      }
      case 'object': return withNull(objectFits(node, depth));
      default: return anyJson();
    }
  };

  const stringFits = (node: JsonSchema, field?: string): fc.Arbitrary<string> => {
    const minLength = node.minLength ?? 0;
    const maxLength = Math.min(node.maxLength ?? 40, Math.max(minLength, 40));
    const fitsLength = (word: string): boolean => word.length >= minLength && word.length <= (node.maxLength ?? Infinity);
    const pattern = node.pattern ? new RegExp(node.pattern) : null;
    const fieldWords = (field === undefined ? [] : options.fieldWords?.[field] ?? []).filter((word) => fitsLength(word) && (!pattern || pattern.test(word)));
    const generic = pattern
      ? fc.stringMatching(pattern).filter(fitsLength)
      : genericString(minLength, maxLength, options.words.filter(fitsLength));
    // The words this field takes (a job type, a known job id) get deeper than any random string.
    return fieldWords.length > 0 ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...fieldWords) }, { weight: 1, arbitrary: generic }) : generic;
  };

  const genericString = (minLength: number, maxLength: number, words: string[]): fc.Arbitrary<string> => {
    return fc.oneof(
      { weight: 3, arbitrary: fc.string({ minLength, maxLength }) },
      { weight: 1, arbitrary: fc.string({ minLength, maxLength, unit: 'grapheme' }) },
      ...(words.length ? [{ weight: 3, arbitrary: fc.constantFrom(...words) }] : []),
    );
  };

  const bounds = (node: JsonSchema): { min: number; max: number } => {
    let min = node.minimum ?? -(2 ** 40);
    let max = node.maximum ?? 2 ** 40;
    if (typeof node.exclusiveMinimum === 'number') min = node.exclusiveMinimum + 1;
    if (typeof node.exclusiveMaximum === 'number') max = node.exclusiveMaximum - 1;
    return { min: Math.max(min, -(2 ** 40)), max: Math.min(max, 2 ** 40) };
  };

  const integerFits = (node: JsonSchema): fc.Arbitrary<number> => {
    const { min, max } = bounds(node);
    // Values just above the minimum are the ones that pass (a priority, a limit); the bounds and the rest too.
    const low = Math.max(min, -5);
    return fc.oneof(
      { weight: 3, arbitrary: fc.integer({ min: low, max: Math.min(max, low + 4) }) },
      { weight: 2, arbitrary: fc.integer({ min: low, max: Math.max(low, Math.min(max, 300)) }) },
      { weight: 1, arbitrary: fc.integer({ min, max }) },
      { weight: 1, arbitrary: fc.constantFrom(min, max) },
    );
  };

  const numberFits = (node: JsonSchema): fc.Arbitrary<number> => {
    const { min, max } = bounds(node);
    return fc.double({ min, max, noNaN: true, noDefaultInfinity: true });
  };

  const objectFits = (node: JsonSchema, depth: number): fc.Arbitrary<unknown> => {
    const properties = node.properties ?? {};
    const required = new Set(node.required ?? []);
    const model: Record<string, fc.Arbitrary<unknown>> = {};
    for (const [name, property] of Object.entries(properties)) model[name] = build(property, depth + 1, name);
    const known = Object.keys(model).length > 0
      ? fc.record(model, { requiredKeys: Object.keys(model).filter((name) => required.has(name)) })
      : fc.constant({});
    const additional = node.additionalProperties;
    if (additional === false || (additional === undefined && Object.keys(properties).length > 0)) return known;
    // A free-form object (a job's input): try the shapes the mesh's pipelines read, and other fields.
    const hinted = options.freeForm ?? fc.constant({});
    const extra = fc.dictionary(fc.string({ maxLength: 12 }), typeof additional === 'object' ? build(additional, depth + 1) : anyJson(1), { maxKeys: 3 });
    return fc.tuple(known, hinted, fc.oneof({ weight: 3, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: extra }))
      .map(([a, b, c]) => ({ ...c, ...b, ...(a as object) }));
  };

  const wrong = (node: JsonSchema, depth: number): fc.Arbitrary<unknown> => {
    const crossings: fc.Arbitrary<unknown>[] = [anyJson()];
    const types = Array.isArray(node.type) ? node.type : [node.type];
    if (types.includes('string')) {
      if (node.maxLength !== undefined) crossings.push(fc.constant('z'.repeat(node.maxLength + 1)));
      if ((node.minLength ?? 0) > 0) crossings.push(fc.constant(''));
      crossings.push(fc.constantFrom(...EDGE_STRINGS));
    }
    if (types.includes('integer') || types.includes('number')) {
      const { min, max } = bounds(node);
      crossings.push(fc.constantFrom(min - 1, max + 1, min + 0.5, ...EDGE_NUMBERS));
    }
    if (types.includes('array')) {
      if ((node.minItems ?? 0) > 0) crossings.push(fc.constant([]));
      if (node.maxItems !== undefined) crossings.push(fc.constant(Array.from({ length: node.maxItems + 1 }, () => null)));
    }
    if (node.enum) crossings.push(fc.string({ maxLength: 10 }).filter((text) => !node.enum!.includes(text)));
    if (types.includes('object') || node.properties) {
      const required = node.required ?? [];
      if (required.length > 0) {
        // Drop one required field.
        crossings.push(fc.tuple(objectFits(node, depth), fc.constantFrom(...required)).map(([value, key]) => {
          const copy = { ...(value as Record<string, unknown>) };
          delete copy[key];
          return copy;
        }));
      }
      // Add a field the schema does not name, hostile names included (defined as own properties, so
      // JSON.stringify writes them out as they are).
      crossings.push(fc.tuple(objectFits(node, depth), fc.oneof(fc.constantFrom(...HOSTILE_KEYS), fc.string({ maxLength: 8 })), anyJson(1)).map(([value, key, extra]) => {
        const copy = { ...(value as Record<string, unknown>) };
        Object.defineProperty(copy, key, { value: extra, enumerable: true, configurable: true, writable: true });
        return copy;
      }));
    }
    return fc.oneof(...crossings);
  };

  return build(schema, 0);
}
