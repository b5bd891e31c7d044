import { Writable } from 'node:stream'
import { pino, type Logger } from 'pino'

/** A pino logger whose JSON lines are kept in memory. */
export function capturingLogger(level = 'debug'): { logger: Logger; lines: () => Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  let partial = ''
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      partial += chunk.toString('utf8')
      let nl: number
      while ((nl = partial.indexOf('\n')) >= 0) {
        const line = partial.slice(0, nl)
        partial = partial.slice(nl + 1)
        try {
          lines.push(JSON.parse(line) as Record<string, unknown>)
        } catch {
          /* not JSON */
        }
      }
      done()
    },
  })
  return { logger: pino({ level }, sink), lines: () => lines }
}
