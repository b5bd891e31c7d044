/**
 * Defensive readers of a review's CRD objects, trusted to have no shape: each returns what it
 * could not read as a string instead of throwing, and never recurses, so a hostile review
 * cannot overflow the stack or spin (test/integration/fuzz-webhook.test.ts).
 */
import { isStateAnnotation } from '../state/crd-state.js'
import { STORAGE_MIGRATING } from '../kube/builtin-migrations.js'
import type { AdmissionInput } from './admission.js'
import { isObject, type JsonObject } from './json.js'

/** request.name, else metadata.name of the new or old object. */
export function crdNameOf(input: Pick<AdmissionInput, 'name' | 'object' | 'oldObject'>): string | undefined {
  if (input.name) return input.name
  for (const candidate of [input.object, input.oldObject]) {
    if (isObject(candidate) && isObject(candidate['metadata'])) {
      const name = candidate['metadata']['name']
      if (typeof name === 'string' && name !== '') return name
    }
  }
  return undefined
}

/** Why the object's annotation `key` cannot be read (no metadata, annotations or value of the wrong type), if it cannot. */
export function unreadableAnnotation(crd: JsonObject, key: string): string | undefined {
  const metadata = crd['metadata']
  if (!isObject(metadata)) {
    return metadata === undefined || metadata === null ? 'has no metadata' : 'has metadata that is not an object'
  }
  const annotations = metadata['annotations']
  if (annotations === undefined || annotations === null) return undefined
  if (!isObject(annotations)) return 'has metadata.annotations that is not an object'
  if (Object.hasOwn(annotations, key) && typeof annotations[key] !== 'string') return `has an annotation ${key} that is not a string`
  return undefined
}

/** Stands for an annotation value that is not a string; never the same as anything (see sameValue). */
export const NOT_A_STRING = '\u0000(not a string)'

export function annotationsOf(crd: JsonObject): JsonObject | undefined {
  const metadata = crd['metadata']
  if (!isObject(metadata)) return undefined
  const annotations = metadata['annotations']
  return isObject(annotations) ? annotations : undefined
}

export function annotationValue(crd: JsonObject, key: string): string | undefined {
  const annotations = annotationsOf(crd)
  if (annotations === undefined || !Object.hasOwn(annotations, key)) return undefined
  return asAnnotationValue(annotations[key])
}

// Annotation values are strings in any object the API server accepted. Anything else is
// not looked into (no JSON.stringify: a deeply nested value would overflow the stack,
// found by the fuzz test) and counts as changed whatever it is compared with.
const asAnnotationValue = (value: unknown): string => (typeof value === 'string' ? value : NOT_A_STRING)

export function stateAnnotations(crd: JsonObject): Map<string, string> {
  const out = new Map<string, string>()
  const annotations = annotationsOf(crd)
  if (annotations === undefined) return out
  for (const key of Object.keys(annotations)) {
    if (isStateAnnotation(key)) out.set(key, asAnnotationValue(annotations[key]))
  }
  return out
}

export function sameValue(a: string | undefined, b: string | undefined): boolean {
  return a === b && a !== NOT_A_STRING
}

/** The versions of spec.versions that `wanted` picks, by name, or why they cannot be read. */
function versionsBy(crd: JsonObject, wanted: (version: JsonObject) => boolean): Map<string, JsonObject> | string {
  const spec = crd['spec']
  if (spec === undefined) return new Map()
  if (!isObject(spec)) return 'has a spec that is not an object'
  const versions = spec['versions']
  // A CRD without versions has no storage version; the API server rejects it anyway.
  if (versions === undefined || versions === null) return new Map()
  if (!Array.isArray(versions)) return 'has spec.versions that is not an array'
  const byName = new Map<string, JsonObject>()
  for (const [index, version] of versions.entries()) {
    if (!isObject(version)) return `has spec.versions[${index}] that is not an object`
    if (!wanted(version)) continue
    const name = version['name']
    if (typeof name !== 'string') return `has spec.versions[${index}].name that is not a string`
    byName.set(name, version)
  }
  return byName
}

/** Names of the versions with `storage: true`, or a description of why they cannot be read. */
export function storageVersions(crd: JsonObject): Set<string> | string {
  const storage = versionsBy(crd, (version) => version['storage'] === true)
  return typeof storage === 'string' ? storage : new Set(storage.keys())
}

/** Whether each version of spec.versions is served (`served: true`), or why they cannot be read. */
export function servedVersions(crd: JsonObject): Map<string, boolean> | string {
  const versions = versionsBy(crd, () => true)
  return typeof versions === 'string' ? versions : new Map([...versions].map(([name, version]) => [name, version['served'] === true]))
}

/** status.storedVersions as a set, or a description of why it cannot be read. */
export function storedVersions(crd: JsonObject): Set<string> | string {
  const status = crd['status']
  if (status === undefined || status === null) return new Set()
  if (!isObject(status)) return 'has a status that is not an object'
  const stored = status['storedVersions']
  if (stored === undefined || stored === null) return new Set()
  if (!Array.isArray(stored)) return 'has status.storedVersions that is not an array'
  const names = new Set<string>()
  for (const [index, name] of stored.entries()) {
    if (typeof name !== 'string') return `has status.storedVersions[${index}] that is not a string`
    names.add(name)
  }
  return names
}

export function specField(crd: JsonObject, field: string): unknown {
  const spec = crd['spec']
  return isObject(spec) ? spec[field] : undefined
}

/** The statuses of the StorageMigrating conditions, in order (a condition list that cannot be read has none). */
export function storageMigratingStatuses(crd: JsonObject): string[] {
  const status = crd['status']
  if (!isObject(status)) return []
  const conditions = status['conditions']
  if (!Array.isArray(conditions)) return []
  return conditions.filter((c) => isObject(c) && c['type'] === STORAGE_MIGRATING).map((c) => asAnnotationValue((c as JsonObject)['status']))
}

/** The object's StorageMigrating condition is True (a condition list that cannot be read counts as not). */
export function builtinMigrating(crd: JsonObject): boolean {
  return storageMigratingStatuses(crd).includes('True')
}

/**
 * Deep equality of two JSON values (key order ignored). Iterative, with a budget: a value
 * nested or sized past what a CRD can hold counts as changed, so a hostile review cannot
 * overflow the stack (the fuzz test sends 200,000 levels) or spin.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  const stack: Array<[unknown, unknown]> = [[a, b]]
  let budget = 200_000
  while (stack.length > 0) {
    if (--budget < 0) return false
    const [x, y] = stack.pop()!
    if (x === y) continue
    if (Array.isArray(x)) {
      if (!Array.isArray(y) || x.length !== y.length) return false
      for (let i = 0; i < x.length; i++) stack.push([x[i], y[i]])
      continue
    }
    if (isObject(x)) {
      if (!isObject(y)) return false
      const keys = Object.keys(x)
      if (keys.length !== Object.keys(y).length) return false
      for (const k of keys) {
        if (!Object.hasOwn(y, k)) return false
        stack.push([x[k], y[k]])
      }
      continue
    }
    return false
  }
  return true
}

export function sameSet(a: Set<string>, b: Set<string>): boolean {
  return a.size === b.size && [...a].every((x) => b.has(x))
}
