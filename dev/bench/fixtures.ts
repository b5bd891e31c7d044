/**
 * The bench's starting state: a fresh CRD (v1 and v2 served, v1 stored) with N small,
 * realistic custom resources created through the API server at high concurrency, then the
 * storage flipped to v2; and the proof afterwards, read from etcd itself, that every
 * object is stored at v2. With a conversion webhook (the conversion case) the two
 * versions differ in shape (dev/conversion/shapes.ts) and the proof also checks the
 * stored v2 shape of each object against what was created.
 */
import { getCrd } from '../../src/kube/crds.js'
import { Accept, ContentType, type KubeHttp } from '../../src/kube/http.js'
import { isRetryable, KubeApiError } from '../../src/kube/api-errors.js'
import { collectionPath, CRD_API, crdPath, objectPath, type ResourceRef } from '../../src/kube/paths.js'
import type { CustomResourceDefinition, ManagedFieldsEntry, PartialObjectMetadataList } from '../../src/kube/types.js'
import { etcdGet, etcdRangeValues } from '../controlplane/etcd.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { waitFor } from '../wait.js'

export const BENCH_NAMESPACES = ['bench-a', 'bench-b', 'bench-c', 'bench-d']
export const PLURAL = 'widgets'
export const KIND = 'Widget'

const commonSpecFields = {
  tier: { type: 'string', enum: ['frontend', 'backend', 'batch'] },
  resources: { type: 'object', properties: { cpu: { type: 'string' }, memory: { type: 'string' } } },
  env: { type: 'array', items: { type: 'object', properties: { name: { type: 'string' }, value: { type: 'string' } } } },
  ports: { type: 'array', items: { type: 'integer' } },
}

const schemaOf = (specFields: Record<string, unknown>) => ({
  openAPIV3Schema: {
    type: 'object',
    properties: {
      spec: { type: 'object', properties: { ...specFields, ...commonSpecFields } },
      status: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
    },
  },
})

/** v1 (and v2 when both versions have one shape): `spec: {replicas, image, ...}`. */
const specSchema = schemaOf({ replicas: { type: 'integer', minimum: 0 }, image: { type: 'string' } })

/**
 * v2 of the conversion case (dev/conversion/shapes.ts): `spec: {template: {replicas,
 * containers: [{image}]}, ...}`. The annotation that carries extra containers through v1
 * is metadata, so no schema needs it.
 */
const specSchemaV2Template = schemaOf({
  template: {
    type: 'object',
    properties: {
      replicas: { type: 'integer', minimum: 0 },
      containers: { type: 'array', items: { type: 'object', properties: { image: { type: 'string' } } } },
    },
  },
})

export interface BenchCrdOptions {
  /**
   * The CRD's `spec.conversion` (e.g. a conversion webhook's `conversion()`): v2 then has
   * the template shape and the API server converts v1 <-> v2 through it.
   */
  conversion?: Record<string, unknown>
}

