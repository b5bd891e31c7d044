/**
 * `npm start` (= `npm run demo`, dev/main.ts `demo`): the whole story on a local control
 * plane, for a newcomer. Starts a real kube-apiserver + etcd, runs the product's `serve`
 * (webhook + controller) in this process, installs the url variant of the webhook
 * configuration, creates a CRD with thousands of objects at v1, moves storage to v2 with
 * v1 unserved, and shows the migration happen.
 *
 * With `--conversion webhook` the two versions differ in shape (dev/conversion/shapes.ts:
 * v1 `spec: {replicas, image}`, v2 `spec: {template: {replicas, containers: [{image}]}}`)
 * and the CRD converts through a real HTTPS conversion webhook (dev/conversion/webhook.ts),
 * so the migration reshapes every object in etcd; the demo shows one before and after.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import cliProgress from 'cli-progress'
import PQueue from 'p-queue'
import { pino, type Logger } from 'pino'
import { formatLogLine } from '../../src/log-text.js'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { serve } from '../../src/cli/serve.js'
import { generateDevCertificates } from '../certs/devcerts.js'
import { renderWebhookConfiguration } from '../../src/webhook/configuration.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType, KubeHttp } from '../../src/kube/http.js'
import { CRD_API, crdPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition, ManagedFieldsEntry } from '../../src/kube/types.js'
import type { MigrationResult } from '../../src/migrator/migrate.js'
import { settled } from '../../src/migrator/engine/walker.js'
import { withRetry } from '../../src/migrator/engine/retry.js'
import { ensureBinaries, startControlPlane, type ControlPlane } from '../controlplane/controlplane.js'
import { customResourceKey } from '../controlplane/etcd.js'
import { startConversionWebhook, type ConversionWebhook } from '../conversion/webhook.js'
import { waitFor } from '../wait.js'

/** How the demo CRD converts between v1 and v2: `none` (same shape), or `webhook` (different shapes, an HTTPS conversion webhook). */
export type DemoConversion = 'none' | 'webhook'

export interface DemoOptions {
  objects: number
  keep: boolean
  /** `none` unless given. */
  conversion?: DemoConversion
  out?: NodeJS.WritableStream
}

const GROUP = 'demo.crd-migrator.io'
const CRD_NAME = `widgets.${GROUP}`
const NAMESPACES = ['team-a', 'team-b', 'team-c']
const schema = { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } }
/** The object whose etcd value the demo shows. */
const SAMPLE = { namespace: 'team-a', name: 'widget-00000' }
const IMAGES = ['nginx:1.27', 'redis:7.4', 'busybox:1.37']

