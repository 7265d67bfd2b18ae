/**
 * A deep copy of a value exactly as JSON would carry it — what
 * `JSON.parse(JSON.stringify(value))` returns — without writing and reading
 * the text. For the in-process link, where a batch's tensors are thousands of
 * numbers: formatting and parsing them was a sixth of the orchestrator's work
 * under load, and even `structuredClone` costs four times this walk.
 *
 * JSON's rules, kept: `toJSON` is called (a Date becomes its ISO string); an
 * object property that is undefined, a function or a symbol is left out, and
 * in an array becomes null; NaN and ±Infinity become null, -0 becomes 0; only
 * own enumerable string keys are copied; a BigInt throws a TypeError. A cycle
 * recurses until the stack overflows, where JSON throws at once; link
 * messages have none.
 */
export function jsonCopy(value: unknown): unknown {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    // Adding 0 turns -0 into 0, as its text "0" reads back.
    case 'number':
      return Number.isFinite(value) ? (value as number) + 0 : null;
    case 'bigint':
      throw new TypeError('Do not know how to serialize a BigInt');
    case 'object':
      return value === null ? null : copyObject(value);
    default:
      return undefined;
  }
}

function copyObject(value: object): unknown {
  const withToJSON = value as { toJSON?: unknown };
  if (typeof withToJSON.toJSON === 'function') return jsonCopy((withToJSON.toJSON as () => unknown).call(value));
  if (Array.isArray(value)) {
    // A tensor: copied whole, without a call per value.
    if (isFiniteNumbers(value)) return value.slice();
    const out: unknown[] = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = jsonCopy(value[i]) ?? null;
    return out;
  }
  const out: Record<string, unknown> = {};
  const source = value as Record<string, unknown>;
  // for…in walks V8's cached keys without making an array of them (Object.keys does, for every object copied); the
  // own-property check keeps it to own keys, as JSON.stringify does, whatever a prototype was given.
  for (const key in source) {
    if (!Object.hasOwn(source, key)) continue;
    const copied = jsonCopy(source[key]);
    if (copied === undefined) continue;
    // An assignment to "__proto__" would set the copy's prototype; JSON.parse makes it an own property like any other.
    if (key === '__proto__') Object.defineProperty(out, key, { value: copied, enumerable: true, writable: true, configurable: true });
    else out[key] = copied;
  }
  return out;
}

/**
 * Numbers only, each one JSON writes as itself: finite and not -0 (which it writes as 0). A hole is not a number
 * (`at` reads it as undefined). Read with `at`, not `values[i]`: this sees arrays of doubles and arrays of anything,
 * and TurboFan compiled the indexed read at such a site to move an array of unboxed doubles to the general elements
 * kind first — every tensor a message carried was turned, in place, into an array of boxed numbers (a heap object
 * each), which made its copy, its JSON and its IPC slower after. `for…of` kept the kinds but allocated an iterator
 * result a number (4.3 KB a job under load); `at` keeps them and allocates nothing once optimized (bench/RESULTS.md,
 * *Issue 30, sixth session*).
 */
function isFiniteNumbers(values: readonly unknown[]): values is number[] {
  for (let i = 0; i < values.length; i++) {
    const value = values.at(i);
    if (typeof value !== 'number' || !Number.isFinite(value) || (value === 0 && 1 / value < 0)) return false;
  }
  return values.length > 0;
}
