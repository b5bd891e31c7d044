/** What one migration is given (settings, collaborators) and what it returns. */
import type { Logger } from 'pino'
import type { ErrorCode } from '../errors.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import type { EventRecorder } from '../kube/events.js'
import type { KubeHttp } from '../kube/http.js'
import { runClient, type RunClient } from './engine/run-client.js'
import type { CheckpointSeal } from './freeze/checkpoint-seal.js'
import type { MigratorMetrics } from './metrics.js'
import type { CrdPlan, Phase } from './plan.js'
import type { StashRule } from './phases/stashes/rules.js'
import type { StorageSwitchReport } from './phases/storage-switch.js'
import type { ObjectFailure, WalkProgress, WalkResult } from './engine/walker.js'
import type { WriteBudget } from './engine/budget.js'
import type { LosslessReport } from './lossless/verdict.js'
import type { ServedEntriesKept } from './phases/served-entries.js'

export interface MigrationSettings {
  migratingAnnotation: string
  phases: readonly Phase[]
  useStatusSubresource: boolean
  concurrency: number
  qps: number
  pageSize: number
  maxAttempts: number
  progressIntervalMs: number
  rewriteServedManagedFields: boolean
  /** How long an owner may go without a heartbeat before its freeze is taken over. */
  takeoverAfterMs: number
  /** How long the new storage version must be visible in discovery before objects are rewritten (default STORAGE_SETTLE_MS). */
  storageSettleMs?: number
  /** Give up waiting for the API servers to switch storage after this long (migrator.storageSwitchTimeoutSeconds). */
  storageSettleTimeoutMs: number
  /** Where copies of custom resources are stashed (phase StashedObjectMigration); only rules of the CRD's group apply. */
  stashes?: readonly StashRule[]
  /** The API servers to ask one by one (URLs) instead of the default/kubernetes EndpointSlices'. */
  apiServerEndpoints?: readonly string[]
  /** A run fails when the CRD's conversion webhook stays down this long (migrator.conversionOutageLimitSeconds). */
  conversionOutageLimitMs: number
  /** Prove each rewrite keeps the object's content before writing any (lossless/check.ts); default on. */
  losslessCheck?: boolean
  /** Field patterns this CRD's rewrite may drop on purpose (migrator.acceptRemovals, for this CRD). */
  acceptedRemovals?: readonly string[]
  /** Field patterns where this CRD's rewrite may change anything on purpose (migrator.acceptChanges, the CRD's accept annotation). */
  acceptedChanges?: readonly string[]
  /** Rewrite objects no view can check (migrator.acceptUnchecked, the CRD's accept annotation). */
  acceptUnchecked?: boolean
  /** Also read consent from the CRD's accept annotations (migrator.consentAnnotations). */
  consentFromCrd?: boolean
  /** Who rewrites the objects: our writer (default) or a built-in StorageVersionMigration. */
  engine?: 'own' | 'builtin'
  /** engine builtin: fail when kube-controller-manager has not started the migration within this long (migrator.builtinStartTimeoutSeconds). */
  builtinStartTimeoutMs: number
  /** Rewrite every object whatever status.storedVersions says (`migrate --force`); storedVersions still ends [storage]. */
  force?: boolean
}

export interface MigrationContext {
  http: KubeHttp
  logger: Logger
  /** Identity of this run, written as the freeze owner. */
  owner: string
  metrics?: MigratorMetrics
  events?: EventRecorder
  signal?: AbortSignal
  onProgress?: (phase: Phase, progress: WalkProgress) => void
  /** Seals the checkpoints this run writes and verifies the one it resumes from; default: this process's own. */
  checkpointSeal?: CheckpointSeal
  /** The process's write budget, shared by concurrent migrations (engine/budget.ts); none: each phase's own limit and --qps. */
  budget?: WriteBudget
}

export type RunContext = MigrationContext & { client: RunClient }

/** Built once where a run starts: every call site sends through its client. */
export function runContext(ctx: MigrationContext, settings: { maxAttempts: number }): RunContext {
  return { ...ctx, client: runClient(ctx, settings) }
}

