/**
 * The golden fixtures (fixtures/), checked by the TypeScript codec and API.
 * The C (interop/tests/test_fixtures.c, test_segment_images.c) and Python
 * (interop/python/tests/test_fixtures.py, test_segment_images.py) suites
 * check the same files the same way.
 */
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeFrame } from '../lib/codec/decode.js';
import { encodeFrame } from '../lib/codec/encode.js';
import { GpuringError } from '../lib/errors.js';
import { descriptionFromJson, descriptionToFlat, descriptionToJson } from './helpers/fixture-forms.js';
import { loadImage, observeImage, unloadImage } from './helpers/segment-image.js';
import { fuzzImages } from './helpers/segment-image-fuzz.js';

const root = join(import.meta.dirname, '..', 'fixtures');
const frames = readdirSync(join(root, 'frames')).filter((f) => f.endsWith('.bin')).map((f) => f.slice(0, -4));
const corrupt = JSON.parse(readFileSync(join(root, 'corrupt', 'index.json'), 'utf8')) as Record<string, { code: string }>;

test('there are golden frames and corrupted variants to check', (t) => {
  t.true(frames.length >= 10);
  t.true(Object.keys(corrupt).length >= 30);
});

for (const name of frames) {
  test(`fixture ${name}: encode(description) is the golden bytes, decode(bytes) the description`, (t) => {
    const bytes = new Uint8Array(readFileSync(join(root, 'frames', `${name}.bin`)));
    const json = JSON.parse(readFileSync(join(root, 'frames', `${name}.json`), 'utf8'));
    t.deepEqual(encodeFrame(descriptionFromJson(json)), bytes);
    const decoded = decodeFrame(bytes);
    t.deepEqual(JSON.parse(JSON.stringify(descriptionToJson(decoded))), json);
    t.is(descriptionToFlat(decoded), readFileSync(join(root, 'frames', `${name}.flat`), 'utf8'));
  });
}

test('every corrupted variant is rejected with its recorded code', (t) => {
  for (const [name, { code }] of Object.entries(corrupt)) {
    const bytes = new Uint8Array(readFileSync(join(root, 'corrupt', `${name}.bin`)));
    const e = t.throws(() => decodeFrame(bytes), { instanceOf: GpuringError }, name);
    t.is(e?.code as string | undefined, code, name);
  }
});

// Segment images (fresh, mid-stream, a dead participant, a garbage slot
// record, damaged headers) are loaded under one ring name, because frame
// bodies name their arenas; the generator below makes them under that name
// too. Serial tests run before the others, so they never overlap.
const imageDir = join(root, 'segments');
const images = readdirSync(imageDir).filter((f) => f.endsWith('.expect')).map((f) => f.slice(0, -'.expect'.length));

test('there are segment images: fresh, mid-stream, dead participant, damaged', (t) => {
  for (const name of ['fresh', 'mid-stream', 'dead-participant', 'garbage-slot', 'damaged-hints', 'corrupt-foreign', 'corrupt-namespace']) t.true(images.includes(name), name);
});

for (const image of images) {
  test.serial(`segment image ${image} is observed as ${image}.expect says`, (t) => {
    loadImage(imageDir, image);
    try {
      t.is(observeImage(), readFileSync(join(imageDir, `${image}.expect`), 'utf8'));
    } finally {
      unloadImage();
    }
  });
}

// GPURING_FUZZ_ITERATIONS and GPURING_FUZZ_SEED widen or vary the run.
const fuzzIterations = Number(process.env.GPURING_FUZZ_ITERATIONS ?? 1000);
const fuzzSeed = Number(process.env.GPURING_FUZZ_SEED ?? 1);
test.serial(`${fuzzIterations} damaged segment images (seed ${fuzzSeed}): every call returns or throws a GpuringError, and frames in them are still read and published`, async (t) => {
  const tally = await fuzzImages(imageDir, images, fuzzIterations, fuzzSeed);
  t.log(JSON.stringify(tally));
  t.true(tally.opened! > fuzzIterations / 4 && tally['frames read']! > 0 && tally.published! > 0, JSON.stringify(tally));
});

test('the generator reproduces the committed fixtures and refuses to overwrite changed bytes', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gpuring-fixtures-'));
  try {
    cpSync(root, dir, { recursive: true });
    const generate = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'scripts/fixtures.ts', '--out', dir, ...args], { encoding: 'utf8' });
    t.is(generate().status, 0, 'committed fixtures are what the generator makes');
    const victim = join(dir, 'frames', 'all-types.bin');
    const original = readFileSync(victim);
    writeFileSync(victim, Buffer.concat([original, Buffer.from([0])]));
    const refused = generate();
    t.is(refused.status, 1);
    t.regex(refused.stderr, /refusing to overwrite 1 fixture/);
    t.notDeepEqual(readFileSync(victim), original, 'left untouched');
    t.is(generate('--force').status, 0);
    t.deepEqual(readFileSync(victim), original);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
