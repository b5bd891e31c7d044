/**
 * Helpers for integration tests that talk to the real control plane through the
 * project's own KubeHttp client: CRDs, objects in bulk, and the webhook wired in.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import PQueue from 'p-queue'
import type { Logger } from 'pino'
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { renderWebhookConfiguration } from '../../src/webhook/configuration.js'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import { getCrd } from '../../src/kube/crds.js'
import { waitForStorageVersion } from '../../src/kube/discovery.js'
import { ContentType, KubeHttp } from '../../src/kube/http.js'
import { CRD_API, crdPath, objectPath, type ResourceRef } from '../../src/kube/paths.js'
import type { CustomResourceDefinition, ManagedFieldsEntry } from '../../src/kube/types.js'
import { ConfigSchema } from '../../src/config/schema.js'
import type { MigrationSettings } from '../../src/migrator/migrate.js'
import { settingsFor } from '../../src/migrator/crd-settings.js'
import { startWebhookServer, type RunningWebhookServer, type StartWebhookServerOptions } from '../../src/webhook/server.js'
import { untilGranted } from './rbac.js'
import { until } from './until.js'

export const TEST_SCOPE_LABEL = 'crd-migrator-test/webhook'

export function httpFor(kubeconfigPath: string): KubeHttp {
  const kc = new KubeConfig()
  kc.loadFromFile(kubeconfigPath)
  const http = new KubeHttp(kc, { maxSockets: 64 })
  t.teardown(() => http.close())
  return http
}

/**
 * A migration's settings as the product's defaults make them (the config schema, through
 * settingsFor), with what the tests change on purpose: fewer writes in flight and attempts
 * (a shared, 2-core control plane), progress and the storage settle more often.
 */
export function defaultSettings(overrides: Partial<MigrationSettings> = {}): MigrationSettings {
  return {
    ...settingsFor(ConfigSchema.parse({}), ''),
    concurrency: 16,
    maxAttempts: 5,
    progressIntervalMs: 500,
    storageSettleMs: 1000,
    ...overrides,
  }
}

const schema = { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } }

export interface CrdSpecOptions {
  group: string
  versions: string[]
  storage: string
  plural?: string
  kind?: string
  scope?: 'Namespaced' | 'Cluster'
  unserved?: string[]
  labels?: Record<string, string>
  status?: boolean
}

