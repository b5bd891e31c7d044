/**
 * Issue 34: a run that had rewritten every object failed at its last step under load, with
 * `customresourcedefinitions/…/status: 409 … the object has been modified`. The
 * storedVersions patch carried the resourceVersion it had read, and the run's own progress
 * and heartbeat writes to the same CRD kept moving it: 5 rounds of read, check, patch, each
 * lost. Here the run's StateWriter writes between every read and patch, deterministically
 * (no timing): the patch must still land, while what it guards (the freeze, the
 * generation, storedVersions) still stops it.
 */
import t from 'tap'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp, type KubeRequest } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import { StateWriter } from '../../src/migrator/freeze/state-writer.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { runClient } from '../../src/migrator/engine/run-client.js'
import { narrowStoredVersions } from '../../src/migrator/phases/stored-versions.js'
import { MIGRATING_VALUE, StateAnnotation, takeOverPatch } from '../../src/state/crd-state.js'
import { createCrd, crdManifest, defaultSettings, httpFor, setStorageVersion } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
const annotation = DEFAULT_MIGRATING_ANNOTATION

/** A CRD frozen by `owner` whose storage moved v1 -> v2: storedVersions [v1, v2], to be narrowed to [v2]. */
async function frozenCrd(http: KubeHttp, prefix: string, owner = 'o') {
  const created = await createCrd(http, crdManifest({ group: uniqueGroup(prefix), versions: ['v1', 'v2'], storage: 'v1' }))
  const name = created.metadata.name
  await setStorageVersion(http, name, 'v2')
  const crd = await patchCrdAnnotations(http, name, { [annotation]: MIGRATING_VALUE, [StateAnnotation.owner]: owner })
  return { name, generation: crd.metadata.generation!, storedVersions: crd.status?.storedVersions }
}

/** `real`, with `afterRead` run after each GET of the CRD has been answered and before the answer is handed back. */
function interposed(
  real: KubeHttp,
  name: string,
  afterRead: (round: number) => Promise<void>,
  onPatch?: (req: KubeRequest) => Promise<void>,
) {
  const counts = { reads: 0, patches: 0 }
  const http = new Proxy(real, {
    get(target, prop, receiver) {
      if (prop !== 'request') return Reflect.get(target, prop, receiver)
      return async (req: KubeRequest) => {
        if (req.method === 'PATCH' && req.path === crdPath(name, 'status')) {
          counts.patches++
          await onPatch?.(req)
          return target.request(req)
        }
        const res = await target.request(req)
        if (req.method === 'GET' && req.path === crdPath(name)) await afterRead(++counts.reads)
        return res
      }
    },
  })
  return { http, counts }
}

t.test('the run’s own progress and heartbeat writes between every read and patch do not fail it', async (t) => {
  const cp = await getControlPlane()
  const real = httpFor(cp.kubeconfigPath)
  const { name, generation, storedVersions } = await frozenCrd(real, 'svrace', 'test-owner')
  t.same(storedVersions, ['v1', 'v2'])

  // The run's real StateWriter, on the real API server; every read of the CRD is followed
  // by one of its writes (progress + heartbeat annotations), as under load, where the
  // timer's writes land while the patch waits.
  const state = new StateWriter({ http: real, logger, owner: 'test-owner' }, name, 3_600_000, () => null)
  t.teardown(() => state.stop())
  const { http, counts } = interposed(real, name, (round) => state.waiting(`round ${round}`))

  const crd = await narrowStoredVersions(
    { http, logger, owner: 'test-owner' },
    name,
    'v2',
    generation,
    runClient({ http }, { maxAttempts: 3 }),
    annotation,
  )
  t.same(crd.status?.storedVersions, ['v2'], 'narrowed')
  t.same((await getCrd(real, name)).status?.storedVersions, ['v2'], 'and stored')
  t.equal(counts.patches, 1, 'at the first patch')
  const after = await getCrd(real, name)
  t.equal(after.metadata.annotations?.[StateAnnotation.progress], 'round 1', 'the progress write landed between read and patch')
  t.equal(after.metadata.annotations?.[annotation], MIGRATING_VALUE)
})

