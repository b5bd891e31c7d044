/**
 * The kubeconfig honoured like kubectl, against the real API server: --context, exec
 * credential plugins (run again at expiry and on 401), client certificates rotated on
 * disk, tls-server-name, proxy-url, and the in-cluster token file re-read. Who the API
 * server took us for is its own answer, a SelfSubjectReview.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { stringify } from 'yaml'
import { loadKubeConfig } from '../../src/kube/client.js'
import { KubeHttp, type KubeHttpOptions } from '../../src/kube/http.js'
import { CrdMigratorError } from '../../src/errors.js'
import { createNamespace, httpFor } from '../helpers/cluster.js'
import { startConnectProxy } from '../helpers/connect-proxy.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { EXEC_V1, writeExecPlugin } from '../helpers/exec-plugin.js'
import { startTcpForward } from '../helpers/tcp-forward.js'
import { until } from '../helpers/until.js'

const run = promisify(execFile)

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-kubeconfig-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

interface ContextSpec {
  name: string
  cluster: Record<string, unknown>
  user: Record<string, unknown>
}

/** Writes a kubeconfig with these contexts (each with its own cluster and user), the first one current. */
async function writeKubeconfig(file: string, contexts: ContextSpec[], currentContext = contexts[0]!.name): Promise<string> {
  await writeFile(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: contexts.map((c) => ({ name: c.name, cluster: c.cluster })),
      users: contexts.map((c) => ({ name: c.name, user: c.user })),
      contexts: contexts.map((c) => ({ name: c.name, context: { cluster: c.name, user: c.name } })),
      'current-context': currentContext,
    }),
  )
  return file
}

const b64 = (s: string) => Buffer.from(s).toString('base64')

function client(file: string, options: KubeHttpOptions = {}, context?: string): KubeHttp {
  const http = new KubeHttp(loadKubeConfig(file, { context }), options)
  t.teardown(() => http.close())
  return http
}

/** Who the API server takes this client for. */
async function whoAmI(http: KubeHttp): Promise<string> {
  const res = await http.request<{ status: { userInfo: { username: string } } }>({
    method: 'POST',
    path: '/apis/authentication.k8s.io/v1/selfsubjectreviews',
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
  })
  return res.body.status.userInfo.username
}

