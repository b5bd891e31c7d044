import type { Command } from 'commander'

/** The command the completion scripts call (and kubectl, through kubectl_complete-crd_migrator): see complete/completion-output.ts. */
export const COMPLETE_COMMAND = '__complete'

/**
 * Hidden, so help never shows it. main.ts hands it the words before commander parses them:
 * commander would act on `--version`/`-h` anywhere and drop a `--`, words being completed here.
 */
export function registerComplete(program: Command): void {
  program
    .command(COMPLETE_COMMAND, { hidden: true })
    .description('print the completion candidates of the last word (cobra protocol)')
    .argument('[word...]', 'the words after the program name; the last is the one being completed')
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .action((words: string[]) => runComplete(program, words))
}

/** Prints the candidates and exits: nothing a look-up left behind (a socket, an exec plugin past the deadline) may keep the shell waiting. */
export async function runComplete(program: Command, words: readonly string[]): Promise<never> {
  const { completionOutput } = await import('./completion-output.js')
  const { writeSync } = await import('node:fs')
  writeSync(1, await completionOutput(program, words))
  process.exit(0)
}
