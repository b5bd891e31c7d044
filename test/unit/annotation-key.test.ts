/**
 * The annotation-key pattern has one source, ANNOTATION_KEY_PATTERN in config/schema.ts;
 * the chart must hold it as a Helm (Go RE2) regex, so it keeps a copy of the same text,
 * and this test keeps the two equal. Also what the pattern accepts.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { ANNOTATION_KEY, ANNOTATION_KEY_PATTERN, ConfigSchema } from '../../src/config/schema.js'

const helpers = readFileSync(new URL('../../charts/crd-migrator/templates/_helpers.tpl', import.meta.url), 'utf8')

t.test('the chart checks annotations.migrating with the same pattern as the config', async (t) => {
  const define = /\{\{-? define "crd-migrator\.migratingAnnotation" -?\}\}([\s\S]*?)\{\{-? end -?\}\}\s*$/m.exec(helpers)
  t.ok(define, 'the crd-migrator.migratingAnnotation template is there')
  const literals = [...(define?.[1] ?? '').matchAll(/regexMatch ("(?:[^"\\]|\\.)*")/g)].map((m) => m[1]!)
  t.equal(literals.length, 1, 'one regexMatch in it')
  // A Go template string literal is a Go interpreted string: for this text, JSON's escapes.
  const chartPattern = JSON.parse(literals[0] ?? '""') as string
  t.equal(chartPattern, ANNOTATION_KEY_PATTERN, 'charts/crd-migrator/templates/_helpers.tpl holds ANNOTATION_KEY_PATTERN')
  t.notOk(/\(\?[<=!]|\\[dDwWsSbB]/.test(ANNOTATION_KEY_PATTERN), 'no syntax RE2 reads differently (lookaround, class escapes)')
})

t.test('what the pattern accepts', async (t) => {
  const name63 = `a${'b'.repeat(61)}c`
  for (const key of ['ksvm.sigs.k8s.io/migrating', 'migrating', 'example.com/Migrating_1.x', 'a-b.c/d', `example.com/${name63}`]) {
    t.ok(ANNOTATION_KEY.test(key), `accepts ${key.length > 40 ? `a name of ${key.length - 12} characters` : key}`)
    t.ok(ConfigSchema.safeParse({ annotations: { migrating: key } }).success, `the config accepts ${key.slice(0, 40)}`)
  }
  for (const key of [
    '',
    '/x',
    'Example.com/x',
    'example.com/',
    'example.com/-x',
    'x-',
    "a'b",
    'a b',
    'example..com/x',
    `example.com/${name63}d`,
  ]) {
    t.notOk(ANNOTATION_KEY.test(key), `refuses ${JSON.stringify(key.length > 40 ? `${key.slice(0, 20)}… (${key.length})` : key)}`)
    t.notOk(ConfigSchema.safeParse({ annotations: { migrating: key } }).success, `the config refuses ${JSON.stringify(key.slice(0, 40))}`)
  }
})
