/**
 * kubectl's flags against the real API server (issue #36, item 3): `version` with the
 * server's version (and without a server), `migrate --dry-run=server` (every rewrite sent
 * with dryRun=All: etcd unchanged, no freeze, storedVersions untouched), `-l` selecting
 * CRDs for migrate and status (and refused beside names), --as impersonation judged by
 * RBAC, -v 6 request lines, and --request-timeout cutting a request that does not end.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { getCrd } from '../../src/kube/crds.js'
import { KubeHttp } from '../../src/kube/http.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import {
  createCrd,
  createNamespace,
  createObjects,
  crdManifest,
  httpFor,
  refFor,
  setStorageVersion,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { getControlPlane, kubeConfigFromFile, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { runProcess } from '../helpers/run-process.js'

const COUNT = 20
const MIGRATING = 'ksvm.sigs.k8s.io/migrating'

const cp = await getControlPlane()
const http = httpFor(cp.kubeconfigPath)
t.teardown(() => http.close())

function cli(args: string[], kubeconfig = cp.kubeconfigPath) {
  return runProcess(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', kubeconfig])
}

/** A CRD whose COUNT objects are stored at v1 while v2 is the storage version: a migration to do. */
async function crdToMigrate(prefix: string, labels: Record<string, string> = {}): Promise<CustomResourceDefinition> {
  const group = uniqueGroup(prefix)
  const ns = uniqueName(prefix)
  await createNamespace(http, ns)
  const crd = await createCrd(http, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1', labels }))
  await createObjects(http, refFor(crd, 'v1'), [ns], COUNT)
  return setStorageVersion(http, crd.metadata.name, 'v2')
}

const etcdVersions = async (crd: CustomResourceDefinition) =>
  Object.fromEntries(await storedVersionsInEtcd(cp, crd.spec.group, crd.spec.names.plural))

t.test('version: the client and the API server', async (t) => {
  const r = await cli(['version', '-o', 'json'])
  t.equal(r.code, 0, 'exit 0', { stderr: r.stderr })
  const data = JSON.parse(r.stdout) as { clientVersion: { version: string }; serverVersion: { gitVersion: string } }
  t.match(data.clientVersion.version, /^\d+\.\d+\.\d+/)
  t.match(data.serverVersion.gitVersion, /^v1\.\d+\.\d+/, "the API server's own answer")
  const text = await cli(['version'])
  t.match(text.stdout, /^Client Version: .+\nServer Version: v1\.\d+/)
  const client = await cli(['version', '--client'], '/nonexistent')
  t.equal(client.code, 0, '--client asks no server (the kubeconfig is not even read)')
  t.match(client.stdout, /^Client Version: /)
  t.notMatch(client.stdout, /Server Version/)
})

t.test('version: an unreachable server prints the client version, then a coded error, exit 1', async (t) => {
  const file = join(t.testdir(), 'unreachable.kubeconfig')
  writeFileSync(file, readFileSync(cp.kubeconfigPath, 'utf8').replace(/server: https:\/\/[^\s]+/, 'server: https://127.0.0.1:1'))
  const r = await cli(['version', '--connect-attempts', '1'], file)
  t.equal(r.code, 1, 'exit 1')
  t.match(r.stdout, /^Client Version: /)
  t.match(r.stderr, /cannot get the API server's version: CRDM_UNREACHABLE/)
})

t.test('migrate --dry-run=server: the API server checks every rewrite, nothing is persisted', async (t) => {
  const crd = await crdToMigrate('dry-server')
  const before = await etcdVersions(crd)
  t.same(before, { [`${crd.spec.group}/v1`]: COUNT }, 'stored at v1 to begin with')
  const r = await cli(['migrate', crd.metadata.name, '--dry-run=server', '-o', 'json'])
  t.equal(r.code, 0, 'exit 0', { stderr: r.stderr })
  const [report] = JSON.parse(r.stdout) as Array<{
    dryRun: string
    storageVersionMigration: { objects: number; accepted: number; failed: number }
  }>
  t.equal(report?.dryRun, 'server')
  t.same(report?.storageVersionMigration && { ...report.storageVersionMigration, failures: undefined }, {
    objects: COUNT,
    accepted: COUNT,
    skipped: 0,
    failed: 0,
    failures: undefined,
  })
  t.same(await etcdVersions(crd), before, 'etcd: every object still at v1')
  const after = await getCrd(http, crd.metadata.name)
  t.same(after.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
  t.equal(after.metadata.annotations?.[MIGRATING], undefined, 'no freeze set')
  const text = await cli(['migrate', crd.metadata.name, '--dry-run=server'])
  t.match(text.stdout, new RegExp(`StorageVersionMigration: ${COUNT} of ${COUNT} object\\(s\\) would be written, 0 refused`))
  const spaced = await cli(['migrate', crd.metadata.name, '--dry-run', 'server'])
  t.match(spaced.stdout, /server dry run/, '--dry-run server: the strategy, not a CRD name')
  const bare = await cli(['migrate', '--dry-run', crd.metadata.name])
  t.equal(bare.code, 0, { stderr: bare.stderr })
  t.match(bare.stdout, /dry run \(nothing written\)/, 'bare --dry-run is client, and the name after it is a CRD')
  t.same(await etcdVersions(crd), before, 'still nothing persisted')
  const bad = await cli(['migrate', crd.metadata.name, '--dry-run=later'])
  t.equal(bad.code, 2, 'an unknown strategy is a usage error')
  t.match(bad.stderr, /--dry-run=none, --dry-run=client or --dry-run=server/)
})

t.test('-l: migrate what the selector matches; status shows it as data; not beside names', async (t) => {
  const label = uniqueName('sel')
  const a = await crdToMigrate('sel-a', { 'test.crd-migrator.io/batch': label })
  const b = await crdToMigrate('sel-b', { 'test.crd-migrator.io/batch': label })
  const other = await crdToMigrate('sel-other')
  const selector = `test.crd-migrator.io/batch=${label}`
  const refused = await cli(['migrate', a.metadata.name, '-l', selector])
  t.equal(refused.code, 2, 'names and -l: usage error')
  t.match(refused.stderr, /not both/)
  const r = await cli(['migrate', '-l', selector, '-o', 'name'])
  t.equal(r.code, 0, 'exit 0', { stderr: r.stderr })
  t.same(
    r.stdout.trim().split('\n').sort(),
    [a, b].map((c) => `customresourcedefinition.apiextensions.k8s.io/${c.metadata.name}`).sort(),
    'kubectl -o name, the two selected',
  )
  for (const crd of [a, b]) t.same(await etcdVersions(crd), { [`${crd.spec.group}/v2`]: COUNT }, `${crd.metadata.name}: migrated in etcd`)
  t.same(await etcdVersions(other), { [`${other.spec.group}/v1`]: COUNT }, 'the CRD not selected is untouched')
  const status = await cli(['status', '-l', selector, '-o', 'yaml'])
  t.equal(status.code, 0, { stderr: status.stderr })
  const rows = parse(status.stdout) as Array<Record<string, unknown>>
  t.same(
    rows.map((row) => row['name']),
    [a, b].map((c) => c.metadata.name).sort(),
  )
  t.same(rows[0]?.['storedVersions'], ['v2'], 'storedVersions as a list')
  t.notOk(Object.values(rows[0] ?? {}).includes('-'), 'nothing spelt "-"')
  const none = await cli(['migrate', '-l', `test.crd-migrator.io/batch=${label}-none`])
  t.equal(none.code, 0)
  t.match(none.stderr, /no CRDs match -l/)
  const conflicting = await cli(['status', '-o', 'yaml', '--json'])
  t.equal(conflicting.code, 2, '-o yaml with --json: refused')
})

t.test('--as: RBAC judges the impersonated user', async (t) => {
  const crd = await crdToMigrate('as')
  const reader = uniqueName('reader')
  const impersonator = uniqueName('impersonator')
  await grantClusterRole(
    cp,
    `${reader}-read`,
    [
      { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [crd.spec.group], resources: ['*'], verbs: ['get', 'list'] },
    ],
    [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: reader }],
  )
  await grantClusterRole(
    cp,
    `${impersonator}-impersonate`,
    [{ apiGroups: [''], resources: ['users'], verbs: ['impersonate'], resourceNames: [reader, `${reader}-nobody`] }],
    [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: impersonator }],
  )
  const user = await cp.mintUser(impersonator, [])
  const alone = await cli(['status', crd.metadata.name], user.kubeconfigPath)
  t.equal(alone.code, 1, 'the impersonator alone may not read CRDs')
  t.match(alone.stderr, /CRDM_FORBIDDEN/)
  const status = await cli(['status', crd.metadata.name, '--as', reader], user.kubeconfigPath)
  t.equal(status.code, 0, 'status as the reader works', { stderr: status.stderr })
  t.match(status.stdout, crd.metadata.name)
  const migrate = await cli(['migrate', crd.metadata.name, '--as', reader], user.kubeconfigPath)
  t.equal(migrate.code, 1, 'migrate as the reader is refused')
  t.match(migrate.stdout + migrate.stderr, /CRDM_FORBIDDEN/)
  t.same(await etcdVersions(crd), { [`${crd.spec.group}/v1`]: COUNT }, 'nothing migrated')
  t.equal((await getCrd(http, crd.metadata.name)).metadata.annotations?.[MIGRATING], undefined, 'no freeze left')
  const other = await cli(['status', crd.metadata.name, '--as', 'someone-else'], user.kubeconfigPath)
  t.equal(other.code, 1, 'a user it may not impersonate')
  t.match(other.stderr, /CRDM_FORBIDDEN.*may not impersonate "someone-else"/, 'says the impersonation was refused, not the request')
  const nobody = await cli(['status', crd.metadata.name, '--as', `${reader}-nobody`], user.kubeconfigPath)
  t.equal(nobody.code, 1, 'a user it may impersonate, whom RBAC grants nothing')
  t.match(
    nobody.stderr,
    new RegExp(`CRDM_FORBIDDEN.*"${reader}-nobody" \\(impersonated by user "${impersonator}"`),
    'the refusal names the impersonated user',
  )
  const groupsOnly = await cli(['status', '--as-group', 'g'], user.kubeconfigPath)
  t.equal(groupsOnly.code, 2, '--as-group without --as: usage error')
})

t.test('-v 6: a line per request; --request-timeout: a coded error for a request that does not end', async (t) => {
  const crd = await crdToMigrate('verbose')
  const r = await cli(['status', crd.metadata.name, '-v', '6', '--log-format', 'json'])
  t.equal(r.code, 0, { stderr: r.stderr })
  const requests = r.stderr
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { msg: string; method?: string; path?: string; status?: number })
    .filter((l) => l.msg === 'request')
  t.ok(
    requests.some((l) => l.method === 'GET' && l.path?.endsWith(`/customresourcedefinitions/${crd.metadata.name}`) && l.status === 200),
    'the GET of the CRD, with its status',
  )
  const quiet = await cli(['status', crd.metadata.name])
  t.notMatch(quiet.stderr, /"request"/, 'not without -v')
  t.equal((await cli(['status', crd.metadata.name, '--request-timeout', '30s'])).code, 0, 'a timeout that is not reached')
  t.equal((await cli(['status', crd.metadata.name, '--request-timeout', '5x'])).code, 2, 'a bad duration: usage error')

  // A watch sent as a plain request never ends by itself: only the deadline stops it.
  const limited = new KubeHttp(kubeConfigFromFile(cp.kubeconfigPath), { requestTimeoutMs: 500 })
  t.teardown(() => limited.close())
  await t.rejects(limited.request({ method: 'GET', path: '/api/v1/namespaces', query: { watch: true } }), {
    code: 'CRDM_REQUEST_TIMEOUT',
    message: /within 500ms \(--request-timeout\)/,
  })
  t.ok((await limited.request({ method: 'GET', path: '/version' })).status === 200, 'a request that answers in time')
})

