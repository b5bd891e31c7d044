/** `-o text|wide|name|json|yaml` for the commands that print results (`--json` is kept as an alias). */
import { Option } from 'commander'
import { stringify } from 'yaml'
import { ConfigError } from '../errors.js'

export const OUTPUT_FORMATS = ['text', 'wide', 'name', 'json', 'yaml'] as const
export type OutputFormat = (typeof OUTPUT_FORMATS)[number]
type DataFormat = 'json' | 'yaml'

/** The -o option with the formats this command prints (`wide`, `name` only where they mean something). */
export function outputOption(formats: readonly OutputFormat[] = ['text', 'json', 'yaml']): Option {
  return new Option('-o, --output <format>', 'output format').choices(formats)
}

/** `--json`, which -o cannot be given with (they would disagree). */
export function jsonOption(): Option {
  return new Option('--json', 'the same as -o json').conflicts('output')
}

export function outputFormat(
  opts: { output?: unknown; json?: unknown },
  formats: readonly OutputFormat[] = ['text', 'json', 'yaml'],
): OutputFormat {
  const format = opts.output ?? (opts.json === true ? 'json' : 'text')
  if (typeof format === 'string' && (formats as readonly string[]).includes(format)) return format as OutputFormat
  throw new ConfigError(`--output: expected one of ${formats.join(', ')}, got ${JSON.stringify(format)}`)
}

export const isData = (format: OutputFormat): format is DataFormat => format === 'json' || format === 'yaml'

/** Machine-readable output: what the text form shows, as data. */
export function renderData(value: unknown, format: DataFormat): string {
  return format === 'json' ? `${JSON.stringify(value, null, 2)}\n` : stringify(value, { lineWidth: 0 })
}

/** `-o name`: one line per CRD, as kubectl prints it. */
export function renderNames(names: readonly string[]): string {
  return names.map((n) => `customresourcedefinition.apiextensions.k8s.io/${n}\n`).join('')
}

/** kubectl's line on stderr for each named CRD that does not exist; the exit code they make (1 when any). */
export function reportMissing(missing: readonly string[]): number {
  for (const name of missing) process.stderr.write(`crd-migrator: customresourcedefinition "${name}" not found\n`)
  return missing.length ? 1 : 0
}

/** Each column of a table (its header first) as wide as its widest cell. */
export function columnWidths(rows: readonly (readonly string[])[]): number[] {
  return rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
}

/** One line of a table: its cells two spaces apart, each padded to its column's width but the last. */
export function tableLine(cells: readonly string[], widths: readonly number[]): string {
  return cells
    .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
    .join('  ')
    .trimEnd()
}
