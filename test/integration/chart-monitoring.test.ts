/**
 * The chart's monitoring and network options: every metric the code registers is known
 * here, the Grafana dashboard and the PrometheusRule name only those (and their labels),
 * and the NetworkPolicy lets in the API server and the scrapers and out to the API
 * servers. Shared setup: test/helpers/chart.ts.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { collectDefaultMetrics, Registry } from 'prom-client'
import t from 'tap'
import { createProcessMetrics } from '../../src/health/process-metrics.js'
import { createMigratorMetrics } from '../../src/migrator/metrics.js'
import { createWebhookMetrics } from '../../src/webhook/metrics.js'
import { selectorsIn, selectorsInTemplateQuery, type Selector } from '../helpers/promql.js'
import { chartDir, ids, type Manifest, one, repoRoot, type T, template } from '../helpers/chart.js'
import { DASHBOARD_NAMESPACE, DNS_EGRESS, KUBE_APISERVER_PODS, OPS_VALUES } from '../helpers/chart-scenarios.js'

// --- monitoring: the metrics the dashboard and the alerts may name ----------------------------

/** Label names of each metric the code registers (the /metrics of `crd-migrator serve`), by series name. */
async function exportedMetrics(): Promise<Map<string, string[]>> {
  const registry = new Registry()
  createMigratorMetrics(registry)
  createWebhookMetrics(registry)
  createProcessMetrics(registry)
  collectDefaultMetrics({ register: registry })
  const series = new Map<string, string[]>()
  for (const { name, type } of await registry.getMetricsAsJSON()) {
    // prom-client keeps each metric's label names on the instance, untyped.
    const labelNames = (registry.getSingleMetric(name) as unknown as { labelNames?: string[] }).labelNames ?? []
    if (String(type) === 'histogram') {
      series.set(`${name}_bucket`, [...labelNames, 'le'])
      series.set(`${name}_sum`, labelNames)
      series.set(`${name}_count`, labelNames)
    } else {
      series.set(name, labelNames)
    }
  }
  return series
}

/** Labels Prometheus adds to every scraped series (ServiceMonitor targets). */
const TARGET_LABELS = ['namespace', 'pod', 'instance', 'job', 'service', 'container', 'endpoint']

function checkSelectors(t: T, where: string, selectors: Selector[], exported: Map<string, string[]>): void {
  t.ok(selectors.length > 0, `${where}: selects a metric`)
  for (const { metric, labels } of selectors) {
    const known = exported.get(metric)
    t.ok(known, `${where}: ${metric} is a metric the code exports`)
    if (known)
      t.same(
        labels.filter((l) => !known.includes(l) && !TARGET_LABELS.includes(l)),
        [],
        `${where}: ${metric} has the labels matched`,
      )
  }
}

t.test('every crd_migrator_* metric of src/ is among those this file instantiates', async (t) => {
  const exported = await exportedMetrics()
  const srcDir = join(repoRoot, 'src')
  const files = (await readdir(srcDir, { recursive: true })).filter((f) => f.endsWith('.ts'))
  const named: string[] = []
  for (const f of files) {
    const text = await readFile(join(srcDir, f), 'utf8')
    if (!text.includes('prom-client')) continue
    for (const m of text.matchAll(/'(crd_migrator_[a-z0-9_]+)'/g)) named.push(`${f}: ${m[1]}`)
  }
  t.ok(named.length >= 17, `${named.length} metric names in src/`)
  // A histogram exports <name>_bucket, _sum and _count.
  const registered = (name: string) => exported.has(name) || exported.has(`${name}_bucket`)
  t.same(
    named.filter((n) => !registered(n.split(': ')[1]!)),
    [],
    'a metric module this test does not instantiate (add it to exportedMetrics())',
  )
})

t.test('the PromQL checker has teeth', async (t) => {
  const exported = await exportedMetrics()
  t.same(
    selectorsIn('sum by (crd) (rate(crd_migrator_objects_total{namespace="x",outcome!~"a|b"}[5m])) > 0').map((s) => s.metric),
    ['crd_migrator_objects_total'],
  )
  t.same(selectorsIn('x_total{a="1"} unless x_total offset 15m'), [
    { metric: 'x_total', labels: ['a'] },
    { metric: 'x_total', labels: [] },
  ])
  t.notOk(exported.get('crd_migrator_objekts_total'), 'a misspelt metric is not exported')
  t.throws(() => selectorsIn('rato(crd_migrator_objects_total[5m])'), /unknown PromQL function rato/)
  t.throws(() => selectorsIn('sum(rate(crd_migrator_objects_total[5m])'), /unclosed/)
  t.throws(() => selectorsIn('crd_migrator_objects_total / $scale'), /\$variable/)
  t.same(exported.get('crd_migrator_migrations_total'), ['result'])
  t.same(exported.get('crd_migrator_write_duration_seconds_bucket'), ['phase', 'le'])
})

