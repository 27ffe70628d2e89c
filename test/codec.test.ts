// The TypeScript and C codecs agree byte for byte, and reject the same damage
// with the same error code.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import test from 'ava';
import { tableDifference } from '../lib/arrow/compare.js';
import { describeBatch } from '../lib/arrow/table-writer.js';
import { BodyScratch } from '../lib/codec/body-scratch.js';
import { BodyTemplate } from '../lib/codec/body-template.js';
import { hostBuffer, type FrameDescription } from '../lib/codec/description.js';
import { decodeFrame } from '../lib/codec/decode.js';
import { encodeFrame } from '../lib/codec/encode.js';
import { Buffer_, HEADER_BYTES, Node, NODE_BYTES } from '../lib/codec/layout.js';
import { GpuringError } from '../lib/index.js';
import { allTypesTable, wideTable } from './helpers/all-types.js';
import { cProgram } from './helpers/ring.js';

/** Describes a table with every buffer at a made-up arena offset (no shared memory needed). */
function bodyOf(table: Parameters<typeof describeBatch>[0]): Uint8Array {
  let at = 64;
  const placer = { place: (b: Uint8Array) => hostBuffer('/gpuring.codec.p0g1.a0', (at += Math.ceil(b.length / 64) * 64 + 64), b.length) };
  return encodeFrame(describeBatch(table, placer));
}

/** What the C codec makes of `body`: its re-encoding, or its error code. */
function cCodec(body: Uint8Array): { bytes?: Uint8Array; code?: string } {
  const r = spawnSync(cProgram('body_roundtrip'), { input: body, maxBuffer: 1 << 28 });
  if (r.status === 0) return { bytes: new Uint8Array(r.stdout) };
  return { code: r.stderr.toString().trim() };
}

function tsCode(body: Uint8Array): string {
  try {
    decodeFrame(body);
    return 'OK';
  } catch (error) {
    if (!(error instanceof GpuringError)) throw error;
    return error.code;
  }
}

const table = allTypesTable(23);
const cases = {
  'every type': table,
  'a slice': table.slice(5, 17),
  'zero rows': table.slice(0, 0),
  '1,000 columns': wideTable(1000, 3),
};

for (const [what, t0] of Object.entries(cases)) {
  test(`${what}: decode(encode(d)) == d, and the C codec re-encodes the same bytes`, (t) => {
    const body = bodyOf(t0);
    const described = decodeFrame(body);
    t.deepEqual(encodeFrame(described), body);
    const c = cCodec(body);
    t.is(c.code, undefined, `C accepted it (${c.code})`);
    t.deepEqual(c.bytes, body);
  });
}

test('descriptions survive encoding, tables their description', (t) => {
  const body = bodyOf(table);
  const d = decodeFrame(body);
  t.is(d.columns.length, 38);
  t.is(d.dictionaries.length, 2);
  t.deepEqual(d.metadata, [['producer', 'gpuring tests']]);
  t.is(tableDifference(table, table), null);
  t.not(tableDifference(table, table.slice(1)), null, 'the comparison does notice differences');
});

test('a leading U+FEFF in names and metadata survives decoding, as in C and Python (TextDecoder drops it by default)', (t) => {
  const d = decodeFrame(bodyOf(table));
  d.columns[0]!.name = '\ufeffid';
  d.metadata = [['\ufeffkey', '\ufeffvalue']];
  const back = decodeFrame(encodeFrame(d));
  t.is(back.columns[0]!.name, '\ufeffid');
  t.deepEqual(back.metadata, [['\ufeffkey', '\ufeffvalue']]);
});

const view = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);
const damages: [string, string, (b: Uint8Array) => Uint8Array][] = [
  ['FRAME_INVALID', 'bad magic', (b) => (view(b).setUint32(0, 1, true), b)],
  ['FRAME_INVALID', 'truncated', (b) => b.subarray(0, b.length - 8)],
  ['FRAME_INVALID', 'node count off by one', (b) => (view(b).setUint32(12, view(b).getUint32(12, true) + 1, true), b)],
  ['FRAME_INVALID', 'unknown format', (b) => (b[HEADER_BYTES + 1 * NODE_BYTES + Node.formatLength] = 0, b)],
  ['FRAME_BOUNDS', 'name outside the strings', (b) => (view(b).setUint32(HEADER_BYTES + Node.nameOffset, 1 << 30, true), b)],
  ['FRAME_BOUNDS', 'null count above length', (b) => (view(b).setBigInt64(HEADER_BYTES + Node.nullCount, 1000n, true), b)],
  ['FRAME_BOUNDS', 'row count above 2^53', (b) => (view(b).setBigUint64(32, 1n << 60n, true), b)],
  ['FRAME_INVALID', 'unknown node flags', (b) => (view(b).setUint32(HEADER_BYTES + Node.flags, 64, true), b)],
  ['FRAME_INVALID', 'dictionary pointing backwards', (b) => (view(b).setInt32(HEADER_BYTES + 2 * NODE_BYTES + Node.dictionary, 0, true), b)],
];

