/**
 * The text of one member of a JSON object, cut from the object's text: what a request's body says of its `input`,
 * kept to be stored as it came instead of written out again. Formatting a job's numbers was the largest single cost
 * of storing a tensor job (bench/RESULTS.md, issue 30's ninth session); finding where they are costs a fifth of it.
 *
 * Meant for text JSON.parse has read already (a valid JSON document): it is skipped over, not checked, and text that
 * ends before its strings or brackets close has no answer (null) rather than a wrong one. Where the answer would
 * depend on how a parser resolves an ambiguity, there is none either (null):
 *  - the text is not an object, or does not have the member;
 *  - the member is named twice (JSON.parse keeps the last; other readers differ);
 *  - a member's name holds an escape (`"\u0069nput"` is `input` to JSON.parse, and not to a comparison of text).
 * Where the member is itself an object, `members` counts the members its text names, twice-named ones twice: fewer
 * keys in what JSON.parse made of it than this means a name given twice inside it, which SQLite's JSON functions
 * (the first) and JSON.parse (the last) would read differently.
 */
export interface MemberText {
  json: string;
  /** How many members the text of an object names (a name given twice counts twice); null for any other value. */
  members: number | null;
}

export function memberJson(text: string, name: string): MemberText | null {
  try {
    return findMember(text, name);
  } catch (error) {
    if (error instanceof SyntaxError) return null;
    throw error;
  }
}

function findMember(text: string, name: string): MemberText | null {
  let at = skipSpace(text, 0);
  if (text.charCodeAt(at) !== OPEN_OBJECT) return null;
  at = skipSpace(text, at + 1);
  let found: MemberText | null = null;
  while (text.charCodeAt(at) === QUOTE) {
    const nameEnd = stringEnd(text, at);
    const key = text.slice(at + 1, nameEnd - 1);
    if (key.includes('\\')) return null;
    at = skipSpace(text, nameEnd);
    // The colon.
    at = skipSpace(text, at + 1);
    const mine = key === name;
    const counted = mine && text.charCodeAt(at) === OPEN_OBJECT ? { members: 0 } : null;
    const valueEnd = valueEndAt(text, at, counted);
    if (mine) {
      if (found !== null) return null;
      found = { json: text.slice(at, valueEnd), members: counted ? counted.members : null };
    }
    at = skipSpace(text, valueEnd);
    if (text.charCodeAt(at) !== COMMA) break;
    at = skipSpace(text, at + 1);
  }
  return found;
}

/** The characters the scan looks at, as the codes `charCodeAt` gives. */
const [QUOTE, BACKSLASH, COMMA, COLON, OPEN_OBJECT, OPEN_ARRAY] = [...'"\\,:{['].map((char) => char.charCodeAt(0)) as [number, number, number, number, number, number];

/** The end of a scalar other than a string: a number, true, false or null. */
const SCALAR = /[^,\]}\s]*/y;
const SPACE = /[ \t\n\r]*/y;

function skipSpace(text: string, at: number): number {
  SPACE.lastIndex = at;
  SPACE.test(text);
  return SPACE.lastIndex;
}

/** Where the string that opens at `at` (its quote) ends: just past its closing quote. */
function stringEnd(text: string, at: number): number {
  let quote = text.indexOf('"', at + 1);
  for (;;) {
    if (quote < 0) throw new SyntaxError('unterminated JSON string');
    // A quote is escaped when an odd number of backslashes stands right before it.
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    quote = text.indexOf('"', quote + 1);
  }
}

/** Where the value that starts at `at` ends (just past it); `counted`: where an object's members are counted. */
function valueEndAt(text: string, at: number, counted: { members: number } | null = null): number {
  const first = text.charCodeAt(at);
  if (first === QUOTE) return stringEnd(text, at);
  if (first === OPEN_OBJECT || first === OPEN_ARRAY) return nestedEnd(text, at, counted);
  SCALAR.lastIndex = at;
  SCALAR.test(text);
  return SCALAR.lastIndex;
}

/**
 * Where the object or array that opens at `at` ends: at the bracket that closes it, over the strings in it (which
 * may hold brackets). Found by jumping from one bracket or quote to the next with `indexOf` (a byte search), not by
 * reading every character: a tensor's thousands of digits are passed over at once.
 */
function nestedEnd(text: string, at: number, counted: { members: number } | null): number {
  const next = (char: string, from: number): number => {
    const found = text.indexOf(char, from);
    return found < 0 ? Infinity : found;
  };
  let quote = next('"', at);
  let openArray = next('[', at);
  let closeArray = next(']', at);
  let openObject = next('{', at);
  let closeObject = next('}', at);
  let depth = 0;
  for (;;) {
    const i = Math.min(quote, openArray, closeArray, openObject, closeObject);
    if (i === Infinity) throw new SyntaxError('unterminated JSON object or array');
    if (i === quote) {
      // Brackets inside the string are not brackets: each search resumes past it.
      const end = stringEnd(text, i);
      // A string at the object's own level followed by a colon names one of its members.
      if (counted && depth === 1 && text.charCodeAt(skipSpace(text, end)) === COLON) counted.members++;
      quote = next('"', end);
      if (openArray < end) openArray = next('[', end);
      if (closeArray < end) closeArray = next(']', end);
      if (openObject < end) openObject = next('{', end);
      if (closeObject < end) closeObject = next('}', end);
    } else if (i === openArray) {
      depth++;
      openArray = next('[', i + 1);
    } else if (i === openObject) {
      depth++;
      openObject = next('{', i + 1);
    } else {
      depth--;
      if (depth === 0) return i + 1;
      if (i === closeArray) closeArray = next(']', i + 1);
      else closeObject = next('}', i + 1);
    }
  }
}