t.test('the Grafana dashboard: valid JSON, the panels operators need, only metrics the code exports', async (t) => {
  const exported = await exportedMetrics()
  const text = await readFile(join(chartDir, 'files', 'dashboard.json'), 'utf8')
  const dashboard = JSON.parse(text) as {
    uid: string
    title: string
    panels: Array<{
      type: string
      title: string
      datasource?: { uid: string }
      targets?: Array<{ expr: string; datasource?: { uid: string } }>
    }>
    templating: { list: Array<{ name: string; type: string; query: string | { query: string } }> }
  }
  t.equal(dashboard.uid, 'crd-migrator')
  const panels = dashboard.panels.filter((p) => p.type !== 'row')
  const titles = panels.map((p) => p.title)
  for (const wanted of [/progress/i, /objects per second/i, /throttl/i, /admission decisions/i, /webhook latency/i, /certificate/i])
    t.ok(
      titles.some((x) => wanted.test(x)),
      `a panel for ${wanted.source}`,
    )
  for (const p of panels) {
    t.ok(p.targets?.length, `${p.title}: has queries`)
    t.equal(p.datasource?.uid, '${datasource}', `${p.title}: the dashboard's data source variable`)
    for (const target of p.targets ?? []) checkSelectors(t, `${p.title}: ${target.expr}`, selectorsIn(target.expr), exported)
  }
  for (const v of dashboard.templating.list.filter((v) => v.type === 'query')) {
    const query = typeof v.query === 'string' ? v.query : v.query.query
    checkSelectors(t, `variable ${v.name}`, selectorsInTemplateQuery(query), exported)
  }

  // The chart ships it as it is, where and how Grafana's sidecar finds it.
  const rendered = await template('ops', 'ops-ns', OPS_VALUES)
  const cm = one(rendered, 'ConfigMap', 'ops-crd-migrator-dashboard')
  t.equal((cm['data'] as Record<string, string>)['crd-migrator.json'], text.replace(/\n$/, ''), 'files/dashboard.json, unchanged')
  t.equal(cm.metadata.namespace, DASHBOARD_NAMESPACE, 'in grafanaDashboard.namespace')
  t.equal(cm.metadata.labels?.['dashboards.example.com/grafana'], 'yes', 'the sidecar label')
  t.same(cm.metadata.annotations, { grafana_folder: 'Kubernetes' })
  const byDefault = one(await template('d', 'd-ns', { grafanaDashboard: { enabled: true } }), 'ConfigMap', 'd-crd-migrator-dashboard')
  t.equal(byDefault.metadata.labels?.['grafana_dashboard'], '1', 'grafana_dashboard: "1" by default')
  t.equal(byDefault.metadata.namespace, 'd-ns', 'in the release namespace by default')
})

t.test('the PrometheusRule: the alerts, their thresholds from values, only metrics the code exports', async (t) => {
  const exported = await exportedMetrics()
  type AlertRule = { alert: string; expr: string; for?: string; labels: Record<string, string>; annotations: Record<string, string> }
  const rulesIn = (ms: Manifest[]) =>
    (one(ms, 'PrometheusRule')['spec'] as { groups: Array<{ rules: AlertRule[] }> }).groups.flatMap((g) => g.rules)
  const rule = one(await template('ops', 'ops-ns', OPS_VALUES), 'PrometheusRule')
  t.same(rule.metadata.labels?.['release'], 'prometheus', 'prometheusRule.labels')
  const rules = rulesIn([rule])
  const byName = Object.fromEntries(rules.map((r) => [r.alert, r]))
  t.same(Object.keys(byName).sort(), [
    'CrdMigratorCrdFrozenTooLong',
    'CrdMigratorForeignFreeze',
    'CrdMigratorMigrationFailed',
    'CrdMigratorWebhookCertificateExpiresSoon',
    'CrdMigratorWebhookCertificateRejected',
    'CrdMigratorWebhookConnectionsRefused',
    'CrdMigratorWebhookErrors',
    'CrdMigratorWebhookRefusals',
  ])
  for (const r of rules) {
    checkSelectors(t, `${r.alert}: ${r.expr}`, selectorsIn(r.expr), exported)
    for (const s of selectorsIn(r.expr).filter((s) => s.metric.startsWith('crd_migrator_')))
      t.ok(s.labels.includes('namespace'), `${r.alert}: ${s.metric} of the release namespace only`)
    t.match(r.expr, /namespace="ops-ns"/)
    t.same(r.labels, { team: 'platform', severity: 'critical' }, `${r.alert}: alertLabels, severity overridden`)
    t.ok(r.annotations['summary'] && r.annotations['description'], `${r.alert}: summary and description`)
  }
  t.equal(byName['CrdMigratorCrdFrozenTooLong']!.for, '30m', 'prometheusRule.frozenCrdMinutes')
  t.equal(byName['CrdMigratorForeignFreeze']!.for, '30m', 'prometheusRule.frozenCrdMinutes')
  t.match(byName['CrdMigratorWebhookCertificateExpiresSoon']!.expr, /< 5 \* 86400$/, 'prometheusRule.certificateExpiryDays')
  t.match(byName['CrdMigratorWebhookRefusals']!.expr, /\* 60 > 2$/, 'prometheusRule.refusalsPerMinute')
  t.match(
    byName['CrdMigratorCrdFrozenTooLong']!.annotations['summary'],
    /\{\{ \$labels\.crd \}\} .* 30 minutes/,
    "Prometheus' templating passed through",
  )
  const defaults = rulesIn(await template('d', 'd-ns', { prometheusRule: { enabled: true } }))
  t.same(defaults.find((r) => r.alert === 'CrdMigratorCrdFrozenTooLong')?.for, '60m', 'frozenCrdMinutes: 60 by default')
  t.same(defaults[0]!.labels, { severity: 'warning' }, 'severity warning by default')
})

