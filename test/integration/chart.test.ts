/**
 * The Helm chart (charts/crd-migrator): `helm lint`, `helm template` with default and
 * non-default values, the rendered ValidatingWebhookConfiguration against
 * renderWebhookConfiguration() (so the two cannot drift), the rendered config file against
 * the config schema, the committed plain manifests (webhook-config/plain/) against a fresh
 * render, and a server-side dry-run of every rendered object on the real kube-apiserver
 * (cert-manager's and the ServiceMonitor CRDs installed first). The RBAC of one render is
 * also created for real and probed with SubjectAccessReviews. Values that would grant more
 * (built-in API groups, extraConfig overriding annotations/identities) must fail the
 * render, and the state-key Secret must survive an upgrade (lookup, --dry-run=server).
 * The StorageVersionMigration CRD the chart installs (storageVersionMigrations.*) must equal
 * the one in kube-storage-version-migrator's Go module (scripts/build-ksvm.sh),
 * migrator.builtInResources must grant exactly the resources it lists, and the stash rules
 * (migrator.stashPresets / migrator.stashes, phase StashedObjectMigration) exactly their
 * stashes (get, list, create, delete) and referrers (get, list, patch).
 * The operators' options (issue #18): the `helm test` hook (rendered, dry-run, and its
 * script run against the real API server with the chart's RBAC and a real webhook), the
 * NetworkPolicy, hostNetwork, the PrometheusRule and the Grafana dashboard (whose
 * expressions may name only metrics the code registers), and the app.kubernetes.io labels
 * on every object of every render.
 *
 * helm and the CRDs (cert-manager's, ServiceMonitor, PrometheusRule) come from
 * scripts/build-tools.sh (built from Go modules on first use).
 * Regenerate the plain manifests with: CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS=1 npx tap test/integration/chart.test.ts
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { isDeepStrictEqual } from 'node:util'
import { collectDefaultMetrics, Registry } from 'prom-client'
import t from 'tap'
import { parse, parseAllDocuments } from 'yaml'
import { loadConfig } from '../../src/config/load.js'
import { PHASE_NAMES, STASH_PRESETS } from '../../src/config/schema.js'
import { MigratorMetrics } from '../../src/migrator/metrics.js'
import { PRESETS, resolveStashRules, type StashRule } from '../../src/migrator/phases/stashes/rules.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { renderWebhookConfiguration, WEBHOOK_NAME, type WebhookConfigurationOptions } from '../../src/webhook/configuration.js'
import { createWebhookMetrics } from '../../src/webhook/metrics.js'
import { ensureTools, type ChartTools } from '../../dev/controlplane/tools.js'
import { startTestWebhook } from '../helpers/cluster.js'
import { clientsFor, getControlPlane, uniqueName, waitForCrdReady } from '../helpers/controlplane.js'
import { scratchHelm } from '../helpers/helm.js'
import { selectorsIn, selectorsInTemplateQuery, type Selector } from '../helpers/promql.js'

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))
const chartDir = join(repoRoot, 'charts', 'crd-migrator')
const plainDir = join(repoRoot, 'webhook-config', 'plain')
const PLAIN_FILE = join(plainDir, 'crd-migrator.yaml')
const PLAIN_HEADER = [
  '# crd-migrator for clusters without Helm: the chart (charts/crd-migrator) rendered with its',
  '# default values, release name crd-migrator, namespace crd-migrator. Needs cert-manager.',
  '# Except the state key, which no one should share: create the Secret crd-migrator-state-key',
  '# (32 random bytes under `key`; README, Install) in namespace crd-migrator.',
  '# Apply with: kubectl apply -k webhook-config/plain/   (namespace.yaml first, then this file)',
  '# Generated; do not edit. test/integration/chart.test.ts checks it against the chart;',
  '# regenerate with CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS=1 npx tap test/integration/chart.test.ts',
  '',
].join('\n')

/** Labels the chart adds to every object, beyond those of renderWebhookConfiguration(). */
const CHART_ONLY_LABELS = [
  'helm.sh/chart',
  'app.kubernetes.io/instance',
  'app.kubernetes.io/version',
  'app.kubernetes.io/part-of',
  'app.kubernetes.io/managed-by',
]
/** The recommended labels (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels) every rendered object carries. */
const APP_LABELS = ['name', 'instance', 'version', 'component', 'part-of', 'managed-by'].map((l) => `app.kubernetes.io/${l}`)

/**
 * WebhookConfigurationOptions['service'] is typed from the frozen defaults (literal types),
 * so other names need a cast; the runtime accepts any names.
 */
const service = (s: { namespace: string; name: string; port: number; path: string }) =>
  s as unknown as NonNullable<WebhookConfigurationOptions['service']>

/** A (sub)test, as handed to t.test() callbacks. */
type T = Parameters<Parameters<typeof t.test>[0]>[0]

interface Manifest {
  apiVersion: string
  kind: string
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }
  [key: string]: unknown
}

// A cold helm build takes minutes; let it finish, then restore the per-file timeout.
t.setTimeout(30 * 60 * 1000)
const tools: ChartTools = await ensureTools()
const cp = await getControlPlane()
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '600') * 1000)
const admin = clientsFor(cp.kubeconfigPath)

const { scratch, run: helm, valuesArgs } = await scratchHelm(tools.helm, 'crd-migrator-chart-')

async function templateRaw(release: string, namespace: string, values: object): Promise<string> {
  const r = await helm(['template', release, chartDir, '--namespace', namespace, ...(await valuesArgs(values))])
  if (r.code !== 0) throw new Error(`helm template failed (${r.code}): ${r.stderr}`)
  return r.stdout
}

async function template(release: string, namespace: string, values: object): Promise<Manifest[]> {
  const docs = parseAllDocuments(await templateRaw(release, namespace, values))
  return docs.map((d) => d.toJS() as Manifest | null).filter((m): m is Manifest => m !== null)
}

const ids = (ms: Manifest[]) => ms.map((m) => `${m.kind}/${m.metadata.name}`)
/** A `helm test` hook object (templates/tests/), rendered by `helm template` with the rest. */
const isTestHook = (m: Manifest) => m.metadata.annotations?.['helm.sh/hook'] === 'test'
/** Cluster-scoped kinds the chart renders (FlowSchemas: apiPriorityAndFairness.*). */
const CLUSTER_KINDS = [
  'ClusterRole',
  'ClusterRoleBinding',
  'ValidatingWebhookConfiguration',
  'CustomResourceDefinition',
  'FlowSchema',
  'PriorityLevelConfiguration',
]
function one(ms: Manifest[], kind: string, name?: string): Manifest {
  const found = ms.filter((m) => m.kind === kind && (name === undefined || m.metadata.name === name))
  if (found.length !== 1) throw new Error(`expected one ${kind}${name ? `/${name}` : ''}, got ${ids(found).join(', ') || 'none'}`)
  return found[0]!
}

function withoutChartLabels<T extends Manifest>(m: T): T {
  const copy = structuredClone(m)
  for (const key of CHART_ONLY_LABELS) delete copy.metadata.labels?.[key]
  return copy
}

// --- API server helpers -------------------------------------------------------------------

const discovery = new Map<string, Array<{ name: string; kind: string; namespaced: boolean }>>()
async function resourceFor(apiVersion: string, kind: string): Promise<{ base: string; plural: string; namespaced: boolean }> {
  const base = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`
  let list = discovery.get(base)
  if (!list) {
    const res = await cp.apiRequest(base)
    if (res.status !== 200) throw new Error(`discovery ${base}: HTTP ${res.status} ${res.body.slice(0, 200)}`)
    list = (res.json as { resources: Array<{ name: string; kind: string; namespaced: boolean }> }).resources
    discovery.set(base, list)
  }
  const r = list.find((x) => x.kind === kind && !x.name.includes('/'))
  if (!r) throw new Error(`the API server does not serve ${kind} in ${apiVersion}`)
  return { base, plural: r.name, namespaced: r.namespaced }
}

async function collectionPath(m: Manifest, fallbackNamespace: string): Promise<string> {
  const r = await resourceFor(m.apiVersion, m.kind)
  return r.namespaced ? `${r.base}/namespaces/${m.metadata.namespace ?? fallbackNamespace}/${r.plural}` : `${r.base}/${r.plural}`
}

/** POST with dryRun=All and strict field validation (unknown fields are errors). */
async function dryRunCreate(m: Manifest, namespace: string): Promise<{ status: number; body: string }> {
  const res = await cp.apiRequest(`${await collectionPath(m, namespace)}?dryRun=All&fieldValidation=Strict`, { method: 'POST', body: m })
  return { status: res.status, body: res.body }
}

/**
 * Server-side apply with dryRun=All and strict field validation, for cluster-wide objects
 * (CRDs) that another test file may have installed for real on the shared control plane:
 * a create would answer 409 there, an apply validates the whole object either way.
 */
async function dryRunApply(m: Manifest): Promise<{ status: number; body: string }> {
  const res = await cp.apiRequest(
    `${await collectionPath(m, '')}/${m.metadata.name}?dryRun=All&fieldValidation=Strict&fieldManager=crd-migrator-chart-test&force=true`,
    { method: 'PATCH', body: m, contentType: 'application/apply-patch+yaml' },
  )
  return { status: res.status, body: res.body }
}

async function applyCrdFile(file: string): Promise<string[]> {
  const names: string[] = []
  for (const doc of parseAllDocuments(await readFile(file, 'utf8'))) {
    const crd = doc.toJS() as Manifest | null
    if (!crd || crd.kind !== 'CustomResourceDefinition') continue
    const res = await cp.apiRequest(
      `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}?fieldManager=crd-migrator-chart-test&force=true`,
      { method: 'PATCH', body: crd, contentType: 'application/apply-patch+yaml' },
    )
    if (res.status !== 200 && res.status !== 201)
      throw new Error(`apply CRD ${crd.metadata.name}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
    names.push(crd.metadata.name)
  }
  return names
}

/** The PrometheusRule CRD, which scripts/build-tools.sh fetches with the ServiceMonitor's (ensureTools() does not name it). */
function prometheusRuleCrdFile(): string {
  const r = spawnSync('bash', [join(repoRoot, 'scripts', 'build-tools.sh')], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`scripts/build-tools.sh failed (${r.status}): ${r.stderr}`)
  const file = /^prometheusrule-crd=(.+)$/m.exec(r.stdout)?.[1]
  if (!file || !existsSync(file)) throw new Error(`scripts/build-tools.sh printed no prometheusrule-crd=<existing file>: ${r.stdout}`)
  return file
}

let crdsInstalled: Promise<string[]> | undefined
/** cert-manager's CRDs and the ServiceMonitor and PrometheusRule CRDs, server-side applied (idempotent), ready. */
function installThirdPartyCrds(): Promise<string[]> {
  crdsInstalled ??= (async () => {
    const files = (await readdir(tools.certManagerCrdsDir)).filter((f) => f.endsWith('.yaml')).map((f) => join(tools.certManagerCrdsDir, f))
    const names: string[] = []
    for (const f of [...files, tools.serviceMonitorCrd, prometheusRuleCrdFile()]) names.push(...(await applyCrdFile(f)))
    for (const name of names) await waitForCrdReady(cp, admin.apiext, name, 60_000)
    return names
  })()
  return crdsInstalled
}

