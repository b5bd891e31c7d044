/**
 * Every annotation crd-migrator reads or writes on a CRD (KEP-2855's migrating annotation and
 * `crd-migrator.io/*`): typed reads, pure verdicts, patches. Nothing else names a key; the
 * patches are crd-record.ts's alone (test/unit/layout.test.ts).
 * Nothing read here may let a run skip work: others can write annotations (the webhook guards
 * them only while it answers), so the checkpoint counts only with its seal (checkpoint-seal.ts).
 * What each key means: docs/reference/annotations.md, from dev/docs/annotations.ts.
 */
import type { CustomResourceDefinition } from '../kube/types.js'
import { OUTSIDE_TEXT_MAX, sanitizeText } from '../sanitize.js'
import { splitList } from '../config/accept-entries.js'
import { tenthsOfSeconds, wholeSeconds } from '../duration.js'

/** The value of the migrating annotation that freezes a CRD (KEP-2855). */
export const MIGRATING_VALUE = 'true'

export const STATE_PREFIX = 'crd-migrator.io/'

export const StateAnnotation = {
  phase: `${STATE_PREFIX}phase`,
  progress: `${STATE_PREFIX}progress`,
  startedAt: `${STATE_PREFIX}started-at`,
  targetStorageVersion: `${STATE_PREFIX}target-storage-version`,
  frozenGeneration: `${STATE_PREFIX}frozen-generation`,
  owner: `${STATE_PREFIX}owner`,
  heartbeat: `${STATE_PREFIX}heartbeat`,
  checkpoint: `${STATE_PREFIX}checkpoint`,
  checkpointSeal: `${STATE_PREFIX}checkpoint-seal`,
  lastResult: `${STATE_PREFIX}last-result`,
  lastCounts: `${STATE_PREFIX}last-counts`,
  lastDuration: `${STATE_PREFIX}last-duration`,
  observedGeneration: `${STATE_PREFIX}observed-generation`,
  finishedAt: `${STATE_PREFIX}finished-at`,
  builtinMigration: `${STATE_PREFIX}builtin-migration`,
  handedOff: `${STATE_PREFIX}handed-off`,
} as const

/**
 * A person's consent (RBAC `accept-changes` on the CRD), not state: guarded by the chart's
 * ValidatingAdmissionPolicy, so read only where it is installed (migrator.consentAnnotations).
 */
export const ConsentAnnotation = {
  acceptChanges: `${STATE_PREFIX}accept-changes`,
  acceptUnchecked: `${STATE_PREFIX}accept-unchecked`,
} as const

const CONSENT_KEYS: ReadonlySet<string> = new Set(Object.values(ConsentAnnotation))

/** Whether an annotation key is one of the migrator's state keys (consent is not: it is a person's). */
export function isStateAnnotation(key: string): boolean {
  return key.startsWith(STATE_PREFIX) && !CONSENT_KEYS.has(key)
}

/** The consent a CRD's annotations give, as read (paths unchecked: accept-entries.ts checks them). */
export function readCrdConsent(crd: Pick<CustomResourceDefinition, 'metadata'>): { acceptChanges: string[]; acceptUnchecked: boolean } {
  const a = crd.metadata.annotations ?? {}
  return {
    acceptChanges: splitList(a[ConsentAnnotation.acceptChanges] ?? ''),
    acceptUnchecked: a[ConsentAnnotation.acceptUnchecked] === 'true',
  }
}

/** An annotation patch: a value sets a key, null removes it (JSON merge patch). */
type AnnotationPatch = Record<string, string | null>

/** What a CRD's annotations say of its freeze and its runs: each state annotation, read (empty: undefined). */
export type CrdState = ReturnType<typeof readCrdState>

