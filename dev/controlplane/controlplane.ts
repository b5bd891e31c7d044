/**
 * An envtest-like local control plane: a real etcd and a real kube-apiserver on loopback,
 * with a throw-away PKI, client-certificate authentication and RBAC.
 *
 *   const cp = await startControlPlane()
 *   // cp.kubeconfigPath (admin, group system:masters), cp.mintUser('alice', ['devs']),
 *   // cp.storedApiVersion(group, plural, ns, name) reads the raw object from etcd
 *   await cp.stop()
 *
 * One process can own a control plane and share it: `cp.writeStateFile(path)`, then any
 * other process `attachControlPlane(path)` gets the same interface without owning the
 * processes (scripts/test.mjs does this for the whole test run).
 */
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { KubeHttp, type KubeRequest } from '../../src/kube/http.js'
import { ensureBinaries, type ControlPlaneBinaries } from './binaries.js'
import { customResourceKey, etcdGet, etcdHealthy, etcdListKeys } from './etcd.js'
import { renderKubeconfig, writeKubeconfig } from './kubeconfig.js'
import { createCa, createServiceAccountKeyPair, issueClientCert, issueServingCert, type CertKeyPair } from './pki.js'
import { freePorts } from './ports.js'
import { ManagedProcess, releaseDirAtExit, removeDirAtExit, startGuard, type Guard } from './process.js'

export { ensureBinaries, type ControlPlaneBinaries } from './binaries.js'

/** Flag name (without leading dashes) -> value; `null` removes a default flag. */
export type FlagOverrides = Record<string, string | null>

export interface ControlPlaneOptions {
  /** Merged over the default kube-apiserver flags. */
  extraApiserverFlags?: FlagOverrides
  /** Merged over the default etcd flags. */
  extraEtcdFlags?: FlagOverrides
  /** How long to wait for etcd `/health` and then kube-apiserver `/readyz`. Default 60s. */
  readyTimeoutMs?: number
  /** Keep the temp dir (logs, data) when startup fails. Also: CRD_MIGRATOR_KEEP_FAILED=1. */
  keepDirOnFailure?: boolean
  /** Progress messages; default: silent. */
  log?: (msg: string) => void
}

export interface UserCredentials {
  name: string
  groups: string[]
  kubeconfigPath: string
  certPem: string
  keyPem: string
}

export interface ApiResponse {
  status: number
  body: string
  /** `body` parsed as JSON, when it is JSON. */
  json: unknown
}

export interface ApiRequestOptions {
  method?: KubeRequest['method']
  body?: unknown
  contentType?: string
  /** Credentials to use instead of the admin's. */
  as?: { certPem: string; keyPem: string }
  timeoutMs?: number
}

/** JSON written by {@link ControlPlane.writeStateFile}, read by {@link attachControlPlane}. */
export interface ControlPlaneState {
  version: 1
  server: string
  kubeconfigPath: string
  caCertPath: string
  caKeyPath: string
  adminCertPath: string
  adminKeyPath: string
  etcdEndpoint: string
  dir: string
  ownerPid: number
}

export interface StopOptions {
  /** Time between SIGTERM and SIGKILL; 0 sends SIGKILL at once. Default 10s. */
  graceMs?: number
}

export interface StartupTimings {
  /** Binaries located (or built). */
  binariesMs: number
  /** etcd healthy, measured from the start of startControlPlane. */
  etcdReadyMs: number
  /** kube-apiserver /readyz OK, measured from the start of startControlPlane. */
  readyMs: number
}

export interface ControlPlane {
  /** True when this process started (and will stop) the processes. */
  readonly owned: boolean
  readonly dir: string
  /** Admin kubeconfig (user `admin`, group `system:masters`). */
  readonly kubeconfigPath: string
  /** `https://127.0.0.1:<port>` */
  readonly server: string
  readonly caPem: string
  readonly adminUser: { name: string; groups: string[] }
  /** `http://127.0.0.1:<port>` */
  readonly etcdEndpoint: string
  /** Only set on the owner. */
  readonly timings: StartupTimings | undefined
  /** Only set on the owner. */
  readonly logFiles: { etcd: string; apiserver: string } | undefined

