import { Option, type Command } from 'commander'
import { ConfigError } from '../../errors.js'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import { addConfigOptions } from '../options.js'
import { addClientFlags, clientFlags } from '../client-flags.js'
import { COMMAND_SETTINGS, MIGRATE_DESCRIPTIONS, SHORT_COMMAND_DEFAULTS } from '../command-settings.js'
import { DRY_RUN_STRATEGIES, resolveDryRun } from '../dry-run-flag.js'
import { logger, refuseNamesWithSelector, shortCommandConfig } from '../command-kit.js'
import { Interrupt } from '../interrupt.js'

const FORMATS = ['text', 'name', 'json', 'yaml'] as const

function dryRunOption(): Option {
  const option = new Option(
    '--dry-run [strategy]',
    'client: report what each phase would do, from reads; server: send every rewrite with dryRun=All (the API server converts, admits and validates each, persists nothing; no freeze); none: migrate',
  ).preset('client')
  // Shown and completed; checked by resolveDryRun (a name after a bare --dry-run is a CRD).
  option.argChoices = [...DRY_RUN_STRATEGIES]
  return option
}

export function registerMigrate(program: Command): void {
  const cmd = program.command('migrate')
  addClientFlags(addConfigOptions(cmd, COMMAND_SETTINGS.migrate, MIGRATE_DESCRIPTIONS, { ...SHORT_COMMAND_DEFAULTS, selector: null }))
    .description(
      'migrate the named CRDs (or those -l selects, or resources) now: up to --max-parallel-crds (default 4) at once, under one write budget',
    )
    .argument('[crd...]', 'CRD names, e.g. widgets.example.com (or none, with -l/--selector)')
    .option(
      '--resource <resource...>',
      'resources to migrate, kubectl style (resource[.version][.group]): a built-in one (e.g. secrets, after an encryption key rotation) has every object rewritten; a custom one is its CRD migration',
    )
    .addOption(dryRunOption())
    .option(
      '--force',
      'rewrite every object even when status.storedVersions already says [storage] (e.g. narrowed by hand while objects are still stored at an old version); the freeze and every check as usual, storedVersions [storage] at the end',
      false,
    )
    .addOption(outputOption(FORMATS))
    .addOption(jsonOption())
    .action(async (args: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts, FORMATS)
      const dry = resolveDryRun(opts.dryRun, (cmd.parent as { rawArgs?: string[] } | null)?.rawArgs ?? process.argv)
      const names = dry.name ? [dry.name, ...args] : args
      const resources = (opts.resource as string[] | undefined) ?? []
      refuseNamesWithSelector(cmd, names)
      const selector = cmd.getOptionValueSource('selector') === 'cli' ? (opts.selector as string) : undefined
      if (names.length === 0 && resources.length === 0 && selector === undefined)
        throw new ConfigError('migrate: name at least one CRD, select CRDs with -l/--selector, or give --resource')
      if (resources.length > 0 && dry.strategy !== 'none')
        throw new ConfigError(`migrate: --dry-run=${dry.strategy} covers CRDs only, not --resource`)
      const config = shortCommandConfig(opts)
      const log = logger(config, 'short')
      // Listening before anything is frozen: a Ctrl-C from here on lifts what the run froze.
      // A dry run (client or server) freezes nothing: Ctrl-C ends it at once, as Node does by default.
      const interrupt = dry.strategy !== 'none' ? undefined : new Interrupt(config.annotations.migrating)
      interrupt?.install()
      const { runMigrateCommand } = await import('./run-migrate.js')
      process.exitCode = await runMigrateCommand(names, config, log, {
        resources,
        dryRun: dry.strategy === 'client',
        serverDryRun: dry.strategy === 'server',
        force: Boolean(opts.force),
        ...(selector !== undefined ? { selector } : {}),
        client: clientFlags(opts),
        format,
        out: process.stdout,
        progress: config.logLevel === 'silent' ? 'off' : process.stderr.isTTY === true ? 'live' : 'plain',
        ...(interrupt ? { interrupt } : {}),
      })
    })
}
