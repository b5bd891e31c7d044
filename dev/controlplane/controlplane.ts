/**
 * An envtest-like local control plane: a real etcd and a real kube-apiserver on loopback,
 * with a throw-away PKI, client-certificate authentication and RBAC.
 *
 *   const cp = await startControlPlane()
 *   // cp.kubeconfigPath (admin, group system:masters), cp.mintUser('alice', ['devs']),
 *   // cp.storedApiVersion(group, plural, ns, name) reads the raw object from etcd
 *   await cp.stop()
 *
 * `startControlPlane({ apiservers: 3 })` starts three kube-apiservers on the one etcd, as in
 * an HA cluster: each on its own address 198.18.R.i (see loopback.ts; needs root), all on
 * the same port, each in its own UTS namespace with hostname `kube-apiserver-<i>` (so each
 * has its own identity lease), each publishing itself in the `default/kubernetes`
 * EndpointSlice. Those addresses exist only in a network namespace of the harness, so the
 * calling process must run in one (`await runInNetworkNamespace()` first, see netns.ts; a
 * test file imports test/helpers/network-namespace.ts first): etcd, the servers and
 * whatever the caller starts are in there with it, and the host's network is untouched.
 * `cp.apiservers` lists them (1-based `index`); `cp.server` and `cp.kubeconfigPath` are the
 * first one's. With one server (the default) it listens on 127.0.0.1 (of whichever namespace
 * the caller is in) and is not published there (the API server refuses loopback endpoints).
 *
 * One process can own a control plane and share it: `cp.writeStateFile(path)`, then any
 * other process `attachControlPlane(path)` gets the same interface without owning the
 * processes (scripts/test.mjs does this for the whole test run).
 */
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { get as httpsGet } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { KubeHttp, type KubeRequest } from '../../src/kube/http.js'
import { ensureBinaries, type ControlPlaneBinaries } from './binaries.js'
import { customResourceKey, etcdGet, etcdHealthy, etcdListKeys } from './etcd.js'
import { renderKubeconfig, writeKubeconfig } from './kubeconfig.js'
import { createCa, createServiceAccountKeyPair, issueClientCert, issueServingCert, type CertKeyPair } from './pki.js'
import { claimLoopbackAddresses, releaseLoopbackAddresses, utsNamespacesWork } from './loopback.js'
import { currentNetworkNamespace } from './netns.js'
import { freePorts } from './ports.js'
import { ManagedProcess, releaseDirAtExit, removeDirAtExit, startGuard, type Guard } from './process.js'

export { ensureBinaries, type ControlPlaneBinaries } from './binaries.js'

/** Flag name (without leading dashes) -> value; `null` removes a default flag. */
export type FlagOverrides = Record<string, string | null>

export interface ControlPlaneOptions {
  /**
   * How many kube-apiservers share the etcd. Default 1: one server on 127.0.0.1. More than
   * one: only in a network namespace of the harness (see netns.ts: the start fails
   * elsewhere), server i on 198.18.R.i (a free /24 of 198.18.0.0/15 added to that
   * namespace's `lo`, which needs CAP_NET_ADMIN), all on one port, each in its own UTS
   * namespace (hostname `kube-apiserver-<i>`); ready once each answers /readyz and the
   * `default/kubernetes` EndpointSlice lists them all.
   */
  apiservers?: number
  /**
   * Also run kube-controller-manager with the garbage collector and the built-in storage
   * version migrator (KEP-4192), as user `system:kube-controller-manager` with one
   * ServiceAccount per controller (`--use-service-account-credentials`, as kubeadm runs it),
   * so the migrator's writes come from `system:serviceaccount:kube-system:storage-version-migrator-controller`.
   * Before Kubernetes 1.37 the feature gate and the `storagemigration.k8s.io/v1beta1` API are
   * switched on for it. Default off: most tests need no controllers.
   */
  controllerManager?: boolean
  /** Merged over the default kube-apiserver flags (of every server). */
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
  /** Index (1-based) of the API server to ask; default the first. */
  apiserver?: number
  method?: KubeRequest['method']
  body?: unknown
  contentType?: string
  /** Credentials to use instead of the admin's. */
  as?: { certPem: string; keyPem: string }
  timeoutMs?: number
}

/** One kube-apiserver of a control plane. */
export interface ApiserverEndpoint {
  /** 1-based; server i of several listens on 198.18.R.i and has hostname `kube-apiserver-<i>`. */
  index: number
  /** `https://<address>:<port>` (every server has the same port). */
  server: string
  /** The IP it binds to and advertises: 127.0.0.1 for a single server, else 198.18.R.<index>. */
  address: string
  /** Admin kubeconfig talking to this server only; the first server's is {@link ControlPlane.kubeconfigPath}. */
  kubeconfigPath: string
}

