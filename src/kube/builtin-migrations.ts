/**
 * Kubernetes' own storage version migrator (KEP-4192): the `storagemigration.k8s.io`
 * StorageVersionMigration objects kube-controller-manager runs, and the `StorageMigrating`
 * condition it writes on a CRD while one of them runs (kubernetes PR #135297, 1.37).
 *
 * What kube-controller-manager does (pkg/controller/storageversionmigrator, 1.37): one
 * object per resource at a time, oldest first; it sets `StorageMigrating=True` on the CRD
 * (server-side apply of status, field manager `migration-runner-controller`), then
 * `Running=True` on the object, patches every object with an empty merge patch carrying its
 * resourceVersion, sets `Succeeded=True` (or `Failed=True`), and finally sets
 * `StorageMigrating=False` and, on success when the CRD's generation did not change,
 * `status.storedVersions: [storage]`. It has no freeze and no managedFields cleanup. Deleting
 * a running object leaves the condition True (nothing cleans it up).
 */
import type { CrdCondition, CustomResourceDefinition } from './types.js'
import { ContentType, type KubeHttp } from './http.js'
import { isNotFound } from './api-errors.js'
import { sanitizeText } from '../sanitize.js'

export const BUILTIN_MIGRATION_GROUP = 'storagemigration.k8s.io'
/** The CRD condition kube-controller-manager keeps while it migrates the CRD's resource. */
export const STORAGE_MIGRATING = 'StorageMigrating'
/** Versions of the API, newest first: v1 from 1.37 (GA), v1beta1 in 1.35–1.36 behind the StorageVersionMigrator gate. */
export const BUILTIN_MIGRATION_VERSIONS = ['v1', 'v1beta1'] as const

export interface BuiltinMigrationCondition {
  type: string
  status: 'True' | 'False' | 'Unknown'
  reason?: string
  message?: string
  lastTransitionTime?: string
}

export interface BuiltinMigration {
  apiVersion?: string
  kind?: string
  metadata: {
    name: string
    uid?: string
    resourceVersion?: string
    creationTimestamp?: string
    labels?: Record<string, string>
    annotations?: Record<string, string>
  }
  spec: { resource: { group: string; resource: string } }
  status?: { conditions?: BuiltinMigrationCondition[]; resourceVersion?: string }
}

export type BuiltinMigrationState = 'Pending' | 'Running' | 'Succeeded' | 'Failed'

const isTrue = (m: BuiltinMigration, type: string) => (m.status?.conditions ?? []).some((c) => c.type === type && c.status === 'True')

/** Where an object stands: Failed or Succeeded for good, Running once promoted, else Pending (waiting its turn). */
export function builtinMigrationState(m: BuiltinMigration): BuiltinMigrationState {
  if (isTrue(m, 'Failed')) return 'Failed'
  if (isTrue(m, 'Succeeded')) return 'Succeeded'
  if (isTrue(m, 'Running')) return 'Running'
  return 'Pending'
}

/** The message of the condition that tells most: Failed, else Succeeded, else Running; fit to quote (conditionText). */
export function builtinMigrationMessage(m: BuiltinMigration): string | undefined {
  const conditions = m.status?.conditions ?? []
  for (const type of ['Failed', 'Succeeded', 'Running']) {
    const c = conditions.find((x) => x.type === type && x.status === 'True')
    if (c) return c.message === undefined ? undefined : conditionText(c.message)
  }
  return undefined
}

/** Longest condition text crd-migrator quotes in its messages, annotations, Events and logs. */
export const MAX_CONDITION_TEXT = 200

/**
 * A condition's reason or message as crd-migrator may quote it: whoever may write the
 * object's status chose the text, so it is cleaned (escape sequences, control and format
 * characters dropped, line breaks made spaces: sanitize.ts) and cut to `max` characters,
 * saying so.
 */
export function conditionText(text: string, max = MAX_CONDITION_TEXT): string {
  return sanitizeText(text, max)
}

