/**
 * Two shapes of one resource, for a CRD whose versions really differ (the case a
 * conversion webhook exists for):
 *
 *   v1  spec: { replicas, image, ...rest }
 *   v2  spec: { template: { replicas, containers: [{ image }, ...] }, ...rest }
 *
 * Lossless both ways: v1 has room for one image, so the containers after the first ride
 * along in an annotation while an object is read as v1, and come back when it is read as
 * v2 again. Fields either version does not know are kept as they are.
 */

export const EXTRA_CONTAINERS_ANNOTATION = 'conversion.crd-migrator.dev/extra-containers'

type Obj = Record<string, unknown>

interface Container {
  image?: unknown
  [field: string]: unknown
}

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)

/** `group/version` → version. */
export function versionOf(apiVersion: string): string {
  return apiVersion.slice(apiVersion.lastIndexOf('/') + 1)
}

export function v1ToV2(spec: Obj): Obj {
  const { replicas, image, ...rest } = spec
  const template: Obj = {}
  if (replicas !== undefined) template['replicas'] = replicas
  if (image !== undefined) template['containers'] = [{ image }]
  return Object.keys(template).length > 0 ? { ...rest, template } : rest
}

export function v2ToV1(spec: Obj): { spec: Obj; extraContainers: Container[] } {
  const { template, ...rest } = spec
  const out: Obj = { ...rest }
  let extra: Container[] = []
  if (isObj(template)) {
    if (template['replicas'] !== undefined) out['replicas'] = template['replicas']
    const containers = Array.isArray(template['containers']) ? (template['containers'] as Container[]) : []
    if (containers[0]?.image !== undefined) out['image'] = containers[0].image
    extra = containers.slice(1)
  }
  return { spec: out, extraContainers: extra }
}

/** Which shape a version has: v2 and later the template shape, earlier ones (v1, v1beta1, v0…) the flat one. */
export function shapeOf(version: string): 'v1' | 'v2' {
  const major = /^v(\d+)/.exec(version)
  return major && Number(major[1]) >= 2 ? 'v2' : 'v1'
}

/** Converts one object to `desiredApiVersion` (same group). Objects already in that shape only change apiVersion. */
export function convertObject(object: Obj, desiredApiVersion: string): Obj {
  const from = shapeOf(versionOf(String(object['apiVersion'])))
  const to = shapeOf(versionOf(desiredApiVersion))
  if (from === to) return { ...object, apiVersion: desiredApiVersion }
  const metadata: Obj = isObj(object['metadata']) ? { ...object['metadata'] } : {}
  const annotations: Record<string, string> = isObj(metadata['annotations'])
    ? { ...(metadata['annotations'] as Record<string, string>) }
    : {}
  const spec = isObj(object['spec']) ? object['spec'] : undefined
  const out: Obj = { ...object, apiVersion: desiredApiVersion }
  if (from === 'v1' && to === 'v2') {
    if (spec) {
      const converted = v1ToV2(spec)
      const extra = annotations[EXTRA_CONTAINERS_ANNOTATION]
      if (extra !== undefined) {
        const template = (converted['template'] as Obj | undefined) ?? {}
        const containers = (template['containers'] as Container[] | undefined) ?? []
        converted['template'] = { ...template, containers: [...containers, ...(JSON.parse(extra) as Container[])] }
      }
      out['spec'] = converted
    }
    delete annotations[EXTRA_CONTAINERS_ANNOTATION]
  } else {
    if (spec) {
      const converted = v2ToV1(spec)
      out['spec'] = converted.spec
      if (converted.extraContainers.length > 0) annotations[EXTRA_CONTAINERS_ANNOTATION] = JSON.stringify(converted.extraContainers)
    }
  }
  if (Object.keys(annotations).length > 0) metadata['annotations'] = annotations
  else delete metadata['annotations']
  out['metadata'] = metadata
  return out
}
