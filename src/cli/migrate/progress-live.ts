/** `migrate` on a terminal: a line per CRD in flight, redrawn in place below the lines that stay (end lines, other output). */
import { TrackingView } from './progress.js'
import { liveLine } from './progress-text.js'

const REDRAW_MS = 200
/** Cursor to the start of the line `n` lines up; erase from the cursor to the end of the screen. */
const up = (n: number) => (n > 0 ? `\x1b[${n}F` : '')
const ERASE_BELOW = '\x1b[J'

export class LiveView extends TrackingView {
  /** Lines of the live area now on the screen, the cursor just below them. */
  private drawn = 0

  constructor(
    private readonly tty: NodeJS.WriteStream,
    now?: () => number,
  ) {
    super(now)
    this.every(REDRAW_MS, () => this.redraw())
  }

  override start(crd: string): void {
    super.start(crd)
    this.redraw()
  }

  override finish(crd: string, line: string, stopped: boolean): void {
    super.finish(crd, line, stopped)
    this.tty.write(`${this.clear()}${line}\n${this.area()}`)
  }

  override print(stream: NodeJS.WritableStream, text: string): void {
    if (stream === this.tty) {
      this.tty.write(`${this.clear()}${text}${this.area()}`)
      return
    }
    // Another stream on the same screen (stdout): the live lines make room, then come back.
    this.tty.write(this.clear())
    stream.write(text)
    this.tty.write(this.area())
  }

  override close(): void {
    super.close()
    this.tty.write(this.clear())
  }

  private redraw(): void {
    // Redrawn even without news: the elapsed time, rate and ETA move on.
    if (this.drawn === 0 && this.inFlight.size === 0) return
    this.tty.write(`${this.clear()}${this.area()}`)
  }

  /** Takes the live lines off the screen (the text that replaces them follows at once). */
  private clear(): string {
    const text = `${up(this.drawn)}${ERASE_BELOW}`
    this.drawn = 0
    return text
  }

  private area(): string {
    const now = this.now()
    const width = this.tty.columns || 80
    const lines = [...this.inFlight.values()].map((p) => liveLine(p, now, width))
    this.drawn = lines.length
    return lines.map((l) => `${l}\n`).join('')
  }
}
