/**
 * The CLI as a commander program, built but not run: main.ts parses argv with it, and the
 * generated CLI reference and the completion read the same commands and options.
 */
import { Command } from 'commander'
import { VERSION } from '../version.js'
import { registerServe } from './serve/serve.js'
import { registerLiftFreezes } from './lift-freezes/lift-freezes.js'
import { registerMigrate } from './migrate/migrate.js'
import { registerStatus } from './status/status.js'
import { registerCheck } from './check/check.js'
import { registerPlan } from './plan/plan.js'
import { registerWebhookConfig } from './serve/webhook-config.js'
import { registerCompletion } from './complete/completion.js'
import { registerComplete } from './complete/complete.js'
import { registerVersion } from './version/version.js'
import { examplesText } from './examples.js'
import { configureProgramHelp } from './help.js'
import { PROGRAM_NAME } from './program-name.js'

// Each command's module is imported when it runs: `migrate` and `status` never load the
// webhook server and the metrics registry, `--version` and `--help` load neither (start-up time).
export function buildProgram(name: string = PROGRAM_NAME): Command {
  const program = configureProgramHelp(new Command())
    .name(name)
    .version(VERSION, '--version', 'print the version and exit')
    // Usage errors reach main.ts's one exit path (exit code 2), help and --version exit 0.
    .exitOverride()
    .description(
      'Moves every custom resource of a CRD to its storage version, narrows status.storedVersions, and removes managedFields of unserved versions, behind a KEP-2855 freeze webhook.',
    )
  registerServe(program)
  registerLiftFreezes(program)
  registerMigrate(program)
  registerStatus(program)
  registerCheck(program)
  registerPlan(program)
  registerWebhookConfig(program)
  registerVersion(program)
  registerCompletion(program)
  registerComplete(program)
  // A usage error says what is wrong and where the help is, as kubectl does, not 30-160 lines of help.
  program.showHelpAfterError(`See '${name} --help'.`)
  for (const cmd of program.commands) {
    cmd.showHelpAfterError(`See '${name} ${cmd.name()} --help'.`)
    const examples = examplesText(name, cmd.name())
    if (examples) cmd.addHelpText('after', examples)
  }
  return program
}

/** `argv` with `--flag=true|false` of the command it runs turned into the forms commander takes (rewriteBooleanValues). */
export function withBooleanValues(program: Command, argv: readonly string[]): string[] {
  const cmd = program.commands.find((c) => c.name() === argv[2] || c.aliases().includes(argv[2] ?? ''))
  if (!cmd) return [...argv]
  const flags = cmd.options.filter((o) => !o.required && !o.optional && o.long).map((o) => ({ long: o.long!, negate: o.negate }))
  return [...argv.slice(0, 3), ...rewriteBooleanValues(argv.slice(3), flags)]
}

/**
 * `--flag=true|false` for boolean flags, as kubectl (pflag) takes them; commander takes only
 * `--flag` and `--no-flag`. `--x=false` becomes `--no-x`, or is dropped when off by default;
 * `--x=true` becomes `--x` (or is dropped when only `--no-x` exists). Anything else: commander judges.
 */
interface BooleanFlag {
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
    } else if (negatives.has(negative)) {
      if (!on) out.push(negative)
    } else out.push(arg)
  }
  return out
}
