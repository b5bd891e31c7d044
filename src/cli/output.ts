/** `-o text|json|yaml` for the commands that print results (`--json` is kept as an alias). */
import { stringify } from 'yaml'
import { ConfigError } from '../errors.js'

export const OUTPUT_FORMATS = ['text', 'json', 'yaml'] as const
export type OutputFormat = (typeof OUTPUT_FORMATS)[number]

export function outputFormat(opts: { output?: unknown; json?: unknown }): OutputFormat {
  const format = opts.output ?? (opts.json === true ? 'json' : 'text')
  if (typeof format === 'string' && (OUTPUT_FORMATS as readonly string[]).includes(format)) return format as OutputFormat
  throw new ConfigError(`--output: expected one of ${OUTPUT_FORMATS.join(', ')}, got ${JSON.stringify(format)}`)
}

/** Machine-readable output: what the text form shows, as data. */
export function renderData(value: unknown, format: Exclude<OutputFormat, 'text'>): string {
  return format === 'json' ? `${JSON.stringify(value, null, 2)}\n` : stringify(value, { lineWidth: 0 })
}
