/**
 * The generated references under docs/reference/, each rendered from the code that owns
 * the facts: the CLI from the commander program (src/cli/program.ts), the configuration
 * from the settings table and the schema's defaults, the metrics from the registries the
 * product registers them on, the annotations from the state owner. Generic over commands,
 * options and settings: a new flag appears here without a change to this file.
 * dev/docs/main.ts writes them (npm run docs); test/unit/docs-reference.test.ts fails when
 * a committed page differs from what this renders.
 */
import type { EventEmitter } from 'node:events'
import { Help, type Command } from 'commander'
import { Registry } from 'prom-client'
import { buildProgram } from '../../src/cli/program.js'
import { SETTINGS } from '../../src/config/settings.js'
import { CONFIG_DEFAULTS } from '../../src/config/schema.js'
import { createMigratorMetrics } from '../../src/migrator/metrics.js'
import { createWebhookMetrics } from '../../src/webhook/metrics.js'
import { createProcessMetrics } from '../../src/health/process-metrics.js'
import { cell } from '../chart-docs.js'
import { annotationDocs } from './annotations.js'

const GENERATED = (source: string) =>
  `<!-- Generated from ${source} by \`npm run docs\` (dev/docs/). Do not edit: change the code and run npm run docs. -->`

const code = (s: string) => (s.includes('`') ? `\`\` ${s} \`\`` : `\`${s}\``)

// ---------------------------------------------------------------- CLI

/** Help text as one markdown line: wrapped help joined, `<placeholders>` outside code spans escaped. */
const text = (s: string) => cell(s.replace(/\s*\n\s*/g, ' '))

function commandSections(cmd: Command, helper: Help, depth: number): string[] {
  const out: string[] = []
  const usage = helper.commandUsage(cmd)
  out.push(`${'#'.repeat(Math.min(depth, 6))} ${usage.replace(/ \[options\].*$/, '').replace(/ \[.*$/, '')}`, '')
  const description = helper.commandDescription(cmd)
  if (description) out.push(text(description), '')
  const before = helpText(cmd, depth === 2 ? ['beforeAll', 'before'] : ['before'])
  if (before) out.push('```text', before, '```', '')
  out.push('```', `${usage}`, '```', '')
  const args = helper.visibleArguments(cmd)
  if (args.length > 0) {
    out.push('Arguments:', '')
    for (const a of args) {
      // As the usage line writes it: <required>, [optional], ... when it takes several.
      const term = `${a.required ? '<' : '['}${helper.argumentTerm(a)}${a.variadic ? '...' : ''}${a.required ? '>' : ']'}`
      out.push(`- ${code(term)}: ${text(helper.argumentDescription(a))}`)
    }
    out.push('')
  }
  const options = helper.visibleOptions(cmd)
  if (options.length > 0) {
    out.push('Options:', '')
    for (const o of options) {
      const description = helper.optionDescription(o)
      out.push(`- ${code(helper.optionTerm(o))}${description ? `: ${text(description)}` : ''}`)
    }
    out.push('')
  }
  const after = helpText(cmd, depth === 2 ? ['after', 'afterAll'] : ['after'])
  if (after) out.push('```text', after, '```', '')
  const subcommands = helper.visibleCommands(cmd).filter((c) => c.name() !== 'help')
  if (subcommands.length > 0) {
    out.push('Commands:', '')
    for (const c of subcommands)
      out.push(`- [${code(c.name())}](#${anchor(helper.commandUsage(c))}): ${text(helper.subcommandDescription(c))}`)
    out.push('')
    for (const c of subcommands) out.push(...commandSections(c, helper, depth + 1))
  }
  return out
}

/** What addHelpText adds to --help (examples, notes): commander writes it through these events. */
function helpText(cmd: Command, positions: string[]): string {
  let written = ''
  for (const position of positions) {
    ;(cmd as unknown as EventEmitter).emit(`${position}Help`, { error: false, command: cmd, write: (s: string) => (written += s) })
  }
  return written.replace(/^\s*\n/, '').replace(/\s+$/, '')
}

/** GitHub's anchor of a heading made by commandSections. */
function anchor(usage: string): string {
  const heading = usage.replace(/ \[options\].*$/, '').replace(/ \[.*$/, '')
  return heading
    .toLowerCase()
    .replace(/[^\w\- ]/g, '')
    .replace(/ /g, '-')
}

export function renderCliReference(program: Command = buildProgram()): string {
  const helper = program.createHelp()
  // No terminal: the page must not depend on the width of the one that ran the generator.
  helper.helpWidth = 10_000
  return [
    GENERATED('src/cli/program.ts (the commander program)'),
    '',
    '# CLI reference',
    '',
    'Every command, argument and option of `crd-migrator` (also installed as `kubectl-crd_migrator`, the kubectl plugin form), as `--help` prints them.',
    'Options backed by a setting can also be given as an environment variable or in the config file: see [configuration](configuration.md).',
    'Exit codes: 0 done, 1 a migration, a request or a lookup failed, 2 bad usage or configuration, 3 `check`: a version is not safe to drop ([troubleshooting](../troubleshooting.md)).',
    '',
    ...commandSections(program, helper, 2),
  ]
    .join('\n')
    .replace(/\n+$/, '\n')
}

// ---------------------------------------------------------------- configuration

const KNOWN_SETTING_FIELDS = new Set(['path', 'flag', 'env', 'kind', 'description'])

function valueAt(root: unknown, path: string): unknown {
  let v: unknown = root
  for (const k of path.split('.')) v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined
  return v
}

function shown(value: unknown): string {
  if (value === undefined) return '(none)'
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value.length === 0 ? '(none)' : code(value.join(','))
  return code(typeof value === 'string' ? value : JSON.stringify(value))
}

/** Leaves of the defaults (plain objects walked; arrays and scalars are leaves). */
function leaves(value: unknown, prefix: string[] = []): Array<[string, unknown]> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
    return Object.entries(value).flatMap(([k, v]) => leaves(v, [...prefix, k]))
  }
  return prefix.length > 0 ? [[prefix.join('.'), value]] : []
}