  /** A client certificate for `name` in `groups`, and a kubeconfig using it. */
  mintUser(name: string, groups?: readonly string[]): Promise<UserCredentials>
  /** Raw stored bytes of an etcd key, or null. */
  readEtcdKey(key: string): Promise<Buffer | null>
  /** apiVersion a custom resource is stored in (from etcd), or null when not stored. */
  storedApiVersion(group: string, plural: string, namespace: string | undefined, name: string): Promise<string | null>
  listEtcdKeys(prefix: string): Promise<string[]>
  /** A request to the API server through KubeHttp, as admin unless `as` is given. Never throws on HTTP status. */
  apiRequest(path: string, opts?: ApiRequestOptions): Promise<ApiResponse>
  writeStateFile(path: string): Promise<void>

  /** Owner only: stop kube-apiserver (SIGTERM) and start it again with the same (or overridden) flags; waits for /readyz. */
  restartApiserver(opts?: { extraApiserverFlags?: FlagOverrides }): Promise<void>
  /** Owner only: SIGTERM, SIGKILL after `graceMs` (default 10s; 0 = SIGKILL at once). */
  stopApiserver(opts?: StopOptions): Promise<void>
  /** Owner only: start a stopped kube-apiserver and wait for /readyz. */
  startApiserver(opts?: { extraApiserverFlags?: FlagOverrides }): Promise<void>
  /**
   * Owner only: stop etcd; the API server keeps running and its requests start failing.
   * A graceful etcd stop waits for the API server's watch streams (about 7s); pass
   * `{ graceMs: 0 }` to SIGKILL it at once (data written so far survives: no fsync is
   * needed for a process crash).
   */
  stopEtcd(opts?: StopOptions): Promise<void>
  /** Owner only: start etcd again on the same port and data dir, wait for /health. */
  startEtcd(): Promise<void>
  /** Owner: stop both processes and remove the temp dir. Attached: remove minted users' files. Idempotent. */
  stop(): Promise<void>
}

const ADMIN = { name: 'admin', groups: ['system:masters'] }
const POLL_MS = 100

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

function toArgs(flags: Record<string, string>): string[] {
  return Object.entries(flags).map(([k, v]) => `--${k}=${v}`)
}

function merge(base: Record<string, string>, ...overrides: Array<FlagOverrides | undefined>): Record<string, string> {
  const out = { ...base }
  for (const o of overrides) {
    for (const [k, v] of Object.entries(o ?? {})) {
      const key = k.replace(/^--/, '')
      if (v === null) delete out[key]
      else out[key] = v
    }
  }
  return out
}

function parseStoredApiVersion(key: string, raw: Buffer | null): string | null {
  if (raw === null) return null
  const text = raw.toString('utf8')
  if (!text.trimStart().startsWith('{')) {
    throw new Error(
      `etcd value at ${key} is not JSON (starts with ${JSON.stringify(text.slice(0, 8))}); only custom resources are stored as JSON`,
    )
  }
  const obj = JSON.parse(text) as { apiVersion?: unknown }
  return typeof obj.apiVersion === 'string' ? obj.apiVersion : null
}

function safeFileName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 60)
}

/** Shared read-only behaviour of owned and attached control planes. */
abstract class ControlPlaneBase implements ControlPlane {
  abstract readonly owned: boolean
  readonly adminUser = { name: ADMIN.name, groups: [...ADMIN.groups] }
  timings: StartupTimings | undefined
  logFiles: { etcd: string; apiserver: string } | undefined
  private userSeq = 0
  /** One client per set of credentials (by certificate), made on first use. */
  private readonly clients = new Map<string, KubeHttp>()

  protected constructor(
    readonly dir: string,
    readonly server: string,
    readonly etcdEndpoint: string,
    readonly kubeconfigPath: string,
    protected ca: CertKeyPair,
    protected admin: CertKeyPair,
    protected readonly usersDir: string,
  ) {}

  get caPem(): string {
    return this.ca.certPem
  }

