/** `crd-migrator status`: its flags, read once into the run's options; the run (run-status.ts) is loaded when it runs. */
import type { Command } from 'commander'
import { jsonOption, OUTPUT_FORMATS, outputFormat, outputOption } from '../output.js'
import { CLIENT_SETTINGS, flagReader, readOnlyCommand, shortCommandSetup, shutdownSignal, type FlagValues } from '../command-kit.js'

export const STATUS_SETTINGS = [...CLIENT_SETTINGS, 'migrating-annotation', 'selector', 'crds'] as const

export function registerStatus(program: Command): void {
  readOnlyCommand(program, 'status', STATUS_SETTINGS)
    .description('show managed CRDs: storage version, storedVersions, freeze, phase, progress and last result (reads only)')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD: -l/--selector and --crds)')
    .addOption(outputOption(OUTPUT_FORMATS))
    .addOption(jsonOption())
    .option('--summary', 'only the summary: counts by state, in flight, queued, ETA of the running CRDs', false)
    .option('-w, --watch', 'after the first output, print each change (a row, or with --summary the summary) until interrupted', false)
    .action(async (names: string[], opts: FlagValues, cmd: Command) => {
      const flags = flagReader(opts)
      const format = outputFormat(opts, OUTPUT_FORMATS)
      const { config: given, log, client } = shortCommandSetup(cmd, opts, names)
      // -l on the command line: what it matches, no more (kubectl), not the configured --crds besides.
      const selector = cmd.getOptionValueSource('selector') === 'cli' ? flags.string('selector') : undefined
      const selectorOnly = selector !== undefined
      const config = selectorOnly ? { ...given, migrator: { ...given.migrator, selector: { labelSelector: selector, names: [] } } } : given
      const { runStatusCommand } = await import('./run-status.js')
      const watch = flags.on('watch')
      process.exitCode = await runStatusCommand(config, process.stdout, {
        format,
        logger: log,
        names,
        summary: flags.on('summary'),
        watch,
        client,
        selectorOnly,
        ...(watch ? { signal: shutdownSignal(undefined) } : {}),
      })
    })
}
