/**
 * `plan --measure`: a write rate from a short burst of dry-run writes to the user's cluster, and
 * the words saying which rate an estimate stands on. Pure (fleet-plan.ts does the arithmetic).
 */
import { CONSTANT_BASIS, MS_PER_CRD, type EstimateBasis } from './fleet-plan.js'

/** What a burst of dry-run writes counted (measure-writes.ts). */
export interface WriteSample {
  /** Writes the API server answered with success. */
  written: number
  /** Writes it refused or that failed (a conflict, a webhook that does not allow dry runs, RBAC). */
  failed: number
  /** From the first write sent to the last answer, in milliseconds. */
  wallMs: number
  /** Writes in flight at most (the migrator's --concurrency, or fewer objects). */
  concurrency: number
  /** The first failure, for people (already sanitized). */
  firstError?: string | undefined
}

/** Successful writes a rate needs: fewer say more about one slow request than about the cluster. */
export const MIN_SAMPLES = 10

/**
 * How much faster a dry-run write goes than a real one (it skips etcd's write and the watch events):
 * 1 to 2.5 by machine and load (docs/operator-upgrade.md#how-long-will-it-take-plan---measure), so the
 * estimate is a range, its middle the geometric mean (≈1.6).
 */
const DRY_RUN_SPEEDUP = { fast: 1, likely: 1.6, slow: 2.5 } as const

/**
 * The basis a measured burst gives, or why none: the burst's throughput (at the migrator's
 * concurrency, so its parallelism is in it), capped by --qps. The per-CRD cost stays the
 * bench's: a burst of writes cannot see the freeze and the storage-switch checks.
 */
export function measuredBasis(sample: WriteSample, qps: number): { basis: EstimateBasis } | { reason: string } {
  if (sample.written < MIN_SAMPLES) {
    const why = sample.firstError ? `: ${sample.firstError}` : sample.failed ? '' : ' (too few objects to sample)'
    return { reason: `${sample.written} of ${sample.written + sample.failed} dry-run writes succeeded, ${MIN_SAMPLES} needed${why}` }
  }
  if (!(sample.wallMs > 0)) return { reason: 'the dry-run writes took no measurable time' }
  const dryRun = sample.written / (sample.wallMs / 1000)
  const msPerObject = (speedup: number) => 1000 / (qps > 0 ? Math.min(dryRun / speedup, qps) : dryRun / speedup)
  return {
    basis: {
      msPerObject: msPerObject(DRY_RUN_SPEEDUP.likely),
      range: { fastMsPerObject: msPerObject(DRY_RUN_SPEEDUP.fast), slowMsPerObject: msPerObject(DRY_RUN_SPEEDUP.slow) },
      msPerCrd: MS_PER_CRD,
      source: 'measured',
      samples: sample.written,
      dryRunPerSecond: dryRun,
    },
  }
}

const tenths = (n: number) => Math.round(n * 10) / 10

/** Objects per second of a basis, rounded for people. */
export const objectsPerSecond = (basis: EstimateBasis): number => tenths(1000 / basis.msPerObject)

/** The objects per second of a measured basis's range, slowest and fastest, rounded for people; undefined without a range. */
export function objectsPerSecondRange(basis: EstimateBasis): [number, number] | undefined {
  return basis.range ? [tenths(1000 / basis.range.slowMsPerObject), tenths(1000 / basis.range.fastMsPerObject)] : undefined
}

/** What -o json|yaml says of the basis: the rates, what the burst counted, why it could not measure. */
export function basisData(basis: EstimateBasis, sample: WriteSample | undefined, measureError: string | undefined) {
  return {
    source: basis.source,
    objectsPerSecond: objectsPerSecond(basis),
    ...(basis.range ? { objectsPerSecondRange: objectsPerSecondRange(basis) } : {}),
    ...(sample ? { samples: sample.written, failed: sample.failed } : {}),
    ...(basis.dryRunPerSecond ? { dryRunPerSecond: tenths(basis.dryRunPerSecond) } : {}),
    ...(measureError ? { measureError } : {}),
  }
}

/** One sentence on what the estimate stands on, and, for the constant, how to do better. */
export function describeBasis(basis: EstimateBasis, measureFailed?: string): string {
  const perCrd = `${basis.msPerCrd / 1000} s per CRD`
  if (basis.source === 'measured')
    return `measured on this cluster: ${basis.samples} dry-run writes (dryRun=All: nothing stored) at ${tenths(basis.dryRunPerSecond ?? 0)}/s; a real write also costs the etcd write a dry run skips, so ${objectsPerSecondRange(basis)?.join('–') ?? objectsPerSecond(basis)} objects/s (likely ${objectsPerSecond(basis)}), plus ${perCrd}; not a promise: load, etcd and conversion webhooks change the pace`
  const failed = measureFailed ? `could not measure (${measureFailed}); ` : ''
  return `${failed}a rough constant: ${objectsPerSecond(CONSTANT_BASIS)} objects/s and ${perCrd}, measured by the bench on another machine; a cluster can be 10 times slower: run plan --measure for a rate measured here`
}
