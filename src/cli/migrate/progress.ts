/**
 * Where `migrate`'s progress goes (on a terminal: progress-live.ts). Every other line goes
 * through `print`, so it never lands inside the live lines.
 */
import type { Phase } from '../../migrator/plan.js'
import type { WalkProgress } from '../../migrator/engine/walker.js'
import { CrdProgress, plainLine } from './progress-text.js'

export interface ProgressView {
  start(crd: string): void
  update(crd: string, phase: Phase, p: WalkProgress): void
  /** The CRD ended: `line` stays on the screen (`stopped`: interrupted, said even when quiet). */
  finish(crd: string, line: string, stopped: boolean): void
  /** What the CRD reported so far (undefined: never started). */
  progressOf(crd: string): CrdProgress | undefined
  /** Writes text that stays, around the live lines. */
  print(stream: NodeJS.WritableStream, text: string): void
  close(): void
}

/** Tracks every CRD's progress; what is shown of it is the subclass's. */
export abstract class TrackingView implements ProgressView {
  protected readonly inFlight = new Map<string, CrdProgress>()
  private readonly ended = new Map<string, CrdProgress>()
  private timer: NodeJS.Timeout | undefined

  constructor(protected readonly now: () => number = Date.now) {}

  protected every(everyMs: number, tick: () => void): void {
    this.timer = setInterval(tick, everyMs)
    // Progress never keeps the process alive.
    this.timer.unref()
  }

  start(crd: string): void {
    this.inFlight.set(crd, new CrdProgress(crd, this.now()))
  }

  update(crd: string, phase: Phase, p: WalkProgress): void {
    this.inFlight.get(crd)?.update(phase, p, this.now())
  }

  finish(crd: string, _line: string, _stopped: boolean): void {
    const p = this.inFlight.get(crd)
    if (p) this.ended.set(crd, p)
    this.inFlight.delete(crd)
  }

  progressOf(crd: string): CrdProgress | undefined {
    return this.inFlight.get(crd) ?? this.ended.get(crd)
  }

  print(stream: NodeJS.WritableStream, text: string): void {
    stream.write(text)
  }

  close(): void {
    clearInterval(this.timer)
  }
}

/** --progress-every 0, or a silent log level: no progress lines; how far an interrupted CRD got, still. */
export class QuietView extends TrackingView {
  constructor(private readonly stream: NodeJS.WritableStream) {
    super()
  }

  override finish(crd: string, line: string, stopped: boolean): void {
    super.finish(crd, line, stopped)
    if (stopped) this.stream.write(`${line}\n`)
  }
}

/** Off a terminal: a line at each start and end, and one per CRD in flight every `everyMs`. */
export class PlainView extends TrackingView {
  constructor(
    private readonly stream: NodeJS.WritableStream,
    everyMs: number,
    now?: () => number,
  ) {
    super(now)
    this.every(everyMs, () => this.tick())
  }

  /** CRDs whose `started` line is written: on its first progress, not before (a CRD that does not exist never starts). */
  private readonly announced = new Set<string>()

  override update(crd: string, phase: Phase, p: WalkProgress): void {
    super.update(crd, phase, p)
    if (this.announced.has(crd) || !this.inFlight.has(crd)) return
    this.announced.add(crd)
    this.stream.write(`${crd}: started\n`)
  }

  override finish(crd: string, line: string, stopped: boolean): void {
    super.finish(crd, line, stopped)
    this.announced.delete(crd)
    this.stream.write(`${line}\n`)
  }

  /** One write for all CRDs in flight: lines of CRDs never interleave. */
  tick(): void {
    const now = this.now()
    const lines = [...this.inFlight.values()].map((p) => `${plainLine(p, now)}\n`)
    if (lines.length) this.stream.write(lines.join(''))
  }
}
