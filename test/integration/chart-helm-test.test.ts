/**
 * The chart's `helm test` hook: its script (files/helm-test.mjs) run as the hook's two Pods
 * would (the webhook part as the test's ServiceAccount, the access part as the migrator's),
 * against the real API server with the chart's RBAC and a real webhook (passes), without
 * either (fails, and says why), and as the wrong identity (refuses to vouch); and the test
 * Pods are none of the server's pods.
 * Shared setup: test/helpers/chart.ts.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import t from 'tap'
import { startTestWebhook } from '../helpers/cluster.js'
import { uniqueName } from '../helpers/controlplane.js'
import { collectionPath, cp, createNamespace, createRbacOf, isTestHook, one, scratch, template } from '../helpers/chart.js'
import { until } from '../helpers/until.js'
import { HELM_TEST_SCRIPT_FILE, scenarios, testChecksOf } from '../helpers/chart-scenarios.js'

/** Runs files/helm-test.mjs as a pod would, against the control plane: the ServiceAccount token in saDir, checks.json in checksFile, one part. */
function runHelmTestScript(
  saDir: string,
  checksFile: string,
  part: 'webhook' | 'access',
): Promise<{ code: number | null; output: string }> {
  const server = new URL(cp.apiservers[0]!.server)
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [HELM_TEST_SCRIPT_FILE], {
      env: {
        PATH: process.env['PATH'],
        KUBERNETES_SERVICE_HOST: server.hostname,
        KUBERNETES_SERVICE_PORT: server.port,
        CRD_MIGRATOR_TEST_SA_DIR: saDir,
        CRD_MIGRATOR_TEST_CHECKS: checksFile,
        CRD_MIGRATOR_TEST_PART: part,
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
    // The access Pod runs as the migrator's ServiceAccount: it must exist to have a token.
    const migratorSa = one(installed, 'ServiceAccount')
    const saPath = await collectionPath(migratorSa, ns)
    const saRes = await cp.apiRequest(saPath, { method: 'POST', body: migratorSa })
    t.equal(saRes.status, 201, "create the migrator's ServiceAccount", { body: saRes.status >= 300 ? saRes.body : undefined })
    t.teardown(async () => {
      await cp.apiRequest(`${saPath}/${migratorSa.metadata.name}`, { method: 'DELETE' })
    })
    /** A directory as a Pod of `serviceAccount` sees it: its token and the CA. */
    const tokenDir = async (serviceAccount: string) => {
      const tokenRes = await cp.apiRequest(`/api/v1/namespaces/${ns}/serviceaccounts/${serviceAccount}/token`, {
        method: 'POST',
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
      })
      t.equal(tokenRes.status, 201, `${serviceAccount}'s token`)
      const dir = await mkdtemp(join(scratch, 'sa-'))
      await writeFile(join(dir, 'token'), (tokenRes.json as { status: { token: string } }).status.token)
      await writeFile(join(dir, 'ca.crt'), cp.caPem)
      return dir
    }
    const saDir = await tokenDir(one(hooks, 'ServiceAccount').metadata.name)
    const migratorSaDir = await tokenDir(migratorSa.metadata.name)
    const checksFile = join(saDir, 'checks.json')
    await writeFile(checksFile, JSON.stringify(checks))
    const crds = { group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions' }
    // RBAC reaches the authorizer a moment after it is written.
    await until(
      "the migrator's RBAC in effect",
      60_000,
      () => can({ ...crds, verb: 'patch', name: 'x.example.com' }),
      (allowed) => allowed,
      {
        everyMs: 200,
      },
    )

    // In order, each on the state the one before left: the subtests are awaited.
    const webhookLine = /^(ok {2}|FAIL) {2}the API server called webhook storage-freeze\.crd-migrator\.io.*$/m
    await t.test('no webhook configured: the forged annotation gets through, and the test says so', async (t) => {
      const run = await runHelmTestScript(saDir, checksFile, 'webhook')
      t.equal(run.code, 1, 'exit 1', { output: run.output })
      t.match(run.output, webhookLine)
      t.match(
        run.output,
        /FAIL {2}the API server called webhook[^\n]*\n {6}the dry run was ALLOWED/,
        'the webhook check failed: not sent to a webhook',
      )
      t.match(run.output, /crd-migrator helm test \(webhook\): 1 of 1 checks FAILED/)
    })

    const hook = await startTestWebhook(cp, scope, { migratorUsers: [checks.subject.user] })
    await t.test('the webhook answers and the RBAC is right: every check passes', async (t) => {
      const run = await runHelmTestScript(saDir, checksFile, 'webhook')
      t.equal(run.code, 0, 'exit 0', { output: run.output })
      t.comment(`helm-test.mjs (webhook) said:\n${run.output}`)
      t.match(
        run.output,
        /^ok {4}the API server called webhook [^\n]*\n {6}admission webhook "storage-freeze\.crd-migrator\.io" denied the request/m,
      )
      t.match(run.output, /crd-migrator\.io\/helm-test/, "the webhook's message names the forged annotation")
      t.match(run.output, /crd-migrator helm test \(webhook\): all 1 checks passed/)
      const access = await runHelmTestScript(migratorSaDir, checksFile, 'access')
      t.equal(access.code, 0, 'exit 0', { output: access.output })
      t.comment(`helm-test.mjs (access) said:\n${access.output}`)
      t.match(access.output, new RegExp(`^ok {4}running as ${checks.subject.user}, the migrator's ServiceAccount$`, 'm'))
      t.match(access.output, new RegExp(`crd-migrator helm test \\(access\\): all ${checks.access.length + 1} checks passed`))
      t.notMatch(run.output + access.output, /FAIL/)
    })

    await t.test('the access part as another identity: it says so and vouches for nothing', async (t) => {
      const run = await runHelmTestScript(saDir, checksFile, 'access')
      t.equal(run.code, 1, 'exit 1', { output: run.output })
      t.match(run.output, /^FAIL {2}running as \S+, the migrator's ServiceAccount\n {6}this Pod runs as system:serviceaccount:\S+-test$/m)
      t.match(run.output, /crd-migrator helm test \(access\): 1 of 1 checks FAILED/, 'no access check answered for someone else')
    })

    await t.test("the migrator's ClusterRoleBinding gone: its permissions fail, the webhook check still passes", async (t) => {
      const fullname = one(installed, 'Deployment').metadata.name
      const res = await cp.apiRequest(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${fullname}`, { method: 'DELETE' })
      t.equal(res.status, 200, 'deleted')
      await until(
        "the migrator's ClusterRole out of effect",
        60_000,
        () => can({ ...crds, verb: 'patch', name: 'x.example.com' }),
        (allowed) => !allowed,
        { everyMs: 200 },
      )
      const webhookRun = await runHelmTestScript(saDir, checksFile, 'webhook')
      t.equal(webhookRun.code, 0, 'the webhook part: exit 0', { output: webhookRun.output })
      t.match(webhookRun.output, /^ok {4}the API server called webhook/m)
      const run = await runHelmTestScript(migratorSaDir, checksFile, 'access')
      t.equal(run.code, 1, 'the access part: exit 1', { output: run.output })
      t.match(
        run.output,
        /^FAIL {2}\S+ can patch customresourcedefinitions\.apiextensions\.k8s\.io any\.example\.com \(the freeze and its progress\)\n {6}it CANNOT/m,
      )
      t.match(run.output, /^ok {4}\S+ can create leases\.coordination\.k8s\.io in /m, 'the namespaced Roles still hold')
    })

    await t.test('the webhook down: the API server cannot reach it, and the test says so', async (t) => {
      await hook.stopServer()
      const run = await runHelmTestScript(saDir, checksFile, 'webhook')
      t.equal(run.code, 1, 'exit 1', { output: run.output })
      t.match(
        run.output,
        /^FAIL {2}the API server called webhook[^\n]*\n {6}the API server could not reach the webhook[^\n]*failed calling webhook/m,
      )
    })
  },
)

t.test("the test Pods are none of the server's pods: not in the PodDisruptionBudget, not behind the Service's ports", async (t) => {
  const rendered = await template('sel', 'sel-ns', { tests: { enabled: true } })
  const testPods = rendered.filter(isTestHook).filter((m) => m.kind === 'Pod')
  t.equal(testPods.length, 2, 'the webhook Pod and the access Pod')
  const pdb = one(rendered, 'PodDisruptionBudget')['spec'] as {
    selector: { matchLabels: Record<string, string>; matchExpressions: Array<{ key: string; operator: string; values: string[] }> }
  }
  const matches = (l: Record<string, string>) =>
    Object.entries(pdb.selector.matchLabels).every(([k, v]) => l[k] === v) &&
    pdb.selector.matchExpressions.every((e) => e.operator === 'NotIn' && !e.values.includes(l[e.key] ?? ''))
  for (const testPod of testPods)
    t.notOk(matches(testPod.metadata.labels!), `the PodDisruptionBudget does not count ${testPod.metadata.name}`)
  const serverPod = (one(rendered, 'Deployment')['spec'] as { template: { metadata: { labels: Record<string, string> } } }).template
    .metadata.labels
  t.ok(matches(serverPod), 'it counts the server pods')
  t.ok(
    matches({ 'app.kubernetes.io/name': 'crd-migrator', 'app.kubernetes.io/instance': 'sel' }),
    'and pods of a release from before the component label',
  )
  // The Service targets named ports the test Pod does not have: it gets no traffic.
  const ports = (one(rendered, 'Service')['spec'] as { ports: Array<{ targetPort: string }> }).ports.map((p) => p.targetPort)
  for (const testPod of testPods) {
    const testPorts = ((testPod['spec'] as { containers: Array<{ ports?: Array<{ name: string }> }> }).containers[0]!.ports ?? []).map(
      (p) => p.name,
    )
    t.same(
      ports.filter((p) => testPorts.includes(p)),
      [],
      `no port of the Service is a port of ${testPod.metadata.name}`,
    )
  }
})
