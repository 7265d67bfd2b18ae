/** Errors a command reports to the user as one line, with an exit status; no stack trace. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(message: string, readonly exitCode = 1) {
    super(message);
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** A plain text table: columns padded to their widest cell. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((header, column) => Math.max(header.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: string[]): string => cells.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** Parse "256x256" into width and height. */
export function parseSize(text: string): { width: number; height: number } {
  const match = /^(\d+)x(\d+)$/i.exec(text.trim());
  if (!match) throw new CliError(`--size must look like 256x256, not "${text}"`);
  return { width: Number(match[1]), height: Number(match[2]) };
}

export function parseList(text: string): string[] {
  return text.split(',').map((part) => part.trim()).filter(Boolean);
}

export function parseInteger(name: string) {
  return (text: string): number => {
    const value = Number(text);
    if (!Number.isInteger(value)) throw new CliError(`${name} must be a whole number, not "${text}"`);
    return value;
  };
}

/** A size as a person reads it: `512 B`, `184.0 KiB`, `2.3 GiB`. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}
