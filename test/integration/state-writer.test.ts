import t from 'tap'
import { pino } from 'pino'
import { getCrd } from '../../src/kube/crds.js'
import type { KubeRequest } from '../../src/kube/http.js'
import { StateWriter } from '../../src/migrator/freeze/state-writer.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { createCrd, crdManifest, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup } from '../helpers/controlplane.js'

const logger = pino({ level: 'silent' })

// The unfreeze removes the state annotations right after stop(); a write of the writer's
// that lands later puts them back on a CRD whose migration is over (a CI run caught it).
t.test('no state write lands after stop() resolves', async (t) => {
  const cp = await getControlPlane()
  const real = httpFor(cp.kubeconfigPath)
  const crd = await createCrd(real, crdManifest({ group: uniqueGroup('sw'), versions: ['v1'], storage: 'v1' }))
  const name = crd.metadata.name

  // The real API server answers; the test only holds the first write in flight.
  let release!: () => void
  const held = new Promise<void>((resolve) => (release = resolve))
  let started = 0
  let inFlight!: () => void
  const firstStarted = new Promise<void>((resolve) => (inFlight = resolve))
  const http = new Proxy(real, {
    get(target, prop, receiver) {
      if (prop !== 'request') return Reflect.get(target, prop, receiver)
      return async (req: KubeRequest) => {
        started++
        if (started === 1) {
          inFlight()
          await held
        }
        return target.request(req)
      }
    },
  })

  const state = new StateWriter({ http, logger, owner: 'test-owner' }, name, 3_600_000, () => null)
  const first = state.waiting('first')
  await firstStarted
  void state.waiting('second') // queued behind the first
  let stopped = false
  const stopping = state.stop().then(() => (stopped = true))
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(stopped, false, 'stop() waits for the write in flight')
  release()
  await first
  await stopping
  t.equal(started, 1, 'the write queued behind it was never sent')
  const after = await getCrd(real, name)
  t.equal(after.metadata.annotations?.[StateAnnotation.progress], 'first', 'the write in flight landed before stop() resolved')
  await state.waiting('third')
  t.equal(started, 1, 'a write asked for after stop() is not sent')
})
