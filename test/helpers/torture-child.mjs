/**
 * Node child of the kill -9 torture run (test/torture.test.ts). Plain JavaScript
 * over the compiled package (dist/, built by `npm ci` / `npm run build:ts`):
 * the run starts about a hundred of these, and loading TypeScript through tsx
 * would make start-up, not the protocol, the bulk of the run.
 *   torture-child.mjs produce NAME ID LOG   says it is ready, publishes frames ID:0, ID:1, ...
 *                                           (tag ID << 32 | seq) forever, appending seq to LOG
 *                                           after each publish returned
 *   torture-child.mjs consume NAME LOG      says it is ready, takes frames forever; checks each
 *                                           against its tag and appends the tag (or "BAD tag")
 *                                           to LOG before releasing it
 *   torture-child.mjs consume-sync NAME LOG as consume, each frame taken with nextSync(): the
 *                                           thread blocked on its doorbell, never back in the event loop
 * On a broadcast ring consumers subscribe with the onSlow policy GPURING_TORTURE_ON_SLOW
 * names (default 'block'), and log "MISSED n" where next() says n frames were dropped for
 * them (FRAMES_MISSED, EVICTED).
 * The frame: producer int32, seq int32, check utf8 "producer:seq:(seq * 2654435761) mod 2^32",
 * as interop/python/tests/children/torture.py publishes it.
 */
import { openSync, writeSync } from 'node:fs';
import { makeData, makeVector, Table, Utf8 } from 'apache-arrow';
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

async function consume(log, blocked) {
  const consumer = Consumer.open(name, { openTimeout: 10_000, onSlow: process.env.GPURING_TORTURE_ON_SLOW ?? 'block' });
  process.stdout.write('ready\n');
  for (;;) {
    let f;
    try {
      f = blocked ? consumer.nextSync() : await consumer.next();
    } catch (e) {
      if (!(e instanceof GpuringError) || (e.code !== 'FRAMES_MISSED' && e.code !== 'EVICTED')) throw e;
      writeSync(log, `MISSED ${e.missed}\n`);
      continue;
    }
    const t = f.toTable();
    const p = t.getChild('producer').get(0);
    const s = t.getChild('seq').get(0);
    const ok = ((BigInt(p) << 32n) | BigInt(s)) === f.tag && t.getChild('check').get(0) === checkText(p, s);
    writeSync(log, ok ? `${f.tag}\n` : `BAD ${f.tag}\n`);
    f.release();
  }
}

if (role === 'produce') await produce(Number(args[0]), openSync(args[1], 'a'));
else await consume(openSync(args[0], 'a'), role === 'consume-sync');