/** Pods here must meet the Pod Security Standard `level` (enforced on Pods): restricted unless said otherwise. */
async function createNamespace(name: string, level: 'restricted' | 'privileged' = 'restricted'): Promise<void> {
  const res = await cp.apiRequest('/api/v1/namespaces', {
    method: 'POST',
    body: {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: {
        name,
        labels: { 'pod-security.kubernetes.io/enforce': level, 'pod-security.kubernetes.io/enforce-version': 'latest' },
      },
    },
  })
  if (res.status !== 201) throw new Error(`create namespace ${name}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
}

/**
 * Dry-run every manifest, plus a Pod made from the Deployment's pod template (PodSecurity
 * admission enforces the namespace's restricted level on Pods only). Returns kind/name ->
 * HTTP status.
 */
async function dryRunAll(
  t: T,
  manifests: Manifest[],
  namespace: string,
  level: 'restricted' | 'privileged' = 'restricted',
): Promise<Record<string, number>> {
  const results: Record<string, number> = {}
  for (const m of manifests) {
    const res = m.kind === 'CustomResourceDefinition' ? await dryRunApply(m) : await dryRunCreate(m, namespace)
    results[`${m.kind}/${m.metadata.name}`] = res.status
    t.ok(res.status === 201 || res.status === 200, `dry-run create ${m.kind}/${m.metadata.name}: HTTP ${res.status}`, {
      body: res.status >= 300 ? res.body.slice(0, 2000) : undefined,
    })
  }
  const deployment = one(manifests, 'Deployment')
  const template = (deployment['spec'] as { template: { metadata: object; spec: object } }).template
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { ...template.metadata, name: `${deployment.metadata.name}-probe`, namespace },
    spec: template.spec,
  } as Manifest
  const res = await dryRunCreate(pod, namespace)
  results[`Pod/${pod.metadata.name} (from the Deployment, ${level} namespace)`] = res.status
  t.equal(res.status, 201, `the pod template passes PodSecurity "${level}" admission`, {
    body: res.status >= 300 ? res.body.slice(0, 2000) : undefined,
  })
  return results
}

/** The server's config file (the ConfigMap named like the Deployment; others hold the dashboard or the test). */
function configOf(t: T, manifests: Manifest[]) {
  const cm = one(manifests, 'ConfigMap', one(manifests, 'Deployment').metadata.name)
  const text = (cm['data'] as Record<string, string>)['config.yaml']!
  t.ok(text, 'the ConfigMap carries config.yaml')
  return { text, raw: parse(text) as Record<string, unknown> }
}

let configFiles = 0
async function loadRenderedConfig(text: string) {
  const file = join(scratch, `config-${++configFiles}.yaml`)
  await writeFile(file, text)
  return loadConfig({ file, env: {} })
}

function podSpec(manifests: Manifest[]) {
  return (one(manifests, 'Deployment')['spec'] as { template: { spec: Record<string, any> } }).template.spec
}

type Rule = { apiGroups?: string[]; resources?: string[]; verbs: string[]; resourceNames?: string[] }
function rulesOf(m: Manifest): Rule[] {
  return (m['rules'] as Rule[] | undefined) ?? []
}

/**
 * Least privilege: `create` only on leases and events, no wildcard verbs, no delete/update
 * of CRDs. `stashSources` (the stash rules' sources, as ClusterRole rules) may be created
 * and deleted too, and nothing else.
 */
function checkLeastPrivilege(t: T, manifests: Manifest[], allowWildcardGroups: boolean, stashSources: Rule[] = []) {
  for (const role of manifests.filter((m) => m.kind === 'ClusterRole' || m.kind === 'Role')) {
    for (const rule of rulesOf(role)) {
      t.notOk(rule.verbs.includes('*'), `${role.kind}/${role.metadata.name}: no wildcard verb`)
      const stashSource = role.kind === 'ClusterRole' && stashSources.some((s) => isDeepStrictEqual(s, rule))
      for (const forbidden of ['delete', 'deletecollection', 'escalate', 'bind', 'impersonate']) {
        if (forbidden === 'delete' && stashSource) continue
        t.notOk(rule.verbs.includes(forbidden), `${role.kind}/${role.metadata.name}: no ${forbidden}`)
      }
      if (rule.verbs.includes('create')) {
        t.ok(
          stashSource || (rule.resources ?? []).every((r) => r === 'leases' || r === 'events'),
          `${role.kind}/${role.metadata.name}: create only on leases, events and stash sources, not ${rule.resources}`,
        )
      }
      if (!allowWildcardGroups) t.notOk(rule.apiGroups?.includes('*'), `${role.kind}/${role.metadata.name}: no wildcard API group`)
    }
  }
}

// --- the chart's scenarios ------------------------------------------------------------------

const pemDir = join(scratch, 'ca')
const devCerts = await generateDevCertificates(pemDir, { serviceName: 'plain-crd-migrator', namespace: 'crd-migrator' })
const caPem = await readFile(devCerts.caCertFile, 'utf8')

interface Scenario {
  name: string
  release: string
  values: Record<string, any>
  /** Expected names and options for renderWebhookConfiguration(). */
  webhook: (namespace: string) => Parameters<typeof renderWebhookConfiguration>[0]
  kinds: string[]
  /** The ClusterRole's stash rules (the last ones), exactly; none when unset. */
  stashRules?: Rule[]
  /** The Pod Security level the pods need (hostNetwork: privileged); restricted when unset. */
  podSecurity?: 'privileged'
}

/** The ClusterRole rules of a stash's source and of a referrer. */
const stashSourceRule = (group: string, resource: string): Rule => ({
  apiGroups: [group],
  resources: [resource],
  verbs: ['get', 'list', 'create', 'delete'],
})
const stashReferrerRule = (group: string, resource: string): Rule => ({
  apiGroups: [group],
  resources: [resource],
  verbs: ['get', 'list', 'patch'],
})
const isStashSourceRule = (r: Rule) => r.verbs.includes('create') && r.verbs.includes('delete')

/**
 * What runStashPhase (src/migrator/stashes/stash-phase.ts) calls, as ClusterRole rules, for
 * resolved stash rules: list, create, get and delete (uid precondition) on the source,
 * list, get and patch (JSON patch) on each referrer. Duplicates dropped, in order.
 */
function stashRbac(rules: readonly StashRule[]): Rule[] {
  const out: Rule[] = []
  const add = (r: Rule) => {
    if (!out.some((o) => isDeepStrictEqual(o, r))) out.push(r)
  }
  for (const rule of rules) {
    add(stashSourceRule(rule.source.group, rule.source.resource))
    for (const r of rule.referrers) add(stashReferrerRule(r.group, r.resource))
  }
  return out
}

/** The kinds of a default render for release <release>. */
const defaultKinds = (release: string) =>
  [
    'ServiceAccount/F',
    'ConfigMap/F',
    'Secret/F-state-key',
    'ClusterRole/F',
    'ClusterRoleBinding/F',
    'Role/F-leader-election',
    'Role/F-NS-events',
    'RoleBinding/F-leader-election',
    'RoleBinding/F-NS-events',
    'Service/F',
    'Deployment/F',
    'Certificate/F-ca',
    'Certificate/F-serving',
    'Issuer/F-selfsigned',
    'Issuer/F-ca',
    'PodDisruptionBudget/F',
    'ValidatingWebhookConfiguration/F.crd-migrator.io',
  ].map((k) => k.replace(/F/, `${release}-crd-migrator`))

/** The objects of the `helm test` hook (tests.enabled) of a release whose full name is F, in namespace NS. */
const testKinds = (fullname: string) =>
  [
    'ServiceAccount/F-test',
    'ClusterRole/F-test',
    'ClusterRoleBinding/F-test',
    'CustomResourceDefinition/probes.F.NS.helm-test.crd-migrator.io',
    'ConfigMap/F-test',
    'Pod/F-test',
  ].map((k) => k.replace(/F/g, fullname))

/** renderWebhookConfiguration() options of a release with default values. */
const defaultWebhook = (release: string) => (ns: string) => ({
  mode: 'service' as const,
  name: `${release}-crd-migrator.crd-migrator.io`,
  service: service({ namespace: ns, name: `${release}-crd-migrator`, port: 443, path: '/validate-crd' }),
  certManagerCertificate: `${ns}/${release}-crd-migrator-serving`,
  migratorUsers: [`system:serviceaccount:${ns}:${release}-crd-migrator`],
})

/** A NetworkPolicyPeer: kube-apiserver as static pods (kubeadm). */
const KUBE_APISERVER_PODS = {
  namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
  podSelector: { matchLabels: { component: 'kube-apiserver' } },
}
/** An egress rule for cluster DNS. */
const DNS_EGRESS = {
  to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } } }],
  ports: [
    { protocol: 'UDP', port: 53 },
    { protocol: 'TCP', port: 53 },
  ],
}
/** Where the operators' scenario puts its Grafana dashboard (created before the dry run). */
const DASHBOARD_NAMESPACE = uniqueName('chart-grafana')
/** Every operators' option of issue #18 at once, nothing at its default. */
const OPS_VALUES = {
  metrics: { serviceMonitor: { enabled: true } },
  networkPolicy: {
    enabled: true,
    apiServerCIDRs: ['10.0.0.0/16', 'fd00:10::/64'],
    apiServerPeers: [KUBE_APISERVER_PODS],
    metricsFrom: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }],
    egress: { enabled: true, apiServerPorts: [6443], extraRules: [DNS_EGRESS] },
  },
  prometheusRule: {
    enabled: true,
    frozenCrdMinutes: 30,
    certificateExpiryDays: 5,
    refusalsPerMinute: 2,
    labels: { release: 'prometheus' },
    alertLabels: { team: 'platform', severity: 'critical' },
  },
  grafanaDashboard: {
    enabled: true,
    namespace: DASHBOARD_NAMESPACE,
    sidecarLabel: 'dashboards.example.com/grafana',
    sidecarLabelValue: 'yes',
    annotations: { grafana_folder: 'Kubernetes' },
  },
  tests: { enabled: true },
}

/** An explicit stash rule, every field set (README's example, limited to two namespaces). */
const EXPLICIT_STASH_RULE = {
  group: 'example.com',
  source: {
    group: 'apps',
    version: 'v1',
    resource: 'controllerrevisions',
    labelSelector: 'example.com/stash',
    namespaces: ['team-a', 'team-b'],
    dataPointer: '/data',
  },
  versionLabel: 'example.com/object-version',
  referrers: [
    { group: 'example.com', version: 'v1', resource: 'owners', pointers: ['/spec/revisionName'] },
    { group: '', version: 'v1', resource: 'configmaps', pointers: ['/data/revision', '/data/previous~1revision'] },
  ],
}

const scenarios: Scenario[] = [
  {
    name: 'default values',
    release: 'crd-migrator',
    values: {},
    webhook: (ns) => ({
      mode: 'service',
      name: 'crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'crd-migrator', port: 443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/crd-migrator-serving`,
      migratorUsers: [`system:serviceaccount:${ns}:crd-migrator`],
    }),
    kinds: [
      'ServiceAccount/crd-migrator',
      'ConfigMap/crd-migrator',
      'Secret/crd-migrator-state-key',
      'ClusterRole/crd-migrator',
      'ClusterRoleBinding/crd-migrator',
      'Role/crd-migrator-leader-election',
      'Role/crd-migrator-NS-events',
      'RoleBinding/crd-migrator-leader-election',
      'RoleBinding/crd-migrator-NS-events',
      'Service/crd-migrator',
      'Deployment/crd-migrator',
      'Certificate/crd-migrator-ca',
      'Certificate/crd-migrator-serving',
      'Issuer/crd-migrator-selfsigned',
      'Issuer/crd-migrator-ca',
      'PodDisruptionBudget/crd-migrator',
      'ValidatingWebhookConfiguration/crd-migrator.crd-migrator.io',
    ],
  },
  {
    name: 'non-default values: own issuer, 3 replicas, managed groups, per-CRD options, ServiceMonitor',
    release: 'mig',
    values: {
      replicaCount: 3,
      logLevel: 'debug',
      image: { repository: 'registry.example.com/platform/crd-migrator', digest: 'sha256:' + 'a'.repeat(64) },
      certManager: {
        issuerRef: { name: 'corp-ca', kind: 'ClusterIssuer', group: 'cert-manager.io' },
        duration: '720h',
        renewBefore: '240h',
      },
      // A CRD group under k8s.io is not one of kube-apiserver's own groups: allowed.
      rbac: { managedGroups: ['example.com', 'stable.example.org', 'gateway.networking.k8s.io'] },
      annotations: { migrating: 'example.com/migrating' },
      identities: { migratorUsers: ['ops-bot'], migratorGroups: ['platform-ops'], breakGlassGroups: ['system:masters', 'oncall'] },
      migrator: {
        selector: 'team=platform,crd-migrator.io/managed=true',
        names: ['gadgets.example.net'],
        concurrency: 8,
        qps: 50.5,
        skipPhases: ['CleanupManagedFields'],
        crds: { 'widgets.example.com': { useStatusSubresource: true, concurrency: 4, qps: 10 } },
      },
      webhook: { timeoutSeconds: 10, port: 10443 },
      service: { port: 8443 },
      metrics: { port: 9090, serviceMonitor: { enabled: true, labels: { release: 'prometheus' } } },
      extraConfig: { migrator: { pageSize: 200 } },
      podAnnotations: { 'example.com/team': 'platform' },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'mig-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'mig-crd-migrator', port: 8443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/mig-crd-migrator-serving`,
      annotationKey: 'example.com/migrating',
      timeoutSeconds: 10,
      migratorUsers: [`system:serviceaccount:${ns}:mig-crd-migrator`, 'ops-bot'],
      migratorGroups: ['platform-ops'],
    }),
    kinds: [
      'ServiceAccount/mig-crd-migrator',
      'ConfigMap/mig-crd-migrator',
      'Secret/mig-crd-migrator-state-key',
      'ClusterRole/mig-crd-migrator',
      'ClusterRoleBinding/mig-crd-migrator',
      'Role/mig-crd-migrator-leader-election',
      'Role/mig-crd-migrator-NS-events',
      'RoleBinding/mig-crd-migrator-leader-election',
      'RoleBinding/mig-crd-migrator-NS-events',
      'Service/mig-crd-migrator',
      'Deployment/mig-crd-migrator',
      'Certificate/mig-crd-migrator-serving',
      'PodDisruptionBudget/mig-crd-migrator',
      'ServiceMonitor/mig-crd-migrator',
      'ValidatingWebhookConfiguration/mig-crd-migrator.crd-migrator.io',
    ],
  },
  {
    name: 'no cert-manager: existing Secret and caBundle, one replica, all groups',
    release: 'plain',
    values: {
      replicaCount: 1,
      certManager: { enabled: false },
      tls: { existingSecret: 'my-webhook-tls' },
      webhook: { caBundle: Buffer.from(caPem).toString('base64') },
      rbac: { allGroups: true },
      serviceAccount: { name: 'migrator' },
      migrator: { stateKey: { existingSecret: 'my-state-key' } },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'plain-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'plain-crd-migrator', port: 443, path: '/validate-crd' }),
      caBundlePem: caPem,
      migratorUsers: [`system:serviceaccount:${ns}:migrator`],
    }),
    kinds: [
      'ServiceAccount/migrator',
      'ConfigMap/plain-crd-migrator',
      'ClusterRole/plain-crd-migrator',
      'ClusterRoleBinding/plain-crd-migrator',
      'Role/plain-crd-migrator-leader-election',
      'Role/plain-crd-migrator-NS-events',
      'RoleBinding/plain-crd-migrator-leader-election',
      'RoleBinding/plain-crd-migrator-NS-events',
      'Service/plain-crd-migrator',
      'Deployment/plain-crd-migrator',
      'ValidatingWebhookConfiguration/plain-crd-migrator.crd-migrator.io',
    ],
  },
  {
    // Re-encrypting Secrets after an encryption-at-rest key rotation, and Deployments: KSVM's
    // StorageVersionMigrations are reconciled, their CRD installed, and only the listed
    // built-in resources are granted (a duplicate entry gives one rule).
    name: 'StorageVersionMigrations: their CRD, their RBAC, built-in resources',
    release: 'svm',
    values: {
      storageVersionMigrations: { enabled: true },
      migrator: {
        builtInResources: [
          { group: '', resource: 'secrets' },
          { group: 'apps', resource: 'deployments' },
          { group: '', resource: 'secrets' },
        ],
      },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'svm-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'svm-crd-migrator', port: 443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/svm-crd-migrator-serving`,
      migratorUsers: [`system:serviceaccount:${ns}:svm-crd-migrator`],
    }),
    kinds: [
      'CustomResourceDefinition/storageversionmigrations.migration.k8s.io',
      'ServiceAccount/svm-crd-migrator',
      'ConfigMap/svm-crd-migrator',
      'Secret/svm-crd-migrator-state-key',
      'ClusterRole/svm-crd-migrator',
      'ClusterRoleBinding/svm-crd-migrator',
      'Role/svm-crd-migrator-leader-election',
      'Role/svm-crd-migrator-NS-events',
      'RoleBinding/svm-crd-migrator-leader-election',
      'RoleBinding/svm-crd-migrator-NS-events',
      'Service/svm-crd-migrator',
      'Deployment/svm-crd-migrator',
      'Certificate/svm-crd-migrator-ca',
      'Certificate/svm-crd-migrator-serving',
      'Issuer/svm-crd-migrator-selfsigned',
      'Issuer/svm-crd-migrator-ca',
      'PodDisruptionBudget/svm-crd-migrator',
      'ValidatingWebhookConfiguration/svm-crd-migrator.crd-migrator.io',
    ],
  },
  {
    // Webhook only: no RBAC, no token, no state key. The groups, the built-in resources, the
    // StorageVersionMigrations and the token setting are still asked for, and still not
    // granted. KSVM's CRD is an API, not a grant: it is still installed.
    name: 'webhook only (migrator.enabled=false): no RBAC, no token, no state key',
    release: 'wh',
    values: {
      migrator: { enabled: false, names: ['gadgets.example.net'], builtInResources: [{ group: '', resource: 'secrets' }] },
      rbac: { managedGroups: ['example.com'] },
      serviceAccount: { automountServiceAccountToken: true },
      storageVersionMigrations: { enabled: true },
      // The webhook alone calls nobody: egress enabled leaves no rule at all.
      networkPolicy: { enabled: true, apiServerPeers: [KUBE_APISERVER_PODS], egress: { enabled: true } },
      tests: { enabled: true },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'wh-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'wh-crd-migrator', port: 443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/wh-crd-migrator-serving`,
      migratorUsers: [`system:serviceaccount:${ns}:wh-crd-migrator`],
    }),
    kinds: [
      'CustomResourceDefinition/storageversionmigrations.migration.k8s.io',
      'ServiceAccount/wh-crd-migrator',
      'ConfigMap/wh-crd-migrator',
      'Service/wh-crd-migrator',
      'Deployment/wh-crd-migrator',
      'Certificate/wh-crd-migrator-ca',
      'Certificate/wh-crd-migrator-serving',
      'Issuer/wh-crd-migrator-selfsigned',
      'Issuer/wh-crd-migrator-ca',
      'PodDisruptionBudget/wh-crd-migrator',
      'ValidatingWebhookConfiguration/wh-crd-migrator.crd-migrator.io',
      'NetworkPolicy/wh-crd-migrator',
      ...testKinds('wh-crd-migrator'),
    ],
  },
  {
    name: "operators' options: NetworkPolicy (ingress and egress), PrometheusRule, Grafana dashboard elsewhere, helm test",
    release: 'ops',
    values: OPS_VALUES,
    webhook: defaultWebhook('ops'),
    kinds: [
      ...defaultKinds('ops'),
      'ServiceMonitor/ops-crd-migrator',
      'NetworkPolicy/ops-crd-migrator',
      'PrometheusRule/ops-crd-migrator',
      'ConfigMap/ops-crd-migrator-dashboard',
      ...testKinds('ops-crd-migrator'),
    ],
  },
  {
    // For API servers that cannot reach pod IPs: the pods on the node's network, on ports
    // of the operator's choosing, which the Service (by port name) and the probes follow.
    name: "hostNetwork: the node's network and ports, ClusterFirstWithHostNet, a privileged namespace",
    release: 'hn',
    values: { hostNetwork: true, webhook: { port: 19443 }, metrics: { port: 19080 } },
    podSecurity: 'privileged',
    webhook: defaultWebhook('hn'),
    kinds: defaultKinds('hn'),
  },
  {
    // KubeVirt's instancetype revisions: the preset stands for its source and referrers.
    name: 'stash preset kubevirt-instancetypes: RBAC on ControllerRevisions and VirtualMachines',
    release: 'kv',
    values: { migrator: { stashPresets: ['kubevirt-instancetypes'] } },
    webhook: defaultWebhook('kv'),
    kinds: defaultKinds('kv'),
    stashRules: [stashSourceRule('apps', 'controllerrevisions'), stashReferrerRule('kubevirt.io', 'virtualmachines')],
  },
  {
    // An explicit rule, then the preset with its source narrowed to one namespace: the
    // preset's rules are the explicit rule's ControllerRevisions again (dropped) and
    // VirtualMachines. namespaces narrow the listing, not the ClusterRole.
    name: 'explicit stash rules: RBAC on exactly their sources and referrers',
    release: 'stash',
    values: {
      migrator: {
        stashes: [
          EXPLICIT_STASH_RULE,
          {
            preset: 'kubevirt-instancetypes',
            source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', namespaces: ['vms'] },
          },
        ],
      },
    },
    webhook: defaultWebhook('stash'),
    kinds: defaultKinds('stash'),
    stashRules: [
      stashSourceRule('apps', 'controllerrevisions'),
      stashReferrerRule('example.com', 'owners'),
      stashReferrerRule('', 'configmaps'),
      stashReferrerRule('kubevirt.io', 'virtualmachines'),
    ],
  },
]

