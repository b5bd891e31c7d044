import type { Command } from 'commander'
import { outputFormat } from '../output.js'
import { addConfigOptions, configFromOptions } from '../options.js'
import { ConfigError } from '../../errors.js'
import { CLIENT_FLAGS, logger, outputOption, shutdownSignal } from '../command-kit.js'

export function registerPlan(program: Command): void {
  addConfigOptions(program.command('plan'), (s) =>
    [
      ...CLIENT_FLAGS,
      'selector',
      'crds',
      'skip-phases',
      'rewrite-served-managed-fields',
      'max-parallel-crds',
      'concurrency',
      'qps',
      'page-size',
      'max-attempts',
    ].includes(s.flag),
  )
    .description('which CRDs need a migration, their object counts, and an estimate of how long it takes')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD)')
    .option('--no-scan', 'count objects only; do not read their metadata for managedFields to clean')
    .option(
      '--measure',
      'estimate from a write rate measured on this cluster: a burst of dry-run no-op writes (dryRun=All, nothing stored) to objects of the CRDs planned, at --concurrency; needs patch permission on them',
      false,
    )
    .option('--measure-objects <n>', 'dry-run writes of --measure at most (default 200; at most 5 s of writes)', parseCount)
    .addOption(outputOption())
    .option('--json', 'the same as -o json')
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts)
      if (opts.measureObjects !== undefined && !opts.measure) throw new ConfigError('plan: --measure-objects needs --measure')
      // Warnings only by default (a server that does not answer yet): the output is the table.
      const config = configFromOptions({ logLevel: 'warn', ...opts })
      const { runPlanCommand, DEFAULT_MEASURE } = await import('../plan.js')
      process.exitCode = await runPlanCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        scan: opts.scan !== false,
        measure: opts.measure
          ? { ...DEFAULT_MEASURE, ...(opts.measureObjects ? { samples: opts.measureObjects as number } : {}) }
          : undefined,
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
