// GPU suite (npm run test:gpu). Every test here needs an NVIDIA GPU and its
// driver; where there is none each test is reported as skipped, with the reason.
import test from 'ava';
import { native } from '../../lib/native.js';

const probe = native().probeCudaDriver();
const gpu = probe.found && (probe.devices ?? 0) > 0;
const skipReason = probe.found ? `no CUDA device visible (${probe.error ?? 'cuDeviceGetCount returned 0'})` : `no CUDA driver: ${probe.error}`;
const gpuTest = gpu ? test : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${skipReason}`);

gpuTest('the CUDA driver is found at run time through dlopen, with at least one device', (t) => {
  t.true(probe.found);
  t.true((probe.driverVersion ?? 0) >= 12000, `driver ${probe.driverVersion}`);
  t.true((probe.devices ?? 0) >= 1);
});