t.test(
  'words and codes agree (issue 46, item 8): a bad selector is CRDM_LABEL_SELECTOR and exit 2 everywhere; a CRD that does not exist is CRDM_RESOURCE_NOT_FOUND, never started',
  async (t) => {
    for (const command of ['status', 'migrate', 'plan', 'check']) {
      const r = await cli([command, '-l', 'a=(b', ...(command === 'check' ? ['--drop', 'v1'] : [])])
      t.equal(r.code, 2, `${command} -l 'a=(b': exit 2, a usage error`, { stderr: r.stderr })
      t.match(r.stderr, /CRDM_LABEL_SELECTOR: invalid label selector "a=\(b"/, `${command}: the selector's code, not the API server's 400`)
    }
    const dry = await cli(['migrate', 'nothere.example.com', '--dry-run'])
    t.equal(dry.code, 1)
    t.match(
      dry.stdout,
      /nothere\.example\.com: cannot plan: CRDM_RESOURCE_NOT_FOUND: customresourcedefinition "nothere\.example\.com" not found/,
    )
    const real = await cli(['migrate', 'nothere.example.com', '--progress-every', '5'])
    t.equal(real.code, 1)
    t.notMatch(real.stderr, /started/, 'a CRD that does not exist never says started')
    t.match(real.stderr, /nothere\.example\.com: failed \(CRDM_RESOURCE_NOT_FOUND\)/)
  },
)