export function readCrdState(crd: Pick<CustomResourceDefinition, 'metadata'>, migratingAnnotation: string) {
  const a = crd.metadata.annotations ?? {}
  const text = (key: string) => a[key] || undefined
  const heartbeat = text(StateAnnotation.heartbeat) ? new Date(a[StateAnnotation.heartbeat]!) : undefined
  const number = (key: string) => {
    const n = text(key) ? Number(a[key]) : undefined
    return Number.isFinite(n) ? n : undefined
  }
  return {
    frozen: a[migratingAnnotation] === MIGRATING_VALUE,
    /** Set when the freeze is a crd-migrator run's (it wrote its owner annotation). */
    owner: text(StateAnnotation.owner),
    heartbeat: heartbeat && !Number.isNaN(heartbeat.getTime()) ? heartbeat : undefined,
    startedAt: text(StateAnnotation.startedAt),
    targetStorageVersion: text(StateAnnotation.targetStorageVersion),
    frozenGeneration: number(StateAnnotation.frozenGeneration),
    checkpoint: text(StateAnnotation.checkpoint),
    checkpointSeal: text(StateAnnotation.checkpointSeal),
    phase: text(StateAnnotation.phase),
    progress: text(StateAnnotation.progress),
    lastResult: text(StateAnnotation.lastResult),
    lastDuration: text(StateAnnotation.lastDuration),
    /** The CRD generation the last success (or "nothing to do") was for. */
    observedGeneration: number(StateAnnotation.observedGeneration),
    builtinMigration: text(StateAnnotation.builtinMigration),
    handedOff: text(StateAnnotation.handedOff),
    carriesState: a[migratingAnnotation] !== undefined || Object.keys(a).some(isStateAnnotation),
  }
}

/** Who holds a freeze, for people: 'no', 'yes (<owner>)' or 'yes (foreign)'. */
export function describeFreeze(state: CrdState): string {
  if (!state.frozen) return 'no'
  return `yes (${state.owner ?? 'foreign'})`
}

export type FreezeVerdict =
  | { action: 'freeze' }
  /** previous: how the run that left the freeze looked (a dead, handed-off, or this identity's own earlier run). */
  | { action: 'resume'; checkpoint: string | undefined; previousOwner: string; previous: FreezeLiveness }
  | { action: 'wait'; reason: string }
  | { action: 'foreign'; reason: string }

/**
 * A freeze without our owner annotation is another tool's, never touched. Ours is resumed once
 * its owner stopped heart-beating, or at once when it is this identity's (a restart) or was
 * handed off (no heartbeat to wait for).
 */
export function decideFreeze(
  state: CrdState,
  self: string,
  storageVersion: string,
  takeoverAfterMs: number,
  now = new Date(),
): FreezeVerdict {
  if (!state.frozen) return { action: 'freeze' }
  if (!state.owner)
    return { action: 'foreign', reason: 'the CRD carries the migrating annotation but no crd-migrator owner: another migrator froze it' }
  const liveness = freezeLiveness(state, takeoverAfterMs, now)
  if (state.owner !== self && !liveness.stale) {
    return {
      action: 'wait',
      reason: `migration in progress by ${state.owner} (heartbeat ${wholeSeconds(liveness.heartbeatAgeMs ?? 0)} ago)`,
    }
  }
  const checkpoint = state.targetStorageVersion === storageVersion ? state.checkpoint : undefined
  return { action: 'resume', checkpoint, previousOwner: state.owner, previous: liveness }
}

/** What a resumed run says at its start, so people see a takeover: `taking over the freeze of cli:ann@host: no heartbeat for 2m10s`. */
export function describeResume(previousOwner: string, previous: FreezeLiveness, self: string | undefined): string {
  const age = previous.heartbeatAgeMs === undefined ? undefined : wholeSeconds(Math.max(0, previous.heartbeatAgeMs))
  if (previous.handedOff) return `resuming the freeze ${previousOwner} handed off (it stopped on purpose)`
  const silence = age === undefined ? 'it wrote no heartbeat' : `no heartbeat for ${age}`
  if (previousOwner === self)
    return previous.stale
      ? `resuming the freeze an earlier run of this identity (${previousOwner}) left: ${silence} (it stopped)`
      : `resuming the freeze of this identity (${previousOwner}), heartbeat ${age ?? '-'} ago (the same identity restarted)`
  return `taking over the freeze of ${previousOwner}: ${silence} (its run stopped)`
}

