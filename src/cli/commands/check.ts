import type { Command } from 'commander'
import { outputFormat } from '../output.js'
import { addConfigOptions, configFromOptions } from '../options.js'
import { CLIENT_FLAGS, logger, outputOption, shutdownSignal } from '../command-kit.js'

export function registerCheck(program: Command): void {
  addConfigOptions(program.command('check'), (s) =>
    [...CLIENT_FLAGS, 'migrating-annotation', 'selector', 'crds', 'stash-presets', 'page-size', 'max-attempts'].includes(s.flag),
  )
    .description('is it safe to drop a version? yes or no per CRD, with reasons; exit code 3 when not')
    .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD, or the CRDs of --manifests)')
    .option('--drop <version>', 'the version to drop')
    .option(
      '--manifests <path...>',
      "manifests about to be applied (files or directories, e.g. a chart's crds/, a GitOps folder): their CRDs are checked, for the versions they no longer list unless --drop says, and so are their custom resources written at such a version; Helm templates are skipped",
    )
    .option('--strict', 'a check that could not be made (forbidden, version not deprecated) answers no', false)
    .option(
      '--fix',
      'with --manifests: rewrite the apiVersion of custom resources written at a dropped version to the storage version, in place (conversion None only; a webhook-converted CRD is refused with the reason)',
      false,
    )
    .option('--dry-run', 'with --fix: print what would change, as a diff, and write nothing', false)
    .addOption(outputOption())
    .option('--json', 'the same as -o json')
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts)
      // Warnings only by default (a server that does not answer yet): the output is the table.
      const config = configFromOptions({ logLevel: 'warn', ...opts })
      const { runCheckCommand } = await import('../check.js')
      process.exitCode = await runCheckCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        drop: opts.drop as string | undefined,
        manifests: opts.manifests as string[] | undefined,
        strict: Boolean(opts.strict),
        fix: Boolean(opts.fix),
        dryRun: Boolean(opts.dryRun),
        signal: shutdownSignal(undefined),
      })
    })
}
