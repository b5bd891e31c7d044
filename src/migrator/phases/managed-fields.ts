import jsonpatch, { type Operation } from 'fast-json-patch'
import { conversionStrategy } from '../../kube/conversion.js'
import type { CustomResourceDefinition, ManagedFieldsEntry } from '../../kube/types.js'
import { CrdMigratorError } from '../../errors.js'
import { isObj } from '../lossless/content-diff.js'

export interface ManagedFieldsPolicy {
  group: string
  servedVersions: ReadonlySet<string>
  storageVersion: string
  /**
   * Also move entries of served non-storage versions to storage (fluxcd/flux2#5715). Off by
   * default: users may still apply with a served version, and its entries are what apply needs.
   */
  rewriteServedNonStorage: boolean
  /**
   * Relabel entries of unserved versions to storage instead of removing them: conversion `None` only,
   * where the fields are the same in every version (docs/migrate-one-crd.md#one-migration-step-by-step, step 4).
   */
  relabelUnserved: boolean
  now?: () => Date
}

interface ManagedFieldsCleanup {
  changed: boolean
  /** Entries of unserved versions dropped (relabelUnserved off). */
  removed: ManagedFieldsEntry[]
  /** Entries of served non-storage versions moved to the storage version (rewriteServedNonStorage). */
  rewritten: number
  /** Entries of unserved versions moved to the storage version (relabelUnserved), before folding. */
  relabelled: number
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
    out[k] = isObj(existing) && isObj(v) ? mergeFieldSets(existing, v) : v
  }
  return out
}

/** Manager, operation, subresource and version: the API server keeps one entry per identity. */
export const entryIdentity = (e: ManagedFieldsEntry): string =>
  JSON.stringify([e.manager ?? '', e.operation ?? '', e.subresource ?? '', e.apiVersion ?? ''])

/**
 * Entries of this group at an unserved version: server-side apply converts every entry to its
 * version and fails on one that cannot be served (kubernetes/kubernetes#111937). Relabelled to
 * storage (what the API server's `None` converter does) or removed; other groups never touched.
 */
export function cleanManagedFields(entries: readonly ManagedFieldsEntry[] | undefined, policy: ManagedFieldsPolicy): ManagedFieldsCleanup {
  const list = entries ?? []
  const removed: ManagedFieldsEntry[] = []
  const kept: ManagedFieldsEntry[] = []
  let rewritten = 0
  let relabelled = 0
  const storageApiVersion = `${policy.group}/${policy.storageVersion}`
  for (const entry of list) {
    const version = versionOf(entry.apiVersion, policy.group)
    if (version !== undefined && !policy.servedVersions.has(version)) {
      if (!policy.relabelUnserved) {
        removed.push(entry)
      } else if (version === policy.storageVersion) {
        // An unserved storage version: there is nothing better to relabel to, and counting
        // this as a change would make the object look unclean forever.
        kept.push(entry)
      } else {
        kept.push({ ...entry, apiVersion: storageApiVersion })
        relabelled++
      }
    } else if (version !== undefined && policy.rewriteServedNonStorage && version !== policy.storageVersion) {
      kept.push({ ...entry, apiVersion: storageApiVersion })
      rewritten++
    } else {
      kept.push(entry)
    }
  }
  // A rewrite or relabel can leave two entries for one manager/operation/subresource and version,
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
      apiVersion: storageApiVersion,
      time: (policy.now?.() ?? new Date()).toISOString().replace(/\.\d{3}Z$/, 'Z'),
      fieldsType: 'FieldsV1',
      fieldsV1: { 'f:metadata': { 'f:name': {} } },
    })
    seeded = true
  }
  return { changed: removed.length > 0 || rewritten > 0 || relabelled > 0, removed, rewritten, relabelled, seeded, managedFields }
}

function latest(a: string | undefined, b: string | undefined): string | undefined {
  if (a === undefined) return b
  if (b === undefined) return a
  return a > b ? a : b
}

/** An entry's version the cleanup leaves by design (this group, served, not storage); the caller decides on rewriteServedNonStorage. */
export function servedKeptVersion(
  entry: ManagedFieldsEntry,
  policy: Pick<ManagedFieldsPolicy, 'group' | 'servedVersions' | 'storageVersion'>,
): string | undefined {
  const version = versionOf(entry.apiVersion, policy.group)
  return version !== undefined && version !== policy.storageVersion && policy.servedVersions.has(version) ? version : undefined
}

/** The served non-storage versions an object keeps entries at after the cleanup: what `check --drop` still counts. */
export function servedKeptVersions(entries: readonly ManagedFieldsEntry[] | undefined, policy: ManagedFieldsPolicy): string[] {
  if (policy.rewriteServedNonStorage) return []
  const versions = (entries ?? []).map((entry) => servedKeptVersion(entry, policy)).filter((v) => v !== undefined)
  return [...new Set(versions)].sort()
}

/** Whether an object needs the cleanup at all; cheap enough to run on every listed item. */
export function needsManagedFieldsCleanup(entries: readonly ManagedFieldsEntry[] | undefined, policy: ManagedFieldsPolicy): boolean {
  return cleanManagedFields(entries, policy).changed
}

/**
 * The JSON Patch swapping managedFields, carrying the resourceVersion read: an optimistic-
 * concurrency precondition, so a concurrent writer gets 409 rather than us overwriting its
 * ownership. (Not a `test` op: a failed test answers a bare 422 like any other refusal.)
 */
export function managedFieldsPatch(resourceVersion: string, managedFields: ManagedFieldsEntry[]): Operation[] {
  const ops: Operation[] = [
    { op: 'replace', path: '/metadata/resourceVersion', value: resourceVersion },
    { op: 'replace', path: '/metadata/managedFields', value: managedFields },
  ]
  const error = jsonpatch.validate(ops, { metadata: { resourceVersion, managedFields: [] } })
  if (error) throw new CrdMigratorError('CRDM_INTERNAL', `invalid managedFields patch: ${error.message}`)
  return ops
}

/** A CRD's cleanup policy; its conversion strategy decides relabel (`None`) or remove (`Webhook`). */
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
    relabelUnserved: conversionStrategy(crd) === 'None',
  }
}
