/** Chart.yaml's Artifact Hub annotations: well-formed, and in step with package.json. */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { parse } from 'yaml'

const read = (p: string) => readFileSync(new URL(`../../${p}`, import.meta.url), 'utf8')
const chart = parse(read('charts/crd-migrator/Chart.yaml')) as { version: string; appVersion: string; annotations?: Record<string, string> }
const pkg = JSON.parse(read('package.json')) as { version: string; license: string }

t.test('Artifact Hub annotations', async (t) => {
  const a = chart.annotations ?? {}
  t.equal(a['artifacthub.io/license'], pkg.license, "license: package.json's SPDX identifier")
  // Artifact Hub reads these two as YAML held in a string.
  const links = parse(a['artifacthub.io/links'] ?? '') as Array<{ name: string; url: string }>
  t.ok(Array.isArray(links) && links.length > 0, 'links: a list')
  for (const link of links) t.match(link, { name: String, url: /^https:\/\// }, `link ${link.name}`)
  const changes = parse(a['artifacthub.io/changes'] ?? '') as Array<{ kind: string; description: string }>
  t.ok(Array.isArray(changes) && changes.length > 0, 'changes: a list')
  for (const change of changes) {
    t.ok(['added', 'changed', 'deprecated', 'removed', 'fixed', 'security'].includes(change.kind), `kind ${change.kind}`)
    t.ok(typeof change.description === 'string' && change.description.length > 0, 'a description')
  }
})

t.test('the chart ships the version of the package', async (t) => {
  t.equal(chart.appVersion, pkg.version, 'appVersion is package.json version (the image tag the chart defaults to)')
})