async function serviceAccountToken(admin: KubeHttp, namespace: string, name: string): Promise<string> {
  await admin.request({
    method: 'POST',
    path: `/api/v1/namespaces/${namespace}/serviceaccounts`,
    body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } },
  })
  const res = await admin.request<{ status: { token: string } }>({
    method: 'POST',
    path: `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
  })
  return res.body.status.token
}

t.test('--context picks a context other than current-context; an unknown one names those there are', async (t) => {
  const cp = await getControlPlane()
  const user = await cp.mintUser(uniqueName('ctx'), ['system:masters'])
  const dir = await tempDir()
  const file = await writeKubeconfig(path.join(dir, 'config'), [
    // current-context: nothing listens there
    { name: 'broken', cluster: { server: 'https://127.0.0.1:1', 'certificate-authority-data': b64(cp.caPem) }, user: { token: 'x' } },
    {
      name: 'good',
      cluster: { server: cp.server, 'certificate-authority-data': b64(cp.caPem) },
      user: { 'client-certificate-data': b64(user.certPem), 'client-key-data': b64(user.keyPem) },
    },
  ])
  t.equal(await whoAmI(client(file, {}, 'good')), user.name, 'the API server sees the user of context "good"')
  t.throws(() => loadKubeConfig(file, { context: 'nope' }), {
    code: 'CRDM_KUBECONFIG',
    message: /context "nope" \(--context\) is not in the kubeconfig .*; it has "broken", "good"/,
  })

  const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    run(process.execPath, ['dist/cli/main.js', 'status', '--kubeconfig', file, '-o', 'json', ...args], {
      cwd: process.cwd(),
      env: { ...process.env, ...env },
    })
  const byFlag = await cli(['--context', 'good'])
  t.ok(Array.isArray(JSON.parse(byFlag.stdout)), '`status --context good` answers')
  const byEnv = await cli([], { CRD_MIGRATOR_CONTEXT: 'good' })
  t.ok(Array.isArray(JSON.parse(byEnv.stdout)), 'CRD_MIGRATOR_CONTEXT=good does the same')
  const refused = await cli(['--context', 'nope']).then(
    () => undefined,
    (err: { code?: number; stderr?: string }) => err,
  )
  t.equal(refused?.code, 2, 'an unknown context exits 2, as any configuration error')
  t.match(refused?.stderr, /CRDM_KUBECONFIG: context "nope" \(--context\) is not in the kubeconfig .*"broken", "good"/)
})

t.test('exec plugin: run again after a 401 and at expirationTimestamp, not before', async (t) => {
  const cp = await getControlPlane()
  const admin = httpFor(cp.kubeconfigPath)
  const ns = uniqueName('exec')
  await createNamespace(admin, ns)
  const [alpha, beta] = await Promise.all([serviceAccountToken(admin, ns, 'alpha'), serviceAccountToken(admin, ns, 'beta')])
  // alpha may watch ConfigMaps in its namespace (the watch below). A Role of our own: the
  // aggregated ClusterRole `view` stays empty without kube-controller-manager.
  const rbac = `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}`
  await admin.request({
    method: 'POST',
    path: `${rbac}/roles`,
    body: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: 'configmap-reader' },
      rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }],
    },
  })
  await admin.request({
    method: 'POST',
    path: `${rbac}/rolebindings`,
    body: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: 'alpha-reads-configmaps' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'configmap-reader' },
      subjects: [{ kind: 'ServiceAccount', name: 'alpha', namespace: ns }],
    },
  })
  const cluster = { server: cp.server, 'certificate-authority-data': b64(cp.caPem) }
  const execUser = { exec: { apiVersion: EXEC_V1, command: './plugin.sh', interactiveMode: 'Never', provideClusterInfo: true } }

  await t.test('a token the API server refuses (401): the plugin runs again and the request is sent again', async (t) => {
    const plugin = await writeExecPlugin()
    await plugin.respondTo(1, { token: 'not-a-token' })
    await plugin.respond({ token: alpha })
    // The command is relative to the kubeconfig's directory, as kubectl resolves it.
    const http = client(await writeKubeconfig(path.join(plugin.dir, 'config'), [{ name: 'exec', cluster, user: execUser }]))
    t.equal(await whoAmI(http), `system:serviceaccount:${ns}:alpha`, 'the second credential got through')
    t.equal(await plugin.runs(), 2, 'two runs: the refused token, then the good one')
    for (let i = 0; i < 3; i++) t.equal(await whoAmI(http), `system:serviceaccount:${ns}:alpha`)
    t.equal(await plugin.runs(), 2, 'a credential without expirationTimestamp is kept until refused')
    const info = (await plugin.execInfo(1)) as { apiVersion: string; spec: { interactive: boolean; cluster?: Record<string, unknown> } }
    t.equal(info.apiVersion, EXEC_V1)
    t.equal(info.spec.interactive, false, 'never interactive')
    t.equal(info.spec.cluster?.['server'], cp.server, 'provideClusterInfo: the server')
    t.equal(info.spec.cluster?.['certificate-authority-data'], b64(cp.caPem), 'and the CA')
  })

  await t.test('a watch refused with 401 opens again with the next credential', async (t) => {
    const plugin = await writeExecPlugin()
    await plugin.respondTo(1, { token: 'not-a-token' })
    await plugin.respond({ token: alpha })
    const http = client(await writeKubeconfig(path.join(plugin.dir, 'config'), [{ name: 'exec', cluster, user: execUser }]))
    await admin.request({
      method: 'POST',
      path: `/api/v1/namespaces/${ns}/configmaps`,
      body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'seen-by-the-watch' } },
    })
    const events: { type?: string; object?: { metadata?: { name?: string } } }[] = []
    await http.stream({ method: 'GET', path: `/api/v1/namespaces/${ns}/configmaps`, query: { watch: 1, timeoutSeconds: 1 } }, (e) =>
      events.push(e as (typeof events)[number]),
    )
    t.equal(await plugin.runs(), 2, 'the plugin ran again after the 401')
    t.ok(
      events.some((e) => e.type === 'ADDED' && e.object?.metadata?.name === 'seen-by-the-watch'),
      'the watch, opened again, delivered the ConfigMap',
    )
  })

  await t.test('an expired credential: the plugin runs again', async (t) => {
    const plugin = await writeExecPlugin()
    const expiresAt = Date.now() + 2_000
    await plugin.respondTo(1, { token: alpha, expirationTimestamp: new Date(expiresAt).toISOString() })
    await plugin.respond({ token: beta })
    const http = client(await writeKubeconfig(path.join(plugin.dir, 'config'), [{ name: 'exec', cluster, user: execUser }]))
    t.equal(await whoAmI(http), `system:serviceaccount:${ns}:alpha`)
    t.equal(await plugin.runs(), 1)
    await until(
      'the first credential to expire',
      30_000,
      async () => Date.now(),
      (now) => now > expiresAt,
    )
    t.equal(await whoAmI(http), `system:serviceaccount:${ns}:beta`, 'the next request carries the new credential')
    t.equal(await plugin.runs(), 2, 'one more run')
  })
})

t.test('client-certificate files rotated on disk: the new certificate is used', async (t) => {
  const cp = await getControlPlane()
  const [a, b] = await Promise.all([cp.mintUser(uniqueName('rot-a')), cp.mintUser(uniqueName('rot-b'))])
  const dir = await tempDir()
  await writeFile(path.join(dir, 'ca.crt'), cp.caPem)
  await writeFile(path.join(dir, 'client.crt'), a.certPem)
  await writeFile(path.join(dir, 'client.key'), a.keyPem)
  const file = await writeKubeconfig(path.join(dir, 'config'), [
    // Relative paths: resolved against the kubeconfig's directory.
    {
      name: 'rot',
      cluster: { server: cp.server, 'certificate-authority': 'ca.crt' },
      user: { 'client-certificate': 'client.crt', 'client-key': 'client.key' },
    },
  ])
  const http = client(file, { credentialRefreshMs: 100 })
  t.equal(await whoAmI(http), a.name)

  // As the kubelet does: each file replaced atomically, one after the other (between the
  // two renames the files do not make a pair; the client must keep the old one meanwhile).
  const replace = async (name: string, content: string) => {
    await writeFile(path.join(dir, `${name}.tmp`), content)
    await rename(path.join(dir, `${name}.tmp`), path.join(dir, name))
  }
  await replace('client.key', b.keyPem)
  await replace('client.crt', b.certPem)
  const seen: string[] = []
  await until(
    `the API server to see ${b.name}`,
    60_000,
    async () => {
      const user = await whoAmI(http)
      seen.push(user)
      return user
    },
    (user) => user === b.name,
  )
  t.ok(
    seen.every((u) => u === a.name || u === b.name),
    'every request during the rotation was answered, as one of the two',
  )
  t.equal(await whoAmI(http), b.name, 'and it stays the new one')
})

t.test('tls-server-name: the API server reached at an address its certificate does not cover', async (t) => {
  const cp = await getControlPlane()
  const server = new URL(cp.server)
  t.equal(server.hostname, '127.0.0.1', 'the shared control plane listens on 127.0.0.1')
  // The serving certificate covers localhost, kubernetes.default(.svc), 127.0.0.1 and ::1; not 127.0.0.2.
  const forward = await startTcpForward('127.0.0.2', { host: server.hostname, port: Number(server.port) })
  const user = await cp.mintUser(uniqueName('sni'))
  const dir = await tempDir()
  const userData = { 'client-certificate-data': b64(user.certPem), 'client-key-data': b64(user.keyPem) }
  const cluster = { server: `https://127.0.0.2:${forward.port}`, 'certificate-authority-data': b64(cp.caPem) }
  const file = await writeKubeconfig(path.join(dir, 'config'), [
    { name: 'plain', cluster, user: userData },
    { name: 'named', cluster: { ...cluster, 'tls-server-name': 'kubernetes.default' }, user: userData },
    { name: 'misnamed', cluster: { ...cluster, 'tls-server-name': 'not-covered.example.com' }, user: userData },
  ])
  const refused = await whoAmI(client(file, {}, 'plain')).then(
    () => undefined,
    (err: unknown) => err,
  )
  t.type(refused, CrdMigratorError, 'a coded error, not a bare TLS one')
  t.match(refused, {
    code: 'CRDM_TLS',
    message:
      /TLS: the certificate of the API server at 127\.0\.0\.2:\d+ does not cover "127\.0\.0\.2" .*set tls-server-name of cluster "plain"/,
  })
  t.equal(await whoAmI(client(file, {}, 'named')), user.name, 'with tls-server-name: kubernetes.default it connects')
  await t.rejects(whoAmI(client(file, {}, 'misnamed')), {
    code: 'CRDM_TLS',
    message: /does not cover "not-covered\.example\.com".*fix tls-server-name/,
  })
})

