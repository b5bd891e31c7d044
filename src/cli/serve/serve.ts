import type { Command } from 'commander'
import { addConfigOptions, configFromOptions, logger, SERVE_SETTINGS, shutdownSignal, type FlagValues } from '../command-kit.js'

export function registerServe(program: Command): void {
  addConfigOptions(program.command('serve'), SERVE_SETTINGS)
    .description('serve the validating webhook and, on the replica holding the Lease, run the migration controller')
    .action(async (opts: FlagValues) => {
      const config = configFromOptions(opts)
      const log = logger(config, 'serve')
      // Before start-up, not after: in a container node is PID 1, and PID 1 ignores a
      // SIGTERM it has no handler for. One during start-up closes as soon as it is done.
      const signal = shutdownSignal(log)
      const { serve } = await import('./run-serve.js')
      const handle = await serve(config, log)
      if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
      await handle.close()
      log.flush()
    })
}