  async mintUser(name: string, groups: readonly string[] = []): Promise<UserCredentials> {
    const cert = await issueClientCert(this.ca, name, groups)
    await mkdir(this.usersDir, { recursive: true })
    const kubeconfigPath = join(this.usersDir, `${safeFileName(name)}-${++this.userSeq}.kubeconfig`)
    await writeKubeconfig(kubeconfigPath, { server: this.server, caPem: this.ca.certPem, user: name, ...cert })
    return { name, groups: [...groups], kubeconfigPath, certPem: cert.certPem, keyPem: cert.keyPem }
  }

  readEtcdKey(key: string): Promise<Buffer | null> {
    return etcdGet(this.etcdEndpoint, key)
  }

  async storedApiVersion(group: string, plural: string, namespace: string | undefined, name: string): Promise<string | null> {
    const key = customResourceKey(group, plural, namespace, name)
    return parseStoredApiVersion(key, await this.readEtcdKey(key))
  }

  listEtcdKeys(prefix: string): Promise<string[]> {
    return etcdListKeys(this.etcdEndpoint, prefix)
  }

  /**
   * Through the product's own client (KubeHttp, authenticated by client-node's KubeConfig
   * as the product is), answering every status instead of throwing on non-2xx.
   */
  async apiRequest(path: string, opts: ApiRequestOptions = {}): Promise<ApiResponse> {
    const res = await this.clientFor(opts.as ?? this.admin).requestRaw({
      method: opts.method ?? 'GET',
      path,
      body: opts.body,
      ...(opts.contentType ? { contentType: opts.contentType } : {}),
      timeoutMs: opts.timeoutMs ?? 30_000,
    })
    let json: unknown
    try {
      json = JSON.parse(res.body)
    } catch {
      json = undefined
    }
    return { status: res.status, body: res.body, json }
  }

  /** A KubeHttp for a client certificate of this control plane's CA, from an in-memory kubeconfig. */
  private clientFor(cred: { certPem: string; keyPem: string }): KubeHttp {
    let http = this.clients.get(cred.certPem)
    if (!http) {
      const kc = new KubeConfig()
      kc.loadFromString(renderKubeconfig({ server: this.server, caPem: this.ca.certPem, user: 'user', ...cred }))
      http = new KubeHttp(kc, { maxSockets: 16 })
      this.clients.set(cred.certPem, http)
    }
    return http
  }

  /** Drops every pooled connection (after an API server stop, and on stop). */
  protected closeClients(): void {
    for (const http of this.clients.values()) http.close()
    this.clients.clear()
  }

  abstract writeStateFile(path: string): Promise<void>
  abstract restartApiserver(opts?: { extraApiserverFlags?: FlagOverrides }): Promise<void>
  abstract stopApiserver(opts?: StopOptions): Promise<void>
  abstract startApiserver(opts?: { extraApiserverFlags?: FlagOverrides }): Promise<void>
  abstract stopEtcd(opts?: StopOptions): Promise<void>
  abstract startEtcd(): Promise<void>
  abstract stop(): Promise<void>
}

interface OwnedLayout {
  dir: string
  runDir: string
  etcdDataDir: string
  certDir: string
  etcdLog: string
  apiserverLog: string
  caCertPath: string
  caKeyPath: string
  adminCertPath: string
  adminKeyPath: string
}

class OwnedControlPlane extends ControlPlaneBase {
  readonly owned = true
  private etcd: ManagedProcess | undefined
  private apiserver: ManagedProcess | undefined
  private stopped = false
  private apiserverOverrides: FlagOverrides | undefined

  constructor(
    private readonly bins: ControlPlaneBinaries,
    private readonly layout: OwnedLayout,
    private readonly etcdFlags: Record<string, string>,
    private readonly apiserverFlags: Record<string, string>,
    server: string,
    etcdEndpoint: string,
    kubeconfigPath: string,
    ca: CertKeyPair,
    admin: CertKeyPair,
    private readonly guard: Guard,
    private readonly readyTimeoutMs: number,
  ) {
    super(layout.dir, server, etcdEndpoint, kubeconfigPath, ca, admin, join(layout.dir, 'users'))
    this.logFiles = { etcd: layout.etcdLog, apiserver: layout.apiserverLog }
  }

