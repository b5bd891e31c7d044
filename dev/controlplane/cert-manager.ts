/**
 * cert-manager on a local control plane: its CRDs (from the cert-manager Go module) and one
 * process running its controller (certificates, the CertificateRequest approver, the
 * SelfSigned and CA signers, Issuers and ClusterIssuers) and its cainjector. The binary is
 * dev/tools/cert-manager/main.go, built by scripts/build-tools.sh (see tools.ts) into the
 * cache; upstream's own binaries come from Go modules the proxy here does not serve.
 *
 * The process is guarded like the control plane's (process.ts): killed at our exit, on
 * SIGINT/SIGTERM/SIGHUP, and by a detached guard of its own when this process dies in any
 * way, so it works the same against an owned or an attached control plane.
 */
import { request } from 'node:http'
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import type { ControlPlane } from './controlplane.js'
import { freePorts } from './ports.js'
import { ManagedProcess, releaseDirAtExit, removeDirAtExit, startGuard } from './process.js'
import { ensureTools } from './tools.js'
import { waitFor } from '../wait.js'

export interface CertManagerOptions {
  /** How long to wait for the CRDs to be established and then for the process's /readyz. Default 120s. */
  readyTimeoutMs?: number
  /** Namespace of the Secrets ClusterIssuers refer to (upstream's --cluster-resource-namespace). Default `kube-system`. */
  clusterResourceNamespace?: string
  /** klog verbosity of the process's log. Default 2 (cert-manager's info level). */
  verbosity?: number
  /** More flags for dev/tools/cert-manager/main.go (e.g. `--controllers=...`, `--cainjector=false`). */
  extraArgs?: string[]
  /** Keep its directory (the log) when the start fails or at stop. Also: CRD_MIGRATOR_KEEP_FAILED=1 (failures only). */
  keepDir?: boolean
  /** Progress messages; default: silent. */
  log?: (msg: string) => void
}

export interface CertManager {
  /** The cert-manager binary that runs. */
  readonly binary: string
  /** Names of the CustomResourceDefinitions installed (certificates.cert-manager.io, ...). */
  readonly crds: readonly string[]
  /** Its stdout and stderr. */
  readonly logFile: string
  /** `http://127.0.0.1:<port>/readyz`: 200 once its informers have synced. */
  readonly readyzUrl: string
  /** Milliseconds from the call to ready (binary located, CRDs established, /readyz OK). */
  readonly readyMs: number
  readonly running: boolean
  /** SIGTERM (SIGKILL after `graceMs`, default 10s), then remove its directory. The CRDs and what it issued stay. Idempotent. */
  stop(graceMs?: number): Promise<void>
}

const POLL_MS = 200
const FIELD_MANAGER = 'crd-migrator-dev-cert-manager'

/**
 * Server-side apply cert-manager's CRDs (every `*.yaml` in `crdsDir`) to `cp` and wait until
 * each is Established. Idempotent. Returns their names.
 */
export async function installCertManagerCrds(cp: ControlPlane, crdsDir: string, timeoutMs = 60_000): Promise<string[]> {
  const files = (await readdir(crdsDir)).filter((f) => f.endsWith('.yaml')).sort()
  const names: string[] = []
  for (const f of files) {
    for (const doc of parseAllDocuments(await readFile(join(crdsDir, f), 'utf8'))) {
      const crd = doc.toJS() as { kind?: string; metadata?: { name?: string } } | null
      const name = crd?.metadata?.name
      if (crd?.kind !== 'CustomResourceDefinition' || !name) continue
      const res = await cp.apiRequest(
        `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}?fieldManager=${FIELD_MANAGER}&force=true`,
        { method: 'PATCH', body: crd, contentType: 'application/apply-patch+yaml' },
      )
      if (res.status !== 200 && res.status !== 201) throw new Error(`apply CRD ${name}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
      names.push(name)
    }
  }
  if (names.length === 0) throw new Error(`no CustomResourceDefinition in ${crdsDir}`)
  const deadline = Date.now() + timeoutMs
  for (const name of names) {
    let status = 0
    await waitFor(
      `CRD ${name} Established`,
      deadline - Date.now(),
      async () => {
        const res = await cp.apiRequest(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`)
        status = res.status
        const conditions = (res.json as { status?: { conditions?: { type: string; status: string }[] } } | undefined)?.status?.conditions
        return conditions?.some((c) => c.type === 'Established' && c.status === 'True') || undefined
      },
      { everyMs: POLL_MS, timedOut: () => new Error(`CRD ${name} not Established after ${timeoutMs}ms (HTTP ${status})`) },
    )
  }
  return names
}

