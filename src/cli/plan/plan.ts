import type { Command } from 'commander'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import { addConfigOptions } from '../options.js'
import { addClientFlags, clientFlags } from '../client-flags.js'
import { COMMAND_SETTINGS, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS } from '../command-settings.js'
import { logger, refuseNamesWithSelector, shortCommandConfig, shutdownSignal } from '../command-kit.js'
import { ConfigError } from '../../errors.js'

const FORMATS = ['text', 'wide', 'name', 'json', 'yaml'] as const

export function registerPlan(program: Command): void {
  const cmd = program.command('plan')
  addClientFlags(addConfigOptions(cmd, COMMAND_SETTINGS.plan, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS))
    .description('which CRDs need a migration, their object counts, and an estimate of how long it takes (reads only)')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD: -l/--selector and --crds)')
    .option('--no-scan', 'count objects only; do not read their metadata for managedFields to clean')
    .option(
      '--measure',
      'estimate from a write rate measured on this cluster: a burst of dry-run no-op writes (dryRun=All, nothing stored) to objects of the CRDs planned, at --concurrency; needs patch permission on them',
      false,
    )
    .option('--measure-objects <n>', 'dry-run writes of --measure at most (default 200; at most 5 s of writes)', parseCount)
    .addOption(outputOption(FORMATS))
    .addOption(jsonOption())
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts, FORMATS)
      refuseNamesWithSelector(cmd, names)
      if (opts.measureObjects !== undefined && !opts.measure) throw new ConfigError('plan: --measure-objects needs --measure')
      const config = shortCommandConfig(opts)
      const { runPlanCommand, DEFAULT_MEASURE } = await import('./run-plan.js')
      process.exitCode = await runPlanCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        scan: opts.scan !== false,
        measure: opts.measure
          ? { ...DEFAULT_MEASURE, ...(opts.measureObjects ? { samples: opts.measureObjects as number } : {}) }
          : undefined,
        client: clientFlags(opts),
        signal: shutdownSignal(undefined),
      })
    })
}

function parseCount(value: string): number {
  const n = Number(value)
  if (!Number.isInteger(n) || n < 1 || n > 10_000)
    throw new ConfigError(`plan: --measure-objects must be a whole number from 1 to 10000, got ${JSON.stringify(value)}`)
  return n
}
