/**
 * `plan`'s arithmetic (pure): which CRDs need work, how many writes, how long at a write rate
 * (the bench's constant, or measured: write-rate.ts). An estimate, never a promise.
 */
import type { LosslessPreflight } from '../migrator/lossless/preflight.js'

/** Milliseconds per object written: the bench's rate (docs/operator-upgrade.md#how-long-will-it-take-plan---measure). */
export const MS_PER_OBJECT = 1000 / 519

/** Milliseconds per CRD whatever its size (freeze, storage-switch checks, storedVersions, state, unfreeze), serially: the bench's. */
export const MS_PER_CRD = 2400

/** What an estimate is computed from: a write rate, and where it came from. */
export interface EstimateBasis {
  /** Milliseconds per object written. */
  msPerObject: number
  /** Milliseconds per CRD whatever its size (freeze, storage-switch checks, state writes). */
  msPerCrd: number
  /** constant: the bench's rate on another machine; measured: dry-run writes to this cluster. */
  source: 'constant' | 'measured'
  /** Measured: the milliseconds per object at the fastest and slowest a real write may go (write-rate.ts). */
  range?: { fastMsPerObject: number; slowMsPerObject: number }
  /** Dry-run writes the measured rate is from. */
  samples?: number
  /** The dry-run writes' own rate, before the allowance for the etcd write they skip. */
  dryRunPerSecond?: number
}

/** The bench's rate: a rough guess for a cluster nobody measured. */
export const CONSTANT_BASIS: EstimateBasis = { msPerObject: MS_PER_OBJECT, msPerCrd: MS_PER_CRD, source: 'constant' }

export interface PlanInput {
  name: string
  storageVersion: string | undefined
  storedVersions: readonly string[]
  /** Why no migration can run now (planCrd's blockedReason). */
  blockedReason: string | undefined
  /** Objects of the CRD (a list with limit=1: remainingItemCount); undefined when the API server did not say. */
  objects: number | undefined
  /** Objects with managedFields entries the cleanup phase would rewrite; undefined when not scanned. */
  managedFieldsObjects: number | undefined
  /**
   * Objects with managedFields entries of a served non-storage version, by version: the cleanup
   * leaves them by design (users may still apply with it); `check --drop` counts them as blocking.
   */
  servedManagedFields?: Record<string, number>
  /** The run's lossless check, when plan ran it: refuses (CRDM_DATA_LOSS)?, objects read, what changes and how to accept it. */
  lossless?: Omit<LosslessPreflight, 'refusal'>
}

export type Work = 'storage' | 'managedFields'

export interface PlanRow extends PlanInput {
  /** What a migration would do: rewrite every object (storedVersions wider than [storage]) and/or clean managedFields. */
  work: Work[]
  /** Objects a migration would write; undefined when a count is missing. */
  writes: number | undefined
  /** Estimated milliseconds of one migration of this CRD alone, whole; 0 without work; undefined when writes is. */
  estimateMs: number | undefined
  /** With a measured basis: the estimate's range, fastest to slowest, whole milliseconds. */
  estimateRangeMs?: [number, number]
}

/** A duration at the fastest and at the slowest rate of a measured basis's range. */
function atRange(range: NonNullable<EstimateBasis['range']>, ms: (msPerObject: number) => number): [number, number] {
  return [ms(range.fastMsPerObject), ms(range.slowMsPerObject)]
}

export function planRow(input: PlanInput, basis: EstimateBasis = CONSTANT_BASIS): PlanRow {
  const storageWork =
    input.storageVersion !== undefined && !(input.storedVersions.length === 1 && input.storedVersions[0] === input.storageVersion)
  const cleanupWork = (input.managedFieldsObjects ?? 0) > 0
  const work: Work[] = [...(storageWork ? (['storage'] as const) : []), ...(cleanupWork ? (['managedFields'] as const) : [])]
  if (work.length === 0) return { ...input, work, writes: 0, estimateMs: 0 }
  // The storage phase writes every object; the cleanup phase then writes those with managedFields to clean.
  const rewrite = storageWork ? input.objects : 0
  const writes = rewrite === undefined ? undefined : rewrite + (input.managedFieldsObjects ?? 0)
  if (writes === undefined) return { ...input, work, writes, estimateMs: undefined }
  const ms = (msPerObject: number) => Math.round(basis.msPerCrd + writes * msPerObject)
  return {
    ...input,
    work,
    writes,
    estimateMs: ms(basis.msPerObject),
    ...(basis.range ? { estimateRangeMs: atRange(basis.range, ms) } : {}),
  }
}

export interface PlanSummary {
  crds: number
  needingWork: number
  blocked: number
  /** Objects written in all (CRDs of unknown size left out). */
  writes: number
  /** CRDs needing work whose size the API server did not tell: the estimate leaves them out. */
  unknownSize: number
  /** One CRD after another (--max-parallel-crds 1). */
  serialMs: number
  /** `maxParallelCrds` at once: fixed costs overlap, writes do not (one write budget, engine/budget.ts). */
  parallelMs: number
  /** With a measured basis: serialMs and parallelMs at the fastest and slowest rate. */
  serialRangeMs?: [number, number]
  parallelRangeMs?: [number, number]
  maxParallelCrds: number
}

export function planSummary(rows: readonly PlanRow[], maxParallelCrds: number, basis: EstimateBasis = CONSTANT_BASIS): PlanSummary {
  const working = rows.filter((r) => r.work.length > 0 && !r.blockedReason && !r.lossless?.refuses)
  const sized = working.filter((r) => r.writes !== undefined)
  const writes = sized.reduce((n, r) => n + r.writes!, 0)
  const serial = (msPerObject: number) => Math.round(sized.length * basis.msPerCrd + writes * msPerObject)
  const parallel = (msPerObject: number) => Math.round(Math.ceil(sized.length / maxParallelCrds) * basis.msPerCrd + writes * msPerObject)
  const range = basis.range
  return {
    crds: rows.length,
    needingWork: working.length,
    blocked: rows.filter((r) => r.blockedReason || r.lossless?.refuses).length,
    writes,
    unknownSize: working.length - sized.length,
    serialMs: serial(basis.msPerObject),
    parallelMs: parallel(basis.msPerObject),
    ...(range ? { serialRangeMs: atRange(range, serial), parallelRangeMs: atRange(range, parallel) } : {}),
    maxParallelCrds,
  }
}
