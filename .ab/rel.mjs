import { Ring, Producer, Consumer } from '../dist/index.js';
import { tableFromArrays } from 'apache-arrow';
import { fork } from 'node:child_process';
const mode = process.argv[2];
const name = `exp-${process.pid}`;
if (mode === 'consumer') {
  const c = Consumer.open(process.argv[3]);
  for await (const f of c) { f.release(); }
} else {
  Ring.create(name, { slots: 4 }).close();
  const p = Producer.open(name);
  const child = fork(new URL(import.meta.url).pathname, ['consumer', name], { stdio: 'ignore' });
  process.on('uncaughtException', (e) => console.log('uncaught:', e.message));
  let n = 0;
  p.on('release', (id) => { n++; if (mode === 'throw' && n === 1) throw new Error('listener threw'); if (mode === 'close' && n === 2) p.close(); });
  const t = tableFromArrays({ a: new Float64Array([1, 2, 3]) });
  const timer = setTimeout(() => { console.log('HANG: published', i, 'released', n); child.kill(); process.exit(1); }, 5000);
  let i = 0;
  try { for (; i < 50; i++) await p.publish(t, { timeout: 4000 }); } catch (e) { console.log('publish failed', e.code, e.message); }
  clearTimeout(timer);
  console.log('done: published', i, 'released', n);
  child.kill(); try { p.close(); } catch {} Ring.unlink(name);
}