export async function runDemo(options: DemoOptions): Promise<number> {
  const out = options.out ?? process.stdout
  const say = (s = '') => out.write(`${s}\n`)
  const step = (s: string) => say(`\n==> ${s}`)

  step('Building (first run only, several minutes) and starting etcd + kube-apiserver on loopback')
  try {
    await ensureBinaries()
  } catch (err) {
    say(`cannot build the control plane: ${(err as Error).message}`)
    say(
      'The demo needs Go 1.25+ to build kube-apiserver and etcd from their Go modules: install Go (https://go.dev/doc/install) and run the demo again.',
    )
    return 3
  }
  const cp = await startControlPlane()
  const certDir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-demo-'))
  let handle: Awaited<ReturnType<typeof serve>> | undefined
  let conversionWebhook: ConversionWebhook | undefined
  try {
    say(`    API server ${cp.server} ready in ${cp.timings?.readyMs ?? '?'} ms; export KUBECONFIG=${cp.kubeconfigPath}`)
    const kc = new KubeConfig()
    kc.loadFromFile(cp.kubeconfigPath)
    const http = new KubeHttp(kc, { maxSockets: 64 })

    step('Starting `crd-migrator serve` (webhook with dev certificates, controller) and installing the url webhook configuration')
    const certs = await generateDevCertificates(certDir)
    const migrator = await cp.mintUser('crd-migrator', ['crd-migrators'])
    const config = ConfigSchema.parse({
      kubeconfig: migrator.kubeconfigPath,
      logLevel: 'warn',
      webhook: { host: '127.0.0.1', port: 0, certFile: certs.certFile, keyFile: certs.keyFile },
      metrics: { port: 0 },
      identities: { migratorUsers: ['crd-migrator'] },
      migrator: { concurrency: 16, qps: 0, progressIntervalSeconds: 1 },
      leaderElection: { enabled: false },
    })
    await grantMigrator(cp)
    let bar: cliProgress.SingleBar | undefined
    let midRun: Promise<string> | undefined
    const operator = await cp.mintUser('operator', ['system:authenticated'])
    let serving!: ReturnType<typeof serve>
    const finished = new Promise<MigrationResult>((resolve) => {
      serving = serve(config, demoLogger(out), {
        identity: 'demo',
        defaultMetrics: false,
        onResult: resolve,
        onProgress: (_crd, phase, p) => {
          if (!bar) {
            bar = new cliProgress.SingleBar(
              { format: '    {phase} [{bar}] {value}/{total}', stream: out, noTTYOutput: true, notTTYSchedule: 1000 },
              cliProgress.Presets.shades_classic,
            )
            bar.start(p.total ?? options.objects, 0, { phase })
          }
          bar.setTotal(Math.max(p.total ?? 0, p.counts.seen))
          bar.update(settled(p), { phase })
          if (!midRun && settled(p) > Math.min(500, options.objects / 4)) midRun = tryStorageFlip(cp, operator)
        },
      })
    })
    handle = await serving
    const webhookUrl = `${handle.webhook!.url.replace('0.0.0.0', '127.0.0.1')}/validate-crd`
    const whc = renderWebhookConfiguration({
      mode: 'url',
      url: webhookUrl,
      caBundlePem: certs.caCertPem,
      migratorUsers: config.identities.migratorUsers,
      migratorGroups: config.identities.migratorGroups,
    })
    await http.request({ method: 'POST', path: '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations', body: whc })
    say(
      `    webhook ${webhookUrl}; configuration ${whc.metadata.name} (failurePolicy Fail, only CRDs carrying ${DEFAULT_MIGRATING_ANNOTATION})`,
    )

    if (options.conversion === 'webhook') {
      step('Starting the conversion webhook (dev/conversion/webhook.ts): v1 and v2 of the demo CRD differ in shape')
      conversionWebhook = await startConversionWebhook()
      say(`    ${conversionWebhook.url} (HTTPS, its own dev CA in the CRD's caBundle)`)
      say('    v1 spec: {replicas, image}   <->   v2 spec: {template: {replicas, containers: [{image}]}}')
    }

    step(`Creating ${CRD_NAME} (v1 storage, v2 served) with ${options.objects} objects in ${NAMESPACES.length} namespaces, applied at v1`)
    await http.request({ method: 'POST', path: CRD_API, body: demoCrd(conversionWebhook) })
    await waitEstablished(http)
    for (const ns of NAMESPACES)
      await http.request({
        method: 'POST',
        path: '/api/v1/namespaces',
        body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } },
      })
    const started = Date.now()
    const queue = new PQueue({ concurrency: 32 })
    for (let i = 0; i < options.objects; i++) {
      const ns = NAMESPACES[i % NAMESPACES.length]!
      const name = `widget-${String(i).padStart(5, '0')}`
      void queue.add(() =>
        withRetry(
          () =>
            http.request({
              method: 'PATCH',
              path: `/apis/${GROUP}/v1/namespaces/${ns}/widgets/${name}`,
              query: { fieldManager: 'team-tooling', force: true },
              contentType: ContentType.applyPatch,
              body: {
                apiVersion: `${GROUP}/v1`,
                kind: 'Widget',
                metadata: { name, namespace: ns },
                spec: conversionWebhook
                  ? { replicas: 1 + (i % 5), image: IMAGES[i % IMAGES.length] }
                  : { size: i % 7, color: ['red', 'green', 'blue'][i % 3] },
              },
            }),
          { maxAttempts: 8 },
        ),
      )
    }
    await queue.onIdle()
    say(`    created in ${((Date.now() - started) / 1000).toFixed(1)} s`)
    await show(cp, http, say, 'before', Boolean(conversionWebhook))

    step('Operator upgrade: storage moves to v2 and v1 stops being served; the controller notices (label crd-migrator.io/managed=true)')
    const crd = await getCrd(http, CRD_NAME)
    conversionWebhook?.resetStats() // count the ConversionReviews of the migration only
    await http.request({
      method: 'PATCH',
      path: crdPath(CRD_NAME),
      contentType: ContentType.mergePatch,
      body: {
        metadata: { labels: { 'crd-migrator.io/managed': 'true' } },
        spec: { versions: crd.spec.versions.map((v) => ({ ...v, storage: v.name === 'v2', served: v.name === 'v2' })) },
      },
    })
    const result = await finished
    bar?.stop()
    if (midRun) say(`    mid-run, user "operator" tried to move storage back to v1:\n      ${await midRun}`)
    say(`    ${result.outcome} in ${(result.durationMs / 1000).toFixed(1)} s: ${result.reason}`)
    if (conversionWebhook) {
      const { reviews, objects, byDirection } = conversionWebhook.stats
      const directions = Object.entries(byDirection).map(([d, n]) => `${d} ${n}`)
      say(
        `    the conversion webhook answered ${reviews} ConversionReviews during the migration (${objects} objects: ${directions.join(', ')})`,
      )
    }
    await show(cp, http, say, 'after', Boolean(conversionWebhook))

    if (options.keep) {
      say(`\nThe control plane keeps running: export KUBECONFIG=${cp.kubeconfigPath}   (Ctrl-C stops it)`)
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve())
        process.once('SIGTERM', () => resolve())
      })
    }
    http.close()
    return result.outcome === 'Succeeded' ? 0 : 1
  } finally {
    await handle?.close()
    await cp.stop()
    await conversionWebhook?.stop()
    await rm(certDir, { recursive: true, force: true })
  }
}

