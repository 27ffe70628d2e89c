/**
 * Benchmark records and their reports: a human-readable table by default, an
 * array of records with --json, and a Markdown table and SVG charts written
 * under docs/.
 * Every record names its baseline, measured in the same run, and the ratio.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { lineChart, type Chart } from './plot.js';

export interface BenchRecord {
  name: string;
  metric: string;
  unit: string;
  value: number;
  baseline: string | null;
  baselineValue: number | null;
  /** How many times better than the baseline (>1 is better), by the metric's direction. */
  ratio: number | null;
}

/**
 * Frames each latency series sends first and leaves out of its percentiles, ours
 * and every baseline's alike (the C floor too). Frame 0 of a fresh Node process
 * costs 5-20 ms, and V8 runs a function in its baseline tiers until it has been
 * called often enough to optimize it: a sleeping consumer's Frame, release and
 * toTable() were optimized only after 800-1,300 frames (`node --trace-opt`, dev
 * box), and until then frames came up to 3 ms late. A running service runs
 * optimized code, so these frames are start-up, not hand-off. `--warm-up N`
 * sets another count (100 until 2026-11-25, for comparing with older runs).
 */
export const LATENCY_WARMUP = process.argv.includes('--warm-up') ? Number(process.argv[process.argv.indexOf('--warm-up') + 1]) : 2000;

/**
 * Collects the benchmark process's garbage before a latency series, ours and
 * each baseline's alike. The series share one process: without this, what the
 * previous series left (the socket baseline's parsed JSON, for one) started a
 * full collection in the next one's timed frames (H200, 100 µs apart: a 1.3 ms
 * incremental-marking step and 0.8 ms of weak callbacks), a pause that series
 * did not cause. Each series' own collections stay in its numbers. Needs
 * `node --expose-gc` (the bench scripts pass it); without it, does nothing.
 */
export function collectGarbage(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

/** Microseconds since `tag`, a process.hrtime.bigint() taken in any process (CLOCK_MONOTONIC). */
export function microsSince(tag: bigint): number {
  return Number(process.hrtime.bigint() - tag) / 1000;
}

export function percentile(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

export function median(samples: number[]): number {
  return percentile(samples, 50);
}

/** A record comparing `value` with `baselineValue`; lower is better for latencies, higher for rates. */
export function compare(name: string, metric: string, unit: string, value: number, baseline: string, baselineValue: number, higherIsBetter: boolean): BenchRecord {
  return { name, metric, unit, value, baseline, baselineValue, ratio: higherIsBetter ? value / baselineValue : baselineValue / value };
}

const fmt = (v: number | null) => (v === null ? '' : Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3));

function markdown(title: string, machine: string, command: string, records: BenchRecord[]): string {
  const rows = records.map((r) => `| ${r.name} | ${r.metric} | ${fmt(r.value)} ${r.unit} | ${r.baseline ?? ''} | ${r.baselineValue === null ? '' : `${fmt(r.baselineValue)} ${r.unit}`} | ${r.ratio === null ? '' : `${fmt(r.ratio)}x`} |`);
  return [`# ${title}`, '', `Machine: ${machine}. Reproduce: \`${command}\`.`, '', '| benchmark | metric | gpuring | baseline | baseline value | ratio |', '| --- | --- | ---: | --- | ---: | ---: |', ...rows, ''].join('\n');
}

/**
 * Prints the records; writes docs/FILE and each chart as docs/NAME.svg (linked
 * from the Markdown) unless `file` is null: a partial run must not replace the
 * full report.
 */
export function report(title: string, machine: string, command: string, file: string | null, records: BenchRecord[], json: boolean, charts: Record<string, Chart> = {}): void {
  const images = Object.entries(charts).map(([name, c]) => `![${c.title}](${name}.svg)`);
  const md = markdown(title, machine, command, records) + (images.length ? `\n${images.join('\n\n')}\n` : '');
  if (file) {
    const docs = fileURLToPath(new URL('../docs/', import.meta.url));
    mkdirSync(docs, { recursive: true });
    writeFileSync(`${docs}${file}`, md);
    for (const [name, chart] of Object.entries(charts)) writeFileSync(`${docs}${name}.svg`, lineChart(chart));
  }
  process.stdout.write(json ? `${JSON.stringify(records, null, 2)}\n` : `${md}\n${file ? `(written to docs/${file})\n` : ''}`);
}
