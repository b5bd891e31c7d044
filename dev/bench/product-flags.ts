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
 * The node flags the `crd-migrator` executable runs with (`crd-migrator migrate`): its
 * shebang (src/cli/main.ts). The bench runs ours with them, so it measures what users run.
 * The image's ENTRYPOINT (`serve`: the webhook) sets none (test/unit/dockerfile.test.ts),
 * so the bench's webhook runs with Node's defaults.
 */
export function productNodeFlags(): string[] {
  return nodeFlagsOfShebang(readFileSync(new URL('../../../src/cli/main.ts', import.meta.url), 'utf8'))
}
