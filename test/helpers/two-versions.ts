/**
 * A CRD with two versions, v1 and v2, each with its own schema, and objects created at v1
 * (so etcd holds them at v1): the lossless tests' subject. Read back from etcd itself.
 */
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import type { KubeHttp } from '../../src/kube/http.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { createCrd, createNamespace, createObjects, refFor, setStorageVersion } from './cluster.js'
import { uniqueGroup, uniqueName } from './controlplane.js'

export type Obj = Record<string, unknown>

/** A structural schema whose spec has these properties. */
export const specSchema = (properties: Record<string, Obj>) => ({
  openAPIV3Schema: { type: 'object', properties: { spec: { type: 'object', properties } } },
})
/** A schema that keeps whatever it is given. */
export const OPEN_SCHEMA = { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } }

export interface TwoVersions {
  crd: CustomResourceDefinition
  group: string
  ns: string
  name: string
}

/**
 * `widgets.<unique group>` with v1 (storage) and v2 of these schemas, `count` objects made
 * by `body` at v1; with `flip`, storage then moves to v2 (waited on until the API server writes v2).
 */
export async function twoVersions(
  http: KubeHttp,
  prefix: string,
  schemas: { v1: Obj; v2: Obj },
  count: number,
  body: (i: number) => Obj,
  options: { conversion?: Obj | undefined; flip?: boolean } = {},
): Promise<TwoVersions> {
  const group = uniqueGroup(prefix)
  const ns = uniqueName(prefix)
  await createNamespace(http, ns)
  let crd = await createCrd(http, {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `widgets.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { plural: 'widgets', kind: 'Widget', singular: 'widget', listKind: 'WidgetList' },
      versions: [
        { name: 'v1', served: true, storage: true, schema: schemas.v1 },
        { name: 'v2', served: true, storage: false, schema: schemas.v2 },
      ],
      ...(options.conversion ? { conversion: options.conversion } : {}),
    },
  } as unknown as CustomResourceDefinition)
  await createObjects(http, refFor(crd, 'v1'), [ns], count, body)
  if (options.flip) crd = await setStorageVersion(http, crd.metadata.name, 'v2')
  return { crd, group, ns, name: crd.metadata.name }
}

/** Every object of the CRD as etcd holds it, by name. */
export async function etcdWidgets(cp: ControlPlane, group: string): Promise<Map<string, Obj>> {
  const out = new Map<string, Obj>()
  for (const key of await cp.listEtcdKeys(`/registry/${group}/widgets/`)) {
    const raw = await cp.readEtcdKey(key)
    if (raw) out.set(key.slice(key.lastIndexOf('/') + 1), JSON.parse(raw.toString('utf8')) as Obj)
  }
  return out
}

export const specOf = (o: Obj | undefined) => (o?.['spec'] ?? {}) as Obj
/** The versions (v1, v2) the objects are stored at. */
export const storedAt = (objects: Map<string, Obj>) => new Set([...objects.values()].map((o) => String(o['apiVersion']).split('/')[1]))