function demoCrd(conversionWebhook: ConversionWebhook | undefined): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: CRD_NAME },
    spec: {
      group: GROUP,
      scope: 'Namespaced',
      names: { plural: 'widgets', kind: 'Widget', singular: 'widget', listKind: 'WidgetList' },
      versions: [
        { name: 'v1', served: true, storage: true, schema },
        { name: 'v2', served: true, storage: false, schema },
      ] as CustomResourceDefinition['spec']['versions'],
      ...(conversionWebhook ? { conversion: conversionWebhook.conversion() } : {}),
    },
  }
}

async function waitEstablished(http: KubeHttp): Promise<void> {
  await waitFor(
    `${CRD_NAME} Established`,
    15_000,
    async () => {
      const crd = await getCrd(http, CRD_NAME)
      return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') || undefined
    },
    { everyMs: 50, timedOut: () => new Error(`${CRD_NAME} did not become Established`) },
  )
}

/** The RBAC the Helm chart grants, for the demo's migrator user. */
async function grantMigrator(cp: ControlPlane): Promise<void> {
  const rules = [
    { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions/status'], verbs: ['patch'] },
    { apiGroups: [GROUP], resources: ['*'], verbs: ['get', 'list', 'patch'] },
    { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
    { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list'] },
    // Whether Kubernetes' own migrator is working on the CRD (the chart's rule, engine own).
    { apiGroups: ['storagemigration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list', 'patch'] },
  ]
  await cp.apiRequest('/apis/rbac.authorization.k8s.io/v1/clusterroles', {
    method: 'POST',
    body: { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'crd-migrator-demo' }, rules },
  })
  await cp.apiRequest('/apis/rbac.authorization.k8s.io/v1/clusterroles', {
    method: 'POST',
    body: { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'crd-editor-demo' }, rules: [rules[0]] },
  })
  for (const [role, group] of [
    ['crd-migrator-demo', 'crd-migrators'],
    ['crd-editor-demo', 'system:authenticated'],
  ] as const) {
    await cp.apiRequest('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
      method: 'POST',
      body: {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: role },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
        subjects: [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: group }],
      },
    })
  }
}