// The same through a whole run: a short progress interval, and an API server "slowed"
// where it hurts: each storedVersions patch of the run is sent only once the run's own
// timer has written its heartbeat after the CRD the patch's checks were made on was read
// (an event, not a delay). The run starts from the CRD its last write got back, so the
// read may be that write's answer: the heartbeat still lands in between.
t.test('a whole run whose heartbeat lands between every read and patch of the storedVersions phase succeeds', async (t) => {
  const cp = await getControlPlane()
  const real = httpFor(cp.kubeconfigPath)
  const { crd } = await crdWithObjects(real, { prefix: 'svrun', count: 20 })
  const name = crd.metadata.name
  let stateWrites = 0
  let interposedWrites = 0
  let wrote: (() => void) | undefined
  const http = new Proxy(real, {
    get(target, prop, receiver) {
      if (prop !== 'request') return Reflect.get(target, prop, receiver)
      return async (req: KubeRequest) => {
        if (req.method === 'PATCH' && req.path === crdPath(name, 'status')) {
          // The writer's timer is unref'd: this one keeps the process alive while we wait
          // (and ends a wait for a writer that stopped: not counted).
          const before = stateWrites
          let timer: NodeJS.Timeout | undefined
          await new Promise<void>((resolve) => {
            timer = setTimeout(resolve, 30_000)
            wrote = () => stateWrites > before && resolve()
          })
          clearTimeout(timer)
          if (stateWrites > before) interposedWrites++
        }
        const res = await target.request(req)
        if (req.method === 'PATCH' && req.path === crdPath(name)) {
          const annotations = (req.body as { metadata?: { annotations?: Record<string, unknown> } }).metadata?.annotations ?? {}
          if (typeof annotations[StateAnnotation.heartbeat] === 'string') stateWrites++
          wrote?.()
        }
        return res
      }
    },
  })
  const result = await migrateCrd(name, defaultSettings({ progressIntervalMs: 50 }), { http, logger, owner: 'svrun' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok(interposedWrites >= 1, `the run's own writes landed between read and patch (${interposedWrites} times)`)
  t.same((await getCrd(real, name)).status?.storedVersions, ['v2'])
})

t.test('what the patch guards still stops it between read and patch', async (t) => {
  const cp = await getControlPlane()
  const real = httpFor(cp.kubeconfigPath)

  t.test('the freeze lifted: CRDM_FREEZE_LIFTED, storedVersions untouched', async (t) => {
    const { name, generation } = await frozenCrd(real, 'svlift')
    const { http, counts } = interposed(real, name, async (round) => {
      if (round === 1) await patchCrdAnnotations(real, name, { [annotation]: null })
    })
    await t.rejects(
      narrowStoredVersions({ http, logger, owner: 'o' }, name, 'v2', generation, runClient({ http }, { maxAttempts: 3 }), annotation),
      {
        code: 'CRDM_FREEZE_LIFTED',
      },
    )
    t.equal(counts.patches, 1, 'the patch was sent and refused by the API server')
    t.same((await getCrd(real, name)).status?.storedVersions, ['v1', 'v2'])
  })

  t.test('the freeze taken over by another instance: CRDM_FREEZE_TAKEN_OVER, storedVersions untouched', async (t) => {
    const { name, generation } = await frozenCrd(real, 'svtake')
    const { http, counts } = interposed(real, name, async (round) => {
      if (round === 1) await patchCrdAnnotations(real, name, takeOverPatch('replica-b'))
    })
    const err = await narrowStoredVersions(
      { http, logger, owner: 'o' },
      name,
      'v2',
      generation,
      runClient({ http }, { maxAttempts: 3 }),
      annotation,
    ).catch((e: unknown) => e)
    t.match(err, { code: 'CRDM_FREEZE_TAKEN_OVER', message: /taken over by replica-b .*status\.storedVersions left as \["v1","v2"\]/ })
    t.equal(counts.patches, 1, 'the patch was sent and refused by the API server (its owner test)')
    t.equal(counts.reads, 2, 'then read again, which says why')
    const after = await getCrd(real, name)
    t.same(after.status?.storedVersions, ['v1', 'v2'])
    t.equal(after.metadata.annotations?.[StateAnnotation.owner], 'replica-b')
  })

  t.test('the spec changed (generation): CRDM_CRD_CHANGED, storedVersions untouched', async (t) => {
    const { name, generation } = await frozenCrd(real, 'svgen')
    const { http, counts } = interposed(real, name, async (round) => {
      if (round !== 1) return
      const crd = await getCrd(real, name)
      const versions = crd.spec.versions.map((v) => (v.name === 'v1' ? { ...v, deprecated: true } : v))
      await real.request({ method: 'PATCH', path: crdPath(name), body: { spec: { versions } }, contentType: ContentType.mergePatch })
    })
    await t.rejects(
      narrowStoredVersions({ http, logger, owner: 'o' }, name, 'v2', generation, runClient({ http }, { maxAttempts: 3 }), annotation),
      {
        code: 'CRDM_CRD_CHANGED',
      },
    )
    t.equal(counts.patches, 1, 'the patch was sent and refused by the API server')
    const after = await getCrd(real, name)
    t.equal(after.metadata.generation, generation + 1, 'the spec change bumped the generation')
    t.same(after.status?.storedVersions, ['v1', 'v2'])
  })

  t.test('a retried patch whose first answer was lost: refused (422), then found narrowed', async (t) => {
    const { name, generation } = await frozenCrd(real, 'svlost')
    let lost = false
    const { http, counts } = interposed(
      real,
      name,
      async () => {},
      async (req) => {
        if (lost) return
        lost = true
        await real.request(req) // it lands; its answer does not arrive
        throw new KubeApiError(503, req.method, req.path, 'answer lost', undefined)
      },
    )
    const crd = await narrowStoredVersions(
      { http, logger, owner: 'o' },
      name,
      'v2',
      generation,
      runClient({ http }, { maxAttempts: 3 }),
      annotation,
    )
    t.same(crd.status?.storedVersions, ['v2'])
    t.equal(counts.patches, 2, 'the retry was sent (and refused)')
    t.equal(counts.reads, 2, 'then the CRD read again, already narrowed')
  })

  t.test('a 422 while nothing it tests moved is a real refusal: thrown, not retried 5 times', async (t) => {
    const { name, generation } = await frozenCrd(real, 'svreal')
    const { http, counts } = interposed(
      real,
      name,
      async () => {},
      async (req) => {
        throw new KubeApiError(422, req.method, req.path, { kind: 'Status', reason: 'Invalid', message: 'refused' }, undefined)
      },
    )
    const err = await narrowStoredVersions(
      { http, logger, owner: 'o' },
      name,
      'v2',
      generation,
      runClient({ http }, { maxAttempts: 3 }),
      annotation,
    ).catch((e: unknown) => e)
    t.equal(err instanceof KubeApiError && err.status, 422, 'the 422 is thrown')
    t.equal(counts.patches, 1)
    t.equal(counts.reads, 2, 'read once more to see whether anything moved')
    t.same((await getCrd(real, name)).status?.storedVersions, ['v1', 'v2'])
  })
})