  /** Start etcd and wait for /health. */
  async startEtcd(): Promise<void> {
    this.assertLive()
    if (this.etcd?.running) return
    this.etcd = ManagedProcess.start({
      name: 'etcd',
      command: this.bins.etcd,
      args: toArgs(this.etcdFlags),
      logFile: this.layout.etcdLog,
      pidFile: join(this.layout.runDir, 'etcd.pid'),
    })
    const deadline = Date.now() + this.readyTimeoutMs
    for (;;) {
      if (!this.etcd.running) throw this.startupError('etcd exited during startup', this.etcd)
      if (await etcdHealthy(this.etcdEndpoint, 1_000)) return
      if (Date.now() > deadline) throw this.startupError(`etcd not healthy after ${this.readyTimeoutMs}ms`, this.etcd)
      await sleep(POLL_MS)
    }
  }

  async stopEtcd(opts: StopOptions = {}): Promise<void> {
    await this.etcd?.stop(opts.graceMs)
  }

  async startApiserver(opts: { extraApiserverFlags?: FlagOverrides } = {}): Promise<void> {
    this.assertLive()
    if (this.apiserver?.running) return
    if (opts.extraApiserverFlags) this.apiserverOverrides = opts.extraApiserverFlags
    const flags = merge(this.apiserverFlags, this.apiserverOverrides)
    this.apiserver = ManagedProcess.start({
      name: 'kube-apiserver',
      command: this.bins.kubeApiserver,
      args: toArgs(flags),
      logFile: this.layout.apiserverLog,
      pidFile: join(this.layout.runDir, 'kube-apiserver.pid'),
    })
    const deadline = Date.now() + this.readyTimeoutMs
    let last: string
    for (;;) {
      if (!this.apiserver.running) throw this.startupError('kube-apiserver exited during startup', this.apiserver)
      try {
        const res = await this.apiRequest('/readyz', { timeoutMs: 2_000 })
        if (res.status === 200) return
        last = `HTTP ${res.status}: ${res.body.slice(0, 300)}`
      } catch (err) {
        last = (err as Error).message
      }
      if (Date.now() > deadline) {
        throw this.startupError(`kube-apiserver not ready after ${this.readyTimeoutMs}ms (last /readyz: ${last})`, this.apiserver)
      }
      await sleep(POLL_MS)
    }
  }

  async stopApiserver(opts: StopOptions = {}): Promise<void> {
    await this.apiserver?.stop(opts.graceMs)
    // Pooled keep-alive connections went with it; the next request opens a fresh one.
    this.closeClients()
  }

  async restartApiserver(opts: { extraApiserverFlags?: FlagOverrides } = {}): Promise<void> {
    await this.stopApiserver()
    await this.startApiserver(opts)
  }

  /** The PKI is generated while etcd starts, so it arrives after construction. */
  setCredentials(ca: CertKeyPair, admin: CertKeyPair): void {
    this.ca = ca
    this.admin = admin
  }

  /** Stop both processes, leave the temp dir alone. */
  async stopProcesses(): Promise<void> {
    await this.apiserver?.stop()
    await this.etcd?.stop()
  }

  async writeStateFile(path: string): Promise<void> {
    const state: ControlPlaneState = {
      version: 1,
      server: this.server,
      kubeconfigPath: this.kubeconfigPath,
      caCertPath: this.layout.caCertPath,
      caKeyPath: this.layout.caKeyPath,
      adminCertPath: this.layout.adminCertPath,
      adminKeyPath: this.layout.adminKeyPath,
      etcdEndpoint: this.etcdEndpoint,
      dir: this.dir,
      ownerPid: process.pid,
    }
    await writeFile(path, JSON.stringify(state, null, 2), { mode: 0o600 })
  }

  async stop(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    this.guard.disarm()
    this.closeClients()
    // API server first so it does not spin on a vanished etcd.
    await this.stopProcesses()
    await rm(this.dir, { recursive: true, force: true })
    releaseDirAtExit(this.dir)
  }

  /** Print the log tails to stderr and build the error to throw. */
  startupError(what: string, culprit: ManagedProcess): Error {
    const exit = culprit.exit
    const status = exit ? ` (exit ${exit.signal ?? exit.code})` : ''
    const parts = [`crd-migrator devenv: ${what}${status}`]
    for (const p of [this.etcd, this.apiserver]) {
      if (!p) continue
      parts.push(`---- last 50 lines of ${p.name} log (${p.logFile}) ----`, p.tail(50))
    }
    process.stderr.write(`${parts.join('\n')}\n`)
    return new Error(`${what}${status}; the last lines of the etcd and kube-apiserver logs were printed to stderr`)
  }

