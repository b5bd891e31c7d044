import { readFileSync } from 'node:fs'

/** `#!/usr/bin/env -S node --flag ...`: the line that makes dist/cli/main.js the `crd-migrator` executable. */
const SHEBANG = /^#!\/usr\/bin\/env(?: -S)? node((?: --[\w-]+(?:=\S+)?)*)\s*$/

/** The node flags in the first line of an executable script (none for a plain `#!/usr/bin/env node`). */
export function nodeFlagsOfShebang(text: string): string[] {
  const first = text.slice(0, text.indexOf('\n') >>> 0)
  const match = SHEBANG.exec(first)
  if (!match) throw new Error(`not a node shebang: ${JSON.stringify(first.slice(0, 120))}`)
  return match[1]!.split(' ').filter(Boolean)
}

/**
 * The node flags `crd-migrator` runs with wherever it is installed: its executable's
 * shebang (src/cli/main.ts; the Dockerfile's ENTRYPOINT repeats them, which
 * test/unit/dockerfile.test.ts checks). The bench runs ours with them, so it measures
 * what users run.
 */
export function productNodeFlags(): string[] {
  return nodeFlagsOfShebang(readFileSync(new URL('../../../src/cli/main.ts', import.meta.url), 'utf8'))
}
