/**
 * Line charts as standalone SVG, for the benchmark reports under docs/
 * (latency against payload size, throughput against consumers). Written here
 * rather than pulled in as a dependency: a few axes and polylines.
 */
export interface Series {
  label: string;
  points: [number, number][];
}

export interface Chart {
  title: string;
  x: { label: string; log?: boolean; format?: (v: number) => string };
  y: { label: string; log?: boolean };
  series: Series[];
}

const W = 720;
const H = 420;
const M = { left: 80, right: 200, top: 40, bottom: 56 };
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

function scale(values: number[], log: boolean | undefined, from: number, to: number): (v: number) => number {
  const f = log ? Math.log10 : (v: number) => v;
  let lo = Math.min(...values.map(f));
  let hi = Math.max(...values.map(f));
  if (!log) lo = Math.min(lo, 0);
  if (hi === lo) hi = lo + 1;
  return (v) => from + ((f(v) - lo) / (hi - lo)) * (to - from);
}

/** Tick values: powers of ten on a log axis, five even steps otherwise. */
function ticks(values: number[], log: boolean | undefined): number[] {
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  if (log) {
    const out: number[] = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) out.push(10 ** e);
    return out;
  }
  return Array.from({ length: 6 }, (_, i) => (Math.max(hi, 0) * i) / 5);
}

const short = (v: number) => (v >= 1e6 ? `${+(v / 1e6).toPrecision(3)}M` : v >= 1e3 ? `${+(v / 1e3).toPrecision(3)}k` : `${+v.toPrecision(3)}`);

export function lineChart(chart: Chart): string {
  const all = chart.series.flatMap((s) => s.points);
  const xt = ticks(all.map((p) => p[0]), chart.x.log);
  const yt = ticks(all.map((p) => p[1]), chart.y.log);
  const sx = scale([...all.map((p) => p[0]), ...xt], chart.x.log, M.left, W - M.right);
  const sy = scale([...all.map((p) => p[1]), ...yt], chart.y.log, H - M.bottom, M.top);
  const fx = chart.x.format ?? short;
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`, `<rect width="${W}" height="${H}" fill="white"/>`];
  out.push(`<text x="${W / 2 - M.right / 2}" y="22" text-anchor="middle" font-size="15">${esc(chart.title)}</text>`);
  for (const t of xt) out.push(`<line x1="${sx(t)}" x2="${sx(t)}" y1="${M.top}" y2="${H - M.bottom}" stroke="#ddd"/><text x="${sx(t)}" y="${H - M.bottom + 16}" text-anchor="middle">${esc(fx(t))}</text>`);
  for (const t of yt) out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${sy(t)}" y2="${sy(t)}" stroke="#ddd"/><text x="${M.left - 6}" y="${sy(t) + 4}" text-anchor="end">${esc(short(t))}</text>`);
  out.push(`<text x="${(M.left + W - M.right) / 2}" y="${H - 14}" text-anchor="middle">${esc(chart.x.label)}</text>`);
  out.push(`<text transform="translate(18 ${(M.top + H - M.bottom) / 2}) rotate(-90)" text-anchor="middle">${esc(chart.y.label)}</text>`);
  chart.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length]!;
    const pts = s.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`);
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.join(' ')}"/>`);
    for (const p of pts) out.push(`<circle cx="${p.split(',')[0]}" cy="${p.split(',')[1]}" r="3" fill="${color}"/>`);
    const ly = M.top + 10 + i * 20;
    out.push(`<line x1="${W - M.right + 12}" x2="${W - M.right + 32}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/><text x="${W - M.right + 38}" y="${ly + 4}">${esc(s.label)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
