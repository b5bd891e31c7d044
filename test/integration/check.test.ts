/**
 * `crd-migrator check --drop VERSION` (issue #29, item 3) on the real API server: "no"
 * with the right reason for a version still in storedVersions (the objects proven to be
 * at it in etcd), for managedFields entries at it, for stashed copies at it, and for a
 * served deprecated version clients ask for; "yes" once the real migration ran (etcd read
 * again); exit codes and -o json; --manifests with a file that drops a version; `plan`.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pino } from 'pino'
import t from 'tap'
import { stringify } from 'yaml'
import { runCheckCommand, EXIT_NOT_SAFE, type CheckReport } from '../../src/cli/check/run-check.js'
import { runPlanCommand } from '../../src/cli/plan/run-plan.js'
import type { PlanReport } from '../../src/cli/plan/plan-format.js'
import { loadConfig } from '../../src/config/load.js'
import type { Config } from '../../src/config/schema.js'
import type { CheckName, DropVerdict } from '../../src/check/drop-verdict.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { crdPath, collectionPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import {
  createCrd,
  createNamespace,
  createObjects,
  crdManifest,
  defaultSettings,
  httpFor,
  refFor,
  setStorageVersion,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { runProcess } from '../helpers/run-process.js'
import { collector } from '../helpers/collector.js'

const logger = pino({ level: 'silent' })
const COUNT = 30

async function check(
  config: Config,
  options: { names?: string[]; drop?: string; manifests?: string[]; strict?: boolean },
): Promise<{ code: number; report: CheckReport }> {
  const out = collector()
  const code = await runCheckCommand(config, out.stream, { format: 'json', names: options.names ?? [], ...options })
  return { code, report: JSON.parse(out.text()) as CheckReport }
}

const statusOf = (v: DropVerdict | undefined, check: CheckName) => v?.reasons.find((r) => r.check === check)?.status
const blocking = (v: DropVerdict | undefined) => (v?.reasons ?? []).filter((r) => r.status === 'blocks').map((r) => r.check)

/** A CRD with `versions`, stored at `storage`, `count` objects created through `through` (their managedFields name it). */
async function crdAt(
  http: KubeHttp,
  prefix: string,
  o: { versions: string[]; storage: string; through: string; count: number },
): Promise<{ crd: CustomResourceDefinition; ns: string; group: string }> {
  const group = uniqueGroup(prefix)
  const ns = uniqueName(prefix)
  await createNamespace(http, ns)
  const crd = await createCrd(http, crdManifest({ group, versions: o.versions, storage: o.storage }))
  await createObjects(http, refFor(crd, o.through), [ns], o.count)
  return { crd, ns, group }
}

/** Sets served/deprecated of `version` (a merge patch of spec.versions as a whole). */
async function setVersion(http: KubeHttp, name: string, version: string, change: { served?: boolean; deprecated?: boolean }) {
  const crd = await getCrd(http, name)
  const versions = crd.spec.versions.map((v) => (v.name === version ? { ...v, ...change } : v))
  await http.request({ method: 'PATCH', path: crdPath(name), contentType: ContentType.mergePatch, body: { spec: { versions } } })
}