/** Not finished: pending or running. */
export const isActive = (m: BuiltinMigration): boolean => {
  const state = builtinMigrationState(m)
  return state === 'Pending' || state === 'Running'
}

/** The objects of `migrations` for a resource (group and plural), oldest first. */
export function migrationsFor(migrations: readonly BuiltinMigration[], group: string, resource: string): BuiltinMigration[] {
  return migrations
    .filter((m) => m.spec?.resource?.group === group && m.spec?.resource?.resource === resource)
    .sort(
      (a, b) =>
        (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    )
}

/** The CRD's StorageMigrating condition, when kube-controller-manager wrote one. */
export function storageMigratingCondition(crd: Pick<CustomResourceDefinition, 'status'>): CrdCondition | undefined {
  return (crd.status?.conditions ?? []).find((c) => c.type === STORAGE_MIGRATING)
}

/** True while kube-controller-manager says it migrates the CRD's resource. */
export function builtinMigrationRunning(crd: Pick<CustomResourceDefinition, 'status'>): boolean {
  return storageMigratingCondition(crd)?.status === 'True'
}

/** The version of the API this server serves (v1, else v1beta1), or undefined when it serves none. */
export async function builtinMigrationApi(http: KubeHttp): Promise<string | undefined> {
  try {
    const res = await http.request<{ versions?: Array<{ version?: string }> }>({ method: 'GET', path: `/apis/${BUILTIN_MIGRATION_GROUP}` })
    const served = new Set((res.body.versions ?? []).map((v) => v.version))
    return BUILTIN_MIGRATION_VERSIONS.find((v) => served.has(v))
  } catch (err) {
    if (isNotFound(err)) return undefined
    throw err
  }
}

const collection = (version: string) => `/apis/${BUILTIN_MIGRATION_GROUP}/${version}/storageversionmigrations`

export async function listBuiltinMigrations(http: KubeHttp, version: string): Promise<BuiltinMigration[]> {
  const res = await http.request<{ items?: BuiltinMigration[] }>({ method: 'GET', path: collection(version) })
  return res.body.items ?? []
}

export async function getBuiltinMigration(http: KubeHttp, version: string, name: string): Promise<BuiltinMigration | undefined> {
  try {
    return (await http.request<BuiltinMigration>({ method: 'GET', path: `${collection(version)}/${encodeURIComponent(name)}` })).body
  } catch (err) {
    if (isNotFound(err)) return undefined
    throw err
  }
}

/** Creates an object for a resource. */
export async function createBuiltinMigration(
  http: KubeHttp,
  version: string,
  target: { group: string; resource: string },
  meta: { name: string; labels?: Record<string, string> },
): Promise<BuiltinMigration> {
  const body: BuiltinMigration = {
    apiVersion: `${BUILTIN_MIGRATION_GROUP}/${version}`,
    kind: 'StorageVersionMigration',
    metadata: { name: meta.name, ...(meta.labels ? { labels: meta.labels } : {}) },
    spec: { resource: { group: target.group, resource: target.resource } },
  }
  return (await http.request<BuiltinMigration>({ method: 'POST', path: collection(version), body })).body
}

export async function deleteBuiltinMigration(http: KubeHttp, version: string, name: string): Promise<void> {
  try {
    await http.request({ method: 'DELETE', path: `${collection(version)}/${encodeURIComponent(name)}` })
  } catch (err) {
    if (!isNotFound(err)) throw err
  }
}

/**
 * Touches an object (an annotation) so kube-controller-manager's informers see an update
 * and look at its resource again now, instead of after the backoff its failed writes
 * earned while our freeze refused them.
 */
export async function nudgeBuiltinMigration(http: KubeHttp, version: string, name: string, annotation: string): Promise<void> {
  try {
    await http.request({
      method: 'PATCH',
      path: `${collection(version)}/${encodeURIComponent(name)}`,
      contentType: ContentType.mergePatch,
      body: { metadata: { annotations: { [annotation]: new Date().toISOString() } } },
    })
  } catch (err) {
    if (!isNotFound(err)) throw err
  }
}
