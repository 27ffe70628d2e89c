/** Human-readable by default, one JSON document with --json. */
export interface Output {
  json: boolean;
  /** Prints `human()` or the JSON of `data`. */
  result(data: unknown, human: () => string): void;
  /** Progress for long work, on stderr so it never mixes with results. */
  progress(line: string): void;
}

export function makeOutput(json: boolean): Output {
  return {
    json,
    result(data, human) {
      process.stdout.write(json ? `${JSON.stringify(data, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n` : `${human()}\n`);
    },
    progress(line) {
      if (!json) process.stderr.write(`${line}\n`);
    },
  };
}

export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) (n /= 1024), i++;
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return rows.map((r) => r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ').trimEnd()).join('\n');
}
