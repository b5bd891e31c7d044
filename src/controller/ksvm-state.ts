/**
 * KSVM's StorageVersionMigration (migration.k8s.io/v1alpha1), the object KEP-2855 is written
 * around: its shape, and its conditions as KSVM reports them, as pure functions; and the one
 * read both controllers make of it.
 */
import { ERROR_CODES, errorCode, errorMessage, type ErrorCode } from '../errors.js'
import type { MigrationResult } from '../migrator/context.js'
import { unlessNotFound } from '../kube/api-errors.js'
import type { KubeHttp } from '../kube/http.js'
import { collectionPath, objectPath, type ResourceRef } from '../kube/paths.js'
import type { ResourceName } from '../kube/resources.js'
import { sanitizeText } from '../sanitize.js'

const KSVM_GROUP = 'migration.k8s.io'
const KSVM_VERSION = 'v1alpha1'
export const KSVM_API_VERSION = `${KSVM_GROUP}/${KSVM_VERSION}`
/** A resource of KSVM's API (all cluster-scoped). */
export const ksvmResource = (plural: string, kind: string): ResourceRef => ({
  group: KSVM_GROUP,
  version: KSVM_VERSION,
  plural,
  kind,
  namespaced: false,
})
export const KSVM_RESOURCE = ksvmResource('storageversionmigrations', 'StorageVersionMigration')
export const KSVM_API = collectionPath(KSVM_RESOURCE)

export type SvmConditionType = 'Running' | 'Succeeded' | 'Failed'

export interface SvmCondition {
  type: SvmConditionType
  status: 'True' | 'False' | 'Unknown'
  lastUpdateTime?: string
  reason?: string
  message?: string
}

export interface StorageVersionMigration {
  apiVersion?: string
  kind?: string
  metadata: { name: string; uid?: string; resourceVersion?: string; creationTimestamp?: string; deletionTimestamp?: string }
  spec?: { resource?: { group?: string; version?: string; resource?: string }; continueToken?: string }
  status?: { conditions?: SvmCondition[] }
}

export async function getStorageVersionMigration(http: KubeHttp, name: string): Promise<StorageVersionMigration | undefined> {
  return (await unlessNotFound(http.request<StorageVersionMigration>({ method: 'GET', path: objectPath(KSVM_RESOURCE, undefined, name) })))
    ?.body
}

/** A StorageVersionMigration of one resource, as KSVM users and its trigger create it. */
export function storageVersionMigration(
  metadata: { name: string } | { generateName: string },
  resource: { group: string; version: string; resource: string },
): StorageVersionMigration {
  return {
    apiVersion: KSVM_API_VERSION,
    kind: 'StorageVersionMigration',
    metadata: { name: '', ...metadata },
    spec: { resource: { group: resource.group, version: resource.version, resource: resource.resource } },
  }
}

export function hasCondition(svm: StorageVersionMigration, ...types: readonly SvmConditionType[]): boolean {
  return (svm.status?.conditions ?? []).some((c) => types.includes(c.type) && c.status === 'True')
}

/** Finished objects are never run again (KSVM's rule: create a new object to migrate again). */
export const isFinished = (svm: StorageVersionMigration): boolean => hasCondition(svm, 'Succeeded', 'Failed')

/** The resource an object names, or why it names none. */
export function targetOf(svm: StorageVersionMigration): { resource: ResourceName } | { invalid: string } {
  const r = svm.spec?.resource
  if (!r?.resource) return { invalid: 'spec.resource.resource is empty' }
  return { resource: { group: r.group ?? '', version: r.version || undefined, resource: r.resource } }
}

/**
 * The one current condition (KSVM keeps one too). Its message quotes the creator's spec and the
 * API server's or a webhook's answer, so it is cleaned as outside text (sanitize.ts) before it
 * reaches `kubectl get -o yaml` or `describe`.
 */
export function condition(
  type: SvmConditionType,
  status: SvmCondition['status'],
  reason: string,
  message: string,
  now = new Date(),
): SvmCondition {
  return { type, status, reason, message: sanitizeText(message), lastUpdateTime: metaTime(now) }
}

/** metav1.Time's wire form: RFC 3339 in UTC, whole seconds. */
export function metaTime(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z')
}

