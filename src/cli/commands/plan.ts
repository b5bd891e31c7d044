import type { Command } from 'commander'
import { outputFormat } from '../output.js'
import { addConfigOptions, configFromOptions } from '../options.js'
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
      'page-size',
      'max-attempts',
    ].includes(s.flag),
  )
    .description('which CRDs need a migration, their object counts, and an estimate of how long it takes')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD)')
    .option('--no-scan', 'count objects only; do not read their metadata for managedFields to clean')
    .addOption(outputOption())
    .option('--json', 'the same as -o json')
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts)
      // Warnings only by default (a server that does not answer yet): the output is the table.
      const config = configFromOptions({ logLevel: 'warn', ...opts })
      const { runPlanCommand } = await import('../plan.js')
      process.exitCode = await runPlanCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        scan: opts.scan !== false,
        signal: shutdownSignal(undefined),
      })
    })
}
