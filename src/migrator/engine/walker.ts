import type { MetadataPage, UnreadableObject } from '../../kube/list-metadata.js'
import { listOrderKey } from '../../kube/paths.js'
import type { PartialObjectMetadata } from '../../kube/types.js'
import { CrdMigratorError, describeError, errorCode, errorMessage, type ErrorCode } from '../../errors.js'
import { TaskRunner } from './task-runner.js'
import type { TokenBucket } from './budget.js'

/** What happened to one object. */
export type Outcome =
  | 'rewritten' // the API server stored it anew
  | 'current' // the write was a no-op: the object was already stored that way
  | 'skipped' // nothing to do for this object
  | 'gone' // deleted since it was listed
  | 'conflict' // changed since it was listed; that write stored it in the storage version

/** One object that failed, as data: its list key and the error's code and message. */
export interface ObjectFailure {
  key: string
  code: ErrorCode
  message: string
  /** `code: message`, as logged and printed. */
  error: string
}

export function objectFailure(key: string, err: unknown): ObjectFailure {
  return { key, code: errorCode(err), message: errorMessage(err), error: describeError(err) }
}

export interface WalkCounts {
  seen: number
  rewritten: number
  current: number
  skipped: number
  gone: number
  conflict: number
  failed: number
  /** Skipped because a checkpoint of an earlier run says they were done. */
  resumed: number
}

export interface WalkProgress {
  counts: WalkCounts
  /** Best known total: seen plus what the API server says remains. */
  total: number | undefined
  /** Every object up to and including this list key is finished (low watermark). */
  checkpoint: string | undefined
  inFlight: number
}

/** Objects settled so far, whatever the outcome. */
export function settled(p: WalkProgress): number {
  const c = p.counts
  return c.rewritten + c.current + c.skipped + c.gone + c.conflict + c.failed + c.resumed
}

export interface WalkOptions {
  /** Handlers running at most (the cap). */
  concurrency: number
  /**
   * The limit in force now, at most `concurrency` (the throttle gate's adaptive limit):
   * read after every object, so handlers beyond it are not started only to wait.
   */
  concurrencyLimit?: () => number
  /** Writes started per second; 0 for no client-side limit. */
  qps: number
  /**
   * A rate shared with other walks (budget.ts: the process's --qps when several
   * migrations run at once); every start takes a token from it too, in arrival order.
   */
  rate?: TokenBucket
  /** Objects with a list key at or before this one were finished by an earlier run. */
  resumeAfter?: string
  signal?: AbortSignal
  /** How many failures to keep with their message (all are counted). */
  maxRecordedFailures?: number
  onProgress?: (progress: WalkProgress) => void
  /**
   * Objects for which this returns true are counted as `skipped` at once, without a
   * handler call and without using a QPS token: a phase that writes few of many objects
   * (managedFields cleanup) must not be paced at --qps over the ones it does not write.
   */
  skip?: (item: PartialObjectMetadata) => boolean
  onSkipped?: () => void
  /**
   * An object the list could not read: counted as failed, recorded with the error this
   * returns (default the list's own).
   */
  onUnreadable?: (object: UnreadableObject) => unknown
  onWriteStart?: () => void
  onWriteEnd?: (outcome: Outcome | 'failed', seconds: number) => void
}

export interface WalkResult {
  counts: WalkCounts
  failures: ObjectFailure[]
  checkpoint: string | undefined
}

/**
 * Runs one handler per listed object with bounded concurrency and rate, pulling the next
 * page only once the queue has drained below a couple of pages, so memory stays flat
 * however large the collection. Keeps a low watermark of finished list keys so a resumed
 * run can skip what is certainly done.
 */