/** How alive a freeze of ours is, as the next run judges it (decideFreeze) and `status` shows it. */
export interface FreezeLiveness {
  /** Since the owner's last heartbeat; undefined when it wrote none (or handed off, which removes it). */
  heartbeatAgeMs: number | undefined
  /** The owner stopped on purpose and left the freeze to the next leader. */
  handedOff: boolean
  /** The next run may take the freeze over: handed off, no heartbeat, or one at least `takeoverAfterMs` old. */
  stale: boolean
}

export function freezeLiveness(
  state: Pick<CrdState, 'heartbeat' | 'handedOff'>,
  takeoverAfterMs: number,
  now = new Date(),
): FreezeLiveness {
  const heartbeatAgeMs = state.heartbeat ? now.getTime() - state.heartbeat.getTime() : undefined
  const due = staleAt(state, takeoverAfterMs)
  return { heartbeatAgeMs, handedOff: state.handedOff !== undefined, stale: due === undefined || now.getTime() >= due.getTime() }
}

/** When a live freeze turns stale if its owner writes no more heartbeats (`freezeLiveness` judges by it); undefined: stale already. */
export function staleAt(state: Pick<CrdState, 'heartbeat' | 'handedOff'>, takeoverAfterMs: number): Date | undefined {
  if (!state.heartbeat || state.handedOff !== undefined) return undefined
  return new Date(state.heartbeat.getTime() + takeoverAfterMs)
}

export function freezePatch(
  migratingAnnotation: string,
  owner: string,
  storageVersion: string,
  generation: number,
  now = new Date(),
): AnnotationPatch {
  return {
    [migratingAnnotation]: MIGRATING_VALUE,
    [StateAnnotation.owner]: owner,
    [StateAnnotation.heartbeat]: now.toISOString(),
    [StateAnnotation.phase]: 'Started',
    [StateAnnotation.startedAt]: now.toISOString(),
    [StateAnnotation.targetStorageVersion]: storageVersion,
    [StateAnnotation.frozenGeneration]: String(generation),
    [StateAnnotation.progress]: null,
    // A fresh freeze starts from the beginning: a checkpoint left on the CRD (by hand, or
    // by a run of another storage version) must never make this run skip objects.
    [StateAnnotation.checkpoint]: null,
    [StateAnnotation.checkpointSeal]: null,
    [StateAnnotation.builtinMigration]: null,
    [StateAnnotation.handedOff]: null,
  }
}

export function builtinMigrationPatch(name: string): AnnotationPatch {
  return { [StateAnnotation.builtinMigration]: name }
}

/** Takes over a freeze of ours whose owner went quiet or handed it off. */
export function takeOverPatch(owner: string, now = new Date()): AnnotationPatch {
  return { [StateAnnotation.owner]: owner, [StateAnnotation.heartbeat]: now.toISOString(), [StateAnnotation.handedOff]: null }
}

/** Leaves a running freeze to the next leader (see migrator/freeze/hand-off.ts), with progress not written yet. */
export function handOffPatch(progress: string | undefined, now = new Date()): AnnotationPatch {
  const patch: AnnotationPatch = { [StateAnnotation.heartbeat]: null, [StateAnnotation.handedOff]: now.toISOString() }
  if (progress !== undefined) patch[StateAnnotation.progress] = progress
  return patch
}

/** What a running migration's state annotations say: its phase, progress text and (storage phase) checkpoint. */
export interface RunState {
  phase: string | undefined
  /** null: no progress in this phase yet (the annotation is removed). */
  progress: string | null
  /** Only in the storage phase; undefined: leave the checkpoint annotations alone. */
  checkpoint?: { key: string | undefined; seal: string | null }
}

/**
 * One coalesced state write: what of `next` differs from `written` (undefined: not known, so all).
 * The writer adds the heartbeat, so even an empty patch says the run is alive.
 */
export function runStatePatch(written: RunState | undefined, next: RunState): AnnotationPatch {
  const patch: AnnotationPatch = {}
  if (next.phase !== undefined && next.phase !== written?.phase) patch[StateAnnotation.phase] = next.phase
  if (written === undefined || next.progress !== written.progress) patch[StateAnnotation.progress] = next.progress
  const c = next.checkpoint
  const w = written?.checkpoint
  // Not written in this phase yet: said either way (a checkpoint left by an earlier run must not stand for ours).
  if (c && (w === undefined || c.key !== w.key || (c.key !== undefined && c.seal !== w.seal))) {
    patch[StateAnnotation.checkpoint] = c.key ?? null
    patch[StateAnnotation.checkpointSeal] = c.key === undefined ? null : c.seal
  }
  return patch
}

