// Three-language differential fuzz of the frame-body codec: tens of thousands of
// structure-aware mutants of the golden bodies go through the C, TypeScript and
// Python decoders, which must give each the same verdict (OK or the same error
// code) and, when OK, the same canonical re-encoding. GPURING_FUZZ_BODIES and
// GPURING_FUZZ_SEED change the count and the seed; a failure names both.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { decodeFrame } from '../lib/codec/decode.js';
import { encodeFrame } from '../lib/codec/encode.js';
import { GpuringError } from '../lib/index.js';
import { BodyMutator } from './helpers/body-mutator.js';
import { cProgram, root } from './helpers/ring.js';

const COUNT = Number(process.env.GPURING_FUZZ_BODIES ?? 20_000);
const SEED = Number(process.env.GPURING_FUZZ_SEED ?? 20261123);

interface Verdict {
  code: string;
  canonical: Buffer;
}

/** Bodies as u32 length + bytes records, the stream both referees read. */
function stream(bodies: Uint8Array[]): Buffer {
  const parts: Buffer[] = [];
  for (const b of bodies) {
    const n = Buffer.alloc(4);
    n.writeUInt32LE(b.length);
    parts.push(n, Buffer.from(b.buffer, b.byteOffset, b.byteLength));
  }
  return Buffer.concat(parts);
}

/** Parses a referee's answer: per body, u32 length + verdict, u32 length + canonical bytes. */
function verdicts(out: Buffer): Verdict[] {
  const list: Verdict[] = [];
  for (let at = 0; at < out.length; ) {
    const codeLength = out.readUInt32LE(at);
    const code = out.toString('latin1', at + 4, at + 4 + codeLength);
    at += 4 + codeLength;
    const n = out.readUInt32LE(at);
    list.push({ code, canonical: out.subarray(at + 4, at + 4 + n) });
    at += 4 + n;
  }
  return list;
}

function referee(command: string, args: string[], input: Buffer): Verdict[] {
  const r = spawnSync(command, args, { input, maxBuffer: 1 << 30, env: { ...process.env, PYTHONPATH: join(root, 'interop/python/src') } });
  if (r.status !== 0) throw new Error(`${command} ${args.join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
  return verdicts(r.stdout);
}

function typescript(body: Uint8Array): Verdict {
  try {
    return { code: 'OK', canonical: Buffer.from(encodeFrame(decodeFrame(body))) };
  } catch (error) {
    if (error instanceof GpuringError) return { code: error.code, canonical: Buffer.alloc(0) };
    return { code: `CRASH ${(error as Error).name}: ${(error as Error).message}`, canonical: Buffer.alloc(0) };
  }
}

test(`C, TypeScript and Python agree on ${COUNT} mutated bodies (seed ${SEED})`, (t) => {
  const dir = join(root, 'fixtures/frames');
  // The 1,000-column body is 200 KiB; the others cover every type and layout.
  const seeds = readdirSync(dir).filter((f) => f.endsWith('.bin') && !f.startsWith('wide')).map((f) => new Uint8Array(readFileSync(join(dir, f))));
  const mutator = new BodyMutator(seeds, SEED);
  const bodies = Array.from({ length: COUNT }, () => mutator.next());
  const input = stream(bodies);
  const c = referee(cProgram('body_roundtrip'), ['--batch'], input);
  const python = referee('python3', [join(root, 'interop/python/tests/body_verdicts.py')], input);
  t.is(c.length, COUNT, 'C answered for every body');
  t.is(python.length, COUNT, 'Python answered for every body');
  const tally = new Map<string, number>();
  const disagreements: string[] = [];
  bodies.forEach((body, i) => {
    const ts = typescript(body);
    tally.set(ts.code, (tally.get(ts.code) ?? 0) + 1);
    const same = (v: Verdict) => v.code === ts.code && v.canonical.equals(ts.canonical);
    if (!same(c[i]!) || !same(python[i]!))
      disagreements.push(`body ${i}: TypeScript ${ts.code}, C ${c[i]!.code}, Python ${python[i]!.code}${ts.code === c[i]!.code && ts.code === python[i]!.code ? ' (canonical bytes differ)' : ''}`);
  });
  t.deepEqual(disagreements.slice(0, 10), [], `${disagreements.length} disagreements (seed ${SEED})`);
  // The mutants must reach every verdict often, or the run proves little.
  for (const code of ['OK', 'FRAME_INVALID', 'FRAME_BOUNDS']) t.true((tally.get(code) ?? 0) > COUNT / 20, `${code}: ${tally.get(code) ?? 0} of ${COUNT}`);
  t.log(`${COUNT} bodies (seed ${SEED}): ${[...tally].map(([k, v]) => `${k} ${v}`).join(', ')}`);
});
