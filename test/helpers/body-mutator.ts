/**
 * Structure-aware mutations of valid frame bodies, for the differential fuzz
 * run. Random bytes mostly die at the header check; these mutations move one
 * field at a time to the values validators get wrong (0, ±1, powers of two
 * around 2^31, 2^32, 2^53 and 2^64, another field's value) and edit the string
 * table with the characters format strings are made of, so most mutants reach
 * the deep checks: buffer sizes, offsets, children, formats, dictionaries.
 * Deterministic for a seed, so a failure names a reproducible round.
 */
import { Buffer_, BUFFER_BYTES, Header, HEADER_BYTES, Node, NODE_BYTES } from '../../lib/codec/layout.js';

type Field = [at: number, bytes: 2 | 4 | 8];

const HEADER_FIELDS: Field[] = [
  [Header.version, 2], [Header.flags, 2], [Header.bodyLength, 4], [Header.nodeCount, 4], [Header.bufferCount, 4],
  [Header.rootCount, 4], [Header.dictionaryCount, 4], [Header.stringsLength, 4], [Header.rowCount, 8],
  [Header.metadataOffset, 4], [Header.metadataLength, 4], [Header.syncKind, 2],
];
const NODE_FIELDS: Field[] = Object.entries(Node).map(([name, at]) => [at, ['length', 'nullCount', 'offset'].includes(name) ? 8 : 4]);
const BUFFER_FIELDS: Field[] = [[Buffer_.kind, 2], [Buffer_.flags, 2], [Buffer_.deviceOrdinal, 4], [Buffer_.offset, 8], [Buffer_.length, 8], [Buffer_.allocId, 8]];

const EDGES = [0n, 1n, 2n, 3n, 7n, 8n, 63n, 64n, 2n ** 31n - 1n, 2n ** 31n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 63n, 2n ** 64n - 1n];
/** Bytes format strings, offsets and time zones are made of, plus NUL and bytes that are never UTF-8. */
const STRING_BYTES = Buffer.from('\0\xff\xc0:,-+0123456789wdtsSDmunlLzZuUbcCiIefg', 'latin1');

export class BodyMutator {
  private state: number;

  constructor(private readonly seeds: Uint8Array[], seed: number) {
    this.state = seed >>> 0 || 1;
  }

  /** A uniformly drawn integer in [0, n). */
  rand(n: number): number {
    // xorshift32: tiny, fast, and the same sequence on every machine.
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state % n;
  }

  /** One to three mutations of one seed body (a fresh copy). */
  next(): Uint8Array {
    let body: Uint8Array = this.seeds[this.rand(this.seeds.length)]!.slice();
    for (let k = 1 + this.rand(3); k > 0; k--) body = this.mutate(body);
    return body;
  }

  private mutate(body: Uint8Array): Uint8Array {
    const v = new DataView(body.buffer, body.byteOffset, body.byteLength);
    const nodes = v.getUint32(Header.nodeCount, true);
    const buffers = v.getUint32(Header.bufferCount, true);
    const buffersAt = HEADER_BYTES + nodes * NODE_BYTES;
    const stringsAt = buffersAt + buffers * BUFFER_BYTES;
    const inBody = (at: number, f: Field) => at + f[1] <= body.length;
    switch (this.rand(9)) {
      case 0:
        this.setField(v, 0, this.pick(HEADER_FIELDS));
        break;
      case 1:
      case 2:
        if (nodes) this.setField(v, HEADER_BYTES + this.rand(nodes) * NODE_BYTES, this.pick(NODE_FIELDS), inBody);
        break;
      case 3:
      case 4:
        if (buffers) this.setField(v, buffersAt + this.rand(buffers) * BUFFER_BYTES, this.pick(BUFFER_FIELDS), inBody);
        break;
      case 5:
        if (stringsAt < body.length) body[stringsAt + this.rand(body.length - stringsAt)] = STRING_BYTES[this.rand(STRING_BYTES.length)]!;
        break;
      case 6:
        if (nodes > 1) {
          const from = HEADER_BYTES + this.rand(nodes) * NODE_BYTES;
          if (from + NODE_BYTES <= body.length) body.copyWithin(HEADER_BYTES + this.rand(nodes) * NODE_BYTES, from, from + NODE_BYTES);
        }
        break;
      case 7:
        return this.resizeStrings(body, v);
      default:
        body[this.rand(body.length)] = this.rand(256);
    }
    return body;
  }

  /** Grows or shrinks the string table by 8 bytes, keeping the header's lengths consistent. */
  private resizeStrings(body: Uint8Array, v: DataView): Uint8Array {
    const strings = v.getUint32(Header.stringsLength, true);
    const delta = this.rand(2) ? 8 : -Math.min(8, strings);
    const out = new Uint8Array(Math.max(HEADER_BYTES, body.length + delta));
    out.set(body.subarray(0, out.length));
    const w = new DataView(out.buffer);
    w.setUint32(Header.bodyLength, out.length, true);
    w.setUint32(Header.stringsLength, Math.max(0, strings + delta), true);
    return out;
  }

  private pick<T>(list: readonly T[]): T {
    return list[this.rand(list.length)]!;
  }

  /** Sets field `f` of the record at `base` to an edge value, a neighbour of its value or another field's. */
  private setField(v: DataView, base: number, f: Field, fits: (at: number, f: Field) => boolean = () => true): void {
    const at = base + f[0];
    if (!fits(at, f) || at + f[1] > v.byteLength) return;
    const old = read(v, at, f[1]);
    const choice = this.rand(4);
    const value = choice === 0 ? old + 1n : choice === 1 ? old - 1n : choice === 2 ? old * 2n : EDGES[this.rand(EDGES.length)]!;
    write(v, at, f[1], value);
  }
}

function read(v: DataView, at: number, bytes: 2 | 4 | 8): bigint {
  return bytes === 2 ? BigInt(v.getUint16(at, true)) : bytes === 4 ? BigInt(v.getUint32(at, true)) : v.getBigUint64(at, true);
}

function write(v: DataView, at: number, bytes: 2 | 4 | 8, value: bigint): void {
  const wrapped = BigInt.asUintN(bytes * 8, value);
  if (bytes === 2) v.setUint16(at, Number(wrapped), true);
  else if (bytes === 4) v.setUint32(at, Number(wrapped), true);
  else v.setBigUint64(at, wrapped, true);
}