/**
 * An error finding the object's resource: Failed when asking again cannot help, undefined when
 * it may (retried). CRDM_FORBIDDEN needs an RBAC change, so the object fails like any other and
 * a new one migrates once granted.
 */
export function resolutionFailure(err: unknown, now = new Date()): SvmCondition | undefined {
  const code = errorCode(err)
  if (code === 'CRDM_RESOURCE_NOT_FOUND') return condition('Failed', 'True', code, errorMessage(err), now)
  if (code === 'CRDM_FORBIDDEN')
    return condition(
      'Failed',
      'True',
      code,
      `the migrator may not read what it needs to find the resource: ${errorMessage(err)}; once granted, create a new StorageVersionMigration (a Failed one is not retried)`,
      now,
    )
  return undefined
}

/**
 * A finished run as the object's condition: Succeeded, Failed for good, or still pending
 * (Blocked, or another run holds the freeze) as Running=False with the reason, retried later.
 */
export function conditionForResult(result: MigrationResult, now = new Date()): { condition: SvmCondition; finished: boolean } {
  if (result.outcome === 'Succeeded')
    return { condition: condition('Succeeded', 'True', 'Succeeded', succeededWithoutCounts(result), now), finished: true }
  if (result.outcome === 'Skipped' && result.skipReason === 'up-to-date')
    return { condition: condition('Succeeded', 'True', 'UpToDate', result.reason, now), finished: true }
  if (result.outcome === 'Blocked' && result.errorCode !== 'CRDM_DATA_LOSS')
    return { condition: condition('Running', 'False', 'ConversionWebhookUnavailable', result.reason, now), finished: false }
  if (
    result.outcome === 'Skipped' &&
    (result.skipReason === 'in-progress' || result.skipReason === 'frozen-by-another' || result.skipReason === 'builtin-migration')
  )
    return { condition: condition('Running', 'False', 'Waiting', result.reason, now), finished: false }
  const reason = result.errorCode ?? (result.outcome === 'Skipped' ? 'NotMigratable' : 'Failed')
  const message = result.errorCode && COUNTED_BY_OBJECT.has(result.errorCode) ? failedWithoutCounts(result.errorCode) : result.reason
  return { condition: condition('Failed', 'True', reason, message, now), finished: true }
}

/** Where the counts are, for the conditions that leave them out. */
const COUNTS_ELSEWHERE =
  "how many objects is not said here (whoever created this object may not be allowed to list them): see the migrator's log, " +
  'or run crd-migrator migrate or plan with credentials that may list them'

/**
 * Conditions never count objects: the creator may not be allowed to list them, and the API server records no creator
 * to ask (SECURITY.md, "What a StorageVersionMigration's creator learns"). These codes' reasons count or name objects.
 */
const COUNTED_BY_OBJECT: ReadonlySet<ErrorCode> = new Set([
  'CRDM_OBJECTS_FAILED',
  'CRDM_CONVERSION_REFUSED',
  'CRDM_STASH_FAILED',
  'CRDM_DATA_LOSS',
  'CRDM_UNFREEZE_FAILED',
])

function failedWithoutCounts(code: ErrorCode): string {
  return `${ERROR_CODES[code]}; ${COUNTS_ELSEWHERE}`
}

/** A run that Succeeded, said without a number of objects. */
function succeededWithoutCounts(result: MigrationResult): string {
  const to = result.storageVersion ? ` in ${result.storageVersion}` : ''
  const parts: string[] = []
  if (result.builtin) parts.push(`objects rewritten${to} by the built-in StorageVersionMigration ${result.builtin.name}`)
  else if (result.storage) parts.push(`every object rewritten${to}`)
  if (result.stashes) parts.push(`stashed copies moved${result.storageVersion ? ` to ${result.storageVersion}` : ''}`)
  if (result.cleanup) parts.push('managedFields entries of unserved versions removed')
  // A built-in resource has no CRD, so no storedVersions.
  if (result.crdUid !== undefined) parts.push(`storedVersions ${JSON.stringify(result.storedVersionsAfter)}`)
  return `${parts.join(', ') || 'nothing to do'}; ${COUNTS_ELSEWHERE}`
}
