/** Runs interop/c/consumer and computes, in Node, the report it must print. */
import { spawn } from 'node:child_process';
import * as A from 'apache-arrow';
import { createInterface } from 'node:readline';
import { cProgram } from './ring.js';

export interface ColumnReport {
  name: string;
  format: string;
  memory: string;
  nulls: number;
  sum?: number;
  chars?: number;
}

export interface FrameReport {
  frame: number;
  tag: number;
  rows: number;
  columns: ColumnReport[];
}

/** Starts the C consumer on RING and resolves with its FRAMES report lines once it exited 0. */
export function cConsumerReport(ring: string, frames: number): Promise<FrameReport[]> {
  const proc = spawn(cProgram('consumer', 'interop/c'), [ring, String(frames), '30000'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: FrameReport[] = [];
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  createInterface({ input: proc.stdout! }).on('line', (l) => lines.push(JSON.parse(l) as FrameReport));
  // 'close', not 'exit': the process can exit before its last lines are read from the pipe.
  return new Promise((resolve, reject) =>
    proc.once('close', (code) => (code === 0 ? resolve(lines) : reject(new Error(`C consumer exited ${code}: ${stderr}`)))),
  );
}

const encoder = new TextEncoder();

/** What the C consumer reports for a column: a sum in row order, as C adds it. */
function columnReport(name: string, v: A.Vector, memory: string): ColumnReport {
  const format = v.type instanceof A.FixedSizeList ? `+w:${v.type.listSize}` : v.type instanceof A.Utf8 ? 'u' : v.type instanceof A.Int32 ? 'i' : v.type instanceof A.Float32 ? 'f' : 'g';
  const report: ColumnReport = { name, format, memory, nulls: v.nullCount };
  let sum = 0;
  let chars = 0;
  for (const value of v) {
    if (value === null) continue;
    if (typeof value === 'string') chars += encoder.encode(value).length;
    else if (typeof value === 'number') sum += value;
    else for (const item of value as Iterable<number>) sum += item;
  }
  if (format === 'u') report.chars = chars;
  else report.sum = sum;
  return report;
}

export function expectedReport(table: A.Table, frame: number, tag: number, memory: string): FrameReport {
  return {
    frame,
    tag,
    rows: table.numRows,
    columns: table.schema.fields.map((f) => columnReport(f.name, table.getChild(f.name)!, memory)),
  };
}
