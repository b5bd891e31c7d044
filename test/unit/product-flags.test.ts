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
