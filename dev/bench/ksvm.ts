/**
 * Drives kube-storage-version-migrator's `migrator` (built by scripts/build-ksvm.sh) against
 * the bench's control plane: installs its StorageVersionMigration CRD, starts the binary,
 * creates one StorageVersionMigration for the resource and times it until its Succeeded
 * condition. KSVM only rewrites objects (it never touches status.storedVersions), so only
 * that is timed. Its peak RSS is read from /proc/<pid>/status (VmHWM) before it is stopped.
 */
import { spawn } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parse as parseYaml } from 'yaml'
import { packageRoot } from '../controlplane/binaries.js'
import { getCrd } from '../../src/kube/crds.js'
import { type KubeHttp } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { CRD_API } from '../../src/kube/paths.js'
import { KSVM_API, storageVersionMigration } from '../../src/controller/ksvm-state.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { cpuMsOf, memoryOf } from './stats.js'
import { waitFor } from '../wait.js'

export const KSVM_MODULE = 'sigs.k8s.io/kube-storage-version-migrator'

export interface KsvmBuild {
  migrator: string
  crd: string
  version: string
  /** Seconds the build script took in this process (a cached build answers at once). */
  scriptSeconds: number
  builtNow: boolean
}

/**
 * Runs scripts/build-ksvm.sh (or only checks the cache with `check`). Resolves undefined
 * when `check` finds nothing cached.
 */
export async function ensureKsvm(options: { check?: boolean; log?: (s: string) => void } = {}): Promise<KsvmBuild | undefined> {
  const script = join(packageRoot(), 'scripts', 'build-ksvm.sh')
  const started = Date.now()
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn('bash', [script, ...(options.check ? ['--check'] : [])], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d
      for (const line of d.split('\n')) if (line.startsWith('[ksvm-build]')) options.log?.(line)
    })
    child.on('error', reject)
    child.on('close', (c) => resolve({ code: c, stdout: out, stderr: err }))
  })
  if (options.check && code === 4) return undefined
  if (code !== 0) throw new Error(`${script} failed (exit ${code}):\n${stderr.split('\n').slice(-20).join('\n')}`)
  const fields = Object.fromEntries(
    stdout
      .trim()
      .split('\n')
      .map((l) => l.split('=', 2) as [string, string]),
  )
  if (!fields['migrator'] || !fields['crd']) throw new Error(`${script} printed no paths: ${stdout}`)
  const version = /ksvm-(v[^/]+)\//.exec(fields['migrator'])?.[1] ?? 'unknown'
  return {
    migrator: fields['migrator'],
    crd: fields['crd'],
    version,
    scriptSeconds: (Date.now() - started) / 1000,
    builtNow: /built in/.test(stderr),
  }
}

export async function installKsvmCrd(http: KubeHttp, crdYamlPath: string): Promise<void> {
  const manifest = parseYaml(await readFile(crdYamlPath, 'utf8')) as { metadata: { name: string } }
  try {
    await http.request({ method: 'POST', path: CRD_API, body: manifest })
  } catch (err) {
    if (!(err instanceof KubeApiError && err.status === 409)) throw err
  }
  await waitFor(
    `${manifest.metadata.name} Established`,
    60_000,
    async () => {
      const crd = await getCrd(http, manifest.metadata.name)
      return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') || undefined
    },
    { everyMs: 50, timedOut: () => new Error(`${manifest.metadata.name} not Established`) },
  )
  // The API must answer before the migrator's informer starts.
  let failure: unknown
  await waitFor(
    `${KSVM_API} to answer`,
    10_000,
    () =>
      http.request({ method: 'GET', path: KSVM_API, query: { limit: 1 } }).then(
        () => true,
        (err: unknown) => void (failure = err),
      ),
    { everyMs: 50, timedOut: () => (failure instanceof Error ? failure : new Error(`${KSVM_API} did not answer`)) },
  )
}

export interface KsvmRunOptions {
  migrator: string
  kubeconfigPath: string
  group: string
  version: string
  resource: string
  /** --kube-api-qps / --kube-api-burst; undefined = the binary's defaults (5 / 10). */
  qps?: number
  burst?: number
  logFile: string
  timeoutMs: number
}

