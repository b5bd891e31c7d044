/**
 * Runs one migrating process of the bench (child.js `ours` or `ceiling`): its input as JSON
 * on stdin, its result as the last JSON line of its stdout, killed after a timeout.
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const CHILD_JS = fileURLToPath(new URL('./child.js', import.meta.url))

/** The node flags of the children: ours' (the product's, then the given ones) and the ceiling's (the given ones). */
export interface ChildNodeFlags {
  oursNodeFlags: string[]
  childNodeOptions: string[]
}

export function runChild<T>(flags: ChildNodeFlags, mode: 'ours' | 'ceiling', input: unknown, timeoutMs: number): Promise<T> {
  const nodeFlags = mode === 'ours' ? [...flags.oursNodeFlags, ...flags.childNodeOptions] : flags.childNodeOptions
  return runJsonChild<T>([...nodeFlags, CHILD_JS, mode], input, timeoutMs, `bench child ${mode}`)
}

/**
 * Runs `node ...args` with `input` as JSON on stdin; its result is the last JSON line of its
 * stdout, or an error naming `label` with its exit code. Killed after `timeoutMs`.
 */
export function runJsonChild<T>(args: string[], input: unknown, timeoutMs: number, label: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] })
    child.stdin.on('error', () => {}) // a child that dies early: its exit code says so below
    child.stdin.end(JSON.stringify(input))
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.once('error', reject)
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      if (code !== 0) return reject(new Error(`${label} exited with ${code ?? signal}`))
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1)!) as T)
      } catch (err) {
        reject(err)
      }
    })
  })
}
