import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import t from 'tap'
import { nodeFlagsOfShebang } from '../../dev/bench/product-flags.js'

t.test('the node flags of an executable script', async (t) => {
  const rows: Array<[string, string[]]> = [
    ['#!/usr/bin/env node\nx', []],
    ['#!/usr/bin/env -S node --max-semi-space-size=2\nx', ['--max-semi-space-size=2']],
    ['#!/usr/bin/env -S node --max-semi-space-size=2 --no-warnings\n', ['--max-semi-space-size=2', '--no-warnings']],
    ['#!/usr/bin/env -S node --max-semi-space-size=2', ['--max-semi-space-size=2']],
  ]
  for (const [text, flags] of rows) t.same(nodeFlagsOfShebang(text), flags, JSON.stringify(text))
  for (const text of ['import x\n', '#!/bin/sh\n', '#!/usr/bin/env -S node dist/main.js\n', '']) {
    t.throws(() => nodeFlagsOfShebang(text), /not a node shebang/, `refused: ${JSON.stringify(text)}`)
  }
})

t.test("the CLI's node flags are ones this Node accepts", async (t) => {
  // V8 flags come and go between releases; Node refuses to start on one it does not know.
  const flags = nodeFlagsOfShebang(readFileSync(new URL('../../src/cli/main.ts', import.meta.url), 'utf8'))
  t.ok(flags.includes('--heap-growing-percent=20'), 'the shebang is read', { flags })
  const run = spawnSync(process.execPath, [...flags, '--eval', 'process.stdout.write("started")'], { encoding: 'utf8' })
  t.equal(run.status, 0, 'node starts with them', { stderr: run.stderr })
  t.equal(run.stdout, 'started')
  const bad = spawnSync(process.execPath, ['--heap-growing-percentage=20', '--eval', '0'], { encoding: 'utf8' })
  t.not(bad.status, 0, 'and refuses a flag it does not know (the check has teeth)')
})
