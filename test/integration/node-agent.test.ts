/**
 * The node agent (dev/agent/): pods that really run, without a container runtime. In a
 * network namespace of its own (helpers/network-namespace.ts): a control plane whose API
 * server reaches webhooks through Service endpoints (--enable-aggregator-routing=true), a
 * kube-controller-manager with the workload controllers (dev/agent/controllers.ts), and the
 * agent. A Deployment of 2 replicas of the project's image runs a tiny HTTP server (the
 * image's Node, `node -e`) with a Secret, a ConfigMap, a projected token, an emptyDir, the
 * downward API and a non-root user; a Service selects it. Then: Running and Ready with
 * distinct pod IPs, the EndpointSlice lists them, the API server reaches the pods (pods and
 * services proxy), the in-cluster credentials work from inside, a failing readiness probe
 * makes a pod unready, a killed process restarts (restartCount 1), so does one failing its
 * liveness probe, the projected token is refreshed, a deleted pod ends on SIGTERM, an unknown
 * image says why, and the product's own `serve` (the image's ENTRYPOINT and CMD) answers the
 * API server as an admission webhook configured with a service reference.
 */
import { networkNamespace } from '../helpers/network-namespace.js'
import { execFileSync } from 'node:child_process'
import t from 'tap'
import { startControlPlane, type ControlPlane } from '../../dev/controlplane/controlplane.js'
import { createCa, issueServingCert } from '../../dev/controlplane/pki.js'
import { NodeAgent } from '../../dev/agent/agent.js'
import { startWorkloadControllers, type WorkloadControllers } from '../../dev/agent/controllers.js'
import { renderWebhookConfiguration, type WebhookConfigurationOptions } from '../../src/webhook/configuration.js'
import { untilGranted } from '../helpers/rbac.js'
import { until } from '../helpers/until.js'

const t0 = Date.now()
const NS = 'agent-test'
const logs: string[] = []
const log = (m: string): void => void logs.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${m}`)

t.setTimeout(10 * 60 * 1000)
const cp: ControlPlane = await startControlPlane({ extraApiserverFlags: { 'enable-aggregator-routing': 'true' } })
const kcm: WorkloadControllers = await startWorkloadControllers(cp)
const agent = await NodeAgent.start({
  kubeconfig: cp.kubeconfigPath,
  backoff: { initialMs: 1000, maxMs: 5000 },
  // 600 s tokens refreshed after 12 s: the refresh is seen within the test.
  tokenRefreshFraction: 0.02,
  volumeResyncMs: 5000,
  log,
})
t.teardown(async () => {
  await agent.stop()
  await kcm.stop()
  await cp.stop()
})
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '30') * 1000 * 6)
t.comment(`network namespace ${networkNamespace}; control plane, controllers and agent up in ${Date.now() - t0}ms`)

const api = async (
  path: string,
  opts: { method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'; body?: unknown; contentType?: string } = {},
) => {
  const res = await cp.apiRequest(path, { timeoutMs: 15_000, ...opts })
  return res
}
const mustApi = async (path: string, body: unknown, method: 'POST' | 'PUT' = 'POST'): Promise<unknown> => {
  const res = await api(path, { method, body })
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${res.body.slice(0, 400)}`)
  return res.json
}

