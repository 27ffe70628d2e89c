#!/usr/bin/env node
// The gpuring CLI (compiled from lib/cli/main.ts by `npm install`).
import { run } from '../dist/cli/main.js';

process.exitCode = await run(process.argv.slice(2));
