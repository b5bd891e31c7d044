/**
 * `plan --measure`: a write rate from a short burst of dry-run writes to the user's own
 * cluster, and the words that say which rate an estimate stands on. Pure: what the burst
 * counted in, an estimate basis out (fleet-plan.ts does the arithmetic).
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
 * How much faster a dry-run write goes than the real one: a dry run skips etcd's write and
 * the watch events that follow it, and how much that saves depends on the machine. The
 * bench (dev/bench/plan-estimate.ts) measured 1.57 on a loaded 2-core machine (77 dry-run
 * writes/s against a run of 49 objects/s, 4,000 objects; the API server's CPU bounds both)
 * and 2.48 on the same machine quiet (1,140/s against 459/s, 10,000 objects; etcd's write
 * weighs more). 2 keeps both within 1.3×.
 */
export const DRY_RUN_SPEEDUP = 2

/**
 * The basis a measured burst gives, or why it gives none. The rate is the burst's
 * throughput (writes at the migrator's concurrency, so its parallelism is in it), capped by
 * --qps when the migrator is told to write slower. The per-CRD cost stays the bench's:
 * a burst of writes cannot see the freeze and the storage-switch checks.
 */
export function measuredBasis(sample: WriteSample, qps: number): { basis: EstimateBasis } | { reason: string } {
  if (sample.written < MIN_SAMPLES) {
    const why = sample.firstError ? `: ${sample.firstError}` : sample.failed ? '' : ' (too few objects to sample)'
    return { reason: `${sample.written} of ${sample.written + sample.failed} dry-run writes succeeded, ${MIN_SAMPLES} needed${why}` }
  }
  if (!(sample.wallMs > 0)) return { reason: 'the dry-run writes took no measurable time' }
  const dryRun = sample.written / (sample.wallMs / 1000)
  const real = dryRun / DRY_RUN_SPEEDUP
  const rate = qps > 0 ? Math.min(real, qps) : real
  return {
    basis: { msPerObject: 1000 / rate, msPerCrd: MS_PER_CRD, source: 'measured', samples: sample.written, dryRunPerSecond: dryRun },
  }
}

const tenths = (n: number) => Math.round(n * 10) / 10

/** Objects per second of a basis, rounded for people. */
export const objectsPerSecond = (basis: EstimateBasis): number => tenths(1000 / basis.msPerObject)

/** One sentence on what the estimate stands on, and, for the constant, how to do better. */
export function describeBasis(basis: EstimateBasis, measureFailed?: string): string {
  const perCrd = `${basis.msPerCrd / 1000} s per CRD`
  if (basis.source === 'measured')
    return `measured on this cluster: ${objectsPerSecond(basis)} objects/s from ${basis.samples} dry-run writes (dryRun=All: nothing stored) at ${tenths(basis.dryRunPerSecond ?? 0)}/s, less the etcd write a dry run skips (÷${DRY_RUN_SPEEDUP}), plus ${perCrd}; not a promise: load, etcd and conversion webhooks change the pace`
  const failed = measureFailed ? `could not measure (${measureFailed}); ` : ''
  return `${failed}a rough constant: ${objectsPerSecond(CONSTANT_BASIS)} objects/s and ${perCrd}, measured by the bench on another machine; a cluster can be 10 times slower: run plan --measure for a rate measured here`
}