/** The chart's migrator.enabled for a scenario's values (default true). */
const migratorEnabled = (values: Record<string, any>) => values['migrator']?.enabled !== false
/** The chart's storageVersionMigrations.enabled for a scenario's values (default false). */
const svmEnabled = (values: Record<string, any>) => values['storageVersionMigrations']?.enabled === true

const SVM_CRD = 'storageversionmigrations.migration.k8s.io'
/** The ClusterRole rules storageVersionMigrations.enabled adds, after those of built-in resources. */
const SVM_RULES: Rule[] = [
  { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list', 'watch', 'patch'] },
  { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations/status'], verbs: ['get', 'patch', 'update'] },
]

/**
 * The ClusterRole's first rules, in every render with the migrator (migrator.engine own):
 * CRDs, their status, and kube-apiserver's own StorageVersionMigrations (one migrator at a time).
 */
const BASE_RULES: Rule[] = [
  { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list', 'watch', 'patch'] },
  { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions/status'], verbs: ['patch'] },
  { apiGroups: ['storagemigration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list', 'patch'] },
]

/** Where the chart mounts the state-key Secret (config migrator.stateKeyFile is <dir>/key). */
const STATE_KEY_DIR = '/var/run/crd-migrator/state-key'
const RBAC_KINDS = ['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']

/** The state-key Secret a scenario's pods mount: the user's, or <fullname>-state-key. */
function stateKeySecretName(scenario: Scenario, manifests: Manifest[]): string {
  return scenario.values['migrator']?.stateKey?.existingSecret ?? `${one(manifests, 'Deployment').metadata.name}-state-key`
}

/** kind/name -> dry-run status, per scenario, printed at the end (the report reads it). */
const dryRunReport: Record<string, Record<string, number>> = {}

/** API Priority and Fairness objects (templates/flowschema.yaml, apiPriorityAndFairness.*), checked by kind only here. */
const APF_KINDS = ['FlowSchema', 'PriorityLevelConfiguration']
const chartDefaults = parse(await readFile(join(chartDir, 'values.yaml'), 'utf8')) as Record<string, any>
/** Whether a render with `values` has API Priority and Fairness objects: where the chart has them, enabled, with the migrator. */
function apfExpected(values: Record<string, any>): boolean {
  const enabled = values['apiPriorityAndFairness']?.enabled ?? chartDefaults['apiPriorityAndFairness']?.enabled ?? false
  return existsSync(join(chartDir, 'templates', 'flowschema.yaml')) && enabled === true && migratorEnabled(values)
}

for (const scenario of scenarios) {
  t.test(scenario.name, async (t) => {
    const ns = uniqueName('chart')
    const rendered = await template(scenario.release, ns, scenario.values)
    // What `helm install` installs; the `helm test` hook has its own subtest.
    const manifests = rendered.filter((m) => !isTestHook(m))

    t.test('helm lint --strict', async (t) => {
      const r = await helm(['lint', chartDir, '--strict', '--namespace', ns, ...(await valuesArgs(scenario.values))])
      t.equal(r.code, 0, 'helm lint passes', { output: r.stdout + r.stderr })
      t.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/)
    })

    t.test('renders the expected objects', async (t) => {
      t.same(ids(rendered.filter((m) => !APF_KINDS.includes(m.kind))).sort(), scenario.kinds.map((k) => k.replace('NS', ns)).sort())
      t.equal(
        rendered.some((m) => APF_KINDS.includes(m.kind)),
        apfExpected(scenario.values),
        'API Priority and Fairness objects where the chart has them, enabled, with the migrator',
      )
      const dashboardNamespace = scenario.values['grafanaDashboard']?.namespace || ns
      for (const m of rendered) {
        if (CLUSTER_KINDS.includes(m.kind)) {
          t.notOk(m.metadata.namespace, `${m.kind} is cluster-scoped`)
        } else if (m.kind === 'Role' || m.kind === 'RoleBinding') {
          t.ok(
            m.metadata.namespace === ns || (m.metadata.namespace === 'default' && m.metadata.name.endsWith('-events')),
            `${m.kind}/${m.metadata.name} namespace`,
          )
        } else if (m.kind === 'ConfigMap' && m.metadata.name.endsWith('-dashboard')) {
          t.equal(m.metadata.namespace, dashboardNamespace, `${m.kind}/${m.metadata.name} is in grafanaDashboard.namespace`)
        } else {
          t.equal(m.metadata.namespace, ns, `${m.kind}/${m.metadata.name} is in the release namespace`)
        }
      }
    })

    t.test("the ValidatingWebhookConfiguration is renderWebhookConfiguration() with this release's names", async (t) => {
      const vwc = one(manifests, 'ValidatingWebhookConfiguration')
      t.same(withoutChartLabels(vwc), renderWebhookConfiguration(scenario.webhook(ns)))
      t.same(
        Object.keys(vwc.metadata.labels ?? {}).sort(),
        [...CHART_ONLY_LABELS, 'app.kubernetes.io/name', 'app.kubernetes.io/component'].sort(),
      )
    })

    t.test('the config file passes the config schema', async (t) => {
      const { text } = configOf(t, manifests)
      const config = await loadRenderedConfig(text)
      const sa = one(manifests, 'ServiceAccount').metadata.name
      t.equal(
        config.identities.migratorUsers[0],
        `system:serviceaccount:${ns}:${sa}`,
        "the chart's ServiceAccount is the migrator identity",
      )
      t.equal(config.webhook.certFile, '/tls/tls.crt')
      t.equal(config.webhook.keyFile, '/tls/tls.key')
      t.equal(config.leaderElection.enabled, true)
      t.equal(config.leaderElection.leaseName, one(manifests, 'Deployment').metadata.name)
      const webhook = renderWebhookConfiguration(scenario.webhook(ns))
      t.ok(
        webhook.webhooks[0]!.matchConditions[0]!.expression.includes(`'${config.annotations.migrating}'`),
        'webhook and server use one annotation key',
      )
      t.same(
        renderWebhookConfiguration({
          ...scenario.webhook(ns),
          migratorUsers: config.identities.migratorUsers,
          migratorGroups: config.identities.migratorGroups,
        }),
        webhook,
        'the webhook configuration skips exactly the identities the server treats as the migrator',
      )
      const v = scenario.values
      const raw = parse(text) as { migrator: Record<string, unknown> }
      if (migratorEnabled(v)) {
        t.equal(config.migrator.enabled, true)
        t.equal(raw.migrator['stateKeyFile'], `${STATE_KEY_DIR}/key`, 'migrator.stateKeyFile is the mounted state key')
      } else {
        t.equal(config.migrator.enabled, false, 'webhook only')
        t.notOk('stateKeyFile' in raw.migrator, 'no state key without the migrator')
      }
      if (svmEnabled(v)) {
        t.equal(raw.migrator['storageVersionMigrations'], true, 'migrator.storageVersionMigrations: true')
        t.equal(config.migrator.storageVersionMigrations, true)
      } else {
        t.notOk('storageVersionMigrations' in raw.migrator, 'no migrator.storageVersionMigrations key unless enabled')
        t.equal(config.migrator.storageVersionMigrations, false, 'the default: off')
      }
      t.notOk('builtInResources' in raw.migrator, 'builtInResources is RBAC only, not config')
      const stashPresets = v['migrator']?.stashPresets
      const stashes = v['migrator']?.stashes
      if (stashPresets) t.same(raw.migrator['stashPresets'], stashPresets, 'migrator.stashPresets as given')
      else t.notOk('stashPresets' in raw.migrator, 'no migrator.stashPresets key unless set')
      if (stashes) t.same(raw.migrator['stashes'], stashes, 'migrator.stashes as given')
      else t.notOk('stashes' in raw.migrator, 'no migrator.stashes key unless set')
      // The RBAC covers what the migrator will do with the rules it resolves from this config.
      const resolved = resolveStashRules(config.migrator.stashPresets, config.migrator.stashes)
      t.equal(resolved.length, (stashPresets?.length ?? 0) + (stashes?.length ?? 0), 'every stash rule resolves')
      const clusterRole = manifests.find((m) => m.kind === 'ClusterRole')
      if (clusterRole) {
        const cr = rulesOf(clusterRole)
        t.same(
          cr.slice(cr.length - (scenario.stashRules?.length ?? 0)),
          stashRbac(resolved),
          "the ClusterRole's stash rules are those of the config's resolved stash rules",
        )
      }
      if (v['migrator']?.selector !== undefined) {
        t.equal(config.migrator.selector.labelSelector, v['migrator'].selector)
        t.same(config.migrator.selector.names, v['migrator'].names)
        t.equal(config.migrator.concurrency, v['migrator'].concurrency)
        t.equal(config.migrator.qps, v['migrator'].qps)
        t.same(config.migrator.skipPhases, v['migrator'].skipPhases)
        t.match(config.migrator.crds['widgets.example.com'], { useStatusSubresource: true, concurrency: 4, qps: 10 })
        t.equal(config.migrator.pageSize, 200, 'extraConfig is merged')
        t.same(config.identities.migratorUsers.slice(1), ['ops-bot'])
        t.same(config.identities.breakGlassGroups, ['system:masters', 'oncall'])
        t.equal(config.logLevel, 'debug')
        t.equal(config.webhook.port, 10443)
        t.equal(config.metrics.port, 9090)
      } else {
        t.equal(config.migrator.selector.labelSelector, 'crd-migrator.io/managed=true')
        t.same(config.identities.breakGlassGroups, ['system:masters'])
        t.equal(config.webhook.port, v['webhook']?.port ?? 9443)
        t.equal(config.metrics.port, v['metrics']?.port ?? 8080)
      }
    })

    t.test('pod: restricted security context, probes, mounts, identity', async (t) => {
      const spec = podSpec(manifests)
      const c = spec['containers'][0]
      t.match(spec['securityContext'], { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } })
      t.match(c.securityContext, {
        runAsNonRoot: true,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
        seccompProfile: { type: 'RuntimeDefault' },
      })
      t.same(c.args, ['serve', '--config', '/etc/crd-migrator/config.yaml'])
      t.match(c.livenessProbe, { httpGet: { path: '/healthz', port: 'metrics' } })
      t.match(c.readinessProbe, { httpGet: { path: '/readyz', port: 'metrics' } })
      t.ok(c.resources.requests && c.resources.limits, 'requests and limits')
      t.same(
        c.env.map((e: { name: string }) => e.name),
        ['POD_NAMESPACE', 'POD_NAME'],
      )
      const tlsVolume = spec['volumes'].find((v: { name: string }) => v.name === 'tls')
      const tlsMount = c.volumeMounts.find((m: { name: string }) => m.name === 'tls')
      t.equal(tlsMount.mountPath, '/tls')
      t.notOk(tlsMount.subPath, 'no subPath: renewals reach the pod')
      const expectedSecret = scenario.values['tls']?.existingSecret ?? `${one(manifests, 'Deployment').metadata.name}-serving-tls`
      t.equal(tlsVolume.secret.secretName, expectedSecret)
      const cert = manifests.find((m) => m.kind === 'Certificate' && m.metadata.name.endsWith('-serving'))
      if (cert) {
        const svc = one(manifests, 'Service').metadata.name
        t.match(cert['spec'], {
          secretName: expectedSecret,
          dnsNames: [svc, `${svc}.${ns}`, `${svc}.${ns}.svc`, `${svc}.${ns}.svc.cluster.local`],
        })
      }
      const ports = Object.fromEntries(c.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]))
      const svcPorts = (one(manifests, 'Service')['spec'] as { ports: Array<{ name: string; port: number; targetPort: string }> }).ports
      t.same(
        svcPorts.map((p) => [p.name, p.targetPort]),
        [
          ['webhook', 'webhook'],
          ['metrics', 'metrics'],
        ],
      )
      t.equal(ports['webhook'], scenario.values['webhook']?.port ?? 9443)
      t.equal(ports['metrics'], scenario.values['metrics']?.port ?? 8080)
      // /metrics, /healthz and /readyz are on the ops listener only: the webhook port serves reviews.
      const monitor = manifests.find((m) => m.kind === 'ServiceMonitor')
      if (monitor)
        t.match(monitor['spec'], { endpoints: [{ port: 'metrics', path: '/metrics' }] }, 'the ServiceMonitor scrapes the ops listener')
      t.equal((one(manifests, 'Deployment')['spec'] as { replicas: number }).replicas, scenario.values['replicaCount'] ?? 2)
      if (scenario.values['hostNetwork']) {
        t.equal(spec['hostNetwork'], true, "hostNetwork: on the node's network")
        t.equal(spec['dnsPolicy'], 'ClusterFirstWithHostNet', 'still resolving cluster names')
      } else {
        t.notOk('hostNetwork' in spec, 'the pod network')
        t.notOk('dnsPolicy' in spec, 'the default DNS policy')
      }

      const enabled = migratorEnabled(scenario.values)
      t.equal(spec['automountServiceAccountToken'], enabled, `pod: ServiceAccount token mounted only with the migrator (${enabled})`)
      t.equal(one(manifests, 'ServiceAccount')['automountServiceAccountToken'], enabled, 'ServiceAccount: the same')
      const keyVolume = spec['volumes'].find((v: { name: string }) => v.name === 'state-key')
      const keyMount = c.volumeMounts.find((m: { name: string }) => m.name === 'state-key')
      if (enabled) {
        t.same(keyMount, { name: 'state-key', mountPath: STATE_KEY_DIR, readOnly: true }, 'the state key is mounted read-only')
        t.same(keyVolume, {
          name: 'state-key',
          secret: { secretName: stateKeySecretName(scenario, manifests), items: [{ key: 'key', path: 'key' }], defaultMode: 0o440 },
        })
      } else {
        t.notOk(keyVolume, 'no state-key volume without the migrator')
        t.notOk(keyMount, 'no state-key mount without the migrator')
      }
    })

    t.test('the state-key Secret', async (t) => {
      const secrets = manifests.filter((m) => m.kind === 'Secret')
      if (!migratorEnabled(scenario.values) || scenario.values['migrator']?.stateKey?.existingSecret) {
        t.same(ids(secrets), [], "none: webhook only, or the user's own Secret")
        return
      }
      const name = stateKeySecretName(scenario, manifests)
      t.equal(name, `${one(manifests, 'Deployment').metadata.name}-state-key`)
      const secret = one(manifests, 'Secret', name)
      t.equal(secret['type'], 'Opaque')
      const data = secret['data'] as Record<string, string>
      t.same(Object.keys(data), ['key'])
      const text = Buffer.from(data['key']!, 'base64').toString('utf8')
      t.match(text, /^[A-Za-z0-9+/]{43}=$/, 'the key file holds base64 text')
      t.equal(Buffer.from(text, 'base64').length, 32, 'of 32 random bytes')
      // helm template cannot look the Secret up: every render makes a new key.
      const again = one(await template(scenario.release, ns, scenario.values), 'Secret', name)
      t.not((again['data'] as Record<string, string>)['key'], data['key'], 'a new key per render without lookup')
    })

    t.test('RBAC is least privilege', async (t) => {
      if (!migratorEnabled(scenario.values)) {
        t.same(ids(manifests.filter((m) => RBAC_KINDS.includes(m.kind))), [], 'webhook only: no ClusterRole, Role or binding at all')
        return
      }
      checkLeastPrivilege(t, manifests, Boolean(scenario.values['rbac']?.allGroups), (scenario.stashRules ?? []).filter(isStashSourceRule))
      const all = rulesOf(one(manifests, 'ClusterRole'))
      // The stash rules come last.
      const cr = all.slice(0, all.length - (scenario.stashRules?.length ?? 0))
      t.same(all.slice(cr.length), scenario.stashRules ?? [], 'the stash rules, exactly')
      if (!scenario.stashRules) {
        t.notOk(
          all.some((r) => r.verbs.includes('create') || r.verbs.includes('delete')),
          'no create or delete in the ClusterRole without stash rules',
        )
        t.notOk(
          all.some((r) => r.resources?.includes('controllerrevisions') || r.apiGroups?.includes('kubevirt.io')),
          'no ControllerRevision or KubeVirt rule without stash rules',
        )
      }
      t.same(cr.slice(0, BASE_RULES.length), BASE_RULES)
      if (scenario.values['rbac']?.allGroups) {
        t.same(cr.slice(BASE_RULES.length), [{ apiGroups: ['*'], resources: ['*'], verbs: ['get', 'list', 'patch'] }])
      } else if (svmEnabled(scenario.values)) {
        t.same(cr.slice(BASE_RULES.length), [
          { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get', 'list', 'patch'] },
          ...SVM_RULES,
        ])
      } else if (scenario.values['rbac']?.managedGroups) {
        t.same(cr.slice(BASE_RULES.length), [
          { apiGroups: ['example.com'], resources: ['*'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['stable.example.org'], resources: ['*'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['gateway.networking.k8s.io'], resources: ['*'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['example.net'], resources: ['gadgets'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['example.com'], resources: ['widgets'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['patch'] },
        ])
      } else {
        t.equal(cr.length, BASE_RULES.length, 'no custom-resource access until the operator names groups (stash rules aside)')
      }
      if (!svmEnabled(scenario.values)) {
        t.notOk(
          cr.some((r) => r.apiGroups?.includes('migration.k8s.io')),
          'no StorageVersionMigration rule without storageVersionMigrations.enabled',
        )
        t.notOk(
          cr.some((r) => r.apiGroups?.includes('') || r.apiGroups?.includes('apps')),
          'no built-in resource without migrator.builtInResources',
        )
      }
      const lease = manifests.find((m) => m.kind === 'Role' && m.metadata.name.endsWith('-leader-election'))!
      t.same(rulesOf(lease), [
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
        {
          apiGroups: ['coordination.k8s.io'],
          resources: ['leases'],
          resourceNames: [one(manifests, 'Deployment').metadata.name],
          verbs: ['get', 'update'],
        },
      ])
      const events = manifests.find((m) => m.kind === 'Role' && m.metadata.namespace === 'default')!
      t.same(rulesOf(events), [
        { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list'] },
      ])
    })

    if (scenario.values['hostNetwork']) {
      t.test('Pod Security: host networking needs a privileged namespace (README)', async (t) => {
        const restricted = uniqueName('chart-hn')
        await createNamespace(restricted)
        const deployment = one(manifests, 'Deployment')
        const template = (deployment['spec'] as { template: { metadata: object; spec: object } }).template
        const pod = {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { ...template.metadata, name: 'hn', namespace: restricted },
          spec: template.spec,
        }
        const res = await dryRunCreate(pod, restricted)
        t.equal(res.status, 403, 'refused in a restricted namespace')
        t.match(res.body, /hostNetwork=true/, 'for host networking')
      })
    }

    if (scenario.values['tests']?.enabled) {
      t.test('the helm test hook: a restricted Pod of the chart image, with a narrow identity of its own', async (t) => {
        checkTestHook(t, rendered, ns)
      })
    }

    t.test('server-side dry-run on the kube-apiserver', async (t) => {
      await installThirdPartyCrds()
      await createNamespace(ns, scenario.podSecurity)
      if (scenario.values['grafanaDashboard']?.namespace) await createNamespace(scenario.values['grafanaDashboard'].namespace)
      dryRunReport[scenario.name] = await dryRunAll(t, rendered, ns, scenario.podSecurity)
    })
  })
}

// --- the `helm test` hook ------------------------------------------------------------------

const HELM_TEST_SCRIPT_FILE = join(chartDir, 'files', 'helm-test.mjs')
const HELM_TEST_SCRIPT = await readFile(HELM_TEST_SCRIPT_FILE, 'utf8')

interface TestChecks {
  webhook: { name: string; crd: string; annotation: string }
  subject: { user: string; groups: string[] }
  access: Array<{ allowed: boolean; what: string; attributes: Record<string, string> }>
}

/** The hook's checks.json, from its ConfigMap. */
function testChecksOf(hooks: Manifest[]): TestChecks {
  return JSON.parse((one(hooks, 'ConfigMap')['data'] as Record<string, string>)['checks.json']!) as TestChecks
}

/** The hook's objects: hooks all, the Pod last and kept, the others gone once it passes; the narrowest RBAC. */
function checkTestHook(t: T, rendered: Manifest[], ns: string): void {
  const hooks = rendered.filter(isTestHook)
  const installed = rendered.filter((m) => !isTestHook(m))
  const fullname = one(installed, 'Deployment').metadata.name
  t.same(
    ids(hooks).sort(),
    testKinds(fullname)
      .map((k) => k.replace('NS', ns))
      .sort(),
    'the hook objects',
  )
  const pod = one(hooks, 'Pod')
  const weight = (m: Manifest) => Number(m.metadata.annotations?.['helm.sh/hook-weight'] ?? '0')
  for (const m of hooks.filter((m) => m !== pod)) {
    t.ok(weight(m) < weight(pod), `${m.kind} is created before the Pod`)
    t.equal(
      m.metadata.annotations?.['helm.sh/hook-delete-policy'],
      'before-hook-creation,hook-succeeded',
      `${m.kind}: gone once the test passes`,
    )
  }
  t.equal(pod.metadata.annotations?.['helm.sh/hook-delete-policy'], 'before-hook-creation', 'the Pod stays, for its log')
  const spec = pod['spec'] as Record<string, any>
  const server = podSpec(installed)
  const container = spec['containers'][0]
  t.equal(container.image, server['containers'][0].image, "the chart's own image")
  t.same(container.command, ['/nodejs/bin/node', '/etc/crd-migrator-test/helm-test.mjs'], 'runs files/helm-test.mjs')
  t.same(container.securityContext, server['containers'][0].securityContext, "the server's container security context")
  t.same(spec['securityContext'], server['securityContext'], "the server's pod security context")
  t.equal(spec['restartPolicy'], 'Never')
  t.equal(spec['serviceAccountName'], `${fullname}-test`, "its own ServiceAccount, not the migrator's")
  t.equal(one(hooks, 'ServiceAccount').metadata.name, `${fullname}-test`)
  const probe = one(hooks, 'CustomResourceDefinition')
  t.equal(probe.metadata.name, `probes.${fullname}.${ns}.helm-test.crd-migrator.io`, 'a probe CRD of its own, per release')
  t.same(
    rulesOf(one(hooks, 'ClusterRole')),
    [
      { apiGroups: ['authorization.k8s.io'], resources: ['subjectaccessreviews'], verbs: ['create'] },
      {
        apiGroups: ['apiextensions.k8s.io'],
        resources: ['customresourcedefinitions'],
        resourceNames: [probe.metadata.name],
        verbs: ['patch'],
      },
    ],
    'it may ask SubjectAccessReviews and patch its probe CRD, nothing more',
  )
  t.same(one(hooks, 'ClusterRoleBinding')['subjects'], [{ kind: 'ServiceAccount', name: `${fullname}-test`, namespace: ns }])
  t.equal(
    (one(hooks, 'ConfigMap')['data'] as Record<string, string>)['helm-test.mjs'],
    HELM_TEST_SCRIPT,
    'the script is files/helm-test.mjs',
  )
  const checks = testChecksOf(hooks)
  t.same(checks.webhook, { name: WEBHOOK_NAME, crd: probe.metadata.name, annotation: 'crd-migrator.io/helm-test' }, 'the webhook check')
  t.equal(
    checks.subject.user,
    `system:serviceaccount:${ns}:${one(installed, 'ServiceAccount').metadata.name}`,
    "the migrator's ServiceAccount",
  )
  t.ok(
    checks.access.some((c) => c.allowed === false),
    'it checks what the migrator may not do, too',
  )
}

/** Runs files/helm-test.mjs as a pod would, against the control plane: the ServiceAccount token in saDir, checks.json in checksFile. */
function runHelmTestScript(saDir: string, checksFile: string): Promise<{ code: number | null; output: string }> {
  const server = new URL(cp.apiservers[0]!.server)
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [HELM_TEST_SCRIPT_FILE], {
      env: {
        PATH: process.env['PATH'],
        KUBERNETES_SERVICE_HOST: server.hostname,
        KUBERNETES_SERVICE_PORT: server.port,
        CRD_MIGRATOR_TEST_SA_DIR: saDir,
        CRD_MIGRATOR_TEST_CHECKS: checksFile,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, output }))
  })
}

/** Polls until `probe` answers `want` (RBAC reaches the authorizer a moment after it is written). */
async function waitFor(what: string, probe: () => Promise<boolean>, want = true, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while ((await probe()) !== want) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

t.test(
  'the helm test script, run against the real API server: passes with the RBAC and a webhook that judges, fails without either',
  async (t) => {
    const ns = uniqueName('chart-ht')
    await createNamespace(ns)
    const release = uniqueName('ht')
    // Every kind of grant checks.json covers: managed groups, named CRDs with /status, built-in
    // resources, StorageVersionMigrations, stash rules, leader election.
    const mig = scenarios.find((s) => s.release === 'mig')!.values
    const values = {
      ...mig,
      migrator: {
        ...mig['migrator'],
        builtInResources: [{ group: 'apps', resource: 'deployments' }],
        stashPresets: ['kubevirt-instancetypes'],
      },
      storageVersionMigrations: { enabled: true, installCRD: false },
      tests: { enabled: true },
    }
    const rendered = await template(release, ns, values)
    const installed = rendered.filter((m) => !isTestHook(m))
    const hooks = rendered.filter(isTestHook)
    const checks = testChecksOf(hooks)
    t.ok(checks.access.length >= 20, `${checks.access.length} access checks`)
    for (const attrs of [
      { verb: 'patch', group: 'example.net', resource: 'gadgets' },
      { verb: 'patch', group: 'example.com', resource: 'widgets', subresource: 'status' },
      { verb: 'patch', group: 'apps', resource: 'deployments' },
      { verb: 'watch', group: 'migration.k8s.io', resource: 'storageversionmigrations' },
      { verb: 'create', group: 'apps', resource: 'controllerrevisions' },
    ])
      t.ok(
        checks.access.some((c) => c.allowed && isDeepStrictEqual(c.attributes, attrs)),
        `checks.json asks for ${attrs.verb} ${attrs.resource}${'subresource' in attrs ? '/status' : ''}`,
      )

    // The migrator's RBAC, and the hook's own objects, for real. The probe CRD carries the
    // test webhook's scope label: on this shared API server the webhook sees only its own CRDs.
    const can = await createRbacOf(t, installed, ns)
    const scope = uniqueName('ht')
    const probe = structuredClone(one(hooks, 'CustomResourceDefinition'))
    probe.metadata.labels = { ...probe.metadata.labels, 'crd-migrator-test/webhook': scope }
    for (const m of [one(hooks, 'ServiceAccount'), one(hooks, 'ClusterRole'), one(hooks, 'ClusterRoleBinding'), probe]) {
      const path = await collectionPath(m, ns)
      const res = await cp.apiRequest(path, { method: 'POST', body: m })
      t.equal(res.status, 201, `create ${m.kind}/${m.metadata.name}`, { body: res.status >= 300 ? res.body : undefined })
      t.teardown(async () => {
        await cp.apiRequest(`${path}/${m.metadata.name}`, { method: 'DELETE' })
      })
    }
    const testSa = one(hooks, 'ServiceAccount').metadata.name
    const tokenRes = await cp.apiRequest(`/api/v1/namespaces/${ns}/serviceaccounts/${testSa}/token`, {
      method: 'POST',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
    })
    t.equal(tokenRes.status, 201, "the test ServiceAccount's token")
    const saDir = await mkdtemp(join(scratch, 'sa-'))
    await writeFile(join(saDir, 'token'), (tokenRes.json as { status: { token: string } }).status.token)
    await writeFile(join(saDir, 'ca.crt'), cp.caPem)
    const checksFile = join(saDir, 'checks.json')
    await writeFile(checksFile, JSON.stringify(checks))
    const crds = { group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions' }
    await waitFor("the migrator's RBAC in effect", () => can({ ...crds, verb: 'patch', name: 'x.example.com' }))

    // In order, each on the state the one before left: the subtests are awaited.
    const webhookLine = /^(ok {2}|FAIL) {2}the API server called webhook storage-freeze\.crd-migrator\.io.*$/m
    await t.test('no webhook configured: the forged annotation gets through, and the test says so', async (t) => {
      const run = await runHelmTestScript(saDir, checksFile)
      t.equal(run.code, 1, 'exit 1', { output: run.output })
      t.match(run.output, webhookLine)
      t.match(
        run.output,
        /FAIL {2}the API server called webhook[^\n]*\n {6}the dry run was ALLOWED/,
        'the webhook check failed: not sent to a webhook',
      )
      t.match(run.output, new RegExp(`1 of ${checks.access.length + 1} checks FAILED`))
    })

    const hook = await startTestWebhook(cp, scope, { migratorUsers: [checks.subject.user] })
    await t.test('the webhook answers and the RBAC is right: every check passes', async (t) => {
      const run = await runHelmTestScript(saDir, checksFile)
      t.equal(run.code, 0, 'exit 0', { output: run.output })
      t.comment(`helm-test.mjs said:\n${run.output}`)
      t.match(
        run.output,
        /^ok {4}the API server called webhook [^\n]*\n {6}admission webhook "storage-freeze\.crd-migrator\.io" denied the request/m,
      )
      t.match(run.output, /crd-migrator\.io\/helm-test/, "the webhook's message names the forged annotation")
      t.match(run.output, new RegExp(`all ${checks.access.length + 1} checks passed`))
      t.notMatch(run.output, /FAIL/)
    })

    await t.test("the migrator's ClusterRoleBinding gone: its permissions fail, the webhook check still passes", async (t) => {
      const fullname = one(installed, 'Deployment').metadata.name
      const res = await cp.apiRequest(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${fullname}`, { method: 'DELETE' })
      t.equal(res.status, 200, 'deleted')
      await waitFor("the migrator's ClusterRole out of effect", () => can({ ...crds, verb: 'patch', name: 'x.example.com' }), false)
      const run = await runHelmTestScript(saDir, checksFile)
      t.equal(run.code, 1, 'exit 1', { output: run.output })
      t.match(run.output, /^ok {4}the API server called webhook/m)
      t.match(
        run.output,
        /^FAIL {2}\S+ can patch customresourcedefinitions\.apiextensions\.k8s\.io any\.example\.com \(the freeze and its progress\)\n {6}it CANNOT/m,
      )
      t.match(run.output, /^ok {4}\S+ can create leases\.coordination\.k8s\.io in /m, 'the namespaced Roles still hold')
    })

    await t.test('the webhook down: the API server cannot reach it, and the test says so', async (t) => {
      await hook.stopServer()
      const run = await runHelmTestScript(saDir, checksFile)
      t.equal(run.code, 1, 'exit 1', { output: run.output })
      t.match(
        run.output,
        /^FAIL {2}the API server called webhook[^\n]*\n {6}the API server could not reach the webhook[^\n]*failed calling webhook/m,
      )
    })
  },
)

// --- labels ----------------------------------------------------------------------------------

t.test('every object of every render carries the app.kubernetes.io labels', async (t) => {
  // Every scenario, and every option on at once (with a nameOverride).
  const renders: Array<[string, string, Record<string, any>]> = scenarios.map((s) => [s.name, s.release, s.values])
  renders.push([
    'everything on, nameOverride',
    'all',
    {
      ...OPS_VALUES,
      nameOverride: 'migrator',
      storageVersionMigrations: { enabled: true },
      migrator: { stashPresets: ['kubevirt-instancetypes'] },
    },
  ])
  renders.push([
    'webhook only, helm test',
    'who',
    { migrator: { enabled: false }, tests: { enabled: true }, grafanaDashboard: { enabled: true } },
  ])
  for (const [what, release, values] of renders) {
    const rendered = await template(release, 'labels-ns', values)
    const name = values['nameOverride'] ?? 'crd-migrator'
    for (const m of rendered) {
      const labels = m.metadata.labels ?? {}
      const id = `${what}: ${m.kind}/${m.metadata.name}`
      t.same(
        APP_LABELS.filter((l) => !labels[l]),
        [],
        `${id} has every app.kubernetes.io label`,
      )
      // The ValidatingWebhookConfiguration's name and component are renderWebhookConfiguration()'s.
      t.equal(labels['app.kubernetes.io/name'], m.kind === 'ValidatingWebhookConfiguration' ? 'crd-migrator' : name, `${id}: name`)
      t.equal(labels['app.kubernetes.io/instance'], release, `${id}: instance`)
      t.equal(labels['app.kubernetes.io/part-of'], 'crd-migrator', `${id}: part-of`)
      t.equal(labels['app.kubernetes.io/managed-by'], 'Helm', `${id}: managed-by`)
      t.equal(labels['app.kubernetes.io/version'], '0.1.0', `${id}: version (appVersion)`)
      if (m.kind === 'Deployment') {
        const pod = (m['spec'] as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels
        t.same(
          APP_LABELS.filter((l) => !pod[l]),
          [],
          `${id}: its pods too`,
        )
      }
    }
    const components = new Set(rendered.map((m) => m.metadata.labels?.['app.kubernetes.io/component']))
    t.ok(components.has('server'), `${what}: components ${[...components].join(', ')}`)
  }
})

t.test("the test Pod is none of the server's pods: not in the PodDisruptionBudget, not behind the Service's ports", async (t) => {
  const rendered = await template('sel', 'sel-ns', { tests: { enabled: true } })
  const testPod = one(rendered.filter(isTestHook), 'Pod')
  const labels = testPod.metadata.labels!
  const pdb = one(rendered, 'PodDisruptionBudget')['spec'] as {
    selector: { matchLabels: Record<string, string>; matchExpressions: Array<{ key: string; operator: string; values: string[] }> }
  }
  const matches = (l: Record<string, string>) =>
    Object.entries(pdb.selector.matchLabels).every(([k, v]) => l[k] === v) &&
    pdb.selector.matchExpressions.every((e) => e.operator === 'NotIn' && !e.values.includes(l[e.key] ?? ''))
  t.notOk(matches(labels), 'the PodDisruptionBudget does not count the test Pod')
  const serverPod = (one(rendered, 'Deployment')['spec'] as { template: { metadata: { labels: Record<string, string> } } }).template
    .metadata.labels
  t.ok(matches(serverPod), 'it counts the server pods')
  t.ok(
    matches({ 'app.kubernetes.io/name': 'crd-migrator', 'app.kubernetes.io/instance': 'sel' }),
    'and pods of a release from before the component label',
  )
  // The Service targets named ports the test Pod does not have: it gets no traffic.
  const ports = (one(rendered, 'Service')['spec'] as { ports: Array<{ targetPort: string }> }).ports.map((p) => p.targetPort)
  const testPorts = ((testPod['spec'] as { containers: Array<{ ports?: Array<{ name: string }> }> }).containers[0]!.ports ?? []).map(
    (p) => p.name,
  )
  t.same(
    ports.filter((p) => testPorts.includes(p)),
    [],
    'no port of the Service is a port of the test Pod',
  )
})

// --- monitoring: the metrics the dashboard and the alerts may name ----------------------------

/** Label names of each metric the code registers (the /metrics of `crd-migrator serve`), by series name. */
async function exportedMetrics(): Promise<Map<string, string[]>> {
  const registry = new Registry()
  new MigratorMetrics(registry)
  createWebhookMetrics(registry)
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
})

t.test('the dry-run check has teeth: broken objects are refused', async (t) => {
  await installThirdPartyCrds()
  const ns = uniqueName('chart-neg')
  await createNamespace(ns)
  const manifests = await template('neg', ns, {})
  const cert = structuredClone(one(manifests, 'Certificate', 'neg-crd-migrator-serving'))
  ;(cert['spec'] as Record<string, unknown>)['dnsNamez'] = ['typo']
  t.not((await dryRunCreate(cert, ns)).status, 201, 'an unknown field in a cert-manager Certificate (strict field validation)')

  const vwc = structuredClone(one(manifests, 'ValidatingWebhookConfiguration'))
  ;(vwc['webhooks'] as Array<{ matchConditions: Array<{ expression: string }> }>)[0]!.matchConditions[0]!.expression = "'unterminated"
  t.equal((await dryRunCreate(vwc, ns)).status, 422, 'a matchCondition that does not compile')

  const spec = structuredClone(podSpec(manifests))
  spec['containers'][0].securityContext = { ...spec['containers'][0].securityContext, allowPrivilegeEscalation: true }
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'escalating', namespace: ns }, spec } as Manifest
  t.equal((await dryRunCreate(pod, ns)).status, 403, 'a pod that may escalate privileges, in the restricted namespace')
})

/**
 * Creates the RBAC objects of a render for real (deleted at the end of the test) and returns
 * a SubjectAccessReview probe for the render's ServiceAccount.
 */
async function createRbacOf(t: T, manifests: Manifest[], ns: string): Promise<(attrs: Record<string, string>) => Promise<boolean>> {
  for (const m of manifests.filter((m) => RBAC_KINDS.includes(m.kind))) {
    const path = await collectionPath(m, ns)
    const res = await cp.apiRequest(path, { method: 'POST', body: m })
    t.equal(res.status, 201, `create ${m.kind}/${m.metadata.name}`, { body: res.status >= 300 ? res.body : undefined })
    t.teardown(async () => {
      await cp.apiRequest(`${path}/${m.metadata.name}`, { method: 'DELETE' })
    })
  }
  const user = `system:serviceaccount:${ns}:${one(manifests, 'ServiceAccount').metadata.name}`
  return async (attrs) => {
    const res = await cp.apiRequest('/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      method: 'POST',
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user,
          groups: ['system:serviceaccounts', `system:serviceaccounts:${ns}`, 'system:authenticated'],
          resourceAttributes: attrs,
        },
      },
    })
    if (res.status !== 201) throw new Error(`SubjectAccessReview: HTTP ${res.status} ${res.body}`)
    return (res.json as { status: { allowed: boolean } }).status.allowed
  }
}

t.test('RBAC, created for real, allows what the migrator does and nothing else', async (t) => {
  const ns = uniqueName('chart-rbac')
  await createNamespace(ns)
  const release = uniqueName('rb')
  const manifests = await template(release, ns, scenarios[1]!.values)
  const can = await createRbacOf(t, manifests, ns)
  const lease = one(manifests, 'Deployment').metadata.name
  const crds = { group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions' }
  const allowed: Array<[string, Record<string, string>]> = [
    ['watch CRDs', { ...crds, verb: 'watch' }],
    ['patch a CRD', { ...crds, verb: 'patch', name: 'widgets.example.com' }],
    ['patch CRD status', { ...crds, verb: 'patch', subresource: 'status', name: 'widgets.example.com' }],
    ['list widgets in all namespaces', { group: 'example.com', resource: 'widgets', verb: 'list' }],
    ['get a widget', { group: 'example.com', resource: 'widgets', verb: 'get', namespace: 'team-a', name: 'w' }],
    [
      'patch widget status',
      { group: 'example.com', resource: 'widgets', subresource: 'status', verb: 'patch', namespace: 'team-a', name: 'w' },
    ],
    ['patch a resource of a managed group', { group: 'stable.example.org', resource: 'things', verb: 'patch', namespace: 'x', name: 'y' }],
    ['patch a gadget (by name)', { group: 'example.net', resource: 'gadgets', verb: 'patch', name: 'g' }],
    [
      'patch an HTTPRoute (a CRD group under k8s.io)',
      { group: 'gateway.networking.k8s.io', resource: 'httproutes', verb: 'patch', namespace: 'x', name: 'r' },
    ],
    ['create its Lease', { group: 'coordination.k8s.io', resource: 'leases', verb: 'create', namespace: ns }],
    ['renew its Lease', { group: 'coordination.k8s.io', resource: 'leases', verb: 'update', namespace: ns, name: lease }],
    ['create Events in default', { group: 'events.k8s.io', resource: 'events', verb: 'create', namespace: 'default' }],
    ['add to an Event series in default', { group: 'events.k8s.io', resource: 'events', verb: 'patch', namespace: 'default' }],
    [
      'list the API servers (EndpointSlices in default)',
      { group: 'discovery.k8s.io', resource: 'endpointslices', verb: 'list', namespace: 'default' },
    ],
  ]
  const denied: Array<[string, Record<string, string>]> = [
    ['update (PUT) a CRD', { ...crds, verb: 'update', name: 'widgets.example.com' }],
    ['delete a CRD', { ...crds, verb: 'delete', name: 'widgets.example.com' }],
    ['create a CRD', { ...crds, verb: 'create' }],
    ['create a widget', { group: 'example.com', resource: 'widgets', verb: 'create', namespace: 'team-a' }],
    ['delete a widget', { group: 'example.com', resource: 'widgets', verb: 'delete', namespace: 'team-a', name: 'w' }],
    ['patch gadget status (not asked for)', { group: 'example.net', resource: 'gadgets', subresource: 'status', verb: 'patch', name: 'g' }],
    ['patch another group', { group: 'other.example.io', resource: 'things', verb: 'patch', namespace: 'x', name: 'y' }],
    ['read Secrets', { group: '', resource: 'secrets', verb: 'get', namespace: ns, name: 's' }],
    [
      'read its own state key (the kubelet mounts it)',
      { group: '', resource: 'secrets', verb: 'get', namespace: ns, name: `${lease}-state-key` },
    ],
    ['patch a Deployment', { group: 'apps', resource: 'deployments', verb: 'patch', namespace: ns, name: 'd' }],
    [
      'patch a webhook configuration',
      { group: 'admissionregistration.k8s.io', resource: 'validatingwebhookconfigurations', verb: 'patch', name: 'v' },
    ],
    [
      'patch an Ingress (networking.k8s.io is built in; gateway.networking.k8s.io is not)',
      { group: 'networking.k8s.io', resource: 'ingresses', verb: 'patch', namespace: 'x', name: 'i' },
    ],
    ['renew another Lease', { group: 'coordination.k8s.io', resource: 'leases', verb: 'update', namespace: ns, name: 'someone-else' }],
    ['create a Lease elsewhere', { group: 'coordination.k8s.io', resource: 'leases', verb: 'create', namespace: 'kube-system' }],
    ['create Events elsewhere', { group: 'events.k8s.io', resource: 'events', verb: 'create', namespace: 'kube-system' }],
    ['create core/v1 Events (events.k8s.io only)', { group: '', resource: 'events', verb: 'create', namespace: 'default' }],
    ['list EndpointSlices elsewhere', { group: 'discovery.k8s.io', resource: 'endpointslices', verb: 'list', namespace: 'kube-system' }],
    [
      'change EndpointSlices',
      { group: 'discovery.k8s.io', resource: 'endpointslices', verb: 'patch', namespace: 'default', name: 'kubernetes' },
    ],
    [
      'list StorageVersionMigrations (storageVersionMigrations.enabled is off)',
      { group: 'migration.k8s.io', resource: 'storageversionmigrations', verb: 'list' },
    ],
  ]
  for (const [what, attrs] of allowed) t.ok(await can(attrs), `allowed: ${what}`)
  for (const [what, attrs] of denied) t.notOk(await can(attrs), `denied: ${what}`)
})

t.test('RBAC of storageVersionMigrations and builtInResources, created for real: exactly what they name', async (t) => {
  const ns = uniqueName('chart-svm')
  await createNamespace(ns)
  const manifests = await template(uniqueName('sv'), ns, scenarios.find((s) => s.release === 'svm')!.values)
  const can = await createRbacOf(t, manifests, ns)
  const svms = { group: 'migration.k8s.io', resource: 'storageversionmigrations' }
  const allowed: Array<[string, Record<string, string>]> = [
    ['watch StorageVersionMigrations', { ...svms, verb: 'watch' }],
    ['list StorageVersionMigrations', { ...svms, verb: 'list' }],
    ['get a StorageVersionMigration', { ...svms, verb: 'get', name: 'm' }],
    ['patch a StorageVersionMigration', { ...svms, verb: 'patch', name: 'm' }],
    ['get its status', { ...svms, subresource: 'status', verb: 'get', name: 'm' }],
    ['patch its status', { ...svms, subresource: 'status', verb: 'patch', name: 'm' }],
    ['update (PUT) its status', { ...svms, subresource: 'status', verb: 'update', name: 'm' }],
    ['list Secrets in all namespaces', { group: '', resource: 'secrets', verb: 'list' }],
    ['get a Secret', { group: '', resource: 'secrets', verb: 'get', namespace: 'team-a', name: 's' }],
    ['patch a Secret', { group: '', resource: 'secrets', verb: 'patch', namespace: 'team-a', name: 's' }],
    ['list Deployments in all namespaces', { group: 'apps', resource: 'deployments', verb: 'list' }],
    ['patch a Deployment', { group: 'apps', resource: 'deployments', verb: 'patch', namespace: 'team-a', name: 'd' }],
  ]
  const denied: Array<[string, Record<string, string>]> = [
    ['create a StorageVersionMigration', { ...svms, verb: 'create' }],
    ['delete a StorageVersionMigration', { ...svms, verb: 'delete', name: 'm' }],
    ['delete every StorageVersionMigration', { ...svms, verb: 'deletecollection' }],
    ['update (PUT) a StorageVersionMigration', { ...svms, verb: 'update', name: 'm' }],
    [
      "create kube-apiserver's own StorageVersionMigrations (storagemigration.k8s.io; migrator.engine=builtin only)",
      { group: 'storagemigration.k8s.io', resource: 'storageversionmigrations', verb: 'create' },
    ],
    ['watch Secrets (only get, list, patch)', { group: '', resource: 'secrets', verb: 'watch' }],
    ['create a Secret', { group: '', resource: 'secrets', verb: 'create', namespace: 'team-a' }],
    ['update (PUT) a Secret', { group: '', resource: 'secrets', verb: 'update', namespace: 'team-a', name: 's' }],
    ['delete a Secret', { group: '', resource: 'secrets', verb: 'delete', namespace: 'team-a', name: 's' }],
    ['patch a ConfigMap (core, not listed)', { group: '', resource: 'configmaps', verb: 'patch', namespace: 'team-a', name: 'c' }],
    ['patch a Pod (core, not listed)', { group: '', resource: 'pods', verb: 'patch', namespace: 'team-a', name: 'p' }],
    ['patch a StatefulSet (apps, not listed)', { group: 'apps', resource: 'statefulsets', verb: 'patch', namespace: 'team-a', name: 's' }],
    [
      'scale a Deployment (a subresource)',
      { group: 'apps', resource: 'deployments', subresource: 'scale', verb: 'patch', namespace: 'team-a', name: 'd' },
    ],
    [
      'patch Deployment status (a subresource)',
      { group: 'apps', resource: 'deployments', subresource: 'status', verb: 'patch', namespace: 'team-a', name: 'd' },
    ],
    ['patch "secrets" of another group', { group: 'example.com', resource: 'secrets', verb: 'patch', namespace: 'team-a', name: 's' }],
    ['patch a ClusterRole', { group: 'rbac.authorization.k8s.io', resource: 'clusterroles', verb: 'patch', name: 'admin' }],
  ]
  for (const [what, attrs] of allowed) t.ok(await can(attrs), `allowed: ${what}`)
  for (const [what, attrs] of denied) t.notOk(await can(attrs), `denied: ${what}`)
})

t.test('RBAC of stash rules, created for real: their stashes and referrers, nothing more, nothing when unset', async (t) => {
  const revisions = { group: 'apps', resource: 'controllerrevisions' }
  const vms = { group: 'kubevirt.io', resource: 'virtualmachines' }
  // What the preset's phase does (src/migrator/stashes/stash-phase.ts), in any namespace.
  const needed: Array<[string, Record<string, string>]> = [
    ['list ControllerRevisions in all namespaces', { ...revisions, verb: 'list' }],
    ['list ControllerRevisions in a namespace', { ...revisions, verb: 'list', namespace: 'vms' }],
    ['get a ControllerRevision', { ...revisions, verb: 'get', namespace: 'vms', name: 'r' }],
    ['create a ControllerRevision', { ...revisions, verb: 'create', namespace: 'vms' }],
    ['delete a ControllerRevision', { ...revisions, verb: 'delete', namespace: 'vms', name: 'r' }],
    ['list VirtualMachines in a namespace', { ...vms, verb: 'list', namespace: 'vms' }],
    ['list VirtualMachines in all namespaces', { ...vms, verb: 'list' }],
    ['get a VirtualMachine', { ...vms, verb: 'get', namespace: 'vms', name: 'vm' }],
    ['patch a VirtualMachine', { ...vms, verb: 'patch', namespace: 'vms', name: 'vm' }],
  ]
  const never: Array<[string, Record<string, string>]> = [
    ['update (PUT) a ControllerRevision', { ...revisions, verb: 'update', namespace: 'vms', name: 'r' }],
    ['patch a ControllerRevision', { ...revisions, verb: 'patch', namespace: 'vms', name: 'r' }],
    ['delete every ControllerRevision', { ...revisions, verb: 'deletecollection', namespace: 'vms' }],
    ['watch ControllerRevisions', { ...revisions, verb: 'watch' }],
    ['delete a VirtualMachine', { ...vms, verb: 'delete', namespace: 'vms', name: 'vm' }],
    ['create a VirtualMachine', { ...vms, verb: 'create', namespace: 'vms' }],
    ['update (PUT) a VirtualMachine', { ...vms, verb: 'update', namespace: 'vms', name: 'vm' }],
    ['patch VirtualMachine status', { ...vms, subresource: 'status', verb: 'patch', namespace: 'vms', name: 'vm' }],
    ['set finalizers on a VirtualMachine', { ...vms, subresource: 'finalizers', verb: 'update', namespace: 'vms', name: 'vm' }],
    [
      'patch a VirtualMachineInstance (kubevirt.io, not a referrer)',
      { group: 'kubevirt.io', resource: 'virtualmachineinstances', verb: 'patch', namespace: 'vms', name: 'vmi' },
    ],
    [
      'patch an instancetype (not in rbac.managedGroups)',
      { group: 'instancetype.kubevirt.io', resource: 'virtualmachineinstancetypes', verb: 'patch', namespace: 'vms', name: 'i' },
    ],
    ['create a Deployment (apps, not a stash)', { group: 'apps', resource: 'deployments', verb: 'create', namespace: 'vms' }],
    ['delete a StatefulSet (apps, not a stash)', { group: 'apps', resource: 'statefulsets', verb: 'delete', namespace: 'vms', name: 's' }],
  ]

  t.test('with the preset kubevirt-instancetypes', async (t) => {
    const ns = uniqueName('chart-stash')
    await createNamespace(ns)
    const can = await createRbacOf(t, await template(uniqueName('st'), ns, { migrator: { stashPresets: ['kubevirt-instancetypes'] } }), ns)
    for (const [what, attrs] of needed) t.ok(await can(attrs), `allowed: ${what}`)
    for (const [what, attrs] of never) t.notOk(await can(attrs), `denied: ${what}`)
  })

  t.test('with the preset narrowed to namespaces (the ClusterRole still covers all)', async (t) => {
    const ns = uniqueName('chart-stash')
    await createNamespace(ns)
    const values = {
      migrator: {
        stashes: [
          {
            preset: 'kubevirt-instancetypes',
            source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', namespaces: ['vms'] },
          },
        ],
      },
    }
    const can = await createRbacOf(t, await template(uniqueName('st'), ns, values), ns)
    for (const [what, attrs] of needed) t.ok(await can(attrs), `allowed: ${what}`)
    t.ok(await can({ ...revisions, verb: 'delete', namespace: 'elsewhere', name: 'r' }), 'allowed: outside the listed namespaces too')
    for (const [what, attrs] of never) t.notOk(await can(attrs), `denied: ${what}`)
  })

  t.test('unset: none of it', async (t) => {
    const ns = uniqueName('chart-stash')
    await createNamespace(ns)
    const can = await createRbacOf(t, await template(uniqueName('st'), ns, {}), ns)
    for (const [what, attrs] of [...needed, ...never]) t.notOk(await can(attrs), `denied: ${what}`)
  })
})

t.test("the chart's stash presets and phases are the migrator's", async (t) => {
  const schema = JSON.parse(await readFile(join(chartDir, 'values.schema.json'), 'utf8')) as {
    properties: { migrator: { properties: Record<string, any> } }
  }
  const m = schema.properties.migrator.properties
  t.same(m['stashPresets'].items.enum, [...STASH_PRESETS], 'values.schema.json: migrator.stashPresets is STASH_PRESETS')
  t.same(m['stashes'].items.properties.preset.enum, [...STASH_PRESETS], 'values.schema.json: migrator.stashes[].preset is STASH_PRESETS')
  t.same(m['skipPhases'].items.enum, [...PHASE_NAMES], 'values.schema.json: migrator.skipPhases is PHASE_NAMES')
  t.same(m['crds'].additionalProperties.properties.skipPhases.items.enum, [...PHASE_NAMES], 'and per CRD')
  // The template hardcodes each preset's resources (crd-migrator.stashPresets): the same as PRESETS.
  for (const preset of STASH_PRESETS) {
    for (const values of [{ stashPresets: [preset] }, { stashes: [{ preset }] }]) {
      const cr = rulesOf(one(await template('p', 'p-ns', { migrator: values }), 'ClusterRole'))
      const expected = stashRbac([PRESETS[preset]])
      t.same(cr.slice(cr.length - expected.length), expected, `${preset} (${Object.keys(values)[0]}): the rules of PRESETS['${preset}']`)
      t.equal(cr.length, BASE_RULES.length + expected.length, `${preset}: nothing more`)
    }
  }
  // Every phase, skipped everywhere and per CRD, renders and loads.
  const { text } = configOf(
    t,
    await template('p', 'p-ns', {
      migrator: { skipPhases: [...PHASE_NAMES], crds: { 'widgets.example.com': { skipPhases: [...PHASE_NAMES] } } },
    }),
  )
  const config = await loadRenderedConfig(text)
  t.same(config.migrator.skipPhases, [...PHASE_NAMES])
  t.same(config.migrator.crds['widgets.example.com']?.skipPhases, [...PHASE_NAMES])
})

t.test('stash rules are RBAC only with the migrator and rbac.create', async (t) => {
  for (const values of [{ migrator: { enabled: false } }, { rbac: { create: false } }]) {
    const what = JSON.stringify(values)
    const manifests = await template('st', 'st-ns', {
      ...values,
      migrator: { ...values.migrator, stashPresets: ['kubevirt-instancetypes'] },
    })
    t.same(ids(manifests.filter((m) => RBAC_KINDS.includes(m.kind))), [], `${what}: no RBAC at all`)
    const { raw } = configOf(t, manifests)
    t.same((raw['migrator'] as Record<string, unknown>)['stashPresets'], ['kubevirt-instancetypes'], `${what}: still in the config`)
  }
})

/** The StorageVersionMigration CRD of kube-storage-version-migrator's Go module (built and cached by scripts/build-ksvm.sh). */
function ksvmCrdFile(): string {
  const r = spawnSync('bash', [join(repoRoot, 'scripts', 'build-ksvm.sh')], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`scripts/build-ksvm.sh failed (${r.status}): ${r.stderr}`)
  const file = /^crd=(.+)$/m.exec(r.stdout)?.[1]
  if (!file) throw new Error(`scripts/build-ksvm.sh printed no crd=<path>: ${r.stdout}`)
  return file
}

/** The one YAML document of a file, as plain data. */
async function yamlDocument(file: string): Promise<Manifest> {
  const docs = parseAllDocuments(await readFile(file, 'utf8'))
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null)
  if (docs.length !== 1) throw new Error(`${file}: expected one YAML document, got ${docs.length}`)
  return docs[0]!
}

t.test("the chart's StorageVersionMigration CRD is kube-storage-version-migrator's, unchanged", async (t) => {
  const module = await yamlDocument(ksvmCrdFile())
  const copy = await yamlDocument(join(chartDir, 'files', `${SVM_CRD}.yaml`))
  t.same(copy, module, `charts/crd-migrator/files/${SVM_CRD}.yaml equals the Go module's manifests/storage_migration_crd.yaml`)
  t.equal(module.metadata.name, SVM_CRD)
  t.match(module['spec'], { group: 'migration.k8s.io', scope: 'Cluster', names: { kind: 'StorageVersionMigration' } })

  const ns = uniqueName('chart')
  const rendered = one(await template('crd', ns, { storageVersionMigrations: { enabled: true } }), 'CustomResourceDefinition')
  t.same(rendered['spec'], module['spec'], "the rendered CRD's spec deep-equals the module's")
  t.same(
    { ...rendered, metadata: undefined },
    { ...module, metadata: undefined },
    'and so does everything outside metadata (apiVersion, kind, spec)',
  )
  t.equal(rendered.metadata.name, SVM_CRD)
  t.notOk(rendered.metadata.namespace, 'cluster-scoped')
  t.same(
    rendered.metadata.annotations,
    { ...module.metadata.annotations, 'helm.sh/resource-policy': 'keep' },
    "the module's annotations (api-approved.kubernetes.io) plus keep",
  )
  t.same(
    rendered.metadata.labels,
    {
      'app.kubernetes.io/name': 'crd-migrator',
      'app.kubernetes.io/component': 'crd',
      'helm.sh/chart': 'crd-migrator-0.1.0',
      'app.kubernetes.io/instance': 'crd',
      'app.kubernetes.io/version': '0.1.0',
      'app.kubernetes.io/part-of': 'crd-migrator',
      'app.kubernetes.io/managed-by': 'Helm',
    },
    "the chart's labels",
  )
  t.same(Object.keys(rendered.metadata).sort(), ['annotations', 'labels', 'name'])
})

t.test('the StorageVersionMigration CRD renders only with storageVersionMigrations.enabled and .installCRD', async (t) => {
  const cases: Array<[string, Record<string, unknown>, { crd: boolean; rules: boolean; config: boolean }]> = [
    ['defaults', {}, { crd: false, rules: false, config: false }],
    ['installCRD alone', { storageVersionMigrations: { installCRD: true } }, { crd: false, rules: false, config: false }],
    ['enabled (installCRD defaults to true)', { storageVersionMigrations: { enabled: true } }, { crd: true, rules: true, config: true }],
    [
      'enabled, installCRD=false (the CRD is installed already)',
      { storageVersionMigrations: { enabled: true, installCRD: false } },
      { crd: false, rules: true, config: true },
    ],
    [
      'enabled, migrator.enabled=false (webhook only: no RBAC)',
      { storageVersionMigrations: { enabled: true }, migrator: { enabled: false } },
      { crd: true, rules: false, config: true },
    ],
    [
      'enabled, rbac.create=false (bring your own RBAC)',
      { storageVersionMigrations: { enabled: true }, rbac: { create: false } },
      { crd: true, rules: false, config: true },
    ],
  ]
  for (const [what, values, expected] of cases) {
    const manifests = await template('svm', 'svm-ns', values)
    t.same(
      ids(manifests.filter((m) => m.kind === 'CustomResourceDefinition')),
      expected.crd ? [`CustomResourceDefinition/${SVM_CRD}`] : [],
      `${what}: CRD ${expected.crd ? 'rendered' : 'not rendered'}`,
    )
    const clusterRole = manifests.find((m) => m.kind === 'ClusterRole')
    const svmRules = clusterRole ? rulesOf(clusterRole).filter((r) => r.apiGroups?.includes('migration.k8s.io')) : []
    t.same(svmRules, expected.rules ? SVM_RULES : [], `${what}: StorageVersionMigration rules ${expected.rules ? 'exactly' : 'none'}`)
    if (!migratorEnabled(values) || (values['rbac'] as { create?: boolean } | undefined)?.create === false)
      t.same(ids(manifests.filter((m) => RBAC_KINDS.includes(m.kind))), [], `${what}: no RBAC at all`)
    const { raw } = configOf(t, manifests)
    const migrator = raw['migrator'] as Record<string, unknown>
    t.equal(migrator['storageVersionMigrations'], expected.config ? true : undefined, `${what}: config migrator.storageVersionMigrations`)
  }
  // builtInResources alone (e.g. a StorageVersionMigration someone else reconciles): the rules, nothing of KSVM.
  const manifests = await template('svm', 'svm-ns', { migrator: { builtInResources: [{ group: 'batch', resource: 'cronjobs' }] } })
  t.same(
    rulesOf(one(manifests, 'ClusterRole')).slice(BASE_RULES.length),
    [{ apiGroups: ['batch'], resources: ['cronjobs'], verbs: ['get', 'list', 'patch'] }],
    'builtInResources alone: exactly its rule',
  )
  t.same(ids(manifests.filter((m) => m.kind === 'CustomResourceDefinition')), [])
})

t.test('bad values are refused with a message', async (t) => {
  const cases: Array<[string, object, RegExp]> = [
    ['no cert-manager, no Secret', { certManager: { enabled: false }, webhook: { caBundle: 'eA==' } }, /tls\.existingSecret is required/],
    ['no cert-manager, no caBundle', { certManager: { enabled: false }, tls: { existingSecret: 's' } }, /webhook\.caBundle .*is required/],
    [
      'annotation key that would break the CEL literal',
      { annotations: { migrating: "x' || true || 'y" } },
      /not a Kubernetes annotation key/,
    ],
    [
      'several replicas without leader election',
      { leaderElection: { enabled: false } },
      /leaderElection\.enabled=false needs replicaCount=1/,
    ],
    ['probes need the metrics port (values.schema.json)', { metrics: { port: 0 } }, /\/metrics\/port/],
    ['metrics and webhook on one port', { metrics: { port: 9443 } }, /metrics\.port and webhook\.port must differ/],
    ['a misspelt value (values.schema.json)', { replicas: 3 }, /additional properties 'replicas' not allowed/],
    ['an unknown phase (values.schema.json)', { migrator: { crds: { 'a.example.com': { skipPhases: ['Nope'] } } } }, /skipPhases/],
    ['CRD names are plural.group', { migrator: { names: ['widgets'] } }, /must be <plural>\.<group>/],
    // extraConfig cannot make the config file disagree with the webhook configuration, the RBAC or the mounts.
    [
      'extraConfig moves the freeze annotation',
      { extraConfig: { annotations: { migrating: 'example.com/other' } } },
      /extraConfig\.annotations\.migrating may not be set: set the chart value annotations\.migrating instead/,
    ],
    [
      'extraConfig with an empty annotations map',
      { extraConfig: { annotations: {} } },
      /extraConfig\.annotations\.migrating may not be set/,
    ],
    [
      'extraConfig adds a migrator user',
      { extraConfig: { identities: { migratorUsers: ['mallory'] } } },
      /extraConfig\.identities\.migratorUsers may not be set: set the chart value identities\.migratorUsers instead/,
    ],
    [
      'extraConfig adds a migrator group',
      { extraConfig: { identities: { migratorGroups: ['devs'] } } },
      /extraConfig\.identities\.migratorGroups may not be set: set the chart value identities\.migratorGroups instead/,
    ],
    [
      'extraConfig changes the break-glass groups',
      { extraConfig: { identities: { breakGlassGroups: ['devs'] } } },
      /extraConfig\.identities\.breakGlassGroups may not be set: set the chart value identities\.breakGlassGroups instead/,
    ],
    [
      "extraConfig turns the migrator on behind the chart's back",
      { migrator: { enabled: false }, extraConfig: { migrator: { enabled: true } } },
      /extraConfig\.migrator\.enabled may not be set: set the chart value migrator\.enabled instead/,
    ],
    [
      'extraConfig points the state key elsewhere',
      { extraConfig: { migrator: { stateKeyFile: '/tmp/key' } } },
      /extraConfig\.migrator\.stateKeyFile may not be set: set the chart value migrator\.stateKey\.existingSecret instead/,
    ],
    // RBAC outside custom resources.
    [
      '"*" in rbac.managedGroups (values.schema.json)',
      { rbac: { managedGroups: ['example.com', '*'] } },
      /at '\/rbac\/managedGroups\/1': '\*' does not match pattern/,
    ],
    [
      'the core group in rbac.managedGroups (values.schema.json)',
      { rbac: { managedGroups: [''] } },
      /at '\/rbac\/managedGroups\/0': minLength/,
    ],
    [
      'apps in rbac.managedGroups',
      { rbac: { managedGroups: ['apps'] } },
      /rbac\.managedGroups: "apps" is an API group kube-apiserver serves itself, where no CRD lives; list the groups of your CRDs/,
    ],
    [
      'admissionregistration.k8s.io in rbac.managedGroups',
      { rbac: { managedGroups: ['example.com', 'admissionregistration.k8s.io'] } },
      /rbac\.managedGroups: "admissionregistration\.k8s\.io" is an API group kube-apiserver serves itself/,
    ],
    [
      'a webhook configuration in migrator.names',
      { migrator: { names: ['validatingwebhookconfigurations.admissionregistration.k8s.io'] } },
      /migrator\.names \/ migrator\.crds \(validatingwebhookconfigurations\.admissionregistration\.k8s\.io\): "admissionregistration\.k8s\.io" is an API group kube-apiserver serves itself/,
    ],
    [
      'Deployments in migrator.crds',
      { migrator: { crds: { 'deployments.apps': { concurrency: 1 } } } },
      /\(deployments\.apps\): "apps" is an API group kube-apiserver serves itself/,
    ],
    [
      'every group through migrator.crds',
      { migrator: { crds: { 'widgets.*': {} } } },
      /\(widgets\.\*\): "\*" would grant get\/list\/patch on every API group/,
    ],
    // Built-in resources: one named resource per entry, nothing wider.
    [
      '"*" as a built-in group (values.schema.json)',
      { migrator: { builtInResources: [{ group: '*', resource: 'secrets' }] } },
      /at '\/migrator\/builtInResources\/0\/group': '\*' does not match pattern/,
    ],
    [
      '"*" as a built-in resource (values.schema.json)',
      {
        migrator: {
          builtInResources: [
            { group: '', resource: 'secrets' },
            { group: '', resource: '*' },
          ],
        },
      },
      /at '\/migrator\/builtInResources\/1\/resource': '\*' does not match pattern/,
    ],
    [
      'a built-in resource with a wildcard in it (values.schema.json)',
      { migrator: { builtInResources: [{ group: 'apps', resource: 'deploy*' }] } },
      /at '\/migrator\/builtInResources\/0\/resource': 'deploy\*' does not match pattern/,
    ],
    [
      'an empty built-in resource (values.schema.json)',
      { migrator: { builtInResources: [{ group: '', resource: '' }] } },
      /at '\/migrator\/builtInResources\/0\/resource': minLength/,
    ],
    [
      'a built-in resource without its group (values.schema.json)',
      { migrator: { builtInResources: [{ resource: 'secrets' }] } },
      /at '\/migrator\/builtInResources\/0': missing property 'group'/,
    ],
    [
      'a non-string built-in group (values.schema.json)',
      { migrator: { builtInResources: [{ group: null, resource: 'secrets' }] } },
      /at '\/migrator\/builtInResources\/0\/group': got null, want string/,
    ],
    [
      'a built-in subresource (values.schema.json)',
      { migrator: { builtInResources: [{ group: 'apps', resource: 'deployments/scale' }] } },
      /at '\/migrator\/builtInResources\/0\/resource': 'deployments\/scale' does not match pattern/,
    ],
    [
      'verbs on a built-in resource (values.schema.json)',
      { migrator: { builtInResources: [{ group: '', resource: 'secrets', verbs: ['delete'] }] } },
      /at '\/migrator\/builtInResources\/0': additional properties 'verbs' not allowed/,
    ],
    [
      'a built-in resource as a string (values.schema.json)',
      { migrator: { builtInResources: ['secrets'] } },
      /at '\/migrator\/builtInResources\/0': got string, want object/,
    ],
    [
      'a misspelt storageVersionMigrations value (values.schema.json)',
      { storageVersionMigrations: { enabled: true, installCrd: false } },
      /additional properties 'installCrd' not allowed/,
    ],
    [
      "extraConfig reconciles StorageVersionMigrations behind the chart's back",
      { extraConfig: { migrator: { storageVersionMigrations: true } } },
      /extraConfig\.migrator\.storageVersionMigrations may not be set: set the chart value storageVersionMigrations\.enabled instead/,
    ],
    // Stash rules: shaped like the config's StashRuleSchema, strictly, and granting one named resource each.
    [
      'an unknown stash preset (values.schema.json)',
      { migrator: { stashPresets: ['kubevirt'] } },
      /at '\/migrator\/stashPresets\/0': value must be 'kubevirt-instancetypes'/,
    ],
    [
      'an unknown preset in a stash rule (values.schema.json)',
      { migrator: { stashes: [{ preset: 'kubevirt' }] } },
      /at '\/migrator\/stashes\/0\/preset': value must be 'kubevirt-instancetypes'/,
    ],
    [
      'a stash rule with neither a preset nor group, source and referrers (values.schema.json)',
      { migrator: { stashes: [{ group: 'example.com', source: EXPLICIT_STASH_RULE.source }] } },
      /at '\/migrator\/stashes\/0': 'anyOf' failed[\s\S]*missing property 'preset'[\s\S]*missing property 'referrers'/,
    ],
    [
      'a referrer pointer not starting with / (values.schema.json)',
      {
        migrator: {
          stashes: [
            {
              ...EXPLICIT_STASH_RULE,
              referrers: [{ group: 'example.com', version: 'v1', resource: 'owners', pointers: ['spec/revisionName'] }],
            },
          ],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/pointers\/0': 'spec\/revisionName' does not match pattern/,
    ],
    [
      'a dataPointer not starting with / (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, source: { ...EXPLICIT_STASH_RULE.source, dataPointer: 'data' } }] } },
      /at '\/migrator\/stashes\/0\/source\/dataPointer': 'data' does not match pattern/,
    ],
    [
      'a referrer without pointers (values.schema.json)',
      {
        migrator: {
          stashes: [{ ...EXPLICIT_STASH_RULE, referrers: [{ group: 'example.com', version: 'v1', resource: 'owners', pointers: [] }] }],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/pointers': minItems/,
    ],
    [
      'no referrers (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, referrers: [] }] } },
      /at '\/migrator\/stashes\/0\/referrers': minItems/,
    ],
    [
      'a stash source without its version (values.schema.json)',
      { migrator: { stashes: [{ preset: 'kubevirt-instancetypes', source: { group: 'apps', resource: 'controllerrevisions' } }] } },
      /at '\/migrator\/stashes\/0\/source': missing property 'version'/,
    ],
    [
      '"*" as a stash source (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, source: { group: 'apps', version: 'v1', resource: '*' } }] } },
      /at '\/migrator\/stashes\/0\/source\/resource': '\*' does not match pattern/,
    ],
    [
      '"*" as a referrer group (values.schema.json)',
      {
        migrator: {
          stashes: [
            { ...EXPLICIT_STASH_RULE, referrers: [{ group: '*', version: 'v1', resource: 'owners', pointers: ['/spec/revisionName'] }] },
          ],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/group': '\*' does not match pattern/,
    ],
    [
      'a referrer subresource (values.schema.json)',
      {
        migrator: {
          stashes: [
            {
              ...EXPLICIT_STASH_RULE,
              referrers: [{ group: 'kubevirt.io', version: 'v1', resource: 'virtualmachines/status', pointers: ['/spec/revisionName'] }],
            },
          ],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/resource': 'virtualmachines\/status' does not match pattern/,
    ],
    [
      'verbs in a stash rule (values.schema.json)',
      { migrator: { stashes: [{ preset: 'kubevirt-instancetypes', verbs: ['update'] }] } },
      /at '\/migrator\/stashes\/0': additional properties 'verbs' not allowed/,
    ],
    [
      'a misspelt stash source field (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, source: { ...EXPLICIT_STASH_RULE.source, namespace: 'team-a' } }] } },
      /at '\/migrator\/stashes\/0\/source': additional properties 'namespace' not allowed/,
    ],
    [
      'an unknown phase to skip (values.schema.json)',
      { migrator: { skipPhases: ['StashedObjectMigrations'] } },
      /at '\/migrator\/skipPhases\/0': value must be one of 'StorageVersionMigration', 'StashedObjectMigration', 'CleanupManagedFields'/,
    ],
    [
      "extraConfig adds stash presets behind the chart's back",
      { extraConfig: { migrator: { stashPresets: ['kubevirt-instancetypes'] } } },
      /extraConfig\.migrator\.stashPresets may not be set: set the chart value migrator\.stashPresets instead/,
    ],
    [
      "extraConfig adds stash rules behind the chart's back",
      { extraConfig: { migrator: { stashes: [] } } },
      /extraConfig\.migrator\.stashes may not be set: set the chart value migrator\.stashes instead/,
    ],
    // The operators' options (issue #18).
    [
      'a NetworkPolicy without the API server as a source',
      { networkPolicy: { enabled: true } },
      /networkPolicy\.enabled needs networkPolicy\.apiServerCIDRs or networkPolicy\.apiServerPeers: the API server calls the webhook from there/,
    ],
    [
      'a NetworkPolicy that would keep the ServiceMonitor out',
      { networkPolicy: { enabled: true, apiServerCIDRs: ['10.0.0.0/8'] }, metrics: { serviceMonitor: { enabled: true } } },
      /networkPolicy\.enabled with metrics\.serviceMonitor\.enabled needs networkPolicy\.metricsFrom/,
    ],
    [
      'a NetworkPolicy for pods on the host network',
      { hostNetwork: true, networkPolicy: { enabled: true, apiServerCIDRs: ['10.0.0.0/8'] } },
      /networkPolicy\.enabled does nothing with hostNetwork=true/,
    ],
    [
      'no API server port to reach (values.schema.json)',
      { networkPolicy: { enabled: true, apiServerCIDRs: ['10.0.0.0/8'], egress: { enabled: true, apiServerPorts: [] } } },
      /at '\/networkPolicy\/egress\/apiServerPorts': minItems/,
    ],
    [
      "the dashboard's sidecar label as one of the chart's",
      { grafanaDashboard: { enabled: true, sidecarLabel: 'app.kubernetes.io/name' } },
      /grafanaDashboard\.sidecarLabel: "app\.kubernetes\.io\/name" is one of the chart's own labels/,
    ],
    [
      'a dashboard namespace that is no namespace name (values.schema.json)',
      { grafanaDashboard: { enabled: true, namespace: 'Grafana Dashboards' } },
      /at '\/grafanaDashboard\/namespace': 'Grafana Dashboards' does not match pattern/,
    ],
    [
      'a CRD frozen for 0 minutes (values.schema.json)',
      { prometheusRule: { frozenCrdMinutes: 0 } },
      /at '\/prometheusRule\/frozenCrdMinutes': minimum/,
    ],
    ['a misspelt tests value (values.schema.json)', { tests: { enable: true } }, /additional properties 'enable' not allowed/],
  ]
  for (const [what, values, message] of cases) {
    const r = await helm(['template', 'x', chartDir, ...(await valuesArgs(values))])
    t.not(r.code, 0, `${what}: helm template fails`)
    t.match(r.stderr, message, what)
  }
})

t.test('the template refuses the groups on its own, "*" and "" included (helm template --skip-schema-validation)', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['*', /rbac\.managedGroups: "\*" would grant get\/list\/patch on every API group, Secrets and RBAC included; .*rbac\.allGroups=true/],
    ['', /rbac\.managedGroups: "" is the core API group/],
    ['apps', /rbac\.managedGroups: "apps" is an API group kube-apiserver serves itself, where no CRD lives/],
    ['rbac.authorization.k8s.io', /rbac\.managedGroups: "rbac\.authorization\.k8s\.io" is an API group kube-apiserver serves itself/],
  ]
  for (const [group, message] of cases) {
    const r = await helm([
      'template',
      'x',
      chartDir,
      '--skip-schema-validation',
      ...(await valuesArgs({ rbac: { managedGroups: ['example.com', group] } })),
    ])
    t.not(r.code, 0, `${JSON.stringify(group)}: helm template fails`)
    t.match(r.stderr, message, JSON.stringify(group))
  }
  // migrator.builtInResources, entry by entry.
  const builtIn: Array<[string, unknown, RegExp]> = [
    [
      '"*" group',
      { group: '*', resource: 'secrets' },
      /migrator\.builtInResources\[1\]: "\*" would grant get\/list\/patch on more than one resource/,
    ],
    [
      '"*" resource',
      { group: '', resource: '*' },
      /migrator\.builtInResources\[1\]: "\*" would grant get\/list\/patch on more than one resource/,
    ],
    ['a wildcard in the resource', { group: 'apps', resource: 'deploy*' }, /migrator\.builtInResources\[1\]: "\*" would grant/],
    ['no resource', { group: '' }, /migrator\.builtInResources\[1\]\.resource must name one resource/],
    ['an empty resource', { group: '', resource: '' }, /migrator\.builtInResources\[1\]\.resource must name one resource/],
    ['no group', { resource: 'secrets' }, /migrator\.builtInResources\[1\]\.group must be a string: the API group, "" for the core group/],
    [
      'a subresource',
      { group: 'apps', resource: 'deployments/scale' },
      /migrator\.builtInResources\[1\]\.resource: "deployments\/scale" is a subresource/,
    ],
    ['a string', 'secrets', /migrator\.builtInResources\[1\] must be \{group, resource\}/],
  ]
  for (const [what, entry, message] of builtIn) {
    for (const enabled of [true, false]) {
      const r = await helm([
        'template',
        'x',
        chartDir,
        '--skip-schema-validation',
        ...(await valuesArgs({ migrator: { enabled, builtInResources: [{ group: '', resource: 'secrets' }, entry] } })),
      ])
      t.not(r.code, 0, `builtInResources, ${what} (migrator.enabled=${enabled}): helm template fails`)
      t.match(r.stderr, message, `builtInResources, ${what} (migrator.enabled=${enabled})`)
    }
  }
  // Stash rules, rule by rule; a preset stands for its resources.
  const stash: Array<[string, Record<string, unknown>, RegExp]> = [
    [
      'an unknown preset',
      { stashPresets: ['kubevirt'] },
      /migrator\.stashPresets\[0\]: kubevirt is not a stash preset \(known: kubevirt-instancetypes\)/,
    ],
    ['an unknown preset in a rule', { stashes: [{ preset: 'nope' }] }, /migrator\.stashes\[0\]\.preset: nope is not a stash preset/],
    [
      'a rule with neither a preset nor referrers',
      { stashes: [{ group: 'example.com', source: EXPLICIT_STASH_RULE.source }] },
      /migrator\.stashes\[0\]: a stash rule needs a preset, or group, source and referrers/,
    ],
    ['a rule as a string', { stashes: ['kubevirt-instancetypes'] }, /migrator\.stashes\[0\] must be a stash rule/],
    [
      '"*" as a source resource',
      { stashes: [{ preset: 'kubevirt-instancetypes', source: { group: 'apps', version: 'v1', resource: '*' } }] },
      /migrator\.stashes\[0\]\.source: "\*" would grant more than one resource/,
    ],
    [
      '"*" as a referrer group',
      { stashes: [{ preset: 'kubevirt-instancetypes', referrers: [{ group: '*', version: 'v1', resource: 'x', pointers: ['/a'] }] }] },
      /migrator\.stashes\[0\]\.referrers\[0\]: "\*" would grant more than one resource/,
    ],
    [
      'a referrer subresource',
      {
        stashes: [
          {
            preset: 'kubevirt-instancetypes',
            referrers: [{ group: 'kubevirt.io', version: 'v1', resource: 'virtualmachines/status', pointers: ['/a'] }],
          },
        ],
      },
      /migrator\.stashes\[0\]\.referrers\[0\]\.resource: "virtualmachines\/status" is a subresource/,
    ],
    [
      'a source without its group',
      { stashes: [{ preset: 'kubevirt-instancetypes', source: { version: 'v1', resource: 'controllerrevisions' } }] },
      /migrator\.stashes\[0\]\.source\.group must be a string/,
    ],
    [
      'referrers not a list',
      { stashes: [{ preset: 'kubevirt-instancetypes', referrers: 'virtualmachines' }] },
      /migrator\.stashes\[0\]\.referrers must be a list/,
    ],
  ]
  for (const [what, migrator, message] of stash) {
    for (const enabled of [true, false]) {
      const r = await helm([
        'template',
        'x',
        chartDir,
        '--skip-schema-validation',
        ...(await valuesArgs({ migrator: { enabled, ...migrator } })),
      ])
      t.not(r.code, 0, `stash rules, ${what} (migrator.enabled=${enabled}): helm template fails`)
      t.match(r.stderr, message, `stash rules, ${what} (migrator.enabled=${enabled})`)
    }
  }
  // Webhook only renders no RBAC, but the values are still checked.
  const r = await helm([
    'template',
    'x',
    chartDir,
    '--skip-schema-validation',
    ...(await valuesArgs({ migrator: { enabled: false }, rbac: { managedGroups: ['policy'] } })),
  ])
  t.match(r.stderr, /"policy" is an API group kube-apiserver serves itself/, 'checked with migrator.enabled=false too')
})

t.test('every API group kube-apiserver serves is refused; CRD groups under k8s.io are not', async (t) => {
  // The chart's list (the crd-migrator.builtinApiGroups helper).
  const helpers = await readFile(join(chartDir, 'templates', '_helpers.tpl'), 'utf8')
  const block = /define "crd-migrator\.builtinApiGroups"[\s\S]*?\{\{- list([\s\S]*?)\| toJson/.exec(helpers)
  t.ok(block, 'the crd-migrator.builtinApiGroups helper')
  const inTemplate = [...(block?.[1] ?? '').matchAll(/"([^"]+)"/g)].map((m) => m[1]!).sort()
  t.ok(inTemplate.length >= 20, `${inTemplate.length} groups`)

  // What this kube-apiserver serves itself: the APIServices the aggregator registers at
  // start (label automanaged=onstart); CRD groups are synced later (automanaged=true).
  const res = await cp.apiRequest(
    '/apis/apiregistration.k8s.io/v1/apiservices?labelSelector=kube-aggregator.kubernetes.io/automanaged%3Donstart',
  )
  t.equal(res.status, 200)
  const served = [...new Set((res.json as { items: Array<{ spec: { group?: string } }> }).items.map((a) => a.spec.group ?? ''))]
  // The aggregator's own group has no such APIService; /apis lists it.
  const apis = await cp.apiRequest('/apis')
  const groups = (apis.json as { groups: Array<{ name: string }> }).groups.map((g) => g.name)
  t.ok(groups.includes('apiregistration.k8s.io'), '/apis lists apiregistration.k8s.io')
  served.push('apiregistration.k8s.io')
  served.sort()
  t.ok(
    served.includes('apps') && served.includes('apiextensions.k8s.io') && served.includes('rbac.authorization.k8s.io'),
    `built-in groups found: ${served.join(', ')}`,
  )
  // The default control plane is v1.37; CRD_MIGRATOR_KUBE_VERSION=v1.35.4 runs this on the oldest we support.
  const version = ((await cp.apiRequest('/version')).json as { gitVersion: string }).gitVersion
  t.same(
    served.filter((g) => g !== '' && !inTemplate.includes(g)),
    [],
    `the chart knows every group kube-apiserver ${version} serves (the list covers v1.35 to v1.37)`,
  )
  for (const group of new Set([...served, ...inTemplate])) {
    const r = await helm(['template', 'x', chartDir, ...(await valuesArgs({ rbac: { managedGroups: [group] } }))])
    t.not(r.code, 0, `rbac.managedGroups=[${JSON.stringify(group)}] is refused`)
    if (group !== '') t.match(r.stderr, `"${group}" is an API group kube-apiserver serves itself`)
  }

  const crdGroups = ['gateway.networking.k8s.io', 'snapshot.storage.k8s.io', 'cluster.x-k8s.io', 'policy.networking.k8s.io', 'example.com']
  const r = await helm([
    'template',
    'x',
    chartDir,
    ...(await valuesArgs({
      rbac: { managedGroups: crdGroups },
      migrator: {
        names: ['httproutes.gateway.networking.k8s.io'],
        crds: { 'volumesnapshots.snapshot.storage.k8s.io': { useStatusSubresource: true } },
      },
    })),
  ])
  t.equal(r.code, 0, 'CRD groups under k8s.io and x-k8s.io are allowed', { stderr: r.stderr })
})

t.test('the state key survives an upgrade: lookup keeps the existing Secret', async (t) => {
  const ns = uniqueName('chart-key')
  await createNamespace(ns)
  const release = 'keep'
  const name = 'keep-crd-migrator-state-key'
  const installed = one(await template(release, ns, {}), 'Secret', name)
  const path = await collectionPath(installed, ns)
  // As `helm install` leaves it: owned by the release.
  const owned = structuredClone(installed)
  owned.metadata.annotations = { 'meta.helm.sh/release-name': release, 'meta.helm.sh/release-namespace': ns }
  const created = await cp.apiRequest(path, { method: 'POST', body: owned })
  t.equal(created.status, 201, "the install's Secret exists", { body: created.status >= 300 ? created.body : undefined })
  t.teardown(async () => {
    await cp.apiRequest(`${path}/${name}`, { method: 'DELETE' })
  })
  // An upgrade renders against the cluster: --dry-run=server lets lookup see it.
  const r = await helm(['template', release, chartDir, '--namespace', ns, '--dry-run=server', '--kubeconfig', cp.kubeconfigPath])
  t.equal(r.code, 0, 'helm template --dry-run=server', { stderr: r.stderr })
  const upgraded = one(
    parseAllDocuments(r.stdout)
      .map((d) => d.toJS() as Manifest | null)
      .filter((m): m is Manifest => m !== null),
    'Secret',
    name,
  )
  t.equal(
    (upgraded['data'] as Record<string, string>)['key'],
    (installed['data'] as Record<string, string>)['key'],
    'the same key after the upgrade',
  )
})

t.test('values.yaml: every value is commented (on itself or on the block it belongs to)', async (t) => {
  const lines = (await readFile(join(chartDir, 'values.yaml'), 'utf8')).split('\n')
  const stack: Array<{ indent: number; documented: boolean }> = []
  const undocumented: string[] = []
  const path: string[] = []
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)([A-Za-z][\w.-]*):(.*)$/.exec(lines[i]!)
    if (!m) continue
    const indent = m[1]!.length
    while (stack.length > 0 && stack.at(-1)!.indent >= indent) {
      stack.pop()
      path.pop()
    }
    // The comment block right above this key, if any, must hold a `# --` description.
    let j = i - 1
    let described = false
    while (j >= 0 && /^\s*#/.test(lines[j]!)) {
      if (/^\s*# -- \S/.test(lines[j]!)) described = true
      j--
    }
    const documented = described || (stack.at(-1)?.documented ?? false)
    path.push(m[2]!)
    const next = lines.slice(i + 1).find((l) => l.trim() && !/^\s*#/.test(l))
    const leaf = m[3]!.trim() !== '' || !next || next.length - next.trimStart().length <= indent
    if (leaf && !documented) undocumented.push(path.join('.'))
    stack.push({ indent, documented })
  }
  t.same(undocumented, [], 'values without a `# --` description')
})

/** The plain manifests' values: the defaults, but no state-key Secret (a committed key would be everybody's key). */
const PLAIN_VALUES = { migrator: { stateKey: { existingSecret: 'crd-migrator-state-key' } } }

t.test('webhook-config/plain/ is the default render', async (t) => {
  const rendered = PLAIN_HEADER + (await templateRaw('crd-migrator', 'crd-migrator', PLAIN_VALUES))
  if (process.env['CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS'] === '1') {
    await writeFile(PLAIN_FILE, rendered)
    t.comment(`wrote ${PLAIN_FILE}`)
  }
  const committed = await readFile(PLAIN_FILE, 'utf8').catch(() => '')
  t.equal(
    committed,
    rendered,
    'webhook-config/plain/crd-migrator.yaml is up to date (regenerate: CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS=1 npx tap test/integration/chart.test.ts)',
  )

  const manifests = parseAllDocuments(committed)
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null)
  t.same(ids(manifests.filter((m) => m.kind === 'Secret')), [], 'no Secret, no state key in the repository')
  t.equal(
    podSpec(manifests)['volumes'].find((v: { name: string }) => v.name === 'state-key')?.secret.secretName,
    'crd-migrator-state-key',
    'the pods mount the Secret the chart would have made',
  )
  // The in-cluster variant everyone else uses (webhook-config/validating-webhook.yaml) is the
  // chart's default render, bar the chart's labels.
  const vwc = withoutChartLabels(one(manifests, 'ValidatingWebhookConfiguration'))
  t.same(vwc, parse(await readFile(join(repoRoot, 'webhook-config', 'validating-webhook.yaml'), 'utf8')))
  t.same(vwc, renderWebhookConfiguration({ mode: 'service' }))
  t.same(parse(await readFile(join(plainDir, 'namespace.yaml'), 'utf8')), {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: 'crd-migrator', labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } },
  })
  const kustomization = parse(await readFile(join(plainDir, 'kustomization.yaml'), 'utf8')) as { resources: string[]; namespace?: string }
  t.same(kustomization.resources, ['namespace.yaml', 'crd-migrator.yaml'])
  t.notOk(kustomization.namespace, 'no namespace override: the Events Role lives in `default`')
})

t.teardown(() => {
  if (Object.keys(dryRunReport).length > 0) {
    process.stderr.write(`[chart] server-side dry-run results:\n${JSON.stringify(dryRunReport, null, 2)}\n`)
  }
})