/** JSON written by {@link ControlPlane.writeStateFile}, read by {@link attachControlPlane}. */
export interface ControlPlaneState {
  version: 1
  server: string
  kubeconfigPath: string
  /** Every API server (absent in state files of older harnesses: then the one at `server`). */
  apiservers?: ApiserverEndpoint[]
  /** The harness network namespace it runs in (see {@link ControlPlane.networkNamespace}). */
  networkNamespace?: string
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

/** Which API server(s) to act on. */
export interface ApiserverSelector {
  /** 1-based index into {@link ControlPlane.apiservers}; default every server. */
  index?: number
}

export type StopApiserverOptions = StopOptions & ApiserverSelector

export interface StartApiserverOptions extends ApiserverSelector {
  /** Replaces the flag overrides of the selected server(s), kept for later restarts. */
  extraApiserverFlags?: FlagOverrides
}

export interface StartupTimings {
  /** Binaries located (or built). */
  binariesMs: number
  /** etcd healthy, measured from the start of startControlPlane. */
  etcdReadyMs: number
  /** Every kube-apiserver's /readyz OK (and, with several, all listed in the `default/kubernetes` EndpointSlice), from the start of startControlPlane. */
  readyMs: number
  /** With several servers: each server's /readyz OK, from the start of startControlPlane. */
  apiserverReadyMs?: number[]
}

export interface LogFiles {
  etcd: string
  apiserver: string
  apiservers: string[]
  /** Set when started with `controllerManager`. */
  controllerManager?: string
}

export interface ControlPlane {
  /** True when this process started (and will stop) the processes. */
  readonly owned: boolean
  readonly dir: string
  /** Admin kubeconfig (user `admin`, group `system:masters`) of the first API server. */
  readonly kubeconfigPath: string
  /** The first API server: `https://127.0.0.1:<port>`, or `https://198.18.R.1:<port>` with several. */
  readonly server: string
  /** Every API server, in index order (one entry unless started with `apiservers`). */
  readonly apiservers: readonly ApiserverEndpoint[]
  /**
   * The harness network namespace (netns.ts) its processes run in, and its addresses exist
   * in: always set with several API servers; undefined when started in the host's.
   */
  readonly networkNamespace: string | undefined
  readonly caPem: string
  readonly adminUser: { name: string; groups: string[] }
  /** `http://127.0.0.1:<port>` */
  readonly etcdEndpoint: string
  /** Only set on the owner. */
  readonly timings: StartupTimings | undefined
  /** Only set on the owner. `apiserver` is the first server's log, `apiservers` every server's in index order. */
  readonly logFiles: LogFiles | undefined

  /** A client certificate for `name` in `groups`, and a kubeconfig using it. */
  mintUser(name: string, groups?: readonly string[]): Promise<UserCredentials>
  /** Raw stored bytes of an etcd key, or null. */
  readEtcdKey(key: string): Promise<Buffer | null>
  /** apiVersion a custom resource is stored in (from etcd), or null when not stored. */
  storedApiVersion(group: string, plural: string, namespace: string | undefined, name: string): Promise<string | null>
  listEtcdKeys(prefix: string): Promise<string[]>
  /** A request to the (first, or `apiserver`) API server through KubeHttp, as admin unless `as` is given. Never throws on HTTP status. */
  apiRequest(path: string, opts?: ApiRequestOptions): Promise<ApiResponse>
  writeStateFile(path: string): Promise<void>

  /**
   * Owner only: stop kube-apiserver (SIGTERM) and start it again with the same (or overridden)
   * flags; waits for /readyz. Every server unless `index` is given.
   */
  restartApiserver(opts?: StartApiserverOptions): Promise<void>
  /** Owner only: SIGTERM, SIGKILL after `graceMs` (default 10s; 0 = SIGKILL at once). Every server unless `index` is given. */
  stopApiserver(opts?: StopApiserverOptions): Promise<void>
  /**
   * Owner only: start a stopped kube-apiserver and wait for /readyz (with several servers, also
   * until the `default/kubernetes` EndpointSlice lists it). Every stopped server unless `index` is given.
   */
  startApiserver(opts?: StartApiserverOptions): Promise<void>
  /**
   * Owner only: SIGSTOP API server `index` (1-based). It keeps its port, so connections are
   * accepted by the kernel, but nothing is answered (requests time out), like a hung server.
   */
  pauseApiserver(index: number): Promise<void>
  /** Owner only: SIGCONT API server `index` after {@link pauseApiserver}. */
  resumeApiserver(index: number): Promise<void>
  /** Owner only (started with `controllerManager`): stop kube-controller-manager (SIGTERM; `graceMs` as for the API server). */
  stopControllerManager(opts?: StopOptions): Promise<void>
  /** Owner only (started with `controllerManager`): start it again and wait for its /healthz. */
  startControllerManager(): Promise<void>
  /** Owner only: SIGSTOP kube-controller-manager, freezing whatever it is doing (a migration mid-run). */
  pauseControllerManager(): Promise<void>
  /** Owner only: SIGCONT it after {@link pauseControllerManager}. */
  resumeControllerManager(): Promise<void>
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
  abstract readonly networkNamespace: string | undefined
  readonly adminUser = { name: ADMIN.name, groups: [...ADMIN.groups] }
  readonly server: string
  readonly kubeconfigPath: string
  timings: StartupTimings | undefined
  logFiles: LogFiles | undefined
  private userSeq = 0
  /** One client per API server and set of credentials (by certificate), made on first use. */
  private readonly clients = new Map<string, KubeHttp>()