t.test('the NetworkPolicy: the API server to the webhook port, scrapers to the metrics port, egress to the API servers', async (t) => {
  const policyOf = async (values: object) =>
    one(await template('np', 'np-ns', values), 'NetworkPolicy')['spec'] as {
      podSelector: { matchLabels: Record<string, string> }
      policyTypes: string[]
      ingress: Array<{ from: unknown[]; ports: unknown[] }>
      egress?: Array<{ to: unknown[]; ports: unknown[] }>
    }
  const ops = await policyOf(OPS_VALUES)
  const apiServer = [{ ipBlock: { cidr: '10.0.0.0/16' } }, { ipBlock: { cidr: 'fd00:10::/64' } }, KUBE_APISERVER_PODS]
  t.same(ops.podSelector.matchLabels, { 'app.kubernetes.io/name': 'crd-migrator', 'app.kubernetes.io/instance': 'np' }, 'the server pods')
  t.same(ops.policyTypes, ['Ingress', 'Egress'])
  t.same(ops.ingress, [
    { from: apiServer, ports: [{ protocol: 'TCP', port: 'webhook' }] },
    { from: OPS_VALUES.networkPolicy.metricsFrom, ports: [{ protocol: 'TCP', port: 'metrics' }] },
  ])
  t.same(
    ops.egress,
    [{ to: apiServer, ports: [{ protocol: 'TCP', port: 6443 }] }, DNS_EGRESS],
    'the API servers on apiServerPorts, then extraRules',
  )

  const ingressOnly = await policyOf({ networkPolicy: { enabled: true, apiServerCIDRs: ['192.168.0.10/32'] } })
  t.same(ingressOnly.policyTypes, ['Ingress'], 'egress unrestricted by default')
  t.same(
    ingressOnly.ingress,
    [{ from: [{ ipBlock: { cidr: '192.168.0.10/32' } }], ports: [{ protocol: 'TCP', port: 'webhook' }] }],
    'no metrics ingress without metricsFrom',
  )
  t.notOk('egress' in ingressOnly)
  const webhookOnly = await policyOf({
    migrator: { enabled: false },
    networkPolicy: { enabled: true, apiServerCIDRs: ['192.168.0.10/32'], egress: { enabled: true } },
  })
  t.same(webhookOnly.egress, [], 'webhook only: no egress at all')
  t.same(ids((await template('np', 'np-ns', {})).filter((m) => m.kind === 'NetworkPolicy')), [], 'none by default')
  const known = await policyOf({ networkPolicy: { apiServerCIDRs: ['192.168.0.10/32'] } })
  t.same(known.ingress, ingressOnly.ingress, "on without enabled once the API server's addresses are known (issue 44)")
  const config = one(
    await template('np', 'np-ns', { networkPolicy: { apiServerCIDRs: ['192.168.0.10/32'] } }),
    'ConfigMap',
    'np-crd-migrator',
  )
  t.match(
    String((config['data'] as Record<string, string>)['config.yaml']),
    /apiServerAddresses:\n\s+- 192\.168\.0\.10\/32/,
    'and the webhook gets them as webhook.apiServerAddresses (reserved slots)',
  )
  t.same(
    ids(
      (await template('np', 'np-ns', { hostNetwork: true, networkPolicy: { apiServerCIDRs: ['10.0.0.0/8'] } })).filter(
        (m) => m.kind === 'NetworkPolicy',
      ),
    ),
    [],
    'not with hostNetwork, where it would not apply',
  )
})
