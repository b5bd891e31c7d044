/** What every command's registration shares: its logger, its signal handling, its client flags. */
import type { Command } from 'commander'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import type { Config } from '../config/schema.js'
import { exitCodeFor } from './interrupt.js'
import { ConfigError, InterruptedError } from '../errors.js'
import { configFromOptions } from './options.js'
import { logLevelOf } from './client-flags.js'

/**
 * `serve` logs to stdout, buffered, JSON off a terminal (a pod's log); the short commands to
 * stderr, line by line, as text whatever stderr is (kubectl's stderr is text in a pipe too:
 * JSON lines between the progress lines helped nobody), JSON only with --log-format json.
 */
export function logger(config: Config, command: 'serve' | 'short'): Logger {
  return command === 'serve'
    ? createLogger({ level: config.logLevel, format: config.logFormat })
    : createLogger({ level: config.logLevel, format: config.logFormat ?? 'text', fd: 2, sync: true })
}

/**
 * The configuration of a short command (status, check, plan, migrate, version): warnings
 * only unless --log-level or -v says otherwise (the output is the table, the summary).
 */
export function shortCommandConfig(opts: Record<string, unknown>): Config {
  return configFromOptions({ logLevel: 'warn', ...opts, ...(logLevelOf(opts) ? { logLevel: logLevelOf(opts) } : {}) })
}

/**
 * kubectl: "name cannot be provided when a selector is specified". A selector given on
 * the command line with names would be either ignored or a silent intersection; refused.
 */
export function refuseNamesWithSelector(cmd: Command, names: readonly string[]): void {
  if (names.length > 0 && cmd.getOptionValueSource('selector') === 'cli')
    throw new ConfigError(
      `${cmd.name()}: name CRDs or select them with -l/--selector, not both (kubectl: name cannot be provided when a selector is specified)`,
    )
}

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

export { outputOption } from './output.js'
/** The flags of every command that talks to the API server (command-settings.ts has each command's whole list). */
export const CLIENT_FLAGS = ['kubeconfig', 'context', 'connect-attempts', 'log-level', 'log-format']