  protected constructor(
    readonly dir: string,
    readonly apiservers: readonly ApiserverEndpoint[],
    readonly etcdEndpoint: string,
    protected ca: CertKeyPair,
    protected admin: CertKeyPair,
    protected readonly usersDir: string,
  ) {
    const first = apiservers[0]
    if (!first) throw new Error('a control plane has at least one API server')
    this.server = first.server
    this.kubeconfigPath = first.kubeconfigPath
  }

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
    const target = this.apiserverAt(opts.apiserver ?? this.apiservers[0]!.index)
    const res = await this.clientFor(opts.as ?? this.admin, target).requestRaw({
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

  protected apiserverAt(index: number): ApiserverEndpoint {
    const found = this.apiservers.find((a) => a.index === index)
    if (!found) {
      throw new Error(`no API server ${index}: this control plane has ${this.apiservers.map((a) => a.index).join(', ')}`)
    }
    return found
  }

  /** A KubeHttp for a client certificate of this control plane's CA, from an in-memory kubeconfig. */
  private clientFor(cred: { certPem: string; keyPem: string }, target: ApiserverEndpoint): KubeHttp {
    const key = `${target.server}\n${cred.certPem}`
    let http = this.clients.get(key)
    if (!http) {
      const kc = new KubeConfig()
      kc.loadFromString(renderKubeconfig({ server: target.server, caPem: this.ca.certPem, user: 'user', ...cred }))
      http = new KubeHttp(kc, { maxSockets: 16 })
      this.clients.set(key, http)
    }
    return http
  }

  /** Drops pooled connections, to the given servers or to all (after an API server stop, and on stop). */
  protected closeClients(servers?: readonly string[]): void {
    for (const [key, http] of this.clients) {
      if (servers && !servers.some((s) => key.startsWith(`${s}\n`))) continue
      http.close()
      this.clients.delete(key)
    }
  }

  abstract writeStateFile(path: string): Promise<void>
  abstract restartApiserver(opts?: StartApiserverOptions): Promise<void>
  abstract stopApiserver(opts?: StopApiserverOptions): Promise<void>
  abstract startApiserver(opts?: StartApiserverOptions): Promise<void>
  abstract pauseApiserver(index: number): Promise<void>
  abstract resumeApiserver(index: number): Promise<void>
  abstract stopEtcd(opts?: StopOptions): Promise<void>
  abstract startEtcd(): Promise<void>
  abstract stopControllerManager(opts?: StopOptions): Promise<void>
  abstract startControllerManager(): Promise<void>
  abstract pauseControllerManager(): Promise<void>
  abstract resumeControllerManager(): Promise<void>
  abstract stop(): Promise<void>
}

interface OwnedLayout {
  dir: string
  runDir: string
  etcdDataDir: string
  certDir: string
  etcdLog: string
  caCertPath: string
  caKeyPath: string
  adminCertPath: string
  adminKeyPath: string
}

/** One kube-apiserver of an owned control plane. */
interface ApiserverSlot {
  endpoint: ApiserverEndpoint
  /** In messages, and the stem of its log and pid files: `kube-apiserver` alone, `kube-apiserver-<i>` of several. */
  name: string
  /** Several servers: each runs in its own UTS namespace with this hostname (its identity lease is named after it). */
  hostname: string | undefined
  flags: Record<string, string>
  logFile: string
  pidFile: string
  overrides: FlagOverrides | undefined
  process: ManagedProcess | undefined
  /** When /readyz last answered 200 after a start (epoch ms). */
  readyAt: number | undefined
}

/** The `default/kubernetes` EndpointSlices: every API server (not on a loopback address) publishes itself there. */
export const KUBERNETES_ENDPOINTSLICES =
  '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes'

interface EndpointSliceList {
  items?: Array<{ endpoints?: Array<{ addresses?: string[] }>; ports?: Array<{ name?: string; port?: number }> }>
}

/** Addresses of the slices that serve `port` (the API servers' secure port), sorted. */
function publishedAddresses(list: EndpointSliceList, port: number): string[] {
  const out = new Set<string>()
  for (const slice of list.items ?? []) {
    if (!(slice.ports ?? []).some((p) => p.port === port)) continue
    for (const e of slice.endpoints ?? []) for (const a of e.addresses ?? []) out.add(a)
  }
  return [...out].sort()
}

/** kube-controller-manager of an owned control plane (see {@link ControlPlaneOptions.controllerManager}). */
interface ControllerManagerSlot {
  flags: Record<string, string>
  env: NodeJS.ProcessEnv
  /** Its secure port on 127.0.0.1 (/healthz). */
  port: number
  logFile: string
  pidFile: string
  process: ManagedProcess | undefined
}

const KCM_CONTROLLERS = ['garbage-collector-controller', 'storage-version-migrator-controller']

/** Flags, and the apiserver flags they need, for kube-controller-manager running the built-in storage version migrator. */
function controllerManagerFlags(
  kubeMinor: number | undefined,
  kubeconfig: string,
  port: number,
  certDir: string,
): { flags: Record<string, string>; env: NodeJS.ProcessEnv; apiserverFlags: Record<string, string> } {
  const flags: Record<string, string> = {
    kubeconfig,
    'bind-address': '127.0.0.1',
    'secure-port': String(port),
    'cert-dir': certDir,
    controllers: KCM_CONTROLLERS.join(','),
    'use-service-account-credentials': 'true',
    'leader-elect': 'false',
  }
  // GA and on by default from 1.37; beta (off) in 1.35-1.36, alpha (v1alpha1) before.
  if (kubeMinor !== undefined && kubeMinor < 37) {
    flags['feature-gates'] = 'StorageVersionMigrator=true'
    const api = kubeMinor < 35 ? 'storagemigration.k8s.io/v1alpha1' : 'storagemigration.k8s.io/v1beta1'
    return {
      flags,
      env: { ...process.env, KUBE_FEATURE_InformerResourceVersion: 'true', KUBE_FEATURE_InOrderInformers: 'true' },
      apiserverFlags: { 'feature-gates': 'StorageVersionMigrator=true', 'runtime-config': `${api}=true` },
    }
  }
  return { flags, env: process.env, apiserverFlags: {} }
}

/** Whether an HTTPS /healthz answers 200 (the controller manager's self-signed serving certificate is not checked). */
function httpsHealthy(url: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpsGet(url, { rejectUnauthorized: false, timeout: timeoutMs }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
  })
}

class OwnedControlPlane extends ControlPlaneBase {
  readonly owned = true
  readonly networkNamespace = currentNetworkNamespace()
  private etcd: ManagedProcess | undefined
  private kcm: ControllerManagerSlot | undefined
  private stopped = false