for (const [code, what, damage] of damages) {
  test(`${what}: ${code} from both codecs`, (t) => {
    const body = damage(bodyOf(table).slice());
    t.is(tsCode(body), code);
    t.is(cCodec(body).code, code);
  });
}

test("a body's verdict does not depend on the bodies decoded before it", (t) => {
  // The same schema with an absent buffer moved to 2^60: TypeScript once re-checked
  // descriptions with zod, cached per schema by a key that ignored buffer offsets,
  // so this body was FRAME_INVALID on its own and accepted after its valid twin.
  const good = readFileSync(new URL('../fixtures/frames/utf8-slice.bin', import.meta.url));
  const moved = new Uint8Array(good);
  const buffers = HEADER_BYTES + view(moved).getUint32(12, true) * NODE_BYTES;
  view(moved).setBigUint64(buffers + Buffer_.offset, 1n << 60n, true);
  t.is(tsCode(moved), 'FRAME_BOUNDS');
  t.is(tsCode(new Uint8Array(good)), 'OK');
  t.is(tsCode(moved), 'FRAME_BOUNDS');
  t.is(cCodec(moved).code, 'FRAME_BOUNDS');
});

test('nesting deeper than 64 levels is refused by both codecs', (t) => {
  // 70 nested structs around one int32 column, written by hand.
  const depth = 70;
  const nodes = Array.from({ length: depth + 1 }, (_, i) => ({ format: i < depth ? '+s' : 'i', children: i < depth ? 1 : 0 }));
  const strings = nodes.map((n) => n.format).join('');
  const size = HEADER_BYTES + nodes.length * NODE_BYTES + Math.ceil(strings.length / 8) * 8;
  const body = new Uint8Array(size);
  const v = view(body);
  v.setUint32(0, 0x46525047, true);
  v.setUint16(4, 1, true);
  v.setUint32(8, size, true);
  v.setUint32(12, nodes.length, true);
  v.setUint32(20, 1, true);
  v.setUint32(28, strings.length, true);
  let at = 0;
  nodes.forEach((n, i) => {
    const base = HEADER_BYTES + i * NODE_BYTES;
    v.setUint32(base + Node.formatOffset, at, true);
    v.setUint32(base + Node.formatLength, n.format.length, true);
    v.setUint32(base + Node.childCount, n.children, true);
    v.setInt32(base + Node.dictionary, -1, true);
    at += n.format.length;
  });
  body.set(new TextEncoder().encode(strings), size - Math.ceil(strings.length / 8) * 8);
  t.is(tsCode(body), 'FRAME_INVALID');
  t.is(cCodec(body).code, 'FRAME_INVALID');
});

test('random damage: both codecs give the same verdict (and canonical bytes) on 400 mutated bodies', (t) => {
  const good = bodyOf(allTypesTable(5));
  let seed = 12345;
  const rand = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % n);
  let rejected = 0;
  for (let round = 0; round < 400; round++) {
    const body = good.slice();
    for (let k = 0; k <= round % 4; k++) body[rand(body.length)] = rand(256);
    const ts = tsCode(body);
    const c = cCodec(body);
    const cVerdict = c.code ?? 'OK';
    if (ts !== cVerdict) t.fail(`round ${round}: TypeScript says ${ts}, C says ${cVerdict}`);
    if (ts !== 'OK') rejected++;
    else if (!Buffer.from(encodeFrame(decodeFrame(body))).equals(c.bytes!)) t.fail(`round ${round}: canonical re-encodings differ`);
  }
  t.true(rejected > 100, `most mutations are caught (${rejected}/400)`);
  t.log(`${rejected} of 400 mutated bodies rejected, identically in both codecs`);
});

