import type { MetadataPage, UnreadableObject } from '../../kube/list-metadata.js'
import { listOrderKey } from '../../kube/paths.js'
import type { PartialObjectMetadata } from '../../kube/types.js'
import { CrdMigratorError, describeError, errorCode, errorMessage, type ErrorCode } from '../../errors.js'
import { TaskRunner } from './task-runner.js'
import type { TokenBucket } from './budget.js'

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

/** Objects seen, and settled by outcome; `resumed`: skipped because a checkpoint of an earlier run says they were done. */
export type WalkCounts = Record<'seen' | Outcome | 'failed' | 'resumed', number>

export interface WalkProgress {
  counts: WalkCounts
  /** Best known total: seen plus what the API server says remains. */
  total: number | undefined
  /** Every object up to and including this list key is finished (low watermark). */
  checkpoint: string | undefined
  inFlight: number
}

export function settled(p: WalkProgress): number {
  const c = p.counts
  return c.rewritten + c.current + c.skipped + c.gone + c.conflict + c.failed + c.resumed
}

export interface WalkOptions {
  /** Handlers running at most (the cap). */
  concurrency: number
  /** The gate's adaptive limit now (at most `concurrency`), read after every object so handlers past it do not start only to wait. */
  concurrencyLimit?: () => number
  /** Writes started per second; 0 for no client-side limit. */
  qps: number
  /** A rate shared with other walks (budget.ts); every start takes a token from it too, in arrival order. */
  rate?: TokenBucket
  /** Objects with a list key at or before this one were finished by an earlier run. */
  resumeAfter?: string
  signal?: AbortSignal
  /** How many failures to keep with their message (all are counted). */
  maxRecordedFailures?: number
  onProgress?: (progress: WalkProgress) => void
  /**
   * Objects counted `skipped` at once, without a handler call or a QPS token: a phase writing few
   * of many objects (managedFields cleanup) must not be paced at --qps over the rest.
   */
  skip?: (item: PartialObjectMetadata) => boolean
  onSkipped?: () => void
  /** An object the list could not read: failed, recorded with the error this returns (default the list's own). */
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
 * One handler per listed object at bounded concurrency and rate, pulling the next page only once
 * the queue drained below a couple of pages (flat memory), keeping a low watermark of finished
 * list keys so a resumed run skips what is certainly done.
 */
export async function walkObjects(
  pages: AsyncIterable<MetadataPage>,
  handle: (item: PartialObjectMetadata) => Promise<Outcome>,
  options: WalkOptions,
): Promise<WalkResult> {
  const walk = new Walk(handle, options)
  const queue = walk.queue
  // Stopped: the tasks not started yet are dropped at once (they would each wait for a
  // start at --qps only to return); the writes in flight end.
  const dropQueued = () => queue.clear()
  options.signal?.addEventListener('abort', dropQueued, { once: true })
  try {
    await walk.walkPages(pages)
    await queue.whenIdle()
  } catch (err) {
    // Stopped: the writes in flight end first, so the counts the caller reads are final.
    if (options.signal?.aborted) await queue.whenIdle()
    throw err
  } finally {
    options.signal?.removeEventListener('abort', dropQueued)
  }
  options.signal?.throwIfAborted()
  // eslint-disable-next-line @typescript-eslint/only-throw-error -- the handler's own error, passed on as it was
  if (walk.firstError) throw walk.firstError
  // Everything there was has been seen now, whatever the API server estimated.
  walk.total = walk.counts.seen
  options.onProgress?.(walk.progress())
  return { counts: { ...walk.counts }, failures: walk.failures, checkpoint: walk.marks.checkpoint }
}

/**
 * A walk's low watermark: sequence numbers in list order; `finished` holds those done ahead of
 * it. A failed object never finishes, so nothing after the first failure is tracked (else a run
 * failing early would keep every later key until it ends).
 */
class Watermark {
  private nextSeq = 0
  private watermarkSeq = -1
  private firstFailedSeq = Number.POSITIVE_INFINITY
  private readonly keyBySeq = new Map<number, string>()
  private readonly finished = new Set<number>()

  /** `checkpoint`: every object up to this list key is finished. */
  constructor(public checkpoint: string | undefined) {}

  /** The next object's sequence number; its key is kept while no failure came before it. */
  next(key?: string): number {
    const seq = this.nextSeq++
    if (key !== undefined && seq < this.firstFailedSeq) this.keyBySeq.set(seq, key)
    return seq
  }

  finish(seq: number): void {
    if (seq > this.firstFailedSeq) return
    this.finished.add(seq)
    while (this.finished.has(this.watermarkSeq + 1)) {
      this.watermarkSeq++
      this.finished.delete(this.watermarkSeq)
      this.checkpoint = this.keyBySeq.get(this.watermarkSeq) ?? this.checkpoint
      this.keyBySeq.delete(this.watermarkSeq)
    }
  }

