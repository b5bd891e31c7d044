/**
 * Writes phase, progress, checkpoint and heartbeat on a timer, never per object nor per phase:
 * every controller watching CRDs gets an event per write. Each tick writes what changed
 * (runStatePatch) with the heartbeat, so other replicas never take a live run for dead (by
 * default every 5 s, against a takeover after 30 s). Each answer goes to `onWritten`, so the
 * run sees a lifted freeze even without its watch (freeze-guard.ts).
 */

interface StateWriterOptions {
  /** Told the CRD each write got back. */
  onWritten?: (crd: CustomResourceDefinition) => void
  /**
   * Told a write answered 403 (`patch` on the CRD lost mid-run): the heartbeat is gone for good and
   * another replica would take over while this run goes on, so the run stops (freeze-guard.ts).
   */
  onForbidden?: (err: unknown) => void
  /** No write starts once this is aborted. */
  halt?: AbortSignal
}
import { isForbidden } from '../../kube/api-errors.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import type { RunState } from '../../state/crd-state.js'
import { writeRunState } from '../../state/crd-record.js'
import type { MigrationContext } from '../context.js'
import { Phase } from '../plan.js'
import { settled, type WalkProgress } from '../engine/walker.js'

export class StateWriter {
  private phaseName: string | undefined
  /** The phase's live progress (the walker updates it in place); read when written. */
  private latest: { phase: Phase; progress: WalkProgress } | undefined
  /** What the run waits for, said in the progress annotation until progress or a new phase replaces it. */
  private note: string | undefined
  /** What the CRD says, as far as this writer's landed writes know (undefined: not known yet). */
  private written: RunState | undefined
  private pending: Promise<unknown> = Promise.resolve()
  private stopped = false
  private readonly timer: NodeJS.Timeout
  /** The CRD as the last write got it back. */
  lastCrd: CustomResourceDefinition | undefined

  /** `sealCheckpoint` makes the seal a resumed run checks (null: none can be made). */
  constructor(
    private readonly ctx: MigrationContext,
    private readonly name: string,
    intervalMs: number,
    private readonly sealCheckpoint: (checkpoint: string) => string | null,
    private readonly options: StateWriterOptions = {},
  ) {
    this.timer = setInterval(() => void this.flush(), intervalMs)
    this.timer.unref()
  }

  /** Enters a phase: written with the next tick (with its progress by then), not now. */
  phase(phase: string): void {
    this.phaseName = phase
    this.latest = undefined
    this.note = undefined
  }

  /** Called after every object, so it only keeps a reference; the timer makes the text and writes it. */
  progress(phase: Phase, p: WalkProgress): void {
    if (this.latest?.phase !== phase || this.latest.progress !== p) this.latest = { phase, progress: p }
    this.note = undefined
  }

  /** Says what the run waits for (in the progress annotation), now: a wait may be long, and people look for why. */
  async waiting(text: string): Promise<void> {
    this.latest = undefined
    this.note = text
    await this.flush()
  }

  /**
   * No write starts after this, and the one in flight has landed when it resolves: the
   * unfreeze that follows removes these annotations, and a late write would put them back.
   * Returns the progress text not written yet, for the unfreeze to carry.
   */
  async stop(): Promise<string | undefined> {
    clearInterval(this.timer)
    this.stopped = true
    await this.pending
    const now = this.current()
    return now.progress !== null && now.progress !== this.written?.progress ? now.progress : undefined
  }

  private current(): RunState {
    const latest = this.latest
    if (!latest) return { phase: this.phaseName, progress: this.note ?? null }
    const p = latest.progress
    const state: RunState = { phase: this.phaseName ?? latest.phase, progress: `${settled(p)}/${p.total ?? '?'}` }
    if (latest.phase === Phase.StorageVersionMigration)
      state.checkpoint = { key: p.checkpoint, seal: p.checkpoint === undefined ? null : this.sealCheckpoint(p.checkpoint) }
    return state
  }

  /** One write: what changed since the last, and the heartbeat (even without news, so a slow phase is not mistaken for a dead run). */
  private flush(): Promise<void> {
    const next = this.pending.then(async () => {
      if (this.stopped || this.options.halt?.aborted) return
      const state = this.current()
      try {
        const crd = await writeRunState(this.ctx.http, this.name, this.written, state)
        this.written = state
        this.lastCrd = crd
        this.options.onWritten?.(crd)
      } catch (err) {
        if (isForbidden(err) && this.options.onForbidden) return this.options.onForbidden(err)
        // Progress is informational; the migration goes on and the next write may succeed.
        this.ctx.logger.warn({ crd: this.name, err }, 'could not write progress annotations')
      }
    })
    this.pending = next
    return next
  }
}
