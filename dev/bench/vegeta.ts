/**
 * Locates vegeta, the webhook bench's load generator, building it on first use with
 * scripts/build-vegeta.sh (from its Go module, cached per version outside the repository).
 */
import { join } from 'node:path'
import { packageRoot } from '../controlplane/binaries.js'
import { runBuildScript } from '../controlplane/build-script.js'

let pending: Promise<string> | undefined

/** Path of the vegeta binary; memoized per process. */
export function ensureVegeta(options: { log?: (s: string) => void } = {}): Promise<string> {
  pending ??= (async () => {
    const script = join(packageRoot(), 'scripts', 'build-vegeta.sh')
    const stdout = await runBuildScript(script, 'to build vegeta, the load generator of the webhook bench (or pass --skip-webhook)')
    const binary = /^vegeta=(.+)$/m.exec(stdout)?.[1]?.trim()
    if (!binary) throw new Error(`${script} printed no vegeta=<path>: ${stdout}`)
    options.log?.(`vegeta: ${binary}`)
    return binary
  })().catch((err: unknown) => {
    pending = undefined
    throw err
  })
  return pending
}