  failedAt(seq: number): void {
    if (seq >= this.firstFailedSeq) return
    this.firstFailedSeq = seq
    for (const s of this.finished) if (s > seq) this.finished.delete(s)
    for (const s of this.keyBySeq.keys()) if (s > seq) this.keyBySeq.delete(s)
  }
}

class Walk {
  readonly queue: TaskRunner
  readonly counts: WalkCounts = { seen: 0, rewritten: 0, current: 0, skipped: 0, gone: 0, conflict: 0, failed: 0, resumed: 0 }
  readonly failures: ObjectFailure[] = []
  readonly marks: Watermark
  total: number | undefined
  firstError: unknown
  // Called after every object: one object with the live counters, updated in place.
  private readonly view: WalkProgress

  constructor(
    private readonly handle: (item: PartialObjectMetadata) => Promise<Outcome>,
    private readonly options: WalkOptions,
  ) {
    this.queue = new TaskRunner(this.currentLimit(), Math.max(0, options.qps), undefined, options.rate)
    this.marks = new Watermark(options.resumeAfter)
    this.view = { counts: this.counts, total: undefined, checkpoint: this.marks.checkpoint, inFlight: 0 }
  }

  private currentLimit(): number {
    const cap = Math.max(1, this.options.concurrency)
    return Math.min(cap, Math.max(1, this.options.concurrencyLimit?.() ?? cap))
  }

  progress(): WalkProgress {
    this.view.total = this.total
    this.view.checkpoint = this.marks.checkpoint
    this.view.inFlight = this.queue.pending
    return this.view
  }

  private failed(key: string, err: unknown): void {
    if (this.failures.length < (this.options.maxRecordedFailures ?? 100)) this.failures.push(objectFailure(key, err))
  }

  async walkPages(pages: AsyncIterable<MetadataPage>): Promise<void> {
    const { options, counts, marks } = this
    const highWater = Math.max(64, options.concurrency * 4)
    for await (const page of pages) {
      options.signal?.throwIfAborted()
      if (this.firstError) break
      if (page.remainingItemCount !== undefined) this.total = counts.seen + page.items.length + page.remainingItemCount
      for (const object of page.unreadable ?? []) {
        counts.seen++
        counts.failed++
        marks.failedAt(marks.next())
        this.failed(object.key, options.onUnreadable ? options.onUnreadable(object) : object.error)
      }
      for (const item of page.items) {
        counts.seen++
        const key = listOrderKey(item.metadata.namespace, item.metadata.name)
        const seq = marks.next(key)
        if (options.resumeAfter !== undefined && key <= options.resumeAfter) {
          counts.resumed++
          marks.finish(seq)
          continue
        }
        if (options.skip?.(item)) {
          counts.skipped++
          marks.finish(seq)
          options.onSkipped?.()
          continue
        }
        this.queue.add(() => this.write(item, key, seq))
      }
      options.onProgress?.(this.progress())
      await this.queue.whenSizeBelow(highWater)
    }
  }

  private async write(item: PartialObjectMetadata, key: string, seq: number): Promise<void> {
    const { options, counts } = this
    if (options.signal?.aborted || this.firstError) return
    const started = performance.now()
    options.onWriteStart?.()
    let outcome: Outcome | 'failed'
    try {
      outcome = await this.handle(item)
      counts[outcome]++
      // A failed object never finishes: the checkpoint a later run resumes from must
      // stay before it, or that run would skip an object still in the old version.
      this.marks.finish(seq)
    } catch (err) {
      // Stopped mid-write: neither done nor failed (the checkpoint stays before it).
      if (options.signal?.aborted) {
        options.onWriteEnd?.('failed', (performance.now() - started) / 1000)
        return
      }
      outcome = 'failed'
      counts.failed++
      this.marks.failedAt(seq)
      this.failed(key, err)
      if (isFatal(err)) this.firstError ??= err
    }
    options.onWriteEnd?.(outcome, (performance.now() - started) / 1000)
    options.onProgress?.(this.progress())
    if (options.concurrencyLimit) {
      const limit = this.currentLimit()
      if (this.queue.limit !== limit) this.queue.limit = limit
    }
  }
}

/** Errors making every further write pointless: lost permission, told to stop, or the conversion webhook down past the outage limit. */
function isFatal(err: unknown): boolean {
  const status = (err as { status?: unknown } | null)?.status
  return (
    status === 401 ||
    (err instanceof Error && err.name === 'AbortError') ||
    (err instanceof CrdMigratorError && err.code === 'CRDM_CONVERSION_OUTAGE')
  )
}
