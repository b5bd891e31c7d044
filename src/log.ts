/**
 * The process's logger: JSON lines (pino) to stdout or stderr.
 *
 * A long-running server (`serve`) writes asynchronously: lines made while a write is in
 * flight go out together in the next one, from libuv's thread pool, instead of one
 * blocking write(2) per line on the event loop (at 2,000 reviews a second, one line per
 * review cost the webhook ~7% of its CPU in synchronous writes). pino flushes what is
 * left when the process exits. Short commands (`migrate`, `status`) write synchronously,
 * so their lines stay in order with what they print.
 */
import { pino, type Logger } from 'pino'

export interface LoggerOptions {
  level: string
  /** 1 (stdout, the default) or 2 (stderr). */
  fd?: 1 | 2
  /** Write each line before returning (default false: buffered, see above). */
  sync?: boolean
}

export function createLogger(options: LoggerOptions): Logger {
  return pino(
    { level: options.level, base: { name: 'crd-migrator' } },
    pino.destination({ fd: options.fd ?? 1, sync: options.sync ?? false }),
  )
}
