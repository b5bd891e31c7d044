/**
 * The chart installed the way docs/install.md (and the README) says, end to end: in a network
 * namespace of its own (helpers/network-namespace.ts), a private control plane whose API
 * server reaches webhooks through Service endpoints (--enable-aggregator-routing=true), the
 * workload controllers and the node agent (dev/agent/: the pods are processes of the
 * project's dist/), and cert-manager's controllers and cainjector
 * (dev/controlplane/cert-manager.ts). Then `helm install` with docs/install.md's values, and:
 * the Certificate is Ready and cainjector puts its CA into the chart's
 * ValidatingWebhookConfiguration; 2 replicas Running and Ready, one of them holding the
 * Lease; the API server calls the webhook through the Service (a storage flip of a frozen
 * CRD is refused with the webhook's message, an unrelated CRD write passes); a CRD labelled
 * crd-migrator.io/managed=true with objects at v1 and storage flipped to v2 is migrated by
 * the pods (etcd holds every object at v2, storedVersions [v2]); `helm upgrade` changing a
 * value rolls both pods with no review refused under a trickle of writes to a frozen CRD;
 * cert-manager renews the serving certificate (`helm upgrade` with certManager.duration=1h,
 * renewBefore=59m45s: reissued, then renewed again) and both pods serve the Secret's new
 * certificate (a TLS handshake to each pod IP; the agent rewrites Secret volumes every 5 s)
 * without a restart and with no review refused under the trickle, the durations set back after;
 * the leader SIGKILLed mid-migration (its pod deleted at once) and another pod takes the
 * Lease and finishes (after the stale-heartbeat wait, about 55 s); `helm test` passes (its
 * pods run by the agent); a rolling upgrade mid-migration (issue 43) hands the freeze off:
 * an admin's storage flip every 100-250 ms never lands (etcd read every 100 ms: storage v2
 * and the freeze, every time), a new pod resumes at once, the old pods gone well inside the grace
 * period; `--set migrator.enabled=false` mid-run of that CRD lifts its freeze (the
 * pre-upgrade hook) before the RBAC goes, and turned on again it freezes the CRD again;
 * `helm uninstall` mid-migration of that same CRD lifts its freeze (the pre-delete hook) and
 * leaves no ValidatingWebhookConfiguration and no freeze annotation. About 260 s.
 * CRD_MIGRATOR_INSTALL_LOGS=1 prints the agent's log and the pods' logs after each subtest
 * (always printed when one fails).
 */
