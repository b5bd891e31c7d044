/**
 * The helm binary the tooling built (dev/controlplane/tools.ts), run with its caches and
 * config in a scratch directory of the test file (never $HOME), and values given as JSON
 * files (JSON is YAML).
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'

export interface HelmResult {
  code: number | null
  stdout: string
  stderr: string
}

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
    run: (args) =>
      new Promise((resolve, reject) => {
        const child = spawn(helmBinary, args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
        let stdout = ''
        let stderr = ''
        child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d))
        child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d))
        child.on('error', reject)
        child.on('close', (code) => resolve({ code, stdout, stderr }))
      }),
    valuesArgs: async (values) => {
      const file = join(scratch, `values-${++valuesFiles}.json`)
      await writeFile(file, JSON.stringify(values))
      return ['--values', file]
    },
  }
}