/**
 * Install cert-manager's CRDs on `cp` and start cert-manager (controller and cainjector, one
 * process, as the admin user of `cp`); resolves once it is ready. The first call builds the
 * binary (scripts/build-tools.sh: a few minutes). Stop it with {@link CertManager.stop}
 * before the control plane.
 */
export async function startCertManager(cp: ControlPlane, opts: CertManagerOptions = {}): Promise<CertManager> {
  const started = Date.now()
  const log = opts.log ?? (() => {})
  const readyTimeoutMs = opts.readyTimeoutMs ?? 120_000
  const tools = await ensureTools()
  log(`installing cert-manager's CRDs from ${tools.certManagerCrdsDir}`)
  const crds = await installCertManagerCrds(cp, tools.certManagerCrdsDir, readyTimeoutMs)

  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-cert-manager-'))
  removeDirAtExit(dir)
  await mkdir(join(dir, 'run'))
  // Our own guard: an attached control plane's owner would not stop what we start.
  const guard = startGuard(dir)
  const [port] = await freePorts(1)
  const readyzUrl = `http://127.0.0.1:${port}/readyz`
  const logFile = join(dir, 'cert-manager.log')
  const args = [
    `--kubeconfig=${cp.kubeconfigPath}`,
    `--readyz-address=127.0.0.1:${port}`,
    `--cluster-resource-namespace=${opts.clusterResourceNamespace ?? 'kube-system'}`,
    `--v=${opts.verbosity ?? 2}`,
    ...(opts.extraArgs ?? []),
  ]
  log(`starting ${tools.certManager} (log: ${logFile})`)
  const proc = ManagedProcess.start({
    name: 'cert-manager',
    command: tools.certManager,
    args,
    logFile,
    pidFile: join(dir, 'run', 'cert-manager.pid'),
  })

  let stopped = false
  const stop = async (graceMs?: number, keep = opts.keepDir ?? false): Promise<void> => {
    if (stopped) return
    stopped = true
    await proc.stop(graceMs)
    guard.disarm()
    if (keep) {
      releaseDirAtExit(dir)
      log(`cert-manager's directory kept: ${dir}`)
    } else {
      await rm(dir, { recursive: true, force: true })
      releaseDirAtExit(dir)
    }
  }

  try {
    await waitFor(
      'cert-manager ready',
      readyTimeoutMs,
      async () => {
        if (!proc.running) throw new Error(`cert-manager exited during startup (${describeExit(proc)})`)
        return (await httpOk(readyzUrl, 2_000)) || undefined
      },
      { everyMs: POLL_MS, timedOut: () => new Error(`cert-manager not ready after ${readyTimeoutMs}ms`) },
    )
  } catch (err) {
    const tail = proc.tail(30)
    await stop(0, opts.keepDir ?? process.env['CRD_MIGRATOR_KEEP_FAILED'] === '1')
    throw new Error(`${(err as Error).message}; last lines of ${logFile}:\n${tail}`, { cause: err })
  }
  const readyMs = Date.now() - started
  log(`cert-manager ready in ${readyMs}ms`)
  return {
    binary: tools.certManager,
    crds,
    logFile,
    readyzUrl,
    readyMs,
    get running() {
      return proc.running
    },
    stop: (graceMs?: number) => stop(graceMs),
  }
}

function describeExit(proc: ManagedProcess): string {
  const e = proc.exit
  if (!e) return 'running'
  return e.signal ? `signal ${e.signal}` : `exit status ${e.code}`
}

/** Whether an HTTP GET answers 200 within `timeoutMs`. */
function httpOk(url: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(url, { timeout: timeoutMs }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
    req.end()
  })
}