import { networkNamespace } from '../helpers/network-namespace.js'
import { X509Certificate } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { connect } from 'node:tls'
import { tmpdir } from 'node:os'
import { setTimeout } from 'node:timers/promises'
import { join } from 'node:path'
import t from 'tap'
import { packageRoot } from '../../dev/controlplane/binaries.js'
import { startCertManager, type CertManager } from '../../dev/controlplane/cert-manager.js'
import { startControlPlane, type ControlPlane } from '../../dev/controlplane/controlplane.js'
import { ensureTools } from '../../dev/controlplane/tools.js'
import { NodeAgent } from '../../dev/agent/agent.js'
import { startWorkloadControllers, type WorkloadControllers } from '../../dev/agent/controllers.js'
import {
  crdManifest,
  createCrd,
  createNamespace,
  createObjects,
  httpFor,
  refFor,
  setStorageVersion,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { scratchHelm } from '../helpers/helm.js'
import { CliRun } from '../helpers/cli-run.js'
import { until } from '../helpers/until.js'

const t0 = Date.now()
const logs: string[] = []
const log = (m: string): void => void logs.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${m}`)

t.setTimeout(30 * 60 * 1000)
const tools = await ensureTools()
const podsDir = await mkdtemp(join(tmpdir(), 'crdm-install-pods-'))
const cp: ControlPlane = await startControlPlane({ extraApiserverFlags: { 'enable-aggregator-routing': 'true' } })
const kcm: WorkloadControllers = await startWorkloadControllers(cp)
// Secret volumes written again every 5 s (the kubelet's minute would outlast the renewal test).
const agent = await NodeAgent.start({
  kubeconfig: cp.kubeconfigPath,
  backoff: { initialMs: 1000, maxMs: 5000 },
  volumeResyncMs: 5000,
  podsDir,
  log,
})
const stopAll = async (cm?: CertManager) => {
  await agent.stop()
  await cm?.stop()
  await kcm.stop()
  await cp.stop()
  await rm(podsDir, { recursive: true, force: true })
}
const cm: CertManager = await startCertManager(cp).catch(async (err: unknown) => {
  await stopAll()
  throw err
})
t.teardown(() => stopAll(cm))
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '30') * 1000 * 8)
t.comment(`network namespace ${networkNamespace}; control plane, controllers, agent and cert-manager up in ${Date.now() - t0}ms`)

const http = httpFor(cp.kubeconfigPath)
const helm = await scratchHelm(tools.helm, 'crdm-install-helm-')
const CHART = join(packageRoot(), 'charts', 'crd-migrator')
const NS = 'crd-migrator'
const RELEASE = 'crd-migrator'
const MIGRATING = 'ksvm.sigs.k8s.io/migrating'
const VWC = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations'
const CRDS = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'

const helmRun = async (args: string[]) => {
  const res = await helm.run([...args, '--kubeconfig', cp.kubeconfigPath])
  log(`helm ${args.join(' ')} -> ${res.code}\n${res.stdout}\n${res.stderr}`)
  return res
}

async function getJson<T>(path: string): Promise<T> {
  const res = await cp.apiRequest(path, { timeoutMs: 15_000 })
  if (res.status !== 200) throw new Error(`GET ${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
  return res.json as T
}
async function patch(path: string, body: unknown): Promise<{ status: number; body: string }> {
  const res = await cp.apiRequest(path, { method: 'PATCH', body, contentType: 'application/merge-patch+json', timeoutMs: 15_000 })
  return { status: res.status, body: res.body }
}

interface Condition {
  type: string
  status: string
}
interface PodJson {
  metadata: { name: string; deletionTimestamp?: string; ownerReferences?: Array<{ kind: string }> }
  status: { phase?: string; podIP?: string; conditions?: Condition[] }
}
const isTrue = (conds: Condition[] | undefined, type: string) => conds?.some((c) => c.type === type && c.status === 'True') === true
const migratorPods = async (): Promise<PodJson[]> =>
  (
    await getJson<{ items: PodJson[] }>(`/api/v1/namespaces/${NS}/pods?labelSelector=app.kubernetes.io%2Finstance%3D${RELEASE}`)
  ).items.filter((p) => !p.metadata.deletionTimestamp && p.metadata.ownerReferences?.some((o) => o.kind === 'ReplicaSet'))
const runningReady = (pods: PodJson[]) => pods.filter((p) => p.status.phase === 'Running' && isTrue(p.status.conditions, 'Ready'))
const releaseVwcs = async () =>
  (
    await getJson<{
      items: Array<{
        metadata: { name: string; annotations?: Record<string, string> }
        webhooks: Array<{ clientConfig: { caBundle?: string; service?: { name: string; namespace: string } } }>
      }>
    }>(`${VWC}?labelSelector=app.kubernetes.io%2Finstance%3D${RELEASE}`)
  ).items

/** On failure: what the agent, the pods and helm said. */
async function dumpLogs(): Promise<void> {
  t.comment(logs.slice(-60).join('\n'))
  for (const dir of await readdir(podsDir).catch(() => [] as string[])) {
    for (const f of await readdir(join(podsDir, dir), { recursive: true }).catch(() => [] as string[])) {
      if (!String(f).endsWith('.log')) continue
      const text = await readFile(join(podsDir, dir, String(f)), 'utf8').catch(() => '')
      t.comment(`--- ${dir}/${f}\n${text.split('\n').slice(-40).join('\n')}`)
    }
  }
}
t.afterEach(async (t) => {
  if (!t.passing() || process.env['CRD_MIGRATOR_INSTALL_LOGS'] === '1') await dumpLogs()
})

// The managed CRD lives in the group docs/install.md's install names (`rbac.managedGroups={example.com}`).
const MANAGED_GROUP = 'example.com'
const OBJECTS = 60

t.test('helm install with the README values; the Certificate becomes Ready and cainjector fills the caBundle', async (t) => {
  // docs/install.md, Install, 3. crd-migrator: these values and nothing else.
  const res = await helmRun([
    'install',
    RELEASE,
    CHART,
    '-n',
    NS,
    '--create-namespace',
    '--set',
    'image.repository=registry.example.com/crd-migrator',
    '--set',
    'rbac.managedGroups={example.com}',
  ])
  t.equal(res.code, 0, `helm install: ${res.stderr}`)

  const certs = await until(
    'every Certificate of the release Ready',
    90_000,
    () =>
      getJson<{ items: Array<{ metadata: { name: string }; status?: { conditions?: Condition[] } }> }>(
        `/apis/cert-manager.io/v1/namespaces/${NS}/certificates`,
      ),
    (l) => l.items.length > 0 && l.items.every((c) => isTrue(c.status?.conditions, 'Ready')),
    { everyMs: 500 },
  )
  t.ok(certs.items.length >= 2, `Certificates Ready: ${certs.items.map((c) => c.metadata.name).join(', ')}`)

  const vwcs = await until(
    "the caBundle injected into the chart's ValidatingWebhookConfiguration",
    90_000,
    releaseVwcs,
    (l) => l.length === 1 && l[0]!.webhooks.every((w) => (w.clientConfig.caBundle ?? '') !== ''),
    { everyMs: 500 },
  )
  const vwc = vwcs[0]!
  const from = vwc.metadata.annotations?.['cert-manager.io/inject-ca-from'] ?? ''
  t.match(from, new RegExp(`^${NS}/`), 'annotated for cainjector')
  const secretName = certs.items.length > 0 ? await secretOf(from) : ''
  const secret = await getJson<{ data: Record<string, string> }>(`/api/v1/namespaces/${NS}/secrets/${secretName}`)
  for (const w of vwc.webhooks) {
    t.equal(w.clientConfig.caBundle, secret.data['ca.crt'], "caBundle is the serving Secret's ca.crt")
    t.same(
      w.clientConfig.service && { name: w.clientConfig.service.name, namespace: w.clientConfig.service.namespace },
      { name: RELEASE, namespace: NS },
      'through the Service',
    )
  }
})

async function secretOf(injectFrom: string): Promise<string> {
  const [ns, name] = injectFrom.split('/')
  return (await getJson<{ spec: { secretName: string } }>(`/apis/cert-manager.io/v1/namespaces/${ns}/certificates/${name}`)).spec.secretName
}

t.test('2 replicas Running and Ready, exactly one holding the Lease', async (t) => {
  const pods = await until(
    '2 migrator pods Running and Ready',
    120_000,
    migratorPods,
    (p) => p.length === 2 && runningReady(p).length === 2,
    { everyMs: 500 },
  )
  const names = pods.map((p) => p.metadata.name)
  const lease = await until(
    'the Lease held by one of the pods',
    60_000,
    () => getJson<{ spec: { holderIdentity?: string } }>(`/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${RELEASE}`),
    (l) => names.includes(l.spec.holderIdentity ?? ''),
    { everyMs: 500 },
  )
  t.ok(names.includes(lease.spec.holderIdentity!), `held by ${lease.spec.holderIdentity}`)
  // The Deployment's status follows the pods' readiness a moment later (its controller's next sync).
  const deploy = await until(
    'the Deployment counting 2 ready replicas',
    30_000,
    () => getJson<{ status: { readyReplicas?: number; replicas?: number } }>(`/apis/apps/v1/namespaces/${NS}/deployments/${RELEASE}`),
    (d) => d.status.readyReplicas === 2,
    { everyMs: 200 },
  )
  t.equal(deploy.status.readyReplicas, 2, 'the Deployment counts 2 ready replicas')
})

t.test('the API server calls the webhook through the Service', async (t) => {
  const frozen = await createCrd(http, crdManifest({ group: 'frozen.install.test', versions: ['v1', 'v2'], storage: 'v1' }))
  const unrelated = await createCrd(http, crdManifest({ group: 'unrelated.install.test', versions: ['v1', 'v2'], storage: 'v1' }))
  const frozenPath = `${CRDS}/${frozen.metadata.name}`
  const f = await patch(frozenPath, { metadata: { annotations: { [MIGRATING]: 'true' } } })
  t.equal(f.status, 200, `freeze set: ${f.body.slice(0, 300)}`)
  const versions = frozen.spec.versions.map((v) => ({ ...v, storage: v.name === 'v2' }))
  // The endpoints may lag the pods' readiness by a moment: wait for the webhook's own answer.
  const refused = await until(
    'the storage flip of the frozen CRD refused by the webhook',
    60_000,
    () => patch(frozenPath, { spec: { versions } }),
    (r) => r.status !== 200 && r.body.includes('is frozen for a storage version migration'),
    { everyMs: 500 },
  )
  t.ok(refused.status >= 400 && refused.status < 500, `refused: HTTP ${refused.status}`)
  t.match(
    (JSON.parse(refused.body) as { message: string }).message,
    // The admin is in system:masters, which the authorizer allows `freeze`: the entry for those.
    /^admission webhook "storage-freeze-rbac\.crd-migrator\.io" denied the request: /,
    "by the chart's webhook",
  )
  const after = await getJson<{ spec: { versions: Array<{ name: string; storage: boolean }> } }>(frozenPath)
  t.same(
    after.spec.versions.filter((v) => v.storage).map((v) => v.name),
    ['v1'],
    'storage stays v1',
  )

  const ok = await patch(`${CRDS}/${unrelated.metadata.name}`, {
    metadata: { labels: { touched: 'yes' } },
    spec: { versions: unrelated.spec.versions.map((v) => ({ ...v, storage: v.name === 'v2' })) },
  })
  t.equal(ok.status, 200, `an unrelated CRD's storage flip passes: ${ok.body.slice(0, 200)}`)
})

t.test('a managed CRD with objects at v1, storage flipped to v2, is migrated by the pods', async (t) => {
  const ns = 'widgets-install'
  await createNamespace(http, ns)
  const created = await createCrd(http, crdManifest({ group: MANAGED_GROUP, versions: ['v1', 'v2'], storage: 'v1' }))
  await createObjects(http, refFor(created, 'v1'), [ns], OBJECTS)
  t.same(
    Object.fromEntries(await storedVersionsInEtcd(cp, MANAGED_GROUP, 'widgets')),
    { [`${MANAGED_GROUP}/v1`]: OBJECTS },
    'etcd holds them at v1',
  )
  await setStorageVersion(http, created.metadata.name, 'v2')
  // docs/install.md, Mark a CRD as managed.
  const label = await patch(`${CRDS}/${created.metadata.name}`, { metadata: { labels: { 'crd-migrator.io/managed': 'true' } } })
  t.equal(label.status, 200, 'labelled managed')
  const done = await until(
    'storedVersions [v2]',
    120_000,
    () =>
      getJson<{ metadata: { annotations?: Record<string, string> }; status: { storedVersions: string[] } }>(
        `${CRDS}/${created.metadata.name}`,
      ),
    (c) => c.status.storedVersions.length === 1 && c.status.storedVersions[0] === 'v2' && !(MIGRATING in (c.metadata.annotations ?? {})),
    { everyMs: 500 },
  )
  t.same(done.status.storedVersions, ['v2'], 'storedVersions [v2], the freeze lifted')
  t.match(done.metadata.annotations?.['crd-migrator.io/last-result'] ?? '', /^Succeeded/, 'last-result Succeeded')
  t.same(
    Object.fromEntries(await storedVersionsInEtcd(cp, MANAGED_GROUP, 'widgets')),
    { [`${MANAGED_GROUP}/v2`]: OBJECTS },
    'etcd holds every object at v2',
  )
})

// Issue 43: an admin outside system:masters (cluster-admin through RBAC, as on EKS access
// entries, GKE, AKS with Entra ID) runs `migrate` from a workstation with the chart installed;
// a user with the migrator's own RBAC but not the chart's freeze permission is refused by the
// chart's webhook, told which rule and what to grant.
t.test('migrate from a workstation: an RBAC cluster-admin outside system:masters succeeds, a user without freeze is refused', async (t) => {
  const RBAC = '/apis/rbac.authorization.k8s.io/v1'
  const post = async (path: string, body: unknown) => {
    const res = await cp.apiRequest(path, { method: 'POST', body, timeoutMs: 15_000 })
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${res.body.slice(0, 300)}`)
  }
  const bind = (name: string, role: string, user: string) =>
    post(`${RBAC}/clusterrolebindings`, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
      subjects: [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: user }],
    })
  const ns = 'cogs-install'
  await createNamespace(http, ns)
  const created = await createCrd(
    http,
    crdManifest({ group: MANAGED_GROUP, plural: 'cogs', kind: 'Cog', versions: ['v1', 'v2'], storage: 'v1' }),
  )
  const name = created.metadata.name
  await createObjects(http, refFor(created, 'v1'), [ns], 20)
  await setStorageVersion(http, name, 'v2')
  const etcd = async () => Object.fromEntries([...(await storedVersionsInEtcd(cp, MANAGED_GROUP, 'cogs'))])

  // The migrator's own ClusterRole of the release (CRDs, the managed group's objects), Events: all but freeze.
  const migratorRole = await getJson<{ rules: unknown[] }>(`${RBAC}/clusterroles/${RELEASE}`)
  await post(`${RBAC}/clusterroles`, {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: 'narrow-admin' },
    rules: [
      ...migratorRole.rules,
      { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
      { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list'] },
    ],
  })
  await bind('narrow-admin', 'narrow-admin', 'narrow-admin')
  const narrow = await cp.mintUser('narrow-admin', ['ops'])
  const refused = new CliRun(['migrate', name, '--kubeconfig', narrow.kubeconfigPath])
  const no = await refused.exited
  const said = `${refused.stdout}\n${refused.stderr}`
  t.equal(no.code, 1, 'without freeze: exit 1', { stdout: refused.stdout, stderr: refused.stderr })
  t.match(said, /admission webhook "storage-freeze\.crd-migrator\.io" denied the request/, "by the chart's webhook")
  t.match(said, /crd-migrator webhook rule annotation-guarded/, 'names the rule')
  t.match(
    said,
    new RegExp(`verb "freeze" on customresourcedefinitions\\.apiextensions\\.k8s\\.io "${name.replace(/\./g, '\\.')}" with RBAC`),
  )
  t.match(said, /--clusterrole=<fullname>-freeze --user=narrow-admin/, 'and what to grant')
  t.notMatch(said, /grant it with RBAC/, 'not blamed on RBAC')
  t.same(await etcd(), { [`${MANAGED_GROUP}/v1`]: 20 }, 'nothing rewritten')

  await bind('eks-admin', 'cluster-admin', 'eks-admin')
  const admin = await cp.mintUser('eks-admin', ['admins'])
  const run = new CliRun(['migrate', name, '--kubeconfig', admin.kubeconfigPath])
  const ok = await run.exited
  t.equal(ok.code, 0, 'cluster-admin by RBAC, not system:masters: exit 0', { stdout: run.stdout, stderr: run.stderr })
  t.match(run.stdout, new RegExp(`^${name.replace(/\./g, '\\.')}: Succeeded`, 'm'))
  t.match(run.stderr, /^Warning: break-glass override by user "eks-admin" \(RBAC allows verb "freeze"/m, "the webhook's warning, printed")
  t.same(await etcd(), { [`${MANAGED_GROUP}/v2`]: 20 }, 'etcd holds every object at v2')

  // The chart's ClusterRole, bound as the refusal says: the narrow user may migrate too.
  await bind('narrow-admin-freeze', `${RELEASE}-freeze`, 'narrow-admin')
  await setStorageVersion(http, name, 'v1')
  const again = new CliRun(['migrate', name, '--kubeconfig', narrow.kubeconfigPath])
  const fine = await again.exited
  t.equal(fine.code, 0, `with ${RELEASE}-freeze bound: exit 0`, { stdout: again.stdout, stderr: again.stderr })
  t.same(await etcd(), { [`${MANAGED_GROUP}/v1`]: 20 }, 'back at v1 in etcd')
  await cp.apiRequest(`${CRDS}/${name}`, { method: 'DELETE' })
})

const FROZEN = 'widgets.frozen.install.test'
/** One write every 50 ms or so: a steady trickle, not a load test of the 2 cores. */
const TRICKLE_MS = 50
const SLOW = `gadgets.${MANAGED_GROUP}`
const SLOW_OBJECTS = 400
/** Migrated through a rolling upgrade and then an uninstall: slow enough to be mid-run through both. */
const SPROCKETS = `sprockets.${MANAGED_GROUP}`
const SPROCKETS_OBJECTS = 800
const SPROCKETS_QPS = 8

t.test('helm upgrade changing a value rolls the pods, no review refused under a trickle of CRD writes', async (t) => {
  const before = (await migratorPods()).map((p) => p.metadata.name)
  // Every write to the frozen CRD goes to the webhook (its matchConditions); admin's label changes are allowed.
  const results: Array<{ status: number; body: string }> = []
  let stop = false
  const trickle = (async () => {
    for (let i = 0; !stop; i++) {
      const r = await patch(`${CRDS}/${FROZEN}`, { metadata: { labels: { tick: String(i) } } })
      results.push(r)
      await setTimeout(TRICKLE_MS) // the trickle's pace (a load, not a wait)
    }
  })()
  // The value the next test needs: a slow migration of the gadgets CRD (its own qps).
  const up = await helmRun([
    'upgrade',
    RELEASE,
    CHART,
    '-n',
    NS,
    '--reuse-values',
    ...(await helm.valuesArgs({ migrator: { crds: { [SLOW]: { qps: 40 }, [SPROCKETS]: { qps: SPROCKETS_QPS } } } })),
  ])
  t.equal(up.code, 0, `helm upgrade: ${up.stderr}`)
  try {
    const after = await until(
      'the rollout: 2 new pods Running and Ready, the old ones gone',
      150_000,
      migratorPods,
      (p) => p.length === 2 && runningReady(p).length === 2 && p.every((x) => !before.includes(x.metadata.name)),
      { everyMs: 500 },
    )
    // A few more writes once the old pods are gone (the endpoints settle after them).
    const seen = results.length
    await until(
      'more writes after the rollout',
      30_000,
      async () => results.length,
      (n) => n >= seen + 10,
    )
    t.comment(`pods ${before.join(', ')} -> ${after.map((p) => p.metadata.name).join(', ')}; ${results.length} writes`)
  } finally {
    stop = true
    await trickle
  }
  const refused = results.filter((r) => r.status !== 200)
  t.ok(results.length >= 20, `${results.length} writes during the rollout`)
  t.same(
    refused.map((r) => `${r.status} ${r.body.slice(0, 300)}`),
    [],
    'no write refused or failed',
  )
  // Lift the test's own freeze (system:masters is break-glass): uninstall later must find none.
  const lift = await patch(`${CRDS}/${FROZEN}`, { metadata: { annotations: { [MIGRATING]: null } } })
  t.equal(lift.status, 200, `freeze lifted: ${lift.body.slice(0, 300)}`)
})

/** The serial of the certificate a pod's webhook serves (a TLS handshake to its IP), '' if none. */
function servedSerial(ip: string, port = 9443): Promise<string> {
  return new Promise((resolve) => {
    const sock = connect({ host: ip, port, rejectUnauthorized: false, servername: `${RELEASE}.${NS}.svc` })
    const done = (serial: string) => {
      sock.destroy()
      resolve(serial)
    }
    sock.setTimeout(5000, () => done(''))
    sock.once('error', () => done(''))
    sock.once('secureConnect', () => done(String(sock.getPeerCertificate().serialNumber ?? '').toUpperCase()))
  })
}

t.test('cert-manager renews the serving certificate, both pods serve the new one, no review failed', async (t) => {
  const injectFrom = (await releaseVwcs())[0]?.metadata.annotations?.['cert-manager.io/inject-ca-from'] ?? ''
  const certPath = `/apis/cert-manager.io/v1/namespaces/${injectFrom.split('/')[0]}/certificates/${injectFrom.split('/')[1]}`
  const secretPath = `/api/v1/namespaces/${NS}/secrets/${await secretOf(injectFrom)}`
  const secretSerial = async () => {
    const s = await getJson<{ data?: Record<string, string> }>(secretPath)
    return new X509Certificate(Buffer.from(s.data?.['tls.crt'] ?? '', 'base64')).serialNumber.toUpperCase()
  }
  const pods = runningReady(await migratorPods())
  t.equal(pods.length, 2, '2 pods serving')
  const ips = pods.map((p) => p.status.podIP ?? '')
  const first = await secretSerial()
  // Freeze the CRD again: its writes go to the webhook while the certificate changes under it.
  const freeze = await patch(`${CRDS}/${FROZEN}`, { metadata: { annotations: { [MIGRATING]: 'true' } } })
  t.equal(freeze.status, 200, `freeze set: ${freeze.body.slice(0, 300)}`)
  const results: Array<{ status: number; body: string }> = []
  let stop = false
  const trickle = (async () => {
    for (let i = 0; !stop; i++) {
      results.push(await patch(`${CRDS}/${FROZEN}`, { metadata: { labels: { renew: String(i) } } }))
      await setTimeout(TRICKLE_MS) // the trickle's pace (a load, not a wait)
    }
  })()
  const serials = [first]
  try {
    // A 1 h certificate renewed 59m45s early: cert-manager reissues now (the spec changed), then every 15 s.
    const up = await helmRun([
      'upgrade',
      RELEASE,
      CHART,
      '-n',
      NS,
      '--reuse-values',
      '--set',
      'certManager.duration=1h',
      '--set',
      'certManager.renewBefore=59m45s',
    ])
    t.equal(up.code, 0, `helm upgrade: ${up.stderr}`)
    const settled = await until(
      'the certificate reissued for the new duration, Ready',
      60_000,
      async () => ({
        cert: await getJson<{ spec: { duration?: string }; status?: { conditions?: Condition[] } }>(certPath),
        serial: await secretSerial(),
      }),
      (c) =>
        c.cert.spec.duration === '1h0m0s' || c.cert.spec.duration === '1h'
          ? c.serial !== first && isTrue(c.cert.status?.conditions, 'Ready')
          : false,
      { everyMs: 500 },
    )
    serials.push(settled.serial)
    // Renewed once more after that, and both pods serve the Secret's current certificate.
    const served = await until(
      'a renewal after the reissue, served by both pods',
      60_000,
      async () => ({ secret: await secretSerial(), pods: await Promise.all(ips.map((ip) => servedSerial(ip))) }),
      (s) => !serials.includes(s.secret) && s.pods.every((p) => p === s.secret),
      { everyMs: 500 },
    )
    t.pass(`serials ${first} -> ${settled.serial} -> ${served.secret}; pods serve ${served.pods.join(', ')}`)
    const now = (await migratorPods()).map((p) => p.metadata.name).sort()
    t.same(now, pods.map((p) => p.metadata.name).sort(), 'the same pods (reloaded, not restarted)')
  } finally {
    stop = true
    await trickle
  }
  t.ok(results.length >= 20, `${results.length} writes during the renewal`)
  t.same(
    results.filter((r) => r.status !== 200).map((r) => `${r.status} ${r.body.slice(0, 300)}`),
    [],
    'no write refused or failed',
  )
  const lift = await patch(`${CRDS}/${FROZEN}`, { metadata: { annotations: { [MIGRATING]: null } } })
  t.equal(lift.status, 200, `freeze lifted: ${lift.body.slice(0, 300)}`)
  // Back to the chart's durations: the later steps see no renewals every 15 s.
  const back = await helmRun([
    'upgrade',
    RELEASE,
    CHART,
    '-n',
    NS,
    '--reuse-values',
    '--set',
    'certManager.duration=2160h',
    '--set',
    'certManager.renewBefore=360h',
  ])
  t.equal(back.code, 0, `helm upgrade back: ${back.stderr}`)
})

/** The pod's main process (its `node dist/cli/main.js serve`), found by its POD_NAME. */
async function podProcess(pod: string): Promise<number[]> {
  const pids: number[] = []
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const environ = await readFile(`/proc/${entry}/environ`, 'utf8').catch(() => '')
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')
    if (environ.split('\0').includes(`POD_NAME=${pod}`) && cmdline.includes('dist/cli/main.js')) pids.push(Number(entry))
  }
  return pids
}

t.test('the leader killed mid-migration: another pod takes the Lease and finishes', async (t) => {
  const ns = 'gadgets-install'
  await createNamespace(http, ns)
  const created = await createCrd(
    http,
    crdManifest({ group: MANAGED_GROUP, versions: ['v1', 'v2'], storage: 'v1', plural: 'gadgets', kind: 'Gadget' }),
  )
  await createObjects(http, refFor(created, 'v1'), [ns], SLOW_OBJECTS)
  await setStorageVersion(http, SLOW, 'v2')
  const leasePath = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${RELEASE}`
  const label = await patch(`${CRDS}/${SLOW}`, { metadata: { labels: { 'crd-migrator.io/managed': 'true' } } })
  t.equal(label.status, 200, 'labelled managed')
  const etcdAt = async () => Object.fromEntries(await storedVersionsInEtcd(cp, MANAGED_GROUP, 'gadgets'))
  // Mid-migration: frozen, and some objects (not all) already rewritten at v2.
  await until(
    'the migration under way: some objects at v2',
    60_000,
    etcdAt,
    (c) => (c[`${MANAGED_GROUP}/v2`] ?? 0) > 0 && (c[`${MANAGED_GROUP}/v1`] ?? 0) > 0,
    { everyMs: 200 },
  )
  const leader = (await getJson<{ spec: { holderIdentity?: string } }>(leasePath)).spec.holderIdentity ?? ''
  const pids = await podProcess(leader)
  t.equal(pids.length, 1, `the leader ${leader}'s process: ${pids.join(', ')}`)
  const killedAt = Date.now()
  for (const pid of pids) process.kill(pid, 'SIGKILL')
  // Gone for good: the pod deleted at once, so its restarted container cannot take the Lease back.
  const del = await cp.apiRequest(`/api/v1/namespaces/${NS}/pods/${leader}`, { method: 'DELETE', body: { gracePeriodSeconds: 0 } })
  t.ok(del.status === 200 || del.status === 404, `leader pod deleted: ${del.status}`)
  const mid = await etcdAt()
  t.ok((mid[`${MANAGED_GROUP}/v1`] ?? 0) > 0, `killed mid-migration: ${JSON.stringify(mid)}`)

  const done = await until(
    'storedVersions [v2] and the freeze lifted, by another pod',
    150_000,
    () => getJson<{ metadata: { annotations?: Record<string, string> }; status: { storedVersions: string[] } }>(`${CRDS}/${SLOW}`),
    (c) => c.status.storedVersions.length === 1 && c.status.storedVersions[0] === 'v2' && !(MIGRATING in (c.metadata.annotations ?? {})),
    { everyMs: 500 },
  )
  t.match(done.metadata.annotations?.['crd-migrator.io/last-result'] ?? '', /^Succeeded/, 'last-result Succeeded')
  const holder = (await getJson<{ spec: { holderIdentity?: string } }>(leasePath)).spec.holderIdentity ?? ''
  t.not(holder, leader, `the Lease moved: ${leader} -> ${holder}`)
  t.comment(`killed at ${JSON.stringify(mid)}; finished ${((Date.now() - killedAt) / 1000).toFixed(1)}s after the kill`)
  t.same(await etcdAt(), { [`${MANAGED_GROUP}/v2`]: SLOW_OBJECTS }, 'etcd holds every object at v2')
  await until('2 pods Running and Ready again', 120_000, migratorPods, (p) => p.length === 2 && runningReady(p).length === 2, {
    everyMs: 500,
  })
})

t.test('helm test passes, its pods run by the agent', async (t) => {
  // docs/install.md: `helm test` needs `--set tests.enabled=true` (the hook is off by default).
  const up = await helmRun(['upgrade', RELEASE, CHART, '-n', NS, '--reuse-values', '--set', 'tests.enabled=true'])
  t.equal(up.code, 0, `helm upgrade --set tests.enabled=true: ${up.stderr}`)
  const res = await helmRun(['test', RELEASE, '-n', NS, '--timeout', '3m'])
  t.equal(res.code, 0, `helm test: ${res.stdout}\n${res.stderr}`)
  t.match(res.stdout, /Phase:\s+Succeeded/, 'the test pods Succeeded')
})

interface CrdJson {
  metadata: { annotations?: Record<string, string> }
  spec: { versions: Array<{ name: string; served: boolean; storage: boolean }> }
  status: { storedVersions: string[] }
}
const CRD_ETCD = '/registry/apiextensions.k8s.io/customresourcedefinitions/'
/** The CRD as etcd holds it: its storage version and whether the freeze annotation is set. */
async function crdInEtcd(name: string): Promise<{ storage: string | undefined; frozen: boolean }> {
  const raw = await cp.readEtcdKey(CRD_ETCD + name)
  if (!raw) return { storage: undefined, frozen: false }
  const crd = JSON.parse(raw.toString('utf8')) as CrdJson
  return { storage: crd.spec.versions.find((v) => v.storage)?.name, frozen: crd.metadata.annotations?.[MIGRATING] === 'true' }
}
const ownerOf = (c: CrdJson) => c.metadata.annotations?.['crd-migrator.io/owner']
const sprocketsAt = async () => Object.fromEntries(await storedVersionsInEtcd(cp, MANAGED_GROUP, 'sprockets'))

t.test('a rolling upgrade mid-migration hands the freeze off: a storage flip every 100-250 ms never lands (etcd)', async (t) => {
  const ns = 'sprockets-install'
  await createNamespace(http, ns)
  const created = await createCrd(
    http,
    crdManifest({ group: MANAGED_GROUP, versions: ['v1', 'v2'], storage: 'v1', plural: 'sprockets', kind: 'Sprocket' }),
  )
  await createObjects(http, refFor(created, 'v1'), [ns], SPROCKETS_OBJECTS)
  await setStorageVersion(http, SPROCKETS, 'v2')
  const path = `${CRDS}/${SPROCKETS}`
  const label = await patch(path, { metadata: { labels: { 'crd-migrator.io/managed': 'true' } } })
  t.equal(label.status, 200, 'labelled managed')
  await until(
    'the migration under way: some objects at v2',
    60_000,
    sprocketsAt,
    (c) => (c[`${MANAGED_GROUP}/v2`] ?? 0) > 0 && (c[`${MANAGED_GROUP}/v1`] ?? 0) > 0,
    { everyMs: 200 },
  )
  const leasePath = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${RELEASE}`
  const firstOwner = ownerOf(await getJson<CrdJson>(path)) ?? ''
  const before = (await migratorPods()).map((p) => p.metadata.name)
  t.ok(before.includes(firstOwner), `frozen by the leader ${firstOwner}`)

  // An admin's storage flip back to v1, every 150 ms, and the CRD in etcd read each time.
  const flipTo = (await getJson<CrdJson>(path)).spec.versions.map((v) => ({ ...v, storage: v.name === 'v1' }))
  const flips: Array<{ status: number; body: string }> = []
  const etcdSeen: Array<{ at: number; storage: string | undefined; frozen: boolean }> = []
  /** Owner and hand-off changes as the API server shows them (times since the upgrade began). */
  const owners: Array<{ at: number; owner: string | undefined; handedOff: string | undefined; frozen: boolean }> = []
  let upgradeAt = Date.now()
  let stop = false
  const flipStart = Date.now()
  let flipEnd = flipStart
  const flipper = (async () => {
    while (!stop) {
      flips.push(await patch(path, { spec: { versions: flipTo } }))
      await setTimeout(100) // the flipper's pace (an admin retrying; 100 ms plus the request), not a wait for anything
    }
    flipEnd = Date.now()
  })()
  const etcdReader = (async () => {
    while (!stop) {
      etcdSeen.push({ at: Date.now() - upgradeAt, ...(await crdInEtcd(SPROCKETS)) })
      await setTimeout(100) // sampling pace
    }
  })()
  let watching = true
  const watcher = (async () => {
    for (;;) {
      const c = await getJson<CrdJson>(path)
      const now = {
        at: Date.now() - upgradeAt,
        owner: ownerOf(c),
        handedOff: c.metadata.annotations?.['crd-migrator.io/handed-off'],
        frozen: c.metadata.annotations?.[MIGRATING] === 'true',
      }
      const last = owners[owners.length - 1]
      if (!last || last.owner !== now.owner || last.handedOff !== now.handedOff || last.frozen !== now.frozen) owners.push(now)
      if (!watching) return
      await setTimeout(100) // sampling pace
    }
  })()
  // Pods going away: when each got its deletionTimestamp and when it was gone.
  const deletions = new Map<string, { marked: number; gone?: number }>()
  let watchingPods = true
  const podWatch = (async () => {
    while (watchingPods) {
      const all = (
        await getJson<{ items: PodJson[] }>(`/api/v1/namespaces/${NS}/pods?labelSelector=app.kubernetes.io%2Finstance%3D${RELEASE}`)
      ).items
      for (const p of all)
        if (p.metadata.deletionTimestamp && !deletions.has(p.metadata.name)) deletions.set(p.metadata.name, { marked: Date.now() })
      for (const [name, d] of deletions) if (d.gone === undefined && !all.some((p) => p.metadata.name === name)) d.gone = Date.now()
      await setTimeout(200) // sampling pace
    }
  })()
  let after: PodJson[] | undefined
  let resumed: { at: number; owner: string | undefined } | undefined
  try {
    upgradeAt = Date.now()
    const up = await helmRun(['upgrade', RELEASE, CHART, '-n', NS, '--reuse-values', '--set-string', `podAnnotations.rollout=${upgradeAt}`])
    t.equal(up.code, 0, `helm upgrade: ${up.stderr}`)
    after = await until(
      'the rollout: 2 new pods Running and Ready, the old ones gone',
      150_000,
      migratorPods,
      (p) => p.length === 2 && runningReady(p).length === 2 && p.every((x) => !before.includes(x.metadata.name)),
      { everyMs: 500 },
    )
    const names = after.map((p) => p.metadata.name)
    // The run goes on under a new pod (resumed, not begun again: the freeze never left).
    resumed = await until(
      'the freeze held by a new pod',
      60_000,
      async () => ({ at: Date.now() - upgradeAt, owner: ownerOf(await getJson<CrdJson>(path)) }),
      (o) => names.includes(o.owner ?? ''),
      { everyMs: 100 },
    )
  } finally {
    stop = true
    await Promise.all([flipper, etcdReader])
    // One more sample after the flips stopped: the takeover the wait above saw is in it.
    watching = false
    await watcher
  }
  try {
    await until(
      'every old pod gone',
      60_000,
      async () => [...deletions.values()],
      (d) => d.length >= before.length && d.every((x) => x.gone !== undefined),
      { everyMs: 200 },
    )
  } finally {
    watchingPods = false
    await podWatch
  }
  const now = await getJson<CrdJson>(path)
  t.equal(now.metadata.annotations?.[MIGRATING], 'true', 'still frozen after the rollout: the run is still going')
  const mid = await sprocketsAt()
  t.ok((mid[`${MANAGED_GROUP}/v1`] ?? 0) > 0, `still mid-migration in etcd: ${JSON.stringify(mid)}`)
  const period = (flipEnd - flipStart) / Math.max(1, flips.length)
  t.ok(flips.length >= 20, `${flips.length} storage flips attempted, one every ${period.toFixed(0)} ms`)
  t.ok(period <= 250, 'at least one every 250 ms')
  t.same(
    flips.filter((f) => f.status < 300).map((f) => f.body.slice(0, 200)),
    [],
    'no storage flip landed',
  )
  t.same(
    etcdSeen.filter((e) => e.storage !== 'v2' || !e.frozen),
    [],
    `etcd held storage v2 and the freeze at each of ${etcdSeen.length} reads`,
  )
  t.same(
    owners.filter((o) => !o.frozen),
    [],
    'never unfrozen, as the API server showed it every 100 ms',
  )
  const handOff = owners.find((o) => o.handedOff !== undefined)
  t.ok(handOff, `a hand-off recorded: ${JSON.stringify(owners)}`)
  const takeover = owners.find((o) => handOff && o.at >= handOff.at && o.handedOff === undefined && o.owner !== handOff.owner)
  t.ok(takeover, 'then taken over by another pod')
  if (handOff && takeover)
    t.comment(
      `hand-off by ${handOff.owner} at ${(handOff.at / 1000).toFixed(1)}s after helm upgrade, resumed by ${takeover.owner} ` +
        `${((takeover.at - handOff.at) / 1000).toFixed(1)}s later; new pod holding it at ${((resumed?.at ?? 0) / 1000).toFixed(1)}s`,
    )
  if (handOff && takeover) t.ok(takeover.at - handOff.at < 15_000, 'resumed without waiting for the heartbeat to go stale (30 s)')
  const stops = [...deletions.entries()].map(([name, d]) => ({
    name,
    seconds: d.gone === undefined ? Infinity : (d.gone - d.marked) / 1000,
  }))
  t.comment(`pods from deletion to gone: ${stops.map((s) => `${s.name} ${s.seconds.toFixed(1)}s`).join(', ')}`)
  t.ok(
    stops.every((s) => s.seconds < 30),
    'each old pod gone well inside its 60 s grace period',
  )
  const lease = await getJson<{ spec: { holderIdentity?: string } }>(leasePath)
  t.ok(
    (after ?? []).map((p) => p.metadata.name).includes(lease.spec.holderIdentity ?? ''),
    `the Lease held by a new pod: ${lease.spec.holderIdentity}`,
  )
})

t.test(
  '--set migrator.enabled=false mid-migration lifts the release freeze before its RBAC goes; re-enabled, it migrates again',
  async (t) => {
    const path = `${CRDS}/${SPROCKETS}`
    const frozen = await getJson<CrdJson>(path)
    t.equal(frozen.metadata.annotations?.[MIGRATING], 'true', `mid-migration: frozen by ${ownerOf(frozen)}`)
    const before = (await migratorPods()).map((p) => p.metadata.name)
    // A short hold of the Lease, so the migrator turned on again below leads soon.
    const off = await helmRun([
      'upgrade',
      RELEASE,
      CHART,
      '-n',
      NS,
      '--reuse-values',
      '--set',
      'migrator.enabled=false',
      '--set',
      'liftFreezesHook.holdSeconds=10',
    ])
    t.equal(off.code, 0, `helm upgrade --set migrator.enabled=false: ${off.stderr}`)
    const lifted = await getJson<CrdJson>(path)
    t.notOk(MIGRATING in (lifted.metadata.annotations ?? {}), 'the pre-upgrade hook lifted the freeze')
    t.match(lifted.metadata.annotations?.['crd-migrator.io/last-result'] ?? '', /release was removed mid-run/, 'last-result says why')
    await until(
      'the webhook-only pods rolled out, the old ones gone',
      150_000,
      migratorPods,
      (p) => p.length === 2 && runningReady(p).length === 2 && p.every((x) => !before.includes(x.metadata.name)),
      { everyMs: 500 },
    )
    t.same(await crdInEtcd(SPROCKETS), { storage: 'v2', frozen: false }, 'etcd: no freeze after the rollout either')
    const on = await helmRun(['upgrade', RELEASE, CHART, '-n', NS, '--reuse-values', '--set', 'migrator.enabled=true'])
    t.equal(on.code, 0, `helm upgrade --set migrator.enabled=true: ${on.stderr}`)
    // The uninstall below needs a run under way again: frozen, objects still at v1.
    const again = await until(
      'the migrator back, the CRD frozen again',
      150_000,
      () => getJson<CrdJson>(path),
      (c) => c.metadata.annotations?.[MIGRATING] === 'true' && ownerOf(c) !== undefined,
      { everyMs: 500 },
    )
    t.pass(`frozen again by ${ownerOf(again)}`)
  },
)

t.test('helm uninstall mid-migration leaves no ValidatingWebhookConfiguration and no freeze annotation', async (t) => {
  const frozen = await getJson<CrdJson>(`${CRDS}/${SPROCKETS}`)
  t.equal(frozen.metadata.annotations?.[MIGRATING], 'true', `mid-migration: frozen by ${ownerOf(frozen)}`)
  const mid = await sprocketsAt()
  t.ok((mid[`${MANAGED_GROUP}/v1`] ?? 0) > 0, `objects still at v1 in etcd: ${JSON.stringify(mid)}`)
  const started = Date.now()
  const res = await helmRun(['uninstall', RELEASE, '-n', NS, '--wait', '--timeout', '2m'])
  t.equal(res.code, 0, `helm uninstall: ${res.stderr}`)
  t.comment(`helm uninstall --wait mid-migration took ${((Date.now() - started) / 1000).toFixed(1)}s`)
  const lifted = await getJson<CrdJson>(`${CRDS}/${SPROCKETS}`)
  t.notOk(MIGRATING in (lifted.metadata.annotations ?? {}), 'the freeze of the run lifted')
  t.notOk('crd-migrator.io/owner' in (lifted.metadata.annotations ?? {}), 'no owner left')
  t.match(
    lifted.metadata.annotations?.['crd-migrator.io/last-result'] ?? '',
    /^Failed: .*release was removed mid-run/,
    'last-result says why',
  )
  t.same(await crdInEtcd(SPROCKETS), { storage: 'v2', frozen: false }, 'etcd: storage v2, no freeze')
  t.same(await releaseVwcs(), [], 'no ValidatingWebhookConfiguration of the release')
  const all = await getJson<{ items: Array<{ metadata: { name: string } }> }>(VWC)
  t.same(
    all.items.map((v) => v.metadata.name).filter((n) => n.includes('crd-migrator')),
    [],
    'none named for it either',
  )
  const crds = await getJson<{ items: Array<{ metadata: { name: string; annotations?: Record<string, string> } }> }>(CRDS)
  t.same(
    crds.items.filter((c) => MIGRATING in (c.metadata.annotations ?? {})).map((c) => c.metadata.name),
    [],
    'no CRD carries the freeze annotation',
  )
  await until('the migrator pods gone', 60_000, migratorPods, (p) => p.length === 0, { everyMs: 500 })
})
