import os from 'node:os'
import type { Command } from 'commander'
import {
  addConfigOptions,
  CLIENT_SETTINGS,
  configFromOptions,
  flagReader,
  logger,
  shutdownSignal,
  type FlagValues,
} from '../command-kit.js'
import { ConfigError } from '../../errors.js'

/** The chart's pre-delete hook: the Lease (its renew deadline and retry period from --config) and the freeze's key. */
const LIFT_FREEZES_SETTINGS = [...CLIENT_SETTINGS, 'migrating-annotation', 'lease-namespace', 'lease-name'] as const

export function registerLiftFreezes(program: Command): void {
  addConfigOptions(program.command('lift-freezes'), LIFT_FREEZES_SETTINGS)
    .description(
      "stop a release's migrator (take its Lease) and lift the freezes its pods hold: the chart's pre-delete hook, so `helm uninstall` leaves no CRD frozen",
    )
    .requiredOption(
      '--owner-prefix <prefix>',
      "the release's pod names up to the ReplicaSet hash, e.g. crd-migrator- (its Deployment's name and a dash)",
    )
    .option('--hold-seconds <n>', 'how long the Lease stays held after (no replica of the release starts a run meanwhile)', '300')
    .action(async (opts: FlagValues) => {
      const flags = flagReader(opts)
      const config = configFromOptions(opts)
      const log = logger(config, 'serve')
      const holdText = flags.string('holdSeconds')
      const hold = Number(holdText)
      if (!Number.isInteger(hold) || hold < 1)
        throw new ConfigError(`--hold-seconds must be a whole number of seconds, got ${String(holdText)}`)
      const signal = shutdownSignal(log)
      const { commandHttp } = await import('../command-http.js')
      const { liftReleaseFreezes, noMigratorAccess } = await import('./run-lift-freezes.js')
      // A hook logs what it did; the API server's warnings are not printed besides, as kubectl would.
      const http = commandHttp(config, 'lift-freezes', log, {}, { onWarning: undefined })
      const identity = `${process.env.POD_NAME ?? os.hostname()} (lift-freezes)`
      try {
        const report = await liftReleaseFreezes(
          http,
          config,
          { ownerPrefix: String(flags.string('ownerPrefix')), identity, holdSeconds: hold, signal },
          log,
        )
        log.info({ ...report }, `lifted ${report.lifted.length} freeze(s) of the release`)
      } catch (err) {
        if (!noMigratorAccess(err)) throw err
        // migrator.enabled=false already (no migrator RBAC): no replica of the release can hold a freeze.
        log.info({ err }, 'no migrator access (its RBAC is gone): nothing of the release can be frozen')
      } finally {
        http.close()
        log.flush()
      }
    })
}
