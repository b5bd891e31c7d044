/**
 * Shared setup of the Helm chart's tests (test/integration/chart*.test.ts): helm and the
 * CRDs from scripts/build-tools.sh, the shared control plane, `helm template` into
 * manifests, the API server helpers the dry runs and the RBAC probes use, and the readers
 * of a render (its config file, pod spec, rules). Importing it builds the tools on first
 * use (minutes) and makes a scratch directory for the file.
 */
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parse, parseAllDocuments } from 'yaml'
import { loadConfig } from '../../src/config/load.js'
import type { WebhookConfigurationOptions } from '../../src/webhook/configuration.js'
import { ensureTools, type ChartTools } from '../../dev/controlplane/tools.js'
import { clientsFor, getControlPlane, waitForCrdReady } from './controlplane.js'
import { scratchHelm } from './helm.js'
import { accessAllowed } from './rbac.js'

export const repoRoot = fileURLToPath(new URL('../../', import.meta.url))
export const chartDir = join(repoRoot, 'charts', 'crd-migrator')
/** Labels the chart adds to every object, beyond those of renderWebhookConfiguration(). */
export const CHART_ONLY_LABELS = [
  'helm.sh/chart',
  'app.kubernetes.io/instance',
  'app.kubernetes.io/version',
  'app.kubernetes.io/part-of',
  'app.kubernetes.io/managed-by',
]
/** The recommended labels (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels) every rendered object carries. */
export const APP_LABELS = ['name', 'instance', 'version', 'component', 'part-of', 'managed-by'].map((l) => `app.kubernetes.io/${l}`)

/**
 * WebhookConfigurationOptions['service'] is typed from the frozen defaults (literal types),
 * so other names need a cast; the runtime accepts any names.
 */
export const service = (s: { namespace: string; name: string; port: number; path: string }) =>
  s as unknown as NonNullable<WebhookConfigurationOptions['service']>

/** A (sub)test, as handed to t.test() callbacks. */
export type T = Parameters<Parameters<typeof t.test>[0]>[0]

export interface Manifest {
  apiVersion: string
  kind: string
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }
  [key: string]: unknown
}

// A cold helm build takes minutes; let it finish, then restore the per-file timeout.
t.setTimeout(30 * 60 * 1000)
export const tools: ChartTools = await ensureTools()
export const cp = await getControlPlane()
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '600') * 1000)
export const admin = clientsFor(cp.kubeconfigPath)

export const { scratch, run: helm, valuesArgs } = await scratchHelm(tools.helm, 'crd-migrator-chart-')

export async function templateRaw(release: string, namespace: string, values: object): Promise<string> {
  const r = await helm(['template', release, chartDir, '--namespace', namespace, ...(await valuesArgs(values))])
  if (r.code !== 0) throw new Error(`helm template failed (${r.code}): ${r.stderr}`)
  return r.stdout
}

export async function template(release: string, namespace: string, values: object): Promise<Manifest[]> {
  const docs = parseAllDocuments(await templateRaw(release, namespace, values))
  return docs.map((d) => d.toJS() as Manifest | null).filter((m): m is Manifest => m !== null)
}

export const ids = (ms: Manifest[]) => ms.map((m) => `${m.kind}/${m.metadata.name}`)
/** A `helm test` hook object (templates/tests/), rendered by `helm template` with the rest. */
export const isTestHook = (m: Manifest) => m.metadata.annotations?.['helm.sh/hook'] === 'test'
/** Cluster-scoped kinds the chart renders (FlowSchemas: apiPriorityAndFairness.*). */
export const CLUSTER_KINDS = [
  'ClusterRole',
  'ClusterRoleBinding',
  'ValidatingWebhookConfiguration',
  'CustomResourceDefinition',
  'FlowSchema',
  'PriorityLevelConfiguration',
  'ValidatingAdmissionPolicy',
  'ValidatingAdmissionPolicyBinding',
]
export function one(ms: Manifest[], kind: string, name?: string): Manifest {
  const found = ms.filter((m) => m.kind === kind && (name === undefined || m.metadata.name === name))
  if (found.length !== 1) throw new Error(`expected one ${kind}${name ? `/${name}` : ''}, got ${ids(found).join(', ') || 'none'}`)
  return found[0]!
}

/** The migrator's own ClusterRole (component rbac), not the consent ClusterRole people are bound to. */
export function migratorClusterRole(ms: Manifest[]): Manifest {
  return one(
    // Not the people's ClusterRoles: consent (accept-changes) and freeze.
    ms.filter((m) => m.kind !== 'ClusterRole' || !['consent', 'freeze'].includes(m.metadata.labels?.['app.kubernetes.io/component'] ?? '')),
    'ClusterRole',
  )
}

/** The chart's ClusterRole `<fullname>-freeze`: the RBAC permission to freeze and unfreeze CRDs. */
export function freezeClusterRole(ms: Manifest[]): Manifest {
  return one(
    ms.filter((m) => m.kind !== 'ClusterRole' || m.metadata.labels?.['app.kubernetes.io/component'] === 'freeze'),
    'ClusterRole',
  )
}

