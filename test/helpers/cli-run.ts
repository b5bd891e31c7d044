/**
 * The CLI (dist/cli/main.js) run as a user runs it, its output read as it comes: each
 * line with the time it arrived, so a test can tell progress printed during a run from
 * text printed at its end, and act mid-run (send a signal once some objects are done).
 */
import { spawn, type ChildProcess } from 'node:child_process'

export interface TimedLine {
  at: number
  text: string
}

export interface CliExit {
  code: number | null
  signal: NodeJS.Signals | null
  at: number
}

export class CliRun {
  readonly child: ChildProcess
  stdout = ''
  stderr = ''
  /** Lines of stderr (the progress stream), with when each arrived. */
  readonly stderrLines: TimedLine[] = []
  readonly exited: Promise<CliExit>
  private partial = ''
  private readonly waiters: Array<() => void> = []

  /** `command` and `args` as given (a PTY wrapper, say); default `node dist/cli/main.js ...args`. */
  constructor(args: string[], options: { env?: NodeJS.ProcessEnv; command?: string } = {}) {
    const command = options.command ?? process.execPath
    const argv = options.command ? args : ['dist/cli/main.js', ...args]
    this.child = spawn(command, argv, { env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
    this.child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      this.stdout += d
      this.wake()
    })
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      this.stderr += d
      const parts = (this.partial + d).split('\n')
      this.partial = parts.pop()!
      const at = performance.now()
      for (const text of parts) this.stderrLines.push({ at, text })
      this.wake()
    })
    this.exited = new Promise((resolve, reject) => {
      this.child.on('error', reject)
      this.child.on('close', (code, signal) => {
        resolve({ code, signal, at: performance.now() })
        this.wake()
      })
    })
  }

  /** Resolves with what `find` returns once it returns something; rejects after `timeoutMs` or when the process ends first. */
  async waitFor<T>(find: () => T | undefined, what: string, timeoutMs = 60_000): Promise<T> {
    const deadline = performance.now() + timeoutMs
    for (;;) {
      const found = find()
      if (found !== undefined) return found
      if (this.child.exitCode !== null || this.child.signalCode !== null)
        throw new Error(`the process ended before ${what}\nstdout:\n${this.stdout}\nstderr:\n${this.stderr}`)
      const left = deadline - performance.now()
      if (left <= 0) throw new Error(`timed out waiting for ${what}\nstderr:\n${this.stderr}`)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 1000))
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w()
  }
}
