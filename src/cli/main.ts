#!/usr/bin/env -S node --max-semi-space-size=2 --heap-growing-percent=20
import { Argument, Command, CommanderError, Option } from 'commander'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import type { Config } from '../config/schema.js'
import { ConfigError, describeError, errorCode } from '../errors.js'
import { plainText } from '../sanitize.js'
import { OUTPUT_FORMATS, outputFormat } from './output.js'
import { addConfigOptions, configFromOptions } from './options.js'
import { VERSION } from '../version.js'

// Each command's module is imported when it runs: `migrate` and `status` never load the
// webhook server and the metrics registry, `--version` and `--help` load neither (start-up time).

const program = new Command()
  .name('crd-migrator')
  .version(VERSION, '--version', 'print the version and exit')
  // Usage errors reach the one exit path below (exit code 2), help and --version exit 0.
  .exitOverride()
  .description(
    'Moves every custom resource of a CRD to its storage version, narrows status.storedVersions, and removes managedFields of unserved versions, behind a KEP-2855 freeze webhook.',
  )
  .showHelpAfterError()

/** `serve` logs to stdout, buffered; the short commands to stderr, line by line (log.ts). */
function logger(config: Config, command: 'serve' | 'short'): Logger {
  const format = config.logFormat
  return command === 'serve'
    ? createLogger({ level: config.logLevel, format })
    : createLogger({ level: config.logLevel, format, fd: 2, sync: true })
}

/** The flags of every command that talks to the API server: where, as whom, how patiently, and its log. */
const CLIENT_FLAGS = ['kubeconfig', 'context', 'connect-attempts', 'log-level', 'log-format']

/** Aborts on the first SIGINT/SIGTERM; a second one exits at once. */
function shutdownSignal(log: Logger | undefined): AbortSignal {
  const controller = new AbortController()
  const onSignal = (sig: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(130)
    log?.info({ signal: sig }, 'shutting down')
    controller.abort(new Error(`received ${sig}`))
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return controller.signal
}

addConfigOptions(program.command('serve'))
  .description('serve the validating webhook and, on the replica holding the Lease, run the migration controller')
  .action(async (opts: Record<string, unknown>) => {
    const config = configFromOptions(opts)
    const log = logger(config, 'serve')
    // Before start-up, not after: in a container node is PID 1, and PID 1 ignores a
    // SIGTERM it has no handler for. One during start-up closes as soon as it is done.
    const signal = shutdownSignal(log)
    const { serve } = await import('./serve.js')
    const handle = await serve(config, log)
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
    await handle.close()
    log.flush()
  })

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
  .addOption(outputOption())
  .option('--json', 'the same as -o json')
  .action(async (names: string[], opts: Record<string, unknown>) => {
    const format = outputFormat(opts)
    const resources = (opts.resource as string[] | undefined) ?? []
    if (names.length === 0 && resources.length === 0) throw new ConfigError('migrate: name at least one CRD, or --resource')
    if (resources.length > 0 && opts.dryRun) throw new ConfigError('migrate: --dry-run plans CRDs only, not --resource')
    const config = configFromOptions({ logLevel: 'warn', ...opts })
    const log = logger(config, 'short')
    const { runMigrateCommand } = await import('./migrate.js')
    process.exitCode = await runMigrateCommand(names, config, log, {
      resources,
      dryRun: Boolean(opts.dryRun),
      format,
      out: process.stdout,
      progressBar: process.stderr.isTTY === true && config.logLevel !== 'silent',
      signal: shutdownSignal(undefined),
    })
  })

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
    const { runStatusCommand } = await import('./status.js')
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

addConfigOptions(program.command('check'), (s) =>
  [...CLIENT_FLAGS, 'migrating-annotation', 'selector', 'crds', 'stash-presets', 'page-size', 'max-attempts'].includes(s.flag),
)
  .description('is it safe to drop a version? yes or no per CRD, with reasons; exit code 3 when not')
  .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD, or the CRDs of --manifests)')
  .option('--drop <version>', 'the version to drop')
  .option(
    '--manifests <path...>',
    "CRD manifests about to be applied (files or directories, e.g. a chart's crds/): their CRDs are checked, for the versions they no longer list unless --drop says",
  )
  .option('--strict', 'a check that could not be made (forbidden, version not deprecated) answers no', false)
  .addOption(outputOption())
  .option('--json', 'the same as -o json')
  .action(async (names: string[], opts: Record<string, unknown>) => {
    const format = outputFormat(opts)
    // Warnings only by default (a server that does not answer yet): the output is the table.
    const config = configFromOptions({ logLevel: 'warn', ...opts })
    const { runCheckCommand } = await import('./check.js')
    process.exitCode = await runCheckCommand(config, process.stdout, {
      format,
      logger: logger(config, 'short'),
      names,
      drop: opts.drop as string | undefined,
      manifests: opts.manifests as string[] | undefined,
      strict: Boolean(opts.strict),
      signal: shutdownSignal(undefined),
    })
  })

