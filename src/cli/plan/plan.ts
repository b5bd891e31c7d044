/** `crd-migrator plan`: its flags, what they say read once into the run's options, and the run (run-plan.ts, loaded when it runs). */
import type { Command } from 'commander'
import { jsonOption, OUTPUT_FORMATS, outputFormat, outputOption } from '../output.js'
import {
  CLIENT_SETTINGS,
  flagReader,
  readOnlyCommand,
  refuseNamesWithSelector,
  shortCommandSetup,
  shutdownSignal,
  type FlagValues,
} from '../command-kit.js'
import { ConfigError } from '../../errors.js'

export const PLAN_SETTINGS = [
  ...CLIENT_SETTINGS,
  'selector',
  'crds',
  'skip-phases',
  'rewrite-served-managed-fields',
  'max-parallel-crds',
  // plan runs the lossless check the run makes, with the same consent.
  'lossless-check',
  'accept-removals',
  'accept-changes',
  'accept-unchecked',
  'consent-annotations',
  // plan --measure writes (dry run) as the migration would.
  'concurrency',
  'qps',
  'page-size',
  'max-attempts',
] as const

export function registerPlan(program: Command): void {
  readOnlyCommand(program, 'plan', PLAN_SETTINGS)
    .description('which CRDs need a migration, their object counts, and an estimate of how long it takes (reads only)')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD: -l/--selector and --crds)')
    .option('--no-scan', 'count objects only; do not read their metadata for managedFields to clean')
    .option(
      '--measure',
      'estimate from a write rate measured on this cluster: a burst of dry-run no-op writes (dryRun=All, nothing stored) to objects of the CRDs planned, at --concurrency; needs patch permission on them',
      false,
    )
    .option('--measure-objects <n>', 'dry-run writes of --measure at most (default 200; at most 5 s of writes)', parseCount)
    .addOption(outputOption(OUTPUT_FORMATS))
    .addOption(jsonOption())
    .action(async (names: string[], opts: FlagValues, cmd: Command) => {
      const flags = flagReader(opts)
      const format = outputFormat(opts, OUTPUT_FORMATS)
      refuseNamesWithSelector(cmd, names)
      const samples = flags.number('measureObjects')
      if (samples !== undefined && !flags.on('measure')) throw new ConfigError('plan: --measure-objects needs --measure')
      const { config, log, client } = shortCommandSetup(cmd, opts)
      const { runPlanCommand, DEFAULT_MEASURE } = await import('./run-plan.js')
      process.exitCode = await runPlanCommand(config, process.stdout, {
        format,
        logger: log,
        names,
        scan: opts.scan !== false,
        measure: flags.on('measure') ? { ...DEFAULT_MEASURE, ...(samples ? { samples } : {}) } : undefined,
        client,
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
