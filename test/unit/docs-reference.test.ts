/**
 * The generated references under docs/reference/ are what the code renders today: a new
 * flag, setting, metric or annotation changes the page, and this test fails until
 * `npm run docs` has written it.
 */
import { readFileSync } from 'node:fs'
import { Command, Option } from 'commander'
import t from 'tap'
import { Counter, Histogram, Registry } from 'prom-client'
import { referencePages, renderCliReference, renderConfigurationReference, renderMetricsReference } from '../../dev/docs/reference.js'

const root = new URL('../../', import.meta.url)

t.test('every generated page is up to date (run npm run docs)', async (t) => {
  const pages = referencePages()
  t.ok(pages.length >= 4, 'cli, configuration, metrics and annotations')
  for (const { file, text } of pages) {
    let committed = ''
    try {
      committed = readFileSync(new URL(file, root), 'utf8')
    } catch (err) {
      t.fail(`${file} cannot be read (${(err as Error).message}): run npm run docs`)
      continue
    }
    const expectedLines = new Set(text.split('\n'))
    t.ok(committed === text, `${file} is up to date; if not, run npm run docs`, {
      // The first lines that differ, to see what changed without a diff tool.
      stale: committed
        .split('\n')
        .filter((l) => !expectedLines.has(l))
        .slice(0, 5),
      missing: text
        .split('\n')
        .filter((l) => !committed.split('\n').includes(l))
        .slice(0, 5),
    })
  }
})

t.test('the CLI page follows the program: a new command, argument or option appears without a change to the generator', async (t) => {
  const program = new Command().name('tool').description('A tool.')
  program
    .command('frob')
    .description('frobs things')
    .argument('<thing...>', 'what to frob')
    .option('--level <n>', 'how hard', '3')
    .addOption(new Option('--mode <m>', 'which way').choices(['up', 'down']))
    .option('--name <value>', 'a wrapped\n  help text naming <crd>')
    .addHelpText('after', '\nExamples:\n  tool frob x')
  program.command('secret', { hidden: true }).description('not for users')
  const page = renderCliReference(program)
  t.match(page, '## tool\n')
  t.match(page, '### tool frob\n')
  t.match(page, '- [`frob`](#tool-frob): frobs things')
  t.match(page, '- `<thing...>`: what to frob')
  t.match(page, '- `--level <n>`: how hard (default: "3")')
  t.match(page, '- `--mode <m>`: which way (choices: "up", "down")')
  t.match(page, '- `--name <value>`: a wrapped help text naming &lt;crd&gt;\n', 'one line; a placeholder is not taken for HTML')
  t.match(page, '```text\nExamples:\n  tool frob x\n```', 'text added to --help (examples) is kept')
  t.notMatch(page, 'secret', 'hidden commands stay hidden, as in --help')
})

t.test('the configuration page: every setting with its default; fields a later table adds are shown', async (t) => {
  const settings = [
    { path: 'a.b', flag: 'a-b', env: 'X_A_B', kind: 'int', description: 'how many' },
    { path: 'c', flag: 'c', env: 'X_C', kind: 'string', description: 'which', choices: ['p', 'q'] },
  ]
  const page = renderConfigurationReference(settings, { a: { b: 4, d: 'x' }, c: 'p', e: { f: [] } })
  t.match(page, '| `a.b` | `--a-b` | `X_A_B` | int | `4` | how many |')
  t.match(page, '| `c` | `--c` | `X_C` | string | `p` | which; choices: p, q |')
  t.match(page, '| `a.d` | `x` |', 'a key without a setting is listed as config file only')
  t.match(page, '| `e.f` | (none) |')
  t.notMatch(page, '| `c` | `p` |', 'a setting is not listed twice')
})

t.test('the metrics page: name, type, labels and help from the registry', async (t) => {
  const registry = new Registry()
  new Counter({ name: 'x_total', help: 'Things | counted.', labelNames: ['crd'], registers: [registry] })
  new Histogram({ name: 'x_seconds', help: 'How long.', labelNames: ['phase'], registers: [registry] })
  const page = renderMetricsReference([{ component: 'demo', registry }])
  t.match(page, '## demo\n')
  t.match(page, '| `x_total` | counter | `crd` | Things \\| counted. |')
  t.match(page, '| `x_seconds` | histogram | `phase` | How long. |')
})