addConfigOptions(program.command('plan'), (s) =>
  [
    ...CLIENT_FLAGS,
    'selector',
    'crds',
    'skip-phases',
    'rewrite-served-managed-fields',
    'max-parallel-crds',
    'page-size',
    'max-attempts',
  ].includes(s.flag),
)
  .description('which CRDs need a migration, their object counts, and an estimate of how long it takes')
  .argument('[crd...]', 'only these CRDs, managed or not (default: every managed CRD)')
  .option('--no-scan', 'count objects only; do not read their metadata for managedFields to clean')
  .addOption(outputOption())
  .option('--json', 'the same as -o json')
  .action(async (names: string[], opts: Record<string, unknown>) => {
    const format = outputFormat(opts)
    // Warnings only by default (a server that does not answer yet): the output is the table.
    const config = configFromOptions({ logLevel: 'warn', ...opts })
    const { runPlanCommand } = await import('./plan.js')
    process.exitCode = await runPlanCommand(config, process.stdout, {
      format,
      logger: logger(config, 'short'),
      names,
      scan: opts.scan !== false,
      signal: shutdownSignal(undefined),
    })
  })

interface WebhookConfigOptions {
  ca: string
  host: string
  port: string
  out: string
  migratingAnnotation?: string
  migratorUsers?: string
  migratorGroups?: string
  builtinMigratorUsers?: string
}

program
  .command('webhook-config')
  .description('write the url variant of the ValidatingWebhookConfiguration for a webhook running on this machine')
  .option('--ca <file>', 'CA that signed the serving certificate', 'certs/ca.crt')
  .option('--host <host>', 'where the webhook listens', '127.0.0.1')
  .option('--port <port>', 'webhook port', '9443')
  .option('--out <file>', 'output file', 'webhook-config/local/validating-webhook.yaml')
  .option('--migrating-annotation <key>', 'annotation key that freezes a CRD')
  .option(
    '--migrator-users <a,b>',
    'usernames the API server does not send to the webhook (those of `serve --migrator-users`); default system:serviceaccount:crd-migrator:crd-migrator',
  )
  .option('--migrator-groups <a,b>', 'groups the API server does not send to the webhook (those of `serve --migrator-groups`)')
  .option(
    '--builtin-migrator-users <a,b>',
    "kube-controller-manager's usernames, whose StorageMigrating condition writes are not sent (those of `serve --builtin-migrator-users`)",
  )
  .action(async (opts: WebhookConfigOptions) => {
    const list = (v: string | undefined) =>
      v === undefined
        ? undefined
        : v
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean)
    const migratorUsers = list(opts.migratorUsers)
    const migratorGroups = list(opts.migratorGroups)
    const builtinMigratorUsers = list(opts.builtinMigratorUsers)
    const { writeLocalWebhookConfiguration } = await import('../webhook/configuration.js')
    await writeLocalWebhookConfiguration({
      caCertFile: opts.ca,
      host: opts.host,
      port: Number(opts.port),
      outFile: opts.out,
      annotationKey: opts.migratingAnnotation,
      migratorUsers,
      migratorGroups,
      builtinMigratorUsers,
    })
    process.stdout.write(`wrote ${opts.out}; install it with: kubectl apply -f ${opts.out}\n`)
  })

program
  .command('completion')
  .description('print a completion script for bash, zsh or fish, e.g. source <(crd-migrator completion bash)')
  .addArgument(new Argument('<shell>', 'bash, zsh or fish').choices(['bash', 'zsh', 'fish']))
  .action(async (shell: 'bash' | 'zsh' | 'fish') => {
    const { completionScript } = await import('./completion.js')
    process.stdout.write(completionScript(shell, program))
  })

function outputOption(): Option {
  return new Option('-o, --output <format>', 'output format').choices(OUTPUT_FORMATS)
}

// Exit codes: 0 done, 1 a migration or request failed, 2 bad usage or configuration, 3 `check`: not safe to drop.
program.parseAsync(process.argv).catch((err: unknown) => {
  // commander has printed its message (or the help, or the version) already.
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2)
  process.stderr.write(`crd-migrator: ${plainText(describeError(err))}\n`)
  // A kubeconfig that cannot be used is configuration too.
  process.exit(errorCode(err) === 'CRDM_CONFIG_INVALID' || errorCode(err) === 'CRDM_KUBECONFIG' ? 2 : 1)
})
