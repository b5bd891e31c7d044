/**
 * What every command's registration shares: settings flags, kubectl's client flags, config,
 * logger, signals. Each command lists only the settings it reads (a serve-only flag in
 * `migrate --help` would promise what migrate does not do); cli-help.test.ts checks it.
 */
import { InvalidArgumentError, Option, type Command } from 'commander'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import { loadConfig } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { parseSettingValue, SETTINGS, type Setting } from '../config/settings.js'
import { settingChoices, settingDefault } from '../config/setting-values.js'
import type { KubeHttpFactoryOptions } from '../kube/client.js'
import { ConfigError, InterruptedError } from '../errors.js'
import { describeSettingOption } from './help.js'
import { exitCodeFor } from './interrupt.js'
import type { OutputFormat } from './output.js'

/** commander's values of one command's flags. */
export type FlagValues = Record<string, unknown>

/** Reads commander's values as their options' types: one check, not a cast per use; another type is a bug. */
export function flagReader(values: FlagValues) {
  function read<T>(key: string, is: (v: unknown) => v is T, what: string): T | undefined {
    const value = values[key]
    if (value === undefined || is(value)) return value
    throw new Error(`the value of ${key} is not ${what}: ${JSON.stringify(value)}`)
  }
  return {
    string: (key: string) => read(key, (v): v is string => typeof v === 'string', 'a string'),
    strings: (key: string) => read(key, isStrings, 'a list of strings'),
    number: (key: string) => read(key, (v): v is number => typeof v === 'number', 'a number'),
    /** A boolean flag: on when given (or defaulted) so. */
    on: (key: string) => Boolean(values[key]),
  }
}

const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === 'string')

/** Where, as whom and how patiently to talk to the API server, and the log: every short command's settings but version's. */
export const CLIENT_SETTINGS = ['kubeconfig', 'context', 'connect-attempts', 'log-level', 'log-format'] as const

/** Settings of the command line only: serve has every other. */
const CLI_ONLY = new Set(['progress-every'])
export const SERVE_SETTINGS: readonly string[] = SETTINGS.map((s) => s.flag).filter((flag) => !CLI_ONLY.has(flag))

/** The short commands (all but serve) log warnings only unless told: their output is the table, the summary. */
const SHORT_COMMAND_DEFAULTS: Readonly<Record<string, string | null>> = { 'log-level': 'warn' }

/** The read-only commands (status, check, plan) write nothing: what each setting means for them instead. */
const READ_ONLY_DESCRIPTIONS: Readonly<Record<string, string>> = {
  'max-attempts': 'tries per request (a list page, a read) before it counts as failed',
  'stash-presets': 'also look at copies of CRs stashed in other objects, by preset',
  'skip-phases': 'phases not to count as work',
  'rewrite-served-managed-fields': 'count managedFields of served non-storage versions as work too',
  'max-parallel-crds': 'CRDs a migration would run at once, for the estimate',
}

/** kubectl's short forms of the settings that mean the same there. */
const SHORT: Readonly<Record<string, string>> = { selector: '-l' }

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value]

const PLACEHOLDER: Readonly<Record<Setting['kind'], string>> = { string: 'value', int: 'n', number: 'n', list: 'a,b', boolean: '' }

/**
 * Adds --config and one option per setting in `flags`, showing choices, default and env (not
 * commander's default value, see help.ts); the config schema checks values from every source.
 */
