import { Option, type Command } from 'commander'
import { loadConfig } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { parseSettingValue, SETTINGS, type Setting } from '../config/settings.js'

/** Adds one option per setting (the shared table) plus --config. */
export function addConfigOptions(cmd: Command, only?: (s: Setting) => boolean): Command {
  cmd.addOption(new Option('-c, --config <file>', 'YAML or JSON config file').env('CRD_MIGRATOR_CONFIG'))
  for (const s of SETTINGS) {
    if (only && !only(s)) continue
    if (s.kind === 'boolean') {
      cmd.addOption(new Option(`--${s.flag}`, s.description))
      cmd.addOption(new Option(`--no-${s.flag}`, `turn off: ${s.description}`).hideHelp())
    } else {
      cmd.addOption(new Option(`--${s.flag} <${s.kind === 'list' ? 'a,b' : 'value'}>`, `${s.description} [env ${s.env}]`))
    }
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
    flags[s.path] = parseSettingValue(s, value as string | boolean, `--${s.flag}`)
  }
  return loadConfig({ file: opts.config as string | undefined, env, flags })
}