export function withoutChartLabels<T extends Manifest>(m: T): T {
  const copy = structuredClone(m)
  for (const key of CHART_ONLY_LABELS) delete copy.metadata.labels?.[key]
  return copy
}

// --- API server helpers -------------------------------------------------------------------

const discovery = new Map<string, Array<{ name: string; kind: string; namespaced: boolean }>>()
export async function resourceFor(apiVersion: string, kind: string): Promise<{ base: string; plural: string; namespaced: boolean }> {
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

export async function collectionPath(m: Manifest, fallbackNamespace: string): Promise<string> {
  const r = await resourceFor(m.apiVersion, m.kind)
  return r.namespaced ? `${r.base}/namespaces/${m.metadata.namespace ?? fallbackNamespace}/${r.plural}` : `${r.base}/${r.plural}`
}

/** POST with dryRun=All and strict field validation (unknown fields are errors). */
export async function dryRunCreate(m: Manifest, namespace: string): Promise<{ status: number; body: string }> {
  const res = await cp.apiRequest(`${await collectionPath(m, namespace)}?dryRun=All&fieldValidation=Strict`, { method: 'POST', body: m })
  return { status: res.status, body: res.body }
}

/**
 * Server-side apply with dryRun=All and strict field validation, for cluster-wide objects
 * (CRDs) that another test file may have installed for real on the shared control plane:
 * a create would answer 409 there, an apply validates the whole object either way.
 */
export async function dryRunApply(m: Manifest): Promise<{ status: number; body: string }> {
  const res = await cp.apiRequest(
    `${await collectionPath(m, '')}/${m.metadata.name}?dryRun=All&fieldValidation=Strict&fieldManager=crd-migrator-chart-test&force=true`,
    { method: 'PATCH', body: m, contentType: 'application/apply-patch+yaml' },
  )
  return { status: res.status, body: res.body }
}

export async function applyCrdFile(file: string): Promise<string[]> {
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
export function prometheusRuleCrdFile(): string {
  const r = spawnSync('bash', [join(repoRoot, 'scripts', 'build-tools.sh')], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`scripts/build-tools.sh failed (${r.status}): ${r.stderr}`)
  const file = /^prometheusrule-crd=(.+)$/m.exec(r.stdout)?.[1]
  if (!file || !existsSync(file)) throw new Error(`scripts/build-tools.sh printed no prometheusrule-crd=<existing file>: ${r.stdout}`)
  return file
}

let crdsInstalled: Promise<string[]> | undefined
/** cert-manager's CRDs and the ServiceMonitor and PrometheusRule CRDs, server-side applied (idempotent), ready. */
export function installThirdPartyCrds(): Promise<string[]> {
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
export async function createNamespace(name: string, level: 'restricted' | 'privileged' = 'restricted'): Promise<void> {
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

/** The server's config file (the ConfigMap named like the Deployment; others hold the dashboard or the test). */
export function configOf(t: T, manifests: Manifest[]) {
  const cm = one(manifests, 'ConfigMap', one(manifests, 'Deployment').metadata.name)
  const text = (cm['data'] as Record<string, string>)['config.yaml']!
  t.ok(text, 'the ConfigMap carries config.yaml')
  return { text, raw: parse(text) as Record<string, unknown> }
}

let configFiles = 0
export async function loadRenderedConfig(text: string) {
  const file = join(scratch, `config-${++configFiles}.yaml`)
  await writeFile(file, text)
  return loadConfig({ file, env: {} })
}

export function podSpec(manifests: Manifest[]) {
  return (one(manifests, 'Deployment')['spec'] as { template: { spec: Record<string, any> } }).template.spec
}

export type Rule = { apiGroups?: string[]; resources?: string[]; verbs: string[]; resourceNames?: string[] }
export function rulesOf(m: Manifest): Rule[] {
  return (m['rules'] as Rule[] | undefined) ?? []
}

/** The kinds of RBAC objects a render may hold. */
export const RBAC_KINDS = ['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']

/**
 * Creates the RBAC objects of a render for real (deleted at the end of the test) and returns
 * a SubjectAccessReview probe for the render's ServiceAccount.
 */
export async function createRbacOf(t: T, manifests: Manifest[], ns: string): Promise<(attrs: Record<string, string>) => Promise<boolean>> {
  for (const m of manifests.filter((m) => RBAC_KINDS.includes(m.kind))) {
    const path = await collectionPath(m, ns)
    const res = await cp.apiRequest(path, { method: 'POST', body: m })
    t.equal(res.status, 201, `create ${m.kind}/${m.metadata.name}`, { body: res.status >= 300 ? res.body : undefined })
    t.teardown(async () => {
      await cp.apiRequest(`${path}/${m.metadata.name}`, { method: 'DELETE' })
    })
  }
  const user = `system:serviceaccount:${ns}:${one(manifests, 'ServiceAccount').metadata.name}`
  const groups = ['system:serviceaccounts', `system:serviceaccounts:${ns}`, 'system:authenticated']
  return (attrs) => accessAllowed(cp, { user, groups }, attrs)
}