/**
 * An API server named kubernetes.default, a name only a test proxy resolves, and a
 * kubeconfig with two contexts for it: `proxied` (proxy-url set) and `direct` (none).
 */
async function behindProxy(userPrefix: string) {
  const cp = await getControlPlane()
  const server = new URL(cp.server)
  const proxy = await startConnectProxy({ 'kubernetes.default': server.hostname })
  const user = await cp.mintUser(uniqueName(userPrefix), ['system:masters'])
  const dir = await tempDir()
  const cluster = { server: `https://kubernetes.default:${server.port}`, 'certificate-authority-data': b64(cp.caPem) }
  const userData = { 'client-certificate-data': b64(user.certPem), 'client-key-data': b64(user.keyPem) }
  const file = await writeKubeconfig(path.join(dir, 'config'), [
    { name: 'proxied', cluster: { ...cluster, 'proxy-url': proxy.url }, user: userData },
    { name: 'direct', cluster, user: userData },
  ])
  return { cp, server, proxy, user, file }
}

t.test('proxy-url: requests and watches go through the proxy (the server name resolves only there)', async (t) => {
  const { server, proxy, user, file } = await behindProxy('proxy')
  const http = client(file, {}, 'proxied')
  for (let i = 0; i < 3; i++) t.equal(await whoAmI(http), user.name)
  const afterRequests = proxy.tunnels.length
  t.ok(afterRequests >= 1, `the requests went through ${afterRequests} tunnel(s)`)
  await http.stream({ method: 'GET', path: '/api/v1/namespaces/default/configmaps', query: { watch: 1, timeoutSeconds: 1 } }, () => {})
  t.ok(proxy.tunnels.length > afterRequests, 'the watch through one more (streams have their own pool)')
  t.same(new Set(proxy.tunnels), new Set([`kubernetes.default:${server.port}`]), 'every tunnel to the kubeconfig server')
  // Here the name does not resolve (ENOTFOUND); inside a pod it might, to another API server, whose certificate we refuse.
  await t.rejects(whoAmI(client(file, {}, 'direct')), 'without the proxy the same kubeconfig does not work')
})

