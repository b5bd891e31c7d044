/**
 * The chart's API Priority and Fairness objects (templates/flowschema.yaml, from
 * files/flowcontrol.yaml and values.yaml's apiPriorityAndFairness): rendered with default
 * and other values, refused when bad, the same objects the bench installs
 * (dev/bench/apf.ts), accepted by the real kube-apiserver (server-side dry run), and, once
 * created, classifying requests as they should: the APF filter names the FlowSchema and
 * priority level of every request in its response headers, so each probe below asks as a
 * given user and reads them. The migrator's ServiceAccount lands in the chart's level for
 * its bulk requests and in workload-low (where it is without the chart) for its Lease and
 * CRD requests; another ServiceAccount and system:masters are untouched.
 */
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { loadKubeConfig } from '../../src/kube/client.js'
import { KubeHttp } from '../../src/kube/http.js'
import { classify, FLOWCONTROL_API, flowControlObjects, type FlowControlObject } from '../../dev/bench/apf.js'
import { serviceAccountIdentity } from '../../dev/controlplane/service-account.js'
import { ensureTools, type ChartTools } from '../../dev/controlplane/tools.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { scratchHelm } from '../helpers/helm.js'
import { until } from '../helpers/until.js'

const chartDir = fileURLToPath(new URL('../../charts/crd-migrator/', import.meta.url))

// A cold helm build takes minutes; let it finish, then restore the per-file timeout.
t.setTimeout(30 * 60 * 1000)
const tools: ChartTools = await ensureTools()
const cp = await getControlPlane()
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '600') * 1000)

const { scratch, run: helm, valuesArgs } = await scratchHelm(tools.helm, 'crd-migrator-chart-apf-')

async function render(release: string, namespace: string, values: object) {
  return helm(['template', release, chartDir, '--namespace', namespace, ...(await valuesArgs(values))])
}

/** The rendered FlowSchemas and PriorityLevelConfigurations, by kind/name. */
async function flowControlOf(release: string, namespace: string, values: object): Promise<Map<string, FlowControlObject>> {
  const r = await render(release, namespace, values)
  if (r.code !== 0) throw new Error(`helm template failed (${r.code}): ${r.stderr}`)
  const out = new Map<string, FlowControlObject>()
  for (const doc of parseAllDocuments(r.stdout)) {
    const m = doc.toJS() as FlowControlObject | null
    if (m && m.apiVersion.startsWith('flowcontrol.apiserver.k8s.io/')) out.set(`${m.kind}/${m.metadata.name}`, m)
  }
  return out
}

const kinds = (release: string) => [
  `FlowSchema/${release}-crd-migrator`,
  `FlowSchema/${release}-crd-migrator-control`,
  `PriorityLevelConfiguration/${release}-crd-migrator`,
]

t.test('rendered by default: a priority level and two FlowSchemas for the ServiceAccount, as the bench builds them', async (t) => {
  const ns = uniqueName('apf')
  const rendered = await flowControlOf('rel', ns, {})
  t.same([...rendered.keys()].sort(), kinds('rel'))
  const bench = await flowControlObjects({ name: 'rel-crd-migrator', serviceAccount: { namespace: ns, name: 'rel-crd-migrator' } })
  for (const o of bench)
    t.same(rendered.get(`${o.kind}/${o.metadata.name}`)?.spec, o.spec, `${o.kind}/${o.metadata.name}: the bench's spec is the chart's`)
  const level = rendered.get('PriorityLevelConfiguration/rel-crd-migrator')!
  t.match(
    level.spec,
    { type: 'Limited', limited: { nominalConcurrencyShares: 2, borrowingLimitPercent: 0 } },
    'a small share, no borrowing',
  )
  const bulk = rendered.get('FlowSchema/rel-crd-migrator')!
  const control = rendered.get('FlowSchema/rel-crd-migrator-control')!
  t.ok(
    (control.spec['matchingPrecedence'] as number) < (bulk.spec['matchingPrecedence'] as number),
    'the control FlowSchema is matched first',
  )
  t.ok((bulk.spec['matchingPrecedence'] as number) < 9000, "before the suggested 'service-accounts' FlowSchema (9000)")
  t.same(bulk.spec['priorityLevelConfiguration'], { name: 'rel-crd-migrator' })
  t.same(control.spec['priorityLevelConfiguration'], { name: 'workload-low' })
})

t.test('values: shares, the ServiceAccount name, off switches', async (t) => {
  const shares = await flowControlOf('rel', 'ns1', { apiPriorityAndFairness: { nominalConcurrencyShares: 3 } })
  t.match(shares.get('PriorityLevelConfiguration/rel-crd-migrator')?.spec, { limited: { nominalConcurrencyShares: 3 } })
  const named = await flowControlOf('rel', 'ns1', { serviceAccount: { create: false, name: 'existing' } })
  t.same(
    (named.get('FlowSchema/rel-crd-migrator')?.spec['rules'] as Array<{ subjects: unknown }>)[0]!.subjects,
    [{ kind: 'ServiceAccount', serviceAccount: { name: 'existing', namespace: 'ns1' } }],
    'the FlowSchemas name the ServiceAccount the pods run as',
  )
  t.equal((await flowControlOf('rel', 'ns1', { apiPriorityAndFairness: { enabled: false } })).size, 0, 'none when disabled')
  t.equal((await flowControlOf('rel', 'ns1', { migrator: { enabled: false } })).size, 0, 'none for the webhook alone')
})

