import type { Command } from 'commander'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import { addConfigOptions } from '../options.js'
import { addClientFlags, clientFlags } from '../client-flags.js'
import { COMMAND_SETTINGS, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS } from '../command-settings.js'
import { logger, refuseNamesWithSelector, shortCommandConfig, shutdownSignal } from '../command-kit.js'

const FORMATS = ['text', 'wide', 'name', 'json', 'yaml'] as const

export function registerPlan(program: Command): void {
  const cmd = program.command('plan')
  addClientFlags(addConfigOptions(cmd, COMMAND_SETTINGS.plan, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS))
    .description('which CRDs need a migration, their object counts, and an estimate of how long it takes (reads only)')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD: -l/--selector and --crds)')
    .option('--no-scan', 'count objects only; do not read their metadata for managedFields to clean')
    .addOption(outputOption(FORMATS))
    .addOption(jsonOption())
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts, FORMATS)
      refuseNamesWithSelector(cmd, names)
      const config = shortCommandConfig(opts)
      const { runPlanCommand } = await import('../plan.js')
      process.exitCode = await runPlanCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        scan: opts.scan !== false,
        client: clientFlags(opts),
        signal: shutdownSignal(undefined),
      })
    })
}
