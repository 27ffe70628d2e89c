/**
 * Node child of the kill -9 torture run (test/torture.test.ts). Plain JavaScript
 * over the compiled package (dist/, built by `npm ci` / `npm run build:ts`):
 * the run starts about a hundred of these, and loading TypeScript through tsx
 * would make start-up, not the protocol, the bulk of the run.
 *   torture-child.mjs produce NAME ID LOG   says it is ready, publishes frames ID:0, ID:1, ...
 *                                           (tag ID << 32 | seq) forever, appending seq to LOG
 *                                           after each publish returned
 *   torture-child.mjs produce-loan NAME ID LOG  as produce, each frame written in place in a
 *                                           producer.loan() (no apache-arrow object)
 *   torture-child.mjs consume NAME LOG      says it is ready, takes frames forever; checks each
 *                                           against its tag and appends the tag (or "BAD tag")
 *                                           to LOG before releasing it
 *   torture-child.mjs consume-sync NAME LOG as consume, each frame taken with nextSync(): the
 *                                           thread blocked on its doorbell, never back in the event loop
 *   torture-child.mjs consume-batch NAME LOG as consume, taking every frame ready at once
 *                                           (nextBatch(), up to 16), all held until each is logged
 *   torture-child.mjs consume-listen NAME LOG as consume, each frame handed to a listen() handler
 * On a broadcast ring consumers subscribe with the onSlow policy GPURING_TORTURE_ON_SLOW
 * names (default 'block'), and log "MISSED n" where next() says n frames were dropped for
 * them (FRAMES_MISSED, EVICTED). GPURING_TORTURE_START=oldest also takes the frames
 * still in the ring when they join.
 * The frame: producer int32, seq int32, check utf8 "producer:seq:(seq * 2654435761) mod 2^32",
 * as interop/python/tests/children/torture.py publishes it.
 */
import { openSync, writeSync } from 'node:fs';
import { Field, Int32, makeData, makeVector, Schema, Table, Utf8 } from 'apache-arrow';
import { Consumer, GpuringError, Producer } from '../../dist/index.js';

const [role, name, ...args] = process.argv.slice(2);
const checkText = (producer, seq) => `${producer}:${seq}:${(seq * 2654435761) >>> 0}`;

function frame(producer, seq) {
  const text = new TextEncoder().encode(checkText(producer, seq));
  return new Table({
    producer: makeVector(Int32Array.of(producer)),
    seq: makeVector(Int32Array.of(seq)),
    check: makeVector(makeData({ type: new Utf8(), length: 1, nullCount: 0, valueOffsets: Int32Array.of(0, text.length), data: text })),
  });
}

async function produce(id, log) {
  const producer = Producer.open(name, { openTimeout: 10_000 });
  process.stdout.write('ready\n');
  for (let seq = 0; ; seq++) {
    await producer.publish(frame(id, seq), { tag: (BigInt(id) << 32n) | BigInt(seq), timeout: 120_000 });
    writeSync(log, `${seq}\n`);
  }
}

const loanSchema = new Schema([new Field('producer', new Int32(), true), new Field('seq', new Int32(), true), new Field('check', new Utf8(), true)]);

async function produceLoaned(id, log) {
  const producer = Producer.open(name, { openTimeout: 10_000 });
  process.stdout.write('ready\n');
  for (let seq = 0; ; seq++) {
    const loan = producer.loan(loanSchema, 1, { bytes: { check: 32 } });
    loan.column('producer').values[0] = id;
    loan.column('seq').values[0] = seq;
    const { offsets, values } = loan.column('check');
    offsets[1] = new TextEncoder().encodeInto(checkText(id, seq), values).written;
    await loan.publish({ rows: 1, tag: (BigInt(id) << 32n) | BigInt(seq), timeout: 120_000 });
    writeSync(log, `${seq}\n`);
  }
}

const started = performance.now();
let taken = 0;

/** Appends the frame's tag, or "BAD tag" where its columns do not match it (with what it held, and how many frames this process took before it and when). */
function logFrame(log, f) {
  taken++;
  const t = f.toTable();
  const p = t.getChild('producer').get(0);
  const s = t.getChild('seq').get(0);
  const ok = ((BigInt(p) << 32n) | BigInt(s)) === f.tag && t.getChild('check').get(0) === checkText(p, s);
  writeSync(log, ok ? `${f.tag}\n` : `BAD ${f.tag} (it held ${p}:${s} ${JSON.stringify(t.getChild('check').get(0))}; this process's frame ${taken}, ${((performance.now() - started) / 1000).toFixed(3)} s after it started)\n`);
}

const openConsumer = () => Consumer.open(name, { openTimeout: 10_000, onSlow: process.env.GPURING_TORTURE_ON_SLOW ?? 'block', start: process.env.GPURING_TORTURE_START ?? 'newest' });

/** Logs a broadcast subscriber's losses; anything else is thrown. */
function logMissed(log, e) {
  if (!(e instanceof GpuringError) || (e.code !== 'FRAMES_MISSED' && e.code !== 'EVICTED')) throw e;
  writeSync(log, `MISSED ${e.missed}\n`);
}

/** `take` is how this seat waits: next(), nextSync() or nextBatch(). */
async function consume(log, take) {
  const consumer = openConsumer();
  process.stdout.write('ready\n');
  for (;;) {
    let frames;
    try {
      frames = await take(consumer);
    } catch (e) {
      logMissed(log, e);
      continue;
    }
    frames.forEach((f) => logFrame(log, f));
    frames.forEach((f) => f.release());
  }
}

const takes = {
  consume: async (c) => [await c.next()],
  'consume-sync': (c) => [c.nextSync()],
  'consume-batch': (c) => c.nextBatch({ max: 16 }),
};

if (role === 'produce') await produce(Number(args[0]), openSync(args[1], 'a'));
else if (role === 'produce-loan') await produceLoaned(Number(args[0]), openSync(args[1], 'a'));
else if (role === 'consume-listen') {
  const log = openSync(args[0], 'a');
  openConsumer().listen((f) => (logFrame(log, f), f.release()), (e) => logMissed(log, e));
  process.stdout.write('ready\n');
} else await consume(openSync(args[0], 'a'), takes[role]);
