/**
 * `--flag=true` and `--flag=false` for boolean flags, as kubectl (pflag) takes them:
 * commander takes `--flag` and `--no-flag` only. Pure: argv and the command's options in,
 * argv out, before commander parses it. `--x=false` becomes `--no-x` when the command has
 * that form, or is dropped when the flag is off by default; `--x=true` becomes `--x` (or is
 * dropped when only `--no-x` exists). Anything else is left for commander to judge.
 */
export interface BooleanFlag {
  /** `--fix`, or `--no-scan` for a flag defined only in its negative form. */
  long: string
  negate: boolean
}

export function rewriteBooleanValues(args: readonly string[], flags: readonly BooleanFlag[]): string[] {
  const positives = new Set(flags.filter((f) => !f.negate).map((f) => f.long))
  const negatives = new Set(flags.filter((f) => f.negate).map((f) => f.long))
  const out: string[] = []
  for (const [i, arg] of args.entries()) {
    // Everything after `--` is an argument, never a flag.
    if (arg === '--') {
      out.push(...args.slice(i))
      break
    }
    const m = /^--([a-z0-9][a-z0-9-]*)=(true|false)$/i.exec(arg)
    if (!m) {
      out.push(arg)
      continue
    }
    const name = m[1]!
    const on = m[2]!.toLowerCase() === 'true'
    const positive = `--${name}`
    const negative = `--no-${name}`
    if (positives.has(positive)) {
      if (on) out.push(positive)
      else if (negatives.has(negative)) out.push(negative)
      // A flag with no negative form is off unless given: `--x=false` says nothing.
    } else if (negatives.has(negative)) {
      if (!on) out.push(negative)
    } else out.push(arg)
  }
  return out
}