  private assertLive(): void {
    if (this.stopped) throw new Error('control plane was stopped')
  }
}

class AttachedControlPlane extends ControlPlaneBase {
  readonly owned = false

  constructor(
    private readonly state: ControlPlaneState,
    ca: CertKeyPair,
    admin: CertKeyPair,
    usersDir: string,
  ) {
    super(state.dir, state.server, state.etcdEndpoint, state.kubeconfigPath, ca, admin, usersDir)
  }

  async writeStateFile(path: string): Promise<void> {
    await writeFile(path, JSON.stringify(this.state, null, 2), { mode: 0o600 })
  }

  private notOwned(): Promise<never> {
    return Promise.reject(
      new Error(
        'this control plane is shared (attached from a state file); start a private one with startControlPlane() to stop or restart its processes',
      ),
    )
  }

  restartApiserver(): Promise<void> {
    return this.notOwned()
  }
  stopApiserver(): Promise<void> {
    return this.notOwned()
  }
  startApiserver(): Promise<void> {
    return this.notOwned()
  }
  stopEtcd(): Promise<void> {
    return this.notOwned()
  }
  startEtcd(): Promise<void> {
    return this.notOwned()
  }

  async stop(): Promise<void> {
    this.closeClients()
    await rm(this.usersDir, { recursive: true, force: true })
    releaseDirAtExit(this.usersDir)
  }
}

/**
 * Start etcd and kube-apiserver on free loopback ports in a fresh temp dir, wait for
 * `/readyz`, and write an admin kubeconfig. The processes are killed if this process exits.
 */