/** The pod's server: /healthz, /readyz (503 while /tmp/unready exists), /unready, /ready, /info, /whoami. */
const SERVER = `
const http = require('node:http'), https = require('node:https'), fs = require('node:fs'), os = require('node:os')
const read = (f) => { try { return fs.readFileSync(f, 'utf8') } catch (e) { return 'ERR ' + e.code } }
let sick = false
const claims = (f) => { try { return JSON.parse(Buffer.from(read(f).split('.')[1], 'base64url').toString()) } catch { return null } }
http.createServer((req, res) => {
  const json = (code, body) => { res.writeHead(code, { 'content-type': 'application/json' }); res.end(JSON.stringify(body)) }
  if (req.url === '/healthz') return json(sick ? 500 : 200, { sick })
  if (req.url === '/sick') { sick = true; return json(200, {}) }
  if (req.url === '/readyz') return json(fs.existsSync('/tmp/unready') ? 503 : 200, {})
  if (req.url === '/unready') { fs.writeFileSync('/tmp/unready', ''); return json(200, {}) }
  if (req.url === '/ready') { fs.rmSync('/tmp/unready', { force: true }); return json(200, {}) }
  if (req.url === '/info') {
    const sa = '/var/run/secrets/kubernetes.io/serviceaccount/'
    let rootWritable = true
    try { fs.writeFileSync('/probe-write', '') } catch { rootWritable = false }
    return json(200, {
      pid: process.pid, uid: process.getuid(), gid: process.getgid(), groups: process.getgroups(), hostname: os.hostname(), cwd: process.cwd(),
      env: process.env, rootWritable,
      greetingFile: read('/etc/web/secret/greeting'), modeFile: read('/etc/web/config/mode'),
      projected: claims('/var/run/secrets/tokens/api-token'), saToken: claims(sa + 'token'),
      saNamespace: read(sa + 'namespace'), caPresent: read(sa + 'ca.crt').startsWith('-----BEGIN CERTIFICATE'),
      interfaces: Object.values(os.networkInterfaces()).flat().map((i) => i.address),
    })
  }
  if (req.url === '/whoami') {
    const sa = '/var/run/secrets/kubernetes.io/serviceaccount/'
    const r = https.request({
      host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT, method: 'POST',
      path: '/apis/authentication.k8s.io/v1/selfsubjectreviews', ca: read(sa + 'ca.crt'),
      headers: { authorization: 'Bearer ' + read(sa + 'token'), 'content-type': 'application/json' },
    }, (r2) => { let b = ''; r2.on('data', (d) => b += d); r2.on('end', () => json(r2.statusCode, JSON.parse(b))) })
    r.on('error', (e) => json(502, { error: e.message }))
    return r.end(JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }))
  }
  json(404, {})
}).listen(8080, () => console.log('listening on 8080'))
process.on('SIGTERM', () => { console.log('SIGTERM'); process.exit(0) })
`

interface PodJson {
  metadata: { name: string; uid: string; deletionTimestamp?: string }
  spec: { nodeName?: string }
  status: {
    phase?: string
    podIP?: string
    hostIP?: string
    conditions?: Array<{ type: string; status: string }>
    containerStatuses?: Array<{ ready: boolean; restartCount: number; state: Record<string, unknown>; lastState: Record<string, any> }>
  }
}
const ready = (p: PodJson): boolean => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false
const listPods = async (app: string): Promise<PodJson[]> =>
  ((await api(`/api/v1/namespaces/${NS}/pods?labelSelector=app%3D${app}`)).json as { items: PodJson[] }).items.filter(
    (p) => !p.metadata.deletionTimestamp,
  )
