/**
 * How every command's help reads: each option's description, then in one parenthesis its
 * choices, its default and its environment variable, spelt one way (commander's
 * `(choices: …, default: …, env: …)`), wrapped to the terminal, or to 100 columns when
 * the output is not one.
 *
 * A config-backed flag's default is shown without being commander's default value: a
 * value commander filled in would count as given on the command line and beat the config
 * file and the environment (options.ts configFromOptions).
 */
import type { Command, Option } from 'commander'

/** Columns of help written to something that is not a terminal (a pipe, a file, CI logs). */
export const HELP_WIDTH_NOT_A_TTY = 100

/** What the help shows of a config-backed flag that commander does not hold itself. */
interface SettingHelp {
  /** As shown: quoted when text. */
  default?: string | undefined
  env?: string | undefined
}

const settingHelp = new WeakMap<Option, SettingHelp>()

/** Records the default and env name a config-backed flag's help shows. */
export function describeSettingOption(option: Option, help: SettingHelp): Option {
  settingHelp.set(option, help)
  return option
}

export function optionExtras(option: Option): string[] {
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
      // A narrow terminal still wraps the long descriptions beside the long flag names.
      minWidthToWrap: 24,
    })
    .configureOutput({
      getOutHelpWidth: () => (process.stdout.isTTY ? process.stdout.columns : HELP_WIDTH_NOT_A_TTY),
      getErrHelpWidth: () => (process.stderr.isTTY ? process.stderr.columns : HELP_WIDTH_NOT_A_TTY),
    })
}
