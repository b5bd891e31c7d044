import { parse as parseYaml } from 'yaml'
import type { z } from 'zod'
import { ConfigError, errorMessage } from '../errors.js'
import { FileRefused, MAX_CONFIG_FILE_BYTES, readRegularFileSync } from '../regular-file.js'
import { ConfigSchema, type Config } from './schema.js'
import { parseSettingValue, SETTINGS } from './settings.js'

interface ConfigSources {
  file?: string | undefined
  /** Environment to read settings from (process.env in production). */
  env?: Record<string, string | undefined>
  /** Flag values by setting path; they win over env and file. */
  flags?: Record<string, unknown>
}

/** Defaults, file, env, flags; validated once merged, so an error names the field whatever its source. */
export function loadConfig(sources: ConfigSources = {}): Config {
  const origin = new Map<string, string>()
  let merged: Record<string, unknown> = {}
  if (sources.file) {
    merged = readConfigFile(sources.file)
    for (const path of leafPaths(merged)) origin.set(path, `config file ${sources.file}`)
  }
  for (const setting of SETTINGS) {
    const raw = sources.env?.[setting.env]
    if (raw === undefined || raw === '') continue
    try {
      setPath(merged, setting.path, parseSettingValue(setting, raw, `environment variable ${setting.env}`))
    } catch (err) {
      throw new ConfigError(`invalid configuration:\n  ${setting.path}: ${errorMessage(err)}`, { cause: err })
    }
    origin.set(setting.path, `environment variable ${setting.env}`)
  }
  for (const [path, value] of Object.entries(sources.flags ?? {})) {
    if (value === undefined) continue
    setPath(merged, path, value)
    origin.set(path, `flag --${SETTINGS.find((s) => s.path === path)?.flag ?? path}`)
  }
  const parsed = ConfigSchema.safeParse(merged)
  if (!parsed.success) throw new ConfigError(formatIssues(parsed.error.issues, origin))
  return parsed.data
}

function readConfigFile(file: string): Record<string, unknown> {
  let text: string
  try {
    // Through regular-file.ts: Tab completion reads --config too, and a FIFO or a device
    // named there must be refused at once, not block the event loop before its deadline.
    text = readRegularFileSync(file, {
      what: `config file ${file}`,
      code: 'CRDM_CONFIG_INVALID',
      maxBytes: MAX_CONFIG_FILE_BYTES,
      hint: 'name the YAML file itself (a FIFO or a device is refused, never waited on or read)',
    }).toString('utf8')
  } catch (err) {
    if (err instanceof FileRefused) throw new ConfigError(err.message, { cause: err })
    throw new ConfigError(`cannot read config file ${file}: ${errorMessage(err)}`)
  }
  let doc: unknown
  try {
    doc = parseYaml(text, { prettyErrors: true })
  } catch (err) {
    throw new ConfigError(`config file ${file} is not valid YAML: ${errorMessage(err)}`)
  }
  if (doc === null || doc === undefined) return {}
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigError(`config file ${file} must hold a mapping at the top level`)
  return doc as Record<string, unknown>
}

function formatIssues(issues: z.core.$ZodIssue[], origin: Map<string, string>): string {
  const lines = issues.map((issue) => {
    const path = issue.path.map(String).join('.')
    const keys = issue.code === 'unrecognized_keys' ? ` (${issue.keys.join(', ')})` : ''
    const from = findOrigin(path, origin, issue.code === 'unrecognized_keys' ? issue.keys : [])
    return `  ${path || '(top level)'}${keys}: ${issue.message}${from ? ` [from ${from}]` : ''}`
  })
  return `invalid configuration:\n${lines.join('\n')}`
}

function findOrigin(path: string, origin: Map<string, string>, keys: string[] = []): string | undefined {
  // An unknown key's issue points at its parent; the key itself knows where it came from.
  for (const key of keys) {
    const o = origin.get(path ? `${path}.${key}` : key)
    if (o) return o
  }
  for (let p = path; p; p = p.includes('.') ? p.slice(0, p.lastIndexOf('.')) : '') {
    const o = origin.get(p)
    if (o) return o
  }
  return undefined
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.')
  let node = target
  for (const key of keys.slice(0, -1)) {
    const next = node[key]
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {}
    node = node[key] as Record<string, unknown>
  }
  node[keys[keys.length - 1]!] = value
}

function leafPaths(obj: Record<string, unknown>, prefix = ''): string[] {
  return Object.entries(obj).flatMap(([k, v]) => {
    const path = prefix ? `${prefix}.${k}` : k
    return typeof v === 'object' && v !== null && !Array.isArray(v) && k !== 'crds'
      ? [path, ...leafPaths(v as Record<string, unknown>, path)]
      : [path]
  })
}
