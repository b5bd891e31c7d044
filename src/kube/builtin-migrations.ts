/**
 * Kubernetes' own storage version migrator (KEP-4192, `storagemigration.k8s.io`) and the CRD's `StorageMigrating`
 * condition (kubernetes PR #135297, 1.37), as docs/ksvm-and-builtin.md describes them. kube-controller-manager
 * (pkg/controller/storageversionmigrator) runs one object per resource, oldest first.
 */
import type { CrdCondition, CustomResourceDefinition, ObjectMeta } from './types.js'
import { ContentType, type KubeHttp } from './http.js'
import { unlessNotFound } from './api-errors.js'
import { sanitizeText } from '../sanitize.js'

export const BUILTIN_MIGRATION_GROUP = 'storagemigration.k8s.io'
/** The CRD condition kube-controller-manager keeps while it migrates the CRD's resource. */
export const STORAGE_MIGRATING = 'StorageMigrating'
/** Versions of the API, newest first: v1 from 1.37 (GA), v1beta1 in 1.35–1.36 behind the StorageVersionMigrator gate. */
export const BUILTIN_MIGRATION_VERSIONS = ['v1', 'v1beta1'] as const

export type BuiltinMigrationCondition = CrdCondition & { lastTransitionTime?: string }

export interface BuiltinMigration {
  apiVersion?: string
  kind?: string
  metadata: Pick<ObjectMeta, 'name' | 'uid' | 'resourceVersion' | 'creationTimestamp' | 'labels' | 'annotations'>
  spec: { resource: { group: string; resource: string } }
  status?: { conditions?: BuiltinMigrationCondition[]; resourceVersion?: string }
}

export type BuiltinMigrationState = 'Pending' | 'Running' | 'Succeeded' | 'Failed'

/** The True condition that tells most, Failed, else Succeeded, else Running, and the state it names. */
function deciding(m: BuiltinMigration): { state: BuiltinMigrationState; condition: BuiltinMigrationCondition } | undefined {
  for (const state of ['Failed', 'Succeeded', 'Running'] as const) {
    const condition = m.status?.conditions?.find((c) => c.type === state && c.status === 'True')
    if (condition) return { state, condition }
  }
  return undefined
}

/** Where an object stands: Failed or Succeeded for good, Running once promoted, else Pending (waiting its turn). */
export function builtinMigrationState(m: BuiltinMigration): BuiltinMigrationState {
  return deciding(m)?.state ?? 'Pending'
}

/** The message of the condition that tells most; fit to quote (conditionText). */
export function builtinMigrationMessage(m: BuiltinMigration): string | undefined {
  const message = deciding(m)?.condition.message
  return message === undefined ? undefined : conditionText(message)
}

/** Longest condition text crd-migrator quotes in its messages, annotations, Events and logs. */
export const MAX_CONDITION_TEXT = 200

/** Condition text is anyone's with status write access: cleaned (sanitize.ts) and cut to `max`. */
export function conditionText(text: string, max = MAX_CONDITION_TEXT): string {
  return sanitizeText(text, max)
}

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

export function builtinMigrationRunning(crd: Pick<CustomResourceDefinition, 'status'>): boolean {
  return storageMigratingCondition(crd)?.status === 'True'
}

/** The version of the API this server serves (v1, else v1beta1), or undefined when it serves none. */
export async function builtinMigrationApi(http: KubeHttp): Promise<string | undefined> {
  const res = await unlessNotFound(
    http.request<{ versions?: Array<{ version?: string }> }>({ method: 'GET', path: `/apis/${BUILTIN_MIGRATION_GROUP}` }),
  )
  if (!res) return undefined
  const served = new Set((res.body.versions ?? []).map((v) => v.version))
  return BUILTIN_MIGRATION_VERSIONS.find((v) => served.has(v))
}

const collection = (version: string) => `/apis/${BUILTIN_MIGRATION_GROUP}/${version}/storageversionmigrations`
const objectAt = (version: string, name: string) => `${collection(version)}/${encodeURIComponent(name)}`

export async function listBuiltinMigrations(http: KubeHttp, version: string): Promise<BuiltinMigration[]> {
  const res = await http.request<{ items?: BuiltinMigration[] }>({ method: 'GET', path: collection(version) })
  return res.body.items ?? []
}

export async function getBuiltinMigration(http: KubeHttp, version: string, name: string): Promise<BuiltinMigration | undefined> {
  return (await unlessNotFound(http.request<BuiltinMigration>({ method: 'GET', path: objectAt(version, name) })))?.body
}

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
  await unlessNotFound(http.request({ method: 'DELETE', path: objectAt(version, name) }))
}

/** An annotation touch, so kube-controller-manager retries now, not after the backoff our freeze's refusals earned it. */
export async function nudgeBuiltinMigration(http: KubeHttp, version: string, name: string, annotation: string): Promise<void> {
  await unlessNotFound(
    http.request({
      method: 'PATCH',
      path: objectAt(version, name),
      contentType: ContentType.mergePatch,
      body: { metadata: { annotations: { [annotation]: new Date().toISOString() } } },
    }),
  )
}
