import type { Command } from 'commander'
import { outputFormat } from '../output.js'
import { addConfigOptions, configFromOptions } from '../options.js'
import { CLIENT_FLAGS, logger, outputOption, shutdownSignal } from '../command-kit.js'

export function registerStatus(program: Command): void {
  addConfigOptions(program.command('status'), (s) => [...CLIENT_FLAGS, 'migrating-annotation', 'selector', 'crds'].includes(s.flag))
    .description('show managed CRDs: storage version, storedVersions, freeze, phase, progress and last result')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD)')
    .addOption(outputOption())
    .option('--json', 'the same as -o json')
    .option('--summary', 'only the summary: counts by state, in flight, queued, ETA of the running CRDs', false)
    .option('-w, --watch', 'after the first output, print each change (a row, or with --summary the summary) until interrupted', false)
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts)
      // Warnings only by default (a server that does not answer yet): the output is the table.
      const config = configFromOptions({ logLevel: 'warn', ...opts })
      const { runStatusCommand } = await import('../status.js')
      const watch = Boolean(opts.watch)
      process.exitCode = await runStatusCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        summary: Boolean(opts.summary),
        watch,
        ...(watch ? { signal: shutdownSignal(undefined) } : {}),
      })
    })
}