test('the encoder refuses any value it cannot write exactly, naming the field', (t) => {
  const table = allTypesTable(5).selectAt([0, 1]);
  const valid = () => describeBatch(table, { place: (b: Uint8Array) => hostBuffer('/gpuring.codec.p0g1.a0', 64, b.length) });
  t.true(encodeFrame(valid()).length > 0);
  const cases: [string, (d: FrameDescription) => void, RegExp][] = [
    ['a fractional row count', (d) => (d.rowCount = 1.5), /^invalid frame description: rowCount: must be an integer/],
    ['a length given as a string', (d) => ((d.columns[0] as unknown as { length: string }).length = '5'), /columns\[0\]\.length/],
    ['a 10-byte handle', (d) => (d.columns[1]!.buffers[1]!.handle = new Uint8Array(10)), /columns\[1\]\.buffers\[1\]\.handle: must be a Uint8Array of 64 bytes/],
    ['an unknown memory kind', (d) => ((d.columns[0]!.buffers[1] as unknown as { kind: string }).kind = 'gpu'), /buffers\[1\]\.kind/],
    ['a truthy number for a boolean', (d) => ((d.columns[0] as unknown as { nullable: number }).nullable = 1), /columns\[0\]\.nullable: must be a boolean/],
    ['a dictionary that is not there', (d) => (d.columns[0]!.dictionary = 0), /columns\[0\]\.dictionary/],
    ['an allocation id as a number', (d) => ((d.columns[0]!.buffers[0] as unknown as { allocationId: number }).allocationId = 5), /allocationId: must be a bigint/],
    ['a column name that is not a string', (d) => ((d.columns[0] as unknown as { name: number }).name = 7), /columns\[0\]\.name: must be a string/],
    ['metadata that is not pairs', (d) => ((d as unknown as { metadata: string[][] }).metadata = [['k']]), /^invalid frame description: metadata/],
    ['a column that contains itself', (d) => d.columns[0]!.children.push(d.columns[0]!), /nests deeper than 64 levels/],
  ];
  for (const [what, damage, message] of cases) {
    const d = valid();
    damage(d);
    const e = t.throws(() => encodeFrame(d), { instanceOf: GpuringError }, what);
    t.is(e?.code, 'INVALID_ARGUMENT', what);
    t.regex(e?.message ?? '', message, what);
  }
});

test('a body template writes the same bytes as encodeFrame for every frame of its layout, and refuses other layouts', (t) => {
  const source = allTypesTable(40);
  const [template, first] = BodyTemplate.encode(decodeFrame(bodyOf(source.slice(0, 10))), { holdArrays: true });
  t.deepEqual(first, bodyOf(source.slice(0, 10)));
  // Frames of the same schema: other lengths, null counts, offsets and buffer places.
  for (const [from, to] of [[0, 40], [3, 4], [5, 5], [17, 39]] as const) {
    const d = decodeFrame(bodyOf(source.slice(from, to)));
    t.deepEqual(template.fill(d), encodeFrame(d), `rows ${from}..${to}`);
  }
  const other = (edit: (d: FrameDescription) => void) => {
    const d = decodeFrame(bodyOf(source.slice(0, 10)));
    edit(d);
    return template.fill(d);
  };
  t.is(other((d) => (d.columns[0]!.name = 'renamed')), null, 'a renamed column');
  t.is(other((d) => (d.metadata = [['k', 'v']])), null, 'other schema metadata');
  t.is(other((d) => (d.columns[2]!.nullable = !d.columns[2]!.nullable)), null, 'other flags');
  t.is(other((d) => d.columns.pop()), null, 'one column fewer');
  t.is(other((d) => d.columns[1]!.buffers.pop()), null, 'one buffer fewer');
  // Per-frame values are checked as encodeFrame checks them.
  const e = t.throws(() => other((d) => (d.columns[1]!.length = 1.5)), { instanceOf: GpuringError });
  t.regex(e?.message ?? '', /columns\[1\]\.length: must be an integer/);
});

test('template bodies written into one reused scratch buffer are each exactly encodeFrame: no byte an earlier body left there survives', (t) => {
  const scratch = new BodyScratch();
  const dirty = () => scratch.take(1 << 16).bytes.fill(0xff); // what earlier bodies may have left, anywhere
  for (const table of [allTypesTable(3).selectAt([0, 1]), allTypesTable(5), wideTable(300, 2), wideTable(2000, 2)]) {
    const d = decodeFrame(bodyOf(table));
    const [template] = BodyTemplate.encode(d, { holdArrays: false });
    dirty();
    t.deepEqual(template.fill(d, scratch.take)?.slice(), encodeFrame(d), `${table.numCols} columns`);
  }
});

test("a template that does not hold arrays copies a handle written in place since (publishFrame's templates: a caller may reuse its arrays)", (t) => {
  const d = decodeFrame(bodyOf(allTypesTable(4).selectAt([0])));
  const [template] = BodyTemplate.encode(d, { holdArrays: false });
  const handle = d.columns[0]!.buffers.find((b) => b.kind === 'host')!.handle;
  handle.set(new TextEncoder().encode('/gpuring.codec.p0g1.a7'));
  t.deepEqual(template.fill(d), encodeFrame(d));
  t.regex(new TextDecoder().decode(template.fill(d)!), /a7/, 'the new arena name is in the body');
});