const podProxy = async (pod: string, path: string, port = 8080): Promise<any> => {
  const res = await api(`/api/v1/namespaces/${NS}/pods/${pod}:${port}/proxy${path}`)
  if (res.status < 200 || res.status >= 300) throw new Error(`pods/proxy ${pod}${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
  return res.json
}

await mustApi('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } })
await mustApi(`/api/v1/namespaces/${NS}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'web' } })
await mustApi(`/api/v1/namespaces/${NS}/secrets`, {
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name: 'web-secret' },
  stringData: { greeting: 'hello from a Secret' },
})
await mustApi(`/api/v1/namespaces/${NS}/configmaps`, {
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: 'web-config' },
  data: { mode: 'test-mode' },
})
await mustApi(`/apis/apps/v1/namespaces/${NS}/deployments`, {
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'web' },
  spec: {
    replicas: 2,
    selector: { matchLabels: { app: 'web' } },
    template: {
      metadata: { labels: { app: 'web' } },
      spec: {
        serviceAccountName: 'web',
        terminationGracePeriodSeconds: 5,
        securityContext: { runAsNonRoot: true, runAsUser: 1234, runAsGroup: 2345, fsGroup: 3456 },
        containers: [
          {
            name: 'web',
            image: 'crd-migrator:0.1.0',
            command: ['/nodejs/bin/node', '-e', SERVER],
            ports: [{ name: 'http', containerPort: 8080 }],
            env: [
              { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
              { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
              { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
              { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
              { name: 'GREETING', valueFrom: { secretKeyRef: { name: 'web-secret', key: 'greeting' } } },
              { name: 'MODE', valueFrom: { configMapKeyRef: { name: 'web-config', key: 'mode' } } },
              { name: 'WHERE', value: '$(POD_NAME)@$(NODE_NAME)' },
            ],
            startupProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1, failureThreshold: 30 },
            readinessProbe: { httpGet: { path: '/readyz', port: 'http' }, periodSeconds: 1, failureThreshold: 1 },
            livenessProbe: { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 2, failureThreshold: 3 },
            securityContext: { readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
            volumeMounts: [
              { name: 'secret', mountPath: '/etc/web/secret' },
              { name: 'config', mountPath: '/etc/web/config' },
              { name: 'tokens', mountPath: '/var/run/secrets/tokens' },
              { name: 'tmp', mountPath: '/tmp' },
            ],
          },
        ],
        volumes: [
          { name: 'secret', secret: { secretName: 'web-secret' } },
          { name: 'config', configMap: { name: 'web-config' } },
          {
            name: 'tokens',
            projected: { sources: [{ serviceAccountToken: { path: 'api-token', audience: 'test-audience', expirationSeconds: 600 } }] },
          },
          { name: 'tmp', emptyDir: {} },
        ],
      },
    },
  },
})
await mustApi(`/api/v1/namespaces/${NS}/services`, {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web' },
  spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
})

t.test('a Deployment of 2 replicas runs on the agent: Running, Ready, distinct pod IPs', async (t) => {
  const pods = await until(
    '2 web pods Running and Ready',
    60_000,
    () => listPods('web'),
    (ps) => ps.length === 2 && ps.every((p) => p.status.phase === 'Running' && ready(p)),
    { everyMs: 500 },
  ).catch(async (err: unknown) => {
    t.comment(logs.join('\n'))
    for (const p of await listPods('web')) t.comment(`${p.metadata.name}: ${agent.logs(NS, p.metadata.name, 'web')}`)
    throw err
  })
  const ips = pods.map((p) => p.status.podIP)
  t.equal(new Set(ips).size, 2, `distinct pod IPs ${ips.join(', ')}`)
  for (const p of pods) {
    t.equal(p.spec.nodeName, agent.nodeName, 'bound to the agent node')
    t.match(p.status.podIP, /^10\.244\.0\.\d+$/, 'in the pod range')
    t.equal(p.status.hostIP, agent.network.gateway, 'hostIP is the node InternalIP')
    t.equal(p.status.containerStatuses?.[0]?.restartCount, 0)
  }
  const node = (await api(`/api/v1/nodes/${agent.nodeName}`)).json as any
  t.equal(node.status.conditions.find((c: any) => c.type === 'Ready')?.status, 'True', 'Node Ready')
  t.same(node.status.addresses.find((a: any) => a.type === 'InternalIP')?.address, agent.network.gateway, 'InternalIP')
  t.comment(`after ${Date.now() - t0}ms`)
})

t.test('the EndpointSlice of the Service lists both pod IPs, ready', async (t) => {
  const pods = await listPods('web')
  const want = pods.map((p) => p.status.podIP).sort()
  const slices = await until(
    'the web EndpointSlice with both pods',
    30_000,
    async () =>
      (
        (await api(`/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb`))
          .json as any
      ).items,
    (items: any[]) =>
      JSON.stringify(
        items.flatMap((s) => (s.endpoints ?? []).filter((e: any) => e.conditions?.ready).flatMap((e: any) => e.addresses)).sort(),
      ) === JSON.stringify(want),
    { everyMs: 500 },
  )
  t.equal(slices[0].ports[0].port, 8080, 'target port 8080')
})

t.test('the API server reaches the pods: pods/proxy and services/proxy; what runs inside', async (t) => {
  const pods = await listPods('web')
  const pod = pods[0]!
  const info = await podProxy(pod.metadata.name, '/info')
  t.equal(info.uid, 1234, 'runAsUser')
  t.equal(info.gid, 2345, 'runAsGroup')
  t.ok(info.groups.includes(3456), 'fsGroup as a supplementary group')
  t.equal(info.hostname, pod.metadata.name, 'hostname is the pod name')
  t.equal(info.cwd, '/app', 'WORKDIR /app')
  t.equal(info.rootWritable, false, 'readOnlyRootFilesystem')
  t.ok(info.interfaces.includes(pod.status.podIP), 'the pod IP is on its own interface')
  t.match(
    info.env,
    {
      POD_NAME: pod.metadata.name,
      POD_NAMESPACE: NS,
      POD_IP: pod.status.podIP,
      NODE_NAME: agent.nodeName,
      GREETING: 'hello from a Secret',
      MODE: 'test-mode',
      WHERE: `${pod.metadata.name}@${agent.nodeName}`,
      NODE_ENV: 'production',
      KUBERNETES_SERVICE_HOST: agent.apiForPods.host,
      KUBERNETES_SERVICE_PORT: String(agent.apiForPods.port),
    },
    'env: downward API, secretKeyRef, configMapKeyRef, $(VAR), image ENV, the kubernetes Service',
  )
  t.equal(info.greetingFile, 'hello from a Secret', 'Secret volume')
  t.equal(info.modeFile, 'test-mode', 'ConfigMap volume')
  t.match(info.projected, { aud: ['test-audience'], sub: `system:serviceaccount:${NS}:web` }, 'projected token with its audience')
  t.equal(info.projected.exp - info.projected.iat, 600, 'and its expirationSeconds')
  t.equal(info.projected['kubernetes.io'].pod.name, pod.metadata.name, 'bound to the pod')
  t.equal(info.saNamespace, NS, 'in-cluster namespace file')
  t.ok(info.caPresent, 'in-cluster ca.crt')

  const whoami = await podProxy(pod.metadata.name, '/whoami')
  t.equal(whoami.status.userInfo.username, `system:serviceaccount:${NS}:web`, 'the in-cluster credentials authenticate from inside the pod')
  t.same(whoami.status.userInfo.extra['authentication.kubernetes.io/pod-name'], [pod.metadata.name], 'as this pod')

  // services/proxy: the API server picks an endpoint of the Service.
  const viaService = await api(`/api/v1/namespaces/${NS}/services/http:web:http/proxy/info`)
  t.equal(viaService.status, 200, 'services/proxy answers')
  t.ok(
    pods.some((p) => p.status.podIP === (viaService.json as any).env.POD_IP),
    'from one of the pods',
  )
})

t.test('a failing readiness probe makes the pod unready; it is ready again when the probe passes', async (t) => {
  const [pod] = await listPods('web')
  const name = pod!.metadata.name
  await podProxy(name, '/unready')
  const unready = await until(
    'the pod unready',
    20_000,
    () => api(`/api/v1/namespaces/${NS}/pods/${name}`).then((r) => r.json as PodJson),
    (p) => !ready(p),
  )
  t.equal(unready.status.containerStatuses?.[0]?.ready, false, 'container not ready')
  t.equal(unready.status.phase, 'Running', 'still Running')
  t.equal(unready.status.containerStatuses?.[0]?.restartCount, 0, 'not restarted')
  await until(
    'the EndpointSlice to mark it not ready',
    20_000,
    async () =>
      (
        (await api(`/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dweb`))
          .json as any
      ).items,
    (items: any[]) =>
      items.some((s) => (s.endpoints ?? []).some((e: any) => e.addresses.includes(pod!.status.podIP) && e.conditions?.ready === false)),
    { everyMs: 500 },
  )
  await podProxy(name, '/ready')
  await until('the pod ready again', 20_000, () => api(`/api/v1/namespaces/${NS}/pods/${name}`).then((r) => r.json as PodJson), ready)
  t.pass('ready again')
})

t.test('a killed container process is restarted: restartCount 1, lastState terminated by SIGKILL', async (t) => {
  const [, pod] = await listPods('web')
  const name = pod!.metadata.name
  const info = await podProxy(name, '/info')
  process.kill(info.pid, 'SIGKILL')
  const after = await until(
    'restartCount 1 and ready',
    30_000,
    () => api(`/api/v1/namespaces/${NS}/pods/${name}`).then((r) => r.json as PodJson),
    (p) => p.status.containerStatuses?.[0]?.restartCount === 1 && ready(p),
  )
  const cs = after.status.containerStatuses![0]!
  t.match(cs.lastState, { terminated: { exitCode: 137, signal: 9, reason: 'Error' } }, 'lastState: killed')
  t.ok(cs.state.running, 'running again')
  const again = await podProxy(name, '/info')
  t.not(again.pid, info.pid, 'a new process')
  t.equal(again.env.POD_IP, pod!.status.podIP, 'same pod IP')
})

t.test('the projected token is requested again before it expires, and the file changes in place', async (t) => {
  const [pod] = await listPods('web')
  const first = (await podProxy(pod!.metadata.name, '/info')).projected
  const later = await until(
    'a new projected token',
    40_000,
    async () => (await podProxy(pod!.metadata.name, '/info')).projected,
    (p: any) => p?.iat > first.iat,
    { everyMs: 1000 },
  )
  t.equal(later.exp - later.iat, 600, 'same expirationSeconds')
  t.same(later.aud, ['test-audience'], 'same audience')
})

t.test('a failing liveness probe restarts the container (SIGTERM, a new process)', async (t) => {
  const [pod] = await listPods('web')
  const name = pod!.metadata.name
  const before = (await api(`/api/v1/namespaces/${NS}/pods/${name}`)).json as PodJson
  const restarts = before.status.containerStatuses![0]!.restartCount
  const info = await podProxy(name, '/info')
  await podProxy(name, '/sick')
  const after = await until(
    'a restart after 3 failed liveness probes, and ready again',
    40_000,
    () => api(`/api/v1/namespaces/${NS}/pods/${name}`).then((r) => r.json as PodJson),
    (p) => p.status.containerStatuses?.[0]?.restartCount === restarts + 1 && ready(p),
    { everyMs: 500 },
  )
  t.match(
    after.status.containerStatuses![0]!.lastState,
    { terminated: { exitCode: 0, reason: 'Completed' } },
    'stopped with SIGTERM (it exits 0 on it)',
  )
  const again = await podProxy(name, '/info')
  t.not(again.pid, info.pid, 'a new process')
  t.equal((await podProxy(name, '/healthz')).sick, false, 'healthy again')
})

t.test("the product's serve (the image's ENTRYPOINT and CMD) answers the API server as a webhook behind a Service", async (t) => {
  const ca = await createCa('node-agent-test-webhook-ca')
  const serving = await issueServingCert(ca, { dnsNames: [`crd-migrator.${NS}.svc`], ips: [] })
  await mustApi(`/api/v1/namespaces/${NS}/secrets`, {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'crd-migrator-tls' },
    type: 'kubernetes.io/tls',
    stringData: { 'tls.crt': serving.certPem, 'tls.key': serving.keyPem },
  })
  // As the chart renders it with migrator.enabled=false (webhook only): no args, so CMD `serve`.
  await mustApi(`/apis/apps/v1/namespaces/${NS}/deployments`, {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'crd-migrator' },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app: 'crd-migrator' } },
      template: {
        metadata: { labels: { app: 'crd-migrator' } },
        spec: {
          automountServiceAccountToken: false,
          terminationGracePeriodSeconds: 5,
          securityContext: { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532 },
          containers: [
            {
              name: 'crd-migrator',
              image: 'registry.example/crd-migrator:0.1.0',
              env: [
                { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
                { name: 'CRD_MIGRATOR_MIGRATOR_ENABLED', value: 'false' },
                { name: 'CRD_MIGRATOR_TLS_CERT', value: '/tls/tls.crt' },
                { name: 'CRD_MIGRATOR_TLS_KEY', value: '/tls/tls.key' },
              ],
              ports: [
                { name: 'webhook', containerPort: 9443 },
                { name: 'metrics', containerPort: 8080 },
              ],
              livenessProbe: { httpGet: { path: '/healthz', port: 'metrics' }, periodSeconds: 10, timeoutSeconds: 3, failureThreshold: 3 },
              readinessProbe: { httpGet: { path: '/readyz', port: 'metrics' }, periodSeconds: 1, timeoutSeconds: 3, failureThreshold: 3 },
              securityContext: { readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
              volumeMounts: [
                { name: 'tls', mountPath: '/tls', readOnly: true },
                { name: 'tmp', mountPath: '/tmp' },
              ],
            },
          ],
          volumes: [
            { name: 'tls', secret: { secretName: 'crd-migrator-tls' } },
            { name: 'tmp', emptyDir: {} },
          ],
        },
      },
    },
  })
  await mustApi(`/api/v1/namespaces/${NS}/services`, {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'crd-migrator' },
    spec: { selector: { app: 'crd-migrator' }, ports: [{ name: 'https', port: 443, targetPort: 'webhook' }] },
  })
  const [pod] = await until(
    'the crd-migrator pod Ready',
    60_000,
    () => listPods('crd-migrator'),
    (ps) => ps.length === 1 && ready(ps[0]!),
    {
      everyMs: 500,
    },
  ).catch(async (err: unknown) => {
    for (const p of await listPods('crd-migrator')) t.comment(`${p.metadata.name}: ${agent.logs(NS, p.metadata.name, 'crd-migrator')}`)
    throw err
  })
  await until(
    'its EndpointSlice',
    20_000,
    async () =>
      (
        (await api(`/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dcrd-migrator`))
          .json as any
      ).items,
    (items: any[]) =>
      items.some((s) => (s.endpoints ?? []).some((e: any) => e.addresses.includes(pod!.status.podIP) && e.conditions?.ready)),
    { everyMs: 500 },
  )
  await mustApi(
    '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
    renderWebhookConfiguration({
      mode: 'service',
      caBundlePem: ca.certPem,
      service: { namespace: NS, name: 'crd-migrator', port: 443 } as unknown as WebhookConfigurationOptions['service'],
    }),
  )
  t.teardown(() =>
    api('/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/crd-migrator.crd-migrator.io', { method: 'DELETE' }),
  )
  // alice may create and delete CRDs, but RBAC does not give her `freeze` (cluster-admin would: issue 43, item 3).
  const alice = await cp.mintUser('alice')
  await mustApi('/apis/rbac.authorization.k8s.io/v1/clusterroles', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: 'alice-crd-editor' },
    rules: [
      {
        apiGroups: ['apiextensions.k8s.io'],
        resources: ['customresourcedefinitions'],
        verbs: ['get', 'list', 'create', 'update', 'patch', 'delete'],
      },
    ],
  })
  await mustApi('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'alice-crd-editor' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'alice-crd-editor' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'alice' }],
  })
  await untilGranted(
    cp,
    { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['create'] },
    {
      kind: 'User',
      name: 'alice',
    },
  )
  const crd = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'gadgets.agent.example.com', annotations: { 'ksvm.sigs.k8s.io/migrating': 'true' } },
    spec: {
      group: 'agent.example.com',
      names: { plural: 'gadgets', singular: 'gadget', kind: 'Gadget' },
      scope: 'Namespaced',
      versions: [
        {
          name: 'v1',
          served: true,
          storage: true,
          schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
        },
      ],
    },
  }
  // The webhook configuration takes effect a moment after it is created: retry until denied.
  const denied = await until(
    'the webhook in the pod to deny alice a frozen CRD',
    30_000,
    () =>
      cp.apiRequest('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', {
        method: 'POST',
        body: crd,
        as: alice,
        timeoutMs: 15_000,
      }),
    (r) =>
      r.status !== 201 ||
      (void api(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`, { method: 'DELETE' }), false),
    { everyMs: 1000 },
  )
  t.equal(denied.status, 403, 'denied')
  const message = (JSON.parse(denied.body) as { message: string }).message
  t.match(
    message,
    /^admission webhook "storage-freeze\.crd-migrator\.io" denied the request: .*user "alice" may not set it/,
    'by the webhook in the pod',
  )
})

t.test('a deleted pod is stopped with SIGTERM and removed; its ReplicaSet replaces it', async (t) => {
  const [pod] = await listPods('web')
  const name = pod!.metadata.name
  const info = await podProxy(name, '/info')
  const deletedAt = Date.now()
  // 30 s of grace: a process that ignored SIGTERM would hold the pod that long.
  await api(`/api/v1/namespaces/${NS}/pods/${name}`, {
    method: 'DELETE',
    body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 30 },
  })
  await until(
    'the pod gone from the API',
    30_000,
    () => api(`/api/v1/namespaces/${NS}/pods/${name}`),
    (r) => r.status === 404,
  )
  t.ok(Date.now() - deletedAt < 20_000, `gone in ${Date.now() - deletedAt}ms: the process ended on SIGTERM, well within the grace period`)
  t.throws(() => process.kill(info.pid, 0), 'its process is gone')
  t.match(agent.logs(NS, name, 'web'), /no pod/, 'the agent forgot it')
  const pods = await until(
    '2 web pods Ready again',
    60_000,
    () => listPods('web'),
    (ps) => ps.length === 2 && ps.every(ready),
    { everyMs: 500 },
  )
  t.notOk(
    pods.some((p) => p.metadata.name === name),
    'a new pod in its place',
  )
  const podNamespaces = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.startsWith(`crdm-${process.pid}-p`))
  t.equal(podNamespaces.length, agent.pods().length, 'one network namespace per running pod: the deleted one is gone')
})

t.test('an image the agent cannot run: ErrImagePull with the reason', async (t) => {
  await mustApi(`/api/v1/namespaces/${NS}/pods`, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'nginx', labels: { app: 'nginx' } },
    spec: { containers: [{ name: 'nginx', image: 'nginx:1.29' }] },
  })
  const [pod] = await until(
    'the nginx pod to say why it does not run',
    20_000,
    () => listPods('nginx'),
    (ps) => ps[0]?.status.containerStatuses?.[0]?.state.waiting !== undefined,
  )
  t.match(pod!.status.containerStatuses![0]!.state, { waiting: { reason: 'ErrImagePull', message: /not one the node agent can run/ } })
  t.match(pod!.status, { phase: 'Pending', reason: 'UnsupportedImage' })
  t.comment(`all done after ${Date.now() - t0}ms`)
})
