import { readFileSync } from 'node:fs'
import { Registry } from 'prom-client'
import t from 'tap'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { SETTINGS } from '../../src/config/settings.js'
import { MigratorMetrics } from '../../src/migrator/metrics.js'
import { createWebhookMetrics } from '../../src/webhook/metrics.js'
import { createProcessMetrics } from '../../src/health/process-metrics.js'

const README = new URL('../../README.md', import.meta.url)

let readme = ''
try {
  readme = readFileSync(README, 'utf8')
} catch (err) {
  t.fail(`README.md cannot be read: ${(err as Error).message}`)
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
/** The name as a whole word: `--webhook` must not be satisfied by `--webhook-host`. */
const mentions = (name: string) => new RegExp(`(?<![\\w-])${escape(name)}(?![\\w-])`).test(readme)

function missing(names: string[]): string[] {
  return names.filter((n) => !mentions(n))
}

t.test('every setting: its flag and its environment variable', async (t) => {
  t.ok(SETTINGS.length > 20, 'the settings table is loaded')
  const flags = SETTINGS.map((s) => `--${s.flag}`)
  const envs = SETTINGS.map((s) => s.env)
  for (const flag of flags) t.ok(mentions(flag), `README mentions ${flag}`)
  for (const env of envs) t.ok(mentions(env), `README mentions ${env}`)
  t.strictSame(missing([...flags, ...envs]), [], 'nothing missing')
})

t.test('every state annotation', async (t) => {
  const keys = Object.values(StateAnnotation)
  t.ok(keys.length >= 14, 'the annotation table is loaded')
  for (const key of keys) t.ok(mentions(key), `README mentions ${key}`)
  t.strictSame(missing(keys), [], 'nothing missing')
})

t.test('every metric', async (t) => {
  const migrator = new Registry()
  new MigratorMetrics(migrator)
  const webhook = new Registry()
  createWebhookMetrics(webhook)
  const process = new Registry()
  createProcessMetrics(process)
  const names = [...migrator.getMetricsAsArray(), ...webhook.getMetricsAsArray(), ...process.getMetricsAsArray()].map((m) => m.name)
  t.ok(names.length >= 13, `the metrics are registered (${names.length})`)
  t.equal(new Set(names).size, names.length, 'no metric name registered twice')
  // Histograms may be documented by a series name (`_bucket`, `_sum`, `_count`): the base name is still there.
  const present = (name: string) => readme.includes(name)
  for (const name of names) t.ok(present(name), `README mentions ${name}`)
  t.strictSame(
    names.filter((n) => !present(n)),
    [],
    'nothing missing',
  )
})