t.test('HTTPS_PROXY and NO_PROXY: used as client-go does when the kubeconfig names no proxy-url', async (t) => {
  const { cp, server, proxy, user, file } = await behindProxy('envproxy')

  const viaEnv = client(file, { environment: { HTTPS_PROXY: proxy.url, NO_PROXY: 'example.com,10.96.0.0/12' } }, 'direct')
  t.equal(await whoAmI(viaEnv), user.name, 'HTTPS_PROXY carries the requests')
  t.same(new Set(proxy.tunnels), new Set([`kubernetes.default:${server.port}`]), 'through the proxy, to the kubeconfig server')

  const tunnels = proxy.tunnels.length
  const bypassed = client(file, { environment: { HTTPS_PROXY: proxy.url, NO_PROXY: '.example.com,default' } }, 'direct')
  await t.rejects(whoAmI(bypassed), 'NO_PROXY covering the server: direct, where the name does not resolve')
  t.equal(proxy.tunnels.length, tunnels, 'and no tunnel was opened')

  const kubeconfigWins = client(file, { environment: { HTTPS_PROXY: 'http://127.0.0.1:9', NO_PROXY: '*' } }, 'proxied')
  t.equal(await whoAmI(kubeconfigWins), user.name, "proxy-url wins over the environment's proxy and NO_PROXY")
  t.ok(proxy.tunnels.length > tunnels, 'through the kubeconfig proxy')

  const loopback = new KubeHttp(loadKubeConfig(cp.kubeconfigPath), { environment: { HTTPS_PROXY: 'http://127.0.0.1:9' } })
  t.teardown(() => loopback.close())
  t.ok(await whoAmI(loopback), 'a loopback API server is never proxied (the proxy in HTTPS_PROXY does not listen)')

  t.throws(() => client(file, { environment: { HTTPS_PROXY: 'socks5://127.0.0.1:1080' } }, 'direct'), {
    code: 'CRDM_KUBECONFIG',
    message: /HTTPS_PROXY "socks5:\/\/127\.0\.0\.1:1080": only http:\/\/ and https:\/\/ proxies are supported/,
  })
})

