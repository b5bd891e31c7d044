/**
 * `serve --no-migrator` (the chart's migrator.enabled=false, which mounts no ServiceAccount
 * token and binds no RBAC) must not need the API server at all: no kubeconfig is loaded and
 * no client is created, and the CLI serves the webhook in an environment without any
 * kubeconfig, in-cluster credentials or ~/.kube/config.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import https from 'node:https'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { configFromOptions } from '../../src/cli/command-kit.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { spawnServe } from '../helpers/serve-process.js'

const root = fileURLToPath(new URL('../../', import.meta.url))
const scratch = await mkdtemp(join(tmpdir(), 'crd-migrator-serve-webhook-only-'))
t.teardown(() => rm(scratch, { recursive: true, force: true }))
const certs = await generateDevCertificates(join(scratch, 'certs'))

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

/** A storage flip on a frozen CRD, as the API server would send it. */
function review() {
  const crd = (storage: string) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } },
    spec: { group: 'example.com', versions: ['v1', 'v2'].map((name) => ({ name, served: true, storage: name === storage })) },
  })
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: '0a0b0c0d-0000-4000-8000-000000000001',
      kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      name: 'widgets.example.com',
      operation: 'UPDATE',
      userInfo: { username: 'alice', groups: ['system:authenticated'] },
      oldObject: crd('v1'),
      object: crd('v2'),
    },
  }
}

function postReview(port: number): Promise<{ status: number; body: { response?: { allowed?: boolean } } }> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        port,
        path: '/validate-crd',
        method: 'POST',
        ca: certs.caCertPem,
        servername: 'localhost',
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8').on('data', (d: string) => (text += d))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }))
      },
    )
    req.on('error', reject)
    req.end(JSON.stringify(review()))
  })
}

function httpsGet(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    https
      .get({ host: '127.0.0.1', port, path, ca: certs.caCertPem, servername: 'localhost' }, (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      })
      .on('error', reject)
  })
}

t.test('serve() with the migrator off never loads a kubeconfig nor creates a client', async (t) => {
  const calls: string[] = []
  const refuse =
    (what: string) =>
    (..._args: unknown[]) => {
      calls.push(what)
      throw new Error(`${what} called`)
    }
  const { serve } = await t.mockImport<typeof import('../../src/cli/serve/run-serve.js')>('../../src/cli/serve/run-serve.js', {
    '../../src/kube/client.js': { kubeHttp: refuse('kubeHttp'), loadKubeConfig: refuse('loadKubeConfig') },
  })
  const metricsPort = await freePort()
  // What `serve --no-migrator` builds; leader election stays on, as the chart renders it.
  const config = configFromOptions(
    {
      migrator: false,
      tlsCert: certs.certFile,
      tlsKey: certs.keyFile,
      webhookHost: '127.0.0.1',
      webhookPort: '0',
      metricsPort: String(metricsPort),
    },
    {},
  )
  t.equal(config.migrator.enabled, false)
  t.equal(config.leaderElection.enabled, true)
  config.webhook.timeouts.requestSeconds = 7 // a file-only setting: it reaches the server
  const handle = await serve(config, capturingLogger().logger, { defaultMetrics: false })
  t.teardown(() => handle.close())
  t.equal(handle.webhook!.app.server.requestTimeout, 7000, 'webhook.timeouts reach the HTTPS server')
  t.equal(handle.webhook!.app.server.keepAliveTimeout, 95_000, 'the others keep their defaults')
  t.same(
    handle.webhook!.connectionCaps,
    { maxConnections: 1000, maxPerPeer: 100, reserved: 0 },
    'webhook.maxConnections and maxConnectionsPerPeer reach the HTTPS server (nothing reserved without apiServerAddresses)',
  )
  const answer = await postReview(handle.webhook!.port)
  t.equal(answer.status, 200)
  t.equal(answer.body.response?.allowed, false, 'the webhook decides (a frozen storage flip is refused)')
  const ready = await fetch(`http://127.0.0.1:${metricsPort}/readyz`)
  t.equal(ready.status, 200, 'ready')
  t.same(
    await ready.json(),
    {
      status: 'ready',
      failing: [],
      checks: {
        'webhook-certificate': 'ok',
        'webhook-open': 'ok',
        'webhook-connections': 'ok',
        'not-shutting-down': 'ok',
        'listener-open': 'ok',
      },
    },
    "one readiness: the webhook's checks, serve's and the ops listener's",
  )
  t.equal((await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).status, 200, 'alive')
  t.match(
    await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text(),
    /crd_migrator_admission_reviews_total\{operation="UPDATE",decision="denied"\} 1/,
    "the webhook's metrics on the ops listener",
  )
  for (const path of ['/metrics', '/healthz', '/readyz']) {
    t.equal(await httpsGet(handle.webhook!.port, path), 404, `the webhook port does not serve ${path}`)
  }
  await handle.close()
  await handle.stopped
  t.same(handle.readiness().failing, ['webhook-open', 'not-shutting-down'], 'not ready once closed')
  t.same(calls, [], 'no kubeconfig loaded, no client created')

  // The same mock does refuse when the migrator is on: the check above has teeth.
  const withMigrator = configFromOptions({ webhook: false, metricsPort: '0' }, {})
  await t.rejects(serve(withMigrator, capturingLogger().logger, { defaultMetrics: false }), /kubeHttp called/)
  t.same(calls, ['kubeHttp'])
})

t.test('the CLI: serve --no-migrator runs without any kubeconfig', async (t) => {
  const home = await mkdtemp(join(scratch, 'home-'))
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: home }
  // Nothing to find: no $KUBECONFIG, no ~/.kube/config, no in-cluster service host or token.
  for (const key of Object.keys(env)) {
    if (key === 'KUBECONFIG' || key.startsWith('KUBERNETES_') || key.startsWith('CRD_MIGRATOR_') || key === 'POD_NAMESPACE') delete env[key]
  }
  const [webhookPort, metricsPort] = [await freePort(), await freePort()]
  // The TypeScript source through tap's own loader (process.execArgv), not a possibly stale dist/.
  const serve = spawnServe(
    t,
    [
      ...process.execArgv,
      join(root, 'src', 'cli', 'main.ts'),
      'serve',
      '--no-migrator',
      '--tls-cert',
      certs.certFile,
      '--tls-key',
      certs.keyFile,
      '--webhook-host',
      '127.0.0.1',
      '--webhook-port',
      String(webhookPort),
      '--metrics-port',
      String(metricsPort),
    ],
    { cwd: root, env, metricsPort },
  )
  const { child, exited } = serve
  const ready = await serve.waitReady(600)
  t.ok(ready, 'GET /readyz answers 200', { output: serve.output() })
  const answer = await postReview(webhookPort)
  t.equal(answer.body.response?.allowed, false, 'the webhook answers reviews')
  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
  t.match(metrics, /crd_migrator_webhook_/, 'webhook metrics')
  t.notMatch(metrics, /crd_migrator_objects_total/, 'no migrator metrics: the controller never started')
  child.kill('SIGTERM')
  const [code, signal] = await exited
  t.equal(code, 0, 'exits 0 on SIGTERM', { signal, output: serve.output() })
  t.notMatch(
    serve.output(),
    /kubeconfig|no Kubernetes cluster|ECONNREFUSED|"level":[56]0/,
    'no kubeconfig lookup, no connection attempt, no error logged',
    { output: serve.output() },
  )
})
