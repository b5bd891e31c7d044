/** `crd-migrator migrate`: its flags, what they say read once into the run's options, and the run (run-migrate.ts, loaded when it runs). */
import { Option, type Command } from 'commander'
import { ConfigError } from '../../errors.js'
import { jsonOption, outputFormat, outputOption } from '../output.js'
import {
  CLIENT_SETTINGS,
  flagReader,
  rawArgs,
  refuseNamesWithSelector,
  shortCommand,
  shortCommandSetup,
  type FlagValues,
} from '../command-kit.js'
import { Interrupt } from '../interrupt.js'

export const MIGRATE_SETTINGS = [
  ...CLIENT_SETTINGS,
  'migrating-annotation',
  'selector',
  'concurrency',
  'qps',
  'max-parallel-crds',
  'page-size',
  'max-attempts',
  'skip-phases',
  'stash-presets',
  'lossless-check',
  'accept-removals',
  'accept-changes',
  'accept-unchecked',
  'consent-annotations',
  'rewrite-served-managed-fields',
  'conversion-outage-limit-seconds',
  'apiserver-endpoints',
  'storage-switch-timeout-seconds',
  'engine',
  'builtin-start-timeout-seconds',
  'conversion-wait-seconds',
  'progress-interval-seconds',
  'progress-every',
  'takeover-after-seconds',
  'state-key-file',
  'strict-state-key-file',
] as const

/** migrate acts on the CRDs -l selects only when given -l, never on the configured selection. */
const MIGRATE_DESCRIPTIONS: Readonly<Record<string, string>> = {
  selector: 'migrate the CRDs this label selector matches, instead of naming them (as kubectl -l)',
}

const FORMATS = ['text', 'name', 'json', 'yaml'] as const

/**
 * kubectl's `--dry-run[=none|client|server]`, bare meaning `client`. As pflag's optional value,
 * a value is given with `=`; a word after a bare `--dry-run` that is not a strategy is an
 * argument (a CRD name: those have dots, so `server` cannot be one).
 */
const DRY_RUN_STRATEGIES = ['none', 'client', 'server'] as const
type DryRunStrategy = (typeof DRY_RUN_STRATEGIES)[number]

const isStrategy = (v: string): v is DryRunStrategy => (DRY_RUN_STRATEGIES as readonly string[]).includes(v)

/** The strategy, and the CRD name commander took as the flag's value unless written `--dry-run=VALUE` (`value`: true for a bare flag). */
export function resolveDryRun(value: unknown, rawArgs: readonly string[]): { strategy: DryRunStrategy; name?: string } {
  if (value === undefined || value === false) return { strategy: 'none' }
  if (typeof value !== 'string') return { strategy: 'client' }
  if (isStrategy(value)) return { strategy: value }
  if (rawArgs.includes(`--dry-run=${value}`))
    throw new ConfigError(
      `--dry-run: ${JSON.stringify(value)} is not a strategy; expected --dry-run (the same as --dry-run=client), --dry-run=none, --dry-run=client or --dry-run=server`,
    )
  return { strategy: 'client', name: value }
}

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
  shortCommand(program.command('migrate'), MIGRATE_SETTINGS, MIGRATE_DESCRIPTIONS, { selector: null })
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
    .action(async (args: string[], opts: FlagValues, cmd: Command) => {
      const flags = flagReader(opts)
      const format = outputFormat(opts, FORMATS)
      const dry = resolveDryRun(opts.dryRun, rawArgs(cmd))
      const names = dry.name ? [dry.name, ...args] : args
      const resources = flags.strings('resource') ?? []
      refuseNamesWithSelector(cmd, names)
      const selector = cmd.getOptionValueSource('selector') === 'cli' ? flags.string('selector') : undefined
      if (names.length === 0 && resources.length === 0 && selector === undefined)
        throw new ConfigError('migrate: name at least one CRD, select CRDs with -l/--selector, or give --resource')
      if (resources.length > 0 && dry.strategy !== 'none')
        throw new ConfigError(`migrate: --dry-run=${dry.strategy} covers CRDs only, not --resource`)
      const { config, log, client } = shortCommandSetup(cmd, opts)
      // Listening before anything is frozen: a Ctrl-C from here on lifts what the run froze.
      // A dry run (client or server) freezes nothing: Ctrl-C ends it at once, as Node does by default.
      const interrupt = dry.strategy !== 'none' ? undefined : new Interrupt(config.annotations.migrating)
      interrupt?.install()
      const { runMigrateCommand } = await import('./run-migrate.js')
      process.exitCode = await runMigrateCommand(names, config, log, {
        resources,
        dryRun: dry.strategy === 'client',
        serverDryRun: dry.strategy === 'server',
        force: flags.on('force'),
        ...(selector !== undefined ? { selector } : {}),
        client,
        format,
        out: process.stdout,
        progress: config.logLevel === 'silent' ? 'off' : process.stderr.isTTY === true ? 'live' : 'plain',
        ...(interrupt ? { interrupt } : {}),
      })
    })
}
