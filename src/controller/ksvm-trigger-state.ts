/**
 * KSVM's trigger (pkg/trigger, v0.0.5) as pure decisions: StorageState objects (one per resource,
 * `<resource>.<group>`), what a discovered storageVersionHash means for them and the resource's
 * migrations, and what a Succeeded migration means. The I/O: ksvm-trigger.ts.
 */
import type { DiscoveredResource } from '../kube/discovery.js'
import { collectionPath } from '../kube/paths.js'
import type { ResourceName } from '../kube/resources.js'
import {
  hasCondition,
  isFinished,
  KSVM_API_VERSION,
  ksvmResource,
  metaTime,
  storageVersionMigration,
  type StorageVersionMigration,
} from './ksvm-state.js'

export const STORAGE_STATE_RESOURCE = ksvmResource('storagestates', 'StorageState')
export const STORAGE_STATE_API = collectionPath(STORAGE_STATE_RESOURCE)

/** A valid entry of persistedStorageVersionHashes: objects may be stored in any version. */
const UNKNOWN_HASH = 'Unknown'

export interface StorageStateStatus {
  persistedStorageVersionHashes?: string[]
  currentStorageVersionHash?: string
  /** RFC 3339, seconds (metav1.Time). */
  lastHeartbeatTime?: string
}

export interface StorageState {
  apiVersion?: string
  kind?: string
  metadata: { name: string; uid?: string; resourceVersion?: string }
  spec?: { resource?: { group?: string; resource?: string } }
  status?: StorageStateStatus
}

export type GroupResource = Pick<ResourceName, 'group' | 'resource'>

/** KSVM's storageStateName: `<resource>.<group>`, just `<resource>` for the core group. */
export function storageStateName(r: GroupResource): string {
  return r.group === '' ? r.resource : `${r.resource}.${r.group}`
}

/** The resource a StorageVersionMigration names (KSVM indexes them by group and resource, not version). */
export function migrationResource(svm: StorageVersionMigration): GroupResource {
  return { group: svm.spec?.resource?.group ?? '', resource: svm.spec?.resource?.resource ?? '' }
}

const sameResource = (a: GroupResource, b: GroupResource) => a.group === b.group && a.resource === b.resource

/** The StorageState KSVM creates for a resource (its status is written afterwards, through /status). */
export function newStorageState(r: GroupResource): StorageState {
  return {
    apiVersion: KSVM_API_VERSION,
    kind: 'StorageState',
    metadata: { name: storageStateName(r) },
    spec: { resource: { group: r.group, resource: r.resource } },
  }
}

/** The StorageVersionMigration KSVM launches: generateName `<state name>-`, no labels, the discovered version. */
function newMigration(r: DiscoveredResource): StorageVersionMigration & { metadata: { generateName: string } } {
  const generateName = `${storageStateName(r)}-`
  return { ...storageVersionMigration({ generateName }, r), metadata: { name: '', generateName } }
}

/** Every object of the resource is stored in the current version (KSVM's isMigrated). */
function isMigrated(state: StorageState): boolean {
  const persisted = state.status?.persistedStorageVersionHashes ?? []
  return persisted.length === 1 && persisted[0] === state.status?.currentStorageVersionHash
}

function hasPendingOrRunningMigration(r: GroupResource, migrations: readonly StorageVersionMigration[]): boolean {
  return migrations.some((m) => sameResource(migrationResource(m), r) && !isFinished(m))
}

/** Why a discovery (re)launches a migration; `unchanged` launches none. */
type DiscoveryReason = 'stale' | 'new' | 'changed' | 'unmigrated' | 'unchanged'

interface DiscoveryDecision {
  reason: DiscoveryReason
  /** Delete the StorageState first (stale: nobody knows what happened since its heartbeat). */
  deleteState: boolean
  /** Delete these migrations of the resource (all of them, finished or not), then create `createMigration`. */
  deleteMigrations: string[]
  createMigration: StorageVersionMigration | undefined
}

interface DiscoveryInput {
  discovered: DiscoveredResource
  state: StorageState | undefined
  migrations: readonly StorageVersionMigration[]
  /** When this discovery was made. */
  heartbeat: Date
  /** A state whose heartbeat is older than this before `heartbeat` is stale (KSVM: two discovery periods). */
  staleAfterMs: number
}

/**
 * KSVM's processDiscoveryResource, decision half: after deleting every migration of the resource,
 * a migration is (re)launched when the state is missing, stale, shows another hash, or is not
 * migrated with none pending (a Failed one is retried so, once per discovery). No hash: undefined.
 */
export function decideDiscovery(input: DiscoveryInput): DiscoveryDecision | undefined {
  const { discovered, migrations } = input
  if (!discovered.storageVersionHash) return undefined
  const reason = discoveryReason(input)
  if (reason === 'unchanged') return { reason, deleteState: false, deleteMigrations: [], createMigration: undefined }
  return {
    reason,
    deleteState: reason === 'stale',
    deleteMigrations: migrations.filter((m) => sameResource(migrationResource(m), discovered)).map((m) => m.metadata.name),
    createMigration: newMigration(discovered),
  }
}

function discoveryReason({ discovered, state, migrations, heartbeat, staleAfterMs }: DiscoveryInput): DiscoveryReason {
  if (!state) return 'new'
  if (isStale(state, heartbeat, staleAfterMs)) return 'stale'
  if (state.status?.currentStorageVersionHash !== discovered.storageVersionHash) return 'changed'
  if (!isMigrated(state) && !hasPendingOrRunningMigration(discovered, migrations)) return 'unmigrated'
  return 'unchanged'
}

/** No heartbeat, or one older than `staleAfterMs` before `heartbeat` (KSVM's zero time is stale too). */
export function isStale(state: StorageState, heartbeat: Date, staleAfterMs: number): boolean {
  const last = Date.parse(state.status?.lastHeartbeatTime ?? '')
  return !Number.isFinite(last) || last + staleAfterMs < heartbeat.getTime()
}

/**
 * KSVM's updateStorageState: a new current hash is appended to the persisted ones (which
 * start as ["Unknown"]: objects written before we looked may be in any version); the
 * heartbeat is always written. `state` is the object as it is now (undefined: just created).
 */
export function nextStatus(state: StorageState | undefined, hash: string, heartbeat: Date): StorageStateStatus {
  const status = state?.status ?? {}
  const persisted = status.persistedStorageVersionHashes ?? []
  const changed = status.currentStorageVersionHash !== hash
  return {
    ...status,
    currentStorageVersionHash: hash,
    persistedStorageVersionHashes: !changed ? persisted : persisted.length === 0 ? [UNKNOWN_HASH] : [...persisted, hash],
    lastHeartbeatTime: metaTime(heartbeat),
  }
}

/** KSVM's markStorageStateSucceeded: a Succeeded migration leaves only the current hash persisted; undefined: nothing to write. */
export function statusAfterMigration(state: StorageState, svm: StorageVersionMigration): StorageStateStatus | undefined {
  if (!hasCondition(svm, 'Succeeded')) return undefined
  const current = state.status?.currentStorageVersionHash ?? ''
  const persisted = state.status?.persistedStorageVersionHashes ?? []
  if (persisted.length === 1 && persisted[0] === current) return undefined
  return { ...state.status, persistedStorageVersionHashes: [current] }
}
