/** What every command's registration shares: its logger, its signal handling, its output flag. */
import { Option } from 'commander'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import type { Config } from '../config/schema.js'
import { OUTPUT_FORMATS } from './output.js'

/** `serve` logs to stdout, buffered; the short commands to stderr, line by line (log.ts). */
export function logger(config: Config, command: 'serve' | 'short'): Logger {
  const format = config.logFormat
  return command === 'serve'
    ? createLogger({ level: config.logLevel, format })
    : createLogger({ level: config.logLevel, format, fd: 2, sync: true })
}

/** The flags of every command that talks to the API server: where, as whom, how patiently, and its log. */
export const CLIENT_FLAGS = ['kubeconfig', 'context', 'connect-attempts', 'log-level', 'log-format']

/** Aborts on the first SIGINT/SIGTERM; a second one exits at once. */
export function shutdownSignal(log: Logger | undefined): AbortSignal {
  const controller = new AbortController()
  const onSignal = (sig: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(130)
    log?.info({ signal: sig }, 'shutting down')
    controller.abort(new Error(`received ${sig}`))
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return controller.signal
}

export function outputOption(): Option {
  return new Option('-o, --output <format>', 'output format').choices(OUTPUT_FORMATS)
}