export function renderConfigurationReference(settings: readonly object[] = SETTINGS, defaults: unknown = CONFIG_DEFAULTS): string {
  const rows = settings.map((raw) => {
    const s = raw as Record<string, unknown> & { path: string; flag: string; env: string; kind: string; description: string }
    // Fields a later version of the table adds (choices, ...) are shown, not dropped.
    const extra = Object.entries(s)
      .filter(([k, v]) => !KNOWN_SETTING_FIELDS.has(k) && v !== undefined && typeof v !== 'function')
      .map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(', ') : typeof v === 'object' ? JSON.stringify(v) : String(v as string)}`)
    const description = [s.description, ...extra].join('; ')
    return `| ${code(s.path)} | ${code(`--${s.flag}`)} | ${code(s.env)} | ${s.kind} | ${cell(shown(valueAt(defaults, s.path)))} | ${cell(description)} |`
  })
  const covered = new Set(settings.map((s) => (s as { path: string }).path))
  const fileOnly = leaves(defaults).filter(([p]) => ![...covered].some((c) => p === c || p.startsWith(`${c}.`)))
  return [
    GENERATED('src/config/settings.ts (SETTINGS) and src/config/schema.ts (CONFIG_DEFAULTS)'),
    '',
    '# Configuration reference',
    '',
    'Defaults, then a YAML/JSON config file (`-c, --config <file>` / `CRD_MIGRATOR_CONFIG`), then environment variables, then flags.',
    'Everything is validated at start-up; a bad value stops the command (exit code 2, `CRDM_CONFIG_INVALID`) naming the field and where it came from.',
    'How these settings are used, with examples: [configuration](../configuration.md).',
    '',
    '## Settings (config file, flag, environment variable)',
    '',
    '| config file path | flag | environment variable | type | default | description |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
    '## Config file only',
    '',
    'Keys of the config file with no flag or environment variable, with their defaults (maps and lists such as `migrator.crds` are described in [configuration](../configuration.md)).',
    '',
    '| config file path | default |',
    '|---|---|',
    ...fileOnly.map(([p, v]) => `| ${code(p)} | ${cell(shown(v))} |`),
    '',
  ].join('\n')
}

// ---------------------------------------------------------------- metrics

/** The registries the product registers its metrics on, as `serve` does (default Node.js metrics aside). */
export function productRegistries(): Array<{ component: string; registry: Registry }> {
  const migrator = new Registry()
  createMigratorMetrics(migrator)
  const webhook = new Registry()
  createWebhookMetrics(webhook)
  const process = new Registry()
  createProcessMetrics(process, { version: '0', nodeVersion: '0' })
  return [
    { component: 'migrator', registry: migrator },
    { component: 'webhook', registry: webhook },
    { component: 'process', registry: process },
  ]
}

export function renderMetricsReference(registries = productRegistries()): string {
  const sections = registries.flatMap(({ component, registry }) => {
    const metrics = [...registry.getMetricsAsArray()].sort((a, b) => a.name.localeCompare(b.name))
    return [
      `## ${component}`,
      '',
      '| metric | type | labels | help |',
      '|---|---|---|---|',
      ...metrics.map((m) => {
        const labels = ((m as unknown as { labelNames?: string[] }).labelNames ?? []).filter((l) => l !== 'le')
        return `| ${code(m.name)} | ${m.type} | ${labels.map(code).join(', ')} | ${cell(m.help)} |`
      }),
      '',
    ]
  })
  return [
    GENERATED('the prom-client registries of src/migrator/metrics.ts, src/webhook/metrics.ts and src/health/process-metrics.ts'),
    '',
    '# Metrics reference',
    '',
    "Every metric crd-migrator registers, served by `serve` on the ops listener's `/metrics` (`--metrics-port`), next to prom-client's default Node.js process metrics.",
    'Histograms are scraped as `<name>_bucket`, `<name>_sum` and `<name>_count`. What they are for, alerts and the dashboard: [monitoring](../monitoring.md).',
    '',
    ...sections,
  ]
    .join('\n')
    .replace(/\n+$/, '\n')
}

// ---------------------------------------------------------------- annotations

export function renderAnnotationsReference(docs = annotationDocs()): string {
  return [
    GENERATED('src/state/crd-state.ts (StateAnnotation), src/config/annotations.ts and dev/docs/annotations.ts'),
    '',
    '# Annotations reference',
    '',
    'Every annotation and label crd-migrator reads or writes. Who may change them, what a success leaves, GitOps tools and unfreezing by hand: [annotations](../annotations.md).',
    '',
    '| key | on | meaning |',
    '|---|---|---|',
    ...docs.map((d) => `| ${code(d.key)} | ${cell(d.kind)} | ${cell(d.meaning)} |`),
    '',
  ].join('\n')
}

// ---------------------------------------------------------------- all pages

/** Every generated page: its path from the repository root and its text. */
export function referencePages(): Array<{ file: string; text: string }> {
  return [
    { file: 'docs/reference/cli.md', text: renderCliReference() },
    { file: 'docs/reference/configuration.md', text: renderConfigurationReference() },
    { file: 'docs/reference/metrics.md', text: renderMetricsReference() },
    { file: 'docs/reference/annotations.md', text: renderAnnotationsReference() },
  ]
}
