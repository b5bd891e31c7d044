/**
 * Stashed copies, as pure decisions: which embedded object a stash holds and at which
 * version, the new stash that replaces it, and the patch that moves a referrer over.
 */
import { createHash } from 'node:crypto'
import jsonpatch, { type Operation } from 'fast-json-patch'
import { isObj, type Obj } from '../../lossless/content-diff.js'
import type { ObjectMeta, PartialObjectMetadata } from '../../../kube/types.js'
import type { StashRule } from './rules.js'

export interface StashObject extends Obj, PartialObjectMetadata {
  metadata: ObjectMeta & { ownerReferences?: unknown[]; [field: string]: unknown }
}

/** The value at a JSON pointer, or undefined (never throws on a missing path). */
export function valueAt(document: unknown, pointer: string): unknown {
  let current: unknown = document
  for (const raw of pointer.split('/').slice(1)) {
    if (!isObj(current)) return undefined
    current = current[jsonpatch.unescapePathComponent(raw)]
  }
  return current
}

interface Embedded {
  object: Obj
  version: string
  kind: string
}

/** The embedded object, when it belongs to `group` (and, when given, has one of `kinds`). */
export function embeddedOf(stash: StashObject, rule: StashRule, kinds?: readonly string[]): Embedded | undefined {
  const object = valueAt(stash, rule.source.dataPointer)
  if (!isObj(object)) return undefined
  const apiVersion = object['apiVersion']
  const kind = object['kind']
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return undefined
  const slash = apiVersion.lastIndexOf('/')
  if (slash < 0 || apiVersion.slice(0, slash) !== rule.group) return undefined
  if (kinds && !kinds.includes(kind)) return undefined
  return { object, version: apiVersion.slice(slash + 1), kind }
}

/** The replacement's name: deterministic (a run that died finds it again), within 253 characters (a hash keeps long names unique). */
export function newStashName(name: string, version: string): string {
  const candidate = `${name}-${version}`
  if (candidate.length <= 253) return candidate
  const hash = createHash('sha256').update(candidate).digest('hex').slice(0, 10)
  return `${name.slice(0, 253 - version.length - hash.length - 2)}-${hash}-${version}`
}

/**
 * The new stash: the old one's namespace, labels (the version label anew), annotations, owners and
 * other fields (e.g. a ControllerRevision's `revision`), the converted object at the data pointer.
 */
export function newStashBody(old: StashObject, converted: Obj, version: string, rule: StashRule): StashObject {
  const { metadata, ...rest } = structuredClone(old)
  delete rest['status']
  const labels = { ...(metadata.labels ?? {}) }
  if (rule.versionLabel) labels[rule.versionLabel] = version
  const body: StashObject = {
    ...rest,
    metadata: {
      name: newStashName(metadata.name, version),
      ...(metadata.namespace ? { namespace: metadata.namespace } : {}),
      ...(Object.keys(labels).length ? { labels } : {}),
      ...(metadata.annotations ? { annotations: metadata.annotations } : {}),
      ...(metadata.ownerReferences ? { ownerReferences: metadata.ownerReferences } : {}),
    },
  }
  jsonpatch.applyOperation(body, { op: 'replace', path: rule.source.dataPointer, value: converted })
  return body
}

export function pointersAt(referrer: Obj, pointers: readonly string[], name: string): string[] {
  return pointers.filter((p) => valueAt(referrer, p) === name)
}

/** Moves one pointer from the old stash to the new one, only if it still names the old one. */
export function repointPatch(pointer: string, from: string, to: string): Operation[] {
  return [
    { op: 'test', path: pointer, value: from },
    { op: 'replace', path: pointer, value: to },
  ]
}