export function benchCrd(group: string, options: BenchCrdOptions = {}): CustomResourceDefinition {
  const v2Schema = options.conversion ? specSchemaV2Template : specSchema
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${PLURAL}.${group}`, labels: { 'crd-migrator.io/bench': 'true' } },
    spec: {
      group,
      scope: 'Namespaced',
      names: { plural: PLURAL, kind: KIND, singular: 'widget', listKind: `${KIND}List` },
      versions: ['v1', 'v2'].map((name) => ({ name, served: true, storage: name === 'v1', schema: name === 'v2' ? v2Schema : specSchema })),
      ...(options.conversion ? { conversion: options.conversion } : {}),
    },
  }
}

/** About 450 bytes stored: what a small operator-managed resource looks like. */
export function widgetSpec(i: number): Record<string, unknown> {
  return {
    metadata: { labels: { app: `app-${i % 50}`, 'app.kubernetes.io/managed-by': 'bench' } },
    spec: {
      replicas: 1 + (i % 5),
      image: `registry.example.com/team-${i % 7}/service:1.${i % 30}.${i % 11}`,
      tier: ['frontend', 'backend', 'batch'][i % 3],
      resources: { cpu: `${100 + (i % 4) * 100}m`, memory: `${128 * (1 + (i % 4))}Mi` },
      env: [
        { name: 'LOG_LEVEL', value: 'info' },
        { name: 'SHARD', value: String(i % 16) },
      ],
      ports: [8080, 9090],
    },
  }
}

export function refOf(group: string, version: string): ResourceRef {
  return { group, version, plural: PLURAL, kind: KIND, namespaced: true }
}

/** Retries what the API server answers while a CRD's storage is being (re)initialized. */
export async function retrying<T>(what: string, f: () => Promise<T>, attempts = 200): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await f()
    } catch (err) {
      const retryable = isRetryable(err) || (err instanceof KubeApiError && err.status === 404 && i < 40)
      if (!retryable || i >= attempts) throw new Error(`${what}: ${(err as Error).message}`, { cause: err })
      const hinted = err instanceof KubeApiError && err.retryAfterSeconds !== undefined ? err.retryAfterSeconds * 1000 : 0
      await sleep(Math.min(1000, Math.max(hinted > 0 ? 100 : 0, 20 * i)))
    }
  }
}

export async function ensureNamespaces(http: KubeHttp): Promise<void> {
  for (const name of BENCH_NAMESPACES) {
    await http
      .request({ method: 'POST', path: '/api/v1/namespaces', body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name } } })
      .catch((err) => {
        if (!(err instanceof KubeApiError && err.status === 409)) throw err
      })
  }
}

export async function createBenchCrd(http: KubeHttp, group: string, options: BenchCrdOptions = {}): Promise<CustomResourceDefinition> {
  const manifest = benchCrd(group, options)
  await http.request({ method: 'POST', path: CRD_API, body: manifest })
  return waitFor(
    `CRD ${manifest.metadata.name} Established`,
    60_000,
    async () => {
      const crd = await getCrd(http, manifest.metadata.name)
      return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? crd : undefined
    },
    { everyMs: 50, timedOut: () => new Error(`CRD ${manifest.metadata.name} not Established after 60s`) },
  )
}

/**
 * Deletes a bench CRD (and with it its objects) and waits until it is gone. The
 * conversion case deletes each of its CRDs after the run: the API server keeps converting
 * the objects of a CRD that stays (each served version's watch cache lists every object
 * from etcd every 5 to 7.5 minutes for its consistency check), which would land in the
 * counts of a later run.
 */
export async function deleteBenchCrd(http: KubeHttp, group: string, timeoutMs = 180_000): Promise<void> {
  const name = `${PLURAL}.${group}`
  await http.request({ method: 'DELETE', path: crdPath(name) }).catch((err) => {
    if (!(err instanceof KubeApiError && err.status === 404)) throw err
  })
  await waitFor(
    `CRD ${name} gone`,
    timeoutMs,
    () =>
      getCrd(http, name).then(
        () => undefined,
        (err: unknown) => {
          if (err instanceof KubeApiError && err.status === 404) return true
          throw err
        },
      ),
    { everyMs: 200, timedOut: () => new Error(`CRD ${name} still there ${timeoutMs / 1000} s after its deletion`) },
  )
}

/** Runs `count` tasks with `concurrency` in flight (plain workers: no queue library overhead). */
export async function pool(count: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0
  const worker = async () => {
    while (next < count) await task(next++)
  }
  await Promise.all(Array.from({ length: Math.min(count, concurrency) }, worker))
}

/** Widget number `i` is `<BENCH_NAMESPACES[i % 4]>/w-<i, 6 digits>`. */
export function widgetName(i: number): { namespace: string; name: string } {
  return { namespace: BENCH_NAMESPACES[i % BENCH_NAMESPACES.length]!, name: `w-${String(i).padStart(6, '0')}` }
}

/** The number of a widget from its name (`w-000042` -> 42), or undefined for another name. */
export function widgetIndex(name: string): number | undefined {
  const m = /^w-(\d+)$/.exec(name)
  return m ? Number(m[1]) : undefined
}

/** Creates `count` widgets through v1, spread over the bench namespaces. */
export async function createWidgets(http: KubeHttp, group: string, count: number, concurrency = 64): Promise<void> {
  const ref = refOf(group, 'v1')
  // The first create after a CRD is established waits for its storage (about 2 s): do it
  // alone, then the rest in parallel.
  const one = async (i: number) => {
    const { namespace, name } = widgetName(i)
    await retrying(`create ${namespace}/${name}`, () =>
      http.request({
        method: 'POST',
        path: objectPath(ref, namespace, name).replace(/\/[^/]+$/, ''),
        body: { apiVersion: `${group}/v1`, kind: KIND, ...merge(widgetSpec(i), { metadata: { name, namespace } }) },
        accept: 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json',
      }),
    ).catch((err) => {
      if (/already exists/.test((err as Error).message)) return
      throw err
    })
  }
  if (count === 0) return
  await one(0)
  await pool(count - 1, concurrency, (i) => one(i + 1))
}

function merge(a: Record<string, unknown>, b: { metadata: Record<string, unknown> }): Record<string, unknown> {
  return { ...a, metadata: { ...(a.metadata as Record<string, unknown>), ...b.metadata } }
}

/**
 * Makes v2 the storage version, then waits until the API server really writes v2: a probe
 * object created after the flip must land in etcd as v2 (it is deleted again, so the
 * migrators see exactly the N objects).
 */
export async function flipStorageToV2(http: KubeHttp, etcdEndpoint: string, group: string): Promise<void> {
  const name = `${PLURAL}.${group}`
  const crd = await getCrd(http, name)
  const versions = crd.spec.versions.map((v) => ({ ...v, storage: v.name === 'v2' }))
  await http.request({ method: 'PATCH', path: crdPath(name), body: { spec: { versions } }, contentType: ContentType.mergePatch })
  const ref = refOf(group, 'v1')
  const namespace = BENCH_NAMESPACES[0]!
  let i = 0
  const writesV2 = async () => {
    const probe = `zz-storage-probe-${i++}`
    let tries = 0
    await retrying('create the storage probe', () =>
      http
        .request({
          method: 'POST',
          path: objectPath(ref, namespace, probe).replace(/\/[^/]+$/, ''),
          body: { apiVersion: `${group}/v1`, kind: KIND, metadata: { name: probe, namespace }, spec: { replicas: 0 } },
        })
        .catch((err: unknown) => {
          // A create tried again after its first try landed (a timeout on a loaded machine) finds it made.
          if (++tries > 1 && err instanceof KubeApiError && err.status === 409) return undefined
          throw err
        }),
    )
    const raw = await etcdGet(etcdEndpoint, `/registry/${group}/${PLURAL}/${namespace}/${probe}`)
    await retrying('delete the storage probe', () => http.request({ method: 'DELETE', path: objectPath(ref, namespace, probe) }))
    return (raw && (JSON.parse(raw.toString('utf8')) as { apiVersion?: string }).apiVersion === `${group}/v2`) || undefined
  }
  await waitFor(`the API server to write ${group} at v2`, 60_000, writesV2, {
    everyMs: 200,
    timedOut: () => new Error(`the API server still writes ${group} at v1 60 s after the storage flip`),
  })
}

export interface EtcdProof {
  /** Keys under /registry/<group>/<plural>/. */
  total: number
  /** apiVersion -> number of objects stored in it. */
  byApiVersion: Record<string, number>
  /**
   * With the v2 template shape checked (conversion case): objects whose stored v2 spec is
   * what the webhook makes of the created v1 spec (spec.template.containers[0].image and
   * spec.template.replicas equal the created image and replicas; no spec.image nor
   * spec.replicas left), and the first key that is not.
   */
  shape?: { checked: number; ok: number; firstBad: string | null }
  /** Every key parsed and every object is stored at <group>/v2 (in the v2 shape, when checked), and there are `expected` of them. */
  allV2: boolean
}

type Stored = { apiVersion?: string; metadata?: { name?: string }; spec?: Record<string, unknown> }

/** Why a stored v2 object is not the v2 template shape of the widget it was created as, or null when it is. */
export function v2ShapeProblem(stored: Stored): string | null {
  const i = widgetIndex(stored.metadata?.name ?? '')
  if (i === undefined) return `not a bench widget name: ${String(stored.metadata?.name)}`
  const created = widgetSpec(i).spec as { replicas: number; image: string }
  const spec = stored.spec ?? {}
  if ('replicas' in spec || 'image' in spec) return 'spec.replicas or spec.image still there (v1 shape)'
  const template = spec['template'] as { replicas?: unknown; containers?: Array<{ image?: unknown }> } | undefined
  const image = template?.containers?.[0]?.image
  if (image !== created.image) return `spec.template.containers[0].image is ${JSON.stringify(image)}, created as ${created.image}`
  if (template?.replicas !== created.replicas)
    return `spec.template.replicas is ${JSON.stringify(template?.replicas)}, created as ${created.replicas}`
  return null
}

/**
 * Reads every stored object of the resource from etcd, in pages, and counts apiVersions;
 * with `checkV2Shape`, also checks each object's stored spec ({@link v2ShapeProblem}).
 */
export async function proveStoredAtV2(
  etcdEndpoint: string,
  group: string,
  expected: number,
  options: { checkV2Shape?: boolean } = {},
): Promise<EtcdProof> {
  const prefix = `/registry/${group}/${PLURAL}/`
  const byApiVersion: Record<string, number> = {}
  const shape = options.checkV2Shape ? { checked: 0, ok: 0, firstBad: null as string | null } : undefined
  let total = 0
  for await (const kvs of etcdRangeValues(etcdEndpoint, prefix, 1000)) {
    for (const value of kvs) {
      total++
      let apiVersion = 'unparseable'
      let stored: Stored | undefined
      try {
        stored = JSON.parse(value.toString('utf8')) as Stored
        apiVersion = stored.apiVersion ?? 'none'
      } catch {
        /* counted as unparseable */
      }
      byApiVersion[apiVersion] = (byApiVersion[apiVersion] ?? 0) + 1
      if (shape) {
        shape.checked++
        const problem = stored ? v2ShapeProblem(stored) : 'unparseable'
        if (problem === null) shape.ok++
        else shape.firstBad ??= `${String(stored?.metadata?.name)}: ${problem}`
      }
    }
  }
  const allV2 = total === expected && byApiVersion[`${group}/v2`] === expected && (!shape || shape.ok === expected)
  return { total, byApiVersion, ...(shape ? { shape } : {}), allV2 }
}

/** `manager operation apiVersion[ subresource]` of a managedFields entry, the group left out of apiVersion. */
export function managedFieldsKey(e: ManagedFieldsEntry, group: string): string {
  const version = e.apiVersion?.startsWith(`${group}/`) ? e.apiVersion.slice(group.length + 1) : (e.apiVersion ?? '?')
  return `${e.manager ?? '?'} ${e.operation ?? '?'} ${version}${e.subresource ? ` (${e.subresource})` : ''}`
}

/**
 * How many objects carry each managedFields entry ({@link managedFieldsKey}; `(none)` for
 * objects without any), from metadata-only list pages through `version` (served from the
 * watch cache: no conversion).
 */
export async function managedFieldsCensus(http: KubeHttp, group: string, version: string): Promise<Record<string, number>> {
  const ref = refOf(group, version)
  const census: Record<string, number> = {}
  let token: string | undefined
  do {
    const page = await retrying('list for the managedFields census', () =>
      http.request<PartialObjectMetadataList>({
        method: 'GET',
        path: collectionPath(ref),
        query: { limit: 500, continue: token },
        accept: Accept.partialObjectMetadataList,
      }),
    )
    for (const item of page.body.items) {
      const entries = item.metadata.managedFields ?? []
      const keys = entries.length ? [...new Set(entries.map((e) => managedFieldsKey(e, group)))] : ['(none)']
      for (const k of keys) census[k] = (census[k] ?? 0) + 1
    }
    token = page.body.metadata?.continue || undefined
  } while (token)
  return census
}

export async function kubeVersion(http: KubeHttp): Promise<string> {
  return (await http.request<{ gitVersion: string }>({ method: 'GET', path: '/version' })).body.gitVersion
}
