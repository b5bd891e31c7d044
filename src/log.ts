/**
 * The process's logger: pino to stdout or stderr, as JSON lines or, for people, as text
 * (log-text.ts). Unless told (`--log-format`), text when the log goes to a terminal and
 * JSON otherwise (a pod's log, a file, a pipe).
 *
 * A long-running server (`serve`) writes asynchronously: lines made while a write is in
 * flight go out together in the next one, from libuv's thread pool, instead of one
 * blocking write(2) per line on the event loop (at 2,000 reviews a second, one line per
 * review cost the webhook ~7% of its CPU in synchronous writes). pino flushes what is
 * left when the process exits. Short commands (`migrate`, `status`) write synchronously,
 * so their lines stay in order with what they print.
 *
 * A line quotes text from outside (a StorageVersionMigration's spec, an API server's or a
 * webhook's message), and JSON leaves DEL, C1 controls, U+2028/U+2029 and format
 * characters (U+202E, the bidirectional override) raw: a terminal acts on or hides them
 * when someone runs `kubectl logs`. Every line is written with those as \u escapes
 * (escapeInvisible, as the text format writes its values): the same JSON, the same
 * values once parsed, nothing invisible.
 */
import { isatty } from 'node:tty'
import { pino, type DestinationStream, type Logger, type LoggerOptions as PinoOptions } from 'pino'
import type { LogFormat } from './config/schema.js'
import { formatLogLine } from './log-text.js'
import { escapeInvisible } from './sanitize.js'

export interface LoggerOptions {
  level: string
  /** 1 (stdout, the default) or 2 (stderr). */
  fd?: 1 | 2
  /** Write each line before returning (default false: buffered, see above). */
  sync?: boolean
  /** json or text; undefined: text on a terminal, JSON otherwise. */
  format?: LogFormat
}

/** The format a logger writes in: the one asked for, else text on a terminal only. */
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