export function addConfigOptions(
  cmd: Command,
  flags: readonly string[],
  /** What a setting means for this command, when not what the settings table says. */
  descriptions: Readonly<Record<string, string>> = {},
  /** A default that differs for this command (null: none to show). */
  defaults: Readonly<Record<string, string | null>> = {},
): Command {
  cmd.addOption(new Option('-c, --config <file>', 'YAML or JSON config file').env('CRD_MIGRATOR_CONFIG'))
  const unknown = flags.filter((f) => !SETTINGS.some((s) => s.flag === f))
  if (unknown.length) throw new Error(`no setting has the flag(s) ${unknown.join(', ')}`)
  for (const s of SETTINGS) {
    if (!flags.includes(s.flag)) continue
    const own = defaults[s.flag]
    const value = own === null ? undefined : (own ?? settingDefault(s))
    // Shown as a user types it: text quoted, numbers and booleans not, a list item by item.
    const items = s.kind === 'list' ? value?.split(',') : s.kind === 'string' && value !== undefined ? [value] : undefined
    const help = { default: items ? items.map((v) => JSON.stringify(v)).join(', ') : value, env: s.env }
    const description = descriptions[s.flag] ?? s.description
    if (s.kind === 'boolean') {
      cmd.addOption(describeSettingOption(new Option(`--${s.flag}`, description), { ...help, negatable: true }))
      cmd.addOption(new Option(`--no-${s.flag}`, `turn off: ${description}`).hideHelp())
      continue
    }
    const short = SHORT[s.flag]
    const option = new Option(`${short ? `${short}, ` : ''}--${s.flag} <${PLACEHOLDER[s.kind]}>`, description)
    // The choices are shown and completed; the schema checks them (a list's items too).
    const choices = settingChoices(s)
    if (choices) option.argChoices = [...choices]
    // A list flag may be given more than once, as kubectl's are: each value is kept.
    if (s.kind === 'list') option.argParser(collect)
    cmd.addOption(describeSettingOption(option, help))
  }
  return cmd
}

/** The flags of a short command (all but serve): its settings, warnings only unless told, and kubectl's client flags. */
export function shortCommand(
  cmd: Command,
  settings: readonly string[],
  descriptions: Readonly<Record<string, string>> = {},
  defaults: Readonly<Record<string, string | null>> = {},
): Command {
  return addClientFlags(addConfigOptions(cmd, settings, descriptions, { ...SHORT_COMMAND_DEFAULTS, ...defaults }))
}

/** A read-only command (status, check, plan): a short command whose settings say what they mean when nothing is written. */
export function readOnlyCommand(program: Command, name: string, settings: readonly string[]): Command {
  return shortCommand(program.command(name), settings, READ_ONLY_DESCRIPTIONS)
}

function camel(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())
}

const isSettingValue = (v: unknown): v is string | boolean | string[] => typeof v === 'string' || typeof v === 'boolean' || isStrings(v)

/** Builds the Config from defaults, --config, the environment and the given flags. */
export function configFromOptions(opts: FlagValues, env: NodeJS.ProcessEnv = process.env): Config {
  const flags: Record<string, unknown> = {}
  for (const s of SETTINGS) {
    const value = opts[camel(s.flag)]
    if (value === undefined) continue
    if (!isSettingValue(value)) throw new Error(`the value of --${s.flag} is not a flag's: ${JSON.stringify(value)}`)
    flags[s.path] = parseSettingValue(s, value, `--${s.flag}`)
  }
  return loadConfig({ file: flagReader(opts).string('config'), env, flags })
}

/**
 * A short command's config (warnings only unless --log-level or -v says otherwise), logger and
 * client flags; names given with a command-line selector are refused.
 */
export function shortCommandSetup(
  cmd: Command,
  opts: FlagValues,
  names: readonly string[] = [],
): { config: Config; log: Logger; client: ClientFlags } {
  refuseNamesWithSelector(cmd, names)
  const verbosity = flagReader(opts).number('verbosity')
  const config = configFromOptions({
    logLevel: 'warn',
    ...opts,
    ...(verbosity === undefined ? {} : { logLevel: verbosityLevel(verbosity) }),
  })
  return { config, log: logger(config, 'short'), client: clientFlags(opts) }
}

/**
 * serve: stdout, buffered, JSON off a terminal (a pod's log). Short commands: stderr, sync,
 * text unless --log-format json (JSON lines between the progress lines helped nobody).
 */
export function logger(config: Config, command: 'serve' | 'short'): Logger {
  return command === 'serve'
    ? createLogger({ level: config.logLevel, format: config.logFormat })
    : createLogger({ level: config.logLevel, format: config.logFormat ?? 'text', fd: 2, sync: true })
}

/** Names with a command-line selector would be ignored or silently intersected: refused, as kubectl does. */
export function refuseNamesWithSelector(cmd: Command, names: readonly string[]): void {
  if (names.length > 0 && cmd.getOptionValueSource('selector') === 'cli')
    throw new ConfigError(
      `${cmd.name()}: name CRDs or select them with -l/--selector, not both (kubectl: name cannot be provided when a selector is specified)`,
    )
}

