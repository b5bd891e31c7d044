/**
 * `crd-migrator serve` as a child process (the built CLI or the TypeScript source), for
 * tests that need the real command: its output kept, its exit awaited, killed at
 * teardown, and a wait for /readyz on its ops listener.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import type { Test } from 'tap'
import { until } from './until.js'

export interface ServeProcess {
  child: ChildProcessWithoutNullStreams
  /** stdout and stderr so far. */
  output(): string
  exited: Promise<[number | null, NodeJS.Signals | null]>
  /** Polls GET /readyz every 100 ms until 200 (true), the child exits or `attempts` polls' time runs out (false). */
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
  const waitReady = (attempts: number) =>
    until(
      'GET /readyz to answer 200, or the child to exit',
      attempts * 100,
      async () => {
        if (child.exitCode !== null) return false
        return (await fetch(`http://127.0.0.1:${options.metricsPort}/readyz`)).status === 200
      },
      (ready) => ready || child.exitCode !== null,
    ).then(
      (ready) => ready,
      () => false,
    )
  return { child, output: () => output, exited, waitReady }
}
