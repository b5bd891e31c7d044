/**
 * The controller lists and watches only the CRDs it manages: the API server filters by the
 * label selector and by name, so CRDs it does not manage are never sent. Proved by what
 * the client received (every list item and watch event on the CRD collection), on the
 * shared control plane where other tests create CRDs all the time. And the list is paged.
 */
import { pino } from 'pino'
import t from 'tap'
import { ConfigSchema } from '../../src/config/schema.js'
import { MigrationController } from '../../src/controller/controller.js'
import { loadKubeConfig } from '../../src/kube/client.js'
import { crdPath, CRD_API } from '../../src/kube/paths.js'
import { KubeHttp, ContentType, type KubeRequest, type KubeResponse } from '../../src/kube/http.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { listAndWatch } from '../../src/kube/watch.js'
import { createCrd, crdManifest, deleteCrd, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

interface Received {
  via: 'list' | 'watch'
  name: string
  type?: string
  resourceVersion?: string
  query: KubeRequest['query']
}

/** A KubeHttp that notes every CRD it receives from the CRD collection, by list or by watch. */
class RecordingHttp extends KubeHttp {
  readonly received: Received[] = []
  readonly lists: KubeRequest['query'][] = []

  override async request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    const res = await super.request<T>(req)
    if (req.method === 'GET' && req.path === CRD_API) {
      this.lists.push(req.query)
      for (const item of (res.body as { items: CustomResourceDefinition[] }).items) {
        this.received.push({ via: 'list', name: item.metadata.name, query: req.query })
      }
    }
    return res
  }

  override async stream(req: Omit<KubeRequest, 'body'>, onEvent: (event: unknown) => void): Promise<void> {
    return super.stream(req, (raw) => {
      const event = raw as { type: string; object: CustomResourceDefinition }
      if (req.path === CRD_API && event.type !== 'BOOKMARK') {
        this.received.push({
          via: 'watch',
          name: event.object.metadata.name,
          type: event.type,
          resourceVersion: event.object.metadata.resourceVersion,
          query: req.query,
        })
      }
      onEvent(raw)
    })
  }

  names(): Set<string> {
    return new Set(this.received.map((r) => r.name))
  }
}

const recording = (kubeconfigPath: string) => {
  const http = new RecordingHttp(loadKubeConfig(kubeconfigPath))
  t.teardown(() => http.close())
  return http
}

async function annotate(http: KubeHttp, name: string, value: string): Promise<string> {
  const res = await http.request<CustomResourceDefinition>({
    method: 'PATCH',
    path: crdPath(name),
    contentType: ContentType.mergePatch,
    body: { metadata: { annotations: { 'crd-migrator-test/touched': value } } },
  })
  return res.body.metadata.resourceVersion!
}

t.test('the controller is sent the CRDs it selects, by label and by name, and no other', async (t) => {
  const cp = await getControlPlane()
  const admin = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('watch')
  const label = { 'crd-migrator-test/watch': uniqueName('sel') }
  const crd = (plural: string, labels: Record<string, string> = {}) =>
    crdManifest({ group, versions: ['v1'], storage: 'v1', plural, kind: plural[0]!.toUpperCase() + plural.slice(1, -1), labels })
  const made: string[] = []
  const create = async (c: CustomResourceDefinition) => {
    made.push(c.metadata.name)
    return (await createCrd(admin, c)).metadata.name
  }
  t.teardown(() => Promise.all(made.map((n) => deleteCrd(admin, n))))

  const other1 = await create(crd('others'))
  const labelled1 = await create(crd('labels', label))
  const named = await create(crd('nameds'))

  const http = recording(cp.kubeconfigPath)
  const config = ConfigSchema.parse({
    kubeconfig: cp.kubeconfigPath,
    migrator: { selector: { labelSelector: Object.entries(label).map(([k, v]) => `${k}=${v}`)[0], names: [named] }, resyncSeconds: 1 },
  })
  const stop = new AbortController()
  const controller = new MigrationController({ http, config, logger: pino({ level: 'silent' }), owner: 'crd-watch-test' })
  const running = controller.run(stop.signal)
  t.teardown(async () => {
    stop.abort()
    await running
  })

  await until(
    'the first lists',
    60_000,
    async () => http.names(),
    (n) => n.has(labelled1) && n.has(named),
  )

  // Watch events arrive in resourceVersion order on each stream: a CRD created (or changed)
  // before one that does arrive would have arrived first, had the API server sent it.
  const other2 = await create(crd('othertwos'))
  const labelled2 = await create(crd('labeltwos', label))
  await until(
    'the new labelled CRD through the label watch',
    60_000,
    async () => http.names(),
    (n) => n.has(labelled2),
  )
  await annotate(admin, other1, 'before')
  const namedRv = await annotate(admin, named, 'after')
  await until(
    'the change of the named CRD through its watch',
    60_000,
    async () => http.received.filter((r) => r.via === 'watch' && r.name === named).map((r) => BigInt(r.resourceVersion ?? '0')),
    (rvs) => rvs.some((rv) => rv >= BigInt(namedRv)),
  )
  await until(
    'a resync list',
    60_000,
    async () => http.lists.length,
    (n) => n >= 4,
  )

  const received = http.names()
  t.same([...received].sort(), [labelled1, labelled2, named].sort(), 'received exactly the selected CRDs')
  t.notOk(received.has(other1) || received.has(other2), 'never a CRD it does not manage, though created and changed meanwhile')
  const watched = http.received.filter((r) => r.via === 'watch')
  t.ok(watched.length > 0, `${watched.length} watch events, all of selected CRDs`)
  const selectors = new Set(http.lists.map((q) => String(q?.['labelSelector'] ?? q?.['fieldSelector'])))
  t.same([...selectors].sort(), [config.migrator.selector.labelSelector, `metadata.name=${named}`].sort(), 'every list carries a selector')
  t.ok(
    http.lists.every((q) => Number(q?.['limit']) > 0),
    'every list is paged',
  )
})

t.test('listAndWatch pages the list (limit/continue) and hands every object over once', async (t) => {
  const cp = await getControlPlane()
  const admin = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('pages')
  const label = uniqueName('pages')
  const names: string[] = []
  t.teardown(() => Promise.all(names.map((n) => deleteCrd(admin, n))))
  for (const plural of ['ones', 'twos', 'threes']) {
    const c = crdManifest({
      group,
      versions: ['v1'],
      storage: 'v1',
      plural,
      kind: plural[0]!.toUpperCase() + plural.slice(1, -1),
      labels: { 'crd-migrator-test/pages': label },
    })
    names.push(c.metadata.name)
    await createCrd(admin, c)
  }
  const http = recording(cp.kubeconfigPath)
  const seen: string[] = []
  const stop = new AbortController()
  const errors: unknown[] = []
  const watching = listAndWatch<CustomResourceDefinition>(
    http,
    CRD_API,
    { onObject: (o) => seen.push(o.metadata.name), onError: (err) => errors.push(err) },
    stop.signal,
    { labelSelector: `crd-migrator-test/pages=${label}`, pageSize: 1 },
  )
  await until(
    'the three CRDs',
    60_000,
    async () => seen.length,
    (n) => n >= 3,
  )
  stop.abort()
  await watching
  t.same([...seen].sort(), [...names].sort(), 'each of the three, once')
  t.ok(http.lists.length >= 3, `${http.lists.length} pages of one`)
  t.ok(
    http.lists.slice(1).every((q) => typeof q?.['continue'] === 'string' && q['continue'] !== ''),
    'the pages after the first continue the list',
  )
  t.same(errors, [], 'no error')
})
