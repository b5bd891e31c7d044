/**
 * kubectl's `--dry-run[=none|client|server]`. Bare, it is `client`. As in kubectl (pflag's
 * optional value), a value is given with `=`: `--dry-run server` is read as a bare
 * --dry-run and, since CRD names have dots, `server` cannot be one; a word after a bare
 * `--dry-run` that is not a strategy is an argument (a CRD name) again.
 */
import { ConfigError } from '../errors.js'

export const DRY_RUN_STRATEGIES = ['none', 'client', 'server'] as const
export type DryRunStrategy = (typeof DRY_RUN_STRATEGIES)[number]

const isStrategy = (v: string): v is DryRunStrategy => (DRY_RUN_STRATEGIES as readonly string[]).includes(v)

/**
 * The strategy, and the CRD name commander took as the flag's value when it was not
 * written `--dry-run=VALUE`. `value`: what commander parsed (true for a bare flag);
 * `rawArgs`: the command line as typed.
 */
export function resolveDryRun(value: unknown, rawArgs: readonly string[]): { strategy: DryRunStrategy; name?: string } {
  if (value === undefined || value === false) return { strategy: 'none' }
  if (value === true) return { strategy: 'client' }
  if (typeof value !== 'string') return { strategy: 'client' }
  const text = value
  if (isStrategy(text)) return { strategy: text }
  const attached = rawArgs.some((a) => a === `--dry-run=${text}`)
  if (attached) throw new ConfigError(invalid(text))
  return { strategy: 'client', name: text }
}

export function invalid(text: string): string {
  return `--dry-run: ${JSON.stringify(text)} is not a strategy; expected --dry-run (the same as --dry-run=client), --dry-run=none, --dry-run=client or --dry-run=server`
}
