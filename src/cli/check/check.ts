/** `crd-migrator check`: its flags, what they say read once into the run's options, and the run (run-check.ts, loaded when it runs). */
import type { Command } from 'commander'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import { CLIENT_SETTINGS, flagReader, readOnlyCommand, shortCommandSetup, shutdownSignal, type FlagValues } from '../command-kit.js'

export const CHECK_SETTINGS = [
  ...CLIENT_SETTINGS,
  'migrating-annotation',
  'selector',
  'crds',
  'stash-presets',
  'page-size',
  'max-attempts',
  // --drop runs the migration's lossless check, with the same consent as migrate.
  'accept-removals',
  'accept-changes',
  'accept-unchecked',
  'consent-annotations',
] as const

export function registerCheck(program: Command): void {
  readOnlyCommand(program, 'check', CHECK_SETTINGS)
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
    .action(async (names: string[], opts: FlagValues, cmd: Command) => {
      const flags = flagReader(opts)
      const format = outputFormat(opts)
      const { config, log, client } = shortCommandSetup(cmd, opts, names)
      const { runCheckCommand } = await import('./run-check.js')
      process.exitCode = await runCheckCommand(config, process.stdout, {
        format,
        logger: log,
        names,
        drop: flags.string('drop'),
        manifests: flags.strings('manifests'),
        strict: flags.on('strict'),
        fix: flags.on('fix'),
        dryRun: flags.on('dryRun'),
        allowEmpty: flags.on('allowEmpty'),
        client,
        signal: shutdownSignal(undefined),
      })
    })
}
