/**
 * The Node side of the Python interop tests (interop/python/tests/test_node_interop.py).
 * pyarrow is the referee: whatever crosses the ring is compared with the same
 * data written as an Arrow IPC file, which pyarrow and apache-arrow each read
 * with their own IPC readers.
 *   publish NAME ROWS IPC      writes the every-type table and a slice of it as IPC batches, publishes both, drains
 *   compare NAME IPC COUNT     takes COUNT frames; frame i must equal IPC batch i; prints {"frames": n, "differences": [...]}
 *   columns NAME               takes one frame (host or device) and prints {"columns": {name: [values]}}
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { RecordBatchFileWriter, Table, tableFromIPC } from 'apache-arrow';
import { Consumer, Producer } from '../../lib/index.js';
import { plainValue, tableDifference } from '../../lib/arrow/compare.js';
import { allTypesTable } from './all-types.js';

const [role, name, ...args] = process.argv.slice(2);
const say = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

async function publish(rows: number, ipc: string): Promise<void> {
  const full = allTypesTable(rows);
  const tables = [full, full.slice(3, rows - 2)];
  writeFileSync(ipc, RecordBatchFileWriter.writeAll(new Table(tables.flatMap((t) => t.batches))).toUint8Array(true));
  const producer = Producer.open(name!);
  for (const t of tables) await producer.publish(t);
  say({ published: tables.length });
  await producer.drain();
  producer.close();
}

async function compare(ipc: string, count: number): Promise<void> {
  const expected = tableFromIPC(readFileSync(ipc));
  const consumer = Consumer.open(name!);
  const differences: (string | null)[] = [];
  for (let i = 0; i < count; i++) {
    const frame = await consumer.next({ timeout: 30_000 });
    differences.push(tableDifference(new Table(expected.batches[i]!), frame.toTable()));
    frame.release();
  }
  consumer.close();
  say({ frames: count, differences });
}

async function columns(): Promise<void> {
  const consumer = Consumer.open(name!);
  const frame = await consumer.next({ timeout: 30_000 });
  const table = frame.toTable();
  say({ columns: Object.fromEntries(table.schema.fields.map((f) => [f.name, Array.from(table.getChild(f.name)!, plainValue)])) });
  frame.release();
  consumer.close();
}

if (role === 'columns') await columns();
else if (role === 'publish') await publish(Number(args[0]), args[1]!);
else if (role === 'compare') await compare(args[0]!, Number(args[1]));
else throw new Error(`unknown role ${role}`);
