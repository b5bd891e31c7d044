/**
 * The helm binary the tooling built (dev/controlplane/tools.ts), run with its caches and
 * config in a scratch directory of the test file (never $HOME), and values given as JSON
 * files (JSON is YAML).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { runProcess, type ProcessResult } from './run-process.js'

export type HelmResult = ProcessResult

export interface Helm {
  /** The scratch directory, removed when the file's tests end. */
  scratch: string
  run: (args: string[]) => Promise<HelmResult>
  /** `--values <file>` for these values. */
  valuesArgs: (values: object) => Promise<string[]>
}

export async function scratchHelm(helmBinary: string, prefix: string): Promise<Helm> {
  const scratch = await mkdtemp(join(tmpdir(), prefix))
  t.teardown(() => rm(scratch, { recursive: true, force: true }))
  const env = {
    ...process.env,
    HELM_CACHE_HOME: join(scratch, 'helm', 'cache'),
    HELM_CONFIG_HOME: join(scratch, 'helm', 'config'),
    HELM_DATA_HOME: join(scratch, 'helm', 'data'),
  }
  let valuesFiles = 0
  return {
    scratch,
    run: (args) => runProcess(helmBinary, args, { env }),
    valuesArgs: async (values) => {
      const file = join(scratch, `values-${++valuesFiles}.json`)
      await writeFile(file, JSON.stringify(values))
      return ['--values', file]
    },
  }
}
