/**
 * The program's name in usage, help and completion scripts: its own, or kubectl's plugin
 * name when kubectl runs it. Below program.ts, so the completion script can name the
 * program without importing the commands that register it.
 */
import { basename } from 'node:path'

/** The name in usage and help: `kubectl crd-migrator` when kubectl runs it as a plugin. */
export const PROGRAM_NAME = 'crd-migrator'
export const PLUGIN_NAME = 'kubectl crd-migrator'

/** kubectl runs a plugin by its file name (kubectl-crd_migrator); old kubectl versions also set KUBECTL_PLUGINS_CALLER. */
export function programName(script: string | undefined, env: NodeJS.ProcessEnv): string {
  const file = script ? basename(script) : ''
  return file.startsWith('kubectl-') || file.startsWith('kubectl_complete-') || env['KUBECTL_PLUGINS_CALLER'] ? PLUGIN_NAME : PROGRAM_NAME
}
