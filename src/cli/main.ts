#!/usr/bin/env -S node --max-semi-space-size=2 --heap-growing-percent=20
import { Command, CommanderError } from 'commander'
import { describeError, errorCode } from '../errors.js'
import { plainText } from '../sanitize.js'
import { VERSION } from '../version.js'
import { registerServe } from './commands/serve.js'
import { registerMigrate } from './commands/migrate.js'
import { registerStatus } from './commands/status.js'
import { registerCheck } from './commands/check.js'
import { registerPlan } from './commands/plan.js'
import { registerWebhookConfig } from './commands/webhook-config.js'
import { registerCompletion } from './commands/completion.js'

// Each command's module is imported when it runs: `migrate` and `status` never load the
// webhook server and the metrics registry, `--version` and `--help` load neither (start-up time).

const program = new Command()
  .name('crd-migrator')
  .version(VERSION, '--version', 'print the version and exit')
  // Usage errors reach the one exit path below (exit code 2), help and --version exit 0.
  .exitOverride()
  .description(
    'Moves every custom resource of a CRD to its storage version, narrows status.storedVersions, and removes managedFields of unserved versions, behind a KEP-2855 freeze webhook.',
  )
  .showHelpAfterError()

registerServe(program)
registerMigrate(program)
registerStatus(program)
registerCheck(program)
registerPlan(program)
registerWebhookConfig(program)
registerCompletion(program)

// Exit codes: 0 done, 1 a migration or request failed, 2 bad usage or configuration, 3 `check`: not safe to drop.
program.parseAsync(process.argv).catch((err: unknown) => {
  // commander has printed its message (or the help, or the version) already.
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2)
  process.stderr.write(`crd-migrator: ${plainText(describeError(err))}\n`)
  // A kubeconfig that cannot be used is configuration too.
  process.exit(errorCode(err) === 'CRDM_CONFIG_INVALID' || errorCode(err) === 'CRDM_KUBECONFIG' ? 2 : 1)
})