/** The command line as typed (commander keeps it on the program), else the process's. */
export function rawArgs(cmd: Command): readonly string[] {
  const typed: unknown = cmd.parent ? Reflect.get(cmd.parent, 'rawArgs') : undefined
  return isStrings(typed) ? typed : process.argv
}

/**
 * The first SIGINT/SIGTERM aborts with CRDM_ABORTED (main.ts: exit 130/143); a second exits
 * at once. `migrate` has its own (interrupt.ts): it must lift its freezes first.
 */
export function shutdownSignal(log: Logger | undefined): AbortSignal {
  const controller = new AbortController()
  const onSignal = (sig: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(exitCodeFor(sig))
    log?.info({ signal: sig }, 'shutting down')
    controller.abort(new InterruptedError(sig))
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return controller.signal
}

/** What the runs of the read-only commands (status, check, plan) all take. */
export interface ReadCommandOptions {
  /** Where the client says it retries a server that never answered (--connect-attempts). */
  logger?: Logger
  format: OutputFormat
  /** --request-timeout, --as. */
  client?: ClientFlags
  signal?: AbortSignal
}

/** What the transport takes from these flags (kube/client.ts kubeHttp). */
export type ClientFlags = Pick<KubeHttpFactoryOptions, 'requestTimeoutMs' | 'impersonate'>

const UNIT_MS: Readonly<Record<string, number>> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 }
const DURATION = /^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/

/**
 * kubectl's --request-timeout: an integer is seconds, else a Go duration; 0 is none.
 * Milliseconds, rounded up (a tiny value still gives a deadline).
 */
export function parseRequestTimeout(text: string): number {
  const value = text.trim()
  if (/^\d+$/.test(value)) return Number(value) * 1000
  if (!DURATION.test(value))
    throw new InvalidArgumentError('a duration: seconds as an integer, or a number with a unit (e.g. 30s, 1m, 1h, 500ms); 0 for none')
  let ms = 0
  for (const [, n, unit] of value.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) ms += Number(n) * UNIT_MS[unit!]!
  return ms === 0 ? 0 : Math.max(1, Math.ceil(ms))
}

/** -v N as a log level: 0-1 warn, 2-3 info, 4-5 debug, 6 and up trace (with a line per request). */
export function verbosityLevel(n: number): 'warn' | 'info' | 'debug' | 'trace' {
  return n >= 6 ? 'trace' : n >= 4 ? 'debug' : n >= 2 ? 'info' : 'warn'
}

function parseVerbosity(text: string): number {
  if (!/^\d+$/.test(text.trim())) throw new InvalidArgumentError('a number from 0 (warnings) to 6 and up (every request)')
  return Number(text)
}

/** kubectl's client flags, meaning what they mean there; plain flags, not settings: they are about one invocation. */
function addClientFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--request-timeout <duration>',
        'how long a request to the API server may take, as kubectl: seconds, or 30s, 1m, 1h; 0 for no limit (watches are not cut)',
      ).argParser(parseRequestTimeout),
    )
    .addOption(new Option('--as <user>', 'act as this user (impersonation, as kubectl --as)'))
    .addOption(new Option('--as-group <group>', 'act with this group too, repeatable (needs --as)').argParser(collect))
    .addOption(new Option('--as-uid <uid>', 'act with this UID (needs --as)'))
    .addOption(
      new Option('-v, --verbosity <n>', 'log verbosity, as kubectl -v: 0 warnings, 2 info, 4 debug, 6 every request')
        .argParser(parseVerbosity)
        .conflicts('logLevel'),
    )
}

export function clientFlags(opts: FlagValues): ClientFlags {
  const values = flagReader(opts)
  const groups = values.strings('asGroup')
  const user = values.string('as')
  const uid = values.string('asUid')
  const impersonate = user !== undefined || uid !== undefined || groups?.length ? { user, uid, groups } : undefined
  const timeout = values.number('requestTimeout')
  return { ...(timeout !== undefined ? { requestTimeoutMs: timeout } : {}), ...(impersonate ? { impersonate } : {}) }
}
