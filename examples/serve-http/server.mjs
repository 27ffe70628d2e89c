// A Node HTTP server that takes frames from a ring ('ticks') and streams each
// one to every connected browser as an Arrow IPC stream
// (application/vnd.apache.arrow.stream): one schema, then a record batch per
// frame. The page (index.html) reads it with apache-arrow in the browser.
//
//   node server.mjs [PORT] [RING]   (default 8080, 0 picks a free one; ring 'ticks')
//   GET /                       the page
//   GET /stream?frames=N        the recent frames, then live ones; ends after N if given
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Consumer, Ring } from 'gpuring';
import { tableToIPC } from 'apache-arrow';

const RECENT = 20; // frames a new client gets at once, so the page is never empty
const require = createRequire(import.meta.url);
const page = readFileSync(new URL('./index.html', import.meta.url));
const arrowBundle = readFileSync(require.resolve('apache-arrow/Arrow.es2015.min') /* the browser bundle (global Arrow) */);

/** A frame as the bytes of one IPC stream message sequence: [schema] and the record batch. */
function messages(table) {
  // tableToIPC copies out of the ring's memory, so the frame can be released at once.
  const ipc = tableToIPC(table, 'stream');
  const view = new DataView(ipc.buffer, ipc.byteOffset, ipc.byteLength);
  const schemaEnd = 8 + view.getInt32(4, true); // continuation marker, length, schema flatbuffer
  return { schema: ipc.subarray(0, schemaEnd), batch: ipc.subarray(schemaEnd, ipc.length - 8) }; // minus end-of-stream
}

const recent = [];
const clients = new Set();

function send(client, frame) {
  client.res.write(frame.batch);
  if (++client.sent === client.limit) end(client);
}

function end(client) {
  clients.delete(client);
  client.res.end(new Uint8Array([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])); // end of stream
}

function stream(req, res, limit) {
  res.writeHead(200, { 'content-type': 'application/vnd.apache.arrow.stream', 'cache-control': 'no-store' });
  const client = { res, limit, sent: 0 };
  if (recent.length) res.write(recent[0].schema);
  else client.needsSchema = true;
  clients.add(client);
  req.on('close', () => clients.delete(client));
  for (const frame of recent.slice(-limit)) if (clients.has(client)) send(client, frame);
}

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/') return res.writeHead(200, { 'content-type': 'text/html' }).end(page);
  if (url.pathname === '/arrow.js') return res.writeHead(200, { 'content-type': 'text/javascript' }).end(arrowBundle);
  if (url.pathname === '/stream') return stream(req, res, Number(url.searchParams.get('frames')) || Infinity);
  res.writeHead(404).end();
});

server.listen(Number(process.argv[2] ?? 8080), '127.0.0.1', () => console.log(`serving http://127.0.0.1:${server.address().port}/`));

const ring = process.argv[3] ?? 'ticks';
await Ring.waitFor(ring);
const consumer = Consumer.open(ring);
process.once('SIGINT', () => (consumer.close(), server.close(), server.closeAllConnections()));
for await (const f of consumer) {
  const frame = messages(f.toTable());
  f.release();
  recent.push(frame);
  if (recent.length > RECENT) recent.shift();
  for (const client of clients) {
    if (client.needsSchema) (client.res.write(frame.schema), (client.needsSchema = false));
    send(client, frame);
  }
}
