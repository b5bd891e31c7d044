import { readFileSync } from 'node:fs'
import t from 'tap'
import { parse } from 'yaml'
import { cell, chartReadme, renderChartReadme, valueDocs } from '../../dev/chart-docs.js'

t.test('the committed chart README is what values.yaml and Chart.yaml render (npm run chart-docs)', async (t) => {
  const { file, expected } = chartReadme()
  let committed = ''
  try {
    committed = readFileSync(file, 'utf8')
  } catch (err) {
    t.fail(`${file} cannot be read: ${(err as Error).message}; run npm run chart-docs`)
  }
  t.ok(committed === expected, 'charts/crd-migrator/README.md is up to date; if not, run: npm run chart-docs')
  t.same(
    committed.split('\n').filter((l) => !expected.split('\n').includes(l)),
    [],
    'no line differs',
  )
})

t.test('every value of values.yaml is in the table: itself or a documented map holding it', async (t) => {
  const { expected } = chartReadme()
  const documented = new Set([...expected.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1]!))
  t.ok(documented.size > 50, `the table lists ${documented.size} values`)
  const values = parse(readFileSync(new URL('../../charts/crd-migrator/values.yaml', import.meta.url), 'utf8')) as Record<string, unknown>
  const undocumented: string[] = []
  const walk = (value: unknown, keyPath: string[]) => {
    const key = keyPath.join('.')
    if (keyPath.length > 0 && documented.has(key)) return
    if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
      for (const [k, v] of Object.entries(value)) walk(v, [...keyPath, k])
    } else undocumented.push(key)
  }
  walk(values, [])
  t.same(undocumented, [], 'each has a `# --` comment (or sits in a documented map)')
})

t.test('helm-docs comments: a `# --` block above a key, nested keys by indentation', async (t) => {
  const yaml = [
    '# Not documentation: a file header.',
    '',
    '# -- The image.',
    'image:',
    '  # -- Repository,',
    '  # on two lines.',
    '  repository: crd-migrator',
    '  # A plain comment: describes nothing.',
    '  tag: ""',
    'list:',
    '  # -- ignored: a list item follows',
    '  - name: a',
    '    value: 1',
    '# -- Paragraphs:',
    '#',
    '# the second.',
    'nested:',
    '  deeper:',
    '    # -- Port | "quoted" <port>.',
    '    port: 9443',
    '# -- Dropped by the blank line below.',
    '',
    'undocumented: {}',
  ].join('\n')
  t.same(valueDocs(yaml), [
    { key: 'image', description: 'The image.', value: { repository: 'crd-migrator', tag: '' } },
    { key: 'image.repository', description: 'Repository, on two lines.', value: 'crd-migrator' },
    { key: 'nested', description: 'Paragraphs:<br>the second.', value: { deeper: { port: 9443 } } },
    { key: 'nested.deeper.port', description: 'Port | "quoted" <port>.', value: 9443 },
  ])
  const readme = renderChartReadme('name: x\ndescription: X.\nversion: 1.0.0\nappVersion: "2.0"\n', yaml)
  t.match(readme, '| `nested.deeper.port` | int | `9443` | Port \\| "quoted" &lt;port&gt;. |')
  t.match(readme, '| `image.repository` | string | `"crd-migrator"` | Repository, on two lines. |')
  t.match(readme, 'Chart version 1.0.0, app version 2.0.')
})

t.test('a table cell: one line, pipes escaped, placeholders outside code spans escaped', async (t) => {
  t.equal(cell('a|b'), 'a\\|b')
  t.equal(cell('one\ntwo'), 'one two')
  t.equal(cell('<ns> and `<kept>`'), '&lt;ns&gt; and `<kept>`')
})
