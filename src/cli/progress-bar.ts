/** The progress bar `migrate` draws on a terminal, one per CRD, a segment per phase. */
import cliProgress from 'cli-progress'
import type { Phase } from '../migrator/plan.js'
import { settled, type WalkProgress } from '../migrator/engine/walker.js'

export class ProgressBar {
  private readonly bar = new cliProgress.SingleBar(
    {
      format: '{crd} {phase} [{bar}] {value}/{total} {rate}/s',
      hideCursor: true,
      clearOnComplete: true,
      stream: process.stderr,
    },
    cliProgress.Presets.shades_classic,
  )
  private phase: string | undefined
  private readonly started = Date.now()

  constructor(private readonly crd: string) {}

  update(phase: Phase, p: WalkProgress): void {
    const total = Math.max(p.total ?? 0, p.counts.seen)
    const value = settled(p)
    const rate = Math.round(value / Math.max(0.001, (Date.now() - this.started) / 1000))
    if (this.phase !== phase) {
      if (this.phase) this.bar.stop()
      this.phase = phase
      this.bar.start(total, value, { crd: this.crd, phase, rate })
    } else {
      this.bar.setTotal(total)
      this.bar.update(value, { rate })
    }
  }

  stop(): void {
    if (this.phase) this.bar.stop()
  }
}