export async function walkObjects(
  pages: AsyncIterable<MetadataPage>,
  handle: (item: PartialObjectMetadata) => Promise<Outcome>,
  options: WalkOptions,
): Promise<WalkResult> {
  const cap = Math.max(1, options.concurrency)
  // The adaptive limit, never above the cap.
  const currentLimit = () => Math.min(cap, Math.max(1, options.concurrencyLimit?.() ?? cap))
  const queue = new TaskRunner(currentLimit(), Math.max(0, options.qps), undefined, options.rate)
  const counts: WalkCounts = { seen: 0, rewritten: 0, current: 0, skipped: 0, gone: 0, conflict: 0, failed: 0, resumed: 0 }
  const failures: ObjectFailure[] = []
  const maxFailures = options.maxRecordedFailures ?? 100
  let total: number | undefined
  let firstError: unknown

  // Low watermark: sequence numbers are handed out in list order; `finished` holds those
  // done ahead of the watermark. A failed object never finishes, so the watermark can
  // never pass the first one: nothing after it is tracked any more (a run with a failure
  // early on would otherwise keep every later key until it ends).
  let nextSeq = 0
  let watermarkSeq = -1
  let firstFailedSeq = Number.POSITIVE_INFINITY
  let checkpoint = options.resumeAfter
  const keyBySeq = new Map<number, string>()
  const finished = new Set<number>()
  const finish = (seq: number) => {
    if (seq > firstFailedSeq) return
    finished.add(seq)
    while (finished.has(watermarkSeq + 1)) {
      watermarkSeq++
      finished.delete(watermarkSeq)
      checkpoint = keyBySeq.get(watermarkSeq) ?? checkpoint
      keyBySeq.delete(watermarkSeq)
    }
  }
  const failedAt = (seq: number) => {
    if (seq >= firstFailedSeq) return
    firstFailedSeq = seq
    for (const s of finished) if (s > seq) finished.delete(s)
    for (const s of keyBySeq.keys()) if (s > seq) keyBySeq.delete(s)
  }
  // Called after every object: one object with the live counters, updated in place.
  const view: WalkProgress = { counts, total, checkpoint, inFlight: 0 }
  const progress = (): WalkProgress => {
    view.total = total
    view.checkpoint = checkpoint
    view.inFlight = queue.pending
    return view
  }
  const followLimit = () => {
    const limit = currentLimit()
    if (queue.limit !== limit) queue.limit = limit
  }

  const highWater = Math.max(64, options.concurrency * 4)
  // Stopped: the tasks not started yet are dropped at once (they would each wait for a
  // start at --qps only to return); the writes in flight end.
  const dropQueued = () => queue.clear()
  options.signal?.addEventListener('abort', dropQueued, { once: true })
  try {
    await walkPages()
  } catch (err) {
    // Stopped: the writes in flight end first, so the counts the caller reads are final.
    if (options.signal?.aborted) await queue.whenIdle()
    options.signal?.removeEventListener('abort', dropQueued)
    throw err
  }
  await queue.whenIdle()
  options.signal?.removeEventListener('abort', dropQueued)
  options.signal?.throwIfAborted()
  // eslint-disable-next-line @typescript-eslint/only-throw-error -- the handler's own error, passed on as it was
  if (firstError) throw firstError
  // Everything there was has been seen now, whatever the API server estimated.
  total = counts.seen
  options.onProgress?.(progress())
  return { counts: { ...counts }, failures, checkpoint }

  async function walkPages(): Promise<void> {
    for await (const page of pages) {
      options.signal?.throwIfAborted()
      if (firstError) break
      if (page.remainingItemCount !== undefined) total = counts.seen + page.items.length + page.remainingItemCount
      for (const object of page.unreadable ?? []) {
        counts.seen++
        counts.failed++
        const seq = nextSeq++
        failedAt(seq)
        const error = options.onUnreadable ? options.onUnreadable(object) : object.error
        if (failures.length < maxFailures) failures.push(objectFailure(object.key, error))
      }
      for (const item of page.items) {
        counts.seen++
        const key = listOrderKey(item.metadata.namespace, item.metadata.name)
        const seq = nextSeq++
        if (seq < firstFailedSeq) keyBySeq.set(seq, key)
        if (options.resumeAfter !== undefined && key <= options.resumeAfter) {
          counts.resumed++
          finish(seq)
          continue
        }
        if (options.skip?.(item)) {
          counts.skipped++
          finish(seq)
          options.onSkipped?.()
          continue
        }
        queue.add(async () => {
          if (options.signal?.aborted || firstError) return
          const started = performance.now()
          options.onWriteStart?.()
          let outcome: Outcome | 'failed'
          try {
            outcome = await handle(item)
            counts[outcome]++
            // A failed object never finishes: the checkpoint a later run resumes from must
            // stay before it, or that run would skip an object still in the old version.
            finish(seq)
          } catch (err) {
            // Stopped mid-write: neither done nor failed (the checkpoint stays before it).
            if (options.signal?.aborted) {
              options.onWriteEnd?.('failed', (performance.now() - started) / 1000)
              return
            }
            outcome = 'failed'
            counts.failed++
            failedAt(seq)
            if (failures.length < maxFailures) failures.push(objectFailure(key, err))
            if (isFatal(err)) firstError ??= err
          }
          options.onWriteEnd?.(outcome, (performance.now() - started) / 1000)
          options.onProgress?.(progress())
          if (options.concurrencyLimit) followLimit()
        })
      }
      options.onProgress?.(progress())
      await queue.whenSizeBelow(highWater)
    }
  }
}

/**
 * Errors that make every further write pointless: we lost permission, were told to stop,
 * or the CRD's conversion webhook stayed down past the outage limit.
 */
function isFatal(err: unknown): boolean {
  const status = (err as { status?: unknown } | null)?.status
  return (
    status === 401 ||
    (err instanceof Error && err.name === 'AbortError') ||
    (err instanceof CrdMigratorError && err.code === 'CRDM_CONVERSION_OUTAGE')
  )
}
