/**
 * `crd-migrator serve` as a child process (the built CLI or the TypeScript source), for
 * tests that need the real command: its output kept, its exit awaited, killed at
 * teardown, and a wait for /readyz on its ops listener.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import type { Test } from 'tap'

export interface ServeProcess {
  child: ChildProcessWithoutNullStreams
  /** stdout and stderr so far. */
  output(): string
  exited: Promise<[number | null, NodeJS.Signals | null]>
  /** Polls GET /readyz every 100 ms until 200, the child exits, or `attempts` run out. */
  waitReady(attempts: number): Promise<boolean>
}

export function spawnServe(t: Test, args: string[], options: { cwd: string; env: NodeJS.ProcessEnv; metricsPort: number }): ServeProcess {
  const child = spawn(process.execPath, args, { cwd: options.cwd, env: options.env, stdio: ['pipe', 'pipe', 'pipe'] })
  child.stdin.end()
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d))
  child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d))
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.on('exit', (c, s) => resolve([c, s])))
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  const waitReady = async (attempts: number) => {
    for (let i = 0; i < attempts && child.exitCode === null; i++) {
      try {
        if ((await fetch(`http://127.0.0.1:${options.metricsPort}/readyz`)).status === 200) return true
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100))
    }
    return false
  }
  return { child, output: () => output, exited, waitReady }
}
