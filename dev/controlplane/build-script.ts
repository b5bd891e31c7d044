import { spawn } from 'node:child_process'

/** Exit status of our build scripts when Go is not installed. */
export const EXIT_NO_GO = 3

/**
 * Runs one of scripts/build-*.sh (they build Go tools into the cache under a lock) with
 * its progress on our stderr, and returns what it printed on stdout.
 * `whatNeedsGo` completes the message shown when Go is missing.
 */
export async function runBuildScript(script: string, whatNeedsGo: string): Promise<string> {
  const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve, reject) => {
    const child = spawn('bash', [script], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (d: string) => (out += d))
    child.on('error', reject)
    child.on('close', (c) => resolve({ code: c, stdout: out }))
  })
  if (code === EXIT_NO_GO) {
    throw new Error(`Go is required ${whatNeedsGo} and was not found on PATH. Install Go 1.25+ (https://go.dev/doc/install).`)
  }
  if (code !== 0) throw new Error(`${script} failed with exit status ${code}; see its output above`)
  return stdout
}
