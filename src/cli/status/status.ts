import type { Command } from 'commander'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import { addConfigOptions } from '../options.js'
import { addClientFlags, clientFlags } from '../client-flags.js'
import { COMMAND_SETTINGS, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS } from '../command-settings.js'
import { logger, refuseNamesWithSelector, shortCommandConfig, shutdownSignal } from '../command-kit.js'

const FORMATS = ['text', 'wide', 'name', 'json', 'yaml'] as const

export function registerStatus(program: Command): void {
  const cmd = program.command('status')
  addClientFlags(addConfigOptions(cmd, COMMAND_SETTINGS.status, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS))
    .description('show managed CRDs: storage version, storedVersions, freeze, phase, progress and last result (reads only)')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD: -l/--selector and --crds)')
    .addOption(outputOption(FORMATS))
    .addOption(jsonOption())
    .option('--summary', 'only the summary: counts by state, in flight, queued, ETA of the running CRDs', false)
    .option('-w, --watch', 'after the first output, print each change (a row, or with --summary the summary) until interrupted', false)
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts, FORMATS)
      refuseNamesWithSelector(cmd, names)
      // -l on the command line: what it matches, no more (kubectl), not the configured --crds besides.
      const selectorOnly = cmd.getOptionValueSource('selector') === 'cli'
      const given = shortCommandConfig(opts)
      const config = selectorOnly
        ? { ...given, migrator: { ...given.migrator, selector: { labelSelector: opts.selector as string, names: [] } } }
        : given
      const { runStatusCommand } = await import('./run-status.js')
      const watch = Boolean(opts.watch)
      process.exitCode = await runStatusCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        summary: Boolean(opts.summary),
        watch,
        client: clientFlags(opts),
        selectorOnly,
        ...(watch ? { signal: shutdownSignal(undefined) } : {}),
      })
    })
}