  constructor(
    private readonly bins: ControlPlaneBinaries,
    private readonly layout: OwnedLayout,
    private readonly etcdFlags: Record<string, string>,
    private readonly slots: readonly ApiserverSlot[],
    /** Added to the network namespace's `lo` for several servers; removed on stop. */
    private readonly loopbackAddresses: readonly string[],
    etcdEndpoint: string,
    ca: CertKeyPair,
    admin: CertKeyPair,
    private readonly guard: Guard,
    private readonly readyTimeoutMs: number,
  ) {
    super(
      layout.dir,
      slots.map((s) => s.endpoint),
      etcdEndpoint,
      ca,
      admin,
      join(layout.dir, 'users'),
    )
    this.logFiles = { etcd: layout.etcdLog, apiserver: slots[0]!.logFile, apiservers: slots.map((s) => s.logFile) }
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

  /** Before the first start: what to run (see {@link controllerManagerFlags}). */
  setControllerManager(slot: ControllerManagerSlot): void {
    this.kcm = slot
    this.logFiles = { ...this.logFiles!, controllerManager: slot.logFile }
  }

  async startControllerManager(): Promise<void> {
    this.assertLive()
    const kcm = this.kcm
    if (!kcm) throw new Error('this control plane was started without controllerManager: true')
    if (kcm.process?.running) return
    const command = this.bins.kubeControllerManager
    if (!command) {
      throw new Error(
        `kube-controller-manager is not in ${this.bins.binDir}; scripts/build-controlplane.sh builds it next to kube-apiserver`,
      )
    }
    kcm.process = ManagedProcess.start({
      name: 'kube-controller-manager',
      command,
      args: toArgs(kcm.flags),
      env: kcm.env,
      logFile: kcm.logFile,
      pidFile: kcm.pidFile,
    })
    const deadline = Date.now() + this.readyTimeoutMs
    for (;;) {
      if (!kcm.process.running) throw this.startupError('kube-controller-manager exited during startup', kcm.process)
      if (await httpsHealthy(`https://127.0.0.1:${kcm.port}/healthz`, 1_000)) return
      if (Date.now() > deadline) throw this.startupError(`kube-controller-manager not healthy after ${this.readyTimeoutMs}ms`, kcm.process)
      await sleep(POLL_MS)
    }
  }

  async stopControllerManager(opts: StopOptions = {}): Promise<void> {
    await this.kcm?.process?.stop(opts.graceMs)
  }

  async pauseControllerManager(): Promise<void> {
    this.assertLive()
    if (!this.kcm?.process?.running) throw new Error('kube-controller-manager is not running')
    this.kcm.process.pause()
  }

  async resumeControllerManager(): Promise<void> {
    this.assertLive()
    this.kcm?.process?.resume()
  }

  async startApiserver(opts: StartApiserverOptions = {}): Promise<void> {
    this.assertLive()
    const slots = this.select(opts.index).filter((s) => !s.process?.running)
    if (slots.length === 0) return
    for (const slot of slots) {
      if (opts.extraApiserverFlags) slot.overrides = opts.extraApiserverFlags
      this.spawnApiserver(slot)
    }
    const deadline = Date.now() + this.readyTimeoutMs
    // The first failure is reported; the other waits then end quietly.
    const failed = { value: false }
    await Promise.all(
      slots.map((s) =>
        this.waitReady(s, deadline, failed).catch((err: unknown) => {
          failed.value = true
          throw err
        }),
      ),
    )
    // Unless told not to publish themselves (`endpoint-reconciler-type: none`).
    const published = slots.filter((s) => merge(s.flags, s.overrides)['endpoint-reconciler-type'] !== 'none')
    if (this.slots.length > 1 && published.length > 0) await this.waitPublished(published, deadline)
  }

  async stopApiserver(opts: StopApiserverOptions = {}): Promise<void> {
    const slots = this.select(opts.index)
    await Promise.all(slots.map(async (s) => s.process?.stop(opts.graceMs)))
    // Pooled keep-alive connections went with it; the next request opens a fresh one.
    this.closeClients(slots.map((s) => s.endpoint.server))
  }

  async restartApiserver(opts: StartApiserverOptions = {}): Promise<void> {
    await this.stopApiserver(opts.index === undefined ? {} : { index: opts.index })
    await this.startApiserver(opts)
  }

  async pauseApiserver(index: number): Promise<void> {
    this.assertLive()
    const [slot] = this.select(index)
    if (!slot?.process?.running) throw new Error(`${slot?.name ?? index} is not running`)
    slot.process.pause()
  }

  async resumeApiserver(index: number): Promise<void> {
    this.assertLive()
    const [slot] = this.select(index)
    slot?.process?.resume()
  }

  /** Epoch ms at which each server last became ready, in index order. */
  apiserverReadyAt(): Array<number | undefined> {
    return this.slots.map((s) => s.readyAt)
  }

  /** The PKI is generated while etcd starts, so it arrives after construction. */
  setCredentials(ca: CertKeyPair, admin: CertKeyPair): void {
    this.ca = ca
    this.admin = admin
  }

  /** Stop every process, leave the temp dir and the loopback addresses alone. */
  async stopProcesses(): Promise<void> {
    await this.kcm?.process?.stop()
    await Promise.all(this.slots.map(async (s) => s.process?.stop()))
    await this.etcd?.stop()
  }

  /** Remove the addresses of several servers from the namespace's `lo` (at exit they go with the namespace). */
  async releaseAddresses(): Promise<void> {
    await releaseLoopbackAddresses(this.loopbackAddresses)
  }

  async writeStateFile(path: string): Promise<void> {
    const state: ControlPlaneState = {
      version: 1,
      server: this.server,
      kubeconfigPath: this.kubeconfigPath,
      apiservers: this.apiservers.map((a) => ({ ...a })),
      ...(this.networkNamespace ? { networkNamespace: this.networkNamespace } : {}),
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
    // API servers first so they do not spin on a vanished etcd.
    await this.stopProcesses()
    await this.releaseAddresses()
    await rm(this.dir, { recursive: true, force: true })
    releaseDirAtExit(this.dir)
  }

  /** Print the log tails to stderr and build the error to throw. */
  startupError(what: string, culprit: ManagedProcess): Error {
    const exit = culprit.exit
    const status = exit ? ` (exit ${exit.signal ?? exit.code})` : ''
    const parts = [`crd-migrator devenv: ${what}${status}`]
    // etcd and the culprit; when etcd is the culprit, etcd and every API server.
    const shown = culprit === this.etcd ? [this.etcd, ...this.slots.map((s) => s.process)] : [this.etcd, culprit]
    for (const p of shown) {
      if (!p) continue
      parts.push(`---- last 50 lines of ${p.name} log (${p.logFile}) ----`, p.tail(50))
    }
    process.stderr.write(`${parts.join('\n')}\n`)
    return new Error(`${what}${status}; the last lines of the etcd and kube-apiserver logs were printed to stderr`)
  }

  private select(index: number | undefined): ApiserverSlot[] {
    if (index === undefined) return [...this.slots]
    const slot = this.slots.find((s) => s.endpoint.index === index)
    if (!slot) throw new Error(`no API server ${index}: this control plane has ${this.slots.map((s) => s.endpoint.index).join(', ')}`)
    return [slot]
  }

  private spawnApiserver(slot: ApiserverSlot): void {
    const args = toArgs(merge(slot.flags, slot.overrides))
    slot.readyAt = undefined
    slot.process = ManagedProcess.start({
      name: slot.name,
      ...(slot.hostname === undefined
        ? { command: this.bins.kubeApiserver, args }
        : {
            // Own UTS namespace and hostname; `exec` keeps the pid, so signals reach kube-apiserver itself.
            command: 'unshare',
            args: ['--uts', 'sh', '-c', 'hostname "$1" && shift && exec "$@"', 'sh', slot.hostname, this.bins.kubeApiserver, ...args],
          }),
      logFile: slot.logFile,
      pidFile: slot.pidFile,
    })
  }

  private async waitReady(slot: ApiserverSlot, deadline: number, failed: { value: boolean }): Promise<void> {
    const proc = slot.process!
    let last: string
    for (;;) {
      this.assertLive()
      if (failed.value) throw new Error(`stopped waiting for ${slot.name}: another API server failed to start`)
      if (!proc.running) throw this.startupError(`${slot.name} exited during startup`, proc)
      try {
        const res = await this.apiRequest('/readyz', { apiserver: slot.endpoint.index, timeoutMs: 2_000 })
        if (res.status === 200) {
          slot.readyAt = Date.now()
          return
        }
        last = `HTTP ${res.status}: ${res.body.slice(0, 300)}`
      } catch (err) {
        last = (err as Error).message
      }
      if (Date.now() > deadline) {
        throw this.startupError(`${slot.name} not ready after ${this.readyTimeoutMs}ms (last /readyz: ${last})`, proc)
      }
      await sleep(POLL_MS)
    }
  }

  /**
   * Wait until the `default/kubernetes` EndpointSlice lists the servers (each publishes itself
   * when it starts, through the lease endpoint reconciler), asking the first of them.
   */
  private async waitPublished(slots: readonly ApiserverSlot[], deadline: number): Promise<void> {
    const port = Number(new URL(this.server).port)
    const want = slots.map((s) => s.endpoint.address)
    let listed: string[] = []
    for (;;) {
      this.assertLive()
      try {
        const res = await this.apiRequest(KUBERNETES_ENDPOINTSLICES, { apiserver: slots[0]!.endpoint.index, timeoutMs: 2_000 })
        if (res.status === 200) listed = publishedAddresses(res.json as EndpointSliceList, port)
      } catch {
        // keep polling until the deadline
      }
      if (want.every((a) => listed.includes(a))) return
      if (Date.now() > deadline) {
        throw new Error(
          `the default/kubernetes EndpointSlice does not list ${want.filter((a) => !listed.includes(a)).join(', ')} ` +
            `after ${this.readyTimeoutMs}ms (it lists: ${listed.join(', ') || 'nothing'})`,
        )
      }
      await sleep(POLL_MS)
    }
  }

  private assertLive(): void {
    if (this.stopped) throw new Error('control plane was stopped')
  }
}

class AttachedControlPlane extends ControlPlaneBase {
  readonly owned = false
  readonly networkNamespace: string | undefined

  constructor(
    private readonly state: ControlPlaneState,
    ca: CertKeyPair,
    admin: CertKeyPair,
    usersDir: string,
  ) {
    super(
      state.dir,
      state.apiservers ?? [
        { index: 1, server: state.server, address: new URL(state.server).hostname, kubeconfigPath: state.kubeconfigPath },
      ],
      state.etcdEndpoint,
      ca,
      admin,
      usersDir,
    )
    this.networkNamespace = state.networkNamespace
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
  pauseApiserver(): Promise<void> {
    return this.notOwned()
  }
  resumeApiserver(): Promise<void> {
    return this.notOwned()
  }
  stopEtcd(): Promise<void> {
    return this.notOwned()
  }
  startEtcd(): Promise<void> {
    return this.notOwned()
  }
  stopControllerManager(): Promise<void> {
    return this.notOwned()
  }
  startControllerManager(): Promise<void> {
    return this.notOwned()
  }
  pauseControllerManager(): Promise<void> {
    return this.notOwned()
  }
  resumeControllerManager(): Promise<void> {
    return this.notOwned()
  }

  async stop(): Promise<void> {
    this.closeClients()
    await rm(this.usersDir, { recursive: true, force: true })
    releaseDirAtExit(this.usersDir)
  }
}

/** The default kube-apiserver flags of a server listening on `address`. */
function apiserverDefaults(
  address: string,
  securePort: number,
  etcdEndpoint: string,
  layout: OwnedLayout,
  paths: { servingCert: string; servingKey: string; saKey: string; saPub: string },
): Record<string, string> {
  return {
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
    'bind-address': address,
    'advertise-address': address,
    'secure-port': String(securePort),
    'service-cluster-ip-range': '10.0.0.0/24',
    'allow-privileged': 'true',
    // A loopback address cannot be published in the default/kubernetes EndpointSlice
    // (1.37 refuses to start with it; older servers skipped it): publish nothing then.
    ...(address.startsWith('127.') ? { 'endpoint-reconciler-type': 'none' } : {}),
  }
}

/**
 * Start etcd and kube-apiserver on free loopback ports in a fresh temp dir, wait for
 * `/readyz`, and write an admin kubeconfig. The processes are killed if this process exits.
 * With `apiservers` > 1, several kube-apiservers on their own local addresses (see
 * {@link ControlPlaneOptions.apiservers}).
 */
export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const t0 = Date.now()
  const log = opts.log ?? (() => {})
  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000
  const count = opts.apiservers ?? 1
  if (!Number.isInteger(count) || count < 1 || count > 254) {
    throw new Error(`apiservers must be a whole number from 1 to 254, not ${String(opts.apiservers)}`)
  }
  const several = count > 1
  if (several) {
    if (currentNetworkNamespace() === undefined) {
      throw new Error(
        'several API servers listen on addresses of their own, which exist only in a network namespace of the harness ' +
          '(the host keeps its network configuration): run in one first, `await runInNetworkNamespace()` from ' +
          'dev/controlplane/netns.ts at the top of the process (a test file imports test/helpers/network-namespace.ts first)',
      )
    }
    const uts = utsNamespacesWork()
    if (!uts.ok) {
      throw new Error(
        'several API servers run each in its own UTS namespace (`unshare --uts`, needs CAP_SYS_ADMIN) so that each has ' +
          `its own hostname and identity lease, and that failed here: ${uts.output || 'no output'}`,
      )
    }
  }
  const bins = await ensureBinaries()
  const binariesMs = Date.now() - t0
  if (opts.controllerManager && !bins.kubeControllerManager) {
    throw new Error(`controllerManager: kube-controller-manager is not in ${bins.binDir} (scripts/build-controlplane.sh builds it)`)
  }

  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-cp-'))
  removeDirAtExit(dir)
  const guard = startGuard(dir)
  const layout: OwnedLayout = {
    dir,
    runDir: join(dir, 'run'),
    etcdDataDir: join(dir, 'etcd-data'),
    certDir: join(dir, 'pki'),
    etcdLog: join(dir, 'etcd.log'),
    caCertPath: join(dir, 'pki', 'ca.crt'),
    caKeyPath: join(dir, 'pki', 'ca.key'),
    adminCertPath: join(dir, 'pki', 'admin.crt'),
    adminKeyPath: join(dir, 'pki', 'admin.key'),
  }
  await Promise.all([mkdir(layout.runDir), mkdir(layout.certDir, { mode: 0o700 })])

  let etcdClientPort: number
  let etcdPeerPort: number
  let securePort: number
  let addresses: string[]
  let loopbackAddresses: string[] = []
  if (!several) {
    ;[etcdClientPort, etcdPeerPort, securePort] = (await freePorts(3)) as [number, number, number]
    addresses = ['127.0.0.1']
  } else {
    try {
      ;[etcdClientPort, etcdPeerPort] = (await freePorts(2)) as [number, number]
      // On the namespace's lo, so they need no cleanup at exit: they go with the namespace.
      loopbackAddresses = await claimLoopbackAddresses(count)
      // The addresses are new, so a port free on the first is free on all of them (a wildcard listener would block every one).
      ;[securePort] = (await freePorts(1, loopbackAddresses[0])) as [number]
      addresses = loopbackAddresses
    } catch (err) {
      guard.disarm()
      await releaseLoopbackAddresses(loopbackAddresses)
      await rm(dir, { recursive: true, force: true })
      releaseDirAtExit(dir)
      throw err
    }
  }
  const etcdEndpoint = `http://127.0.0.1:${etcdClientPort}`
  const etcdPeer = `http://127.0.0.1:${etcdPeerPort}`

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
  const adminKubeconfig = join(dir, 'admin.kubeconfig')
  const kcmKubeconfig = join(dir, 'kube-controller-manager.kubeconfig')
  const kcm = opts.controllerManager
    ? controllerManagerFlags(bins.kubeMinor, kcmKubeconfig, (await freePorts(1))[0]!, join(dir, 'kcm-certs'))
    : undefined
  const slots: ApiserverSlot[] = addresses.map((address, i) => {
    const index = i + 1
    const name = several ? `kube-apiserver-${index}` : 'kube-apiserver'
    return {
      endpoint: {
        index,
        server: `https://${address}:${securePort}`,
        address,
        kubeconfigPath: index === 1 ? adminKubeconfig : join(dir, `admin-${name}.kubeconfig`),
      },
      name,
      hostname: several ? name : undefined,
      flags: merge(apiserverDefaults(address, securePort, etcdEndpoint, layout, paths), kcm?.apiserverFlags, opts.extraApiserverFlags),
      logFile: join(dir, `${name}.log`),
      pidFile: join(layout.runDir, `${name}.pid`),
      overrides: undefined,
      process: undefined,
      readyAt: undefined,
    }
  })
  const servers = slots.map((s) => s.endpoint.server)

  const cp = new OwnedControlPlane(
    bins,
    layout,
    etcdFlags,
    slots,
    loopbackAddresses,
    etcdEndpoint,
    // filled in below, once generated (etcd starts in parallel)
    { certPem: '', keyPem: '' },
    { certPem: '', keyPem: '' },
    guard,
    readyTimeoutMs,
  )
  if (kcm) {
    cp.setControllerManager({
      flags: kcm.flags,
      env: kcm.env,
      port: Number(kcm.flags['secure-port']),
      logFile: join(dir, 'kube-controller-manager.log'),
      pidFile: join(layout.runDir, 'kube-controller-manager.pid'),
      process: undefined,
    })
  }

  try {
    log(`starting etcd on ${etcdEndpoint}`)
    // etcd needs no PKI; generate it while etcd boots.
    const etcdReady = cp.startEtcd().then(() => Date.now() - t0)
    const pki = (async () => {
      const ca = await createCa()
      const [serving, admin, sa] = await Promise.all([
        issueServingCert(ca, {
          dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
          ips: ['127.0.0.1', '::1', ...loopbackAddresses],
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
        ...slots.map((s) =>
          writeKubeconfig(s.endpoint.kubeconfigPath, { server: s.endpoint.server, caPem: ca.certPem, user: ADMIN.name, ...admin }),
        ),
        // The controller manager's own identity (bootstrap RBAC binds system:kube-controller-manager to it).
        ...(kcm
          ? [
              issueClientCert(ca, 'system:kube-controller-manager', []).then((c) =>
                writeKubeconfig(kcmKubeconfig, { server: servers[0]!, caPem: ca.certPem, user: 'system:kube-controller-manager', ...c }),
              ),
            ]
          : []),
      ])
      cp.setCredentials(ca, admin)
    })()
    const [etcdReadyMs] = await Promise.all([etcdReady, pki])
    log(
      several
        ? `etcd healthy after ${etcdReadyMs}ms; starting ${count} kube-apiservers on ${servers.join(', ')}`
        : `etcd healthy after ${etcdReadyMs}ms; starting kube-apiserver on ${servers[0]}`,
    )
    await cp.startApiserver()
    if (kcm) {
      await cp.startControllerManager()
      log(`kube-controller-manager healthy after ${Date.now() - t0}ms (controllers: ${KCM_CONTROLLERS.join(', ')})`)
    }
    const readyMs = Date.now() - t0
    cp.timings = several
      ? { binariesMs, etcdReadyMs, readyMs, apiserverReadyMs: cp.apiserverReadyAt().map((at) => (at ?? t0) - t0) }
      : { binariesMs, etcdReadyMs, readyMs }
    log(
      several
        ? `${count} kube-apiservers ready after ${cp.timings.apiserverReadyMs!.join('/')}ms, all in the default/kubernetes EndpointSlice after ${readyMs}ms`
        : `kube-apiserver ready after ${readyMs}ms`,
    )
    return cp
  } catch (err) {
    const keep = opts.keepDirOnFailure ?? process.env['CRD_MIGRATOR_KEEP_FAILED'] === '1'
    if (keep) {
      releaseDirAtExit(dir)
      guard.disarm()
      await cp.stopProcesses()
      await cp.releaseAddresses()
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
  if (state.networkNamespace !== undefined && currentNetworkNamespace() !== state.networkNamespace) {
    throw new Error(
      `${stateFile}: this control plane runs in network namespace ${state.networkNamespace}, unreachable from this process ` +
        `(${currentNetworkNamespace() ?? "the host's namespace"}); attach from a process inside it (ip netns exec ${state.networkNamespace} ...)`,
    )
  }
  const [caCert, caKey, adminCert, adminKey] = await Promise.all(
    [state.caCertPath, state.caKeyPath, state.adminCertPath, state.adminKeyPath].map((p) => readFile(p, 'utf8')),
  )
  const usersDir = join(tmpdir(), `crd-migrator-users-${process.pid}-${randomBytes(4).toString('hex')}`)
  removeDirAtExit(usersDir)
  return new AttachedControlPlane(state, { certPem: caCert!, keyPem: caKey! }, { certPem: adminCert!, keyPem: adminKey! }, usersDir)
}
