/**
 * A run whose freeze another crd-migrator instance took over (decideFreeze 'resume' after
 * takeoverAfterSeconds without a heartbeat: a long pause, a frozen node, a lost Lease)
 * must stop, and must leave the freeze to its new owner: it used to go on writing beside
 * it and, at its end, remove the migrating annotation under it. The takeover is written
 * through the real API server as takeOverPatch writes it (owner + heartbeat); what the
 * old run does afterwards is read back from the CRD.
 */
import t, { type Test } from 'tap'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION as KEY } from '../../src/config/annotations.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import type { KubeRequest } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import type { WalkProgress } from '../../src/migrator/engine/walker.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { MIGRATING_VALUE, StateAnnotation, takeOverPatch } from '../../src/state/crd-state.js'
import { defaultSettings, httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until } from '../helpers/until.js'

const logger = pino({ level: 'silent' })
const cp = await getControlPlane()
const admin = httpFor(cp.kubeconfigPath)
const NEW_OWNER = 'replica-b'

/** What the old run must have left alone: the freeze and the new owner's state annotations. */
async function heldByNewOwner(t: Test, name: string) {
  const after = await getCrd(admin, name)
  const a = after.metadata.annotations ?? {}
  t.equal(a[KEY], MIGRATING_VALUE, 'the migrating annotation is still set: the old run did not lift the new owner’s freeze')
  t.equal(a[StateAnnotation.owner], NEW_OWNER, 'the owner is still the new one')
  t.ok(a[StateAnnotation.heartbeat], 'the heartbeat is still there')
  t.notOk(a[StateAnnotation.lastResult], 'no result recorded by the old run')
  t.notOk(a[StateAnnotation.finishedAt], 'no finished-at recorded by the old run')
  t.not(a[StateAnnotation.phase], 'Failed', 'the phase is not set to Failed by the old run')
  t.strictSame(after.status?.storedVersions, ['v1', 'v2'], 'status.storedVersions unchanged')
}

t.test('a run whose freeze is taken over mid-run stops and leaves the freeze to the new owner', async (t) => {
  const total = 1500
  const { group, name } = await crdWithObjects(admin, { prefix: 'takeover', count: total })
  t.teardown(() => patchCrdAnnotations(admin, name, { [KEY]: null }).catch(() => undefined))
  let latest: WalkProgress['counts'] | undefined
  // A fixed, slow pace (~30 s for every object): the takeover lands long before the end.
  const running = migrateCrd(name, defaultSettings({ concurrency: 2, qps: 50, progressIntervalMs: 1000 }), {
    http: admin,
    logger,
    owner: 'replica-a',
    onProgress: (_phase, p) => {
      latest = { ...p.counts }
    },
  })
  await until(
    '100 objects rewritten',
    60_000,
    async () => latest?.rewritten ?? 0,
    (n) => n >= 100,
  )
  const frozen = await getCrd(admin, name)
  t.equal(frozen.metadata.annotations?.[StateAnnotation.owner], 'replica-a', 'the run froze the CRD as replica-a')
  const atTakeover = latest?.rewritten ?? 0
  // What another instance writes when it resumes a freeze whose heartbeat went stale.
  await patchCrdAnnotations(admin, name, takeOverPatch(NEW_OWNER))
  const result = await running

  t.equal(result.outcome, 'Failed')
  t.equal(result.errorCode, 'CRDM_FREEZE_TAKEN_OVER', result.reason)
  t.match(result.reason, /^the freeze was taken over by replica-b during the migration .*which finishes the migration/)
  t.equal(result.leftFrozen, false, 'not reported as left frozen by this run')
  t.strictSame(result.storedVersionsAfter, ['v1', 'v2'])
  await heldByNewOwner(t, name)
  const inV2 = (await storedVersionsInEtcd(cp, group, 'widgets')).get(`${group}/v2`) ?? 0
  t.comment(`rewritten at the takeover: ${atTakeover}; in v2 in etcd after the run: ${inV2} of ${total}`)
  t.ok(inV2 < total / 2, `the old run stopped long before writing every object (${inV2} of ${total})`)
})

// The run has not seen the takeover when it narrows storedVersions: the patch's own
// `test` of the owner annotation refuses it (422), and the read that follows says why.
t.test('a takeover just before the storedVersions patch: the patch is refused, the freeze left to the new owner', async (t) => {
  const { name } = await crdWithObjects(admin, { prefix: 'takeoversv', count: 20 })
  t.teardown(() => patchCrdAnnotations(admin, name, { [KEY]: null }).catch(() => undefined))
  const statusPatches: number[] = []
  const http = new Proxy(admin, {
    get(target, prop, receiver) {
      if (prop !== 'request') return Reflect.get(target, prop, receiver)
      return async (req: KubeRequest) => {
        if (!(req.method === 'PATCH' && req.path === crdPath(name, 'status'))) return target.request(req)
        if (statusPatches.length === 0) await patchCrdAnnotations(admin, name, takeOverPatch(NEW_OWNER))
        // Sent whatever the run's guard saw meanwhile: what the API server says of it is the point.
        try {
          const res = await target.request({ ...req, signal: undefined })
          statusPatches.push(res.status)
          return res
        } catch (err) {
          statusPatches.push(err instanceof KubeApiError ? err.status : -1)
          throw err
        }
      }
    },
  })
  const result = await migrateCrd(name, defaultSettings({ progressIntervalMs: 3_600_000 }), { http, logger, owner: 'replica-a' })

  t.equal(statusPatches[0], 422, 'the storedVersions patch was sent and refused by its owner test')
  t.equal(result.outcome, 'Failed')
  t.equal(result.errorCode, 'CRDM_FREEZE_TAKEN_OVER', result.reason)
  t.match(result.reason, /taken over by replica-b/)
  t.equal(result.leftFrozen, false)
  await heldByNewOwner(t, name)
})