t.test('in-cluster: the service-account token file is read again when it rotates, and at once on 401', async (t) => {
  const cp = await getControlPlane()
  const admin = httpFor(cp.kubeconfigPath)
  const ns = uniqueName('incluster')
  await createNamespace(admin, ns)
  const [first, second, third] = await Promise.all(['first', 'second', 'third'].map((n) => serviceAccountToken(admin, ns, n)))
  const saDir = await tempDir()
  const home = await tempDir()
  await writeFile(path.join(saDir, 'ca.crt'), cp.caPem)
  await writeFile(path.join(saDir, 'token'), first!)
  await writeFile(path.join(saDir, 'namespace'), ns)
  const server = new URL(cp.server)
  const load = () =>
    loadKubeConfig(undefined, {
      env: { KUBERNETES_SERVICE_HOST: server.hostname, KUBERNETES_SERVICE_PORT: server.port },
      homeDir: home,
      serviceAccountDir: saDir,
    })
  t.equal(load().namespace, ns, 'the namespace file is read')
  const swap = async (token: string) => {
    await writeFile(path.join(saDir, 'token.tmp'), token)
    await rename(path.join(saDir, 'token.tmp'), path.join(saDir, 'token'))
  }

  const rereading = new KubeHttp(load(), { credentialRefreshMs: 100 })
  t.teardown(() => rereading.close())
  t.equal(await whoAmI(rereading), `system:serviceaccount:${ns}:first`)
  await swap(second!)
  await until(
    'the rotated token to be used',
    60_000,
    () => whoAmI(rereading),
    (u) => u === `system:serviceaccount:${ns}:second`,
  )
  t.pass('a rotated token file is read again')

  // Re-read only on 401 here: the token's ServiceAccount goes away, the next request is refused.
  const onRefusal = new KubeHttp(load(), { credentialRefreshMs: 3_600_000 })
  t.teardown(() => onRefusal.close())
  t.equal(await whoAmI(onRefusal), `system:serviceaccount:${ns}:second`)
  await swap(third!)
  await admin.request({ method: 'DELETE', path: `/api/v1/namespaces/${ns}/serviceaccounts/second` })
  await until(
    'the 401 to make the client read the new token',
    60_000,
    () => whoAmI(onRefusal),
    (u) => u === `system:serviceaccount:${ns}:third`,
  )
  t.pass('a refused token is read again at once')
})
