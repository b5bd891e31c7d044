import { Argument, type Command } from 'commander'

export function registerCompletion(program: Command): void {
  program
    .command('completion')
    .description(
      'print a completion script for bash, zsh or fish, e.g. source <(crd-migrator completion bash); it asks the program, so Tab offers contexts, CRD names and flag values',
    )
    .addArgument(new Argument('<shell>', 'bash, zsh or fish').choices(['bash', 'zsh', 'fish']))
    .action(async (shell: 'bash' | 'zsh' | 'fish') => {
      const { completionScript } = await import('./completion-script.js')
      process.stdout.write(completionScript(shell))
    })
}
