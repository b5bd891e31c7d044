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
  return new Promise((resolve, reject) => {
    const nodeFlags = mode === 'ours' ? [...flags.oursNodeFlags, ...flags.childNodeOptions] : flags.childNodeOptions
    const child = spawn(process.execPath, [...nodeFlags, CHILD_JS, mode], { stdio: ['pipe', 'pipe', 'inherit'] })
    child.stdin.on('error', () => {}) // a child that dies early: its exit code says so below
    child.stdin.end(JSON.stringify(input))
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      if (code !== 0) return reject(new Error(`bench child ${mode} exited with ${code}`))
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1)!) as T)
      } catch (err) {
        reject(err)
      }
    })
  })
}
