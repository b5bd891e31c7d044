/** What every command's registration shares: its logger, its signal handling, its output flag. */
import { Option } from 'commander'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import type { Config } from '../config/schema.js'
import { OUTPUT_FORMATS } from './output.js'
import { InterruptedError } from '../errors.js'
import { exitCodeFor } from './interrupt.js'

/** `serve` logs to stdout, buffered; the short commands to stderr, line by line (log.ts). */
export function logger(config: Config, command: 'serve' | 'short'): Logger {
  const format = config.logFormat
  return command === 'serve'
    ? createLogger({ level: config.logLevel, format })
    : createLogger({ level: config.logLevel, format, fd: 2, sync: true })
}

/** The flags of every command that talks to the API server: where, as whom, how patiently, and its log. */
export const CLIENT_FLAGS = ['kubeconfig', 'context', 'connect-attempts', 'log-level', 'log-format']

/**
 * Aborts on the first SIGINT/SIGTERM, with a CRDM_ABORTED error (main.ts: exit 130 or 143,
 * no stack); a second one exits at once. `migrate` has its own (interrupt.ts): it must
 * lift its freezes first.
 */
export function shutdownSignal(log: Logger | undefined): AbortSignal {
  const controller = new AbortController()
  const onSignal = (sig: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(exitCodeFor(sig))
    log?.info({ signal: sig }, 'shutting down')
    controller.abort(new InterruptedError(sig))
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return controller.signal
}

export function outputOption(): Option {
  return new Option('-o, --output <format>', 'output format').choices(OUTPUT_FORMATS)
}