export function crdManifest(o: CrdSpecOptions): CustomResourceDefinition {
  const plural = o.plural ?? 'widgets'
  const kind = o.kind ?? 'Widget'
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${o.group}`, labels: o.labels ?? {} },
    spec: {
      group: o.group,
      scope: o.scope ?? 'Namespaced',
      names: { plural, kind, singular: kind.toLowerCase(), listKind: `${kind}List` },
      versions: o.versions.map((name) => ({
        name,
        served: !(o.unserved ?? []).includes(name),
        storage: name === o.storage,
        schema,
        ...(o.status ? { subresources: { status: {} } } : {}),
      })),
    },
  }
}

export async function createCrd(http: KubeHttp, crd: CustomResourceDefinition): Promise<CustomResourceDefinition> {
  await http.request({ method: 'POST', path: CRD_API, body: crd })
  const current = await until(
    `CRD ${crd.metadata.name} Established`,
    30_000,
    () => getCrd(http, crd.metadata.name),
    (c) => c.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') === true,
    { everyMs: 50 },
  )
  // Established means the API is registered; give discovery/storage a moment to serve it.
  await waitServed(http, current)
  return current
}

async function waitServed(http: KubeHttp, crd: CustomResourceDefinition): Promise<void> {
  const version = crd.spec.versions.find((v) => v.served)!.name
  const path = `/apis/${crd.spec.group}/${version}/${crd.spec.names.plural}`
  await until(
    `a list of ${path} to answer`,
    30_000,
    () => http.request({ method: 'GET', path, query: { limit: 1 } }),
    () => true,
    {
      everyMs: 50,
    },
  )
}

export async function deleteCrd(http: KubeHttp, name: string): Promise<void> {
  await http.request({ method: 'DELETE', path: crdPath(name) }).catch(() => {})
}

export async function createNamespace(http: KubeHttp, name: string): Promise<void> {
  await http.request({ method: 'POST', path: '/api/v1/namespaces', body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name } } })
}

export function refFor(crd: CustomResourceDefinition, version: string): ResourceRef {
  return {
    group: crd.spec.group,
    version,
    plural: crd.spec.names.plural,
    kind: crd.spec.names.kind,
    namespaced: crd.spec.scope === 'Namespaced',
  }
}

export interface ObjectId {
  namespace: string | undefined
  name: string
}

/** Creates `count` objects spread over the namespaces (or cluster-scoped), through `ref.version`. */
export async function createObjects(
  http: KubeHttp,
  ref: ResourceRef,
  namespaces: (string | undefined)[],
  count: number,
  body: (i: number) => Record<string, unknown> = (i) => ({ spec: { index: i, size: 'medium', tags: ['a', 'b'] } }),
  prefix = 'obj',
): Promise<ObjectId[]> {
  const queue = new PQueue({ concurrency: 32 })
  const ids: ObjectId[] = []
  for (let i = 0; i < count; i++) {
    const namespace = namespaces[i % namespaces.length]
    const name = `${prefix}-${String(i).padStart(5, '0')}`
    ids.push({ namespace, name })
    void queue.add(() =>
      http.request({
        method: 'POST',
        path: objectPath(ref, namespace, name).replace(/\/[^/]+$/, ''),
        body: {
          apiVersion: `${ref.group}/${ref.version}`,
          kind: ref.kind,
          metadata: { name, ...(namespace ? { namespace } : {}) },
          ...body(i),
        },
      }),
    )
  }
  await queue.onIdle()
  return ids
}

/**
 * Makes `version` the storage version (the way an operator upgrading a CRD does), and
 * waits until the API server really writes in it: it switches asynchronously, and a test
 * that creates objects right after the flip would otherwise store some in the old version.
 */
export async function setStorageVersion(
  http: KubeHttp,
  name: string,
  version: string,
  unserved: string[] = [],
): Promise<CustomResourceDefinition> {
  const crd = await getCrd(http, name)
  const versions = crd.spec.versions.map((v) => ({
    ...v,
    storage: v.name === version,
    served: v.name === version ? true : !unserved.includes(v.name) && v.served,
  }))
  const updated = (
    await http.request<CustomResourceDefinition>({
      method: 'PATCH',
      path: crdPath(name),
      body: { spec: { versions } },
      contentType: ContentType.mergePatch,
    })
  ).body
  await waitForStorageVersion(http, { group: crd.spec.group, plural: crd.spec.names.plural, kind: crd.spec.names.kind }, version, {
    timeoutMs: 30_000,
    settleMs: 500,
  })
  return updated
}

/** Counts the apiVersions the objects of a resource are stored in, read from etcd itself. */
export async function storedVersionsInEtcd(cp: ControlPlane, group: string, plural: string): Promise<Map<string, number>> {
  const keys = await cp.listEtcdKeys(`/registry/${group}/${plural}/`)
  const counts = new Map<string, number>()
  const queue = new PQueue({ concurrency: 32 })
  for (const key of keys) {
    void queue.add(async () => {
      const raw = await cp.readEtcdKey(key)
      const apiVersion = raw ? (JSON.parse(raw.toString('utf8')) as { apiVersion: string }).apiVersion : 'missing'
      counts.set(apiVersion, (counts.get(apiVersion) ?? 0) + 1)
    })
  }
  await queue.onIdle()
  return counts
}

/**
 * A user who may edit CRDs through RBAC but is neither the migrator nor break-glass: the
 * webhook is all that stands between them and a frozen storage version.
 */
export async function crdEditor(cp: ControlPlane, scope: string, name = 'operator'): Promise<{ certPem: string; keyPem: string }> {
  const group = `editors-${scope}`
  const role = `crd-editor-${scope}`
  const post = async (path: string, body: unknown) => {
    const res = await cp.apiRequest(path, { method: 'POST', body })
    if (res.status !== 201 && res.status !== 409) throw new Error(`POST ${path}: ${res.status} ${res.body}`)
  }
  await post('/apis/rbac.authorization.k8s.io/v1/clusterroles', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: role },
    rules: [{ apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list', 'patch', 'update'] }],
  })
  await post('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: role },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
    subjects: [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: group }],
  })
  await untilGranted(
    cp,
    { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['patch'] },
    { kind: 'Group', name: group },
  )
  return cp.mintUser(name, [group])
}

/** The storage flip of setStorageVersion, as another user; returns the HTTP status and body. */
export async function setStorageVersionAs(
  cp: ControlPlane,
  as: { certPem: string; keyPem: string },
  crd: CustomResourceDefinition,
  version: string,
): Promise<{ status: number; body: string }> {
  const versions = crd.spec.versions.map((v) => ({ ...v, storage: v.name === version }))
  const res = await cp.apiRequest(crdPath(crd.metadata.name), {
    method: 'PATCH',
    as,
    contentType: ContentType.mergePatch,
    body: { spec: { versions } },
  })
  return { status: res.status, body: res.body }
}

export interface TestWebhook {
  server: RunningWebhookServer
  scope: string
  /** Labels a CRD must carry for this webhook to see it. */
  labels: Record<string, string>
  /** The CA of its serving certificate (for clients of its port). */
  caPem: string
  reviews(): Promise<number>
  stopServer(): Promise<void>
}

/**
 * Runs the real webhook on loopback with fresh dev certificates and installs the url
 * variant of webhook-config/ into the API server. Test files share one API server, so the
 * installed configuration only matches CRDs labelled with this file's scope.
 */
export async function startTestWebhook(
  cp: ControlPlane,
  scope: string,
  policy: {
    migratorUsers?: string[]
    migratorGroups?: string[]
    logger?: Logger
    /** Options of the server itself (connection caps, timeouts, registry). */
    server?: Partial<Omit<StartWebhookServerOptions, 'certFile' | 'keyFile' | 'host' | 'port' | 'policy'>>
  } = {},
): Promise<TestWebhook> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-webhook-'))
  const certs = await generateDevCertificates(dir)
  const migratorUsers = policy.migratorUsers ?? ['migrator']
  const migratorGroups = policy.migratorGroups ?? []
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    ...(policy.logger ? { logger: policy.logger } : { logLevel: 'silent' }),
    ...policy.server,
    policy: { migratorUsers, migratorGroups, breakGlassGroups: ['system:masters'] },
  })
  // The same identities skip the webhook (matchConditions), as in the shipped configuration.
  const config = renderWebhookConfiguration({
    mode: 'url',
    url: `${server.url}/validate-crd`,
    caBundlePem: certs.caCertPem,
    name: `test-${scope}`,
    migratorUsers,
    migratorGroups,
  })
  for (const w of config.webhooks) {
    w.matchConditions.unshift({
      name: 'test-scope',
      // object is null on DELETE: look at the stored object then.
      expression: `has((object != null ? object : oldObject).metadata.labels) && '${TEST_SCOPE_LABEL}' in (object != null ? object : oldObject).metadata.labels && (object != null ? object : oldObject).metadata.labels['${TEST_SCOPE_LABEL}'] == '${scope}'`,
    })
  }
  const res = await cp.apiRequest('/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations', { method: 'POST', body: config })
  if (res.status !== 201) throw new Error(`installing the webhook configuration failed: ${res.status} ${res.body}`)
  let stopped = false
  // The webhook goes down the way a crashed pod does: open connections are cut at once. A
  // graceful close would keep answering reviews on the API server's keep-alive connections
  // for up to the request timeout (10 s), long enough for a test's outage to miss its window.
  const stopServer = async () => {
    if (!stopped) {
      stopped = true
      const closing = server.close()
      ;(server.app.server as import('node:https').Server).closeAllConnections()
      await closing
    }
  }
  t.teardown(async () => {
    await cp.apiRequest(`/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/test-${scope}`, { method: 'DELETE' })
    await stopServer()
    await rm(dir, { recursive: true, force: true })
  })
  const hook: TestWebhook = {
    server,
    scope,
    labels: { [TEST_SCOPE_LABEL]: scope },
    caPem: certs.caCertPem,
    reviews: () => reviewCount(server),
    stopServer,
  }
  await waitWebhookActive(cp, hook)
  return hook
}

async function reviewCount(server: RunningWebhookServer): Promise<number> {
  const metric = await server.registry.getSingleMetric('crd_migrator_admission_reviews_total')?.get()
  return (metric?.values ?? []).reduce((sum, v) => sum + v.value, 0)
}

/** The API server picks up webhook configurations asynchronously; wait until ours is called. */
async function waitWebhookActive(cp: ControlPlane, hook: TestWebhook): Promise<void> {
  const http = httpFor(cp.kubeconfigPath)
  const probe = crdManifest({ group: `probe-${hook.scope}.example.com`, versions: ['v1'], storage: 'v1', labels: hook.labels })
  probe.metadata.annotations = { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }
  await http.request({ method: 'POST', path: CRD_API, body: probe })
  let probes = 0
  try {
    await until(
      'the webhook configuration to take effect (a review of a CRD patch)',
      30_000,
      async () => {
        const before = await hook.reviews()
        await http.request({
          method: 'PATCH',
          path: crdPath(probe.metadata.name),
          body: { metadata: { labels: { probe: String(probes++) } } },
          contentType: ContentType.mergePatch,
        })
        return (await hook.reviews()) > before
      },
      (reviewed) => reviewed,
      { everyMs: 50 },
    )
  } finally {
    await http
      .request({
        method: 'PATCH',
        path: crdPath(probe.metadata.name),
        body: { metadata: { annotations: { [DEFAULT_MIGRATING_ANNOTATION]: null } } },
        contentType: ContentType.mergePatch,
      })
      .catch(() => {})
    await deleteCrd(http, probe.metadata.name)
  }
}

/**
 * A server-side apply of `spec` to one object through `ref.version`, as field manager
 * `manager` (forced); with `dryRun`, checked by the API server (field manager included)
 * and not stored.
 */
export function serverSideApply(
  http: KubeHttp,
  ref: ResourceRef,
  ns: string,
  name: string,
  manager: string,
  spec: Record<string, unknown>,
  options: { dryRun?: boolean } = {},
) {
  return http.request<{ metadata: { managedFields?: ManagedFieldsEntry[] }; spec: Record<string, unknown> }>({
    method: 'PATCH',
    path: objectPath(ref, ns, name),
    query: { fieldManager: manager, force: true, ...(options.dryRun ? { dryRun: 'All' } : {}) },
    contentType: ContentType.applyPatch,
    body: { apiVersion: `${ref.group}/${ref.version}`, kind: ref.kind, metadata: { name, namespace: ns }, spec },
  })
}

/**
 * A fixed pause, for the few places where time itself is what a test is about (an outage
 * of a given length, a schedule): waits on evidence are until() and consistently().
 */
export { setTimeout as sleep } from 'node:timers/promises'