/** Blocked: not started, because the CRD's conversion webhook does not answer (nothing was frozen). */
export type MigrationOutcome = 'Succeeded' | 'Failed' | 'Skipped' | 'Blocked'
/** Why a run was Skipped, as a value callers can branch on (the reason text is for people). */
export type SkipReason = 'blocked' | 'frozen-by-another' | 'builtin-migration' | 'in-progress' | 'up-to-date'

export type CleanupResult = WalkResult & {
  entriesRemoved: number
  /** Entries of unserved versions moved to the storage version (conversion None). */
  entriesRelabelled?: number
  /** Objects whose conversion the CRD's webhook refused (all of them, not only the recorded failures). */
  conversionRefused?: number
  /** Writes refused because someone wrote the object after we read it, each then read and written again. */
  staleWrites?: number
  /** Cleanup: entries of still-served old versions left in place (removed once the version is unserved). */
  servedEntriesKept?: ServedEntriesKept
}

/** The built-in StorageVersionMigration a run delegated its storage phase to. */
export interface BuiltinPhaseReport {
  name: string
  /** Its last Succeeded (or Running) message, e.g. "Migration completed". */
  message: string | undefined
  /** From its creation until it succeeded. */
  durationMs: number
}

export interface ConversionReport {
  /** The webhook as people name it (service or URL). */
  webhook: string
  /** Outages met during the run (writes paused until it answered again). */
  outages: number
  outageSeconds: number
}

export interface MigrationResult {
  crd: string
  outcome: MigrationOutcome
  reason: string
  /** Set when the run Failed: what to search for (errors.ts). */
  errorCode?: ErrorCode
  skipReason?: SkipReason
  storageVersion: string | undefined
  /** The CRD's uid and generation this run looked at. */
  crdUid: string | undefined
  generation: number
  storedVersionsBefore: string[]
  storedVersionsAfter: string[]
  /** The lossless check before the storage phase (undefined: off, or not run). */
  lossless?: LosslessReport
  storage?: WalkResult & { conversionRefused?: number }
  /** engine builtin: the StorageVersionMigration (storagemigration.k8s.io) that rewrote the objects. */
  builtin?: BuiltinPhaseReport
  /** Phase StashedObjectMigration (copies in other objects), when rules apply to the CRD. */
  stashes?: StashResult
  cleanup?: CleanupResult
  /** Set when the CRD converts through a webhook. */
  conversion?: ConversionReport
  /** How the storage switch was checked: every API server by address, or the one we talk to. */
  apiServers?: StorageSwitchReport
  resumedFrom?: string
  durationMs: number
  /** Whether the run ended with the CRD left frozen (the unfreeze itself failed). */
  leftFrozen: boolean
}

/** A run's result before it has done anything: Skipped, with what it read of the CRD (none: a built-in resource). */
export function startingResult(
  name: string,
  crd: CustomResourceDefinition | undefined,
  plan: Pick<CrdPlan, 'storageVersion' | 'generation' | 'storedVersions'>,
): MigrationResult {
  return {
    crd: name,
    outcome: 'Skipped',
    reason: '',
    storageVersion: plan.storageVersion,
    crdUid: crd?.metadata.uid,
    generation: plan.generation,
    storedVersionsBefore: plan.storedVersions,
    storedVersionsAfter: plan.storedVersions,
    durationMs: 0,
    leftFrozen: false,
  }
}

/** Phase StashedObjectMigration: copies of this CRD's objects stashed in other objects. */
export interface StashCounts {
  /** Stashes holding an object of this CRD. */
  seen: number
  /** Already at the storage version. */
  current: number
  /** Replaced by a stash at the storage version (or, in a dry run, would be). */
  migrated: number
  failed: number
  /** Referrer pointers moved to a replacement. */
  repointed: number
}

export interface StashResult {
  counts: StashCounts
  failures: ObjectFailure[]
  /** Dry run: what would change, one line per stash. */
  planned: string[]
}
