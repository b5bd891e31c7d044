/**
 * The program's name in usage, help and completion scripts: its own, or kubectl's plugin name.
 * Apart from program.ts, so the completion script need not import every command.
 */
import { basename } from 'node:path'

export const PROGRAM_NAME = 'crd-migrator'
export const PLUGIN_NAME = 'kubectl crd-migrator'

/** kubectl runs a plugin by its file name (kubectl-crd_migrator); old kubectl versions also set KUBECTL_PLUGINS_CALLER. */
export function programName(script: string | undefined, env: NodeJS.ProcessEnv): string {
  const file = script ? basename(script) : ''
  return file.startsWith('kubectl-') || file.startsWith('kubectl_complete-') || env['KUBECTL_PLUGINS_CALLER'] ? PLUGIN_NAME : PROGRAM_NAME
}
