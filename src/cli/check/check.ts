import type { Command } from 'commander'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import { addConfigOptions } from '../options.js'
import { addClientFlags, clientFlags } from '../client-flags.js'
import { COMMAND_SETTINGS, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS } from '../command-settings.js'
import { logger, refuseNamesWithSelector, shortCommandConfig, shutdownSignal } from '../command-kit.js'

export function registerCheck(program: Command): void {
  const cmd = program.command('check')
  addClientFlags(addConfigOptions(cmd, COMMAND_SETTINGS.check, READ_ONLY_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS))
    .description(
      'is it safe to drop a version? yes or no per CRD, with reasons; exit code 3 when not (reads the cluster only; --fix edits manifest files, nothing else)',
    )
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
    .option('--dry-run', 'with --fix: print what would change as a unified diff (git apply takes it) and write nothing', false)
    .option('--allow-empty', 'a selection that matches no CRD is not an error: exit 0 (default: exit 1, nothing was checked)', false)
    .addOption(outputOption())
    .addOption(jsonOption())
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts)
      refuseNamesWithSelector(cmd, names)
      const config = shortCommandConfig(opts)
      const { runCheckCommand } = await import('./run-check.js')
      process.exitCode = await runCheckCommand(config, process.stdout, {
        format,
        logger: logger(config, 'short'),
        names,
        drop: opts.drop as string | undefined,
        manifests: opts.manifests as string[] | undefined,
        strict: Boolean(opts.strict),
        fix: Boolean(opts.fix),
        dryRun: Boolean(opts.dryRun),
        allowEmpty: Boolean(opts.allowEmpty),
        client: clientFlags(opts),
        signal: shutdownSignal(undefined),
      })
    })
}
