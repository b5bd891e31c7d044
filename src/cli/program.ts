/**
 * The CLI as a commander program, built but not run: main.ts parses argv with it, and the
 * generated CLI reference and the completion read the same commands and options.
 */
import { Command } from 'commander'
import { VERSION } from '../version.js'
import { registerServe } from './commands/serve.js'
import { registerLiftFreezes } from './commands/lift-freezes.js'
import { registerMigrate } from './commands/migrate.js'
import { registerStatus } from './commands/status.js'
import { registerCheck } from './commands/check.js'
import { registerPlan } from './commands/plan.js'
import { registerWebhookConfig } from './commands/webhook-config.js'
import { registerCompletion } from './commands/completion.js'
import { registerComplete } from './commands/complete.js'
import { registerVersion } from './commands/version.js'
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
    .showHelpAfterError()
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
  return program
}
