/**
 * How every command's help reads: description, then `(choices: …, default: …, env: …)`,
 * wrapped to the terminal or to 100 columns. A config-backed flag's default is shown without
 * being commander's default value: that would count as given on the command line and beat the
 * config file and the environment (command-kit.ts configFromOptions).
 */
import { Help, type Command, type Option } from 'commander'

/** Columns of help written to something that is not a terminal (a pipe, a file, CI logs). */
const HELP_WIDTH_NOT_A_TTY = 100

/** What the help shows of a config-backed flag that commander does not hold itself. */
interface SettingHelp {
  /** As shown: quoted when text. */
  default?: string | undefined
  env?: string | undefined
  /** A boolean flag that also takes `--no-<flag>` (hidden, so help shows one line: `--[no-]flag`). */
  negatable?: boolean
}

const settingHelp = new WeakMap<Option, SettingHelp>()

/** Shown first in every command's help, in this order: what people type every day. */
const EVERYDAY_FLAGS = [
  '--selector',
  '--output',
  '--drop',
  '--manifests',
  '--fix',
  '--dry-run',
  '--measure',
  '--watch',
  '--kubeconfig',
  '--context',
]
/** How a command reaches the cluster and says what it does: after the command's own flags. */
const PLUMBING_FLAGS = new Set([
  '--config',
  '--request-timeout',
  '--as',
  '--as-group',
  '--as-uid',
  '--verbosity',
  '--log-level',
  '--log-format',
  '--json',
  '--help',
])

/** Records the default and env name a config-backed flag's help shows. */
export function describeSettingOption(option: Option, help: SettingHelp): Option {
  settingHelp.set(option, help)
  return option
}

function optionExtras(option: Option): string[] {
  const extras: string[] = []
  const own = settingHelp.get(option)
  if (option.argChoices) extras.push(`choices: ${option.argChoices.map((c) => JSON.stringify(c)).join(', ')}`)
  const shownDefault =
    own?.default !== undefined
      ? own.default
      : option.defaultValue !== undefined && (option.required || option.optional || typeof option.defaultValue === 'boolean')
        ? (option.defaultValueDescription ?? JSON.stringify(option.defaultValue))
        : undefined
  if (shownDefault !== undefined) extras.push(`default: ${shownDefault}`)
  if (option.presetArg !== undefined && option.optional) extras.push(`preset: ${JSON.stringify(option.presetArg)}`)
  const env = own?.env ?? option.envVar
  if (env !== undefined) extras.push(`env: ${env}`)
  return extras
}

/** Applies the help's form to `program`; call before adding commands, which inherit it. */
export function configureProgramHelp(program: Command): Command {
  return program
    .configureHelp({
      optionDescription(option: Option): string {
        const extras = optionExtras(option)
        return extras.length ? `${option.description} (${extras.join(', ')})`.trim() : option.description
      },
      // `--[no-]webhook`: the off form is shown, not hidden.
      optionTerm(option: Option): string {
        const term = Help.prototype.optionTerm.call(this, option)
        return settingHelp.get(option)?.negatable && option.long ? term.replace(option.long, option.long.replace(/^--/, '--[no-]')) : term
      },
      // The everyday flags first, then the command's own, then how it reaches the cluster, then the settings.
      visibleOptions(cmd: Command): Option[] {
        const rank = (o: Option) => {
          const everyday = EVERYDAY_FLAGS.indexOf(o.long ?? '')
          if (everyday >= 0) return everyday
          if (settingHelp.has(o)) return 3000
          return PLUMBING_FLAGS.has(o.long ?? '') ? 2000 : 1000
        }
        // Array sort is stable: each group keeps the order the command declared.
        return Help.prototype.visibleOptions.call(this, cmd).sort((a, b) => rank(a) - rank(b))
      },
      // A narrow terminal still wraps the long descriptions beside the long flag names.
      minWidthToWrap: 24,
    })
    .configureOutput({
      getOutHelpWidth: () => (process.stdout.isTTY ? process.stdout.columns : HELP_WIDTH_NOT_A_TTY),
      getErrHelpWidth: () => (process.stderr.isTTY ? process.stderr.columns : HELP_WIDTH_NOT_A_TTY),
    })
}
