import jsonpatch, { type Operation } from 'fast-json-patch'
import type { CustomResourceDefinition, ManagedFieldsEntry } from '../kube/types.js'
import { CrdMigratorError } from '../errors.js'

export interface ManagedFieldsPolicy {
  group: string
  servedVersions: ReadonlySet<string>
  storageVersion: string
  /**
   * Also move entries of still-served, non-storage versions to the storage version
   * (fluxcd/flux2#5715). Off by default: while a version is served, users may apply with
   * it and its entries are what the apply needs.
   */
  rewriteServedNonStorage: boolean
  now?: () => Date
}

export interface ManagedFieldsCleanup {
  changed: boolean
  removed: ManagedFieldsEntry[]
  rewritten: number
  seeded: boolean
  managedFields: ManagedFieldsEntry[]
}

function versionOf(apiVersion: string | undefined, group: string): string | undefined {
  if (!apiVersion?.startsWith(`${group}/`)) return undefined
  return apiVersion.slice(group.length + 1)
}

/** Recursively unions two fieldsV1 trees (`{"f:spec": {"f:a": {}}}`). */
export function mergeFieldSets(a: Record<string, unknown> = {}, b: Record<string, unknown> = {}): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a }
  for (const [k, v] of Object.entries(b)) {
    const existing = out[k]
    out[k] = isPlainObject(existing) && isPlainObject(v) ? mergeFieldSets(existing, v) : v
  }
  return out
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

const entryIdentity = (e: ManagedFieldsEntry): string =>
  JSON.stringify([e.manager ?? '', e.operation ?? '', e.subresource ?? '', e.apiVersion ?? ''])

/**
 * Decides which managedFields entries must go: those whose apiVersion belongs to this
 * CRD's group but is no longer served. Server-side apply converts every entry to its
 * version, and fails on one that cannot be served (kubernetes/kubernetes#111937).
 */
export function cleanManagedFields(entries: readonly ManagedFieldsEntry[] | undefined, policy: ManagedFieldsPolicy): ManagedFieldsCleanup {
  const list = entries ?? []
  const removed: ManagedFieldsEntry[] = []
  const kept: ManagedFieldsEntry[] = []
  let rewritten = 0
  for (const entry of list) {
    const version = versionOf(entry.apiVersion, policy.group)
    if (version !== undefined && !policy.servedVersions.has(version)) {
      removed.push(entry)
    } else if (version !== undefined && policy.rewriteServedNonStorage && version !== policy.storageVersion) {
      kept.push({ ...entry, apiVersion: `${policy.group}/${policy.storageVersion}` })
      rewritten++
    } else {
      kept.push(entry)
    }
  }
  // A rewrite can leave two entries for one manager/operation/subresource and version,
  // which the API server rejects; fold them into one whose field set is the union.
  const merged = new Map<string, ManagedFieldsEntry>()
  for (const entry of kept) {
    const key = entryIdentity(entry)
    const prior = merged.get(key)
    merged.set(
      key,
      prior ? { ...prior, fieldsV1: mergeFieldSets(prior.fieldsV1, entry.fieldsV1), time: latest(prior.time, entry.time) } : entry,
    )
  }
  const managedFields = [...merged.values()]
  let seeded = false
  if (removed.length > 0 && managedFields.length === 0) {
    // An empty list makes the API server rebuild ownership from scratch, attributing every
    // field to the next writer; CAPI seeds one minimal entry instead, owned by the first
    // removed entry's manager, so ownership stays explicit.
    const first = removed[0]!
    managedFields.push({
      manager: first.manager ?? 'crd-migrator',
      operation: first.operation ?? 'Update',
      apiVersion: `${policy.group}/${policy.storageVersion}`,
      time: (policy.now?.() ?? new Date()).toISOString().replace(/\.\d{3}Z$/, 'Z'),
      fieldsType: 'FieldsV1',
      fieldsV1: { 'f:metadata': { 'f:name': {} } },
    })
    seeded = true
  }
  return { changed: removed.length > 0 || rewritten > 0, removed, rewritten, seeded, managedFields }
}

function latest(a: string | undefined, b: string | undefined): string | undefined {
  if (a === undefined) return b
  if (b === undefined) return a
  return a > b ? a : b
}

/** Whether an object needs the cleanup at all; cheap enough to run on every listed item. */
export function needsManagedFieldsCleanup(entries: readonly ManagedFieldsEntry[] | undefined, policy: ManagedFieldsPolicy): boolean {
  return cleanManagedFields(entries, policy).changed
}

/**
 * The JSON Patch that swaps the managedFields list, guarded by a `test` of the
 * resourceVersion so a concurrent writer makes the API server refuse it (422) rather
 * than us overwriting ownership recorded after our read.
 */
export function managedFieldsPatch(resourceVersion: string, managedFields: ManagedFieldsEntry[]): Operation[] {
  const ops: Operation[] = [
    { op: 'test', path: '/metadata/resourceVersion', value: resourceVersion },
    { op: 'replace', path: '/metadata/managedFields', value: managedFields },
  ]
  const error = jsonpatch.validate(ops, { metadata: { resourceVersion, managedFields: [] } })
  if (error) throw new CrdMigratorError('CRDM_INTERNAL', `invalid managedFields patch: ${error.message}`)
  return ops
}

export function managedFieldsPolicy(
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: { rewriteServedManagedFields: boolean },
): ManagedFieldsPolicy {
  return {
    group: crd.spec.group,
    servedVersions: new Set(crd.spec.versions.filter((v) => v.served).map((v) => v.name)),
    storageVersion,
    rewriteServedNonStorage: settings.rewriteServedManagedFields,
  }
}
