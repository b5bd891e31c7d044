/** The fleet view of `status` (docs/operator-upgrade.md#many-crds-at-once): states, counts, ETA. Pure: CRDs and time in. */
import { builtinMigrationRunning } from '../../kube/builtin-migrations.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { planCrd } from '../../migrator/plan.js'
import type { CrdState, FreezeLiveness } from '../../state/crd-state.js'
import { fullDuration } from '../../duration.js'

/** One CRD's state, for counting; what each means: docs/operator-upgrade.md#many-crds-at-once (Stale: crd-state.ts freezeLiveness). */
export type FleetState = 'Running' | 'Stale' | 'FrozenByAnother' | 'Failed' | 'Pending' | 'Succeeded' | 'UpToDate'

export function fleetState(crd: CustomResourceDefinition, state: CrdState, liveness?: FreezeLiveness): FleetState {
  if (state.frozen) return !state.owner ? 'FrozenByAnother' : liveness?.stale ? 'Stale' : 'Running'
  if (builtinMigrationRunning(crd)) return 'Running'
  if (state.lastResult?.startsWith('Failed') || state.lastResult?.startsWith('Blocked')) return 'Failed'
  if (planCrd(crd).storageMigrationNeeded) return 'Pending'
  // A run records its duration; "nothing to do" (decide.ts) records only the result.
  if (state.lastResult === 'Succeeded' && state.lastDuration) return 'Succeeded'
  return 'UpToDate'
}

/** `settled/total` of the progress annotation (state-writer.ts); undefined for other texts (waiting for ...) or an unknown total. */
export function parseProgress(text: string | undefined): { done: number; total: number } | undefined {
  const m = text === undefined ? null : /^(\d+)\/(\d+)$/.exec(text)
  if (!m) return undefined
  const done = Number(m[1])
  const total = Number(m[2])
  return done <= total ? { done, total } : undefined
}

/** Seconds of a run before its rate is shown: the first hold the freeze and the storage switch's wait, and say little of the rest. */
const ETA_EVIDENCE_SECONDS = 10

/**
 * A heartbeat at most this old (both it and the progress count are written every progressIntervalSeconds)
 * dates the count; older, the rate runs to now (docs/operator-upgrade.md#during-the-run-the-eta-in-status).
 */
const FRESH_HEARTBEAT_SECONDS = 30

/**
 * Seconds left at the rate the run has shown (how, and why it errs long: docs/operator-upgrade.md#during-the-run-the-eta-in-status);
 * undefined without evidence (nothing settled, no start, under ETA_EVIDENCE_SECONDS).
 */
export function etaSeconds(progress: string | undefined, startedAt: string | undefined, now: Date, sampledAt?: Date): number | undefined {
  const p = parseProgress(progress)
  const started = startedAt ? Date.parse(startedAt) : Number.NaN
  if (!p || Number.isNaN(started)) return undefined
  if (p.done === p.total) return 0
  // A heartbeat from the future (clock skew), before the start, or stale is no sample time.
  const fresh =
    sampledAt !== undefined &&
    sampledAt.getTime() >= started &&
    sampledAt.getTime() <= now.getTime() &&
    now.getTime() - sampledAt.getTime() <= FRESH_HEARTBEAT_SECONDS * 1000
  const at = fresh ? sampledAt.getTime() : now.getTime()
  const elapsed = (at - started) / 1000
  if (p.done === 0 || elapsed < ETA_EVIDENCE_SECONDS) return undefined
  const left = ((p.total - p.done) * elapsed) / p.done - (now.getTime() - at) / 1000
  return Math.max(1, Math.ceil(left))
}

export interface SummaryInput {
  name: string
  state: FleetState
  /** Seconds left, for a running CRD with a rate. */
  etaSeconds?: number | undefined
}

export interface StatusSummary {
  crds: number
  succeeded: number
  upToDate: number
  running: number
  /** Frozen by a run that stopped: the next run takes it over. */
  stale: number
  pending: number
  failed: number
  frozenByAnother: number
  inFlight: number
  /** CRDs that still need a run and are not running: pending, failed (retried) and stale (taken over). */
  queued: number
  /** When the last running CRD should be done, at the rates seen so far; undefined when none has a rate. */
  etaSeconds: number | undefined
  /** Running CRDs without a rate yet (their ETA is not in etaSeconds). */
  runningWithoutEta: number
}

export function summarize(rows: readonly SummaryInput[]): StatusSummary {
  const count = (s: FleetState) => rows.filter((r) => r.state === s).length
  const running = rows.filter((r) => r.state === 'Running')
  const etas = running.map((r) => r.etaSeconds).filter((e): e is number => e !== undefined)
  return {
    crds: rows.length,
    succeeded: count('Succeeded'),
    upToDate: count('UpToDate'),
    running: running.length,
    stale: count('Stale'),
    pending: count('Pending'),
    failed: count('Failed'),
    frozenByAnother: count('FrozenByAnother'),
    inFlight: running.length,
    queued: count('Pending') + count('Failed') + count('Stale'),
    etaSeconds: etas.length ? Math.max(...etas) : undefined,
    runningWithoutEta: running.length - etas.length,
  }
}

/** Two lines: the counts, then in flight / queued and the ETA. */
export function formatSummary(s: StatusSummary): string {
  const counts = [
    `${s.succeeded} succeeded`,
    `${s.upToDate} up to date`,
    `${s.running} running`,
    ...(s.stale ? [`${s.stale} stale (its run stopped; the next run takes it over)`] : []),
    `${s.pending} pending`,
    `${s.failed} failed`,
    ...(s.frozenByAnother ? [`${s.frozenByAnother} frozen by another tool`] : []),
  ]
  const eta =
    s.running === 0
      ? ''
      : s.etaSeconds === undefined
        ? '; ETA of the running: estimating…'
        : `; ETA of the running: ${fullDuration(s.etaSeconds * 1000)} at the rate seen so far${s.runningWithoutEta ? ` (${s.runningWithoutEta} still estimating…)` : ''}`
  return `${s.crds} CRD${s.crds === 1 ? '' : 's'}: ${counts.join(', ')}\nin flight: ${s.inFlight}, queued: ${s.queued}${eta}\n`
}
