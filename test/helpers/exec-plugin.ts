/**
 * An exec credential plugin for tests: a shell script that prints the ExecCredential the
 * test scripted for its Nth run (else the default one), counts its runs, and keeps the
 * KUBERNETES_EXEC_INFO each run was given.
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'

export const EXEC_V1 = 'client.authentication.k8s.io/v1'

export interface ExecCredentialStatus {
  token?: string
  clientCertificateData?: string
  clientKeyData?: string
  expirationTimestamp?: string
}

export interface ExecPlugin {
  /** The script's directory; the kubeconfig can name the script relative to it (`./plugin.sh`). */
  dir: string
  /** Absolute path of the script. */
  command: string
  /** What every run prints, unless {@link respondTo} scripted that run. */
  respond(status: ExecCredentialStatus, apiVersion?: string): Promise<void>
  /** What run `n` (1-based) prints. */
  respondTo(n: number, status: ExecCredentialStatus, apiVersion?: string): Promise<void>
  /** How many times it ran. */
  runs(): Promise<number>
  /** The KUBERNETES_EXEC_INFO run `n` was given, parsed. */
  execInfo(n: number): Promise<unknown>
}

const SCRIPT = `#!/bin/sh
# Test exec credential plugin (test/helpers/exec-plugin.ts).
dir="$(cd "$(dirname "$0")" && pwd)"
n=$(( $(cat "$dir/runs" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$dir/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$dir/exec-info-$n.json"
if [ -f "$dir/response-$n.json" ]; then cat "$dir/response-$n.json"; else cat "$dir/response.json"; fi
`

const credential = (status: ExecCredentialStatus, apiVersion: string) => JSON.stringify({ apiVersion, kind: 'ExecCredential', status })

/** A plugin in a fresh temporary directory, removed when the test ends. */
export async function writeExecPlugin(): Promise<ExecPlugin> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-exec-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const command = path.join(dir, 'plugin.sh')
  await writeFile(command, SCRIPT)
  await chmod(command, 0o755)
  return {
    dir,
    command,
    respond: (status, apiVersion = EXEC_V1) => writeFile(path.join(dir, 'response.json'), credential(status, apiVersion)),
    respondTo: (n, status, apiVersion = EXEC_V1) => writeFile(path.join(dir, `response-${n}.json`), credential(status, apiVersion)),
    runs: async () => Number((await readFile(path.join(dir, 'runs'), 'utf8').catch(() => '0')).trim()),
    execInfo: async (n) => JSON.parse(await readFile(path.join(dir, `exec-info-${n}.json`), 'utf8')),
  }
}
