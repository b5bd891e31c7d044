// Types of scripts/dev-build.mjs, for the tests that import it.
import type { SpawnSyncReturns, StdioOptions } from 'node:child_process'
export function devBuildIsStale(root: string): boolean
export function buildDev(root: string, stdio?: StdioOptions): SpawnSyncReturns<string>