export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const t0 = Date.now()
  const log = opts.log ?? (() => {})
  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000
  const bins = await ensureBinaries()
  const binariesMs = Date.now() - t0

  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-cp-'))
  removeDirAtExit(dir)
  const guard = startGuard(dir)
  const layout: OwnedLayout = {
    dir,
    runDir: join(dir, 'run'),
    etcdDataDir: join(dir, 'etcd-data'),
    certDir: join(dir, 'pki'),
    etcdLog: join(dir, 'etcd.log'),
    apiserverLog: join(dir, 'kube-apiserver.log'),
    caCertPath: join(dir, 'pki', 'ca.crt'),
    caKeyPath: join(dir, 'pki', 'ca.key'),
    adminCertPath: join(dir, 'pki', 'admin.crt'),
    adminKeyPath: join(dir, 'pki', 'admin.key'),
  }
  await Promise.all([mkdir(layout.runDir), mkdir(layout.certDir, { mode: 0o700 })])

  const [etcdClientPort, etcdPeerPort, securePort] = (await freePorts(3)) as [number, number, number]
  const etcdEndpoint = `http://127.0.0.1:${etcdClientPort}`
  const etcdPeer = `http://127.0.0.1:${etcdPeerPort}`
  const server = `https://127.0.0.1:${securePort}`

  const etcdFlags = merge(
    {
      name: 'default',
      'data-dir': layout.etcdDataDir,
      'listen-client-urls': etcdEndpoint,
      'advertise-client-urls': etcdEndpoint,
      'listen-peer-urls': etcdPeer,
      'initial-advertise-peer-urls': etcdPeer,
      'initial-cluster': `default=${etcdPeer}`,
      // Throw-away data: skip fsync (envtest does the same).
      'unsafe-no-fsync': 'true',
    },
    opts.extraEtcdFlags,
  )

  const paths = {
    servingCert: join(layout.certDir, 'apiserver.crt'),
    servingKey: join(layout.certDir, 'apiserver.key'),
    saKey: join(layout.certDir, 'sa.key'),
    saPub: join(layout.certDir, 'sa.pub'),
  }
  const apiserverFlags = merge(
    {
      'etcd-servers': etcdEndpoint,
      'cert-dir': layout.certDir,
      'tls-cert-file': paths.servingCert,
      'tls-private-key-file': paths.servingKey,
      'client-ca-file': layout.caCertPath,
      'authorization-mode': 'RBAC',
      'service-account-issuer': 'https://kubernetes.default.svc',
      'service-account-key-file': paths.saPub,
      'service-account-signing-key-file': paths.saKey,
      // No controller-manager creates default ServiceAccounts here (as in envtest).
      'disable-admission-plugins': 'ServiceAccount',
      'bind-address': '127.0.0.1',
      'advertise-address': '127.0.0.1',
      'secure-port': String(securePort),
      'service-cluster-ip-range': '10.0.0.0/24',
      'allow-privileged': 'true',
    },
    opts.extraApiserverFlags,
  )

  const cp = new OwnedControlPlane(
    bins,
    layout,
    etcdFlags,
    apiserverFlags,
    server,
    etcdEndpoint,
    join(dir, 'admin.kubeconfig'),
    // filled in below, once generated (etcd starts in parallel)
    { certPem: '', keyPem: '' },
    { certPem: '', keyPem: '' },
    guard,
    readyTimeoutMs,
  )

  try {
    log(`starting etcd on ${etcdEndpoint}`)
    // etcd needs no PKI; generate it while etcd boots.
    const etcdReady = cp.startEtcd().then(() => Date.now() - t0)
    const pki = (async () => {
      const ca = await createCa()
      const [serving, admin, sa] = await Promise.all([
        issueServingCert(ca, {
          dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
          ips: ['127.0.0.1', '::1'],
        }),
        issueClientCert(ca, ADMIN.name, ADMIN.groups),
        createServiceAccountKeyPair(),
      ])
      const w = (p: string, s: string): Promise<void> => writeFile(p, s, { mode: 0o600 })
      await Promise.all([
        w(layout.caCertPath, ca.certPem),
        w(layout.caKeyPath, ca.keyPem),
        w(layout.adminCertPath, admin.certPem),
        w(layout.adminKeyPath, admin.keyPem),
        w(paths.servingCert, serving.certPem),
        w(paths.servingKey, serving.keyPem),
        w(paths.saKey, sa.privateKeyPem),
        w(paths.saPub, sa.publicKeyPem),
        writeKubeconfig(cp.kubeconfigPath, { server, caPem: ca.certPem, user: ADMIN.name, ...admin }),
      ])
      cp.setCredentials(ca, admin)
    })()
    const [etcdReadyMs] = await Promise.all([etcdReady, pki])
    log(`etcd healthy after ${etcdReadyMs}ms; starting kube-apiserver on ${server}`)
    await cp.startApiserver()
    cp.timings = { binariesMs, etcdReadyMs, readyMs: Date.now() - t0 }
    log(`kube-apiserver ready after ${cp.timings.readyMs}ms`)
    return cp
  } catch (err) {
    const keep = opts.keepDirOnFailure ?? process.env['CRD_MIGRATOR_KEEP_FAILED'] === '1'
    if (keep) {
      releaseDirAtExit(dir)
      guard.disarm()
      await cp.stopProcesses()
      process.stderr.write(`crd-migrator devenv: kept ${dir} for inspection\n`)
    } else {
      await cp.stop().catch(() => {})
    }
    throw err
  }
}

/** Attach to a control plane another process started (see {@link ControlPlane.writeStateFile}). */
export async function attachControlPlane(stateFile: string): Promise<ControlPlane> {
  const state = JSON.parse(await readFile(stateFile, 'utf8')) as ControlPlaneState
  if (state.version !== 1) throw new Error(`${stateFile}: unsupported control-plane state version ${String(state.version)}`)
  const [caCert, caKey, adminCert, adminKey] = await Promise.all(
    [state.caCertPath, state.caKeyPath, state.adminCertPath, state.adminKeyPath].map((p) => readFile(p, 'utf8')),
  )
  const usersDir = join(tmpdir(), `crd-migrator-users-${process.pid}-${randomBytes(4).toString('hex')}`)
  removeDirAtExit(usersDir)
  return new AttachedControlPlane(state, { certPem: caCert!, keyPem: caKey! }, { certPem: adminCert!, keyPem: adminKey! }, usersDir)
}
