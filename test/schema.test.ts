// schema/layout.json, the C header and the TypeScript codec describe the same
// bytes: the header is dumped by a C program built from it and compared.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import * as L from '../lib/codec/layout.js';
import { ERROR_CODES } from '../lib/errors.js';
import { cProgram, root } from './helpers/ring.js';

const schema = JSON.parse(readFileSync(join(root, 'schema/layout.json'), 'utf8'));
const header = JSON.parse(execFileSync(cProgram('layout_dump'), { encoding: 'utf8' }));

test('schema/layout.json matches the C header: every struct, field, constant and error code', (t) => {
  t.deepEqual(schema.structs, header.structs);
  t.deepEqual(schema.constants, header.constants);
  t.deepEqual(schema.error_codes, header.error_codes);
});

test('the TypeScript codec uses the same offsets and limits', (t) => {
  const s = schema.structs;
  const offsets = (name: string) => Object.fromEntries(Object.entries(s[name].fields).map(([k, v]) => [k, (v as { offset: number }).offset]));
  const camel = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k.replace(/_(.)/g, (_m, c: string) => c.toUpperCase()), v]));
  t.is(L.HEADER_BYTES, s.body_header.size);
  t.is(L.NODE_BYTES, s.body_node.size);
  t.is(L.BUFFER_BYTES, s.body_buffer.size);
  for (const [k, v] of Object.entries(L.Header)) t.is(v as number | undefined, camel(offsets('body_header'))[k], `body header ${k}`);
  for (const [k, v] of Object.entries(L.Node)) t.is(v as number | undefined, camel(offsets('body_node'))[k], `node ${k}`);
  for (const [k, v] of Object.entries(L.Buffer_)) t.is(v as number | undefined, camel(offsets('body_buffer'))[k], `buffer ${k}`);
  const c = schema.constants;
  t.is(L.BODY_MAGIC.toString(16), c.body_magic);
  t.is(L.BODY_VERSION, c.body_version);
  t.is(L.MAX_BODY_BYTES, c.max_body_bytes);
  t.is(L.MAX_NODES, c.max_nodes);
  t.is(L.MAX_BUFFERS, c.max_buffers);
  t.is(L.MAX_COUNT, c.max_count);
  t.is(L.HANDLE_BYTES, c.handle_bytes);
  t.deepEqual([...L.MEMORY_KINDS], schema.memory_kinds);
  t.deepEqual(ERROR_CODES.filter((e) => e !== 'NATIVE_LOAD'), schema.error_codes);
});

test('the field tables in interop/SPEC.md are the ones the schema renders', async (t) => {
  const { renderTables, specSection } = await import('../scripts/spec-tables.js');
  const spec = readFileSync(join(root, 'interop/SPEC.md'), 'utf8');
  t.is(specSection(spec), renderTables(schema), 'run: node --import tsx scripts/spec-tables.ts');
});
