#!/usr/bin/env -S node --max-semi-space-size=2 --heap-growing-percent=20
import { basename } from 'node:path'
import { CommanderError } from 'commander'
import { describeError, errorCode, interruption } from '../errors.js'
import { exitCodeFor } from './interrupt.js'
import { plainText } from '../sanitize.js'
import { buildProgram, withBooleanValues } from './program.js'
import { programName } from './program-name.js'
import { COMPLETE_COMMAND, runComplete } from './complete/complete.js'

/** Errors that are the caller's to fix before anything runs: exit 2, as a usage error. */
const USAGE_CODES: ReadonlySet<string> = new Set(['CRDM_CONFIG_INVALID', 'CRDM_KUBECONFIG', 'CRDM_LABEL_SELECTOR'])

const program = buildProgram(programName(process.argv[1], process.env))
// kubectl runs `kubectl_complete-crd_migrator WORD...` to complete the plugin: the standalone
// executable is that too when linked under that name (npm installs kubectl-complete.js instead).
const completing = basename(process.argv[1] ?? '').startsWith('kubectl_complete-')
const run = completing
  ? runComplete(program, process.argv.slice(2))
  : process.argv[2] === COMPLETE_COMMAND
    ? runComplete(program, process.argv.slice(3))
    : program.parseAsync(withBooleanValues(program, process.argv))
run.catch((err: unknown) => {
  // commander has printed its message (or the help, or the version) already.
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2)
  // Ctrl-C or SIGTERM: said as such, exit 128 + the signal's number (a shell's convention).
  const interrupted = interruption(err)
  if (interrupted) {
    process.stderr.write(`crd-migrator: ${interrupted.message}\n`)
    process.exit(exitCodeFor(interrupted.signal))
  }
  process.stderr.write(`crd-migrator: ${plainText(describeError(err))}\n`)
  // A kubeconfig that cannot be used is configuration too, and a selector that does not parse is usage.
  process.exit(USAGE_CODES.has(errorCode(err)) ? 2 : 1)
})
