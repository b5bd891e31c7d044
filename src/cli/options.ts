import { Option, type Command } from 'commander'
import { loadConfig } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { parseSettingValue, SETTINGS, type Setting } from '../config/settings.js'
import { settingChoices, settingDefault } from '../config/setting-values.js'
import { describeSettingOption, markNegatable } from './help.js'

/** kubectl's short forms of the settings that mean the same there. */
const SHORT: Readonly<Record<string, string>> = { selector: '-l' }

const PLACEHOLDER: Readonly<Record<Setting['kind'], string>> = { string: 'value', int: 'n', number: 'n', list: 'a,b', boolean: '' }

/**
 * Adds --config and one option per setting in `flags` (in the settings table's order).
 * Each shows its choices, default and env name, none of them commander's own default
 * value (see help.ts); the values are checked by the config schema, for a flag as for
 * the file and the environment.
 */
export function addConfigOptions(
  cmd: Command,
  flags: readonly string[] | 'all',
  /** What a setting means for this command, when not what the settings table says. */
  descriptions: Readonly<Record<string, string>> = {},
  /** A default that differs for this command (null: none to show). */
  defaults: Readonly<Record<string, string | null>> = {},
): Command {
  cmd.addOption(new Option('-c, --config <file>', 'YAML or JSON config file').env('CRD_MIGRATOR_CONFIG'))
  const unknown = flags === 'all' ? [] : flags.filter((f) => !SETTINGS.some((s) => s.flag === f))
  if (unknown.length) throw new Error(`no setting has the flag(s) ${unknown.join(', ')}`)
  for (const s of SETTINGS) {
    if (flags !== 'all' && !flags.includes(s.flag)) continue
    const own = defaults[s.flag]
    const value = own === null ? undefined : (own ?? settingDefault(s))
    // Shown as a user types it: text quoted, numbers and booleans not, a list item by item.
    const shown =
      value === undefined || s.kind === 'int' || s.kind === 'number' || s.kind === 'boolean'
        ? value
        : s.kind === 'list'
          ? value
              .split(',')
              .map((v) => JSON.stringify(v))
              .join(', ')
          : JSON.stringify(value)
    const help = { default: shown, env: s.env }
    const description = descriptions[s.flag] ?? s.description
    if (s.kind === 'boolean') {
      cmd.addOption(markNegatable(describeSettingOption(new Option(`--${s.flag}`, description), help)))
      cmd.addOption(new Option(`--no-${s.flag}`, `turn off: ${description}`).hideHelp())
      continue
    }
    const short = SHORT[s.flag]
    const option = new Option(`${short ? `${short}, ` : ''}--${s.flag} <${PLACEHOLDER[s.kind]}>`, description)
    // The choices are shown and completed; the schema checks them (a list's items too).
    const choices = settingChoices(s)
    if (choices) option.argChoices = [...choices]
    // A list flag may be given more than once, as kubectl's are: each value is kept.
    if (s.kind === 'list') option.argParser((value: string, previous: string[] | undefined) => [...(previous ?? []), value])
    cmd.addOption(describeSettingOption(option, help))
  }
  return cmd
}

function camel(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())
}

/** Builds the Config from defaults, --config, the environment and the given flags. */
export function configFromOptions(opts: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): Config {
  const flags: Record<string, unknown> = {}
  for (const s of SETTINGS) {
    const value = opts[camel(s.flag)]
    if (value === undefined) continue
    flags[s.path] = parseSettingValue(s, value as string | boolean | string[], `--${s.flag}`)
  }
  return loadConfig({ file: opts.config as string | undefined, env, flags })
}