t.test('bad values are refused with a message', async (t) => {
  for (const [values, message] of [
    [{ apiPriorityAndFairness: { nominalConcurrencyShares: 0 } }, /nominalConcurrencyShares/],
    [{ apiPriorityAndFairness: { nominalConcurrencyShares: 'ten' } }, /nominalConcurrencyShares/],
    [{ apiPriorityAndFairness: { enable: true } }, /enable/],
  ] as const) {
    const r = await render('rel', 'ns1', values)
    t.not(r.code, 0, `refused: ${JSON.stringify(values)}`)
    t.match(r.stderr, message)
  }
})

t.test('helm lint --strict passes', async (t) => {
  const r = await helm(['lint', chartDir, '--strict'])
  t.equal(r.code, 0, r.stdout + r.stderr)
})

t.test('on the kube-apiserver: accepted, and the migrator ServiceAccount classified as it should be', async (t) => {
  const ns = uniqueName('apf')
  const release = uniqueName('r')
  const objects = [...(await flowControlOf(release, ns, {})).values()]
  // PriorityLevelConfiguration first: the FlowSchemas point at it.
  objects.sort((a, b) => (a.kind === b.kind ? 0 : a.kind === 'PriorityLevelConfiguration' ? -1 : 1))
  const pathOf = (o: FlowControlObject) => `${FLOWCONTROL_API}/${o.kind === 'FlowSchema' ? 'flowschemas' : 'prioritylevelconfigurations'}`
  for (const o of objects) {
    const res = await cp.apiRequest(`${pathOf(o)}?dryRun=All&fieldValidation=Strict`, { method: 'POST', body: o })
    t.equal(res.status, 201, `dry-run create ${o.kind}/${o.metadata.name}`, {
      body: res.status >= 300 ? res.body.slice(0, 1000) : undefined,
    })
  }
  const uids = new Map<string, string>()
  t.teardown(async () => {
    for (const o of [...objects].reverse()) await cp.apiRequest(`${pathOf(o)}/${o.metadata.name}`, { method: 'DELETE' })
  })
  for (const o of objects) {
    const res = await cp.apiRequest(pathOf(o), { method: 'POST', body: o })
    t.equal(res.status, 201, `create ${o.kind}/${o.metadata.name}`, { body: res.status >= 300 ? res.body.slice(0, 1000) : undefined })
    uids.set(`${o.kind}/${o.metadata.name}`, (res.json as { metadata: { uid: string } }).metadata.uid)
  }
  const levels = new Map<string, string>()
  const list = await cp.apiRequest(`${FLOWCONTROL_API}/prioritylevelconfigurations`)
  for (const item of (list.json as { items: Array<{ metadata: { name: string; uid: string } }> }).items)
    levels.set(item.metadata.uid, item.metadata.name)

  const fullname = `${release}-crd-migrator`
  const clientOf = async (name: string) =>
    new KubeHttp(loadKubeConfig((await serviceAccountIdentity(cp, ns, name, join(scratch, `${name}.kubeconfig`))).kubeconfigPath))
  const migrator = await clientOf(fullname)
  const other = await clientOf('someone-else')
  const admin = new KubeHttp(loadKubeConfig(cp.kubeconfigPath))
  t.teardown(() => {
    for (const c of [migrator, other, admin]) c.close()
  })
  const bulkProbe = `/api/v1/namespaces/${ns}/configmaps`
  const leaseProbe = `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`
  const crdProbe = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'
  // The API server picks up new FlowSchemas asynchronously: wait for the first probe to land.
  await until(
    `the migrator's bulk requests classified by FlowSchema ${fullname}`,
    30_000,
    () => classify(migrator, bulkProbe),
    (c) => c.flowSchemaUid === uids.get(`FlowSchema/${fullname}`),
  )
  const levelOf = async (client: KubeHttp, path: string) => {
    const c = await classify(client, path)
    return { flowSchema: c.flowSchemaUid, level: levels.get(c.priorityLevelUid) ?? c.priorityLevelUid }
  }
  t.same(await levelOf(migrator, bulkProbe), { flowSchema: uids.get(`FlowSchema/${fullname}`), level: fullname }, 'bulk: its own level')
  t.same(
    await levelOf(migrator, `${bulkProbe}/x`),
    { flowSchema: uids.get(`FlowSchema/${fullname}`), level: fullname },
    'a single object too',
  )
  for (const probe of [leaseProbe, crdProbe]) {
    t.same(
      await levelOf(migrator, probe),
      { flowSchema: uids.get(`FlowSchema/${fullname}-control`), level: 'workload-low' },
      `control (${probe}): workload-low, where it is without the chart`,
    )
  }
  t.not((await levelOf(other, bulkProbe)).level, fullname, 'another ServiceAccount is not in it')
  t.equal((await levelOf(admin, bulkProbe)).level, 'exempt', 'system:masters stays exempt')
})
