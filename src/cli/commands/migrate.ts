import type { Command } from 'commander'
import { ConfigError } from '../../errors.js'
import { outputFormat } from '../output.js'
import { addConfigOptions, configFromOptions } from '../options.js'
import { logger, outputOption } from '../command-kit.js'
import { Interrupt } from '../interrupt.js'

export function registerMigrate(program: Command): void {
  addConfigOptions(
    program.command('migrate'),
    (s) =>
      ![
        'webhook',
        'webhook-host',
        'webhook-port',
        'tls-cert',
        'tls-key',
        'body-limit-bytes',
        'metrics-port',
        'migrator',
        'leader-elect',
        'lease-namespace',
        'lease-name',
        'resync-seconds',
        'migrator-users',
        'migrator-groups',
        'break-glass-groups',
      ].includes(s.flag),
  )
    .description('migrate the named CRDs (or resources) now, one after the other')
    .argument('[crd...]', 'CRD names, e.g. widgets.example.com')
    .option(
      '--resource <resource...>',
      'resources to migrate, kubectl style (resource[.version][.group]): a built-in one (e.g. secrets, after an encryption key rotation) has every object rewritten; a custom one is its CRD migration',
    )
    .option('--dry-run', 'report what each phase would do; write nothing', false)
    .option(
      '--force',
      'rewrite every object even when status.storedVersions already says [storage] (e.g. narrowed by hand while objects are still stored at an old version); the freeze and every check as usual, storedVersions [storage] at the end',
      false,
    )
    .addOption(outputOption())
    .option('--json', 'the same as -o json')
    .action(async (names: string[], opts: Record<string, unknown>) => {
      const format = outputFormat(opts)
      const resources = (opts.resource as string[] | undefined) ?? []
      if (names.length === 0 && resources.length === 0) throw new ConfigError('migrate: name at least one CRD, or --resource')
      if (resources.length > 0 && opts.dryRun) throw new ConfigError('migrate: --dry-run plans CRDs only, not --resource')
      const config = configFromOptions({ logLevel: 'warn', ...opts })
      const log = logger(config, 'short')
      // Listening before anything is frozen: a Ctrl-C from here on lifts what the run froze.
      // A dry run freezes nothing: Ctrl-C ends it at once, as Node does by default.
      const interrupt = opts.dryRun ? undefined : new Interrupt(config.annotations.migrating)
      interrupt?.install()
      const { runMigrateCommand } = await import('../migrate.js')
      process.exitCode = await runMigrateCommand(names, config, log, {
        resources,
        dryRun: Boolean(opts.dryRun),
        force: Boolean(opts.force),
        format,
        out: process.stdout,
        progress: config.logLevel === 'silent' ? 'off' : process.stderr.isTTY === true ? 'live' : 'plain',
        ...(interrupt ? { interrupt } : {}),
      })
    })
}
