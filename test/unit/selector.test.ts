import t from 'tap'
import { LabelSelector } from '../../src/select/selector.js'

type Labels = Record<string, string> | undefined

interface Row {
  selector: string
  match: Labels[]
  noMatch: Labels[]
  empty?: boolean
}

const rows: Row[] = [
  { selector: '', match: [undefined, {}, { a: 'b' }], noMatch: [], empty: true },
  { selector: '   ', match: [undefined, { a: 'b' }], noMatch: [], empty: true },
  { selector: 'a=b', match: [{ a: 'b' }, { a: 'b', c: 'd' }], noMatch: [undefined, {}, { a: 'c' }, { a: '' }, { b: 'b' }] },
  { selector: 'a==b', match: [{ a: 'b' }], noMatch: [{}, { a: 'bb' }] },
  { selector: ' a = b ', match: [{ a: 'b' }], noMatch: [{ a: ' b' }] },
  { selector: 'a!=b', match: [undefined, {}, { a: 'c' }, { a: '' }], noMatch: [{ a: 'b' }] },
  { selector: 'a=', match: [{ a: '' }], noMatch: [{}, { a: 'b' }] },
  {
    selector: 'crd-migrator.io/managed=true',
    match: [{ 'crd-migrator.io/managed': 'true' }],
    noMatch: [{ 'crd-migrator.io/managed': 'false' }, { managed: 'true' }],
  },
  { selector: 'a', match: [{ a: '' }, { a: 'x' }], noMatch: [undefined, {}, { b: 'x' }] },
  { selector: '!a', match: [undefined, {}, { b: 'x' }], noMatch: [{ a: '' }, { a: 'x' }] },
  { selector: '! a', match: [{}], noMatch: [{ a: 'x' }] },
  {
    selector: 'env in (prod, staging)',
    match: [{ env: 'prod' }, { env: 'staging' }],
    noMatch: [undefined, { env: 'dev' }, { env: 'prod, staging' }],
  },
  { selector: 'env in (prod)', match: [{ env: 'prod' }], noMatch: [{ env: 'Prod' }, {}] },
  { selector: 'env notin (prod,staging)', match: [undefined, {}, { env: 'dev' }], noMatch: [{ env: 'prod' }, { env: 'staging' }] },
  { selector: 'a=b,c', match: [{ a: 'b', c: '' }], noMatch: [{ a: 'b' }, { c: 'x' }] },
  { selector: 'a=b, !c, d!=e', match: [{ a: 'b' }, { a: 'b', d: 'f' }], noMatch: [{ a: 'b', c: '1' }, { a: 'b', d: 'e' }, {}] },
  {
    selector: 'env in (prod,staging),tier notin (frontend, edge),team',
    match: [
      { env: 'prod', tier: 'backend', team: 'x' },
      { env: 'staging', team: '' },
    ],
    noMatch: [{ env: 'prod', tier: 'edge', team: 'x' }, { env: 'dev', team: 'x' }, { env: 'prod' }, { env: 'staging,tier', team: 'x' }],
  },
  { selector: 'a in (x),b in (y)', match: [{ a: 'x', b: 'y' }], noMatch: [{ a: 'x' }, { a: 'x', b: 'x' }] },
]

for (const row of rows) {
  t.test(`selector ${JSON.stringify(row.selector)}`, async (t) => {
    const s = LabelSelector.parse(row.selector)
    t.equal(s.empty, row.empty ?? false, 'empty')
    for (const labels of row.match) t.equal(s.matches(labels), true, `matches ${JSON.stringify(labels)}`)
    for (const labels of row.noMatch) t.equal(s.matches(labels), false, `does not match ${JSON.stringify(labels)}`)
  })
}

t.test('label values are own properties only', async (t) => {
  t.equal(LabelSelector.parse('toString').matches({}), false, 'exists does not see the prototype')
  t.equal(LabelSelector.parse('constructor=x').matches({}), false)
})

const garbage = ['a b', 'a in x', 'a in (x', 'a=b=c', '=b', 'a=(b)', '!a=b', '!', 'in (a)', '(a)', 'a ~= b']

for (const text of garbage) {
  t.test(`garbage ${JSON.stringify(text)} throws`, async (t) => {
    t.throws(() => LabelSelector.parse(text), { message: `invalid label selector ${JSON.stringify(text)}` }, 'names the selector')
    try {
      LabelSelector.parse(text)
    } catch (err) {
      t.match((err as Error).message, /cannot parse "/, 'names the bad part')
    }
  })
}

t.test('the bad requirement is quoted on its own', async (t) => {
  t.throws(() => LabelSelector.parse('a=b, c d, e'), { message: 'invalid label selector "a=b, c d, e": cannot parse "c d"' })
})

t.test('set-based requirements without a space before the parenthesis, as kubectl accepts them', async (t) => {
  let s: LabelSelector | undefined
  try {
    s = LabelSelector.parse('env in(prod,staging)')
  } catch {
    /* reported below */
  }
  t.equal(s?.matches({ env: 'prod' }), true, '"env in(prod,staging)" matches env=prod', {})
})
