/** Runs interop/c/consumer (or interop/spec-only/spec_consumer) and computes, in Node, the report it must print. */
import { spawn, type ChildProcess } from 'node:child_process';
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

/**
 * Starts a C consumer (interop/c/consumer, or PROGRAM: one that prints the same
 * report) on RING and resolves with its FRAMES report lines once it exited 0.
 */
export function cConsumerReport(ring: string, frames: number, program = cProgram('consumer', 'interop/c')): Promise<FrameReport[]> {
  return cReport(spawn(program, [ring, String(frames), '30000'], { stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** The report lines of a C consumer started with its stdout piped, once it exited 0. */
export function cReport(proc: ChildProcess): Promise<FrameReport[]> {
  const lines: FrameReport[] = [];
  let stderr = '';
  proc.stderr?.on('data', (d) => (stderr += d));
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

/** The columns interop/c/producer and interop/spec-only/spec_producer write in frame K of ROWS rows. */
export function producerColumns(k: number, rows: number): { id: number[]; score: (number | null)[]; name: string[] } {
  const ids = Array.from({ length: rows }, (_, r) => k * rows + r);
  return { id: ids, score: ids.map((i) => (i % 7 === 0 ? null : i / 4)), name: ids.map((i) => `row-${i}`) };
}

/** The same three columns as read from TABLE. */
export function tableColumns(table: A.Table): { id: number[]; score: (number | null)[]; name: string[] } {
  return {
    id: Array.from(table.getChild('id')!.toArray() as BigInt64Array, Number),
    score: [...table.getChild('score')!] as (number | null)[],
    name: [...table.getChild('name')!] as string[],
  };
}

/**
 * Two tables with every column kind the consumers' reports sum (int32, float64
 * and utf8 with nulls, a fixed-size list of float32), the second a slice, so
 * that offsets and validity bits that start mid-byte are read too.
 */
export function reportSources(): A.Table[] {
  const tables = [0, 1].map((k) => {
    const idx = Array.from({ length: 300 + k }, (_, i) => i);
    return new A.Table({
      id: A.vectorFromArray(idx.map((i) => i * 3 + k), new A.Int32()),
      score: A.vectorFromArray(idx.map((i) => (i % 5 === 0 ? null : i * 0.25 - k)), new A.Float64()),
      name: A.vectorFromArray(idx.map((i) => (i % 11 === 0 ? null : `név-${i}`)), new A.Utf8()),
      tensor: A.vectorFromArray(idx.map((i) => [i, i + 0.5, -i, k]), new A.FixedSizeList(4, new A.Field('item', new A.Float32(), false))),
    });
  });
  return [tables[0]!, tables[1]!.slice(7, 250)];
}
