// examples/serve-http end to end: the Python producer publishes, the Node
// server streams the frames as Arrow IPC over HTTP, and the page, in headless
// Chromium, reads them with apache-arrow and renders them. Every value the
// page shows must be a value the producer published, and every published
// value must be shown.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import test from 'ava';
import { Ring } from '../lib/index.js';
import { exitOf, root } from './helpers/ring.js';

const chromium = spawnSync('sh', ['-c', 'command -v chromium || command -v chromium-browser'], { encoding: 'utf8' }).stdout.trim();
// CI installs Chromium (.ci/run); a developer machine without it skips, saying so.
const browserTest = chromium || process.env.CI ? test : test.skip;
if (!chromium) console.log('serve-http: no chromium on PATH (apt-get install chromium): the browser test is skipped');

type Published = { symbol: string[]; price: number[]; volume: number[]; seq: number[] };
const FRAMES = 6;
// Not the example's default 'ticks': the README's broadcast example, tested beside this one, uses that name.
const RING = `ticks-serve-http-${process.pid}`;

function removeRing(): void {
  try {
    Ring.unlink(RING);
  } catch {
    /* not there */
  }
}

browserTest('a Python producer feeds the Node server, and the page shows exactly the published values', async (t) => {
  t.timeout(180_000);
  removeRing();
  const server = spawn(process.execPath, ['examples/serve-http/server.mjs', '0', RING], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const port = await new Promise<string>((resolve, reject) => {
      createInterface({ input: server.stdout! }).once('line', (l) => resolve(/:(\d+)\//.exec(l)?.[1] ?? ''));
      server.once('exit', (code) => reject(new Error(`the server exited (${code}) before listening`)));
    });
    const produced = spawnSync('python3', ['examples/serve-http/producer.py', '--frames', String(FRAMES), '--interval', '0.02', '--ring', RING], { cwd: root, encoding: 'utf8', timeout: 60_000 });
    t.is(produced.status, 0, produced.stderr);
    const published = produced.stdout.trim().split('\n').map((l) => JSON.parse(l) as Published);
    t.is(published.length, FRAMES);

    // The producer drained: the server released every frame and keeps them for new clients.
    const dom = execFileSync(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--virtual-time-budget=20000', '--dump-dom', `http://127.0.0.1:${port}/?frames=${FRAMES}`], { encoding: 'utf8', timeout: 90_000, stdio: ['ignore', 'pipe', 'ignore'] });
    t.regex(dom, new RegExp(`${FRAMES} frames received, stream ended`));
    const shown = [...dom.matchAll(/<circle [^>]*data-symbol="([^"]+)" data-seq="(\d+)" data-price="([\d.]+)" data-volume="(\d+)"/g)]
      .map(([, symbol, seq, price, volume]) => `${seq} ${symbol} ${Number(price)} ${volume}`)
      .sort();
    const expected = published.flatMap((f) => f.symbol.map((s, i) => `${f.seq[i]} ${s} ${f.price[i]} ${f.volume[i]}`)).sort();
    t.deepEqual(shown, expected, 'the chart holds every published tick, and nothing else');
    const last = published.at(-1)!;
    const latest = /<table id="latest">([\s\S]*?)<\/table>/.exec(dom)?.[1] ?? '';
    const rows = [...latest.matchAll(/<tr><td>([^<]+)<\/td><td>([^<]+)<\/td><td>([^<]+)<\/td><td>([^<]+)<\/td><\/tr>/g)].map((m) => m.slice(1).join(' '));
    t.deepEqual(rows, last.symbol.map((s, i) => `${s} ${last.price[i]!.toFixed(2)} ${last.volume[i]} ${last.seq[i]}`), 'the table shows the latest frame');
  } finally {
    server.kill('SIGINT');
    const { code, signal } = await exitOf(server);
    t.deepEqual({ code, signal }, { code: 0, signal: null }, 'the server shuts down cleanly on SIGINT');
    removeRing();
  }
});
