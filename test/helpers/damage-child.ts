// One participant of test/segment-damage.test.ts: publishes or takes small
// frames for SECONDS while another process writes random bytes into the ring,
// reopening after every 50 failures in a row, or at once when its entry was
// taken (DETACHED). It prints a JSON line of its counts every
// 250 ms and exits 2 at the first error that is not a GpuringError.
// Usage: damage-child.ts producer|consumer|'sync consumer' RING SECONDS (the last blocked in nextSync())
import { Table, Utf8, vectorFromArray } from 'apache-arrow';
import { Consumer, GpuringError, Producer } from '../../lib/index.js';

const [role, name, seconds] = process.argv.slice(2) as [string, string, string];
const end = Date.now() + Number(seconds) * 1000;
const counts = { ok: 0, codes: {} as Record<string, number> };
const report = () => console.log(JSON.stringify(counts));
setInterval(report, 250).unref();

function failed(e: unknown): void {
  if (!(e instanceof GpuringError)) {
    console.log(JSON.stringify({ untyped: String((e as Error)?.stack ?? e) }));
    process.exit(2);
  }
  counts.codes[e.code] = (counts.codes[e.code] ?? 0) + 1;
}

/** A frame of 1 to 7 rows: an int column and a string column with nulls. */
function frame(from: number): Table {
  const rows = 1 + (from % 7);
  const s = Array.from({ length: rows }, (_, k) => (k % 3 ? `s${k}` : null));
  return new Table({ i: vectorFromArray(Array.from({ length: rows }, (_, k) => from + k)), s: vectorFromArray(s, new Utf8()) });
}

/** Runs `step` until the time is up; a participant that failed 50 times in a row is closed and opened again. */
async function run<T extends { close(): void }>(open: () => T, step: (p: T, n: number) => Promise<void>): Promise<void> {
  let p: T | null = null;
  for (let n = 0, failures = 0; Date.now() < end; n++) {
    try {
      p ??= open();
      await step(p, n);
      failures = 0;
    } catch (e) {
      failed(e);
      // DETACHED: the entry was taken, nothing more will work; otherwise the damage may pass.
      if ((++failures >= 50 || (e as GpuringError).code === 'DETACHED') && p) {
        try { p.close(); } catch (e2) { failed(e2); }
        p = null;
        failures = 0;
      }
    }
  }
  try { p?.close(); } catch (e) { failed(e); }
}

/** A frame by nextSync(), then a turn of the event loop (whatever the call did) so that the counts get reported. */
async function syncTake(c: Consumer) {
  try {
    return c.nextSync({ timeout: 200 });
  } finally {
    await new Promise((r) => setImmediate(r));
  }
}

if (role === 'producer') {
  await run(() => Producer.open(name), async (p, n) => {
    await p.publish(frame(n), { timeout: 200 });
    counts.ok++;
  });
} else {
  // 'sync consumer': blocked in nextSync(), its thread asleep on its doorbell word (SPEC.md §6.1).
  const take = role === 'sync consumer' ? syncTake : (c: Consumer) => c.next({ timeout: 200 });
  await run(() => Consumer.open(name), async (c) => {
    const f = await take(c);
    try {
      for (const row of f.toTable()) void row.toJSON();
      counts.ok++;
    } finally {
      f.release();
    }
  });
}
report();
process.exit(0);
