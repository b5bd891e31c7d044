/**
 * The process's logger: pino, JSON lines or text for people (log-text.ts); text only on a terminal unless told.
 * `serve` writes asynchronously (synchronous writes cost the webhook ~7% CPU at 2,000
 * reviews/s); short commands synchronously, so lines stay in order with their output.
 * JSON leaves DEL, C1, U+2028/9 and format characters (U+202E) raw, which a terminal acts on
 * or hides in `kubectl logs`: they are written as \u escapes, the same values once parsed.
 */
import { isatty } from 'node:tty'
import { pino, type DestinationStream, type Logger, type LoggerOptions as PinoOptions } from 'pino'
import type { LogFormat } from './config/schema.js'
import { formatLogLine } from './log-text.js'
import { escapeInvisible } from './sanitize.js'

interface LoggerOptions {
  level: string
  /** 1 (stdout, the default) or 2 (stderr). */
  fd?: 1 | 2
  /** Default false: buffered, see above. */
  sync?: boolean
  format?: LogFormat
}

export function resolveLogFormat(format: LogFormat | undefined, terminal: boolean): LogFormat {
  return format ?? (terminal ? 'text' : 'json')
}

/** pino's options for the process's logger: its level and name, and every line's invisible characters escaped (above). */
export function pinoOptions(level: string): PinoOptions {
  return { level, base: { name: 'crd-migrator' }, hooks: { streamWrite: escapeInvisible } }
}

export function createLogger(options: LoggerOptions): Logger {
  const fd = options.fd ?? 1
  const destination = pino.destination({ fd, sync: options.sync ?? false })
  const format = resolveLogFormat(options.format, isatty(fd))
  return pino(pinoOptions(options.level), format === 'text' ? textStream(destination) : destination)
}

/** pino hands a stream one JSON line per write; this one passes it on as text. */
function textStream(destination: ReturnType<typeof pino.destination>): DestinationStream {
  return {
    write: (line: string) => destination.write(formatLogLine(line)),
    // logger.flush() reaches the file descriptor's stream through this.
    flush: (cb?: (err?: Error) => void) => destination.flush(cb),
  } as DestinationStream
}
