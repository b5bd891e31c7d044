/**
 * Issue #36, estimates and words that agree, on the real API server: `plan --measure`
 * measures dry-run writes and stores nothing (resourceVersions and etcd unchanged); a
 * missing CRD gives `check` and `migrate` one not-found line and exit 1; plan, migrate and
 * check agree on managedFields entries of a version that is still served.
 */
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { collectionPath, crdPath } from '../../src/kube/paths.js'
import type { PartialObjectMetadata } from '../../src/kube/types.js'
import type { PlanReport } from '../../src/cli/plan/plan-format.js'
import type { CheckReport } from '../../src/cli/check/run-check.js'
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
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { runProcess } from '../helpers/run-process.js'
import { until } from '../helpers/until.js'

const cli = (kubeconfig: string, ...args: string[]) =>
  runProcess(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', kubeconfig], { env: { ...process.env, NO_COLOR: '1' } })

/** Every object's name and resourceVersion, listed through `version`. */
async function resourceVersions(http: KubeHttp, group: string, version: string): Promise<Map<string, string>> {
  // Right after a storage flip the API server answers 429 for a moment.
  const { body } = await until(
    'a list of the widgets',
    30_000,
    () => http.request<{ items: PartialObjectMetadata[] }>({ method: 'GET', path: collectionPath({ group, version, plural: 'widgets' }) }),
    () => true,
  )
  return new Map(body.items.map((i) => [`${i.metadata.namespace}/${i.metadata.name}`, i.metadata.resourceVersion!]))
}

t.test('plan --measure: a rate from dry-run writes; nothing stored', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('measure')
  const ns = uniqueName('measure')
  await createNamespace(http, ns)
  const crd = await createCrd(http, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1' }))
  const COUNT = 300
  await createObjects(http, refFor(crd, 'v1'), [ns], COUNT)
  await setStorageVersion(http, crd.metadata.name, 'v2')
  const before = await resourceVersions(http, group, 'v2')
  t.equal(before.size, COUNT)

  const json = await cli(cp.kubeconfigPath, 'plan', crd.metadata.name, '--measure', '--measure-objects', '150', '-o', 'json')
  t.equal(json.code, 0, json.stderr)
  const report = JSON.parse(json.stdout) as PlanReport
  t.equal(report.summary.basis.source, 'measured', report.summary.estimate)
  t.ok(report.summary.basis.samples! >= 10 && report.summary.basis.samples! <= 150, `samples: ${report.summary.basis.samples}`)
  t.equal(report.summary.basis.failed, 0, 'no dry-run write failed')
  t.ok(report.summary.basis.objectsPerSecond > 0)
  const msPerObject = 1000 / report.summary.basis.objectsPerSecond
  t.ok(
    Math.abs(report.rows[0]!.estimateMs! - (2400 + COUNT * msPerObject)) < COUNT * msPerObject * 0.01 + 1,
    'the estimate uses the measured rate',
  )

  const [slowRate, fastRate] = report.summary.basis.objectsPerSecondRange!
  t.ok(
    slowRate < report.summary.basis.objectsPerSecond && report.summary.basis.objectsPerSecond < fastRate,
    'the likely rate is inside the range',
  )
  const [fastMs, slowMs] = report.rows[0]!.estimateRangeMs!
  t.ok(fastMs < report.rows[0]!.estimateMs! && report.rows[0]!.estimateMs! < slowMs, 'and so is the estimate', { fastMs, slowMs })
  t.equal(report.rows[0]!.estimateMs, Math.round(report.rows[0]!.estimateMs!), 'whole milliseconds')

  const text = await cli(cp.kubeconfigPath, 'plan', crd.metadata.name, '--measure')
  t.equal(text.code, 0, text.stderr)
  t.match(
    text.stdout,
    /\(measured on this cluster: \d+ dry-run writes \(dryRun=All: nothing stored\) at [\d.]+\/s; .* so [\d.]+–[\d.]+ objects\/s/,
  )
  t.match(
    text.stdout,
    /Estimate: [\d.]+ s( – [^,]+)? at --max-parallel-crds/,
    'the estimate a range (or one figure, when both ends round the same)',
  )

  const plain = await cli(cp.kubeconfigPath, 'plan', crd.metadata.name)
  t.match(
    plain.stdout,
    /a rough constant: 519 objects\/s .* run plan --measure/,
    'without --measure: said to be a constant, --measure suggested',
  )

  // Nothing written: every resourceVersion as it was, every object still stored at v1 in etcd.
  t.strictSame(await resourceVersions(http, group, 'v2'), before, 'no resourceVersion moved')
  t.strictSame(
    [...(await storedVersionsInEtcd(cp, group, 'widgets')).entries()],
    [[`${group}/v1`, COUNT]],
    'etcd still holds every object at v1',
  )

  const bad = await cli(cp.kubeconfigPath, 'plan', crd.metadata.name, '--measure', '--measure-objects', '0')
  t.equal(bad.code, 2, 'a bad --measure-objects is a usage error')
  t.match(bad.stderr, /--measure-objects must be a whole number from 1 to 10000, got "0"/)
  const alone = await cli(cp.kubeconfigPath, 'plan', crd.metadata.name, '--measure-objects', '50')
  t.equal(alone.code, 2, '--measure-objects without --measure is not silently ignored')
  t.match(alone.stderr, /plan: --measure-objects needs --measure/)
})

t.test('plan --measure without patch permission: the constant, and why', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('measure-ro')
  const ns = uniqueName('measure-ro')
  await createNamespace(http, ns)
  const crd = await createCrd(http, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1' }))
  await createObjects(http, refFor(crd, 'v1'), [ns], 20)
  await setStorageVersion(http, crd.metadata.name, 'v2')
  const name = uniqueName('plan-reader')
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
  const r = await cli(reader.kubeconfigPath, 'plan', crd.metadata.name, '--measure', '-o', 'json')
  t.equal(r.code, 0, r.stderr)
  const report = JSON.parse(r.stdout) as PlanReport
  t.equal(report.summary.basis.source, 'constant')
  t.equal(report.summary.basis.failed, 20, 'every dry-run write refused')
  t.match(report.summary.basis.measureError, /^0 of 20 dry-run writes succeeded, 10 needed: CRDM_FORBIDDEN: /)
  t.match(report.summary.estimate, /^could not measure \(0 of 20 .*\); a rough constant: 519 objects\/s/)
})

t.test('a CRD that does not exist: one not-found line, exit 1', async (t) => {
  const cp = await getControlPlane()
  const name = `nopes.${uniqueGroup('nope')}`
  const check = await cli(cp.kubeconfigPath, 'check', name, '--drop', 'v1')
  t.equal(check.code, 1)
  t.equal(check.stdout, '', 'no "no managed CRDs" after it')
  t.equal(check.stderr, `crd-migrator: customresourcedefinition "${name}" not found\n`)

  const status = await cli(cp.kubeconfigPath, 'status', name)
  t.equal(status.code, 1)
  t.equal(status.stderr, `crd-migrator: customresourcedefinition "${name}" not found\n`, 'the wording check and migrate follow')

  const migrate = await cli(cp.kubeconfigPath, 'migrate', name)
  t.equal(migrate.code, 1)
  t.equal(migrate.stdout, `${name}: CRDM_RESOURCE_NOT_FOUND: customresourcedefinition "${name}" not found\n`)
  // The CRD's random name may itself hold "404": judged without it.
  t.notMatch((migrate.stdout + migrate.stderr).replaceAll(name, '<name>'), /CRDM_KUBE_API|404/, "not the API server's 404")
})

t.test('plan, migrate and check agree on managedFields of a served old version', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('served-mf')
  const ns = uniqueName('served-mf')
  await createNamespace(http, ns)
  const crd = await createCrd(http, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1' }))
  const COUNT = 40
  // Created through v1: every object has a managedFields entry at v1, which stays served.
  await createObjects(http, refFor(crd, 'v1'), [ns], COUNT)
  await setStorageVersion(http, crd.metadata.name, 'v2')
  const name = crd.metadata.name

  const plan = await cli(cp.kubeconfigPath, 'plan', name, '-o', 'json')
  t.equal(plan.code, 0, plan.stderr)
  const row = (JSON.parse(plan.stdout) as PlanReport).rows[0]!
  t.equal(row.managedFieldsObjects, 0, 'nothing for the cleanup to do while v1 is served')
  t.strictSame(row.servedManagedFields, { v1: COUNT })
  const planText = await cli(cp.kubeconfigPath, 'plan', name)
  t.match(planText.stdout, new RegExp(`\\b0 \\(${COUNT} at served v1\\)`), 'the column says what check will count')
  t.match(planText.stdout, `Next: ${name}: ${COUNT} objects keep managedFields entries of v1, which is still served`)
  t.match(planText.stdout, 'set served: false on v1, then run migrate again')

  // The dry run names the same next step (it used to leave it out).
  const dry = await cli(cp.kubeconfigPath, 'migrate', name, '--dry-run')
  t.equal(dry.code, 0, dry.stdout + dry.stderr)
  t.match(
    dry.stdout,
    `  next: ${COUNT} objects keep managedFields entries of v1, which is still served (left by design; check --drop v1 counts them): to drop v1, set served: false on it, then run migrate again`,
  )

  const migrate = await cli(cp.kubeconfigPath, 'migrate', name)
  t.equal(migrate.code, 0, migrate.stdout + migrate.stderr)
  t.match(migrate.stdout, /managedFields: 0 entries of unserved versions removed/)
  t.match(
    migrate.stdout,
    new RegExp(
      `  next: ${COUNT} objects keep \\d+ managedFields entries of v1, which is still served \\(left by design; check --drop v1 counts them\\): to drop v1, set served: false on it, then run migrate again`,
    ),
  )

  const check = await cli(cp.kubeconfigPath, 'check', name, '--drop', 'v1', '-o', 'json')
  t.equal(check.code, 3, 'not safe to drop')
  const verdict = (JSON.parse(check.stdout) as CheckReport).results[0]!
  const mf = verdict.reasons.find((r) => r.check === 'managedFields')!
  t.equal(mf.status, 'blocks')
  t.match(mf.message, new RegExp(`^${COUNT} objects have managedFields entries at ${group.replace(/\./g, '\\.')}/v1`), 'the same count')

  // The next step, done: v1 unserved, migrate again; then plan has nothing to keep and check no entries.
  const current = await getCrd(http, name)
  await http.request({
    method: 'PATCH',
    path: crdPath(name),
    contentType: ContentType.mergePatch,
    body: { spec: { versions: current.spec.versions.map((v) => (v.name === 'v1' ? { ...v, served: false } : v)) } },
  })
  const again = await cli(cp.kubeconfigPath, 'migrate', name)
  t.equal(again.code, 0, again.stdout + again.stderr)
  t.notMatch(again.stdout, /next:/, 'no next step left')
  const after = await cli(cp.kubeconfigPath, 'check', name, '--drop', 'v1', '-o', 'json')
  const mfAfter = (JSON.parse(after.stdout) as CheckReport).results[0]!.reasons.find((r) => r.check === 'managedFields')!
  t.equal(mfAfter.status, 'ok', mfAfter.message)
})

t.test("status: an ETA from the run's own progress, only after 10 s of it", async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const crd = await createCrd(http, crdManifest({ group: uniqueGroup('eta'), versions: ['v1', 'v2'], storage: 'v2' }))
  const name = crd.metadata.name
  // A run of another replica, as its state writer leaves the CRD: progress with a fresh heartbeat.
  const run = (startedSecondsAgo: number, progress: string) =>
    patchCrdAnnotations(http, name, {
      [DEFAULT_MIGRATING_ANNOTATION]: 'true',
      [StateAnnotation.owner]: 'another-replica',
      [StateAnnotation.startedAt]: new Date(Date.now() - startedSecondsAgo * 1000).toISOString(),
      [StateAnnotation.heartbeat]: new Date().toISOString(),
      [StateAnnotation.phase]: 'StorageVersionMigration',
      [StateAnnotation.progress]: progress,
    })
  const summary = async () => {
    const r = await cli(cp.kubeconfigPath, 'status', name, '--summary')
    t.equal(r.code, 0, r.stderr)
    return r.stdout
  }
  await run(3, '40/400')
  t.match(await summary(), /in flight: 1, queued: 0; ETA of the running: estimating…\n$/, '3 s of run: not enough evidence')
  const early = JSON.parse((await cli(cp.kubeconfigPath, 'status', name, '-o', 'json')).stdout) as Array<{ etaSeconds?: number }>
  t.notOk('etaSeconds' in early[0]!, 'no etaSeconds while estimating')

  // 100 of 400 in 50 s: 300 more take about 150 s.
  await run(50, '100/400')
  const text = await summary()
  const m = /ETA of the running: (\d+)m(\d+)s at the rate seen so far\n$/.exec(text)
  t.ok(m, text)
  const seconds = Number(m?.[1]) * 60 + Number(m?.[2])
  t.ok(seconds >= 140 && seconds <= 155, `ETA ${seconds} s`)
})