t.test('storedVersions: no while objects are stored at v1; yes after the migration', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const config = loadConfig({ flags: { kubeconfig: cp.kubeconfigPath } })
  // Created through v2 while v1 is the storage version: stored at v1, managedFields at v2.
  const { crd, group } = await crdAt(http, 'check-stored', { versions: ['v1', 'v2'], storage: 'v1', through: 'v2', count: COUNT })
  await setStorageVersion(http, crd.metadata.name, 'v2', ['v1'])
  t.strictSame(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v1`]: COUNT }, 'etcd: every object at v1')

  const before = await check(config, { names: [crd.metadata.name], drop: 'v1' })
  t.equal(before.code, EXIT_NOT_SAFE, 'exit code 3: not safe')
  t.equal(before.report.safe, false)
  const verdict = before.report.results[0]
  t.strictSame(blocking(verdict).sort(), ['objects', 'storedVersions'], 'only storedVersions and the objects at v1 block', { verdict })
  t.match(verdict?.reasons.find((r) => r.check === 'storedVersions')?.message, /status.storedVersions \[v1, v2\] still lists v1/)
  t.match(verdict?.reasons.find((r) => r.check === 'objects')?.message, new RegExp(`^${COUNT} objects not known to be rewritten`))

  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'check-test' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.strictSame(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: COUNT }, 'etcd: every object at v2')

  const after = await check(config, { names: [crd.metadata.name], drop: 'v1' })
  t.equal(after.code, 0, 'exit code 0: safe', { report: after.report })
  t.equal(after.report.safe, true)
  t.match(
    after.report.results[0]?.reasons.find((r) => r.check === 'objects')?.message,
    /crd-migrator's last run \(generation \d+\) succeeded/,
  )

  // The CLI itself: the same answers as exit codes and -o json; bad usage is 2.
  const cli = (...args: string[]) => runProcess(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', cp.kubeconfigPath])
  const yes = await cli('check', crd.metadata.name, '--drop', 'v1', '-o', 'json')
  t.equal(yes.code, 0, 'CLI exit 0', { stderr: yes.stderr })
  t.equal((JSON.parse(yes.stdout) as CheckReport).results[0]?.safe, true)
  const no = await cli('check', crd.metadata.name, '--drop', 'v2')
  t.equal(no.code, EXIT_NOT_SAFE, 'CLI exit 3 for the storage version', { stderr: no.stderr })
  t.match(no.stdout, new RegExp(`${crd.metadata.name.replace(/\./g, '\\.')}: drop v2\\? NO`))
  t.match(no.stdout, /no {2}storage +v2 is the storage version/)
  const usage = await cli('check', crd.metadata.name)
  t.equal(usage.code, 2, 'CLI exit 2 without --drop or --manifests')
  t.match(usage.stderr, /CRDM_CONFIG_INVALID: check: say which version goes/)
  const missing = await cli('check', 'nothere.example.com', '--drop', 'v1')
  t.equal(missing.code, 1, 'CLI exit 1 for a CRD that does not exist')
  // A typo in the selector selects nothing: a gate must not pass on nothing checked.
  const typo = await cli('check', '-l', 'crd-migrator.io/managd=true', '--drop', 'v1', '-o', 'json')
  t.equal(typo.code, 1, 'a selector that matches no CRD: exit 1, not 0', { stdout: typo.stdout, stderr: typo.stderr })
  t.equal((JSON.parse(typo.stdout) as CheckReport).safe, false, 'and not safe: nothing was checked')
  t.match(typo.stderr, /no managed CRD matched -l "crd-migrator\.io\/managd=true": nothing was checked.*--allow-empty/)
  const allowed = await cli('check', '-l', 'crd-migrator.io/managd=true', '--drop', 'v1', '--allow-empty')
  t.equal(allowed.code, 0, '--allow-empty: an empty selection is fine', { stderr: allowed.stderr })
})

t.test('managedFields: no while objects carry entries at v1; yes after the migration cleaned them', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const config = loadConfig({ flags: { kubeconfig: cp.kubeconfigPath } })
  // Stored at v2 from the start (storedVersions [v2]), written through v1: managedFields at v1 only.
  const { crd, group } = await crdAt(http, 'check-mf', { versions: ['v1', 'v2'], storage: 'v2', through: 'v1', count: COUNT })
  await setVersion(http, crd.metadata.name, 'v1', { served: false })

  const before = await check(config, { names: [crd.metadata.name], drop: 'v1' })
  t.equal(before.code, EXIT_NOT_SAFE)
  const verdict = before.report.results[0]
  t.strictSame(blocking(verdict), ['managedFields'], 'only managedFields blocks', { verdict })
  t.match(
    verdict?.reasons.find((r) => r.check === 'managedFields')?.message,
    new RegExp(`^${COUNT} objects have managedFields entries at ${group}/v1`),
  )
  t.equal(statusOf(verdict, 'storedVersions'), 'ok')

  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'check-test' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  const after = await check(config, { names: [crd.metadata.name], drop: 'v1' })
  t.equal(after.code, 0, 'safe once the cleanup ran', { report: after.report })
})

t.test('stashed copies: no while a ControllerRevision holds a copy at v1', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('check-stash')
  const ns = uniqueName('check-stash')
  await createNamespace(http, ns)
  const crd = await createCrd(http, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v2', unserved: ['v1'] }))
  const label = `${group}/stash`
  const revisions = collectionPath({ group: 'apps', version: 'v1', plural: 'controllerrevisions' }, ns)
  for (const [name, version] of [
    ['copy-old', 'v1'],
    ['copy-new', 'v2'],
  ] as const) {
    await http.request({
      method: 'POST',
      path: revisions,
      body: {
        apiVersion: 'apps/v1',
        kind: 'ControllerRevision',
        metadata: { name, labels: { [label]: 'true' } },
        revision: 1,
        data: { apiVersion: `${group}/${version}`, kind: 'Widget', metadata: { name: 'w' }, spec: {} },
      },
    })
  }
  const file = join(t.testdir(), 'config.yaml')
  writeFileSync(
    file,
    stringify({
      migrator: {
        stashes: [
          {
            group,
            source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', labelSelector: label, namespaces: [ns] },
            referrers: [{ group, version: 'v2', resource: 'widgets', pointers: ['/spec/revisionName'] }],
          },
        ],
      },
    }),
  )
  const config = loadConfig({ file, flags: { kubeconfig: cp.kubeconfigPath } })
  const { code, report } = await check(config, { names: [crd.metadata.name], drop: 'v1' })
  t.equal(code, EXIT_NOT_SAFE)
  const verdict = report.results[0]
  t.strictSame(blocking(verdict), ['stashes'], 'only the stashed copy blocks', { verdict })
  t.match(
    verdict?.reasons.find((r) => r.check === 'stashes')?.message,
    new RegExp(`^1 stashed copy at v1 \\(controllerrevisions ${ns}/copy-old\\)`),
  )
  const without = await check(loadConfig({ flags: { kubeconfig: cp.kubeconfigPath } }), { names: [crd.metadata.name], drop: 'v1' })
  t.equal(without.code, 0, 'without the stash rule nothing is known to be stashed')
  t.match(without.report.results[0]?.reasons.find((r) => r.check === 'stashes')?.message, /no stash rule names group/)
})

t.test('served and deprecated: the API server says clients ask for it; forbidden /metrics is "could not tell"', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const config = loadConfig({ flags: { kubeconfig: cp.kubeconfigPath } })
  const { crd, group } = await crdAt(http, 'check-clients', { versions: ['v1', 'v2'], storage: 'v2', through: 'v2', count: 1 })
  await setVersion(http, crd.metadata.name, 'v1', { deprecated: true })

  const notYet = (await check(config, { names: [crd.metadata.name], drop: 'v1' })).report.results[0]
  t.strictSame(blocking(notYet), ['served'], 'served blocks; no client asked yet', { notYet })
  t.equal(statusOf(notYet, 'clients'), 'ok')

  // A client asks for v1 (the list answers with a deprecation warning and counts it).
  await http.request({ method: 'GET', path: collectionPath({ group, version: 'v1', plural: 'widgets' }) })
  const asked = (await check(config, { names: [crd.metadata.name], drop: 'v1' })).report.results[0]
  t.strictSame(blocking(asked).sort(), ['clients', 'served'], 'clients block once one asked', { asked })
  t.match(asked?.reasons.find((r) => r.check === 'clients')?.message, /clients still request .*apiserver_requested_deprecated_apis/)

  // Someone who may read CRDs and the objects, but not /metrics.
  const name = uniqueName('check-reader')
  await grantClusterRole(
    cp,
    name,
    [
      { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list'] },
      { apiGroups: [group], resources: ['widgets'], verbs: ['list'] },
    ],
    [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name }],
  )
  const reader = await cp.mintUser(name)
  const forbidden = await check(loadConfig({ flags: { kubeconfig: reader.kubeconfigPath } }), { names: [crd.metadata.name], drop: 'v1' })
  const verdict = forbidden.report.results[0]
  t.equal(statusOf(verdict, 'clients'), 'unknown', 'forbidden is not an error')
  t.match(verdict?.reasons.find((r) => r.check === 'clients')?.message, /^could not tell: forbidden/)
  t.equal(forbidden.code, EXIT_NOT_SAFE, 'still no: v1 is served')
})

t.test('--manifests: the versions a file no longer lists are the ones dropped', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const config = loadConfig({ flags: { kubeconfig: cp.kubeconfigPath } })
  const { crd } = await crdAt(http, 'check-manifest', { versions: ['v1', 'v2'], storage: 'v1', through: 'v1', count: 5 })
  await setStorageVersion(http, crd.metadata.name, 'v2', ['v1'])
  const upgraded = crdManifest({ group: crd.spec.group, versions: ['v2'], storage: 'v2' })
  const absent = crdManifest({ group: uniqueGroup('check-absent'), versions: ['v1'], storage: 'v1' })
  const dir = t.testdir({ 'crds.yaml': [upgraded, absent].map((d) => stringify(d)).join('---\n'), 'README.md': 'not a manifest' })

  const before = await check(config, { manifests: [dir] })
  t.equal(before.code, EXIT_NOT_SAFE)
  const [widgets, other] = before.report.results
  t.equal(widgets?.crd, crd.metadata.name)
  t.equal(widgets?.version, 'v1', 'v1 is dropped: the file no longer lists it')
  t.ok(blocking(widgets).includes('storedVersions'), 'storedVersions blocks', { widgets })
  t.equal(other?.crd, absent.metadata.name)
  t.equal(other?.safe, true, 'a CRD not in the cluster has nothing stored')

  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'check-test' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  const after = await check(config, { manifests: [join(dir, 'crds.yaml')] })
  t.equal(after.code, 0, 'the file can be applied now', { report: after.report })

  // The CLI: bad manifests and names with --manifests are usage errors.
  const cli = (...args: string[]) => runProcess(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', cp.kubeconfigPath])
  const bad = await cli('check', '--manifests', join(t.testdir({ 'x.yaml': 'a: [' }), 'x.yaml'))
  t.equal(bad.code, 2, 'not YAML: exit 2', { stderr: bad.stderr })
  const both = await cli('check', crd.metadata.name, '--manifests', dir)
  t.equal(both.code, 2, 'names and --manifests: exit 2')
})

t.test('plan: which CRDs need work, their counts, an estimate', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const config = loadConfig({ flags: { kubeconfig: cp.kubeconfigPath } })
  const stored = await crdAt(http, 'plan-stored', { versions: ['v1', 'v2'], storage: 'v1', through: 'v1', count: COUNT })
  await setStorageVersion(http, stored.crd.metadata.name, 'v2')
  const mf = await crdAt(http, 'plan-mf', { versions: ['v1', 'v2'], storage: 'v2', through: 'v1', count: 7 })
  await setVersion(http, mf.crd.metadata.name, 'v1', { served: false })
  const done = await crdAt(http, 'plan-done', { versions: ['v1'], storage: 'v1', through: 'v1', count: 3 })
  const names = [stored.crd.metadata.name, mf.crd.metadata.name, done.crd.metadata.name]

  const out = collector()
  t.equal(await runPlanCommand(config, out.stream, { format: 'json', names, scan: true }), 0)
  const report = JSON.parse(out.text()) as PlanReport
  t.strictSame(
    report.rows.map((r) => [r.name, r.objects, r.managedFieldsObjects, r.work, r.writes]),
    [
      [names[0], COUNT, 0, ['storage'], COUNT],
      [names[1], 7, 7, ['managedFields'], 7],
      [names[2], 3, 0, [], 0],
    ],
  )
  t.equal(report.summary.needingWork, 2)
  t.equal(report.summary.writes, COUNT + 7)
  t.match(
    report.summary.estimate,
    /a rough constant: 519 objects\/s .* run plan --measure/,
    'without --measure: the bench constant, said so',
  )
  t.equal(report.summary.basis.source, 'constant')

  const text = collector()
  await runPlanCommand(config, text.stream, { format: 'text', names, scan: false })
  t.match(
    text.text(),
    /1 of 3 CRDs need work; 30 objects to write; managedFields not scanned \(--no-scan\)\./,
    'without the scan the managedFields work is not known',
  )
  t.match(text.text(), /Estimate: .* at --max-parallel-crds 4/)
})

t.test("every managed CRD: the selector's label list and its names", async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const label = uniqueName('check-managed')
  const labelled = await createCrd(
    http,
    crdManifest({
      group: uniqueGroup('check-labelled'),
      versions: ['v1', 'v2'],
      storage: 'v2',
      unserved: ['v1'],
      labels: { [label]: 'true' },
    }),
  )
  const named = await createCrd(http, crdManifest({ group: uniqueGroup('check-named'), versions: ['v2'], storage: 'v2' }))
  await createCrd(http, crdManifest({ group: uniqueGroup('check-unmanaged'), versions: ['v1', 'v2'], storage: 'v1' }))
  const config = loadConfig({
    flags: {
      kubeconfig: cp.kubeconfigPath,
      'migrator.selector.labelSelector': `${label}=true`,
      'migrator.selector.names': [named.metadata.name, 'absent.example.com'],
    },
  })
  const { code, report } = await check(config, { drop: 'v1' })
  t.strictSame(
    report.results.map((r) => [r.crd, r.safe]),
    [labelled.metadata.name, named.metadata.name].sort().map((n) => [n, true]),
    'the labelled and the named CRD, not the unmanaged one nor a name that does not exist',
  )
  t.equal(code, 0)
  t.match(report.results.find((r) => r.crd === named.metadata.name)?.reasons[0]?.message, /v1 is not a version of .*: nothing to drop/)
})