async function tryStorageFlip(cp: ControlPlane, as: { certPem: string; keyPem: string }): Promise<string> {
  const crd = (await cp.apiRequest(crdPath(CRD_NAME))).json as CustomResourceDefinition
  const frozen = crd.metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION] === 'true'
  const res = await cp.apiRequest(crdPath(CRD_NAME), {
    method: 'PATCH',
    as,
    contentType: ContentType.mergePatch,
    body: { spec: { versions: crd.spec.versions.map((v) => ({ ...v, storage: v.name === 'v1', served: true })) } },
  })
  const message = (res.json as { message?: string } | undefined)?.message ?? res.body
  return `${frozen ? '(CRD frozen) ' : ''}HTTP ${res.status}: ${message}`
}

async function show(cp: ControlPlane, http: KubeHttp, say: (s?: string) => void, when: string, showStored: boolean): Promise<void> {
  const crd = await getCrd(http, CRD_NAME)
  const keys = await cp.listEtcdKeys(`/registry/${GROUP}/widgets/`)
  const byVersion = new Map<string, number>()
  for (const key of keys) {
    const v = await cp.storedApiVersion(GROUP, 'widgets', key.split('/')[4], key.split('/')[5]!)
    byVersion.set(v ?? 'missing', (byVersion.get(v ?? 'missing') ?? 0) + 1)
  }
  const sample = (
    await http.request<{ metadata: { managedFields?: ManagedFieldsEntry[] } }>({
      method: 'GET',
      path: `/apis/${GROUP}/${crd.spec.versions.find((v) => v.storage)!.name}/namespaces/${SAMPLE.namespace}/widgets/${SAMPLE.name}`,
    })
  ).body
  const a = crd.metadata.annotations ?? {}
  say(
    `    [${when}] status.storedVersions: ${JSON.stringify(crd.status?.storedVersions)}; storage: ${crd.spec.versions.find((v) => v.storage)?.name}`,
  )
  say(`    [${when}] etcd holds: ${[...byVersion].map(([v, n]) => `${n} x ${v}`).join(', ')}`)
  if (showStored) {
    const key = customResourceKey(GROUP, 'widgets', SAMPLE.namespace, SAMPLE.name)
    const stored = JSON.parse((await cp.readEtcdKey(key))?.toString('utf8') ?? '{}') as { apiVersion?: string; spec?: unknown }
    say(`    [${when}] etcd ${key}: apiVersion ${stored.apiVersion}, spec ${JSON.stringify(stored.spec)}`)
  }
  say(
    `    [${when}] managedFields of ${SAMPLE.namespace}/${SAMPLE.name}: ${(sample.metadata.managedFields ?? []).map((e) => `${e.manager}/${e.operation}@${e.apiVersion}`).join(', ')}`,
  )
  if (a[StateAnnotation.lastResult])
    say(
      `    [${when}] annotations: last-result=${a[StateAnnotation.lastResult]}, counts=${a[StateAnnotation.lastCounts]}, duration=${a[StateAnnotation.lastDuration]}`,
    )
}

/** Warnings of `serve` as lines of the story (text, indented like it), not raw JSON. */
function demoLogger(out: NodeJS.WritableStream): Logger {
  return pino({ level: 'warn', base: { name: 'crd-migrator' } }, { write: (line: string) => out.write(`    ${formatLogLine(line)}`) })
}
