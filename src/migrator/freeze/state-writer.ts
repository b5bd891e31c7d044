/**
 * Writes phase, progress, checkpoint and heartbeat annotations on a timer, never per
 * object: the CRD is watched by every controller in the cluster, so per-object updates
 * would be a storm. The heartbeat also tells other replicas this run is alive, and its
 * answer (the CRD as it is now) goes to `onWritten`, so the run sees a lifted freeze even
 * without its watch (freeze-guard.ts). Once `halt` is aborted (the run stopped) nothing
 * more is written: the unfreeze that follows records the outcome.
 */

export interface StateWriterOptions {
  /** Told the CRD each write got back. */
  onWritten?: (crd: CustomResourceDefinition) => void
  /** No write starts once this is aborted. */
  halt?: AbortSignal
}
import { patchCrdAnnotations } from '../../kube/crds.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { heartbeatPatch, phasePatch, progressPatch, StateAnnotation, type AnnotationPatch } from '../../state/crd-state.js'
import type { MigrationContext } from '../context.js'
import { Phase } from '../plan.js'
import { settled, type WalkProgress } from '../engine/walker.js'

export class StateWriter {
  /** The phase and its live progress (the walker updates it in place); read when written. */
  private latest: { phase: Phase; progress: WalkProgress } | undefined
  private written = ''
  private pending: Promise<unknown> = Promise.resolve()
  private stopped = false
  private readonly timer: NodeJS.Timeout

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

  async phase(phase: string): Promise<void> {
    this.latest = undefined
    await this.write(phasePatch(phase))
  }

  /**
   * Remembers the latest progress; the timer writes it. Called after every object, so it
   * only keeps a reference: the text is made when written. `final` writes it now.
   */
  progress(phase: Phase, p: WalkProgress, final?: false): void
  progress(phase: Phase, p: WalkProgress, final: true): Promise<void>
  progress(phase: Phase, p: WalkProgress, final = false): Promise<void> | void {
    if (this.latest?.phase !== phase || this.latest.progress !== p) this.latest = { phase, progress: p }
    if (final) return this.flush()
  }

  /** Says what the run waits for (in the progress annotation), now. */
  async waiting(text: string): Promise<void> {
    this.latest = undefined
    await this.write(progressPatch(text))
  }

  /**
   * No write starts after this, and the one in flight has landed when it resolves: the
   * unfreeze that follows removes these annotations, and a late write would put them back.
   */
  async stop(): Promise<void> {
    clearInterval(this.timer)
    this.stopped = true
    await this.pending
  }

  private flush(): Promise<void> {
    const latest = this.latest
    let patch: AnnotationPatch = {}
    if (latest) {
      const p = latest.progress
      const checkpoint =
        latest.phase === Phase.StorageVersionMigration
          ? { key: p.checkpoint, seal: p.checkpoint === undefined ? null : this.sealCheckpoint(p.checkpoint) }
          : undefined
      patch = progressPatch(`${settled(p)}/${p.total ?? '?'}`, checkpoint)
    }
    const key = JSON.stringify(patch)
    // Heartbeat even without news, so a slow phase is not mistaken for a dead run.
    if (key === this.written && latest) patch[StateAnnotation.phase] = latest.phase
    this.written = key
    return this.write(patch)
  }

  private write(patch: AnnotationPatch): Promise<void> {
    const next = this.pending.then(async () => {
      if (this.stopped || this.options.halt?.aborted) return
      try {
        const crd = await patchCrdAnnotations(this.ctx.http, this.name, { ...patch, ...heartbeatPatch() })
        this.options.onWritten?.(crd)
      } catch (err) {
        // Progress is informational; the migration goes on and the next write may succeed.
        this.ctx.logger.warn({ crd: this.name, err }, 'could not write progress annotations')
      }
    })
    this.pending = next
    return next
  }
}
