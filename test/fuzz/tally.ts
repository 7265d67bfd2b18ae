/** Per target (a route, the link, raw HTTP): how many inputs, what came back, what failed. */
export interface TallyRow {
  label: string;
  inputs: number;
  /** Statuses (or link close codes) and how often each came back. */
  seen: Record<string, number>;
  failures: number;
  /** Wall time spent on this target's inputs, request and checks together. */
  milliseconds: number;
  /** The first few failing inputs with their problems. */
  examples: { input: string; problems: string[] }[];
}

const EXAMPLES_PER_ROW = 3;

export class Tally {
  readonly #rows = new Map<string, TallyRow>();

  record(label: string, seen: string, problems: readonly string[], describeInput: () => string, milliseconds = 0): void {
    let row = this.#rows.get(label);
    if (!row) {
      row = { label, inputs: 0, seen: {}, failures: 0, milliseconds: 0, examples: [] };
      this.#rows.set(label, row);
    }
    row.inputs++;
    row.milliseconds += milliseconds;
    row.seen[seen] = (row.seen[seen] ?? 0) + 1;
    if (problems.length > 0) {
      row.failures++;
      if (row.examples.length < EXAMPLES_PER_ROW) row.examples.push({ input: describeInput(), problems: [...problems] });
    }
  }

  rows(): TallyRow[] {
    return [...this.#rows.values()].sort((a, b) => a.label.localeCompare(b.label));
  }

  get inputs(): number {
    return this.rows().reduce((sum, row) => sum + row.inputs, 0);
  }

  get failures(): number {
    return this.rows().reduce((sum, row) => sum + row.failures, 0);
  }
}