export interface KsvmRunResult {
  /** StorageVersionMigration created -> Succeeded observed. */
  wallMs: number
  /** Running observed -> Succeeded observed: its object rewriting (it polls for work once a second). */
  rewriteMs: number
  outcome: 'Succeeded' | 'Failed' | 'Timeout'
  message: string
  peakRssMb: number | null
  baselineRssMb: number | null
  /** CPU time of the migrator process from the StorageVersionMigration's creation to Succeeded. */
  cpuMs: number | null
  flags: string[]
}

interface Svm {
  status?: { conditions?: Array<{ type: string; status: string; message?: string }> }
}

export async function runKsvm(http: KubeHttp, o: KsvmRunOptions): Promise<KsvmRunResult> {
  const flags = [`--kubeconfig=${o.kubeconfigPath}`]
  if (o.qps !== undefined) flags.push(`--kube-api-qps=${o.qps}`)
  if (o.burst !== undefined) flags.push(`--kube-api-burst=${o.burst}`)
  const log = createWriteStream(o.logFile, { flags: 'a' })
  const child = spawn(o.migrator, flags, { stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.pipe(log)
  child.stderr.pipe(log)
  let exited = false
  child.on('exit', () => (exited = true))
  const pid = child.pid!
  // The bench may be interrupted mid-run: never leave the migrator behind.
  const killOnExit = () => {
    if (!exited) child.kill('SIGKILL')
  }
  process.once('exit', killOnExit)
  const name = `bench-${o.group.split('.')[0]}`
  try {
    // Its informer lists StorageVersionMigrations and starts polling for work each second.
    await sleep(1000)
    const baseline = memoryOf(pid)
    if (exited) throw new Error(`the KSVM migrator exited at startup; see ${o.logFile}`)
    const cpu0 = cpuMsOf(pid)
    const created = performance.now()
    await http.request({
      method: 'POST',
      path: KSVM_API,
      body: storageVersionMigration({ name }, { group: o.group, version: o.version, resource: o.resource }),
    })
    let runningAt: number | undefined
    let peak = baseline?.peakRssMb ?? null
    for (;;) {
      const mem = memoryOf(pid)
      if (mem) peak = mem.peakRssMb
      const svm = (await http.request<Svm>({ method: 'GET', path: `${KSVM_API}/${name}` })).body
      const now = performance.now()
      const has = (type: string) => svm.status?.conditions?.find((c) => c.type === type && c.status === 'True')
      if (runningAt === undefined && (has('Running') || has('Succeeded') || has('Failed'))) runningAt = now
      const done = has('Succeeded') ?? has('Failed')
      if (done) {
        return {
          wallMs: now - created,
          rewriteMs: now - (runningAt ?? created),
          outcome: done.type as 'Succeeded' | 'Failed',
          message: done.message ?? '',
          peakRssMb: memoryOf(pid)?.peakRssMb ?? peak,
          baselineRssMb: baseline?.rssMb ?? null,
          cpuMs: cpu0 === null ? null : (cpuMsOf(pid) ?? cpu0) - cpu0,
          flags: flags.slice(1),
        }
      }
      if (exited) throw new Error(`the KSVM migrator exited during the migration; see ${o.logFile}`)
      if (now - created > o.timeoutMs) {
        return {
          wallMs: now - created,
          rewriteMs: now - (runningAt ?? created),
          outcome: 'Timeout',
          message: `not done after ${o.timeoutMs} ms`,
          peakRssMb: peak,
          baselineRssMb: baseline?.rssMb ?? null,
          cpuMs: null,
          flags: flags.slice(1),
        }
      }
      await sleep(50)
    }
  } finally {
    if (!exited) {
      child.kill('SIGTERM')
      await Promise.race([new Promise((r) => child.once('exit', r)), sleep(5000)])
      if (!exited) child.kill('SIGKILL')
    }
    process.off('exit', killOnExit)
    log.end()
    await http.request({ method: 'DELETE', path: `${KSVM_API}/${name}` }).catch(() => {})
  }
}