export function heartbeatPatch(now = new Date()): AnnotationPatch {
  return { [StateAnnotation.heartbeat]: now.toISOString() }
}

export interface RunOutcome {
  /** Blocked: the run stopped before writing any object (its lossless check found a loss). */
  outcome: 'Succeeded' | 'Failed' | 'Blocked'
  /** Shown after "Failed: " (or "Blocked: ") in last-result. */
  reason: string
  counts: string
  durationMs: number
  /** Recorded as observed-generation on success. */
  frozenGeneration: number
  /** The last progress, when the run's state writer had not written it yet (kept on a failure, with the result). */
  progress?: string | undefined
}

/** What only a running migration needs; removed after a success (kept after a failure, to show where it stopped). */
const RUN_SCOPED = [
  StateAnnotation.phase,
  StateAnnotation.progress,
  StateAnnotation.startedAt,
  StateAnnotation.targetStorageVersion,
  StateAnnotation.frozenGeneration,
] as const

export function unfreezePatch(migratingAnnotation: string, run: RunOutcome, now = new Date()): AnnotationPatch {
  const patch: AnnotationPatch = {
    [migratingAnnotation]: null,
    [StateAnnotation.owner]: null,
    [StateAnnotation.heartbeat]: null,
    [StateAnnotation.checkpoint]: null,
    [StateAnnotation.checkpointSeal]: null,
    [StateAnnotation.builtinMigration]: null,
    [StateAnnotation.handedOff]: null,
    [StateAnnotation.phase]: run.outcome === 'Succeeded' ? null : run.outcome,
    [StateAnnotation.lastResult]: run.outcome === 'Succeeded' ? 'Succeeded' : `${run.outcome}: ${sanitizeText(run.reason, REASON_MAX)}`,
    [StateAnnotation.lastCounts]: run.counts,
    [StateAnnotation.lastDuration]: tenthsOfSeconds(run.durationMs),
    [StateAnnotation.finishedAt]: now.toISOString(),
  }
  if (run.outcome !== 'Succeeded' && run.progress !== undefined) patch[StateAnnotation.progress] = run.progress
  if (run.outcome === 'Succeeded') {
    patch[StateAnnotation.observedGeneration] = String(run.frozenGeneration)
    // A success leaves a compact record (result, counts, duration, when, generation); the
    // run's working state goes, so GitOps tools and `kubectl describe` see little of us.
    for (const key of RUN_SCOPED) patch[key] = null
  }
  return patch
}

/** A run that could not start (its conversion webhook does not answer): nothing frozen; the next attempt overwrites it. */
export function blockedPatch(reason: string, now = new Date()): AnnotationPatch {
  return {
    [StateAnnotation.phase]: 'Blocked',
    [StateAnnotation.lastResult]: `Blocked: ${sanitizeText(reason, REASON_MAX)}`,
    [StateAnnotation.finishedAt]: now.toISOString(),
  }
}

/** That a generation needs nothing, for `status` (never read back for a decision); undefined when said already. */
export function upToDatePatch(crd: CustomResourceDefinition): AnnotationPatch | undefined {
  const a = crd.metadata.annotations ?? {}
  const generation = String(crd.metadata.generation ?? 0)
  if (a[StateAnnotation.observedGeneration] === generation && a[StateAnnotation.lastResult] === 'Succeeded') return undefined
  return { [StateAnnotation.observedGeneration]: generation, [StateAnnotation.lastResult]: 'Succeeded' }
}

/**
 * Characters of a failure's reason kept in last-result, cleaned (sanitize.ts: it may quote a webhook
 * or an API server); whole up to the outside-text limit so `check` can quote it; `status` cuts its own.
 */
const REASON_MAX = OUTSIDE_TEXT_MAX
