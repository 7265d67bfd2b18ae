/**
 * The recogniser's alphabet: class 0 is CTC's blank, then one class per line of the dictionary file, then a space
 * (PaddleOCR's `use_space_char`), so a dictionary of n lines gives n + 2 classes.
 */
export function alphabetOf(dictionary: string): string[] {
  const lines = dictionary.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  return ['', ...lines, ' '];
}

export interface Decoded {
  text: string;
  /** The mean probability of the characters kept (0 for no text). */
  confidence: number;
}

/**
 * Greedy CTC decoding of one line: the likeliest class at each time step, repeats merged, blanks dropped. `scores`
 * holds `steps` rows of `classes` probabilities (the recogniser ends in a softmax) from `offset`.
 */
export function ctcDecode(scores: Float32Array, offset: number, steps: number, classes: number, alphabet: readonly string[]): Decoded {
  let text = '';
  let sum = 0;
  let kept = 0;
  let previous = -1;
  for (let t = 0; t < steps; t++) {
    const row = offset + t * classes;
    let best = 0;
    let bestScore = scores[row]!;
    for (let c = 1; c < classes; c++) {
      if (scores[row + c]! > bestScore) {
        bestScore = scores[row + c]!;
        best = c;
      }
    }
    if (best !== 0 && best !== previous) {
      text += alphabet[best] ?? '';
      sum += bestScore;
      kept++;
    }
    previous = best;
  }
  return { text, confidence: kept ? sum / kept : 0 };
}
