// The tooling build (dev/tsconfig.json -> dist-dev/): whether it is missing or older than
// its sources, and how to make it. Used by scripts/test.mjs (the control-plane harness) and
// test/integration/bench-smoke.test.ts (the bench runs compiled, with child processes).
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'

function* filesUnder(dir, ext) {
  if (!existsSync(dir)) return
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    if (entry.isDirectory()) yield* filesUnder(p, ext)
    else if (entry.name.endsWith(ext)) yield p
  }
}

/**
 * True when a tooling source (dev/**.ts) has no output or a newer mtime than it, or a
 * product module the tooling build compiled (dist-dev/src/**) is older than its source.
 */
export function devBuildIsStale(root) {
  const devOut = join(root, 'dist-dev')
  const older = (js, ts) => !existsSync(js) || statSync(js).mtimeMs < statSync(ts).mtimeMs
  for (const ts of filesUnder(join(root, 'dev'), '.ts')) {
    if (older(join(devOut, relative(root, ts).replace(/\.ts$/, '.js')), ts)) return true
  }
  for (const js of filesUnder(join(devOut, 'src'), '.js')) {
    const ts = join(root, relative(devOut, js)).replace(/\.js$/, '.ts')
    if (existsSync(ts) && older(js, ts)) return true
  }
  return false
}

/** `tsc -p dev/tsconfig.json`, output to `stdio` (default: inherited); returns spawnSync's result. */
export function buildDev(root, stdio = 'inherit') {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
  return spawnSync(process.execPath, [tsc, '-p', join(root, 'dev', 'tsconfig.json')], { stdio, cwd: root, encoding: 'utf8' })
}
